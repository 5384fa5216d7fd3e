"""Spark streaming sources for `CREATE STREAM ... WITH (source = ...)`.

- `generator`: mangonel's synthetic stream as a real Spark streaming source (pyspark's Python
  Data Source API, `DataSourceStreamReader`): offsets are tuple counts, so a query restarted
  from its checkpoint re-reads exactly the tuples it had not committed. Rows [a, b) are the
  same for a given seed whatever the micro-batch boundaries, because every fixed-size chunk
  of the stream is generated from its own seed.
- `parquet` / `csv`: Spark's file sources over a folder (`path`), one or more files per
  micro-batch (`files_per_trigger`). Malformed CSV values read as NULL (PERMISSIVE mode).
- `kafka`: Spark's Kafka source (`bootstrap_servers`, `topic`); the message value is JSON
  (`format = 'json'`, the default) or CSV with the stream's columns. Needs the
  spark-sql-kafka package on the Spark classpath.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from mangonel.catalog.catalog import Schema, Stream, Table
from mangonel.catalog.sources.options import (
    file_source,
    generator_reader_options,
    generator_source,
    source_of,
)
from mangonel.compiler.parse import parse_duration
from mangonel.errors import CatalogError
from mangonel.runtime.spark.pane_reader import CHUNK_ROWS, generator_of, read_generator_rows
from mangonel.runtime.spark.schema import schema_ddl

GENERATOR_FORMAT = "mangonel_generator"


def columns_option(schema: Schema) -> str:
    return json.dumps([[c.name, c.type.value, c.nullable] for c in schema.columns])


@dataclasses.dataclass
class _ChunkRange(InputPartition):
    start: int
    end: int


class GeneratorStreamReader(DataSourceStreamReader):
    """Offsets are {"tuples": n}: the first n tuples of the generated stream have been read."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.config = generator_of(options).config
        self.rows_per_batch = self.config.batch_size

    def initialOffset(self) -> dict:
        return {"tuples": 0}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        begin = (start or {"tuples": 0})["tuples"]
        return {"tuples": min(self.config.tuples, begin + self.rows_per_batch)}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        # One partition per chunk touched, so Spark reads chunks in parallel.
        begin, finish = start["tuples"], end["tuples"]
        ranges = []
        position = begin
        while position < finish:
            chunk_end = min(finish, (position // CHUNK_ROWS + 1) * CHUNK_ROWS)
            ranges.append(_ChunkRange(position, chunk_end))
            position = chunk_end
        return ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _ChunkRange)
        yield from read_generator_rows(self.options, partition.start, partition.end)

    def commit(self, end: dict) -> None:
        """Nothing to release: the stream is a pure function of its offsets."""


class GeneratorDataSource(DataSource):
    """`spark.readStream.format("mangonel_generator").options(schema=..., columns=...,
    event_time=..., tuples=..., rate=..., keys=..., ...)`: the generator options of
    mangonel.catalog.sources.options (`generator_options(stream)` builds them)."""

    @classmethod
    def name(cls) -> str:
        return GENERATOR_FORMAT

    def schema(self) -> str:
        return self.options["schema"]

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return GeneratorStreamReader(dict(self.options))


def register_generator(spark: SparkSession) -> None:
    spark.dataSource.register(GeneratorDataSource)


def _option(stream: Stream, key: str, default: str | None = None) -> str:
    value = stream.option(key, default)
    if value is None:
        raise CatalogError(
            f"stream {stream.name!r} with source = '{stream.option('source')}' needs the "
            f"option {key!r}",
            hint=f"CREATE STREAM {stream.name} (...) WITH (..., {key} = '...')",
        )
    return value


def generator_options(stream: Stream) -> dict[str, str]:
    """The reader options of a generator stream: its generator options, checked now (so a bad
    value fails at CREATE STREAM, not when the query starts), plus schema and event time."""
    generator = generator_source(
        dict(stream.options),
        stream.schema,
        stream.event_time,
        stream.name,
        durations=parse_duration,
    )
    options = generator_reader_options(generator)
    options["stream"] = stream.name
    options["schema"] = schema_ddl(stream.schema)
    options["columns"] = columns_option(stream.schema)
    options["event_time"] = stream.event_time
    return options


def _check_local_path(path: str, owner: str) -> None:
    """A local path (no `scheme://`) that does not exist, named with its option: Spark's
    own error came as an AnalysisException with a plan. Remote paths are Spark's to check."""
    if "://" not in path and not Path(path).exists():
        raise CatalogError(
            f"{owner}: path = {path!r} does not exist",
            hint="give an existing file or folder (relative paths start at the working directory)",
        )


def read_table(spark: SparkSession, table: Table) -> DataFrame:
    """The DataFrame of a static table declared `WITH (source = 'parquet' | 'csv', path =
    ...)` (options checked by `catalog.options.check_table_options`): Spark's batch reader,
    with the table's columns (CSV: PERMISSIVE, as a stream's files)."""
    options = dict(table.options)
    source = options["source"].lower()
    _check_local_path(options["path"], f"table {table.name!r}")
    reader = spark.read.schema(schema_ddl(table.schema))
    if source == "csv":
        header = options.get("header", "true").strip().lower()
        reader = reader.option("header", header).option("mode", "PERMISSIVE")
    return reader.format(source).load(options["path"])


def create_source(spark: SparkSession, stream: Stream) -> DataFrame:
    """The streaming DataFrame a `CREATE STREAM ... WITH (source = ...)` reads."""
    source = source_of(dict(stream.options), stream.name)
    if source is None:
        raise CatalogError(
            f"stream {stream.name!r} has no source option, so Spark cannot read it",
            hint="source = 'generator' | 'parquet' | 'csv' | 'kafka', or build the streaming "
            "DataFrame yourself and call register(name, df, event_time=...)",
        )
    ddl = schema_ddl(stream.schema)
    if source == "generator":
        options = generator_options(stream)  # checked before Spark is touched
        register_generator(spark)
        return spark.readStream.format(GENERATOR_FORMAT).options(**options).load()
    if source in ("parquet", "csv"):
        files = file_source(dict(stream.options), stream.name, source)
        _check_local_path(files.path, f"stream {stream.name!r}")
        reader = spark.readStream.schema(ddl).option("maxFilesPerTrigger", files.files_per_trigger)
        if source == "csv":
            reader = reader.option("header", str(files.header).lower()).option("mode", "PERMISSIVE")
        return reader.format(source).load(files.path)
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", _option(stream, "bootstrap_servers"))
        .option("subscribe", _option(stream, "topic"))
        .option("startingOffsets", stream.option("starting_offsets", "earliest"))
    )
    try:
        raw = reader.load()
    except Exception as error:  # the Kafka connector is not on the classpath
        raise CatalogError(
            f"stream {stream.name!r}: Spark could not create its Kafka source "
            f"({type(error).__name__}: {str(error).splitlines()[0]})",
            hint="start Spark with the connector, e.g. spark.jars.packages = "
            "'org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>'",
        ) from error
    value = F.col("value").cast("string")
    if stream.option("format", "json").lower() == "csv":
        parsed = F.from_csv(value, ddl)
    else:
        parsed = F.from_json(value, ddl)
    return raw.select(parsed.alias("row")).select("row.*")
