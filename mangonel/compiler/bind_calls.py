"""The shapes of aggregate calls the binder reads beyond `F(x)`: COUNT(DISTINCT x),
PERCENTILE(x, p) and the ordered-set form PERCENTILE_CONT(p) / PERCENTILE_DISC(p) WITHIN GROUP
(ORDER BY x) of the holistic aggregates (`aggregates.holistic`), the approximate ones
APPROX_COUNT_DISTINCT(x [, rsd]) and APPROX_PERCENTILE(x, p [, accuracy])
(`aggregates.sketches`), and calls of the session's Python window functions
(`aggregates.python`), with their errors."""

from __future__ import annotations

from sqlglot import exp

from mangonel.aggregates import sketches
from mangonel.aggregates.python import WindowFunction
from mangonel.catalog.types import SqlType
from mangonel.compiler.bind import AGGREGATES_HINT, _error
from mangonel.compiler.logical import AggregateFunction
from mangonel.errors import PlanError

# (argument, function, p: one fraction, a tuple of them (an ARRAY of p) or None, parameter)
Shape = tuple[
    exp.Expression | None, AggregateFunction, float | tuple[float, ...] | None, float | None
]


def call_shape(node: exp.Expression, call: exp.Expression, function: AggregateFunction) -> Shape:
    """(argument, function, fraction, parameter) of an aggregate call: the one argument of
    most functions, COUNT(DISTINCT x), PERCENTILE(x, p), the ordered-set form
    PERCENTILE_CONT(p) / PERCENTILE_DISC(p) WITHIN GROUP (ORDER BY x), and the sketch calls
    (`approximate_shape`; parameter: their rsd / accuracy)."""
    holistic = function.definition.holistic
    name = function.value
    if function is AggregateFunction.PYTHON:
        return _python_call_argument(node, call), function, None, None
    approximate = isinstance(call, (exp.ApproxDistinct, exp.ApproxQuantile))
    if isinstance(node, exp.WithinGroup):
        if (
            holistic is None
            or not holistic.takes_fraction
            or isinstance(call, exp.Quantile)
            or approximate
        ):
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
        return items[0].this, function, fraction(call.this, name), None
    if approximate:
        return approximate_shape(call, function)
    if holistic is not None and holistic.takes_fraction and not isinstance(call, exp.Quantile):
        raise _error(
            f"{name} needs WITHIN GROUP (ORDER BY ...)",
            call,
            f"e.g. {name}(0.5) WITHIN GROUP (ORDER BY price), or PERCENTILE(price, 0.5)",
        )
    if isinstance(call, exp.Quantile):
        return call.this, function, fraction(call.args.get("quantile"), name), None
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
        return argument.expressions[0], AggregateFunction.COUNT_DISTINCT, None, None
    extra = [arg for arg, value in call.args.items() if value and arg not in ("this", "big_int")]
    if extra:
        raise _error(f"{call.sql_name()} takes one argument", call, AGGREGATES_HINT)
    return argument, function, None, None


def approximate_shape(call: exp.Expression, function: AggregateFunction) -> Shape:
    """APPROX_COUNT_DISTINCT(x [, rsd]) (rsd default 0.05) and APPROX_PERCENTILE(x, p
    [, accuracy]) (accuracy default 10000): Spark's signatures, literals checked as Spark
    checks them (`aggregates.sketches`)."""
    name = function.value
    extra = [
        arg
        for arg, value in call.args.items()
        if value and arg not in ("this", "accuracy", "quantile")
    ]
    if extra:
        raise _error(
            f"{name} takes at most {2 if isinstance(call, exp.ApproxDistinct) else 3} arguments",
            call,
            "APPROX_COUNT_DISTINCT(x [, rsd]), APPROX_PERCENTILE(x, p [, accuracy])",
        )
    given = call.args.get("accuracy")
    if isinstance(call, exp.ApproxDistinct):
        hint = "rsd is a numeric literal, e.g. APPROX_COUNT_DISTINCT(x, 0.01)"
        rsd = sketches.HLL_DEFAULT_RSD if given is None else _number(given, f"{name}'s rsd", hint)
        _checked(lambda: sketches.hll_precision(rsd), given, hint)
        return call.this, function, None, rsd
    hint = "accuracy is a positive integer literal, e.g. APPROX_PERCENTILE(x, 0.5, 1000)"
    accuracy: float = sketches.QUANTILE_DEFAULT_ACCURACY
    if given is not None:
        accuracy = _number(given, f"{name}'s accuracy", hint)
        if accuracy != int(accuracy) or (isinstance(given, exp.Literal) and "." in given.this):
            raise _error(f"{name}'s accuracy must be an integer, got {given.sql()}", given, hint)
        _checked(lambda: sketches.quantile_relative_error(int(accuracy)), given, hint)
    return call.this, function, fraction(call.args.get("quantile"), name), accuracy


def _number(node: exp.Expression, what: str, hint: str) -> float:
    literal, sign = node, 1.0
    if isinstance(literal, exp.Neg):
        literal, sign = literal.this, -1.0
    if not isinstance(literal, exp.Literal) or literal.is_string:
        raise _error(f"{what} must be a numeric literal", node, hint)
    try:
        return sign * float(literal.this)
    except ValueError:
        raise _error(f"{what} must be a numeric literal", node, hint) from None


def _checked(check, node: exp.Expression | None, hint: str) -> None:  # noqa: ANN001
    """Run a sketch parameter check; its PlanError becomes a positioned SQL error."""
    try:
        check()
    except PlanError as error:
        raise _error(str(error), node, hint) from None


def fraction(node: exp.Expression | None, name: str) -> float | tuple[float, ...]:
    """p of a percentile call: a numeric literal in [0, 1], or Spark's array of them
    (`ARRAY(0.25, 0.5, 0.75)`: the ps in the order given, the result an ARRAY)."""
    if isinstance(node, exp.Array):
        items = node.expressions
        if not items:
            raise _error(
                f"{name}'s array of percentages is empty",
                node,
                "give at least one p, e.g. ARRAY(0.25, 0.5, 0.75)",
            )
        return tuple(_one_fraction(item, name) for item in items)
    return _one_fraction(node, name)


def _one_fraction(node: exp.Expression | None, name: str) -> float:
    hint = "p is a numeric literal from 0 to 1, e.g. 0.9"
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
