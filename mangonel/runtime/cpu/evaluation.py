"""Scalar expressions over Arrow columns on the host (WHERE, aggregate arguments, HAVING, outputs).

Bare column, aggregate and window-bound references are answered here without a copy (the hot
path of most queries); everything else goes to `mangonel.compiler.expressions.evaluate`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
from sqlglot import exp

from mangonel.catalog.types import SqlType
from mangonel.compiler.nodes import AggregateRef, WindowBound


def evaluate_expression(
    expression: exp.Expression,
    column_types: Mapping[str, SqlType],
    columns: Mapping[str, pa.Array],
    *,
    aggregates: Sequence[pa.Array] = (),
    aggregate_types: Sequence[SqlType] = (),
    window_bounds: Mapping[str, pa.Array] | None = None,
    length: int,
) -> pa.Array:
    while isinstance(expression, exp.Paren):
        expression = expression.this
    if isinstance(expression, exp.Column) and expression.name in columns:
        return columns[expression.name]
    if isinstance(expression, AggregateRef):
        return aggregates[int(expression.args["this"])]  # `.index` clashes with sqlglot's
    if isinstance(expression, WindowBound) and window_bounds is not None:
        return window_bounds[expression.bound]
    from mangonel.compiler.expressions import evaluate  # helper B's module
    from mangonel.compiler.typing import TypeEnv

    env = TypeEnv(columns=dict(column_types), aggregates=tuple(aggregate_types))
    bounds = dict(window_bounds or {})
    for bound in list(bounds):
        bounds.setdefault(f"window_{bound}", bounds[bound])
    return evaluate(
        expression, env, columns, aggregates=aggregates, window_bounds=bounds, length=length
    )


def to_values(array: pa.Array, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """(values as dtype with NULLs as 0, is_valid) of an Arrow array."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_timestamp(array.type):
        array = array.cast(pa.timestamp("us", tz=array.type.tz)).cast(pa.int64())
    elif pa.types.is_boolean(array.type):
        array = array.cast(pa.int8())
    if array.null_count:
        valid = np.asarray(array.is_valid())
        array = array.fill_null(0)
    else:
        valid = np.ones(len(array), np.bool_)
    return np.asarray(array).astype(dtype, copy=False), valid


def to_mask(array: pa.Array) -> np.ndarray:
    """True where a boolean predicate is TRUE (NULL counts as FALSE, as in WHERE/HAVING)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if isinstance(array, pa.Scalar):
        raise TypeError("predicate evaluated to a scalar; pass length")
    if array.null_count:
        array = array.fill_null(False)
    return np.asarray(array, dtype=np.bool_)


def array_with_nulls(values: np.ndarray, is_null: np.ndarray | None = None) -> pa.Array:
    """An Arrow array of a numpy array with NULLs where is_null (values there are kept but
    hidden). Builds the validity bitmap with numpy: `pa.array(values, mask=...)` walks the
    mask in Python-speed steps (about 1 us per element), which dominated result output."""
    values = np.ascontiguousarray(values)
    if is_null is None or not is_null.any():
        # the type given: without it pyarrow 26 spends about 0.3 us per int64 element
        # inferring one (5.6 ms for 17,000 result keys)
        return pa.array(values, type=pa.from_numpy_dtype(values.dtype))
    validity = np.packbits(~np.asarray(is_null, np.bool_), bitorder="little")
    return pa.Array.from_buffers(
        pa.from_numpy_dtype(values.dtype),
        len(values),
        [pa.py_buffer(validity), pa.py_buffer(values)],
        null_count=int(is_null.sum()),
    )
