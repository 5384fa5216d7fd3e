"""Count windows inside Spark equal the standalone Session on the same micro-batches
(docs/spark.md, "Count windows"): per key, tuples in event-time order, ties in arrival order
(micro-batch, then Spark partition and row: one file per micro-batch is one partition read in
row order), late when ts < W before their micro-batch, windows emitted once their last tuple
is final. Ties, disorder and late tuples are in the data; Spark has no end of input, so its
rows are the standalone rows fired before `finish`."""

from __future__ import annotations

import random

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from spark_harness import file_stream, run_to_memory, write_micro_batches

import mangonel as mg

pytestmark = pytest.mark.spark

MS = 1000
SCHEMA = pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("k", pa.int64()), ("v", pa.int64())])
QUERY = (
    "SELECT k, window_start, window_end, SUM(v) AS s, COUNT(*) AS n, MIN(v) AS lo "
    "FROM s [ROWS 3 SLIDE 2] GROUP BY k"
)


def micro_batches(seed: int) -> list[pa.Table]:
    """Event times on a coarse grid (many ties per key), moving forward with disorder of up
    to 400 ms against a 100 ms delay: some tuples late, some reordered."""
    rng = random.Random(seed)
    tables, now = [], 0
    for _ in range(7):
        now += rng.randrange(100, 400) * MS
        rows = [
            {
                "ts": max(0, now - rng.randrange(0, 5) * 100 * MS),
                "k": rng.randrange(3),
                "v": rng.randrange(-50, 50),
            }
            for _ in range(rng.randrange(3, 12))
        ]
        tables.append(pa.Table.from_pylist(rows, schema=SCHEMA))
    return tables


HOLISTIC_QUERY = (
    "SELECT k, window_start, window_end, MEDIAN(v) AS m, COUNT(DISTINCT v) AS d, "
    "PERCENTILE_DISC(0.25) WITHIN GROUP (ORDER BY v) AS pd, latest(v) AS l, "
    "APPROX_COUNT_DISTINCT(v) AS a, SUM(v) AS s, COUNT(*) AS n, MIN(v) AS lo "
    "FROM s [ROWS 3 SLIDE 2] GROUP BY k"
)


def latest_function():
    """Registered with_timestamps, nested so that Spark's workers get it by value (this test
    module is not importable there): the value of the latest tuple (the largest on ties)."""

    def latest(values, times):
        best = 0
        for i in range(times.shape[0]):
            if times[i] >= times[best]:
                best = i
        return values[best]

    return latest


def standalone(tables: list[pa.Table], query: str = QUERY) -> tuple[pd.DataFrame, int]:
    session = mg.Session("cpu")
    session.execute(
        "CREATE STREAM s (ts TIMESTAMP, k BIGINT, v BIGINT) "
        "WITH (event_time = 'ts', watermark = '100 milliseconds')"
    )
    session.register_window_function(
        "latest", latest_function(), returns="BIGINT", with_timestamps=True
    )
    from mangonel.runtime.local.query import LocalQuery

    runner = LocalQuery(session.sql(query).plan)
    fired = [batch for table in tables for batch in runner.process(table)]
    rows = pa.Table.from_batches(fired, schema=runner.schema).to_pandas()
    return rows, runner.metrics.late_tuples_dropped


def ordered(frame: pd.DataFrame, columns: tuple[str, ...] = ("s", "n", "lo")) -> list[tuple]:
    columns = ["k", "window_start", "window_end", *columns]
    frame = frame[columns].copy()
    for bound in ("window_start", "window_end"):
        frame[bound] = pd.to_datetime(frame[bound], utc=True)
    return sorted(map(tuple, frame.itertuples(index=False)))


def test_count_windows_equal_the_standalone_session(spark, tmp_path) -> None:
    """Incremental aggregates alone; the holistic test below runs them beside its functions
    over another stream (seed 1)."""
    tables = micro_batches(2)
    expected, late = standalone(tables)
    assert late > 0 and len(expected) > 5  # the case holds late tuples and windows
    write_micro_batches(tmp_path / "in", tables)
    source = file_stream(spark, tmp_path / "in", "ts TIMESTAMP, k BIGINT, v BIGINT")
    session = mg.attach(spark)
    session.register("s", source, event_time="ts", watermark="100 milliseconds")
    ours = run_to_memory(session.sql(QUERY), tmp_path / "checkpoint")
    assert ordered(ours) == ordered(expected)


def test_holistic_functions_over_count_windows_equal_the_standalone_session(
    spark, tmp_path
) -> None:
    """MEDIAN, COUNT(DISTINCT), PERCENTILE_DISC, a sketch and a Python function
    with_timestamps over count windows: the per-tuple partials carry each `values` field's
    (order key, validity) and the event times, so stage 2 evaluates them as standalone."""
    tables = micro_batches(1)
    expected, late = standalone(tables, HOLISTIC_QUERY)
    assert late > 0 and len(expected) > 5
    write_micro_batches(tmp_path / "in", tables)
    source = file_stream(spark, tmp_path / "in", "ts TIMESTAMP, k BIGINT, v BIGINT")
    session = mg.attach(spark)
    session.register("s", source, event_time="ts", watermark="100 milliseconds")
    session.register_window_function(
        "latest", latest_function(), returns="BIGINT", with_timestamps=True
    )
    assert "holistic=tuple-runs" in session.explain(HOLISTIC_QUERY)
    ours = run_to_memory(session.sql(HOLISTIC_QUERY), tmp_path / "checkpoint")
    columns = ("m", "d", "pd", "l", "a", "s", "n", "lo")
    assert ordered(ours, columns) == ordered(expected, columns)


def test_late_rows_of_count_windows_are_the_standalone_ones(spark, tmp_path) -> None:
    """`late_rows=` over count windows: each per-tuple partial carries its row, and stage 2's
    verdict (ts < W before the micro-batch) writes exactly the rows the standalone session
    returns as late, with every column and the reason `behind watermark`."""
    from mangonel.runtime.local.query import LocalQuery

    tables = micro_batches(2)
    session = mg.Session("cpu")
    session.execute(
        "CREATE STREAM s (ts TIMESTAMP, k BIGINT, v BIGINT) "
        "WITH (event_time = 'ts', watermark = '100 milliseconds')"
    )
    runner = LocalQuery(session.sql(QUERY).plan, keep_late_rows=True)
    for table in tables:
        runner.process(table)
    want = runner.late_rows()
    assert want.num_rows > 0
    write_micro_batches(tmp_path / "in", tables)
    source = file_stream(spark, tmp_path / "in", "ts TIMESTAMP, k BIGINT, v BIGINT")
    attached = mg.attach(spark)
    attached.register("s", source, event_time="ts", watermark="100 milliseconds")
    ours = run_to_memory(attached.sql(QUERY, late_rows=str(tmp_path / "late")), tmp_path / "ck")
    expected, _ = standalone(tables)
    assert ordered(ours) == ordered(expected)  # the results are unchanged by it
    got = pq.read_table(tmp_path / "late")
    assert got.column_names == ["ts", "k", "v", "late_reason", "late_watermark"]
    assert set(got.column("late_reason").to_pylist()) == {"behind watermark"}

    def rows(table: pa.Table) -> list[tuple]:
        columns = ["ts", "k", "v", "late_watermark"]
        plain = [table.column(c).cast(pa.int64()) for c in columns]
        return sorted(zip(*(c.to_pylist() for c in plain), strict=True))

    assert rows(got) == rows(want)
