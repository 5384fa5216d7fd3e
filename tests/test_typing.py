"""Type inference of scalar expressions, and the aggregate name table."""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

from mangonel.catalog.types import SqlType
from mangonel.compiler import nodes
from mangonel.compiler.logical import AggregateFunction
from mangonel.compiler.typing import (
    AGGREGATE_FUNCTIONS,
    SUPPORTED_FUNCTIONS,
    TYPE_RULES,
    ExpressionError,
    TypeEnv,
    aggregate_result_type,
    infer_type,
)
from mangonel.errors import MangonelError

T = SqlType
ENV = TypeEnv(
    columns={
        "i": T.INT,
        "l": T.BIGINT,
        "f": T.FLOAT,
        "d": T.DOUBLE,
        "s": T.STRING,
        "s2": T.STRING,
        "ts": T.TIMESTAMP,
        "b": T.BOOLEAN,
    },
    aggregates=(T.BIGINT, T.DOUBLE, T.TIMESTAMP),
)


def parse(sql: str) -> exp.Expression:
    return sqlglot.parse_one(sql, read="spark")


# (expression, expected type): one line per rule of Spark's typing we follow.
TYPED = [
    ("i", T.INT),
    ("i + i", T.INT),  # INT arithmetic stays INT (and wraps)
    ("i + l", T.BIGINT),
    ("l * f", T.FLOAT),  # Spark: BIGINT op FLOAT is FLOAT
    ("f - d", T.DOUBLE),
    ("i / i", T.DOUBLE),  # `/` always yields DOUBLE
    ("f / f", T.DOUBLE),
    ("i % l", T.BIGINT),
    ("f % f", T.FLOAT),
    ("-i", T.INT),
    ("1", T.INT),
    ("2147483647", T.INT),
    ("2147483648", T.BIGINT),
    ("-2147483648", T.INT),
    ("-2147483649", T.BIGINT),
    ("-9223372036854775808", T.BIGINT),
    ("1.5", T.DOUBLE),  # decimal literals are DOUBLE
    ("1e3", T.DOUBLE),
    ("TRUE", T.BOOLEAN),
    ("i = d", T.BOOLEAN),
    ("s = 'x'", T.BOOLEAN),
    ("'x' <> s", T.BOOLEAN),
    ("s = s2", T.BOOLEAN),
    ("s IN ('a', 'b', NULL)", T.BOOLEAN),
    ("s IS NULL", T.BOOLEAN),
    ("s IS NOT NULL", T.BOOLEAN),
    ("ts < ts", T.BOOLEAN),
    ("b AND NOT (i > 0) OR NULL", T.BOOLEAN),
    ("b IS TRUE", T.BOOLEAN),
    ("i BETWEEN 1 AND 2.5", T.BOOLEAN),
    ("i IN (1, -2, NULL)", T.BOOLEAN),
    ("CASE WHEN b THEN i ELSE d END", T.DOUBLE),
    ("CASE WHEN b THEN i END", T.INT),
    ("CASE i WHEN 1 THEN l WHEN 2 THEN NULL END", T.BIGINT),
    ("CASE WHEN b THEN ts ELSE NULL END", T.TIMESTAMP),
    ("IF(b, 1, 2)", T.INT),
    ("COALESCE(i, NULL, l)", T.BIGINT),
    ("NULL + i", T.INT),
    ("CAST(d AS INT)", T.INT),
    ("CAST(i AS BOOLEAN)", T.BOOLEAN),
    ("CAST(b AS DOUBLE)", T.DOUBLE),
    ("CAST(NULL AS BIGINT)", T.BIGINT),
    ("CAST(f AS REAL)", T.FLOAT),
    ("ABS(i)", T.INT),
    ("ABS(f)", T.FLOAT),
    ("SQRT(i)", T.DOUBLE),
    ("LN(f)", T.DOUBLE),
    ("LOG10(l)", T.DOUBLE),
    ("LOG(2, d)", T.DOUBLE),
    ("EXP(i)", T.DOUBLE),
    ("POWER(i, 2)", T.DOUBLE),
    ("POW(f, 0.5)", T.DOUBLE),
    ("FLOOR(d)", T.BIGINT),  # Spark: FLOOR/CEIL of non-decimals are BIGINT
    ("CEIL(i)", T.BIGINT),
    ("CEILING(f)", T.BIGINT),
    ("ROUND(d)", T.DOUBLE),
    ("ROUND(f, 2)", T.FLOAT),
    ("ROUND(i, -1)", T.INT),
    ("GREATEST(i, l, f)", T.FLOAT),
    ("LEAST(ts, ts)", T.TIMESTAMP),
    ("SIGN(i)", T.DOUBLE),
    ("SIGNUM(d)", T.DOUBLE),
    ("((i))", T.INT),
]


@pytest.mark.parametrize(("sql", "expected"), TYPED, ids=[sql for sql, _ in TYPED])
def test_infer_type(sql: str, expected: SqlType) -> None:
    assert infer_type(parse(sql), ENV) is expected


def test_window_bounds_and_aggregate_refs() -> None:
    start = nodes.WindowBound(this="start")
    assert infer_type(start, ENV) is T.TIMESTAMP
    assert infer_type(exp.LT(this=start, expression=nodes.WindowBound(this="end")), ENV) is (
        T.BOOLEAN
    )
    assert infer_type(nodes.AggregateRef(this=1), ENV) is T.DOUBLE
    ratio = exp.Div(this=nodes.AggregateRef(this=1), expression=nodes.AggregateRef(this=0))
    assert infer_type(ratio, ENV) is T.DOUBLE
    assert infer_type(exp.GTE(this=nodes.AggregateRef(this=2), expression=start), ENV) is (
        T.BOOLEAN
    )
    with pytest.raises(ExpressionError, match="no aggregate number 3"):
        infer_type(nodes.AggregateRef(this=3), ENV)


# (expression, fragment of the message): what users get instead of a wrong result.
REJECTED = [
    ("s < 'x'", "STRING values cannot be compared with <"),
    ("s BETWEEN 'a' AND 'b'", "STRING values cannot be compared with BETWEEN"),
    ("s + 1", "+ needs numeric operands, got STRING"),
    ("ts + 1", "+ needs numeric operands, got TIMESTAMP"),
    ("ts - ts", "- needs numeric operands, got TIMESTAMP"),
    ("-b", "needs numeric operands, got BOOLEAN"),
    ("i = 'x'", "cannot compare INT with STRING"),
    ("d = ts", "cannot compare DOUBLE with TIMESTAMP"),
    ("b = 1", "cannot compare BOOLEAN with INT"),
    ("i AND b", "AND needs boolean operands, got INT"),
    ("NOT i", "NOT needs boolean operands, got INT"),
    ("CASE WHEN i THEN 1 END", "CASE needs boolean operands, got INT"),
    ("CASE WHEN b THEN s ELSE s2 END", "CASE cannot yield STRING values"),
    ("COALESCE(s, 'x')", "string literals may only be compared with STRING columns"),
    ("IF(b, ts, 1)", "IF mixes types INT, TIMESTAMP"),
    ("'x'", "string literals may only be compared"),
    ("NULL", "decided by NULLs alone"),
    ("NULL + NULL", "decided by NULLs alone"),
    ("unknown_col + 1", "unknown column 'unknown_col'"),
    ("i IN (l, 2)", "IN takes a list of literals"),
    ("i IN (SELECT 1)", "IN takes a list of literals"),
    ("FOO(i)", "unknown function FOO"),
    ("UPPER(s)", "function UPPER is not supported"),
    ("SIN(d)", "function SIN is not supported"),
    ("SUM(i)", "aggregate function SUM cannot appear here"),
    ("CAST(ts AS BIGINT)", "cannot CAST TIMESTAMP to BIGINT"),
    ("CAST(s AS INT)", "cannot CAST STRING to INT"),
    ("CAST(i AS STRING)", "cannot CAST INT to STRING"),
    ("CAST(i AS SMALLINT)", "cannot CAST to SMALLINT"),
    ("ROUND(d, i)", "ROUND's scale must be an integer literal"),
    ("ROUND(d, 1.5)", "ROUND's scale must be an integer literal"),
    ("FLOOR(d, 2)", "FLOOR takes one argument here"),
    ("i DIV 2", "IntDiv expressions are not supported"),
    ("i <=> l", "NullSafeEQ expressions are not supported"),
    ("99999999999999999999", "integer literal out of BIGINT range"),
    ("ABS(s)", "ABS needs numeric operands, got STRING"),
]


@pytest.mark.parametrize(("sql", "message"), REJECTED, ids=[sql for sql, _ in REJECTED])
def test_rejected(sql: str, message: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        infer_type(parse(sql), ENV)
    assert message in caught.value.message
    assert isinstance(caught.value, MangonelError)
    assert isinstance(caught.value.node, exp.Expression)


def test_error_points_at_the_offending_node() -> None:
    expression = parse("i + 1 > 0 AND s < 'x'")
    with pytest.raises(ExpressionError) as caught:
        infer_type(expression, ENV)
    assert caught.value.node is expression.find(exp.LT)
    assert "s < 'x'" in str(caught.value)


def test_unknown_function_hint_lists_supported_functions() -> None:
    with pytest.raises(ExpressionError) as caught:
        infer_type(parse("MEDIAN_OF_THREE(i, l, d)"), ENV)
    assert "MEDIAN_OF_THREE" in caught.value.message
    assert caught.value.hint == "supported functions: " + ", ".join(SUPPORTED_FUNCTIONS)
    assert "hint: supported functions: ABS," in str(caught.value)


def test_supported_functions_sorted_and_all_typed() -> None:
    assert list(SUPPORTED_FUNCTIONS) == sorted(SUPPORTED_FUNCTIONS)
    for name in SUPPORTED_FUNCTIONS:
        arguments = {"IF": "(b, 1, 2)", "LOG": "(2, d)", "POW": "(d, 2)", "POWER": "(d, 2)"}
        sql = name + arguments.get(name, "(d)" if name not in ("COALESCE",) else "(d, 1)")
        node = parse(sql)
        assert type(node) in TYPE_RULES, sql
        infer_type(node, ENV)


def test_string_literal_against_null_and_literal_pairs() -> None:
    assert infer_type(parse("'a' = 'b'"), ENV) is T.BOOLEAN
    assert infer_type(parse("s = NULL"), ENV) is T.BOOLEAN
    assert infer_type(parse("NULL = NULL"), ENV) is T.BOOLEAN


AGGREGATES = [
    ("COUNT(i)", AggregateFunction.COUNT),
    ("COUNT(*)", AggregateFunction.COUNT),
    ("SUM(i)", AggregateFunction.SUM),
    ("MIN(i)", AggregateFunction.MIN),
    ("MAX(i)", AggregateFunction.MAX),
    ("AVG(i)", AggregateFunction.AVG),
    ("VAR_POP(i)", AggregateFunction.VAR_POP),
    ("VAR_SAMP(i)", AggregateFunction.VAR_SAMP),
    ("VARIANCE(i)", AggregateFunction.VAR_SAMP),
    ("STDDEV_POP(i)", AggregateFunction.STDDEV_POP),
    ("STDDEV_SAMP(i)", AggregateFunction.STDDEV_SAMP),
    ("STDDEV(i)", AggregateFunction.STDDEV_SAMP),
]


@pytest.mark.parametrize(("sql", "function"), AGGREGATES, ids=[sql for sql, _ in AGGREGATES])
def test_aggregate_name_table(sql: str, function: AggregateFunction) -> None:
    assert AGGREGATE_FUNCTIONS[type(parse(sql))] is function


RESULT_TYPES = [
    (AggregateFunction.COUNT_STAR, None, T.BIGINT),
    (AggregateFunction.COUNT, T.STRING, T.BIGINT),
    (AggregateFunction.COUNT, T.TIMESTAMP, T.BIGINT),
    (AggregateFunction.SUM, T.INT, T.BIGINT),
    (AggregateFunction.SUM, T.BIGINT, T.BIGINT),
    (AggregateFunction.SUM, T.FLOAT, T.DOUBLE),
    (AggregateFunction.MIN, T.INT, T.INT),
    (AggregateFunction.MAX, T.FLOAT, T.FLOAT),
    (AggregateFunction.MAX, T.TIMESTAMP, T.TIMESTAMP),
    (AggregateFunction.AVG, T.INT, T.DOUBLE),
    (AggregateFunction.VAR_POP, T.BIGINT, T.DOUBLE),
    (AggregateFunction.VAR_SAMP, T.FLOAT, T.DOUBLE),
    (AggregateFunction.STDDEV_POP, T.INT, T.DOUBLE),
    (AggregateFunction.STDDEV_SAMP, T.DOUBLE, T.DOUBLE),
]


@pytest.mark.parametrize(("function", "argument", "expected"), RESULT_TYPES)
def test_aggregate_result_type(function, argument, expected) -> None:
    assert aggregate_result_type(function, argument) is expected


@pytest.mark.parametrize(
    ("function", "argument"),
    [
        (AggregateFunction.SUM, T.STRING),
        (AggregateFunction.SUM, T.TIMESTAMP),
        (AggregateFunction.AVG, T.BOOLEAN),
        (AggregateFunction.MIN, T.STRING),
        (AggregateFunction.MAX, T.BOOLEAN),
        (AggregateFunction.STDDEV_POP, T.TIMESTAMP),
        (AggregateFunction.SUM, None),
    ],
)
def test_aggregate_result_type_rejects(function, argument) -> None:
    node = parse("SUM(s)")
    with pytest.raises(ExpressionError) as caught:
        aggregate_result_type(function, argument, node=node)
    assert function.value in caught.value.message
    assert caught.value.node is node
