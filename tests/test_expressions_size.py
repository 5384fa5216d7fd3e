"""Rendering is linear in the expression's size, for every node kind, on both targets.

The CUDA renderer once pasted an operand's C text into its parent several times (Kleene
AND/OR, CASE, COALESCE, GREATEST, ABS, ...), so `a OR b OR ...` of 15 terms was 56 MB of C
and 20 terms killed the process. These deep and long expressions must render to at most a
constant number of bytes per node, and doubling their size must about double the source.
tests/test_expressions_nvcc.py compiles the same expressions (`deep_sql()` is part of its
corpus) and, on a GPU host, compares their GPU rows with the CPU's.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
import sqlglot
from sqlglot import exp

from mangonel.catalog.types import SqlType as T
from mangonel.compiler import codegen
from mangonel.compiler import cuda_expressions as ex
from mangonel.compiler.cuda_expressions import CudaContext, render_cuda
from mangonel.compiler.logical import AggregateFunction as F
from mangonel.compiler.typing import TypeEnv
from mangonel.runtime.cpu import expressions as cpu_ex
from mangonel.runtime.cpu.expressions import evaluate

sys.path.insert(0, str(Path(__file__).parent))
from plans import make_plan  # noqa: E402

ENV = TypeEnv(
    columns={"i": T.INT, "l": T.BIGINT, "d": T.DOUBLE, "f": T.FLOAT, "b": T.BOOLEAN, "s": T.STRING}
)
# Bytes of C per expression node, at most. The largest now is about 145 (an item of a DOUBLE
# IN list: a comparison with Spark's NaN order, then a Kleene OR); exponential growth passes
# any constant within a few levels (at depth 10 the old renderer wrote 3.4 MB for GREATEST,
# 36 MB for BETWEEN).
BYTES_PER_NODE = 200


def _chain(operator: str, terms: list[str]) -> str:
    return f" {operator} ".join(terms)


def _nest(n: int, opening: str, inner: str, closing: str) -> str:
    """`opening` n times, `inner`, `closing` n times: opening*n + inner + closing*n."""
    return opening * n + inner + closing * n


def deep_sql(n: int) -> dict[str, str]:
    """Expressions whose size grows with n: long chains and deep nests of every node kind."""
    return {
        "or": _chain("OR", [f"i > {k}" if k % 2 else f"b AND d < {k}" for k in range(n)]),
        "and": _chain("AND", [f"(b OR d <> {k})" if k % 2 else f"l >= {k}" for k in range(n)]),
        "not": _nest(n, "NOT (", "b OR i > 0", ")"),
        "case-else": _nest(n, "CASE WHEN i > 1 THEN d / i ELSE ", "f", " END"),
        "case-when": _nest(n, "CASE WHEN ", "b", " THEN i > 2 ELSE d < 1 END"),
        "case-then": _nest(n, "CASE WHEN b IS NULL THEN ", "l % i", " END"),
        "case-operand": _nest(n, "CASE ", "i", " WHEN 1 THEN 3 WHEN 3 THEN 1 WHEN 0 THEN i END"),
        "if": _nest(n, "IF(d > 0, ", "f", ", NULL)"),
        "coalesce-first": _nest(n, "COALESCE(", "i", ", l)"),
        "coalesce-last": _nest(n, "COALESCE(d, ", "f", ")"),
        "coalesce-wide": "COALESCE(" + ", ".join(["i", "l", "d", "f"] * n) + ")",
        "greatest": _nest(n, "GREATEST(", "d", ", f, i)"),
        "least-wide": "LEAST(" + ", ".join(["l", "i"] * n) + ")",
        "abs": _nest(n, "ABS(", "i - 7", " - 1)"),
        "between": _nest(n, "(", "b", " BETWEEN FALSE AND TRUE)"),
        "in": _nest(n, "(", "b", " IN (TRUE, NULL))"),
        "in-wide": f"d IN ({', '.join(str(k) for k in range(n))})",
        "string-in-wide": f"s IN ({', '.join(repr(f'x{k % 2}') for k in range(n))})",
        "equal": _nest(n, "((d <= f) = (", "b", ") <> (i < l))"),
        "is": _nest(n, "((", "b", " IS TRUE) IS NOT FALSE)"),
        "arithmetic": _nest(n, "(", "i", " * 3 - l) % 5"),
        "division": _nest(n, "d / (", "f", " + 1)"),
        "round-int": _nest(n, "ROUND(", "i", ", -1)"),
        "round-double": _nest(n, "ROUND(", "d", ", 2)"),
        "functions": _nest(n, "SIGN(LN(SQRT(EXP(POWER(", "d", ", f))))) + 1"),
        "log": _nest(n, "LOG(2, LOG10(", "d", "))"),
        "floor-cast": _nest(n, "CAST(FLOOR(CEIL(", "d", ") / 3) AS INT)"),
        "neg": _nest(n, "-(", "l", " + 1)"),
    }


def parse(sql: str) -> exp.Expression:
    return sqlglot.parse_one(sql, read="spark")


def context() -> CudaContext:
    names = list(ENV.columns)
    return CudaContext(
        column_values={name: f"v{k}" for k, name in enumerate(names)},
        column_valid={name: f"m{k}" for k, name in enumerate(names)},
    )


def c_size(expression: exp.Expression) -> int:
    ctx = context()
    rendered = render_cuda(expression, ENV, ctx)
    return sum(len(text) for text in [*ctx.statements, rendered.value, rendered.valid])


def node_count(expression: exp.Expression) -> int:
    return sum(1 for _ in expression.walk())


def assert_small_shapes_are_linear() -> None:
    """The size bound at 6 levels, for every shape: what the tests of large expressions check
    first, so that an exponential renderer fails them instead of exhausting memory."""
    for shape, sql in deep_sql(6).items():
        expression = parse(sql)
        assert c_size(expression) <= BYTES_PER_NODE * node_count(expression), shape


@pytest.mark.parametrize("shape", list(deep_sql(1)))
def test_cuda_source_is_linear_in_the_expression(shape: str) -> None:
    sizes = {}
    for n in (3, 6, 12, 25, 50):  # small first: an exponential renderer fails early and fast
        expression = parse(deep_sql(n)[shape])
        sizes[n] = c_size(expression)
        assert sizes[n] <= BYTES_PER_NODE * node_count(expression), (n, sizes[n])
    # quadratic growth (an operand pasted once per comparison) would give about 4
    assert sizes[50] <= 2.3 * sizes[25], sizes


def test_thousand_term_or_is_small() -> None:
    # 20 terms was OOM-killed; 1000 terms is under 200 KB.
    assert_small_shapes_are_linear()
    terms = [f"i = {k}" if k % 2 else f"d > {k}" for k in range(1000)]
    expression = parse(" OR ".join(terms))
    assert c_size(expression) < node_count(expression) * BYTES_PER_NODE


def test_short_expressions_stay_one_expression() -> None:
    ctx = context()
    rendered = render_cuda(parse("i > 0 AND b"), ENV, ctx)
    assert ctx.statements == []
    assert rendered.value == "((m0) && (m4) && (0 < (v0)) && (v4))"


def test_temporaries_are_declared_before_use_and_named_once() -> None:
    ctx = context()
    first = render_cuda(parse(deep_sql(6)["or"]), ENV, ctx)
    second = render_cuda(parse(deep_sql(6)["greatest"]), ENV, ctx)
    declared: list[str] = []
    for statement in ctx.statements:
        declaration, initialiser = statement.split(" = ", 1)
        for match in ex._TEMPORARY_NAME.finditer(initialiser):
            assert match.group(0) in declared, (match.group(0), statement)
        name = declaration.split()[-1]
        assert name not in declared
        declared.append(name)
    for rendered in (first, second):
        for match in ex._TEMPORARY_NAME.finditer(rendered.value + " " + rendered.valid):
            assert match.group(0) in declared


def test_inputs_may_not_use_temporary_names() -> None:
    ctx = CudaContext(column_values={"i": "e0"}, column_valid={"i": "true"})
    with pytest.raises(ValueError, match="uses a temporary's name"):
        render_cuda(parse("i + 1"), TypeEnv(columns={"i": T.INT}), ctx)


def test_cpu_evaluates_each_node_once(monkeypatch) -> None:
    """IN, BETWEEN and CASE x WHEN compare one operand several times: it is evaluated once
    (nested BETWEEN of depth 30 would otherwise evaluate its column 2**30 times)."""
    reads = []
    column_op = cpu_ex.CPU_OPS[exp.Column]

    def counting(r, node):
        reads.append(node.name)
        return column_op(r, node)

    monkeypatch.setitem(cpu_ex.CPU_OPS, exp.Column, counting)
    columns = {
        "i": pa.array([1, None, 3], pa.int32()),
        "l": pa.array([0, 2, None], pa.int64()),
        "d": pa.array([1.5, None, -2.0]),
        "f": pa.array([0.5, 2.0, None], pa.float32()),
        "b": pa.array([True, None, False]),
        "s": pa.array(["x1", None, "y"]),
    }
    for n in (6, 30):  # 6 first: re-evaluation fails there before it takes exponential time
        for shape, sql in deep_sql(n).items():
            reads.clear()
            expression = parse(sql)
            evaluate(expression, ENV, columns, length=3)
            assert len(reads) == len(list(expression.find_all(exp.Column))), (n, shape)


def test_deep_expressions_compile(tmp_path) -> None:
    """Every shape at 30 levels or terms, and 50-term AND/OR chains, compile with nvcc (one
    kernel each, as tests/test_expressions_nvcc.py builds them)."""
    from test_expressions_nvcc import build_source

    assert_small_shapes_are_linear()
    expressions = [parse(sql) for sql in deep_sql(30).values()]
    expressions += [parse(deep_sql(50)["or"]), parse(deep_sql(50)["and"])]
    source, kernels = build_source(expressions)
    assert len(source) < 300_000  # the old renderer needed more than memory for this
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH; the expressions were rendered, not compiled")
    (tmp_path / "deep.cu").write_text(source)
    result = subprocess.run(
        [nvcc, "--ptx", "-arch=sm_90", "-o", str(tmp_path / "deep.ptx"), str(tmp_path / "deep.cu")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    ptx = (tmp_path / "deep.ptx").read_text()
    assert all(f".entry {kernel.name}(" in ptx for kernel in kernels)


def _where_plan(terms: int):
    columns = [("ts", T.TIMESTAMP), ("k", T.BIGINT), ("x", T.DOUBLE), ("i", T.INT)]
    where = exp.or_(
        *[
            exp.and_(
                exp.GT(this=exp.column("i"), expression=exp.Literal.number(t)),
                exp.LT(this=exp.column("x"), expression=exp.Literal.number(t)),
            )
            for t in range(terms)
        ]
    )
    argument = parse(_nest(terms, "CASE WHEN x > 0 THEN ", "x", " ELSE i END"))
    return make_plan(
        columns, keys=("k",), aggregates=[(F.SUM, argument)], where=where, size=1_000_000
    )


def test_plan_source_is_linear_and_compiles(tmp_path) -> None:
    """A WHERE of 50 OR terms and a 50-deep CASE argument: the kernels grow by a constant
    per term, and nvcc compiles them (the temporaries are declared in every kernel that
    includes the lift)."""
    assert_small_shapes_are_linear()
    base = len(codegen.render_plan(_where_plan(1)).source)
    source = codegen.render_plan(_where_plan(50)).source
    # the lift row appears in two kernels (lift and fused); about 6 nodes per term
    assert len(source) - base <= 2 * 50 * 6 * BYTES_PER_NODE, len(source) - base
    # declared in both kernels that include the lift row (lift and fused)
    assert len(re.findall(r"const (bool|double) e0(_ok)? = ", source)) >= 2
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH; the plan was rendered, not compiled")
    path = tmp_path / "plan.cu"
    path.write_text(source)
    result = subprocess.run(
        [
            nvcc,
            "--ptx",
            "-arch=sm_90",
            "-std=c++17",
            "-diag-suppress",
            "177",
            "-o",
            str(tmp_path / "plan.ptx"),
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
