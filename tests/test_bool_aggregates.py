"""BOOL_AND / BOOL_OR (EVERY; ANY, SOME), Spark's `bool_and` / `bool_or`: a BOOLEAN argument,
a BOOLEAN result, NULLs ignored, NULL when a window has no non-NULL argument. Defined only in
`mangonel.aggregates.builtin`; run here on the CPU backend against the oracle and explicit
values, rendered for the GPU and compiled with nvcc."""

from __future__ import annotations

import shutil

import pyarrow as pa
import pytest
from plans import make_plan
from sqlglot import exp
from test_codegen import _compile as compile_ptx
from test_window_cpu import STAMP, check, r

import mangonel as mg
from mangonel.catalog.types import SqlType as T
from mangonel.compiler import codegen
from mangonel.compiler import physical as ph
from mangonel.compiler.logical import AggregateFunction as F
from mangonel.compiler.parse import parse_statement
from mangonel.compiler.typing import AGGREGATE_FUNCTIONS, aggregate_result_type
from mangonel.errors import SqlError
from mangonel.runtime.operators.results import finalize

COLUMNS = [("ts", T.TIMESTAMP), ("k", T.BIGINT), ("v", T.DOUBLE), ("b", T.BOOLEAN)]


def _batch(ts, b, v=None, k=None) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [
            pa.array(ts, pa.int64()).cast(STAMP),
            pa.array(k or [1] * len(ts), pa.int64()),
            pa.array(v or [1.0] * len(ts), pa.float64()),
            pa.array(b, pa.bool_()),
        ],
        names=["ts", "k", "v", "b"],
    )


@pytest.mark.parametrize(
    "name, function",
    [
        ("BOOL_AND", F.BOOL_AND),
        ("EVERY", F.BOOL_AND),
        ("bool_and", F.BOOL_AND),
        ("BOOL_OR", F.BOOL_OR),
        ("ANY", F.BOOL_OR),
        ("SOME", F.BOOL_OR),
        ("any", F.BOOL_OR),
    ],
)
def test_names_and_aliases_parse_to_the_aggregate(name, function):
    select = parse_statement(f"SELECT {name}(b) FROM s [RANGE 1 SECOND]")
    assert AGGREGATE_FUNCTIONS[type(select.expressions[0])] is function


def test_any_before_a_subquery_stays_a_subquery_predicate():
    select = parse_statement("SELECT COUNT(*) FROM s [RANGE 1 SECOND] WHERE x = ANY (SELECT 1)")
    assert isinstance(select.args["where"].this.expression, exp.Any)


def test_typing_is_sparks_boolean_in_boolean_out():
    assert aggregate_result_type(F.BOOL_AND, T.BOOLEAN) is T.BOOLEAN
    assert aggregate_result_type(F.BOOL_OR, T.BOOLEAN) is T.BOOLEAN


@pytest.mark.parametrize("call", ["BOOL_AND(x)", "EVERY(v)", "BOOL_OR(sk)", "ANY(ts)"])
def test_a_non_boolean_argument_is_an_error_naming_the_function_and_type(call):
    session = mg.Session(backend="cpu")
    session.execute(
        "CREATE STREAM t (ts TIMESTAMP, x INT, v DOUBLE, sk STRING) WITH (event_time = 'ts')"
    )
    with pytest.raises(SqlError) as raised:
        session.sql(f"SELECT {call} FROM t [RANGE 1 SECOND]")
    function = "BOOL_AND" if call.startswith(("BOOL_AND", "EVERY")) else "BOOL_OR"
    assert f"{function} cannot take a" in raised.value.message
    assert raised.value.hint.startswith(f"{function} takes a BOOLEAN argument")
    assert raised.value.column == 8


def test_tumbling_windows_ignore_nulls_and_are_null_without_input():
    plan = make_plan(
        COLUMNS,
        keys=["k"],
        size=10,
        aggregates=[(F.BOOL_AND, exp.column("b")), (F.BOOL_OR, exp.column("b"))],
    )
    batches = [
        _batch([0, 1, 2], [True, None, True]),
        _batch([10, 11, 12], [True, False, None]),
        _batch([20, 21, 30, 31], [None, None, False, False]),
        _batch([40], [True]),
    ]
    check(
        plan,
        batches,
        [
            [],
            [r(0, 10, True, True)],
            [r(10, 20, False, True), r(20, 30, None, None)],
            [r(30, 40, False, False)],
            [r(40, 50, True, True)],
        ],
    )


def test_sliding_windows_combine_panes_through_the_tree():
    """RANGE 40 SLIDE 10: every window combines four panes with the numba tree."""
    predicate = exp.GT(this=exp.column("v"), expression=exp.Literal.number(2))
    plan = make_plan(
        COLUMNS,
        keys=["k"],
        size=40,
        slide=10,
        aggregates=[
            (F.BOOL_AND, exp.column("b")),
            (F.BOOL_OR, exp.column("b")),
            (F.BOOL_AND, predicate),
            (F.BOOL_OR, predicate),
        ],
    )
    ts = list(range(0, 200, 3))
    flags = [None if t % 7 == 0 else (t % 5 != 0) for t in ts]
    values = [float(t % 4) for t in ts]
    check(
        plan, [_batch(ts[:30], flags[:30], values[:30]), _batch(ts[30:], flags[30:], values[30:])]
    )


def test_count_windows_use_the_same_state():
    plan = make_plan(
        COLUMNS,
        keys=["k"],
        size=3,
        slide=2,
        kind="count",
        aggregates=[(F.BOOL_AND, exp.column("b")), (F.BOOL_OR, exp.column("b"))],
    )
    check(plan, [_batch([0, 1, 2, 3, 4, 5, 6], [True, None, True, False, None, None, None])])


def test_finalize_gives_arrow_booleans_with_nulls():
    plan = make_plan(COLUMNS, aggregates=[(F.BOOL_AND, exp.column("b"))])
    aggregate = ph.find(plan, ph.WindowAggregateExec).aggregates[0]
    import numpy as np

    values = {
        aggregate.count_field: (np.array([2, 0, 1], np.int64),),
        aggregate.value_field: (np.array([1, 1, 0], np.int64),),
    }
    (result,) = finalize((aggregate,), values)
    assert result.type == pa.bool_()
    assert result.to_pylist() == [True, None, False]


def test_gpu_kernels_render_and_compile(tmp_path):
    plan = make_plan(
        COLUMNS,
        keys=["k"],
        size=40,
        slide=10,
        aggregates=[
            (F.BOOL_AND, exp.column("b")),
            (F.BOOL_OR, exp.GT(this=exp.column("v"), expression=exp.Literal.number(2))),
        ],
    )
    generated = codegen.render_plan(plan)
    assert "& b." in generated.source and "| b." in generated.source
    assert "mg_atomic_min" in generated.source and "mg_atomic_max" in generated.source
    assert [p.numpy for p in generated.parts] == ["int64"] * 5
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH; the kernels were rendered, not compiled")
    source = tmp_path / "bool.cu"
    source.write_text(generated.source)
    result = compile_ptx([source], tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
