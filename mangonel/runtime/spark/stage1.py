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
aggregations of each kind are its `arrow` face (`mangonel.aggregates`). In time windows a
holistic function's `values` field (raw values, no partial state) follows the incremental
fields as one BINARY column: the (key, pane)'s non-NULL values as packed int64 order keys
(`runtime.operators.pane_values`; empty where all were NULL), collected with Arrow's `list`
aggregation, and where a Python window function reads it `with_timestamps` a second one with
their event times; stage 2's holistic operator keeps them per pane. Count windows' partials
are per tuple: a `values` field there is two BIGINT parts (order key, validity) like any other.
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
from mangonel.compiler.holistic import incremental_part, timed_fields
from mangonel.compiler.logical import WindowKind
from mangonel.runtime.operators import pane_values
from mangonel.runtime.operators.base import EVENT_TIME_META, PANE_META, partial_column_name
from mangonel.runtime.operators.kernels import neutral
from mangonel.runtime.spark import late
from mangonel.runtime.spark.functions import stage1_leaf, stage1_preaggregate
from mangonel.runtime.spark.native import per_tuple
from mangonel.runtime.spark.schema import ddl, quote
from mangonel.runtime.spark.shipping import shipped
from mangonel.runtime.spark.sql import lift_sql

PANE = PANE_META  # the window operator's partial format, shared with stage 2
BUCKET = "__mangonel_bucket"
ORDER = "__mangonel_order"  # count windows: a tuple's arrival order within a micro-batch
EVENT_TIME = "__mangonel_time"  # Arrow stage 1: a tuple's event time (microseconds), if read


def argument_column(position: int) -> str:
    return f"__mangonel_arg{position}"


def part_neutrals(field: ph.StateField) -> tuple[np.dtype, tuple[float | int, ...]]:
    """(storage dtype, neutral per part) of a field's partial columns: its kind's pane state
    (`neutral`), or for a count window's holistic `values` field the per-tuple parts (order
    key, validity), fixed-width whatever the size of the kind's state."""
    if field.kind.holistic:
        dtype = ph.field_dtype(field)
        return dtype, field.kind.neutral(dtype)
    return neutral(field)


def field_columns(field: ph.StateField) -> list[tuple[str, SqlType]]:
    """The partial columns of a state field, named and typed as the window operator's
    `preaggregate` writes them (storage types: BIGINT for integer accumulators, else DOUBLE)."""
    dtype, neutrals = part_neutrals(field)
    sql_type = SqlType.BIGINT if dtype == np.dtype(np.int64) else SqlType.DOUBLE
    parts = len(neutrals)
    return [(partial_column_name(field, part), sql_type) for part in range(parts)]


def position_column(window: ph.WindowAggregateExec) -> str:
    """The partials' BIGINT beside the keys: the pane of time windows, the tuple's event time
    of count and session windows (whose partials are per tuple: a count window's order and a
    session's extent are not final in stage 1)."""
    return EVENT_TIME_META if per_tuple(window) else PANE


def pane_fields(window: ph.WindowAggregateExec) -> tuple[ph.StateField, ...]:
    """The fields with partial columns of their kind's parts: a time window's incremental
    fields (its holistic `values` fields ship as BINARY columns: `values_columns`); every
    field of a count window, whose per-tuple partials carry a `values` field's (order key,
    validity) like any part."""
    if per_tuple(window):
        return window.fields
    return incremental_part(window).fields


def partial_columns(window: ph.WindowAggregateExec) -> list[tuple[str, SqlType]]:
    """Keys, the position column (pane or event time) and `pane_fields`' columns (a time
    window's holistic `values` fields follow them as BINARY columns: `values_columns`)."""
    columns = [(k.name, k.type) for k in window.keys]
    columns.append((position_column(window), SqlType.BIGINT))
    for field in pane_fields(window):
        columns.extend(field_columns(field))
    return columns


def values_columns(window: ph.WindowAggregateExec) -> list[str]:
    """The BINARY partial columns of a time window's holistic `values` fields: per
    (key, pane) its non-NULL values as packed int64 order keys, and after a timed field's
    (`compiler.holistic.timed_fields`) their event times (`runtime.operators.pane_values`).
    None for count and session windows (`pane_fields`)."""
    if per_tuple(window):
        return []
    timed = timed_fields(window)
    columns = []
    for field in window.fields:
        if field.kind.holistic:
            columns.append(field.name)
            if field.name in timed:
                columns.append(pane_values.times_column(field.name))
    return columns


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
    carrier rows (row count 0) name their bucket in the position column (pane or time)."""
    rows = F.col(spark_name(window.fields[0].name))
    if window.keys:
        hashed = F.hash(*[F.col(quote(k.name)) for k in window.keys])
        keyed = F.pmod(hashed, F.lit(buckets))
    else:
        keyed = F.lit(0)
    return F.when(rows == 0, F.col(position_column(window))).otherwise(keyed).cast("int")


def lift_select(window: ph.WindowAggregateExec) -> tuple[str, list[SparkColumn]]:
    """(WHERE text, projected columns) of the native part of stage 1. Only what the
    pre-aggregation reads crosses into Python (the JVM -> Arrow copy is stage 1's main cost):
    keys, pane id, aggregate arguments (and the event time where a Python window function
    reads it `with_timestamps`). Rows without an event time are dropped here."""
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
    if timed_fields(window):  # a Python function `with_timestamps` reads the event times
        columns.append(F.expr(f"unix_micros({quote(scan.stream.event_time)})").alias(EVENT_TIME))
    for position, argument in enumerate(distinct_arguments(window)):
        columns.append(F.expr(lift_sql(argument, scan)).alias(argument_column(position)))
    return where, columns


def arrow_preaggregate(
    window: ph.WindowAggregateExec, rows: list[tuple[str, str]] | None = None
) -> Callable[[pa.Table], pa.RecordBatch]:
    """The CPU pane pre-aggregation of one partition's rows (Arrow's hash aggregation); a
    holistic `values` field collects each group's order keys (Arrow's `list`), packed, and a
    timed one its event times too (a second `list` over the same rows, in the same order).
    With `rows` (late rows asked for, `late.row_columns`), each partial row also carries the
    tuples of its (key, pane) cell (`late.ROWS`), gathered by the same grouping."""
    schema = spark_partial_schema(window)
    keys = [k.name for k in window.keys]
    arguments = distinct_arguments(window)
    timed = timed_fields(window)

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
                if field.name in timed:  # the same rows' event times, in the same order
                    aggregations.append((EVENT_TIME, "list"))
                    requested[-1] = 2
                continue
            extra, asked = field.kind.arrow.requests(source, table[source], field.type)
            derived.update(extra)
            aggregations.extend(asked)
            requested.append(len(asked))
        for name, column in derived.items():
            table = table.append_column(name, column)
        if rows is not None:  # the row ids of each cell, in the same grouping
            table = table.append_column(late.ROW_ID, late.row_ids(table.num_rows))
            aggregations.append((late.ROW_ID, "list"))
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
                values, times = _packed(columns[0], columns[1] if count == 2 else None)
                by_name[spark_name(field.name)] = values
                if times is not None:
                    by_name[spark_name(pane_values.times_column(field.name))] = times
                continue
            dtype, neutrals = neutral(field)
            results = field.kind.arrow.results(columns, dtype, neutrals)
            for part, array in enumerate(results):
                by_name[spark_name(partial_column_name(field, part))] = array
        combined = [
            pa.chunked_array(a).combine_chunks() if isinstance(a, pa.ChunkedArray) else a
            for a in (by_name[f.name] for f in schema)
        ]
        partials = [a.cast(f.type) for a, f in zip(combined, schema, strict=True)]
        if rows is None:
            return pa.RecordBatch.from_arrays(partials, schema=schema)
        lists = grouped.column(aggregate_positions[position])
        blobs = late.rows_of_groups(table, lists, rows)
        return pa.RecordBatch.from_arrays(
            [*partials, blobs], schema=schema.append(pa.field(late.ROWS, pa.binary()))
        )

    return preaggregate


def _order_keys(argument: pa.ChunkedArray) -> pa.Array:
    """A holistic argument as order keys (`aggregates.holistic.order_keys`, as the lift of
    the `values` state), NULL where the argument is."""
    array = argument.combine_chunks()
    valid = np.asarray(array.is_valid())
    filled = array.fill_null(0).to_numpy(zero_copy_only=False)
    return pa.array(order_keys(filled), pa.int64(), mask=~valid)


def _packed(
    lists: pa.ChunkedArray | pa.Array, times: pa.ChunkedArray | pa.Array | None = None
) -> tuple[pa.Array, pa.Array | None]:
    """Each group's list of order keys, NULLs dropped, as one packed BINARY cell; and with
    `times` (each group's event times, listed from the same rows in the same order) the
    kept values' times packed alike (else None)."""
    if isinstance(lists, pa.ChunkedArray):
        lists = lists.combine_chunks()
    offsets = np.asarray(lists.offsets).astype(np.int64)
    flat = lists.flatten()  # the group lists' elements, in group order
    valid = np.asarray(flat.is_valid())
    seen = np.concatenate(([0], np.cumsum(valid)))
    counts = seen[offsets[1:] - offsets[0]] - seen[offsets[:-1] - offsets[0]]
    values = flat.fill_null(0).to_numpy(zero_copy_only=False)[valid]
    if times is None:
        return pane_values.pack(counts, values), None
    if isinstance(times, pa.ChunkedArray):
        times = times.combine_chunks()
    flat_times = times.flatten().to_numpy(zero_copy_only=False)
    if len(flat_times) != len(valid):
        raise AssertionError("Arrow listed a group's values and event times apart")
    return pane_values.pack(counts, values), pane_values.pack(counts, flat_times[valid])


def carrier_rows(
    window: ph.WindowAggregateExec, buckets: int, with_rows: bool = False
) -> pa.RecordBatch:
    """One row per bucket with no tuples in it (first field, the row count, is 0).

    Every partition sends them so that every bucket's stage 2 runs in every micro-batch that
    has data: a bucket's operator then always holds the previous micro-batch's watermark,
    which is the one Spark's lateness rule uses (see stage2.py). Their pane column holds the
    bucket they are for (`bucket_column`); stage 2 drops them.
    """
    schema = spark_partial_schema(window)
    arrays = [pa.nulls(buckets, schema.field(k.name).type) for k in window.keys]
    arrays.append(pa.array(np.arange(buckets, dtype=np.int64)))
    for field in pane_fields(window):
        dtype, neutrals = part_neutrals(field)
        for value in neutrals:
            arrays.append(pa.array(np.full(buckets, value, dtype)))
    for _ in values_columns(window):
        arrays.append(pane_values.pack(np.zeros(buckets, np.int64), np.empty(0, np.int64)))
    arrays = [a.cast(f.type) for a, f in zip(arrays, schema, strict=True)]
    if with_rows:  # late rows asked for: the tuples column, empty
        arrays.append(late.null_rows(buckets))
        schema = schema.append(pa.field(late.ROWS, pa.binary()))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def stage1(
    window: ph.WindowAggregateExec,
    source: DataFrame,
    buckets: int,
    preaggregate: Callable[[pa.Table], pa.RecordBatch] | None = None,
    with_rows: bool = False,
) -> DataFrame:
    """Partials of a streaming (or batch) DataFrame; `source` has the stream's columns and,
    for streaming, Spark's watermark on the event time already. `with_rows`: each partial
    carries its tuples for the late rows (late.py)."""
    where, columns = lift_select(window)
    carriers = carrier_rows(window, buckets, with_rows)
    rows = late.row_columns(window) if with_rows else None
    if with_rows:
        columns += late.row_select(window)
    native = source.where(where).select(*columns)
    function = preaggregate or arrow_preaggregate(window, rows)

    def per_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # One aggregation per partition and micro-batch: the fewer partials, the less shuffle.
        collected = list(batches)
        yield carriers
        if collected:
            table = pa.Table.from_batches(collected)
            if table.num_rows:
                yield function(table)

    schema_ddl = partial_ddl(window)
    if with_rows:
        schema_ddl += ", " + late.ROWS_DDL
    partials = native.mapInArrow(per_partition, schema_ddl)
    return partials.withColumn(BUCKET, bucket_column(window, buckets))


def kernel_stage1(
    window: ph.WindowAggregateExec,
    source: DataFrame,
    buckets: int,
    placements: tuple[ph.Placement, ...],
    with_rows: bool = False,
) -> DataFrame:
    """Stage 1 with the backend's own lift kernels (the GPU backend's path): the scan columns
    go to `mapInArrow`, where the window operator's stateless `preaggregate` filters, projects and
    pre-aggregates each partition's rows in one fused pass, its steps placed as the Spark
    planner's `placements` say. `with_rows` (count and session windows: partials are tuples): each
    partial carries its tuple's row, every column of the stream, for the late rows (late.py)."""
    scan_names = [c.name for c in window.lift.scan.columns]
    columns = [F.col(quote(name)) for name in scan_names]
    rows = late.row_columns(window) if with_rows else None
    if with_rows:
        columns += late.row_select(window)
    schema = partial_schema(window)
    spark_schema = spark_partial_schema(window)
    carriers = carrier_rows(window, buckets, with_rows)
    ordered = window.window.kind is WindowKind.COUNT  # per-tuple partials keep their order
    load_window = shipped(window)  # a window with a Python function: once per worker process
    if ordered:
        carriers = _with_order(carriers, pa.array(np.zeros(buckets, np.int64)))
    if with_rows:
        spark_schema = spark_schema.append(pa.field(late.ROWS, pa.binary()))

    def per_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        collected = list(batches)
        yield carriers
        if not collected:
            return
        table = pa.Table.from_batches(collected)
        if not table.num_rows:
            return
        if rows is None:
            partials = stage1_preaggregate(load_window(), placements, table)
        else:  # each partial is one tuple: its row goes beside it
            leaf = stage1_leaf(load_window(), placements)
            partials, at = leaf.preaggregate_rows(table.select(scan_names))
            lists = pa.ListArray.from_arrays(
                pa.array(np.arange(len(at) + 1, dtype=np.int32)), pa.array(at, pa.int64())
            )
        if partials.num_rows:
            arrays = [partials.column(f.name).cast(f.type) for f in schema]
            if rows is not None:
                arrays.append(late.rows_of_groups(table, lists, rows))
            out = pa.RecordBatch.from_arrays(arrays, schema=spark_schema)
            if ordered:
                out = _with_order(out, arrival_order(partials.num_rows))
            yield out

    schema_ddl = partial_ddl(window)
    if with_rows:
        schema_ddl += ", " + late.ROWS_DDL
    if ordered:
        schema_ddl += f", {ORDER} BIGINT"
    partials = source.select(*columns).mapInArrow(per_partition, schema_ddl)
    return partials.withColumn(BUCKET, bucket_column(window, buckets))


def arrival_order(rows: int) -> pa.Array:
    """Count windows' tie order inside a micro-batch: (Spark partition, row position in it),
    packed in a BIGINT; stage 2 merges each call's tuples in this order (docs/spark.md, "Count
    windows"). A partition of a file source reads its file in row order."""
    from pyspark import TaskContext

    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    return pa.array((np.int64(partition) << 40) + np.arange(rows, dtype=np.int64))


def _with_order(batch: pa.RecordBatch, order: pa.Array) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [*batch.columns, order], schema=batch.schema.append(pa.field(ORDER, pa.int64()))
    )
