"""The reader path of stage 1: a Spark Python Data Source whose partitions run the lift and
pane pre-aggregation where they read the rows (`pane_reader.py`), so only pane partials enter
the JVM.

For a stream declared with `CREATE STREAM ... WITH (source = 'generator' | 'parquet' |
'csv')` the planner (planner.py, stage1="reader") replaces Spark's source and stage 1's
`mapInArrow` with one streaming source, `mangonel_panes`, whose options carry the query's
stage 1 (`pane_reader.ReaderSpec`). Its rows are exactly the partials `stage1.stage1` sends
today (same columns, carrier rows included) plus the partition's watermark time, on which
Spark's `withWatermark` sits. Stage 2 is unchanged.

Offsets: the generator's are tuple counts (`{"tuples": n}`); a file source's the name of the
last file read (`{"file": name}`, files in name order, `files_per_trigger` per micro-batch).
Partitions follow from the offsets alone (generator ranges on chunk boundaries, one per
Parquet row group, one per CSV file), so a restart from the checkpoint reads and
pre-aggregates the same rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from mangonel.catalog.sources.options import file_source
from mangonel.runtime.spark.pane_reader import (
    EVENT_TIME,
    FilePart,
    ReaderSpec,
    absolute,
    file_parts,
    generator_of,
    generator_parts,
    next_files,
    partition_batches,
    read_file_part,
    read_generator_part,
)
from mangonel.runtime.spark.planner import SparkQueryPlan
from mangonel.runtime.spark.schema import spark_interval
from mangonel.runtime.spark.sources import generator_options
from mangonel.runtime.spark.stage1 import (
    BUCKET,
    bucket_column,
    carrier_rows,
    partial_ddl,
    spark_partial_schema,
)

PANES_FORMAT = "mangonel_panes"


@dataclasses.dataclass
class _GeneratorRange(InputPartition):
    start: int
    end: int


@dataclasses.dataclass
class _FileRange(InputPartition):
    path: str
    row_groups: tuple[int, ...] | None


class PaneStreamReader(DataSourceStreamReader):
    """The reader path's streaming source (module docstring: offsets and partitions)."""

    def __init__(self, options: dict[str, str]) -> None:
        self.spec = ReaderSpec.decode(options["spec"])
        self.generated = self.spec.source == "generator"
        if self.generated:
            self.config = generator_of(self.spec.generator).config

    def initialOffset(self) -> dict:
        return {"tuples": 0} if self.generated else {"file": ""}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:  # noqa: ANN401
        start = start or self.initialOffset()
        if self.generated:
            begin = start["tuples"]
            return {"tuples": min(self.config.tuples, begin + self.config.batch_size)}
        return {"file": next_files(self.spec, start["file"])}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        if self.generated:
            ranges = generator_parts(self.spec, start["tuples"], end["tuples"])
            return [_GeneratorRange(begin, finish) for begin, finish in ranges]
        parts = file_parts(self.spec, start["file"], end["file"])
        return [_FileRange(part.path, part.row_groups) for part in parts]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, _GeneratorRange):
            rows = read_generator_part(self.spec, partition.start, partition.end)
        else:
            assert isinstance(partition, _FileRange)
            rows = read_file_part(self.spec, FilePart(partition.path, partition.row_groups))
        yield from partition_batches(self.spec, rows)

    def commit(self, end: dict) -> None:
        """Nothing to release: every offset's rows can be read again."""


class PaneDataSource(DataSource):
    """`spark.readStream.format("mangonel_panes").option("spec", ...).option("schema", ...)`."""

    @classmethod
    def name(cls) -> str:
        return PANES_FORMAT

    def schema(self) -> str:
        return self.options["schema"]

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return PaneStreamReader(dict(self.options))


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
    spark.dataSource.register(PaneDataSource)
    # the partial columns, a holistic function's BINARY values columns included
    schema = partial_ddl(window) + f", {EVENT_TIME} TIMESTAMP"
    return (
        spark.readStream.format(PANES_FORMAT)
        .option("spec", spec.encode())
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
