"""BOOL_AND / BOOL_OR (EVERY, ANY, SOME) inside Spark equal Spark's own `bool_and` / `bool_or`
on the same micro-batches: the two-stage plan (Arrow pre-aggregation in stage 1, the
aggregates' `arrow` faces), stage 1 on the backend's lift kernels, and the native plan (the
aggregates' Spark spelling)."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F
from spark_harness import assert_same_results, file_stream, run_to_memory, write_micro_batches
from test_spark_equality import micro_batches

import mangonel as mg
from mangonel.catalog.types import SqlType
from mangonel.runtime.spark.session import SparkMangonelSession

pytestmark = pytest.mark.spark

# (mangonel call, Spark call, alias); the last one has no non-NULL argument in any window
CALLS = [
    ("BOOL_AND(v > 20)", "bool_and(v > 20)", "all_big"),
    ("BOOL_OR(v > 90)", "bool_or(v > 90)", "any_huge"),
    ("EVERY(v > 1)", "every(v > 1)", "every_pos"),
    ("ANY(v < 3)", "bool_or(v < 3)", "any_small"),
    ("SOME(v > 50 AND v < 51)", "some(v > 50 AND v < 51)", "some_mid"),
    ("BOOL_AND(IF(v > 1e12, TRUE, NULL))", "bool_and(IF(v > 1e12, TRUE, NULL))", "never"),
]


@pytest.mark.parametrize("plan", ["two-stage", "kernel-stage1", "native"])
def test_bool_aggregates_equal_spark(spark, tmp_path, plan):
    _, tables = micro_batches(SqlType.STRING, SqlType.DOUBLE, delay_us=300_000, files=4)
    write_micro_batches(tmp_path / "in", tables)
    source = file_stream(spark, tmp_path / "in", "ts TIMESTAMP, k STRING, v DOUBLE")
    if plan == "kernel-stage1":
        session = SparkMangonelSession(spark, backend="cpu", stage1="kernels")
    else:
        session = mg.attach(spark, native=plan == "native")
    session.register("s", source, event_time="ts", watermark="200 milliseconds")
    select = ", ".join(f"{call} AS {alias}" for call, _, alias in CALLS)
    slide = "500 MILLISECONDS" if plan == "native" else "100 MILLISECONDS"
    ours = session.sql(
        f"SELECT k, window_start, window_end, {select} "
        f"FROM s [RANGE 500 MILLISECONDS SLIDE {slide}] GROUP BY k"
    )
    text = session.explain()
    assert ("native window aggregation" in text) == (plan == "native")
    native = (
        source.withWatermark("ts", "200 milliseconds")
        .groupBy(F.window("ts", "500 milliseconds", slide.lower()), "k")
        .agg(*[F.expr(call).alias(alias) for _, call, alias in CALLS])
        .select(
            "k",
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            *[alias for _, _, alias in CALLS],
        )
    )
    theirs = run_to_memory(native, tmp_path / "native")
    assert theirs["never"].isna().all() and theirs["all_big"].notna().any()
    assert_same_results(run_to_memory(ours, tmp_path / "ours"), theirs, ["k"])
