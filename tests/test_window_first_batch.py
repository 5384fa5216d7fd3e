"""A run's first batch: its head takes the split path alone (making the segment and the key
slots), the rest the fused pass (`operators.window.FIRST_HEAD_ROWS`). Results must be those
of docs/semantics.md whatever the head's length: fuzz cases against the oracle with a head
of a few rows (so every case's first batch is split), and a large first batch against the
same run unsplit."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from fuzz_cases import draw_case
from fuzzer import Scenario, check

from mangonel.runtime.operators import window
from mangonel.session import Session

BACKENDS = ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(9100, 9124))
def test_a_first_batch_split_after_its_head_matches_the_oracle(monkeypatch, backend, seed):
    monkeypatch.setattr(window, "FIRST_HEAD_ROWS", 2)
    case = draw_case(seed, special_values=True, large_share=0.0)
    failure = check(Scenario.from_case(case), backend)
    assert failure is None, str(failure)


def _first_batch(rows: int, seed: int) -> pa.RecordBatch:
    """Out of order within 2 s; keys 0..999, and keys 1000..1049 only after the head."""
    rng = np.random.default_rng(seed)
    ts = 1_764_000_000_000_000 + np.sort(rng.integers(0, 3_000_000, rows))
    ts = ts - rng.integers(0, 2_000_000, rows)
    keys = rng.integers(0, 1000, rows)
    late_keys = rng.random(rows) < 0.01
    keys[late_keys] = 1000 + rng.integers(0, 50, int(late_keys.sum()))
    keys[: window.FIRST_HEAD_ROWS] %= 1000
    values = rng.standard_normal(rows)
    values[rng.random(rows) < 0.05] = np.nan
    return pa.RecordBatch.from_arrays(
        [
            pa.array(ts, pa.timestamp("us")),
            pa.array(keys, mask=rng.random(rows) < 0.02),
            pa.array(values, mask=rng.random(rows) < 0.05),
        ],
        names=["ts", "k", "v"],
    )


def _run(backend: str, batches: list[pa.RecordBatch]) -> pa.Table:
    session = Session(backend)
    session.execute(
        "CREATE STREAM s (ts TIMESTAMP, k BIGINT, v DOUBLE) WITH (event_time = 'ts', "
        "watermark = '1 second')"
    )
    query = session.sql(
        "SELECT k, window_start, window_end, COUNT(*) AS n, COUNT(v) AS nv, SUM(v) AS total, "
        "MIN(v) AS low, MAX(v) AS high, STDDEV(v) AS sd FROM s [RANGE 1 SECOND SLIDE 100 "
        "MILLISECONDS] GROUP BY k"
    )
    return query.run(batches)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_large_first_batch_gives_the_results_of_the_unsplit_run(monkeypatch, backend):
    rows = 5 * window.FIRST_HEAD_ROWS
    first = _first_batch(rows, 1)
    second = _first_batch(rows // 5, 2)
    split = _run(backend, [first, second])
    monkeypatch.setattr(window, "FIRST_HEAD_ROWS", rows)  # the head is the whole batch
    whole = _run(backend, [first, second])
    assert split.num_rows == whole.num_rows > 0
    assert split.column_names == whole.column_names
    for name in ("k", "window_start", "window_end", "n", "nv"):
        assert split.column(name).equals(whole.column(name)), name
    for name in ("total", "low", "high", "sd"):
        got = split.column(name).to_numpy(zero_copy_only=False)
        want = whole.column(name).to_numpy(zero_copy_only=False)
        assert np.allclose(got, want, rtol=1e-9, atol=1e-9, equal_nan=True), name


@pytest.mark.gpu
@pytest.mark.parametrize("background", [True, False])
def test_the_next_batch_is_staged_while_the_current_one_merges_and_used(monkeypatch, background):
    """`prefetch` stages the next batch at once in the copy worker (`background`), or defers
    its staging into the current batch's fused pass (`while_running`): every batch after the
    first is then taken from its prefetch."""
    from mangonel.runtime.gpu.kernels import GpuKernels

    if not background:
        monkeypatch.setattr(GpuKernels, "stages_in_background", property(lambda self: False))
    batches = [_first_batch(50_000, seed) for seed in range(5)]
    session = Session("gpu")
    session.execute(
        "CREATE STREAM s (ts TIMESTAMP, k BIGINT, v DOUBLE) WITH (event_time = 'ts', "
        "watermark = '1 second')"
    )
    query = session.sql(
        "SELECT k, window_start, SUM(v) AS total FROM s [RANGE 1 SECOND] GROUP BY k"
    )
    staged_beside: list[int] = []  # batches staged by the hook, inside another's fused pass
    original = window.TimeWindowOperator._stage_deferred

    def counted(self):  # noqa: ANN001, ANN202
        if self._deferred is not None:
            staged_beside.append(self._deferred.num_rows)
        return original(self)

    monkeypatch.setattr(window.TimeWindowOperator, "_stage_deferred", counted)
    got = query.run(batches)
    metrics = query._runner.window_operator.kernels.metrics
    assert len(staged_beside) == (0 if background else len(batches) - 1)  # all but the first
    assert metrics.prefetch_hits == metrics.prefetches == len(batches)
    want = Session("cpu")
    want.execute(
        "CREATE STREAM s (ts TIMESTAMP, k BIGINT, v DOUBLE) WITH (event_time = 'ts', "
        "watermark = '1 second')"
    )
    expected = want.sql(query.text).run(batches)
    assert got.num_rows == expected.num_rows > 0
    assert got.column("k").equals(expected.column("k"))
    assert np.allclose(
        got.column("total").to_numpy(zero_copy_only=False),
        expected.column("total").to_numpy(zero_copy_only=False),
        equal_nan=True,
    )
