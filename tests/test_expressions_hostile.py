"""Hostile column names and string literals: never in the CUDA source, still right on CPU."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest
import sqlglot
from sqlglot import exp

from mangonel.catalog.types import SqlType
from mangonel.compiler.cuda_expressions import CudaContext, CudaValue, render_cuda
from mangonel.compiler.typing import TypeEnv
from mangonel.runtime.cpu.expressions import evaluate

HOSTILE_NAMES = [
    'a"; system("rm -rf /"); //',
    "x*/int y;/*",
    "line one\nline two",
    "back\\slash\\",
    "it's",
    "*/ #include <stdio.h>",
    "m0",  # spells a C identifier codegen might use for something else
    "v1 + 1",
    "??=define",  # a trigraph
]
HOSTILE_LITERALS = [
    "it's",
    '"; abort(); "',
    "two\nlines",
    "back\\",
    "*/ /*",
    "// comment",
    "\\n",
    "",
]
C_NAMES = [f"col{k}" for k in range(len(HOSTILE_NAMES))]
# What C source built from our renderings may never contain: any of it could end a string or
# comment the renderer never opened, or start a new statement or preprocessor line.
FORBIDDEN_IN_C = ['"', "'", "\\", "\n", "//", "/*", "*/", "#", ";", "??"]

ROWS = 4
NUMBERS = pa.array([1, -2, None, 40], pa.int64())
STRINGS = pa.array([HOSTILE_LITERALS[0], HOSTILE_LITERALS[1], None, HOSTILE_LITERALS[2]])


def column(name: str) -> exp.Column:
    return exp.column(name, quoted=True)


def env() -> TypeEnv:
    # Even-numbered names are BIGINT columns, odd-numbered STRING columns.
    return TypeEnv(
        columns={
            name: SqlType.BIGINT if k % 2 == 0 else SqlType.STRING
            for k, name in enumerate(HOSTILE_NAMES)
        }
    )


def columns() -> dict[str, pa.Array]:
    return {name: NUMBERS if k % 2 == 0 else STRINGS for k, name in enumerate(HOSTILE_NAMES)}


def context() -> CudaContext:
    return CudaContext(
        column_values=dict(zip(HOSTILE_NAMES, C_NAMES, strict=True)),
        column_valid={name: f"{c}_valid" for name, c in zip(HOSTILE_NAMES, C_NAMES, strict=True)},
    )


def numeric_name(k: int) -> str:
    return HOSTILE_NAMES[2 * k]


def string_name(k: int) -> str:
    return HOSTILE_NAMES[2 * k + 1]


# The one shape of a temporary's declaration; its initialiser is checked like value and valid.
DECLARATION = re.compile(r"const (bool|int|long long|float|double) e[0-9]+(_ok)? = (.+);")


def rendered_texts(rendered: CudaValue, ctx: CudaContext) -> list[str]:
    """Every C text of a rendering: the temporaries' initialisers, the value, the validity."""
    initialisers = []
    for statement in ctx.statements:
        match = DECLARATION.fullmatch(statement)
        assert match, statement
        initialisers.append(match.group(3))
    return [*initialisers, rendered.value, rendered.valid]


def assert_clean(rendered: CudaValue, ctx: CudaContext) -> None:
    parts = rendered_texts(rendered, ctx)
    source = "\n".join(parts)  # the newlines are ours, checked apart
    for part in parts:
        for forbidden in FORBIDDEN_IN_C:
            assert forbidden not in part, (forbidden, part)
    for name in HOSTILE_NAMES:
        assert name not in source
    for literal in HOSTILE_LITERALS:
        if len(literal) >= 2:
            assert literal not in source
    assert set(ctx.string_literals) <= set(HOSTILE_LITERALS)


def arithmetic_expressions() -> list[exp.Expression]:
    a, b, c = (column(numeric_name(k)) for k in range(3))
    return [
        exp.Add(this=a, expression=b),
        exp.GT(this=exp.Mul(this=a, expression=c), expression=exp.Literal.number(3)),
        exp.Coalesce(this=a, expressions=[b, exp.Literal.number(0)]),
        exp.Is(this=c, expression=exp.Null()),
        exp.Div(this=b, expression=column(numeric_name(4))),
    ]


def test_hostile_column_names_never_reach_cuda() -> None:
    for expression in arithmetic_expressions():
        ctx = context()
        rendered = render_cuda(expression, env(), ctx)
        assert_clean(rendered, ctx)
        assert re.search(r"\bcol[0-9]", " ".join(rendered_texts(rendered, ctx)))


def test_hostile_names_stay_out_of_temporaries() -> None:
    # Deep enough that long texts are bound to temporaries: their initialisers are clean too.
    a, b = column(numeric_name(0)), column(numeric_name(1))
    s = column(string_name(0))
    expression = exp.Or(
        this=exp.And(
            this=exp.In(this=s, expressions=[exp.Literal.string(t) for t in HOSTILE_LITERALS]),
            expression=exp.GT(this=exp.Coalesce(this=a, expressions=[b]), expression=b),
        ),
        expression=exp.Is(this=exp.Mod(this=a, expression=b), expression=exp.Null()),
    )
    ctx = context()
    rendered = render_cuda(expression, env(), ctx)
    assert len(ctx.statements) >= 3
    assert_clean(rendered, ctx)


def test_hostile_names_evaluate_right_on_cpu() -> None:
    results = [
        evaluate(expression, env(), columns(), length=ROWS).to_pylist()
        for expression in arithmetic_expressions()
    ]
    assert results == [
        [2, -4, None, 80],
        [False, True, None, True],
        [1, -2, 0, 40],
        [False, False, True, False],
        [1.0, 1.0, None, 1.0],
    ]


def string_expressions() -> list[tuple[exp.Expression, list]]:
    s = column(string_name(0))
    t = column(string_name(1))
    literal = [exp.Literal.string(text) for text in HOSTILE_LITERALS]
    return [
        (exp.EQ(this=s, expression=literal[0]), [True, False, None, False]),
        (exp.NEQ(this=literal[1], expression=s), [True, False, None, True]),
        (exp.In(this=s, expressions=[literal[2], literal[3]]), [False, False, None, True]),
        (exp.In(this=s, expressions=literal[4:]), [False, False, None, False]),
        (exp.EQ(this=s, expression=t), [True, True, None, True]),
        (exp.EQ(this=literal[5], expression=literal[5]), [True] * ROWS),
        (exp.EQ(this=literal[6], expression=literal[3]), [False] * ROWS),
        (exp.Not(this=exp.Is(this=t, expression=exp.Null())), [True, True, False, True]),
    ]


@pytest.mark.parametrize("case", range(8))
def test_hostile_string_literals(case: int) -> None:
    expression, expected = string_expressions()[case]
    ctx = context()
    rendered = render_cuda(expression, env(), ctx)
    assert_clean(rendered, ctx)
    for k, text in enumerate(ctx.string_literals):
        assert text in HOSTILE_LITERALS
        assert f"string_literal_ids[{k}]" in " ".join(rendered_texts(rendered, ctx))
    assert evaluate(expression, env(), columns(), length=ROWS).to_pylist() == expected
    # Dictionary-encoded input gives the same answer.
    dictionary_columns = {
        name: array.dictionary_encode() if pa.types.is_string(array.type) else array
        for name, array in columns().items()
    }
    assert evaluate(expression, env(), dictionary_columns, length=ROWS).to_pylist() == expected


def test_string_literal_table_keeps_the_exact_texts() -> None:
    ctx = context()
    s = column(string_name(0))
    expression = exp.In(this=s, expressions=[exp.Literal.string(t) for t in HOSTILE_LITERALS])
    render_cuda(expression, env(), ctx)
    assert ctx.string_literals == HOSTILE_LITERALS


def test_hostile_names_survive_sqlglot_round_trip() -> None:
    # The binder hands us names straight from parsed SQL; check the parser keeps them whole.
    for name in HOSTILE_NAMES:
        expression = exp.Add(this=column(name), expression=exp.Literal.number(1))
        reparsed = sqlglot.parse_one(expression.sql(dialect="spark"), read="spark")
        assert reparsed.this.name == name
        hostile_env = TypeEnv(columns={name: SqlType.BIGINT})
        ctx = CudaContext(column_values={name: "c"}, column_valid={name: "cv"})
        rendered = render_cuda(reparsed, hostile_env, ctx)
        assert rendered.value == "((long long)((unsigned long long)(c) + (unsigned long long)1LL))"
        values = evaluate(reparsed, hostile_env, {name: NUMBERS}, length=ROWS).to_pylist()
        assert values == [2, -1, None, 41]
