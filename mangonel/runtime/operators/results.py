"""Finalize of a window firing: aggregate results from state-field values (host side, Arrow),
and the window-result batch the window operator emits (`physical.window_result_columns`)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mangonel.catalog.types import SqlType
from mangonel.compiler import physical as ph
from mangonel.compiler.logical import AggregateFunction
from mangonel.compiler.physical import AggregatePlan
from mangonel.runtime.host.arrays import array_with_nulls
from mangonel.runtime.operators import project


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


def window_result_schema(node: ph.WindowAggregateExec) -> pa.Schema:
    """The Arrow schema of the window operator's result batches."""
    keys = [(k.name, k.type) for k in node.keys]
    return project.window_result_schema(keys, [a.result_type for a in node.aggregates])


def window_result_batch(
    schema: pa.Schema,
    keys: list[pa.Array],
    aggregates: list[pa.Array],
    window_start: np.ndarray,
    window_end: np.ndarray,
) -> pa.RecordBatch:
    """One row per fired (window, key): keys, bounds, aggregate results (no copy)."""
    arrays = [*keys, _timestamps(window_start), _timestamps(window_end), *aggregates]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
