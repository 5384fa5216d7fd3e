"""The pane reader's work, free of pyspark: what each partition of the reader path
(`reader.py`, Spark's Python Data Source API) runs on an executor. The GPU machine (no Java,
no Spark) runs and tests these directly.

For sources mangonel can read itself (the built-in generator, Parquet and CSV files), the
reader reads a partition's rows in Python and runs stage 1 there — the window operator's
stateless `preaggregate` (lift: WHERE, keys, pane, arguments; then one partial per (key,
pane)), on this executor's backend (`functions.stage1_preaggregate`) — so only pane partials
ever enter the JVM, instead of every row crossing it twice (source -> JVM -> `mapInArrow`).

What a partition yields (`partition_batches`): the carrier rows (one per bucket, stage1.py:
every bucket runs in every micro-batch), then its partials, in Spark's partial columns plus
`EVENT_TIME`, the partition's watermark time. Spark's `withWatermark` sits on that column, so
Spark's watermark is computed from the rows exactly as on the DataFrame path: there Spark
pushes the WHERE conjuncts that do not read the event time below its `withWatermark`, so the
maximum covers the rows those conjuncts keep (NULL event times add 0 ms, which never moves a
watermark: Spark's starts at 0 and only rises). `watermark_time` takes the maximum over the
same rows; every row of the partition carries it (or NULL when no row counts), so the
micro-batch's maximum, and with it W_N, is the DataFrame path's.

Partitions are pure functions of the offsets (`file_parts`, `generator_parts`): a query
restarted from its checkpoint reads the same rows into the same partitions.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import pickle
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sqlglot import exp

from mangonel.catalog.catalog import Column, Schema
from mangonel.catalog.sources.files import read_files
from mangonel.catalog.sources.generator import generate
from mangonel.catalog.sources.options import GeneratorSource, generator_source
from mangonel.catalog.types import SqlType, type_from_name
from mangonel.compiler import physical as ph
from mangonel.compiler.parse import parse_duration
from mangonel.errors import DataError
from mangonel.runtime.cpu.evaluation import evaluate_expression
from mangonel.runtime.host.arrays import batch_columns, column, to_mask, to_values
from mangonel.runtime.spark.functions import stage1_leaf, stage1_preaggregate
from mangonel.runtime.spark.reader_offsets import CHUNK_ROWS, FilePart, Part, SourceOffsets

EVENT_TIME = "__mangonel_event_time"  # the partition's watermark time, on each of its rows
EVENT_TIME_TYPE = pa.timestamp("us", tz="UTC")
READER_SOURCES = ("generator", "parquet", "csv")


@dataclasses.dataclass
class ReaderSpec:
    """Everything a reader partition needs, built once on the driver (`reader.py`) and
    shipped to the executors as one option string (`encode` / `decode`)."""

    window: ph.WindowAggregateExec
    placements: tuple[ph.Placement, ...]  # stage 1's, as the Spark planner placed them
    source: str  # one of READER_SOURCES
    spark_schema: pa.Schema  # the partial columns as Spark names them, then EVENT_TIME
    carriers: pa.RecordBatch  # one row per bucket (stage1.carrier_rows), without EVENT_TIME
    generator: dict[str, str] = dataclasses.field(default_factory=dict)  # reader options
    path: str = ""  # files: an absolute file or folder
    files_per_trigger: int = 1
    header: bool = True  # CSV
    splits: int = 2  # generator: partitions per micro-batch
    # the reader-fed plan (reader_batch.py): after data, an offset that only marks it flushed
    # gives Spark's no-data micro-batch without a stateful operator
    flush: bool = False

    def offsets(self) -> SourceOffsets:
        """What the source's offsets and partitions depend on (reader_source.py)."""
        tuples = batch_size = 0
        if self.source == "generator":
            config = generator_of(self.generator).config
            tuples, batch_size = config.tuples, config.batch_size
        return SourceOffsets(
            self.source,
            self.path,
            self.files_per_trigger,
            self.splits,
            self.flush,
            tuples,
            batch_size,
        )

    def encode(self) -> str:
        return base64.b64encode(pickle.dumps(self)).decode("ascii")

    @staticmethod
    def decode(text: str) -> ReaderSpec:
        spec = pickle.loads(base64.b64decode(text.encode("ascii")))
        if not isinstance(spec, ReaderSpec):
            raise DataError("the pane reader's options do not describe a reader")
        return spec


# -- the watermark ---------------------------------------------------------------------------


def conjuncts(expression: exp.Expression) -> list[exp.Expression]:
    while isinstance(expression, exp.Paren):
        expression = expression.this
    if isinstance(expression, exp.And):
        return conjuncts(expression.left) + conjuncts(expression.right)
    return [expression]


def watermark_predicate(window: ph.WindowAggregateExec) -> exp.Expression | None:
    """The WHERE conjuncts Spark pushes below `withWatermark` on the DataFrame path (those
    that do not read the event time, Spark's PushPredicateThroughNonJoin): the rows they
    keep are the rows Spark's watermark is computed from. None: every row counts."""
    predicate = window.lift.predicate
    if predicate is None:
        return None
    event_time = window.lift.scan.stream.event_time.lower()
    pushed = [
        part
        for part in conjuncts(predicate)
        if not any(c.name.lower() == event_time for c in part.find_all(exp.Column))
    ]
    if not pushed:
        return None
    combined = pushed[0]
    for part in pushed[1:]:
        combined = exp.And(this=combined, expression=part)
    return combined


def watermark_time(
    window: ph.WindowAggregateExec, predicate: exp.Expression | None, table: pa.RecordBatch
) -> int | None:
    """The largest event time (microseconds) among the rows Spark's watermark counts
    (`watermark_predicate`), or None when none has one."""
    columns = batch_columns(table)
    event_time = column(columns, window.lift.scan.stream.event_time)
    times, valid = to_values(event_time, np.dtype(np.int64))
    if predicate is not None and table.num_rows:
        types = {c.name: c.type for c in window.lift.scan.columns}
        valid = valid & to_mask(
            evaluate_expression(predicate, types, columns, length=table.num_rows)
        )
    return int(times[valid].max()) if valid.any() else None


# -- one partition ---------------------------------------------------------------------------


def partition_batches(spec: ReaderSpec, rows: pa.Table) -> Iterator[pa.RecordBatch]:
    """What one reader partition hands Spark: carrier rows, then the (key, pane) partials of
    `rows` (the partition's rows, stream columns), each row with the partition's watermark
    time in EVENT_TIME."""
    window = spec.window
    top = None
    partials = None
    if rows.num_rows:
        combined = rows.combine_chunks().to_batches()[0]  # one batch: the chunks combined
        batch = combined
        predicate = watermark_predicate(window)
        if predicate is not None:  # evaluated on the declared types, as the lift does
            batch = stage1_leaf(window, spec.placements).conform.conform_types(batch)
        top = watermark_time(window, predicate, batch)
        partials = stage1_preaggregate(window, spec.placements, combined)
    yield _with_event_time(spec.carriers, top)
    if partials is not None and partials.num_rows:
        named = spec.spark_schema.remove(len(spec.spark_schema) - 1)
        # the operator's names in plan order; Spark's differ (spark_name) but not the order
        columns = [partials.column(i).cast(f.type) for i, f in enumerate(named)]
        yield _with_event_time(pa.RecordBatch.from_arrays(columns, schema=named), top)


def _with_event_time(batch: pa.RecordBatch, top: int | None) -> pa.RecordBatch:
    if top is None:
        times = pa.nulls(batch.num_rows, EVENT_TIME_TYPE)
    else:
        times = pa.array(np.full(batch.num_rows, top, np.int64), pa.int64()).cast(EVENT_TIME_TYPE)
    return pa.RecordBatch.from_arrays(
        [*batch.columns, times], schema=batch.schema.append(pa.field(EVENT_TIME, EVENT_TIME_TYPE))
    )


# -- offsets and partitions ------------------------------------------------------------------


def read_file_part(spec: ReaderSpec, part: FilePart) -> pa.Table:
    """The rows of one file partition, with the columns the query reads (Parquet: in the
    file's own types, which the operator's conformance step meets with the declared ones)."""
    scan = spec.window.lift.scan
    if spec.source == "parquet":
        names = [c.name for c in scan.columns]
        try:
            return pq.ParquetFile(part.path).read_row_groups(list(part.row_groups), columns=names)
        except (pa.ArrowException, OSError, KeyError) as error:
            raise DataError(f"{part.path}: {error}") from None
    batches = list(
        read_files(part.path, "csv", scan.stream.schema, batch_size=1 << 30, header=spec.header)
    )
    return pa.Table.from_batches(batches, schema=scan.stream.schema.to_arrow())


def schema_from_options(options: dict[str, str]) -> Schema:
    """The stream schema of generator reader options ("columns": JSON [[name, type,
    nullable], ...]: exact, unlike re-parsing the DDL string)."""
    return Schema(
        tuple(
            Column(name, type_from_name(type_name) or SqlType.STRING, nullable)
            for name, type_name, nullable in json.loads(options["columns"])
        )
    )


def generator_of(options: dict[str, str]) -> GeneratorSource:
    """The generator the reader options describe (checked once already, at CREATE STREAM)."""
    return generator_source(
        options,
        schema_from_options(options),
        options["event_time"],
        options.get("stream", "generator"),
        durations=parse_duration,
    )


def read_generator_rows(options: dict[str, str], start: int, end: int) -> Iterator[pa.RecordBatch]:
    """Tuples [start, end) of the generated stream, chunk by chunk."""
    generator = generator_of(options)
    config = generator.config
    schema = schema_from_options(options)
    position = start
    while position < end:
        chunk = position // CHUNK_ROWS
        chunk_start = chunk * CHUNK_ROWS
        chunk_rows = min(CHUNK_ROWS, config.tuples - chunk_start)
        chunk_config = dataclasses.replace(
            config,
            tuples=chunk_rows,
            batch_size=chunk_rows,
            seed=config.seed * 1_000_003 + chunk,
            start_us=config.start_us + chunk_start * 1_000_000 // config.rate,
        )
        batch = next(generate(schema, options["event_time"], chunk_config, generator.key_columns))
        stop = min(end, chunk_start + chunk_rows)
        yield batch.slice(position - chunk_start, stop - position)
        position = stop


def read_generator_part(spec: ReaderSpec, begin: int, end: int) -> pa.Table:
    batches = list(read_generator_rows(spec.generator, begin, end))
    return pa.Table.from_batches(batches)


def read_part(spec: ReaderSpec, part: Part) -> Iterator[pa.RecordBatch]:
    """One part's batches (`partition_batches`), read where it is asked: in a Spark task, or
    on the driver (reader_ahead.py)."""
    if isinstance(part, FilePart):
        rows = read_file_part(spec, part)
    else:
        rows = read_generator_part(spec, *part)
    yield from partition_batches(spec, rows)


def absolute(path: str) -> str:
    """A file source's path as the executors must see it (relative: to the driver's working
    directory, as Spark's file sources read it)."""
    return str(Path(path).resolve())
