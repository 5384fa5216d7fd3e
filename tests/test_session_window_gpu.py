"""Session windows on the GPU (run with `pytest -m gpu` on a GPU host): the lift, each batch's
sessions (`runtime/gpu/sessions.py`: the bucket table without a sort, or the device sort) and
their merge with the open sessions run on the device, against the oracle (random streams in
order and out of order, late rows, NULL keys, snapshots) and against the CPU (large batches
taking both forms, hot keys, many keys); a GPU snapshot restores on the CPU and back, byte
for byte where the aggregates are exact; the fuzzer's session cases run on the GPU."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from gpu_device import gpu_available  # noqa: E402

pytestmark = pytest.mark.gpu

if not gpu_available():
    pytest.skip("no CUDA device visible to CuPy", allow_module_level=True)

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from fuzz_cases import draw_case  # noqa: E402
from fuzzer import Scenario, check, engine_rows  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from oracle import rows_close  # noqa: E402
from plans import make_plan, oracle_for  # noqa: E402
from sqlglot import exp  # noqa: E402
from test_late_rows import check_window_late_rows  # noqa: E402
from test_session_window import run_both, session_streams  # noqa: E402
from test_window_properties import SETTINGS  # noqa: E402

from mangonel.catalog.types import SqlType as T  # noqa: E402
from mangonel.compiler import physical as ph  # noqa: E402
from mangonel.compiler.logical import AggregateFunction as F  # noqa: E402
from mangonel.runtime.gpu import sessions as gpu_sessions  # noqa: E402
from mangonel.runtime.gpu.kernels import GpuKernels  # noqa: E402
from mangonel.runtime.local.query import LocalQuery  # noqa: E402

STAMP = pa.timestamp("us", tz="UTC")
COLUMNS = [("ts", T.TIMESTAMP), ("k", T.BIGINT), ("s", T.STRING), ("x", T.DOUBLE), ("i", T.BIGINT)]
ALL = [
    (F.COUNT_STAR, None),
    (F.COUNT, exp.column("x")),
    (F.SUM, exp.column("x")),
    (F.SUM, exp.column("i")),
    (F.MIN, exp.column("x")),
    (F.MAX, exp.column("i")),
    (F.AVG, exp.column("x")),
    (F.STDDEV_SAMP, exp.column("x")),
]
EXACT = [  # integer state only: a snapshot's bytes do not depend on the order of combines
    (F.COUNT_STAR, None),
    (F.COUNT, exp.column("x")),
    (F.SUM, exp.column("i")),
    (F.MIN, exp.column("i")),
    (F.MAX, exp.column("i")),
]


def on_gpu(plan: ph.ProjectExec) -> ph.ProjectExec:
    return ph.with_backend(plan, "gpu", "test")


def _rows(batches: list[pa.RecordBatch]) -> list[dict]:
    return [row for b in batches for row in b.to_pylist()]


def session_batches(seed: int, rows: int, keys: int, spacing: int, disorder: int, batches: int):
    """Rows `spacing` us apart on average, shuffled by up to `disorder` us, keys uniform (key 0
    takes half the rows: a hot key), STRING keys beside them, NULLs in x."""
    rng = np.random.default_rng(seed)
    ts = np.arange(rows, dtype=np.int64) * spacing + rng.integers(0, disorder + 1, rows)
    k = np.where(rng.random(rows) < 0.5, 0, rng.integers(0, keys, rows))
    x = rng.normal(10, 5, rows)
    table = pa.table(
        {
            "ts": pa.array(ts).cast(STAMP),
            "k": pa.array(k),
            "s": pa.array([f"s{v % 97}" for v in k]),
            "x": pa.array(x, mask=rng.random(rows) < 0.05),
            "i": pa.array(rng.integers(-1000, 1000, rows)),
        }
    )
    step = -(-rows // batches)
    return [table.slice(a, step).to_batches()[0] for a in range(0, rows, step)]


@settings(max_examples=200, **SETTINGS)
@given(session_streams())
def test_random_streams_on_the_gpu_equal_the_oracle(case) -> None:  # noqa: ANN001
    plan, batches, snapshot_at = case
    run_both(on_gpu(plan), batches, snapshot_at)


@settings(max_examples=60, **SETTINGS)
@given(session_streams())
def test_random_streams_on_the_gpu_through_the_sort_equal_the_oracle(case) -> None:  # noqa: ANN001
    """The sorted form (a table never small enough) on the same streams."""
    plan, batches, snapshot_at = case
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gpu_sessions, "TABLE_CELLS_PER_ROW", 0)
        patch.setattr(gpu_sessions, "TABLE_MIN_CELLS", 0)
        run_both(on_gpu(plan), batches, snapshot_at)


@settings(max_examples=60, **SETTINGS)
@given(session_streams())
def test_gpu_session_late_rows_are_the_oracles(case) -> None:  # noqa: ANN001
    plan, batches, snapshot_at = case
    check_window_late_rows(on_gpu(plan), batches, snapshot_at)


@pytest.mark.parametrize(
    "gap, spacing, disorder, keys, form",
    [
        (5_000, 10, 0, 500, "table"),  # in order, long sessions (many rows per bucket)
        (5_000, 10, 25_000, 500, "table"),  # out of order by five gaps: sessions bridged
        (7, 10, 0, 2, "table"),  # in order, a session per row or two, one hot key
        (3, 10, 200_000, 500, "sort"),  # a short gap over a wide shuffled span: the sort
    ],
)
def test_large_batches_on_the_gpu_equal_the_cpu(gap, spacing, disorder, keys, form) -> None:
    plan = make_plan(
        COLUMNS, keys=["k", "s"], kind="session", size=gap, delay=2_000, aggregates=ALL
    )
    batches = session_batches(gap, 300_000, keys, spacing, disorder, 6)
    cpu, gpu = LocalQuery(plan), LocalQuery(on_gpu(plan))
    for position, batch in enumerate(batches):
        want, got = _rows(cpu.process(batch)), _rows(gpu.process(batch))
        assert rows_close(got, want), f"after batch {position}: {len(got)} rows, CPU {len(want)}"
    assert rows_close(_rows(gpu.finish()), _rows(cpu.finish()))
    assert gpu.metrics.late_tuples_dropped == cpu.metrics.late_tuples_dropped
    kernels = gpu.window_operator.session_kernels
    assert isinstance(kernels, GpuKernels)  # the sessions were formed on the device
    forms = (kernels.sessions.table_batches, kernels.sessions.sorted_batches)
    assert forms[0 if form == "table" else 1] == len(batches), forms


def test_a_gpu_snapshot_restores_on_the_cpu_and_back_byte_for_byte() -> None:
    """Integer aggregates (exact whatever the order of combines): after every batch the GPU's
    snapshot equals the CPU's byte for byte, and the query moves to the other backend (each
    restores the snapshot); results equal the oracle's throughout."""
    plan = make_plan(
        COLUMNS, keys=["s", "k"], kind="session", size=500, delay=3_000, aggregates=EXACT
    )
    batches = session_batches(3, 60_000, 300, 10, 4_000, 6)
    oracle, cpu, gpu = oracle_for(plan), LocalQuery(plan), LocalQuery(on_gpu(plan))
    for position, batch in enumerate(batches):
        got = engine_rows(gpu.process(batch))
        assert engine_rows(cpu.process(batch)) == got
        assert rows_close(got, oracle.process(batch)), f"batch {position}"
        saved = gpu.snapshot()
        assert saved == cpu.snapshot(), f"batch {position}: the backends' snapshots differ"
        # each backend continues from the other's snapshot
        cpu, gpu = LocalQuery(plan), LocalQuery(on_gpu(plan))
        cpu.restore(saved)
        gpu.restore(saved)
    final = engine_rows(gpu.finish())
    assert final == engine_rows(cpu.finish())
    assert rows_close(final, oracle.finish())
    assert gpu.metrics.late_tuples_dropped == oracle.late


# the fuzzer's session share (SESSION_SHARE of its cases) at fixed seeds; its random GPU run
# (`make fuzz BACKEND=gpu`) draws them too, now on the device
SESSION_SEEDS = [s for s in range(600) if draw_case(s, large_share=0.0).kind == "session"][:40]


@pytest.mark.parametrize("seed", SESSION_SEEDS)
def test_fuzzer_session_cases_on_the_gpu_match_the_oracle(seed: int) -> None:
    case = draw_case(seed, large_share=0.0)
    failure = check(Scenario.from_case(case), "gpu")
    assert failure is None, f"case seed {seed}: {failure}\n{case.describe()}"
