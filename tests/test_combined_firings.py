"""Firings combined across batches (`TimeWindowOperator._after_batch`): over batches held in
memory the runner reads a batch ahead, and the windows due after a batch may fire with the
next batch's when that batch holds no event time before their end. The result must be the
per-batch result row for row (docs/semantics.md): fuzz cases check it against the oracle
(tests/fuzzer.py `check`, "streamed from memory"); here, a stream whose later batches do reach
back into due windows (those rows are late, exactly as batch by batch), and the bound on how
many batches share a firing."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest

from mangonel.runtime.local.query import LocalQuery
from mangonel.runtime.operators import window
from mangonel.runtime.operators.holistic import HolisticTimeWindows
from mangonel.session import Session

BACKENDS = ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)]
START = 1_764_000_000_000_000


def _batches(count: int, rows: int, seed: int, reach_back_us: int) -> list[pa.RecordBatch]:
    """Batch b covers event time [b, b + 1) x 100 ms, in order; with `reach_back_us`, a few
    rows of every third batch lie up to that long before its start (into windows due)."""
    rng = np.random.default_rng(seed)
    batches = []
    for b in range(count):
        ts = START + b * 100_000 + np.sort(rng.integers(0, 100_000, rows))
        if reach_back_us and b % 3 == 2:
            back = rng.random(rows) < 0.05
            ts[back] -= rng.integers(1, reach_back_us, int(back.sum()))
        batches.append(
            pa.RecordBatch.from_arrays(
                [
                    pa.array(ts, pa.timestamp("us")),
                    pa.array(rng.integers(0, 20, rows)),
                    pa.array(rng.standard_normal(rows)),
                ],
                names=["ts", "k", "v"],
            )
        )
    return batches


INCREMENTAL = (
    "SELECT k, window_start, window_end, COUNT(*) AS n, SUM(v) AS total, MIN(v) AS low, "
    "STDDEV(v) AS sd FROM s [RANGE 200 MILLISECONDS SLIDE 50 MILLISECONDS] GROUP BY k"
)
# holistic aggregates beside incremental ones (`HolisticTimeWindows` around the wrapped
# operator): the panes' values must give the per-batch answers when firings wait
HOLISTIC = (
    "SELECT k, window_start, window_end, COUNT(*) AS n, MEDIAN(v) AS med, "
    "PERCENTILE_DISC(0.9) WITHIN GROUP (ORDER BY v) AS p90, COUNT(DISTINCT v) AS d, "
    "SUM(v) AS total FROM s [RANGE 200 MILLISECONDS SLIDE 50 MILLISECONDS] GROUP BY k"
)


def _runner(backend: str, sql: str = INCREMENTAL) -> LocalQuery:
    session = Session(backend)
    session.execute(
        "CREATE STREAM s (ts TIMESTAMP, k BIGINT, v DOUBLE) WITH (event_time = 'ts', "
        "watermark = '0 seconds')"
    )
    return LocalQuery(session.sql(sql).plan)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reach_back_us", [0, 30_000, 250_000])
def test_combined_firings_give_the_per_batch_rows_and_late_counts(backend, reach_back_us):
    batches = _batches(24, 500, seed=reach_back_us, reach_back_us=reach_back_us)
    one_by_one = _runner(backend)
    per_batch = [one_by_one.operator.process(b) for b in batches] + [one_by_one.operator.finish()]
    combined = _runner(backend)
    steps = list(combined._steps(batches, None))  # in memory: read ahead, firings combined
    got = pa.Table.from_batches([r for step in steps for r in step], one_by_one.schema)
    want = pa.Table.from_batches([r for step in per_batch for r in step], one_by_one.schema)
    assert got.num_rows == want.num_rows > 0
    for name in ("k", "window_start", "window_end", "n", "low"):
        assert got[name].equals(want[name]), name
    for name in ("total", "sd"):  # a firing of more windows may associate a tree otherwise
        np.testing.assert_allclose(
            got[name].to_numpy(), want[name].to_numpy(), rtol=1e-12, atol=1e-12
        )
    # the same counters (state held between firings may differ: more panes wait)
    assert replace(combined.metrics, state_bytes=0) == replace(one_by_one.metrics, state_bytes=0)
    assert (one_by_one.metrics.late_tuples_dropped > 0) == (reach_back_us > 50_000)
    # in order, the windows due after a batch wait for the next one (at most the bound's)
    emitting = sum(1 for step in steps[:-1] if step)
    if reach_back_us == 0:
        assert emitting <= -(-len(batches) // window.COMBINED_FIRING_BATCHES)
    assert sum(1 for step in per_batch[:-1] if step) >= len(batches) - 4


def test_a_live_source_fires_after_every_batch():
    """An iterator (not a sequence) is read a batch at a time: no firing waits for the
    next batch, even with lookahead, whose one-batch wait is the caller's choice."""
    batches = _batches(12, 200, seed=7, reach_back_us=0)
    runner = _runner("cpu")
    steps = list(runner._steps(iter(batches), True))
    assert sum(1 for step in steps[:-1] if step) >= len(batches) - 4


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reach_back_us", [0, 250_000])
def test_holistic_queries_combine_firings_with_the_per_batch_rows(backend, reach_back_us):
    batches = _batches(24, 500, seed=reach_back_us + 1, reach_back_us=reach_back_us)
    one_by_one = _runner(backend, HOLISTIC)
    per_batch = [one_by_one.operator.process(b) for b in batches] + [one_by_one.operator.finish()]
    combined = _runner(backend, HOLISTIC)
    firings = _count_firings(combined)
    steps = list(combined._steps(batches, None))
    got = pa.Table.from_batches([r for step in steps for r in step], one_by_one.schema)
    want = pa.Table.from_batches([r for step in per_batch for r in step], one_by_one.schema)
    assert got.num_rows == want.num_rows > 0
    for name in ("k", "window_start", "window_end", "n", "med", "p90", "d"):
        assert got[name].equals(want[name]), name
    # a firing of more windows may associate a floating sum otherwise (docs/semantics.md):
    # last bits of terms of magnitude ~1, so an absolute bound too where a sum cancels
    np.testing.assert_allclose(
        got["total"].to_numpy(), want["total"].to_numpy(), rtol=1e-12, atol=1e-12
    )
    assert replace(combined.metrics, state_bytes=0, tuning=None) == replace(
        one_by_one.metrics, state_bytes=0, tuning=None
    )
    emitting = sum(1 for step in steps[:-1] if step)
    if reach_back_us == 0:
        assert emitting <= -(-len(batches) // window.COMBINED_FIRING_BATCHES)
    else:  # rows reach back into due windows: those firings cannot wait
        assert emitting > -(-len(batches) // window.COMBINED_FIRING_BATCHES)
    # the tuner saw one step per firing that evaluated windows. A step may hold two: on
    # the GPU a firing waits while the next batch is still staging, and that batch's
    # `process` fires it (`fire_waiting_before`) before its own (how often depends on the
    # copy worker's timing: under load it happened, 2026-12-06)
    assert combined.metrics.tuning.steps <= firings[0] <= 2 * emitting + 1
    if reach_back_us == 0:  # no row reaches a waiting firing: one firing a step
        assert combined.metrics.tuning.steps <= emitting + 1


def _count_firings(query: LocalQuery) -> list[int]:
    """A counter (one element, updated in place) of the holistic operator's firings that
    emitted windows."""
    count = [0]
    for operator in query.operator.operators:
        if isinstance(operator, HolisticTimeWindows):
            fired = operator._fired

            def counted(*arguments, fired=fired):  # noqa: ANN002, ANN202
                result = fired(*arguments)
                count[0] += any(batch.num_rows for batch in result[0])
                return result

            operator._fired = counted
    return count
