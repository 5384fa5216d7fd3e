"""Stage 1 inside Spark: stateless, parallel over every input partition.

Filter and projection run natively in Spark (the plan's sqlglot expressions transpiled to
Spark SQL): the WHERE predicate, the key columns, the event time as microseconds, the pane id
`floor(ts / pane_length)` (exact integer arithmetic), and one column per aggregate argument.
Spark Structured Streaming has no stateless grouped aggregation (every streaming `groupBy`
is a stateful operator with its own state store and watermark delay), so the pane
pre-aggregation itself — one partial per (key, pane) of the partition — runs in
`mapInArrow`: Arrow's C++ hash aggregation on the CPU backend, the lift kernels on the GPU
backend. Only these partials cross the shuffle to stage 2.

Partial rows (`partial_schema`): the key columns (declared types, original names), `pane`
(BIGINT), then the state fields in plan order: COUNT and SUM as one column, MIN/MAX one column
of the accumulator type, MOMENTS three DOUBLE columns `<name>_n`, `<name>_mean`, `<name>_m2`.
Cells of a partial whose argument was all NULL hold the field's neutral element (0 for
counts, sums and moments; +/- the type's largest value for MIN/MAX).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from sqlglot import exp

from mangonel.catalog.types import SqlType
from mangonel.compiler import physical as ph
from mangonel.compiler.nodes import AggregateRef, WindowBound
from mangonel.runtime.spark.schema import ddl, quote

PANE = "pane"
EVENT_TIME = "__mangonel_ts"


def argument_column(position: int) -> str:
    return f"__mangonel_arg{position}"


def partial_key_name(name: str) -> str:
    """Key columns keep their names, except one spelled like the pane column."""
    return f"{name}__key" if name.lower() == PANE else name


def field_columns(field: ph.StateField) -> list[tuple[str, SqlType]]:
    if field.kind is ph.StateKind.MOMENTS:
        return [(f"{field.name}_{part}", SqlType.DOUBLE) for part in ("n", "mean", "m2")]
    accumulator = SqlType.BIGINT if field.kind is ph.StateKind.COUNT else field.type
    return [(field.name, accumulator)]


def partial_columns(window: ph.WindowAggregateExec) -> list[tuple[str, SqlType]]:
    columns = [(partial_key_name(k.name), k.type) for k in window.keys]
    columns.append((PANE, SqlType.BIGINT))
    for field in window.fields:
        columns.extend(field_columns(field))
    return columns


def partial_schema(window: ph.WindowAggregateExec) -> pa.Schema:
    return pa.schema([pa.field(n, t.info.arrow) for n, t in partial_columns(window)])


def spark_sql(expression: exp.Expression) -> str:
    """Spark SQL text of a lift-side plan expression (WHERE, aggregate arguments)."""
    for node in expression.walk():
        if isinstance(node, (WindowBound, AggregateRef)):
            raise ValueError("window bounds and aggregate results only exist after stage 2")
    return expression.sql(dialect="spark")


def distinct_arguments(window: ph.WindowAggregateExec) -> list[exp.Expression]:
    arguments: list[exp.Expression] = []
    for field in window.fields:
        if field.argument is not None and field.argument not in arguments:
            arguments.append(field.argument)
    return arguments


def lift_select(window: ph.WindowAggregateExec) -> tuple[str | None, list[SparkColumn]]:
    """(WHERE text, projected columns) of the native part of stage 1."""
    lift = window.child
    scan = lift.child
    where = spark_sql(lift.predicate) if lift.predicate is not None else None
    ts = F.expr(f"unix_micros({quote(scan.stream.event_time)})")
    pane_length = window.pane_length
    # pmod keeps the pane id exact (floor division also for times before 1970).
    pane = F.expr(
        f"(unix_micros({quote(scan.stream.event_time)}) - "
        f"pmod(unix_micros({quote(scan.stream.event_time)}), {pane_length})) div {pane_length}"
    )
    columns = [F.col(quote(k.name)).alias(partial_key_name(k.name)) for k in window.keys]
    columns.append(ts.alias(EVENT_TIME))
    columns.append(pane.alias(PANE))
    for position, argument in enumerate(distinct_arguments(window)):
        columns.append(F.expr(spark_sql(argument)).alias(argument_column(position)))
    return where, columns


def _neutral(field: ph.StateField, sql_type: SqlType) -> pa.Scalar:
    arrow = sql_type.info.arrow
    if field.kind in (ph.StateKind.MIN, ph.StateKind.MAX):
        sign = 1 if field.kind is ph.StateKind.MIN else -1
        if sql_type.is_integer:
            return pa.scalar(sign * np.iinfo(sql_type.info.numpy).max, arrow)
        return pa.scalar(sign * np.inf, arrow)
    return pa.scalar(0, arrow)


def arrow_preaggregate(window: ph.WindowAggregateExec) -> Callable[[pa.Table], pa.RecordBatch]:
    """The CPU pane pre-aggregation of one partition's rows (Arrow's hash aggregation)."""
    schema = partial_schema(window)
    keys = [partial_key_name(k.name) for k in window.keys]
    arguments = distinct_arguments(window)

    def column_of(field: ph.StateField) -> str:
        return argument_column(arguments.index(field.argument))

    def preaggregate(table: pa.Table) -> pa.RecordBatch:
        table = table.filter(pc.is_valid(table[EVENT_TIME]))
        aggregations: list[tuple] = []
        for field in window.fields:
            if field.argument is None:
                aggregations.append(([], "count_all"))
                continue
            source = column_of(field)
            if field.kind is ph.StateKind.COUNT:
                aggregations.append((source, "count"))
            elif field.kind is ph.StateKind.SUM:
                aggregations.append((source, "sum"))
            elif field.kind is ph.StateKind.MIN:
                aggregations.append((source, "min"))
            elif field.kind is ph.StateKind.MAX:
                aggregations.append((source, "max"))
            else:
                aggregations.append((source, "count"))
                aggregations.append((source, "mean"))
                aggregations.append((source, "variance", pc.VarianceOptions(ddof=0)))
        grouped = table.group_by(keys + [PANE], use_threads=False).aggregate(aggregations)
        # Output order differs between pyarrow versions (keys first in >= 22): locate the
        # aggregates as the columns that are not grouping keys, in request order.
        arrays: list[pa.Array] = [grouped[name] for name in keys] + [grouped[PANE]]
        grouping = set(keys) | {PANE}
        aggregate_positions = [
            i for i, name in enumerate(grouped.column_names) if name not in grouping
        ]
        position = 0
        for field in window.fields:
            if field.kind is ph.StateKind.MOMENTS:
                n = grouped.column(aggregate_positions[position]).cast(pa.float64())
                mean = pc.fill_null(grouped.column(aggregate_positions[position + 1]), 0.0)
                variance = pc.fill_null(grouped.column(aggregate_positions[position + 2]), 0.0)
                arrays += [n, mean, pc.multiply(variance, n)]
                position += 3
                continue
            value = grouped.column(aggregate_positions[position])
            (_, sql_type), = field_columns(field)
            arrays.append(pc.fill_null(value.cast(sql_type.info.arrow), _neutral(field, sql_type)))
            position += 1
        combined = [
            pa.chunked_array(a).combine_chunks() if isinstance(a, pa.ChunkedArray) else a
            for a in arrays
        ]
        return pa.RecordBatch.from_arrays(
            [a.cast(f.type) for a, f in zip(combined, schema, strict=True)], schema=schema
        )

    return preaggregate


def stage1(
    window: ph.WindowAggregateExec,
    source: DataFrame,
    preaggregate: Callable[[pa.Table], pa.RecordBatch] | None = None,
) -> DataFrame:
    """Partials of a streaming (or batch) DataFrame; `source` has the stream's columns and,
    for streaming, Spark's watermark on the event time already."""
    where, columns = lift_select(window)
    native = source.where(where) if where is not None else source
    native = native.select(*columns)
    function = preaggregate or arrow_preaggregate(window)

    def per_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # One aggregation per partition and micro-batch: the fewer partials, the less shuffle.
        collected = list(batches)
        if not collected:
            return
        table = pa.Table.from_batches(collected)
        if table.num_rows:
            yield function(table)

    return native.mapInArrow(per_partition, ddl(partial_columns(window)))
