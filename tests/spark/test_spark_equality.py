"""mangonel inside Spark equals Spark's native windowed aggregation on the same micro-batches
(DESIGN section 3: same watermark, same lateness rule, same NULL rules)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from spark_harness import (
    ALL_AGGREGATES,
    assert_equals_native,
    assert_same_results,
    file_stream,
    generated_tables,
    mangonel_select,
    run_to_memory,
    write_micro_batches,
)

import mangonel as mg
from mangonel.catalog.catalog import Column, Schema
from mangonel.catalog.sources.generator import GeneratorConfig, generate
from mangonel.catalog.types import SqlType

pytestmark = pytest.mark.spark


def micro_batches(
    key_type: SqlType,
    value_type: SqlType,
    *,
    delay_us: int,
    files: int = 5,
    rows: int = 2000,
    keys: int = 4,
    null_keys: bool = False,
    seed: int = 1,
) -> tuple[Schema, list[pa.Table]]:
    schema = Schema(
        (
            Column("ts", SqlType.TIMESTAMP),
            Column("k", key_type),
            Column("v", value_type),
        )
    )
    tables = generated_tables(
        schema,
        files=files,
        rows=rows,
        keys=keys,
        delay_us=delay_us,
        seed=seed,
        null_fraction=0.1,
    )
    rng = np.random.default_rng(seed)
    for number, table in enumerate(tables):
        if null_keys:
            mask = pa.array(rng.random(table.num_rows) < 0.05)
            keys_with_nulls = pc.if_else(mask, pa.scalar(None, table["k"].type), table["k"])
            tables[number] = table.set_column(1, "k", keys_with_nulls)
    return schema, tables


CASES = {
    # name: (key type, value type, delay us, RANGE, SLIDE, watermark, native size/slide, nulls)
    "sliding-out-of-order-string-keys": (
        SqlType.STRING,
        SqlType.DOUBLE,
        300_000,
        "1 SECOND",
        "100 MILLISECONDS",
        "200 milliseconds",
        ("1 second", "100 milliseconds"),
        False,
    ),
    "tumbling-in-order-int-keys-with-nulls": (
        SqlType.BIGINT,
        SqlType.BIGINT,
        0,
        "500 MILLISECONDS",
        "500 MILLISECONDS",
        "0 milliseconds",
        ("500 milliseconds", "500 milliseconds"),
        True,
    ),
    "sliding-uneven-panes-out-of-order": (
        SqlType.INT,
        SqlType.DOUBLE,
        600_000,
        "700 MILLISECONDS",
        "200 MILLISECONDS",
        "300 milliseconds",
        ("700 milliseconds", "200 milliseconds"),
        True,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_equals_spark_native_window_aggregation(spark, tmp_path, case):
    key_type, value_type, delay_us, size, slide, watermark, native_shape, nulls = CASES[case]
    schema, tables = micro_batches(key_type, value_type, delay_us=delay_us, null_keys=nulls)
    write_micro_batches(tmp_path / "in", tables)
    ddl = "ts TIMESTAMP, k " + key_type.info.spark + ", v " + value_type.info.spark
    source = file_stream(spark, tmp_path / "in", ddl)

    # mangonel's own two stages (tumbling windows would otherwise be planned natively)
    session = mg.attach(spark, native=False)
    session.register("s", source, event_time="ts", watermark=watermark)
    ours = session.sql(
        f"SELECT k, window_start, window_end, {mangonel_select(ALL_AGGREGATES)} "
        f"FROM s [RANGE {size} SLIDE {slide}] GROUP BY k"
    )
    assert_equals_native(
        ours,
        tmp_path,
        source,
        event_time="ts",
        delay=watermark,
        size=native_shape[0],
        slide=native_shape[1],
        keys=["k"],
        aggregates=ALL_AGGREGATES,
    )


def test_where_and_expressions_two_keys(spark, tmp_path):
    """WHERE and expressions inside aggregates are Spark SQL in stage 1; two grouping keys."""
    schema = Schema(
        (
            Column("ts", SqlType.TIMESTAMP),
            Column("sym", SqlType.STRING),
            Column("venue", SqlType.INT),
            Column("price", SqlType.DOUBLE),
            Column("volume", SqlType.BIGINT),
        )
    )
    config = GeneratorConfig(tuples=8000, rate=8000, keys=3, delay_us=250_000, batch_size=2000)
    tables = [pa.Table.from_batches([b]) for b in generate(schema, "ts", config, ("sym", "venue"))]
    write_micro_batches(tmp_path / "in", tables)
    source = file_stream(
        spark, tmp_path / "in", "ts TIMESTAMP, sym STRING, venue INT, price DOUBLE, volume BIGINT"
    )
    session = mg.attach(spark)
    session.register("trades", source, event_time="ts", watermark="100 milliseconds")
    ours = session.sql(
        "SELECT sym, venue, window_start, window_end, COUNT(*) AS n, "
        "SUM(price * volume) AS notional, MAX(volume - 1) AS top "
        "FROM trades [RANGE 600 MILLISECONDS SLIDE 300 MILLISECONDS] "
        "WHERE volume > 100 AND price < 90 GROUP BY sym, venue"
    )
    watermarked = source.withWatermark("ts", "100 milliseconds").where(
        "volume > 100 AND price < 90"
    )
    from pyspark.sql import functions as F

    native = (
        watermarked.groupBy(F.window("ts", "600 milliseconds", "300 milliseconds"), "sym", "venue")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.sum(F.col("price") * F.col("volume")).alias("notional"),
            F.max(F.col("volume") - 1).alias("top"),
        )
        .select(
            "sym",
            "venue",
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "n",
            "notional",
            "top",
        )
    )
    assert_same_results(
        run_to_memory(ours, tmp_path / "ours"),
        run_to_memory(native, tmp_path / "native"),
        ["sym", "venue"],
    )


def test_kernel_stage1_equals_spark(spark, tmp_path):
    """The GPU backend's stage 1 path (the backend's lift kernels in mapInArrow), run here
    with the CPU kernels: same results as Spark."""
    from mangonel.runtime.spark.session import SparkMangonelSession

    _, tables = micro_batches(SqlType.STRING, SqlType.DOUBLE, delay_us=300_000, files=4)
    write_micro_batches(tmp_path / "in", tables)
    source = file_stream(spark, tmp_path / "in", "ts TIMESTAMP, k STRING, v DOUBLE")
    session = SparkMangonelSession(spark, backend="cpu", stage1="kernels")
    session.register("s", source, event_time="ts", watermark="200 milliseconds")
    aggregates = [("COUNT(*)", None, "n"), ("AVG", "v", "avg_v"), ("VAR_POP", "v", "var_v")]
    ours = session.sql(
        f"SELECT k, window_start, window_end, {mangonel_select(aggregates)} "
        "FROM s [RANGE 1 SECOND SLIDE 100 MILLISECONDS] WHERE v > 5 GROUP BY k"
    )
    assert "preaggregate=cpu-lift-kernels" in session.explain()
    assert_equals_native(
        ours,
        tmp_path,
        source,
        event_time="ts",
        delay="200 milliseconds",
        size="1 second",
        slide="100 milliseconds",
        keys=["k"],
        aggregates=aggregates,
        where="v > 5",
    )


NATIVE_QUERY = (
    "SELECT k, window_end, COUNT(*) AS n, SUM(v) / COUNT(v) AS mean_v, MIN(v * 2) AS low, "
    "VAR_SAMP(v) AS var_v, STDDEV_POP(v) AS sd_v FROM s "
    "[RANGE 500 MILLISECONDS SLIDE 500 MILLISECONDS] WHERE v > 3 GROUP BY k HAVING COUNT(*) > 2"
)


def test_tumbling_windows_plan_as_native_spark_and_equal_the_two_stage_plan(spark, tmp_path):
    """The cost-based choice: w/s = 1 runs as Spark's own aggregation (EXPLAIN says why),
    with WHERE, HAVING, expressions over aggregates and window bounds transpiled from the
    plan; its results equal mangonel's two-stage plan of the same query, out of order."""
    _, tables = micro_batches(
        SqlType.STRING, SqlType.DOUBLE, delay_us=300_000, files=4, null_keys=True
    )
    write_micro_batches(tmp_path / "in", tables)
    source = file_stream(spark, tmp_path / "in", "ts TIMESTAMP, k STRING, v DOUBLE")
    results = {}
    for native in (None, False):
        session = mg.attach(spark, native=native)
        session.register("s", source, event_time="ts", watermark="200 milliseconds")
        frame = session.sql(NATIVE_QUERY)
        text = session.explain()
        if native is None:
            assert "Spark: native window aggregation (reason: w/s = 1, nothing to expand" in text
            assert "Stage2 applyInPandasWithState" not in text
            assert session.sql("EXPLAIN " + NATIVE_QUERY).startswith(text)
        else:
            assert "Stage2 applyInPandasWithState" in text
        assert frame.schema.names == ["k", "window_end", "n", "mean_v", "low", "var_v", "sd_v"]
        results[native] = run_to_memory(frame, tmp_path / f"out-{native}")
    ours, theirs = results[None], results[False]
    assert len(ours) > 0 and (ours["n"] > 2).all()
    left = ours.sort_values(["window_end", "k"], na_position="last").reset_index(drop=True)
    right = theirs.sort_values(["window_end", "k"], na_position="last").reset_index(drop=True)
    pd.testing.assert_frame_equal(left, right, check_dtype=True, rtol=1e-9, atol=1e-9)


def test_sliding_windows_keep_the_two_stage_plan(spark, tmp_path):
    _, tables = micro_batches(SqlType.BIGINT, SqlType.DOUBLE, delay_us=0, files=1)
    write_micro_batches(tmp_path / "in", tables)
    session = mg.attach(spark)
    session.register(
        "s",
        file_stream(spark, tmp_path / "in", "ts TIMESTAMP, k BIGINT, v DOUBLE"),
        event_time="ts",
    )
    text = session.explain(
        "SELECT k, COUNT(*) AS n FROM s [RANGE 1 SECOND SLIDE 100 MILLISECONDS] GROUP BY k"
    )
    assert "Stage2 applyInPandasWithState" in text
    assert "Spark: native" not in text
    forced = mg.attach(spark, native=True)
    forced.register(
        "s",
        file_stream(spark, tmp_path / "in", "ts TIMESTAMP, k BIGINT, v DOUBLE"),
        event_time="ts",
    )
    text = forced.explain(
        "SELECT k, COUNT(*) AS n FROM s [RANGE 1 SECOND SLIDE 100 MILLISECONDS] GROUP BY k"
    )
    assert "Spark: native window aggregation (reason: native=True requested (w/s = 10))" in text
