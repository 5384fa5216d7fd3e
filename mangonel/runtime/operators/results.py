"""Finalize, HAVING and the output projection of a window firing (host side, Arrow)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mangonel.compiler.physical import AggregatePlan, WindowPipeline
from mangonel.runtime.cpu.evaluation import array_with_nulls, evaluate_expression, to_mask


def finalize(
    plans: tuple[AggregatePlan, ...], values: dict[str, tuple[np.ndarray, ...]]
) -> list[pa.Array]:
    """The aggregate results (Arrow, plan result types) from selected field values: each
    function's own `finalize` (`mangonel.aggregates`) on numpy, then Arrow."""
    results = []
    for plan in plans:
        count = values[plan.count_field][0]
        value = values[plan.value_field] if plan.value_field is not None else None
        data, null = plan.function.definition.finalize(np, count, value, plan.result_type)
        results.append(array_with_nulls(data, null).cast(plan.result_type.info.arrow))
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
