"""Finalize, HAVING and the output projection of a window firing (host side, Arrow)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mangonel.catalog.types import SqlType
from mangonel.compiler.logical import AggregateFunction
from mangonel.compiler.physical import AggregatePlan, WindowPipeline
from mangonel.runtime.cpu.evaluation import evaluate_expression
from mangonel.runtime.host.arrays import array_with_nulls, to_mask


def finalize(
    plans: tuple[AggregatePlan, ...], values: dict[str, tuple[np.ndarray, ...]]
) -> list[pa.Array]:
    """The aggregate results (Arrow, plan result types) from selected field values."""
    results = []
    for plan in plans:
        count = values[plan.count_field][0]
        arrow_type = plan.result_type.info.arrow
        function = plan.function
        if function in (AggregateFunction.COUNT_STAR, AggregateFunction.COUNT):
            results.append(pa.array(count, pa.int64()).cast(arrow_type))
            continue
        empty = count == 0
        if not empty.any():
            empty = None  # no NULL result: no masking passes (the common case)
        value = values[plan.value_field]
        if function in (AggregateFunction.SUM, AggregateFunction.MIN, AggregateFunction.MAX):
            data = value[0] if empty is None else np.where(empty, 0, value[0])
            if plan.result_type is SqlType.TIMESTAMP:
                array = array_with_nulls(data.astype(np.int64), empty)
            else:
                array = array_with_nulls(data, empty)
            results.append(array.cast(arrow_type))
            continue
        if function is AggregateFunction.AVG:
            with np.errstate(divide="ignore", invalid="ignore"):
                data = value[0] / (count if empty is None else np.where(empty, 1, count))
            results.append(array_with_nulls(data.astype(np.float64), empty).cast(arrow_type))
            continue
        n, m2 = value[0], value[2]
        sample = function in (AggregateFunction.VAR_SAMP, AggregateFunction.STDDEV_SAMP)
        null = n < (2 if sample else 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            data = m2 / np.where(null, 1.0, n - 1.0 if sample else n)
        data = np.maximum(data, 0.0)  # rounding must not make a variance negative
        if function in (AggregateFunction.STDDEV_POP, AggregateFunction.STDDEV_SAMP):
            data = np.sqrt(data)
        results.append(array_with_nulls(data, null).cast(arrow_type))
    return results


_TIMESTAMP_UTC = pa.timestamp("us", tz="UTC")


def _timestamps(micros: np.ndarray) -> pa.Array:
    # a view of the int64 buffer as timestamps (an Arrow cast copies and checks every value)
    micros = np.ascontiguousarray(micros, np.int64)
    return pa.Array.from_buffers(_TIMESTAMP_UTC, len(micros), [None, pa.py_buffer(micros)])


def project(
    pipeline: WindowPipeline,
    keys: list[pa.Array],
    aggregates: list[pa.Array],
    window_start: np.ndarray,
    window_end: np.ndarray,
) -> pa.RecordBatch:
    """HAVING first, then the plan's output expressions, typed as the plan says."""
    length = len(window_start)
    key_columns = pipeline.lift.keys
    column_types = {c.name: c.type for c in key_columns}
    columns = {c.name: array for c, array in zip(key_columns, keys, strict=True)}
    aggregate_types = [p.result_type for p in pipeline.window.aggregates]
    bounds = {"start": _timestamps(window_start), "end": _timestamps(window_end)}
    if pipeline.having is not None and length:
        keep = to_mask(
            evaluate_expression(
                pipeline.having,
                column_types,
                columns,
                aggregates=aggregates,
                aggregate_types=aggregate_types,
                window_bounds=bounds,
                length=length,
            )
        )
        if not keep.all():
            selection = pa.array(np.nonzero(keep)[0], pa.int64())
            columns = {name: array.take(selection) for name, array in columns.items()}
            aggregates = [array.take(selection) for array in aggregates]
            bounds = {name: array.take(selection) for name, array in bounds.items()}
            length = int(keep.sum())
    arrays, fields = [], []
    for output in pipeline.outputs:
        arrow_type = output.type.info.arrow
        array = evaluate_expression(
            output.expression,
            column_types,
            columns,
            aggregates=aggregates,
            aggregate_types=aggregate_types,
            window_bounds=bounds,
            length=length,
        )
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        if array.type != arrow_type:
            array = array.cast(arrow_type)
        arrays.append(array)
        fields.append(pa.field(output.name, arrow_type))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def output_schema(pipeline: WindowPipeline) -> pa.Schema:
    return pa.schema([pa.field(o.name, o.type.info.arrow) for o in pipeline.outputs])
