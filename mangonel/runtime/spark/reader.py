"""The reader path of stage 1: a Spark Python Data Source whose partitions run the lift and
pane pre-aggregation where they read the rows (`pane_reader.py`), so only pane partials enter
the JVM.

For a stream declared with `CREATE STREAM ... WITH (source = 'generator' | 'parquet' |
'csv')` the planner (planner.py, stage1="reader") replaces Spark's source and stage 1's
`mapInArrow` with one streaming source, `mangonel_panes` (reader_source.py: its offsets,
partitions and classes, light to import), whose options carry the query's stage 1
(`pane_reader.ReaderSpec`). Its rows are exactly the partials `stage1.stage1` sends today
(same columns, carrier rows included) plus the partition's watermark time, on which Spark's
`withWatermark` sits. Stage 2 is unchanged.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from mangonel.catalog.sources.options import file_source
from mangonel.runtime.spark.pane_reader import EVENT_TIME, ReaderSpec, absolute
from mangonel.runtime.spark.planner import SparkQueryPlan
from mangonel.runtime.spark.reader_source import PANES_FORMAT, PaneDataSource
from mangonel.runtime.spark.schema import spark_interval
from mangonel.runtime.spark.sources import generator_options
from mangonel.runtime.spark.stage1 import (
    BUCKET,
    bucket_column,
    carrier_rows,
    partial_ddl,
    spark_partial_schema,
)


def reader_spec(planned: SparkQueryPlan, splits: int) -> ReaderSpec:
    """The reader's options of a planned query (its stream declared with a source option)."""
    window = planned.window
    stream = window.lift.scan.stream
    source = stream.option("source").lower()
    schema = spark_partial_schema(window).append(pa.field(EVENT_TIME, pa.timestamp("us", "UTC")))
    spec = ReaderSpec(
        window,
        planned.stage1_placements,
        source,
        schema,
        # stage 2 in Python: one carrier row per bucket wakes every bucket (stage1.py);
        # Spark's native stage 2: one carrier row carries the partition's watermark time
        carrier_rows(window, 1 if planned.stage2 == "native" else planned.buckets),
        splits=splits,
    )
    if source == "generator":
        spec.generator = generator_options(stream)
    else:
        files = file_source(dict(stream.options), stream.name, source)
        spec.path = absolute(files.path)
        spec.files_per_trigger = files.files_per_trigger
        spec.header = files.header
    return spec


def reader_partials(spark: SparkSession, planned: SparkQueryPlan) -> DataFrame:
    """The reader's rows: the partials of the query's stream with the partition's
    watermark time (EVENT_TIME), no watermark yet."""
    window = planned.window
    spec = reader_spec(planned, spark.sparkContext.defaultParallelism)
    # the partial columns, a holistic function's BINARY values columns included
    schema = partial_ddl(window) + f", {EVENT_TIME} TIMESTAMP"
    return panes_stream(spark, spec, schema)


def panes_stream(spark: SparkSession, spec: ReaderSpec, schema: str) -> DataFrame:
    """The `mangonel_panes` streaming source of `spec`, its rows in `schema` (DDL)."""
    spark.dataSource.register(PaneDataSource)
    return (
        spark.readStream.format(PANES_FORMAT)
        .option("spec", spec.encode())
        .option("offsets", spec.offsets().encode())
        .option("schema", schema)
        .load()
    )


def reader_stage1(spark: SparkSession, planned: SparkQueryPlan) -> DataFrame:
    """Stage 1 of the reader path for mangonel's Python stage 2: the partials keyed by
    bucket, with Spark's watermark on the partition's watermark time (then dropped: stage 2
    has its own never-late column, stage2.py)."""
    window = planned.window
    frame = reader_partials(spark, planned)
    delay = spark_interval(window.window.watermark_delay_us)
    partials = frame.withWatermark(EVENT_TIME, delay).drop(EVENT_TIME)
    return partials.withColumn(BUCKET, bucket_column(window, planned.buckets))
