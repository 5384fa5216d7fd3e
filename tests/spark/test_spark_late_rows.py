"""Late rows as data inside Spark (`ms.sql(query, late_rows=directory)`, runtime/spark/late.py
and join.py): the rows written to the directory are exactly those Spark's rule finds late on
the same micro-batches (a row of micro-batch N whose windows all ended at or before W_{N-1},
the watermark Spark uses for late events), with every column of the stream, the reason and
the watermark (and, for a join, the stream); and the plans that cannot hand them out refuse
the argument."""

from __future__ import annotations

import datetime as dt
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from spark_harness import file_stream, run_to_memory, write_micro_batches

import mangonel as mg
from mangonel.errors import PlanError

pytestmark = pytest.mark.spark

MS = 1000
SIZE, SLIDE, DELAY = 1000 * MS, 500 * MS, 200 * MS
SCHEMA = pa.schema(
    [
        ("ts", pa.timestamp("us", tz="UTC")),
        ("k", pa.int64()),
        ("v", pa.float64()),
        ("note", pa.string()),
    ]
)


def micro_batches(seed: int) -> list[list[dict]]:
    """Rows that move forward and reach back up to 2.5 s: some late, some not."""
    rng = random.Random(seed)
    batches, now = [], 0
    for number in range(6):
        now += rng.randrange(300, 900) * MS
        rows = [
            {
                "ts": max(0, now - rng.randrange(0, 2500) * MS),
                "k": rng.randrange(3),
                "v": float(rng.randrange(-2, 10)),
                "note": f"b{number}r{i}",
            }
            for i in range(rng.randrange(1, 8))
        ]
        batches.append(rows)
    return batches


def spark_late_rows(batches: list[list[dict]], last_end=None) -> list[dict]:  # noqa: ANN001
    """Spark's rule by hand: micro-batch N (one file each) judges against W_{N-1}, the
    maximum event time of batches 0 .. N-2 minus the delay; a row is late when `last_end`
    of its event time (the end of its last window; default the sliding windows' below) is
    at or before it. (No WHERE here: Spark pushes a
    predicate that does not read the event time below its watermark, so rows WHERE drops do
    not move Spark's watermark, unlike docs/semantics.md's rule; a separate matter.)"""
    late, seen_max = [], []
    for number, rows in enumerate(batches):
        bound = seen_max[number - 2] - DELAY if number >= 2 else None
        for row in rows:
            end = row["ts"] // SLIDE * SLIDE + SIZE if last_end is None else last_end(row["ts"])
            if bound is not None and end <= bound:
                late.append({**row, "late_reason": "window closed", "late_watermark": bound})
        top = max(r["ts"] for r in rows)
        seen_max.append(max(top, seen_max[-1]) if seen_max else top)
    return late


def late_case(spark, tmp_path, last_end=None):  # noqa: ANN001, ANN201
    """Seed 3's micro-batches as files, the stream `s` over them in an attached session, and
    the rows Spark's rule finds late (`spark_late_rows`); the case must hold some."""
    batches = micro_batches(3)
    expected = spark_late_rows(batches, last_end)
    assert expected, "the case must hold late rows"
    write_micro_batches(
        tmp_path / "in", [pa.Table.from_pylist(rows, schema=SCHEMA) for rows in batches]
    )
    source = file_stream(spark, tmp_path / "in", "ts TIMESTAMP, k BIGINT, v DOUBLE, note STRING")
    session = mg.attach(spark)
    session.register("s", source, event_time="ts", watermark="200 milliseconds")
    return expected, source, session


def late_rows_written(directory) -> list[dict]:  # noqa: ANN001
    """The late-row files, timestamps as microseconds (as the expectations hold them)."""
    table = pq.read_table(directory)
    plain = [c.cast(pa.int64()) if pa.types.is_timestamp(c.type) else c for c in table.columns]
    return pa.table(plain, names=table.column_names).to_pylist()


@pytest.mark.parametrize(
    "aggregates",
    [
        "COUNT(*) AS n",
        # holistic functions: each partial row carries its values and its tuples side by side
        "COUNT(*) AS n, MEDIAN(v) AS m, COUNT(DISTINCT v) AS d",
    ],
)
def test_late_rows_are_written_exactly(spark, tmp_path, aggregates) -> None:
    expected, _, session = late_case(spark, tmp_path)
    query = (
        f"SELECT k, window_start, {aggregates} FROM s "
        "[RANGE 1 SECOND SLIDE 500 MILLISECONDS] GROUP BY k"
    )
    frame = session.sql(query, late_rows=str(tmp_path / "late"))
    results = run_to_memory(frame, tmp_path / "checkpoint")
    assert len(results) and results["n"].gt(0).all()
    got = late_rows_written(tmp_path / "late")
    assert list(got[0]) == ["ts", "k", "v", "note", "late_reason", "late_watermark"]
    assert sorted(got, key=lambda r: r["note"]) == sorted(expected, key=lambda r: r["note"])


GAP = 300 * MS


def test_session_late_rows_are_written_exactly_and_results_stay_sparks(spark, tmp_path) -> None:
    """Session windows with `late_rows=` leave Spark's own session_window aggregation (it
    drops late rows unseen) for the per-tuple stages: the rows written are those Spark's rule
    drops (ts + gap <= W_{N-1}: a row's own interval ended), and the sessions emitted are
    exactly Spark's native ones on the same micro-batches."""
    from pyspark.sql import functions as F
    from spark_harness import assert_same_results

    expected, source, session = late_case(spark, tmp_path, lambda ts: ts + GAP)
    query = (
        "SELECT k, window_start, window_end, COUNT(*) AS n, SUM(v) AS total "
        "FROM s [SESSION GAP 300 MILLISECONDS] GROUP BY k"
    )
    frame = session.sql(query, late_rows=str(tmp_path / "late"))
    assert not session.last_plan.native and session.last_plan.stage1 == "kernels"
    ours = run_to_memory(frame, tmp_path / "checkpoint")
    native = (
        source.withWatermark("ts", "200 milliseconds")
        .groupBy(F.session_window("ts", "300 milliseconds"), "k")
        .agg(F.count(F.lit(1)).alias("n"), F.sum("v").alias("total"))
        .select(
            "k",
            F.col("session_window.start").alias("window_start"),
            F.col("session_window.end").alias("window_end"),
            "n",
            "total",
        )
    )
    theirs = run_to_memory(native, tmp_path / "native")
    assert len(theirs) and (theirs["n"] > 1).any()  # merged sessions
    assert_same_results(ours, theirs, ["k"])
    got = late_rows_written(tmp_path / "late")
    assert list(got[0]) == ["ts", "k", "v", "note", "late_reason", "late_watermark"]
    assert sorted(got, key=lambda r: r["note"]) == sorted(expected, key=lambda r: r["note"])


def test_plans_that_cannot_hand_out_late_rows_refuse(spark, tmp_path) -> None:
    write_micro_batches(tmp_path / "in", [pa.Table.from_pylist(micro_batches(1)[0], schema=SCHEMA)])
    source = file_stream(spark, tmp_path / "in", "ts TIMESTAMP, k BIGINT, v DOUBLE, note STRING")
    query = "SELECT k, COUNT(*) AS n FROM s [RANGE 1 SECOND] GROUP BY k"
    forced = mg.attach(spark, native=True)
    forced.register("s", source, event_time="ts")
    with pytest.raises(PlanError, match="native aggregation drops them"):
        forced.sql(query, late_rows=str(tmp_path / "late"))
    kernels = mg.attach(spark, stage1="kernels")
    kernels.register("s", source, event_time="ts")
    with pytest.raises(PlanError, match="only Arrow stage 1"):
        kernels.sql(query, late_rows=str(tmp_path / "late"))
    # tumbling windows plan natively by cost; with late rows the two stages run instead
    chosen = mg.attach(spark)
    chosen.register("s", source, event_time="ts")
    chosen.sql(query, late_rows=str(tmp_path / "late"))
    assert not chosen.last_plan.native


JOIN_EPOCH = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
JOIN_SCHEMA = pa.schema(
    [
        ("ts", pa.timestamp("us", tz="UTC")),
        ("k", pa.int64()),
        ("v", pa.float64()),
        ("note", pa.string()),
    ]
)
JOIN_SOURCE = "FROM a [RANGE 1 SECOND] AS l JOIN b [RANGE 1 SECOND] AS r ON l.k = r.k"
JOIN_QUERIES = {
    # a residual keeps it the pair path; without one the aggregated join is factorised (each
    # side's window aggregation judges lateness); without GROUP BY the rows are materialised
    "pairs": f"SELECT l.k AS k, window_start, COUNT(*) AS n {JOIN_SOURCE} AND l.v <= r.v "
    "GROUP BY l.k",
    "factorised": f"SELECT l.k AS k, window_start, COUNT(*) AS n {JOIN_SOURCE} GROUP BY l.k",
    "rows": f"SELECT l.k AS k, l.v AS lv, r.v AS rv, window_start {JOIN_SOURCE}",
}


def join_rows(prefix: str, *points: tuple[float | None, int]) -> pa.Table:
    """(seconds after the epoch or None, key) -> one micro-batch's file; notes name the rows."""
    times = [None if s is None else JOIN_EPOCH + dt.timedelta(seconds=s) for s, _ in points]
    notes = [f"{prefix}{i}" for i in range(len(points))]
    keys = [k for _, k in points]
    return pa.table([times, keys, [1.0] * len(points), notes], schema=JOIN_SCHEMA)


@pytest.mark.parametrize("shape", sorted(JOIN_QUERIES))
def test_join_late_rows_are_written_exactly(spark, tmp_path, shape: str) -> None:
    """Micro-batches 0 and 1 move the watermark (delay 200 ms, the minimum over the streams)
    to W_1 = 10.1 s, then W_2 = 10.9 s; micro-batch 2 brings rows at 1-1.5 s, whose window
    [1 s, 2 s) ended before W_1: late by Spark's rule, in both streams, one of them in a key
    no earlier row had. A NULL event time is dropped, not late."""
    left = [
        join_rows("a0-", (10.0, 1), (10.2, 1), (10.4, 2)),
        join_rows("a1-", (11.0, 1), (11.2, 2), (None, 1)),
        join_rows("a2-", (1.0, 7), (1.5, 1), (12.5, 1)),
    ]
    right = [
        join_rows("b0-", (10.1, 1), (10.3, 2)),
        join_rows("b1-", (11.1, 1)),
        join_rows("b2-", (1.2, 7), (12.6, 1)),
    ]
    write_micro_batches(tmp_path / "a", left)
    write_micro_batches(tmp_path / "b", right)
    session = mg.attach(spark)
    ddl = "ts TIMESTAMP, k BIGINT, v DOUBLE, note STRING"
    for name in ("a", "b"):
        session.register(
            name,
            file_stream(spark, tmp_path / name, ddl),
            event_time="ts",
            watermark="200 milliseconds",
        )
    frame = session.sql(JOIN_QUERIES[shape], late_rows=str(tmp_path / "late"))
    results = run_to_memory(frame, tmp_path / "checkpoint")
    assert len(results)
    table = pq.read_table(tmp_path / "late")
    assert table.column_names == [
        "ts",
        "k",
        "v",
        "note",
        "late_reason",
        "late_watermark",
        "late_stream",
    ]
    got = sorted((r["note"], r["k"], r["late_stream"], r["late_reason"]) for r in table.to_pylist())
    assert got == [
        ("a2-0", 7, "a", "window closed"),
        ("a2-1", 1, "a", "window closed"),
        ("b2-0", 7, "b", "window closed"),
    ]
    # judged against the watermark the bucket last saw (W_1 or, in a bucket that never ran,
    # W_2: docs/spark.md), never against a later one
    watermarks = {w.replace(tzinfo=None) for w in table.column("late_watermark").to_pylist()}
    allowed = {JOIN_EPOCH.replace(tzinfo=None) + dt.timedelta(seconds=s) for s in (10.1, 10.9)}
    assert watermarks <= allowed
