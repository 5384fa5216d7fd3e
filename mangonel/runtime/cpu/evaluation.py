"""Scalar expressions over Arrow columns on the host (WHERE, aggregate arguments, HAVING, outputs).

Bare column, aggregate and window-bound references are answered here without a copy (the hot
path of most queries); everything else goes to `mangonel.runtime.cpu.expressions.evaluate`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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
        if not expression.offset_us:
            return window_bounds[expression.reads]
    from mangonel.compiler.typing import TypeEnv
    from mangonel.runtime.cpu.expressions import evaluate

    env = TypeEnv(columns=dict(column_types), aggregates=tuple(aggregate_types))
    bounds = dict(window_bounds or {})
    for bound in list(bounds):
        bounds.setdefault(f"window_{bound}", bounds[bound])
    return evaluate(
        expression, env, columns, aggregates=aggregates, window_bounds=bounds, length=length
    )
