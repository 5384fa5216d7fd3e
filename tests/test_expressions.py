"""Scalar expressions: CPU results against hand-computed values, and the CUDA C text."""

from __future__ import annotations

import math
import re

import pyarrow as pa
import pytest
import sqlglot
from sqlglot import exp

from mangonel.catalog.types import TYPE_INFO, SqlType
from mangonel.compiler import nodes
from mangonel.compiler.cuda_expressions import CUDA_OPS, CudaContext, CudaValue, render_cuda
from mangonel.compiler.typing import TYPE_RULES, ExpressionError, TypeEnv, infer_type
from mangonel.runtime.cpu.expressions import CPU_OPS, evaluate

T = SqlType
NAN = math.nan
INT_MAX, INT_MIN = 2**31 - 1, -(2**31)
LONG_MAX, LONG_MIN = 2**63 - 1, -(2**63)

ENV = TypeEnv(
    columns={
        "i": T.INT,
        "l": T.BIGINT,
        "d": T.DOUBLE,
        "f": T.FLOAT,
        "s": T.STRING,
        "s2": T.STRING,
        "ts": T.TIMESTAMP,
        "b": T.BOOLEAN,
    }
)
ROWS = 5
COLUMNS = {
    "i": pa.array([1, -7, None, INT_MAX, 0], pa.int32()),
    "l": pa.array([0, 2, 3, None, -1], pa.int64()),
    "d": pa.array([1.5, NAN, -2.0, None, 0.0], pa.float64()),
    "f": pa.array([0.5, None, 2.5, -1.0, 3.0], pa.float32()),
    "s": pa.array(["a", "b", None, "a", "c"]),
    "s2": pa.array(["a", "a", "b", None, "c"]),
    "ts": pa.array([10, 20, 30, 40, 50], pa.timestamp("us", tz="UTC")),
    "b": pa.array([True, False, None, True, False]),
}
WINDOW_BOUNDS = {
    "start": pa.array([15] * ROWS, pa.timestamp("us", tz="UTC")),
    "end": pa.array([45] * ROWS, pa.timestamp("us", tz="UTC")),
}
N = None


def parse(sql: str) -> exp.Expression:
    """Parse, and resolve window_start/window_end as the binder does."""

    def resolve(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and node.name in ("window_start", "window_end"):
            return nodes.WindowBound(this=node.name.removeprefix("window_"))
        return node

    return sqlglot.parse_one(sql, read="spark").transform(resolve)


def same(actual: object, expected: object) -> bool:
    if actual is None or expected is None:
        return actual is expected
    if isinstance(expected, float):
        if math.isnan(expected):
            return math.isnan(actual)
        return actual == expected or math.isclose(actual, expected, rel_tol=1e-12)
    return actual == expected and type(actual) is type(expected)


def check(sql: str, expected: list, columns=COLUMNS, env=ENV) -> pa.Array:
    expression = parse(sql)
    result = evaluate(expression, env, columns, window_bounds=WINDOW_BOUNDS, length=ROWS)
    assert result.type == TYPE_INFO[infer_type(expression, env)].arrow
    assert len(result) == len(expected)
    # TIMESTAMP results compare as microseconds
    plain = result.cast(pa.int64()) if pa.types.is_timestamp(result.type) else result
    values = plain.to_pylist()
    assert all(same(a, e) for a, e in zip(values, expected, strict=True)), (sql, values)
    return result


# (expression, expected rows). Inputs, row by row:
#   i: 1, -7, NULL, INT_MAX, 0        l: 0, 2, 3, NULL, -1
#   d: 1.5, NaN, -2.0, NULL, 0.0      f: 0.5, NULL, 2.5, -1.0, 3.0
#   s: a, b, NULL, a, c               s2: a, a, b, NULL, c
#   ts: 10, 20, 30, 40, 50 (window 15..45)   b: TRUE, FALSE, NULL, TRUE, FALSE
CASES = [
    # arithmetic; integers wrap around
    ("i + l", [1, -5, N, N, -1]),
    ("i + 1", [2, -6, N, INT_MIN, 1]),
    ("i * i", [1, 49, N, 1, 0]),
    ("l * 4611686018427387904", [0, LONG_MIN, -4611686018427387904, N, -4611686018427387904]),
    ("i - l", [1, -9, N, N, 1]),
    ("-i", [-1, 7, N, -INT_MAX, 0]),
    ("ABS(i)", [1, 7, N, INT_MAX, 0]),
    ("ABS(-2147483648)", [INT_MIN] * ROWS),
    ("-(-2147483648)", [INT_MIN] * ROWS),
    ("f + f", [1.0, N, 5.0, -2.0, 6.0]),
    ("ABS(d)", [1.5, NAN, 2.0, N, 0.0]),
    # division always DOUBLE, by zero NULL
    ("i / l", [N, -3.5, N, N, -0.0]),
    ("d / 0", [N] * ROWS),
    ("7 / 2", [3.5] * ROWS),
    ("f / 2", [0.25, N, 1.25, -0.5, 1.5]),
    # modulo keeps the dividend's sign, by zero NULL, INT_MIN % -1 = 0
    ("i % l", [N, -1, N, N, 0]),
    ("i % 3", [1, -1, N, 1, 0]),
    ("-7 % -3", [-1] * ROWS),
    ("(-2147483648) % (-1)", [0] * ROWS),
    ("f % 2", [0.5, N, 0.5, -1.0, 1.0]),
    ("d % 0.0", [N] * ROWS),
    ("d % 1", [0.5, NAN, -0.0, N, 0.0]),
    # comparisons with Spark's NaN order (NaN = NaN, NaN above all)
    ("i > 0", [True, False, N, True, False]),
    ("d = d", [True, True, True, N, True]),
    ("d > 1", [True, True, False, N, False]),
    ("d < 1", [False, False, True, N, True]),
    ("d <= d", [True, True, True, N, True]),
    ("d >= 0", [True, True, False, N, True]),
    ("d <> 1.5", [False, True, True, N, True]),
    ("i = d", [False, False, N, N, True]),
    ("l != 2", [True, False, True, N, True]),
    ("b = TRUE", [True, False, N, True, False]),
    ("b < TRUE", [False, True, N, False, True]),
    # strings: (in)equality only
    ("s = 'a'", [True, False, N, True, False]),
    ("'a' = s", [True, False, N, True, False]),
    ("s <> 'a'", [False, True, N, False, True]),
    ("s = s2", [True, False, N, N, True]),
    ("s = 'nowhere'", [False, False, N, False, False]),
    ("s IN ('a', 'c')", [True, False, N, True, True]),
    ("s IN ('zz', NULL)", [N] * ROWS),
    ("s IN ('a', NULL)", [True, N, N, True, N]),
    ("s NOT IN ('a', 'c')", [False, True, N, False, False]),
    ("'a' = 'a'", [True] * ROWS),
    ("'a' = 'b'", [False] * ROWS),
    ("s = NULL", [N] * ROWS),
    ("s IS NULL", [False, False, True, False, False]),
    ("s IS NOT NULL", [True, True, False, True, True]),
    ("'x' IS NULL", [False] * ROWS),
    # timestamps
    ("ts >= window_start AND ts < window_end", [False, True, True, True, False]),
    ("ts BETWEEN window_start AND window_end", [False, True, True, True, False]),
    ("ts = ts", [True] * ROWS),
    # BETWEEN, IN
    ("i BETWEEN 0 AND 5", [True, False, N, False, True]),
    ("i NOT BETWEEN 0 AND 5", [False, True, N, True, False]),
    ("d BETWEEN -2 AND 1.5", [True, False, True, N, True]),
    ("i IN (1, 0)", [True, False, N, False, True]),
    ("i IN (-7)", [False, True, N, False, False]),
    ("i IN (1, NULL)", [True, N, N, N, N]),
    ("i NOT IN (1, NULL)", [False, N, N, N, N]),
    ("d IN (1.5, 0)", [True, False, False, N, True]),
    # IS
    ("i IS NULL", [False, False, True, False, False]),
    ("d IS NOT NULL", [True, True, True, False, True]),
    ("b IS TRUE", [True, False, False, True, False]),
    ("b IS NOT TRUE", [False, True, True, False, True]),
    ("b IS FALSE", [False, True, False, False, True]),
    ("NULL IS NULL", [True] * ROWS),
    # conditionals: a NULL condition is not taken
    ("CASE WHEN b THEN i ELSE d END", [1.0, NAN, -2.0, float(INT_MAX), 0.0]),
    ("CASE i WHEN 1 THEN 10 WHEN -7 THEN 20 ELSE 30 END", [10, 20, 30, 30, 30]),
    ("CASE WHEN b THEN l END", [0, N, N, N, N]),
    ("CASE WHEN i > 0 THEN 'pos' = s ELSE FALSE END", [False, False, False, False, False]),
    ("IF(b, 1, 2)", [1, 2, 2, 1, 2]),
    ("IF(b IS NULL, -1, i)", [1, -7, -1, INT_MAX, 0]),
    ("COALESCE(l, i, 99)", [0, 2, 3, INT_MAX, -1]),
    ("COALESCE(f, d)", [0.5, NAN, 2.5, -1.0, 3.0]),
    ("COALESCE(NULL, i)", [1, -7, N, INT_MAX, 0]),
    ("GREATEST(i, l)", [1, 2, 3, INT_MAX, 0]),
    ("GREATEST(d, f)", [1.5, NAN, 2.5, -1.0, 3.0]),
    ("LEAST(d, f)", [0.5, NAN, -2.0, -1.0, 0.0]),
    ("LEAST(d, 0)", [0.0, 0.0, -2.0, 0.0, 0.0]),
    ("GREATEST(CAST(NULL AS INT), i)", [1, -7, N, INT_MAX, 0]),
    ("GREATEST(ts, window_start)", [15, 20, 30, 40, 50]),
    ("LEAST(b, TRUE)", [True, False, True, True, False]),
    # casts: Java's conversions (toward zero, saturating, NaN -> 0)
    ("CAST(d AS INT)", [1, 0, -2, N, 0]),
    ("CAST(1e10 AS INT)", [INT_MAX] * ROWS),
    ("CAST(-1e10 AS INT)", [INT_MIN] * ROWS),
    ("CAST(1e30 AS BIGINT)", [LONG_MAX] * ROWS),
    ("CAST(-1e30 AS BIGINT)", [LONG_MIN] * ROWS),
    ("CAST(-2.7 AS BIGINT)", [-2] * ROWS),
    ("CAST(4294967297 AS INT)", [1] * ROWS),
    ("CAST(i AS BOOLEAN)", [True, True, N, True, False]),
    ("CAST(d AS BOOLEAN)", [True, True, True, N, False]),
    ("CAST(b AS INT)", [1, 0, N, 1, 0]),
    ("CAST(b AS DOUBLE)", [1.0, 0.0, N, 1.0, 0.0]),
    ("CAST(i AS FLOAT)", [1.0, -7.0, N, 2147483648.0, 0.0]),
    ("CAST(1e300 AS FLOAT)", [math.inf] * ROWS),
    ("CAST(NULL AS BIGINT)", [N] * ROWS),
    ("CAST(s = 'a' AS INT)", [1, 0, N, 1, 0]),
    # functions
    ("SQRT(d)", [math.sqrt(1.5), NAN, NAN, N, 0.0]),
    ("SQRT(-1)", [NAN] * ROWS),
    ("LN(d)", [math.log(1.5), NAN, N, N, N]),
    ("LN(0)", [N] * ROWS),
    ("LOG10(1000)", [3.0] * ROWS),
    ("LOG10(i)", [0.0, N, N, math.log10(INT_MAX), N]),
    ("LOG(2, 8)", [math.log(8) / math.log(2)] * ROWS),
    ("LOG(0, 8)", [N] * ROWS),
    ("LOG(2, -1)", [N] * ROWS),
    ("EXP(0)", [1.0] * ROWS),
    ("EXP(1000)", [math.inf] * ROWS),
    ("POWER(2, 10)", [1024.0] * ROWS),
    ("POW(d, 2)", [2.25, NAN, 4.0, N, 0.0]),
    ("POWER(1, d)", [1.0, NAN, 1.0, N, 1.0]),
    ("POWER(-1, EXP(1000))", [NAN] * ROWS),
    ("POWER(0, -1)", [math.inf] * ROWS),
    ("FLOOR(d)", [1, 0, -2, N, 0]),
    ("FLOOR(-2.5)", [-3] * ROWS),
    ("CEIL(-2.5)", [-2] * ROWS),
    ("CEILING(f)", [1, N, 3, -1, 3]),
    ("FLOOR(1e30)", [LONG_MAX] * ROWS),
    ("CEIL(i)", [1, -7, N, INT_MAX, 0]),
    ("ROUND(2.5)", [3.0] * ROWS),
    ("ROUND(-2.5)", [-3.0] * ROWS),
    ("ROUND(d)", [2.0, NAN, -2.0, N, 0.0]),
    ("ROUND(1.2345, 2)", [1.23] * ROWS),
    ("ROUND(-1.25, 1)", [-1.3] * ROWS),
    ("ROUND(1234.5, -2)", [1200.0] * ROWS),
    ("ROUND(1250.0, -2)", [1300.0] * ROWS),
    ("ROUND(1e300, 2)", [1e300] * ROWS),
    ("ROUND(0.1, 20)", [0.1] * ROWS),
    ("ROUND(f, 1)", [0.5, N, 2.5, -1.0, 3.0]),
    ("ROUND(i, -1)", [0, -10, N, -2147483646, 0]),
    ("ROUND(15, -1)", [20] * ROWS),
    ("ROUND(-15, -1)", [-20] * ROWS),
    ("ROUND(14, -1)", [10] * ROWS),
    ("ROUND(i, 2)", [1, -7, N, INT_MAX, 0]),
    ("ROUND(i, -10)", [0, 0, N, 0, 0]),
    ("ROUND(l, -1)", [0, 0, 0, N, 0]),
    ("SIGN(d)", [1.0, NAN, -1.0, N, 0.0]),
    ("SIGN(i)", [1.0, -1.0, N, 1.0, 0.0]),
    # LOG(x) is LN(x), as in Spark
    ("LOG(d)", [math.log(1.5), NAN, N, N, N]),
    ("LOG(i)", [0.0, N, N, math.log(INT_MAX), N]),
    # TIMESTAMP literals are microseconds since the epoch, UTC unless a zone is given
    ("ts >= TIMESTAMP '1970-01-01 00:00:00.00003'", [False, False, True, True, True]),
    ("ts = CAST('1970-01-01T00:00:00.000020' AS TIMESTAMP)", [False, True, False, False, False]),
    ("ts < TIMESTAMP '1970-01-01 01:00:00.00002+01:00'", [True, False, False, False, False]),
    ("window_start < TIMESTAMP '1970-01-01 00:00:00.000016Z'", [True] * ROWS),
    ("CASE WHEN b THEN TIMESTAMP '1970-01-01' END", [0, N, N, 0, N]),
    # composites
    ("(i + 1) * 2 > l AND NOT b", [False, False, N, False, True]),
    ("i > 0 OR b", [True, False, N, True, False]),
]


@pytest.mark.parametrize(("sql", "expected"), CASES, ids=[sql for sql, _ in CASES])
def test_cpu(sql: str, expected: list) -> None:
    check(sql, expected)


@pytest.mark.parametrize(("sql", "expected"), CASES, ids=[sql for sql, _ in CASES])
def test_cuda_renders_what_cpu_evaluates(sql: str, expected: list) -> None:
    """Each case the CPU evaluates to its expected rows renders to CUDA of the same type,
    through a CUDA rule for every node, reading exactly the columns the expression names.
    tests/test_expressions_nvcc.py compiles these same cases with nvcc and, on a GPU, checks
    the GPU's rows against the CPU's (`CASES` is part of its corpus)."""
    expression = parse(sql)
    cpu = check(sql, expected)
    # every operator and leaf (names and CAST's type are parts of their node)
    parts = (exp.Identifier, exp.DataType)
    classes = {type(node) for node in expression.walk() if not isinstance(node, parts)}
    assert classes <= set(CUDA_OPS), classes - set(CUDA_OPS)
    ctx = context()
    value = render_cuda(expression, ENV, ctx)
    assert isinstance(value, CudaValue)
    assert TYPE_INFO[value.type].arrow == cpu.type
    # the temporaries' declarations are part of the rendering
    text = " ".join([*ctx.statements, value.value, value.valid])
    read = {column.name for column in expression.find_all(exp.Column)}
    rendered = {
        name
        for name in ENV.columns
        if re.search(rf"\b({ctx.column_values[name]}|{ctx.column_valid[name]})\b", text)
    }
    assert rendered == read, text
    bounds = {node.bound for node in expression.find_all(nodes.WindowBound)}
    assert {b for b, c in (("start", "ws"), ("end", "we")) if re.search(rf"\b{c}\b", text)} == (
        bounds
    )


def test_three_valued_logic() -> None:
    env = TypeEnv(columns={"p": T.BOOLEAN, "q": T.BOOLEAN})
    t, f = True, False
    columns = {
        "p": pa.array([t, t, t, f, f, f, N, N, N]),
        "q": pa.array([t, f, N, t, f, N, t, f, N]),
    }

    def run(sql: str) -> list:
        return evaluate(parse(sql), env, columns, length=9).to_pylist()

    assert run("p AND q") == [t, f, N, f, f, f, N, f, N]
    assert run("p OR q") == [t, t, t, t, f, N, t, N, N]
    assert run("NOT p") == [f, f, f, t, t, t, N, N, N]
    assert run("p AND NULL") == [N, N, N, f, f, f, N, N, N]
    assert run("q OR NULL") == [t, N, N, t, N, N, t, N, N]
    assert run("(NOT (p AND q)) = (NOT p OR NOT q)") == [t, t, N, t, t, t, N, t, N]
    assert run("CASE WHEN p AND q THEN 1 ELSE 0 END") == [1, 0, 0, 0, 0, 0, 0, 0, 0]
    assert run("IF(p OR q, 1, 0)") == [1, 1, 1, 1, 0, 0, 1, 0, 0]


def test_dictionary_and_chunked_inputs() -> None:
    columns = dict(COLUMNS)
    columns["s"] = COLUMNS["s"].dictionary_encode()
    columns["s2"] = pa.chunked_array([COLUMNS["s2"][:2], COLUMNS["s2"][2:]])
    columns["i"] = pa.chunked_array([COLUMNS["i"]])
    check("s = 'a'", [True, False, N, True, False], columns)
    check("s IN ('b', 'c')", [False, True, N, False, True], columns)
    check("s = s2", [True, False, N, N, True], columns)
    check("i + 1", [2, -6, N, INT_MIN, 1], columns)
    decoded = check("s", ["a", "b", N, "a", "c"], columns)
    assert decoded.type == pa.string()


def test_inputs_are_normalised_to_the_declared_types() -> None:
    columns = dict(COLUMNS)
    columns["i"] = pa.array([1, -7, None, 3, 0], pa.int16())  # a narrower INT column
    columns["ts"] = pa.array([10, 20, 30, 40, 50], pa.int64())  # raw microseconds
    columns["s"] = COLUMNS["s"].cast(pa.large_string())
    check("i * 1000", [1000, -7000, N, 3000, 0], columns)
    check("ts > window_start", [False, True, True, True, True], columns)
    check("s <> 'a'", [False, True, N, False, True], columns)


def test_literals_broadcast() -> None:
    result = evaluate(parse("1 + 2"), ENV, {}, length=3)
    assert result.type == pa.int32()
    assert result.to_pylist() == [3, 3, 3]
    assert evaluate(parse("TRUE"), ENV, {}, length=0).to_pylist() == []


def test_aggregate_refs() -> None:
    env = TypeEnv(columns={}, aggregates=(T.DOUBLE, T.BIGINT))
    ratio = exp.Div(this=nodes.AggregateRef(this=0), expression=nodes.AggregateRef(this=1))
    aggregates = [pa.array([10.0, 3.0, None]), pa.array([4, 0, 2], pa.int64())]
    result = evaluate(ratio, env, {}, aggregates=aggregates, length=3)
    assert result.to_pylist() == [2.5, None, None]
    ctx = CudaContext({}, {}, aggregate_values=["a0", "a1"], aggregate_valid=["true", "n1"])
    rendered = render_cuda(ratio, env, ctx)
    assert rendered.value == "((a0) / ((double)(a1)))"
    assert rendered.valid == "((n1) && (((double)(a1)) != 0.0))"
    with pytest.raises(ExpressionError, match="no values for aggregate number 1"):
        evaluate(ratio, env, {}, aggregates=aggregates[:1], length=3)


def test_missing_inputs_are_errors() -> None:
    with pytest.raises(ExpressionError, match="no data for this column"):
        evaluate(parse("i + 1"), ENV, {}, length=2)
    with pytest.raises(ExpressionError, match="window_start is not available"):
        evaluate(parse("ts > window_start"), ENV, COLUMNS, length=ROWS)
    with pytest.raises(ValueError, match="3 rows, expected 5"):
        evaluate(parse("i + 1"), ENV, {"i": pa.array([1, 2, 3], pa.int32())}, length=ROWS)


# --- CUDA text ------------------------------------------------------------------------------


def context(**overrides) -> CudaContext:
    names = list(ENV.columns)
    ctx = CudaContext(
        column_values={name: f"v{k}" for k, name in enumerate(names)},
        column_valid={name: f"m{k}" for k, name in enumerate(names)},
        window_start="ws",
        window_end="we",
    )
    for key, value in overrides.items():
        setattr(ctx, key, value)
    return ctx


def cuda(sql: str, ctx: CudaContext | None = None) -> CudaValue:
    return render_cuda(parse(sql), ENV, ctx or context())


def test_every_typed_node_has_both_renderers() -> None:
    assert set(CPU_OPS) == set(CUDA_OPS) == set(TYPE_RULES)


def test_cuda_integer_arithmetic_wraps_through_unsigned() -> None:
    rendered = cuda("i + l")
    assert rendered.type is T.BIGINT
    assert rendered.value == (
        "((long long)((unsigned long long)((long long)(v0)) + (unsigned long long)(v1)))"
    )
    assert rendered.valid == "((m0) && (m1))"
    assert cuda("i * 2").value == "((int)((unsigned int)(v0) * (unsigned int)2))"
    assert cuda("d * 2").value == "((v2) * 2.0)"


def test_cuda_validity_simplifies_for_non_nullable_inputs() -> None:
    ctx = context(column_valid={**context().column_valid, "i": "true"})
    assert cuda("i + 1", ctx).valid == "true"
    assert cuda("i IS NULL", ctx).value == "false"
    assert cuda("i IS NOT NULL", ctx).value == "true"
    assert cuda("i / 2", ctx).valid == "(2.0 != 0.0)"
    assert cuda("CAST(NULL AS INT)").valid == "false"
    assert cuda("CAST(NULL AS INT)").value == "((int)0)"


def test_cuda_division_and_modulo_guard_zero() -> None:
    division = cuda("d / i")
    assert division.value == "((v2) / ((double)(v0)))"
    assert division.valid == "((m2) && (m0) && (((double)(v0)) != 0.0))"
    modulo = cuda("i % l")
    assert "== -1" in modulo.value  # INT_MIN % -1 never reaches the hardware
    assert "((v1) != 0)" in modulo.valid
    assert cuda("f % f").value.startswith("fmodf(")


def test_cuda_float_comparisons_order_nan_last() -> None:
    assert cuda("d < 1.5").value == "(!isnan((v2)) && (isnan(1.5) || (v2) < 1.5))"
    assert cuda("d = 1.5").value == "(((v2) == 1.5) || (isnan((v2)) && isnan(1.5)))"
    assert cuda("i < 2").value == "((v0) < 2)"
    assert cuda("ts < window_end").value == "((v6) < (we))"


def test_cuda_string_literals_become_dictionary_id_lookups() -> None:
    ctx = context()
    rendered = cuda("s = 'a' OR s IN ('b', 'a') OR 'b' = s2", ctx)
    assert ctx.string_literals == ["a", "b"]
    text = "\n".join([*ctx.statements, rendered.value])
    assert "((v4) == string_literal_ids[0])" in text
    assert "((v4) == string_literal_ids[1])" in text
    assert "(string_literal_ids[1] == (v5))" in text
    assert "string_literal_ids[2]" not in text
    assert cuda("s = s2").value == "((v4) == (v5))"
    assert cuda("'x' = 'x'").value == "true"
    assert cuda("'x' <> 'x'").value == "false"
    assert cuda("s IS NULL").value == "(!(m4))"


def test_cuda_three_valued_logic_text() -> None:
    conjunction = cuda("b AND i > 0")
    assert conjunction.value == "((m7) && (m0) && (v7) && ((v0) > 0))".replace(
        "((v0) > 0)", "(0 < (v0))"
    )
    assert conjunction.valid == "(((m7) && (m0)) || ((m7) && (!(v7))) || ((m0) && (!(0 < (v0)))))"
    disjunction = cuda("b OR TRUE")
    assert disjunction.value == "true" and disjunction.valid == "true"
    assert cuda("b AND FALSE").value == "false"
    assert cuda("b AND FALSE").valid == "true"


def test_cuda_casts_use_saturating_intrinsics() -> None:
    # cvt saturates like Java, but maps NaN to the minimum where Java gives 0.
    assert cuda("CAST(d AS INT)").value == (
        "(isnan(((double)(v2))) ? ((int)0) : __double2int_rz(((double)(v2))))"
    )
    assert cuda("CAST(f AS BIGINT)").value == (
        "(isnan(((double)(v3))) ? ((long long)0) : __double2ll_rz(((double)(v3))))"
    )
    assert cuda("CAST(d AS FLOAT)").value == "__double2float_rn((v2))"
    assert cuda("FLOOR(d)").value == "(isnan((v2)) ? ((long long)0) : __double2ll_rd((v2)))"
    assert "__double2ll_ru(((double)(v3)))" in cuda("CEIL(f)").value
    assert cuda("CAST(l AS INT)").value == "((int)(v1))"


def test_cuda_literals() -> None:
    assert cuda("-2147483648 + i").value.startswith("((int)((unsigned int)(-2147483647 - 1)")
    assert "(-9223372036854775807LL - 1LL)" in cuda("l + -9223372036854775808").value
    assert "2147483648LL" in cuda("l + 2147483648").value
    assert "(-0.25)" in cuda("d + -0.25").value
    assert "1e+100" in cuda("d * 1e100").value


def test_cuda_context_fragments_are_checked() -> None:
    for bad in ['x"', "x // y", "x /* y", "a\nb", "a; b", "#define", "x\\"]:
        ctx = context(column_values={**context().column_values, "i": bad})
        with pytest.raises(ValueError, match="unsafe C expression"):
            cuda("i + 1", ctx)
    with pytest.raises(ExpressionError, match="window_start is not available"):
        cuda("ts > window_start", context(window_start=None))
    with pytest.raises(ExpressionError, match="no C expression for this column"):
        cuda("i + 1", context(column_values={}))
