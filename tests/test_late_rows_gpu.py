"""Late rows as data on the GPU (`-m gpu`, needs a CUDA device): the fused kernel counts late
rows on the device and marks each one (`decided = 2`); the rows handed out from that verdict
equal the oracle's late rows (random time and count windows) and the CPU's (large batches
through the fused pass, many keys, out of order)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from gpu_device import gpu_available  # noqa: E402

pytestmark = pytest.mark.gpu

if not gpu_available():
    pytest.skip("no CUDA device visible to CuPy", allow_module_level=True)

from hypothesis import given, settings  # noqa: E402
from oracle import rows_of  # noqa: E402
from plans import make_plan  # noqa: E402
from test_gpu_backend import ALL, COLUMNS, on_gpu, random_batches  # noqa: E402
from test_late_rows import check_window_late_rows  # noqa: E402
from test_window_properties import SETTINGS, streams  # noqa: E402

from mangonel.runtime.local.query import LocalQuery  # noqa: E402


@settings(max_examples=60, **SETTINGS)
@given(streams("time"))
def test_gpu_time_window_late_rows_are_the_oracles(case) -> None:  # noqa: ANN001
    plan, batches, snapshot_at = case
    check_window_late_rows(on_gpu(plan), batches, snapshot_at)


@settings(max_examples=15, **SETTINGS)
@given(streams("count"))
def test_gpu_count_window_late_rows_are_the_oracles(case) -> None:  # noqa: ANN001
    plan, batches, snapshot_at = case
    check_window_late_rows(on_gpu(plan), batches, snapshot_at)


@pytest.mark.parametrize("window", [(1000, 1000), (1000, 100)])
def test_gpu_fused_pass_late_rows_equal_the_cpus(window) -> None:  # noqa: ANN001
    """Batches of 25 000 rows, 1000 keys, disorder of several windows: after the first batch
    every batch takes the fused pass (known keys, the newest segment), whose late verdict is
    the device's."""
    size, slide = window
    plan = make_plan(COLUMNS, keys=["k"], size=size, slide=slide, delay=0, aggregates=ALL)
    batches = random_batches(7, 200_000, 1000, 30_000, 8)
    cpu = LocalQuery(plan, keep_late_rows=True)
    gpu = LocalQuery(on_gpu(plan), keep_late_rows=True)
    for position, batch in enumerate(batches):
        cpu.process(batch)
        gpu.process(batch)
        want, got = rows_of(cpu.late_rows()), rows_of(gpu.late_rows())
        assert got == want, f"batch {position}: {len(got)} late rows, the CPU has {len(want)}"
    assert gpu.metrics.late_tuples_dropped == cpu.metrics.late_tuples_dropped > 0
    assert gpu.operator.kernels_of("gpu").metrics.fused_passes >= len(batches) - 1


@pytest.mark.parametrize("seed", [0, 1, 4, 5])
def test_gpu_factorised_join_late_rows_are_the_oracles(seed: int) -> None:
    """A GPU plan's factorised join: each side's window aggregation runs the fused kernel on
    the device, judged against the join's watermark; its per-row verdict gives the late rows."""
    from oracle_join import JoinOracle
    from test_join_factorised import arrivals, oracle_query, session, sql

    from mangonel.compiler import physical as ph

    cases = arrivals(seed, 0.0)
    plan = ph.with_backend(session().sql(sql(1000, 250)).plan, "gpu", "test")
    assert ph.find(plan, ph.JoinAggregateExec).factorised is not None
    oracle = JoinOracle(oracle_query(1_000_000, 250_000))
    for name, batch in cases:
        oracle.process(name, batch)
    runner = LocalQuery(plan, keep_late_rows=True)
    runner.run(cases)
    assert oracle.late_rows
    for stream in ("clicks", "views"):
        want = [row for row in oracle.late_rows if row["late_stream"] == stream]
        assert rows_of(runner.late_rows(stream)) == want
