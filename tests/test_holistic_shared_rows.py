"""The holistic driver over the wrapped operator's row decisions (`HolisticTimeWindows
.shares_rows`: on the CPU the batch is lifted and keyed once, the values kept from the
incremental operator's panes, lateness and key slots) gives what its own pass over the batch
gave: the same rows and metrics, snapshots that restore across the two, string keys, the
first batch's head split, late rows."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from fuzzer import same_with_and_without
from hypothesis import given, settings
from test_holistic import SETTINGS
from test_holistic import scenarios as holistic_scenarios
from test_sketch_sql import scenarios as sketch_scenarios

import mangonel
from mangonel.runtime.cpu.kernels import CpuKernels
from mangonel.runtime.local.query import LocalQuery
from mangonel.runtime.operators import window

QUERY = (
    "SELECT k, MEDIAN(v) AS m, APPROX_COUNT_DISTINCT(v) AS d, COUNT(DISTINCT x) AS c, "
    "SUM(x) AS s FROM s [RANGE 40 MICROSECONDS SLIDE 10 MICROSECONDS] GROUP BY k"
)


@settings(max_examples=30, **SETTINGS)
@given(holistic_scenarios("time"))
def test_holistic_rows_are_the_same_with_and_without_the_shared_rows(scenario):
    same_with_and_without(scenario, CpuKernels, "shares_fused_rows", False)


@settings(max_examples=20, **SETTINGS)
@given(sketch_scenarios("time"))
def test_sketch_rows_are_the_same_with_and_without_the_shared_rows(scenario):
    same_with_and_without(scenario, CpuKernels, "shares_fused_rows", False)


def _runner(backend: str = "cpu") -> LocalQuery:
    session = mangonel.Session(backend=backend)
    session.execute(
        "CREATE STREAM s (ts TIMESTAMP, k STRING, x BIGINT, v DOUBLE) "
        "WITH (event_time = 'ts', watermark = '5 us')"
    )
    return LocalQuery(session.sql(QUERY).plan)


def _batches(seed: int) -> list[pa.RecordBatch]:
    """A first batch past the head split (`window.FIRST_HEAD_ROWS`), then batches with new
    keys, NULLs and late rows."""
    rng = np.random.default_rng(seed)
    sizes = [2 * window.FIRST_HEAD_ROWS + 100, 500, 700]
    batches, start = [], 0
    for number, rows in enumerate(sizes):
        ts = start + np.sort(rng.integers(0, 60, rows))
        if number:  # late: every window over 0..9 us closed with the first batch
            ts[: rows // 10] = rng.integers(0, 10, rows // 10)
        start += 60
        keys = [f"key{int(k)}" for k in rng.integers(0, 20 + 10 * number, rows)]
        v = rng.integers(0, 50, rows).astype(np.float64)
        batches.append(
            pa.RecordBatch.from_pydict(
                {
                    "ts": pa.array(ts, pa.timestamp("us")),
                    "k": pa.array(keys),
                    "x": pa.array(rng.integers(0, 30, rows)),
                    "v": pa.array(v, mask=rng.random(rows) < 0.1),
                }
            )
        )
    return batches


def _rows(outputs: list[list[pa.RecordBatch]]) -> list[dict]:
    return [row for batches in outputs for batch in batches for row in batch.to_pylist()]


def test_string_keys_head_split_late_rows_and_snapshots_across_the_two_paths():
    batches = _batches(3)
    shared = _runner()
    assert shared.window_operator.shares_rows  # the CPU's default
    want = [shared.process(b) for b in batches] + [shared.finish()]
    assert shared.metrics.late_tuples_dropped > 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(CpuKernels, "shares_fused_rows", False)
        own = _runner()
        assert not own.window_operator.shares_rows
        got = [own.process(b) for b in batches] + [own.finish()]
        assert _rows(got) == _rows(want)
        # a snapshot of the own pass restored where the rows are shared, and back
        own = _runner()
        own.process(batches[0])
        snapshot = own.snapshot()
    restored = _runner()
    restored.restore(snapshot)
    tail = [restored.process(b) for b in batches[1:]] + [restored.finish()]
    shared = _runner()
    head = shared.process(batches[0])
    snapshot = shared.snapshot()
    assert _rows([head, *tail]) == _rows(want)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(CpuKernels, "shares_fused_rows", False)
        back = _runner()
        back.restore(snapshot)
        tail = [back.process(b) for b in batches[1:]] + [back.finish()]
    assert _rows([head, *tail]) == _rows(want)


def test_a_holistic_key_map_in_another_order_is_remapped():
    """The driver's slots follow the wrapped operator's through a map of its own: keys it
    met in another order (a snapshot of its own pass) still find their values."""
    batches = _batches(4)
    plain = _runner()
    want = [plain.process(b) for b in batches] + [plain.finish()]
    runner = _runner()
    operator = runner.window_operator
    keys = sorted({k for b in batches for k in b.column("k").to_pylist()}, reverse=True)
    operator.keys.map_columns([pa.array(keys)], np.ones(len(keys), np.bool_))
    got = [runner.process(b) for b in batches] + [runner.finish()]
    assert not operator._same_slots
    assert _rows(got) == _rows(want)
