"""Memory follows live state (issue 8): one batch of many keys over a long stretch of event time
must not allocate a dense `[keys x panes]` block over the whole stretch, and
`metrics.state_bytes` must be what the state really holds (numpy reports its allocations to
tracemalloc, and Arrow's pool, where the CPU pane state's arrays live, its own total, so
together they are a real allocation measure)."""

from __future__ import annotations

import gc
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import mangonel as mg
from mangonel.runtime.operators import window

UTC = pa.timestamp("us", tz="UTC")
SPARSE_CASE = (
    Path(__file__).parent / "regressions" / "sparse-batch-over-2267-seconds-of-1ms-panes.json"
)


def _query(window_clause: str, keys: str = "BIGINT") -> mg.Query:
    session = mg.Session(backend="cpu")
    session.execute(
        f"CREATE STREAM s (ts TIMESTAMP, k {keys}, v DOUBLE) "
        "WITH (event_time = 'ts', watermark = '1 second')"
    )
    return session.sql(
        f"SELECT k, window_start, SUM(v) AS total, COUNT(*) AS n FROM s [{window_clause}] "
        "GROUP BY k"
    )


def _sparse_table(keys: int, seconds: int, rows: int, seed: int = 3) -> pa.Table:
    """Every key a few times, event times spread over `seconds` (in order)."""
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, seconds * 1_000_000, rows))
    k = rng.integers(0, keys, rows)
    v = rng.integers(0, 100, rows).astype(np.float64)
    return pa.table({"ts": pa.array(ts).cast(UTC), "k": k, "v": v})


def _run(query: mg.Query, batches: list[pa.RecordBatch]) -> tuple[list[dict], int, int]:
    """(result rows in output order, peak bytes while running: numpy's traced and Arrow's
    pool's, where the CPU pane state lives, state_bytes after)."""
    runner = query._runner = query._new_runner()
    gc.collect()
    default = pa.default_memory_pool()
    counted = pa.proxy_memory_pool(default)  # its own peak, from now
    pa.set_memory_pool(counted)
    tracemalloc.start()
    try:
        rows = []
        for batch in batches:
            rows += [r for b in runner.process(batch) for r in b.to_pylist()]
        _, peak = tracemalloc.get_traced_memory()
        peak += counted.max_memory()
    finally:
        tracemalloc.stop()
        pa.set_memory_pool(default)
    state = runner.metrics.state_bytes
    rows += [r for b in runner.finish() for r in b.to_pylist()]
    return rows, peak, state


@pytest.fixture
def small_result_cells(monkeypatch: pytest.MonkeyPatch) -> None:
    # the segment budget scaled down, so a test-sized batch shows the shape (1 M
    # keys over 100 s) without gigabytes
    monkeypatch.setattr(window, "MAX_SEGMENT_BYTES", 1 << 21)


@pytest.mark.parametrize(
    "window_clause", ["RANGE 1 SECOND", "RANGE 2 SECONDS SLIDE 500 MILLISECONDS"]
)
def test_one_sparse_batch_takes_the_memory_of_many_small_ones(
    small_result_cells: None, window_clause: str
) -> None:
    table = _sparse_table(keys=4000, seconds=200, rows=8000)
    query = _query(window_clause)
    _run(query, table.to_batches(max_chunksize=100))  # JIT warm-up outside the measures
    many_rows, many_peak, many_state = _run(query, table.to_batches(max_chunksize=100))
    one_rows, one_peak, one_state = _run(query, table.to_batches())
    assert len(table.to_batches()) == 1
    # the same windows (row order inside one firing may differ: keys are first seen in
    # another order when the batches differ)
    key = lambda r: (r["window_start"], r["k"])  # noqa: E731
    assert sorted(one_rows, key=key) == sorted(many_rows, key=key)
    # the unchunked merge of this batch allocated a [4096 keys x 16+ panes] block per pane
    # of data (200+ blocks, over 200 MB); the chunked one a few MB
    assert one_peak < 4 * max(many_peak, 1 << 20), (one_peak, many_peak)
    assert one_state <= 4 * many_state


def test_chunked_merge_gives_the_rows_of_the_unchunked_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = _sparse_table(keys=300, seconds=60, rows=3000, seed=5)
    # a late tuple, a NULL event time and a far outlier in the same batch
    extra = pa.table(
        {
            "ts": pa.array([None, 500_000_000, 100], pa.int64()).cast(UTC),
            "k": [1, 2, 3],
            "v": [1.0, 2.0, 3.0],
        }
    )
    batches = [
        *table.slice(0, 1000).to_batches(),
        *pa.concat_tables([table.slice(1000), extra]).combine_chunks().to_batches(),
    ]
    expected, _, _ = _run(_query("RANGE 3 SECONDS SLIDE 1 SECOND"), batches)
    monkeypatch.setattr(window, "MAX_SEGMENT_BYTES", 1 << 16)
    chunks = []
    choose = window.TimeWindowOperator._chunk_panes

    def spy(self, host_panes, fire_until):  # noqa: ANN001, ANN202
        chunks.append(choose(self, host_panes, fire_until))
        return chunks[-1]

    monkeypatch.setattr(window.TimeWindowOperator, "_chunk_panes", spy)
    query = _query("RANGE 3 SECONDS SLIDE 1 SECOND")
    got, _, _ = _run(query, batches)
    assert any(chunk is not None for chunk in chunks)  # the chunked path ran
    assert got == expected  # same rows, same order (keys keep their first-seen order)
    assert query.metrics.late_tuples_dropped == 1
    assert query.metrics.null_event_time_dropped == 1


@pytest.mark.parametrize(
    ("window_clause", "keys"),
    [
        ("RANGE 10 SECONDS SLIDE 1 SECOND", "BIGINT"),
        ("RANGE 10 SECONDS SLIDE 1 SECOND", "STRING"),
        ("ROWS 5 SLIDE 2", "BIGINT"),
    ],
)
def test_state_bytes_is_what_the_state_allocates(window_clause: str, keys: str) -> None:
    table = _sparse_table(keys=20_000, seconds=30, rows=200_000)
    if keys == "STRING":
        table = table.set_column(1, "k", pa.array([f"key-{k}" for k in table.column("k")]))
    batches = table.to_batches(max_chunksize=50_000)
    query = _query(window_clause, keys)
    query.run(batches[:1])  # JIT warm-up
    runner = query._new_runner()
    gc.collect()
    tracemalloc.start()
    try:
        # numpy's allocations and Arrow's pool (the CPU pane state's arrays come from it)
        before = tracemalloc.get_traced_memory()[0] + pa.total_allocated_bytes()
        for batch in batches:
            runner.process(batch)  # results dropped: only the state stays
        del batch
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] + pa.total_allocated_bytes() - before
    finally:
        tracemalloc.stop()
    state = runner.metrics.state_bytes
    assert state > 1 << 20
    # everything the operator keeps is its state (plus small bookkeeping)
    assert abs(held - state) <= 0.005 * state + (64 << 10), (held, state)


def test_a_sparse_batch_over_a_long_stretch_of_fine_panes_stays_small() -> None:
    """The fuzzer's case (tests/regressions/sparse-batch-over-2267-seconds-of-1ms-panes.json):
    933 rows over 2267 s of 1 ms panes took ~24 GB (segments sized by logical cells, not by
    what `_reserve` allocates). Run in a child process under a 3 GB address-space limit, so a
    return of the bug fails this test with a MemoryError instead of ending the test run."""
    script = (
        "import json, resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from fuzzer import Scenario, check\n"
        f"data = json.load(open({str(SPARSE_CASE)!r}))\n"
        "failure = check(Scenario.from_json(data), 'cpu')\n"
        "print(failure)\n"
        "sys.exit(failure is not None)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
