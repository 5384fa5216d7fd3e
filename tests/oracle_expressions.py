"""The oracle's types and scalar expressions (tests/oracle.py): SQL types as lower-case names,
and expressions as small JSON-friendly lists (`["+", ["col", "x"], ["lit", 1]]`) compiled to
Python functions of a row dict. Spark SQL's (non-ANSI) rules: BIGINT/INT arithmetic wraps; `/`
is in DOUBLE and division or modulo by zero is NULL; comparisons treat NaN as equal to itself
and larger than every other value. Imports nothing from mangonel (tests/test_fuzz.py checks).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

INT_BITS = {"int": 32, "bigint": 64}
NUMERIC_RANK = {"int": 0, "bigint": 1, "double": 2}

Expr = list  # ["col", name] | ["lit", value] | ["agg", i] | ["bound", "start"|"end"|"time"] | ...


def literal_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "int" if -(2**31) <= value < 2**31 else "bigint"
    if isinstance(value, float):
        return "double"
    return "string"


def _common(types: Iterable[str]) -> str:
    known = [t for t in types if t != "null"]
    if not known:
        return "null"
    if all(t in NUMERIC_RANK for t in known):
        return max(known, key=NUMERIC_RANK.__getitem__)
    if len(set(known)) != 1:
        raise ValueError(f"oracle: no common type of {known}")
    return known[0]


@dataclass
class Scope:
    """Types of what an expression may name: columns, aggregates (by position), bounds."""

    columns: dict[str, str]
    aggregates: list[str] = field(default_factory=list)


def type_of(expr: Expr, scope: Scope) -> str:
    op = expr[0]
    if op == "col":
        return scope.columns[expr[1]]
    if op == "lit":
        return literal_type(expr[1])
    if op == "agg":
        return scope.aggregates[expr[1]]
    if op == "bound":
        return "timestamp"
    args = [type_of(a, scope) for a in expr[1:]]
    if op in ("+", "-", "*", "%", "neg", "abs"):
        return _common(args)
    if op == "/":
        return "double"
    if op in ("coalesce",):
        return _common(args)
    if op == "if":
        return _common(args[1:])
    return "boolean"  # comparisons, and, or, not, is_null, is_not_null


def wrap(value: int, kind: str) -> int:
    bits = INT_BITS[kind]
    return (value + 2 ** (bits - 1)) % 2**bits - 2 ** (bits - 1)


def _as(value: Any, kind: str) -> Any:
    """A value of a (narrower) numeric type as the wider `kind`."""
    if value is None or kind not in NUMERIC_RANK:
        return value
    return float(value) if kind == "double" else int(value)


def _order_key(value: Any) -> tuple:
    """Spark's ordering of values: NaN equals NaN and is above everything; -0.0 = 0.0."""
    if isinstance(value, float) and math.isnan(value):
        return (1, 0.0)
    return (0, value)


def _arith(op: str, a: Any, b: Any, kind: str) -> Any:
    if kind == "double":
        a, b = float(a), float(b)
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        # % on doubles: Java's remainder (the dividend's sign), NULL for a zero divisor
        if b == 0:
            return None
        if math.isnan(a) or math.isnan(b) or math.isinf(a):
            return math.nan
        if math.isinf(b):
            return a
        return math.fmod(a, b)
    if op == "+":
        return wrap(a + b, kind)
    if op == "-":
        return wrap(a - b, kind)
    if op == "*":
        return wrap(a * b, kind)
    if b == 0:
        return None
    remainder = abs(a) % abs(b)
    return wrap(-remainder if a < 0 else remainder, kind)


_COMPARE = {
    "=": lambda x, y: x == y,
    "<>": lambda x, y: x != y,
    "<": lambda x, y: x < y,
    "<=": lambda x, y: x <= y,
    ">": lambda x, y: x > y,
    ">=": lambda x, y: x >= y,
}


def compile_expression(expr: Expr, scope: Scope) -> Callable[[dict], Any]:
    """A function of an environment dict (column name -> value, plus "$agg" -> list of
    aggregate values and "$bound" -> {"start", "end"}) giving the expression's value, of the
    expression's type as `type_of` says (ints for INT/BIGINT/TIMESTAMP, floats for DOUBLE)."""
    op = expr[0]
    kind = type_of(expr, scope)
    if op == "col":
        name = expr[1]
        if scope.columns[name] == "double":
            return lambda env: None if env[name] is None else float(env[name])
        return lambda env: env[name]
    if op == "lit":
        value = expr[1]
        return lambda env: value
    if op == "agg":
        position = expr[1]
        return lambda env: env["$agg"][position]
    if op == "bound":
        side = expr[1]
        return lambda env: env["$bound"][side]
    args = [compile_expression(a, scope) for a in expr[1:]]
    if op in ("+", "-", "*", "%"):
        left, right = args

        def arithmetic(env: dict) -> Any:
            a, b = left(env), right(env)
            if a is None or b is None:
                return None
            return _arith(op, a, b, kind)

        return arithmetic
    if op == "/":
        left, right = args

        def divide(env: dict) -> Any:
            a, b = left(env), right(env)
            if a is None or b is None or b == 0:
                return None
            return float(a) / float(b)

        return divide
    if op in ("neg", "abs"):
        (inner,) = args

        def unary(env: dict) -> Any:
            a = inner(env)
            if a is None:
                return None
            a = abs(a) if op == "abs" else -a
            return a if kind == "double" else wrap(a, kind)

        return unary
    if op == "coalesce":

        def coalesce(env: dict) -> Any:
            for argument in args:
                value = argument(env)
                if value is not None:
                    return _as(value, kind)
            return None

        return coalesce
    if op == "if":
        condition, then, otherwise = args
        return lambda env: _as(then(env) if condition(env) is True else otherwise(env), kind)
    if op in _COMPARE:
        left, right = args
        compare = _COMPARE[op]
        # numbers compare in their common type (BIGINT vs DOUBLE: as doubles, like Spark)
        common = _common(type_of(a, scope) for a in expr[1:])

        def comparison(env: dict) -> Any:
            a, b = left(env), right(env)
            if a is None or b is None:
                return None
            return compare(_order_key(_as(a, common)), _order_key(_as(b, common)))

        return comparison
    if op == "and":

        def conjunction(env: dict) -> Any:
            values = [a(env) for a in args]
            if False in values:
                return False
            return None if None in values else True

        return conjunction
    if op == "or":

        def disjunction(env: dict) -> Any:
            values = [a(env) for a in args]
            if True in values:
                return True
            return None if None in values else False

        return disjunction
    if op == "not":
        (inner,) = args

        def negation(env: dict) -> Any:
            value = inner(env)
            return None if value is None else not value

        return negation
    if op == "is_null":
        (inner,) = args
        return lambda env: inner(env) is None
    if op == "is_not_null":
        (inner,) = args
        return lambda env: inner(env) is not None
    raise ValueError(f"oracle: unknown expression form {op!r}")
