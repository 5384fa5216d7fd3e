"""Spark's and Flink's window syntax inside Spark: the same SQL text plans as the CQL clause
there too (Spark's `window()` form against Spark's native aggregation), and CUMULATE windows
(which Spark has no native form of) equal the standalone result on the same micro-batches."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest
from spark_harness import (
    assert_equals_native,
    assert_same_results,
    file_stream,
    run_to_memory,
    write_micro_batches,
)
from test_spark_equality import micro_batches

import mangonel as mg
from mangonel.catalog.types import SqlType
from mangonel.runtime.local.query import LocalQuery

pytestmark = pytest.mark.spark

AGGREGATES = [("COUNT(*)", None, "n"), ("SUM", "v", "sum_v"), ("MAX", "v", "max_v")]


def test_spark_window_form_equals_spark_native(spark, tmp_path):
    _, tables = micro_batches(SqlType.BIGINT, SqlType.DOUBLE, delay_us=300_000, files=3)
    write_micro_batches(tmp_path / "in", tables)
    source = file_stream(spark, tmp_path / "in", "ts TIMESTAMP, k BIGINT, v DOUBLE")
    session = mg.attach(spark, native=False)
    session.register("s", source, event_time="ts", watermark="200 milliseconds")
    ours = session.sql(
        "SELECT k, window.start AS window_start, window.end AS window_end, COUNT(*) AS n, "
        "SUM(v) AS sum_v, MAX(v) AS max_v FROM s "
        "GROUP BY window(ts, '1 second', '100 milliseconds'), k"
    )
    assert_equals_native(
        ours,
        tmp_path,
        source,
        event_time="ts",
        delay="200 milliseconds",
        size="1 second",
        slide="100 milliseconds",
        keys=["k"],
        aggregates=AGGREGATES,
    )


CUMULATE = (
    "SELECT k, window_start, window_end, COUNT(*) AS n, SUM(v) AS sum_v, MAX(v) AS max_v "
    "FROM TABLE(CUMULATE(TABLE s, DESCRIPTOR(ts), INTERVAL '100' MILLISECOND, "
    "INTERVAL '500' MILLISECOND)) GROUP BY window_start, window_end, k"
)


def test_cumulate_inside_spark_equals_standalone(spark, tmp_path):
    """In-order rows: inside Spark a micro-batch's lateness and firing use the watermarks of
    one and two micro-batches before (stage2.py), standalone the ones of the batch before and
    of the batch itself; rows out of order across batches would count in different windows
    for any window kind, so this compares the CUMULATE geometry alone."""
    _, tables = micro_batches(SqlType.BIGINT, SqlType.DOUBLE, delay_us=0, files=3)
    write_micro_batches(tmp_path / "in", tables)
    source = file_stream(spark, tmp_path / "in", "ts TIMESTAMP, k BIGINT, v DOUBLE")
    session = mg.attach(spark)  # CUMULATE: never the native plan (EXPLAIN says why)
    session.register("s", source, event_time="ts", watermark="200 milliseconds")
    ours = run_to_memory(session.sql(CUMULATE), tmp_path / "ours")

    alone = mg.Session(backend="cpu")
    alone.execute(
        "CREATE STREAM s (ts TIMESTAMP, k BIGINT, v DOUBLE) "
        "WITH (event_time = 'ts', watermark = '200 milliseconds')"
    )
    # Spark never reaches end of input: the windows its last watermark fired, no more
    runner = LocalQuery(alone.sql(CUMULATE).plan)
    fired = [b for table in tables for b in runner.process(table.combine_chunks().to_batches()[0])]
    standalone = pa.Table.from_batches(fired).to_pandas()
    assert_same_results(ours, standalone, ["k"])


def test_cumulate_is_never_planned_natively():
    """Planning only (no Spark job): Spark's window() has no CUMULATE form, so the choice is
    mangonel's two stages, with the reason EXPLAIN prints; forcing native is an error."""
    from mangonel.errors import PlanError
    from mangonel.runtime.spark.planner import plan_spark

    session = mg.Session(backend="cpu")
    session.execute(
        "CREATE STREAM s (ts TIMESTAMP, k BIGINT, v DOUBLE) "
        "WITH (event_time = 'ts', watermark = '200 milliseconds')"
    )
    plan = session.sql(CUMULATE).plan
    planned = plan_spark(CUMULATE, plan, partitions=2)
    assert not planned.native and "CUMULATE" in planned.native_reason
    with pytest.raises(PlanError, match="CUMULATE"):
        plan_spark(CUMULATE, plan, partitions=2, native=True)


def test_the_window_struct_column_inside_spark_equals_its_fields(spark, tmp_path):
    """`SELECT window, ...` inside Spark: a StructType column (start, end timestamps) named
    `window`, through the stateful stage (flattened there, nested after it) and Spark's
    native plan alike, holding what `window.start` / `window.end` select."""
    from pyspark.sql.types import StructField, StructType, TimestampType

    _, tables = micro_batches(SqlType.BIGINT, SqlType.DOUBLE, delay_us=300_000, files=3)
    write_micro_batches(tmp_path / "in", tables)
    source = file_stream(spark, tmp_path / "in", "ts TIMESTAMP, k BIGINT, v DOUBLE")
    # one query holds the struct and the fields it must equal, row by row
    query = (
        "SELECT window, window.start AS window_start, window.end AS window_end, k, "
        "SUM(v) AS sum_v FROM s GROUP BY window(ts, '1 second', '500 milliseconds'), k"
    )
    expected_type = StructType(
        [StructField("start", TimestampType(), False), StructField("end", TimestampType(), False)]
    )
    results = {}
    for native in (False, True):
        session = mg.attach(spark, native=native)
        session.register("s", source, event_time="ts", watermark="200 milliseconds")
        ours = session.sql(query)
        assert ours.schema["window"].dataType.simpleString() == expected_type.simpleString()
        got = run_to_memory(ours, tmp_path / f"struct_{native}")
        windows = got.pop("window")
        for field in ("start", "end"):  # as instants, as assert_same_results compares them
            inside = pd.to_datetime([w[field] for w in windows], utc=True)
            assert list(inside) == list(pd.to_datetime(got[f"window_{field}"], utc=True))
        results[native] = got
    assert_same_results(results[False], results[True], ["k"])  # both plans, the same rows
