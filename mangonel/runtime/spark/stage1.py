"""Stage 1 inside Spark: stateless, parallel over every input partition.

Filter and projection run natively in Spark (the plan's sqlglot expressions transpiled to Spark
SQL that cannot raise under ANSI mode, `runtime.spark.sql`): the WHERE predicate (and
`event_time IS NOT NULL`), the key columns, the pane id `floor(ts / pane_length)` (exact
integer arithmetic) and one column per aggregate argument — only these cross into Python, since
the JVM -> Arrow copy is stage 1's main cost. Spark Structured Streaming has no stateless
grouped aggregation (every streaming `groupBy` is a stateful operator with its own state store
and watermark delay), so the pane pre-aggregation itself — one partial per (key, pane) of the
partition — runs in `mapInArrow`: Arrow's C++ hash aggregation on the CPU backend, the
backend's lift kernels on the GPU backend. Only these partials cross the shuffle to stage 2,
keyed by `__mangonel_bucket` (Spark's hash of the keys, computed natively on the partials).

Partial rows (`partial_schema`) are exactly what the window operator's `preaggregate` writes and its
`merge` reads: the key columns (declared types, original names), `__pane` (BIGINT), then the
state fields in plan order, one column per part of the field's kind (`<name>` for a kind of one
part, BIGINT or DOUBLE storage; `<name>.<part>` otherwise: MOMENTS has `<name>.n`,
`<name>.mean`, `<name>.m2`). Cells of a partial whose argument was all NULL hold the field's
neutral element (`physical.neutral`: 0 for counts, sums and moments; for MIN/MAX the
largest/smallest value in Spark's order: the int64 range, NaN and -inf). The Arrow
aggregations of each kind are its `arrow` face (`mangonel.aggregates`). A holistic function's
`values` field (raw values, no partial state) follows the incremental fields as one BINARY
column: the (key, pane)'s non-NULL values as packed int64 order keys
(`runtime.operators.pane_values`; empty where all were NULL), collected with Arrow's `list`
aggregation; stage 2's holistic operator keeps them per pane.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from sqlglot import exp

from mangonel.aggregates.holistic import order_keys
from mangonel.catalog.types import SqlType
from mangonel.compiler import physical as ph
from mangonel.compiler.holistic import incremental_part
from mangonel.runtime.operators import pane_values
from mangonel.runtime.operators.base import PANE_META, partial_column_name
from mangonel.runtime.operators.kernels import neutral
from mangonel.runtime.spark.schema import ddl, quote
from mangonel.runtime.spark.sql import lift_sql

PANE = PANE_META  # the window operator's partial format, shared with stage 2
BUCKET = "__mangonel_bucket"


def argument_column(position: int) -> str:
    return f"__mangonel_arg{position}"


def field_columns(field: ph.StateField) -> list[tuple[str, SqlType]]:
    """The partial columns of a state field, named and typed as the window operator's
    `preaggregate` writes them (storage types: BIGINT for integer accumulators, else DOUBLE)."""
    dtype, neutrals = neutral(field)
    sql_type = SqlType.BIGINT if dtype == np.dtype(np.int64) else SqlType.DOUBLE
    parts = len(neutrals)
    return [(partial_column_name(field, part), sql_type) for part in range(parts)]


def partial_columns(window: ph.WindowAggregateExec) -> list[tuple[str, SqlType]]:
    """Keys, pane and the incremental fields' columns (the holistic `values` fields follow
    them as BINARY columns: `values_columns`)."""
    columns = [(k.name, k.type) for k in window.keys]
    columns.append((PANE, SqlType.BIGINT))
    for field in incremental_part(window).fields:
        columns.extend(field_columns(field))
    return columns


def values_columns(window: ph.WindowAggregateExec) -> list[str]:
    """The BINARY partial columns of the holistic `values` fields: per (key, pane) its
    non-NULL values as packed int64 order keys (`runtime.operators.pane_values`)."""
    return [f.name for f in window.fields if f.kind.holistic]


def partial_schema(window: ph.WindowAggregateExec) -> pa.Schema:
    """The partials as the window operator names them (`merge` reads these names)."""
    fields = [pa.field(n, t.info.arrow) for n, t in partial_columns(window)]
    return pa.schema(fields + [pa.field(n, pa.binary()) for n in values_columns(window)])


def partial_ddl(window: ph.WindowAggregateExec) -> str:
    """Spark's schema of stage 1's output (mapInArrow)."""
    binary = [f"{quote(spark_name(n))} BINARY" for n in values_columns(window)]
    return ", ".join([ddl(spark_partial_columns(window)), *binary])


def spark_name(name: str) -> str:
    # pyspark's applyInPandasWithState resolves its input columns unquoted, so a dot in a
    # name ("moments_4.n") would read as a struct field: Spark sees "moments_4__n".
    return name.replace(".", "__")


def spark_partial_columns(window: ph.WindowAggregateExec) -> list[tuple[str, SqlType]]:
    """What leaves stage 1: the partial columns, with names Spark can resolve."""
    return [(spark_name(n), t) for n, t in partial_columns(window)]


def spark_partial_schema(window: ph.WindowAggregateExec) -> pa.Schema:
    fields = [pa.field(n, t.info.arrow) for n, t in spark_partial_columns(window)]
    binary = [pa.field(spark_name(n), pa.binary()) for n in values_columns(window)]
    return pa.schema(fields + binary)


def distinct_arguments(window: ph.WindowAggregateExec) -> list[exp.Expression]:
    arguments: list[exp.Expression] = []
    for field in window.fields:
        if field.argument is not None and field.argument not in arguments:
            arguments.append(field.argument)
    return arguments


def bucket_column(window: ph.WindowAggregateExec, buckets: int) -> SparkColumn:
    """The key bucket of a partial row: Spark's own hash of the key columns mod `buckets`;
    carrier rows (row count 0) name their bucket in the pane column."""
    rows = F.col(spark_name(window.fields[0].name))
    if window.keys:
        hashed = F.hash(*[F.col(quote(k.name)) for k in window.keys])
        keyed = F.pmod(hashed, F.lit(buckets))
    else:
        keyed = F.lit(0)
    return F.when(rows == 0, F.col(PANE)).otherwise(keyed).cast("int")


def lift_select(window: ph.WindowAggregateExec) -> tuple[str, list[SparkColumn]]:
    """(WHERE text, projected columns) of the native part of stage 1. Only what the
    pre-aggregation reads crosses into Python (the JVM -> Arrow copy is stage 1's main cost):
    keys, pane id, aggregate arguments. Rows without an event time are dropped here."""
    lift = window.lift
    scan = lift.scan
    where = f"{quote(scan.stream.event_time)} IS NOT NULL"
    if lift.predicate is not None:
        where += f" AND ({lift_sql(lift.predicate, scan)})"
    pane_length = window.pane_length
    # pmod keeps the pane id exact (floor division also for times before 1970).
    pane = F.expr(
        f"(unix_micros({quote(scan.stream.event_time)}) - "
        f"pmod(unix_micros({quote(scan.stream.event_time)}), {pane_length})) div {pane_length}"
    )
    columns = [F.col(quote(k.name)) for k in window.keys]
    columns.append(pane.alias(PANE))
    for position, argument in enumerate(distinct_arguments(window)):
        columns.append(F.expr(lift_sql(argument, scan)).alias(argument_column(position)))
    return where, columns


def arrow_preaggregate(window: ph.WindowAggregateExec) -> Callable[[pa.Table], pa.RecordBatch]:
    """The CPU pane pre-aggregation of one partition's rows (Arrow's hash aggregation); a
    holistic `values` field collects each group's order keys (Arrow's `list`), packed."""
    schema = spark_partial_schema(window)
    keys = [k.name for k in window.keys]
    arguments = distinct_arguments(window)

    def column_of(field: ph.StateField) -> str:
        return argument_column(arguments.index(field.argument))

    def preaggregate(table: pa.Table) -> pa.RecordBatch:
        aggregations: list[tuple] = []
        requested: list[int] = []  # how many aggregations each field asked for
        derived: dict[str, pa.ChunkedArray] = {}  # extra input columns, computed once
        for field in window.fields:
            if field.argument is None:
                aggregations.append(([], "count_all"))
                requested.append(1)
                continue
            source = column_of(field)
            if field.kind.holistic:
                name = f"{field.name}.order_keys"
                derived[name] = _order_keys(table[source])
                aggregations.append((name, "list"))
                requested.append(1)
                continue
            extra, asked = field.kind.arrow.requests(source, table[source], field.type)
            derived.update(extra)
            aggregations.extend(asked)
            requested.append(len(asked))
        for name, column in derived.items():
            table = table.append_column(name, column)
        grouping_columns = keys + [PANE]
        grouped = table.group_by(grouping_columns, use_threads=False).aggregate(aggregations)
        # Output order differs between pyarrow versions (keys first in >= 22): locate the
        # aggregates as the columns that are not grouping keys, in request order.
        by_name: dict[str, pa.Array | pa.ChunkedArray] = {
            name: grouped[name] for name in grouping_columns
        }
        grouping = set(grouping_columns)
        aggregate_positions = [
            i for i, name in enumerate(grouped.column_names) if name not in grouping
        ]
        position = 0
        for field, count in zip(window.fields, requested, strict=True):
            columns = [grouped.column(i) for i in aggregate_positions[position : position + count]]
            position += count
            if field.kind.holistic:
                by_name[spark_name(field.name)] = _packed(columns[0])
                continue
            dtype, neutrals = neutral(field)
            results = field.kind.arrow.results(columns, dtype, neutrals)
            for part, array in enumerate(results):
                by_name[spark_name(partial_column_name(field, part))] = array
        combined = [
            pa.chunked_array(a).combine_chunks() if isinstance(a, pa.ChunkedArray) else a
            for a in (by_name[f.name] for f in schema)
        ]
        return pa.RecordBatch.from_arrays(
            [a.cast(f.type) for a, f in zip(combined, schema, strict=True)], schema=schema
        )

    return preaggregate


def _order_keys(argument: pa.ChunkedArray) -> pa.Array:
    """A holistic argument as order keys (`aggregates.holistic.order_keys`, as the lift of
    the `values` state), NULL where the argument is."""
    array = argument.combine_chunks()
    valid = np.asarray(array.is_valid())
    filled = array.fill_null(0).to_numpy(zero_copy_only=False)
    return pa.array(order_keys(filled), pa.int64(), mask=~valid)


def _packed(lists: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Each group's list of order keys, NULLs dropped, as one packed BINARY cell."""
    if isinstance(lists, pa.ChunkedArray):
        lists = lists.combine_chunks()
    offsets = np.asarray(lists.offsets).astype(np.int64)
    flat = lists.flatten()  # the group lists' elements, in group order
    valid = np.asarray(flat.is_valid())
    seen = np.concatenate(([0], np.cumsum(valid)))
    counts = seen[offsets[1:] - offsets[0]] - seen[offsets[:-1] - offsets[0]]
    values = flat.fill_null(0).to_numpy(zero_copy_only=False)[valid]
    return pane_values.pack(counts, values)


def carrier_rows(window: ph.WindowAggregateExec, buckets: int) -> pa.RecordBatch:
    """One row per bucket with no tuples in it (first field, the row count, is 0).

    Every partition sends them so that every bucket's stage 2 runs in every micro-batch that
    has data: a bucket's operator then always holds the previous micro-batch's watermark,
    which is the one Spark's lateness rule uses (see stage2.py). Their pane column holds the
    bucket they are for (`bucket_column`); stage 2 drops them.
    """
    schema = spark_partial_schema(window)
    arrays = [pa.nulls(buckets, schema.field(k.name).type) for k in window.keys]
    arrays.append(pa.array(np.arange(buckets, dtype=np.int64)))
    for field in incremental_part(window).fields:
        dtype, neutrals = neutral(field)
        for value in neutrals:
            arrays.append(pa.array(np.full(buckets, value, dtype)))
    for _ in values_columns(window):
        arrays.append(pane_values.pack(np.zeros(buckets, np.int64), np.empty(0, np.int64)))
    return pa.RecordBatch.from_arrays(
        [a.cast(f.type) for a, f in zip(arrays, schema, strict=True)], schema=schema
    )


def stage1(
    window: ph.WindowAggregateExec,
    source: DataFrame,
    buckets: int,
    preaggregate: Callable[[pa.Table], pa.RecordBatch] | None = None,
) -> DataFrame:
    """Partials of a streaming (or batch) DataFrame; `source` has the stream's columns and,
    for streaming, Spark's watermark on the event time already."""
    where, columns = lift_select(window)
    carriers = carrier_rows(window, buckets)
    native = source.where(where).select(*columns)
    function = preaggregate or arrow_preaggregate(window)

    def per_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # One aggregation per partition and micro-batch: the fewer partials, the less shuffle.
        collected = list(batches)
        yield carriers
        if collected:
            table = pa.Table.from_batches(collected)
            if table.num_rows:
                yield function(table)

    partials = native.mapInArrow(per_partition, partial_ddl(window))
    return partials.withColumn(BUCKET, bucket_column(window, buckets))


def kernel_stage1(
    window: ph.WindowAggregateExec,
    source: DataFrame,
    buckets: int,
    placements: tuple[ph.Placement, ...],
) -> DataFrame:
    """Stage 1 with the backend's own lift kernels (the GPU backend's path): the scan columns
    go to `mapInArrow`, where the window operator's stateless `preaggregate` filters, projects and
    pre-aggregates each partition's rows in one fused pass, its steps placed as the Spark
    planner's `placements` say."""
    from mangonel.runtime.operators.tree import OperatorTree

    columns = [F.col(quote(c.name)) for c in window.lift.scan.columns]
    schema = partial_schema(window)
    spark_schema = spark_partial_schema(window)
    carriers = carrier_rows(window, buckets)

    def per_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        collected = list(batches)
        yield carriers
        if not collected:
            return
        table = pa.Table.from_batches(collected)
        if not table.num_rows:
            return
        partials = OperatorTree(window, extra_placements=placements).leaf().preaggregate(table)
        if partials.num_rows:
            yield pa.RecordBatch.from_arrays(
                [partials.column(f.name).cast(f.type) for f in schema], schema=spark_schema
            )

    partials = source.select(*columns).mapInArrow(per_partition, partial_ddl(window))
    return partials.withColumn(BUCKET, bucket_column(window, buckets))
