"""The aggregate registry (`mangonel.aggregates`): every state kind has every face on every
backend and the faces agree with each other; every aggregate function has typing, finalize and
a Spark spelling; the tables elsewhere are derived from the registry; a variable-size state
kind is accepted by the registry and refused by every backend with a PlanError."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from sqlglot import exp

from mangonel import aggregates
from mangonel.aggregates import state as state_module
from mangonel.catalog.types import SqlType
from mangonel.compiler import codegen
from mangonel.compiler import logical as lg
from mangonel.compiler import physical as ph
from mangonel.compiler.logical import AggregateFunction
from mangonel.compiler.typing import AGGREGATE_FUNCTION_NAMES, AGGREGATE_FUNCTIONS
from mangonel.errors import PlanError
from mangonel.runtime.cpu.generated import kind_kernels, render_source
from mangonel.runtime.host.arrays import to_values

FIXED = [k for k in aggregates.state_kinds() if k.layout is aggregates.Layout.FIXED]
ACCUMULATORS = {  # accumulator types each kind is planned with somewhere
    "count": [SqlType.BIGINT],
    "sum": [SqlType.BIGINT, SqlType.DOUBLE],
    "min": [SqlType.INT, SqlType.BIGINT, SqlType.DOUBLE, SqlType.TIMESTAMP],
    "max": [SqlType.INT, SqlType.BIGINT, SqlType.DOUBLE, SqlType.TIMESTAMP],
    "moments": [SqlType.DOUBLE],
}


def _accumulators(kind: aggregates.StateKind) -> list[SqlType]:
    """The accumulator types the kind's aggregates give it, from the registry itself."""
    types = set(ACCUMULATORS.get(kind.name, []))
    for definition in aggregates.aggregates():
        if definition.state is None or definition.state.kind is not kind:
            continue
        for argument in SqlType:
            if definition.result_type(argument) is not None:
                types.add(definition.state.accumulator(argument))
    return sorted(types, key=lambda t: t.value)


def _values(dtype: np.dtype, accumulator: SqlType, size: int, rng) -> np.ndarray:
    if accumulator is SqlType.BOOLEAN:
        return rng.integers(0, 2, size).astype(dtype)
    if dtype.kind == "i":
        edges = np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max, 0, -1], np.int64)
        values = rng.integers(-1000, 1000, size).astype(np.int64)
        values[: len(edges)] = edges
        return values
    values = rng.normal(0, 100, size)
    values[:3] = [math.nan, math.inf, -math.inf]
    return values


def _lift(kind, accumulator, values, valid):
    dtype = kind.storage(accumulator)
    rows = np.ones(len(values), np.int64)
    lifted = aggregates.LiftInput(values, valid, bool(valid.all()), rows, rows.astype(bool))
    return kind.lift(lifted, dtype, kind.neutral(dtype))


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype.kind == "f":
        return bool(np.allclose(a, b, rtol=1e-9, atol=1e-9, equal_nan=True))
    return bool(np.array_equal(a, b))


def test_the_builtin_kinds_and_functions_are_registered():
    assert {k.name for k in FIXED} >= {"count", "sum", "min", "max", "moments"}
    keys = {a.key for a in aggregates.aggregates()}
    assert keys >= {"COUNT_STAR", "COUNT", "SUM", "MIN", "MAX", "AVG", "VAR_POP", "VAR_SAMP"}
    assert keys >= {"STDDEV_POP", "STDDEV_SAMP"}


@pytest.mark.parametrize("kind", FIXED, ids=lambda k: k.name)
def test_every_state_kind_has_every_face(kind):
    # neutral and storage
    for accumulator in _accumulators(kind):
        dtype = kind.storage(accumulator)
        assert dtype in (np.dtype(np.int64), np.dtype(np.float64))
        assert len(kind.neutral(dtype)) == len(kind.parts)
    # CPU: lift, numpy combine, scalar combine (compiled by the CPU backend)
    assert callable(kind.lift) and callable(kind.combine) and callable(kind.scalar_combine)
    assert kind_kernels(kind).scatter is not None and kind_kernels(kind).tree_windows is not None
    assert f"state kind {kind.name!r}" in render_source(kind)
    # CUDA: one lift per part; combine and atomic name every part's member
    members = {name: f"m_{name}" for name in kind.parts}
    aux = {f"aux{w}": f"aux_{w}" for w in range(kind.cuda.aux)}
    for fragment in (kind.cuda.combine, kind.cuda.atomic, kind.cuda.locked_atomic):
        if fragment is None:
            continue
        text = fragment.format(**members, **aux)
        assert all(member in text for member in members.values()), (kind.name, text)
    # a kind with aux words merges through them and settles them back to zero
    for fragment in (kind.cuda.atomic, kind.cuda.settle) if kind.cuda.aux else ():
        text = fragment.format(**members, **aux)
        assert all(word in text for word in aux.values()), (kind.name, text)
    assert (kind.cuda.locked_atomic is None) == (kind.cuda.aux == 0), kind.name
    assert len(kind.cuda.lift) == len(kind.parts)
    for lift in kind.cuda.lift:
        lift.format(ok="ok", a="a", ctype="double", neutral="0.0", **members)
    # Spark stage 1: the Arrow partial
    assert callable(kind.arrow.requests) and callable(kind.arrow.results)
    assert isinstance(kind.algebraic, bool) and isinstance(kind.invertible, bool)
    assert not kind.holistic


@pytest.mark.parametrize("kind", FIXED, ids=lambda k: k.name)
def test_neutral_is_the_identity_of_every_combine(kind):
    rng = np.random.default_rng(7)
    for accumulator in _accumulators(kind):
        dtype = kind.storage(accumulator)
        values = _values(dtype, accumulator, 64, rng)
        parts = _lift(kind, accumulator, values, np.ones(64, bool))
        neutrals = tuple(np.full(64, v, dtype) for v in kind.neutral(dtype))
        for combined in (kind.combine(*neutrals, *parts), kind.combine(*parts, *neutrals)):
            for got, want in zip(combined, parts, strict=True):
                assert _same(got, want), (kind.name, accumulator)
        # a NULL argument (value 0 there, as `to_values` gives) lifts the neutral
        nulls = _lift(kind, accumulator, np.zeros_like(values), np.zeros(64, bool))
        for got, value in zip(nulls, kind.neutral(dtype), strict=True):
            assert _same(got, np.full(64, value, dtype)), (kind.name, accumulator)


@pytest.mark.parametrize("kind", FIXED, ids=lambda k: k.name)
def test_numba_scatter_and_tree_agree_with_the_numpy_combine(kind):
    rng = np.random.default_rng(11)
    kernels = kind_kernels(kind)
    for accumulator in _accumulators(kind):
        dtype = kind.storage(accumulator)
        neutrals = kind.neutral(dtype)
        values = _values(dtype, accumulator, 200, rng)
        parts = _lift(kind, accumulator, values, rng.random(200) < 0.8)
        index = rng.integers(-1, 5, 200)
        target = tuple(np.full(5, v, dtype) for v in neutrals)
        kernels.scatter(*target, index, *parts)
        want = tuple(np.full(5, v, dtype) for v in neutrals)
        for i, j in enumerate(index):
            if j >= 0:
                cell = kind.combine(*(w[j : j + 1] for w in want), *(p[i : i + 1] for p in parts))
                for w, c in zip(want, cell, strict=True):
                    w[j] = c[0]
        for got, expected in zip(target, want, strict=True):
            assert _same(got, expected), (kind.name, accumulator)
        # the tree: one task of 10 windows of 4 leaves sliding by 2 over 22 leaves
        outs = tuple(np.full(10, v, dtype) for v in neutrals)
        kernels.tree_windows(
            *(p[:22] for p in parts),
            *(dtype.type(v) for v in neutrals),
            1,
            np.zeros(1, np.int64),
            np.full(1, 10, np.int64),
            np.zeros(1, np.int64),
            np.ones(1, np.int64),
            2,
            4,
            3,
            *outs,
        )
        for w in range(10):
            acc = tuple(np.full(1, v, dtype) for v in neutrals)
            for leaf in range(2 * w, 2 * w + 4):
                acc = kind.combine(*acc, *(p[leaf : leaf + 1] for p in parts))
            for out, a in zip(outs, acc, strict=True):
                assert _same(out[w : w + 1], a), (kind.name, accumulator, w)


def _arrow_column(kind, accumulator: SqlType, valid: np.ndarray, rng) -> pa.Array:
    """An argument column whose aggregate gives `kind` this accumulator type."""
    size = len(valid)
    if accumulator is SqlType.BOOLEAN:
        return pa.array(rng.random(size) < 0.5, mask=~valid)
    if accumulator is SqlType.TIMESTAMP:
        micros = pa.array(rng.integers(-(10**12), 10**12, size), mask=~valid)
        return micros.cast(pa.timestamp("us", tz="UTC"))
    if accumulator is SqlType.INT:
        return pa.array(rng.integers(-1000, 1000, size), mask=~valid).cast(pa.int32())
    if accumulator is SqlType.BIGINT or (accumulator is SqlType.DOUBLE and kind.name == "sum"):
        return pa.array(rng.integers(-1000, 1000, size), mask=~valid)  # AVG: int summed in double
    values = rng.normal(0, 100, size)
    if kind.name in ("min", "max"):
        values[0] = math.nan  # NaN is the largest value (Arrow skips it; the face must not)
        valid[0] = True
    return pa.array(values, mask=~valid)


@pytest.mark.parametrize("kind", FIXED, ids=lambda k: k.name)
def test_arrow_partials_agree_with_the_cpu_lift_and_combine(kind):
    """Spark stage 1's Arrow aggregation of a kind gives the partial the CPU backend gets by
    lifting and combining the same rows (groups with only NULLs: the neutral)."""
    rng = np.random.default_rng(5)
    for accumulator in _accumulators(kind):
        dtype = kind.storage(accumulator)
        neutrals = kind.neutral(dtype)
        size = 120
        group = rng.integers(0, 6, size)
        valid = (rng.random(size) < 0.7) & (group != 5)  # group 5: NULLs only
        column = _arrow_column(kind, accumulator, valid, rng)
        table = pa.table({"g": group, "x": column})
        derived, requested = kind.arrow.requests("x", table["x"], accumulator)
        for name, extra in derived.items():
            table = table.append_column(name, extra)
        grouped = table.group_by(["g"], use_threads=False).aggregate(requested)
        names = [n for n in grouped.column_names if n != "g"]
        results = kind.arrow.results([grouped[n] for n in names], dtype, neutrals)
        order = np.argsort(np.asarray(grouped["g"]))
        floating = pa.types.is_floating(column.type)
        values, is_valid = to_values(column, np.dtype(np.float64 if floating else np.int64))
        parts = _lift(kind, accumulator, values, is_valid)
        want = tuple(np.full(6, v, dtype) for v in neutrals)
        kind_kernels(kind).scatter(*want, group.astype(np.int64), *parts)
        for got, expected in zip(results, want, strict=True):
            got = np.asarray(got)[order].astype(dtype)
            assert _same(got, expected), (kind.name, accumulator, got, expected)


def test_every_aggregate_has_typing_finalize_and_a_spark_spelling():
    for definition in aggregates.aggregates():
        function = AggregateFunction[definition.key]
        assert function.definition is definition
        assert function.value == definition.display
        accepted = [t for t in SqlType if definition.result_type(t) is not None]
        assert accepted or not definition.takes_argument, definition.key
        assert definition.spark_sql("x", SqlType.DOUBLE)
        for cls in definition.sqlglot_classes:
            assert AGGREGATE_FUNCTIONS[cls] is function
        for name in definition.names:
            assert name in AGGREGATE_FUNCTION_NAMES
        # finalize over three windows: the last one empty (count 0)
        count = np.array([2, 1, 0], np.int64)
        value = None
        if definition.state is not None:
            argument = accepted[0]
            kind = definition.state.kind
            dtype = kind.storage(definition.state.accumulator(argument))
            value = tuple(np.array([1, 1, v], dtype) for v in kind.neutral(dtype))
            if kind.name == "moments":
                value = (count.astype(np.float64), np.ones(3), np.array([0.5, 0.0, 0.0]))
        result_type = definition.result_type(accepted[0] if accepted else None)
        data, null = definition.finalize(np, count, value, result_type)
        assert len(data) == 3
        # COUNT and the distinct counts are 0, never NULL, over no non-NULL value
        counts = ("COUNT", "COUNT_DISTINCT", "APPROX_COUNT_DISTINCT")
        if definition.takes_argument and definition.key not in counts:
            assert null is not None and bool(null[2]), definition.key


def test_decompose_reads_the_states_from_the_registry():
    x = exp.column("x")
    calls = (
        lg.Aggregate(AggregateFunction.SUM, x, SqlType.BIGINT),
        lg.Aggregate(AggregateFunction.AVG, x, SqlType.DOUBLE),
        lg.Aggregate(AggregateFunction.VAR_POP, x, SqlType.DOUBLE),
        lg.Aggregate(AggregateFunction.COUNT_STAR, None, SqlType.BIGINT),
    )
    fields, plans = ph.decompose(calls, {0: SqlType.INT, 1: SqlType.INT, 2: SqlType.INT})
    assert [(f.name, f.kind.name, f.type) for f in fields] == [
        ("rows", "count", SqlType.BIGINT),
        ("count_1", "count", SqlType.BIGINT),
        ("sum_2", "sum", SqlType.BIGINT),
        ("sum_3", "sum", SqlType.DOUBLE),  # AVG sums in double (Spark's Average)
        ("moments_4", "moments", SqlType.DOUBLE),
    ]
    assert [(p.count_field, p.value_field) for p in plans] == [
        ("count_1", "sum_2"),
        ("count_1", "sum_3"),
        ("count_1", "moments_4"),
        ("rows", None),
    ]


@pytest.fixture
def sorted_runs(monkeypatch):
    """A variable-size state kind (the shape MEDIAN's sorted runs will take), registered in a
    copy of the registry that the test leaves behind."""
    monkeypatch.setattr(state_module, "_STATE_KINDS", dict(state_module._STATE_KINDS))
    return aggregates.register_state(
        aggregates.StateKind(
            name="sorted_runs_test",
            doc="sorted runs of the argument (variable size per cell)",
            parts=(),
            storage=lambda accumulator: np.dtype(np.float64),
            neutral=lambda dtype: (),
            lift=None,
            combine=None,
            scalar_combine=None,
            cuda=None,
            arrow=None,
            algebraic=False,
            holistic=True,
            layout=aggregates.Layout.VARIABLE,
        )
    )


def test_a_variable_size_kind_is_accepted_and_every_backend_refuses_it(sorted_runs):
    assert aggregates.state_kind("sorted_runs_test") is sorted_runs
    field = ph.StateField("runs_1", sorted_runs, exp.column("x"), SqlType.DOUBLE)
    with pytest.raises(PlanError, match="sorted_runs_test.*variable-size.*CPU backend"):
        kind_kernels(sorted_runs)
    with pytest.raises(PlanError, match="sorted_runs_test.*variable-size.*GPU backend"):
        codegen.state_parts((field,))
    with pytest.raises(PlanError, match="sorted_runs_test.*variable-size"):
        ph.neutral(field)  # every pane state and Spark's partial columns start from it


def test_a_fixed_kind_without_all_faces_is_refused(monkeypatch):
    monkeypatch.setattr(state_module, "_STATE_KINDS", dict(state_module._STATE_KINDS))
    with pytest.raises(ValueError, match="lacks"):
        aggregates.register_state(
            aggregates.StateKind(
                name="half_test",
                doc="",
                parts=("value",),
                storage=lambda accumulator: np.dtype(np.int64),
                neutral=lambda dtype: (0,),
                lift=None,
                combine=None,
                scalar_combine=None,
                cuda=None,
                arrow=None,
            )
        )
    with pytest.raises(ValueError, match="already registered"):
        aggregates.register_state(aggregates.state_kind("sum"))


def test_every_aggregate_class_prints_as_one_of_its_sql_names():
    """Messages and EXPLAIN show an aggregate as the user may write it (VAR_POP, not
    sqlglot's VARIANCE_POP)."""
    from mangonel.compiler.parse import display_sql

    for definition in aggregates.aggregates():
        for cls in definition.sqlglot_classes:
            printed = display_sql(cls(this=exp.column("x")))
            assert printed.split("(")[0] in definition.names, (definition.key, printed)


def test_generated_kernels_compile_without_a_writable_cache_directory(monkeypatch, tmp_path):
    from mangonel.runtime.cpu import generated

    blocker = tmp_path / "file"
    blocker.write_text("")  # a file where the cache directory would go: mkdir fails
    monkeypatch.setenv("MANGONEL_CACHE", str(blocker))
    kind = aggregates.state_kind("sum")
    module = generated._load("sum_no_cache_test", render_source(kind))
    target = np.zeros(2, np.int64)
    module.scatter(target, np.array([0, 1, 0, -1]), np.array([1, 2, 3, 4], np.int64))
    assert target.tolist() == [4, 2]


def test_count_needs_no_argument_type_and_the_others_do():
    from mangonel.compiler.typing import aggregate_result_type
    from mangonel.errors import MangonelError

    assert aggregate_result_type(AggregateFunction.COUNT, None) is SqlType.BIGINT
    assert aggregate_result_type(AggregateFunction.COUNT_STAR, None) is SqlType.BIGINT
    for definition in aggregates.aggregates():
        if definition.key in ("COUNT", "COUNT_STAR"):
            continue
        with pytest.raises(MangonelError, match="needs an argument"):
            aggregate_result_type(AggregateFunction[definition.key], None)


def test_plans_pickle_to_the_registered_definitions():
    """Spark ships plans to Python workers: their state kinds must come back as the registered
    objects (identity checks and the per-kind kernel cache rely on it)."""
    import copy
    import pickle

    try:  # what Spark pickles with
        from pyspark import cloudpickle
    except ImportError:
        cloudpickle = pickle

    fields, _ = ph.decompose(
        (lg.Aggregate(AggregateFunction.VAR_POP, exp.column("x"), SqlType.DOUBLE),),
        {0: SqlType.DOUBLE},
    )
    for dumps in (pickle.dumps, cloudpickle.dumps):
        again = pickle.loads(dumps(fields))
        assert [f.kind for f in again] == [f.kind for f in fields]
        assert all(a.kind is b.kind for a, b in zip(again, fields, strict=True))
    assert copy.deepcopy(fields)[2].kind is aggregates.state_kind("moments")
    sum_ = aggregates.aggregate("SUM")
    assert pickle.loads(cloudpickle.dumps(sum_)) is sum_


def test_null_when_empty_masks_only_the_cells_with_a_zero_count():
    """No mask at all where every count is non-zero (one counting pass, no mask built);
    else True exactly where the count is 0 (a negative count, an int64 product that
    wrapped, is not empty)."""
    from mangonel.aggregates import null_when_empty

    assert null_when_empty(np, np.array([1, 2, -3], np.int64)) is None
    assert null_when_empty(np, np.zeros(0, np.int64)) is None
    mask = null_when_empty(np, np.array([4, 0, -1, 0], np.int64))
    assert mask is not None and mask.tolist() == [False, True, False, True]


@pytest.mark.parametrize(
    "window", ["[RANGE 2 SECONDS SLIDE 1 SECOND]", "[ROWS 2]", "[SESSION GAP 1 SECOND]"]
)
def test_count_of_a_string_column_counts_its_non_null_values(window: str) -> None:
    """COUNT takes any type (docs/sql.md): a STRING argument is counted by its validity in
    time, count and session windows (the CPU lift read its values as numbers and raised)."""
    import mangonel

    session = mangonel.Session("cpu")
    session.execute("CREATE STREAM s (ts TIMESTAMP, k STRING, g BIGINT) WITH (event_time = 'ts')")
    batch = pa.table(
        {
            "ts": pa.array([0, 1, 2, 3], pa.timestamp("us")),
            "k": ["a", None, "b", None],
            "g": [1, 1, 2, 2],
        }
    )
    bound = "" if window == "[ROWS 2]" else "window_start, "
    got = session.sql(
        f"SELECT g, {bound}COUNT(k) AS n, COUNT(*) AS m FROM s {window} GROUP BY g"
    ).run([batch])
    assert got.num_rows > 0
    pairs = zip(got.column("n").to_pylist(), got.column("m").to_pylist(), strict=True)
    assert set(pairs) == {(1, 2)}
    assert to_values(pa.array(["x", None]), np.dtype(np.int64))[1].tolist() == [True, False]
