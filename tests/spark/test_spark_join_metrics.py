"""Window joins inside Spark: lateness in a key bucket that has no state yet, and the join
operator's metrics reported through Spark's streaming progress (observedMetrics)."""

from __future__ import annotations

import datetime as dt
import uuid

import pandas as pd
import pyarrow as pa
import pytest
from spark_harness import file_stream, write_micro_batches

import mangonel as mg
from mangonel.runtime.spark.join_metrics import OBSERVATION

pytestmark = pytest.mark.spark

DDL = "ts TIMESTAMP, k BIGINT, v DOUBLE"
EPOCH = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
QUERY = (
    "SELECT l.k AS k, window_start, window_end, COUNT(*) AS n "
    "FROM a [RANGE 1 SECOND] AS l JOIN b [RANGE 1 SECOND] AS r ON l.k = r.k AND l.v <= r.v "
    "GROUP BY l.k"
)  # the residual keeps it a pairwise join (not factorised): batches are joined


def rows(*points: tuple[float | None, int]) -> pa.Table:
    """(seconds after EPOCH or None for a NULL event time, key) -> one micro-batch's file."""
    times = [None if s is None else EPOCH + dt.timedelta(seconds=s) for s, _ in points]
    return pa.table(
        {
            "ts": pa.array(times, pa.timestamp("us", tz="UTC")),
            "k": pa.array([k for _, k in points], pa.int64()),
            "v": pa.array([1.0] * len(points), pa.float64()),
        }
    )


def keys_in_two_buckets(spark, buckets: int) -> tuple[int, int]:
    """Two keys whose rows land in different buckets (the planner's hash of the key)."""
    frame = spark.sql(
        f"SELECT id, pmod(hash(CAST(id AS BIGINT)), {buckets}) AS b FROM range(0, 16)"
    )
    bucket_of = {row["id"]: row["b"] for row in frame.collect()}
    other = next(k for k in range(1, 16) if bucket_of[k] != bucket_of[0])
    return 0, other


def late_in_a_new_bucket(spark, tmp_path, backend: str):  # noqa: ANN201
    """Run QUERY over micro-batches whose last one brings late rows into a bucket that has
    never run: (old key, new key, results, metrics totals, each micro-batch's metrics)."""
    session = mg.attach(spark, backend=backend)
    old, new = keys_in_two_buckets(spark, 4)
    # Micro-batches 0 and 1 move the watermark (delay 200 ms, min over the streams) to
    # W_1 = 10.1 s and W_2 = 10.9 s, all rows in `old`'s bucket. Micro-batch 2 brings rows of
    # `new` at ~1 s: their window [1 s, 2 s) ended long before W_1, so they are late by
    # Spark's rule, but their bucket has never run (no state, no watermark seen).
    left = [
        rows((10.0, old), (10.2, old), (10.4, old)),
        rows((11.0, old), (11.2, old), (None, old)),
        rows((1.0, new), (1.5, new), (12.5, old)),
    ]
    right = [rows((10.1, old), (10.3, old)), rows((11.1, old)), rows((1.2, new), (12.6, old))]
    write_micro_batches(tmp_path / "a", left)
    write_micro_batches(tmp_path / "b", right)
    for name in ("a", "b"):
        frame = file_stream(spark, tmp_path / name, DDL)
        session.register(name, frame, event_time="ts", watermark="200 milliseconds")
    name = "q" + uuid.uuid4().hex[:12]
    query = (
        session.sql(QUERY)
        .writeStream.format("memory")
        .queryName(name)
        .outputMode("append")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    try:
        query.processAllAvailable()
        progress = list(query.recentProgress)
        totals = session.join_metrics(query)
    finally:
        query.stop()
    result = spark.table(name).toPandas()
    spark.catalog.dropTempView(name)
    per_batch = [
        p.observedMetrics[OBSERVATION] for p in progress if OBSERVATION in p.observedMetrics
    ]
    return old, new, result, totals, per_batch


def test_late_rows_in_a_new_bucket_are_dropped_and_counted(spark, tmp_path):
    old, _, result, totals, per_batch = late_in_a_new_bucket(spark, tmp_path, "cpu")
    # W_3 = 12.3 s closes [10 s, 11 s) (3 x 2 pairs) and [11 s, 12 s) (2 x 1); nothing of `new`
    starts = pd.to_datetime(result["window_start"], utc=True)
    got = sorted(zip(result["k"].astype(int), starts, result["n"].astype(int), strict=True))
    second = dt.timedelta(seconds=1)
    assert got == [(old, EPOCH + 10 * second, 6), (old, EPOCH + 11 * second, 2)]

    assert totals["rows_in_l"] == 9 and totals["rows_in_r"] == 5  # the NULL time included
    assert totals["late_l"] == 2 and totals["late_r"] == 1
    assert totals["null_event_time_dropped"] == 1
    assert totals["windows_fired"] == 2 and totals["rows_out"] == 2
    # joined batches: one per side batch that met stored rows of the other side
    assert totals["batches_hash"] + totals["batches_sort_merge"] >= 3
    assert totals["state_bytes"] > 0  # the open window [12 s, 13 s) is still held
    # each micro-batch reports its own counts: the late rows in the one that brought them
    late = [(m["late_l"], m["late_r"]) for m in per_batch]
    assert (2, 1) in late and sum(a + b for a, b in late) == 3
    # the results carry no metric column
    assert list(result.columns) == ["k", "window_start", "window_end", "n"]


@pytest.mark.parametrize(("gpu_join", "runs_on"), [(True, "gpu"), (False, "cpu")])
def test_attach_passes_gpu_join_to_the_join_plan(spark, tmp_path, gpu_join, runs_on):
    """A GPU plan made inside Spark (planning needs no GPU) keeps its join where the
    session's gpu_join option says, and EXPLAIN's Spark side tells the truth about it."""
    session = mg.attach(spark, backend="gpu", gpu_join=gpu_join)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        frame = file_stream(spark, tmp_path / name, DDL)
        session.register(name, frame, event_time="ts", watermark="200 milliseconds")
    text = session.explain(QUERY)
    stage2 = next(line for line in text.splitlines() if "Stage2 applyInPandasWithState" in line)
    assert f"backend={runs_on}" in stage2
    assert ("! join runs on cpu because" in text) == (runs_on == "cpu")


@pytest.mark.gpu
def test_gpu_join_inside_spark_equals_the_cpu_join(spark, tmp_path):
    """A GPU plan's join (gpu_join, the default) run by Spark's Python workers on the device:
    the same results and counts as the CPU plan, late rows in a new bucket included."""
    pytest.importorskip("cupy")
    cpu = late_in_a_new_bucket(spark, tmp_path / "cpu", "cpu")
    gpu = late_in_a_new_bucket(spark, tmp_path / "gpu", "gpu")
    order = ["k", "window_start"]
    pd.testing.assert_frame_equal(
        gpu[2].sort_values(order).reset_index(drop=True),
        cpu[2].sort_values(order).reset_index(drop=True),
    )
    counts = [n for n in cpu[3] if n != "state_bytes"]  # device state is laid out apart
    assert {n: gpu[3][n] for n in counts} == {n: cpu[3][n] for n in counts}
    assert cpu[3]["late_l"] == 2 and len(cpu[2]) == 2
