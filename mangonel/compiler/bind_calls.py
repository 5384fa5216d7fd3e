"""The shapes of aggregate calls the binder reads beyond `F(x)`: COUNT(DISTINCT x),
PERCENTILE(x, p) and the ordered-set form PERCENTILE_CONT(p) / PERCENTILE_DISC(p) WITHIN GROUP
(ORDER BY x) of the holistic aggregates (`aggregates.holistic`), and calls of the session's
Python window functions (`aggregates.python`), with their errors."""

from __future__ import annotations

from sqlglot import exp

from mangonel.aggregates.python import WindowFunction
from mangonel.catalog.types import SqlType
from mangonel.compiler.bind import AGGREGATES_HINT, _error
from mangonel.compiler.logical import AggregateFunction


def call_shape(
    node: exp.Expression, call: exp.Expression, function: AggregateFunction
) -> tuple[exp.Expression | None, AggregateFunction, float | None]:
    """(argument, function, fraction) of an aggregate call: the one argument of most
    functions, COUNT(DISTINCT x), PERCENTILE(x, p), and the ordered-set form
    PERCENTILE_CONT(p) / PERCENTILE_DISC(p) WITHIN GROUP (ORDER BY x)."""
    holistic = function.definition.holistic
    name = function.value
    if function is AggregateFunction.PYTHON:
        return _python_call_argument(node, call), function, None
    if isinstance(node, exp.WithinGroup):
        if holistic is None or not holistic.takes_fraction or isinstance(call, exp.Quantile):
            raise _error(
                f"{name} does not take WITHIN GROUP",
                node,
                "WITHIN GROUP (ORDER BY x) follows PERCENTILE_CONT(p) or PERCENTILE_DISC(p)",
            )
        order = node.expression
        items = order.expressions if isinstance(order, exp.Order) else []
        if len(items) != 1:
            raise _error(
                f"{name} WITHIN GROUP orders by exactly one expression",
                node,
                f"e.g. {name}(0.5) WITHIN GROUP (ORDER BY price)",
            )
        if items[0].args.get("desc"):
            raise _error(
                f"ORDER BY ... DESC in {name} WITHIN GROUP is not supported yet",
                items[0],
                f"order ascending and take 1 - p: {name}(1 - p) WITHIN GROUP (ORDER BY x)",
            )
        return items[0].this, function, fraction(call.this, name)
    if holistic is not None and holistic.takes_fraction and not isinstance(call, exp.Quantile):
        raise _error(
            f"{name} needs WITHIN GROUP (ORDER BY ...)",
            call,
            f"e.g. {name}(0.5) WITHIN GROUP (ORDER BY price), or PERCENTILE(price, 0.5)",
        )
    if isinstance(call, exp.Quantile):
        return call.this, function, fraction(call.args.get("quantile"), name)
    argument = call.this
    if isinstance(argument, exp.Distinct):
        if function is not AggregateFunction.COUNT:
            raise _error(
                f"{call.sql_name()}(DISTINCT ...) is not supported",
                call,
                "COUNT(DISTINCT x) is the one DISTINCT aggregate",
            )
        if len(argument.expressions) != 1:
            raise _error(
                "COUNT(DISTINCT ...) takes one argument",
                call,
                "count the distinct values of one expression: COUNT(DISTINCT x)",
            )
        return argument.expressions[0], AggregateFunction.COUNT_DISTINCT, None
    extra = [arg for arg, value in call.args.items() if value and arg not in ("this", "big_int")]
    if extra:
        raise _error(f"{call.sql_name()} takes one argument", call, AGGREGATES_HINT)
    return argument, function, None


def fraction(node: exp.Expression | None, name: str) -> float:
    """p of a percentile call: a numeric literal in [0, 1]."""
    hint = "p is a numeric literal from 0 to 1, e.g. 0.9"
    if isinstance(node, exp.Array):
        raise _error(f"{name} over an array of percentages is not supported yet", node, hint)
    literal, sign = node, 1.0
    if isinstance(literal, exp.Neg):
        literal, sign = literal.this, -1.0
    if not isinstance(literal, exp.Literal) or literal.is_string:
        raise _error(f"{name} takes a numeric literal percentage", node, hint)
    try:
        value = sign * float(literal.this)
    except ValueError:
        raise _error(f"{name} takes a numeric literal percentage", node, hint) from None
    if not 0.0 <= value <= 1.0:
        raise _error(f"{name}'s percentage must lie between 0 and 1, got {value:g}", node, hint)
    return value


def _python_call_argument(node: exp.Expression, call: exp.Expression) -> exp.Expression:
    """The one argument of a Python window function's call `name(x)`."""
    name = call.name
    if isinstance(node, exp.WithinGroup):
        raise _error(
            f"Python window function {name} does not take WITHIN GROUP",
            node,
            f"call it as {name}(x): it gets the window's values sorted ascending",
        )
    arguments = call.expressions
    if len(arguments) != 1 or isinstance(arguments[0], (exp.Distinct, exp.Star)):
        raise _error(
            f"Python window function {name} takes one argument",
            call,
            f"{name}(x): x a numeric expression of the stream's columns",
        )
    return arguments[0]


def python_argument_error(
    function: WindowFunction, argument_type: SqlType | None, node: exp.Expression
) -> Exception:
    """The error for a Python window function called over a non-numeric argument."""
    return _error(
        f"Python window function {function.name} cannot take a {argument_type} argument",
        node,
        "its argument is numeric (INT, BIGINT, FLOAT, DOUBLE): it gets a NumPy array of them",
    )
