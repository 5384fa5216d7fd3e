"""Percentiles over an ARRAY of p (Spark's `PERCENTILE(x, ARRAY(0.25, 0.5))`,
`PERCENTILE_CONT(ARRAY(..)) WITHIN GROUP (ORDER BY x)`, PERCENTILE_DISC, APPROX_PERCENTILE)
against the array oracle (tests/oracle_arrays.py) on time, count and session windows: ties,
NULLs, NaN/-0.0/infinities, p = 0 and 1, repeated and descending ps, disorder, late rows,
snapshot/restore; the GPU kernels' code path on the host (g++ shim); the Arrow and SQL types;
and the binder's refusals."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest
from fuzzer import METRICS, ORACLE_METRICS, Scenario, engine_run
from holistic_stream import COLUMNS, DDL, batch_of, cpu_session
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import OracleQuery, first_difference
from oracle_arrays import ArrayOracle, array_name, explode
from test_holistic import SETTINGS, SPECIAL
from test_holistic_kernels import gpu_path_on_the_host, host_module  # noqa: F401 - fixtures

import mangonel
from mangonel.catalog.types import (
    ArrayType,
    SqlType,
    StructType,
    result_type_from_arrow,
    type_from_arrow,
)
from mangonel.errors import MangonelError, SqlError

# (oracle function, SQL with {ps} and {a}, accuracy or None)
ARRAY_FUNCTIONS = [
    ("percentile_cont", "PERCENTILE_CONT(ARRAY({ps})) WITHIN GROUP (ORDER BY {a})", None),
    ("percentile", "PERCENTILE({a}, ARRAY({ps}))", None),
    ("percentile_disc", "PERCENTILE_DISC(ARRAY({ps})) WITHIN GROUP (ORDER BY {a})", None),
    ("approx_percentile", "APPROX_PERCENTILE({a}, ARRAY({ps}), 50)", 50),
    ("approx_percentile", "PERCENTILE_APPROX({a}, ARRAY({ps}))", 10000),
]
FRACTIONS = [0.0, 1.0, 0.5, 0.25, 0.9, 0.333]


def check_arrays(scenario: Scenario, backend: str) -> str | None:
    """The engine's rows after every batch and at the end against the array oracle's, and
    the final metrics; None when equal, else what differs."""
    oracle = ArrayOracle(scenario.oracle)
    firings, metrics = engine_run(scenario, backend)
    arrays = set(oracle.array_outputs)
    for position, got in enumerate(firings):
        last = position == len(scenario.batches)
        want = oracle.finish() if last else oracle.process(scenario.batches[position])
        difference = first_difference(
            explode(got, arrays), explode(want, arrays), tolerances=oracle.tolerances
        )
        if difference:
            return f"after firing {position}: {difference}\n engine {got[:4]}\n oracle {want[:4]}"
    expected = {m: getattr(oracle, o) for m, o in zip(METRICS, ORACLE_METRICS, strict=True)}
    return None if metrics == expected else f"metrics {metrics} != oracle {expected}"


def window_clause(kind: str, size: int, slide: int) -> str:
    if kind == "count":
        return f"ROWS {size} SLIDE {slide}"
    if kind == "session":
        return f"SESSION GAP {size} MICROSECONDS"
    return f"RANGE {size} MICROSECONDS SLIDE {slide} MICROSECONDS"


@st.composite
def array_scenarios(draw, kind: str) -> Scenario:
    if kind == "time":
        slide = draw(st.integers(1, 10))
        size = draw(st.one_of(st.just(slide), st.integers(1, 6).map(lambda f: f * slide)))
    elif kind == "session":
        size = slide = draw(st.integers(1, 12))
    else:
        size = draw(st.integers(1, 6))
        slide = draw(st.integers(1, size))
    delay = draw(st.integers(0, 30))
    disorder = draw(st.integers(0, 40))
    rows = draw(st.integers(0, 80))
    spread = draw(st.sampled_from([2, 5, 1000]))
    null_rate = draw(st.sampled_from([0.0, 0.3, 0.8]))
    data = []
    for i in range(rows):
        v: float | None = float(draw(st.integers(-spread, spread))) / 2
        if draw(st.integers(0, 6)) == 0:
            v = draw(st.sampled_from(SPECIAL))
        data.append(
            {
                "ts": i + draw(st.integers(0, disorder)),
                "k": draw(st.integers(0, 3)),
                "x": None if draw(st.floats(0, 1)) < null_rate else draw(st.integers(-9, 9)),
                "n": draw(st.integers(-3, 3)),
                "v": None if draw(st.floats(0, 1)) < null_rate else v,
            }
        )
    cuts = sorted(draw(st.lists(st.integers(0, rows), max_size=3)))
    batches = [data[a:b] for a, b in zip([0, *cuts], [*cuts, rows], strict=True)]
    aggregates, select = [], ["k", "window_start AS ws"]
    for number in range(draw(st.integers(1, 3))):
        function, sql, accuracy = draw(st.sampled_from(ARRAY_FUNCTIONS))
        ps = draw(st.lists(st.sampled_from(FRACTIONS), min_size=1, max_size=4))
        column = draw(st.sampled_from(["v", "x", "n"]))
        if function == "approx_percentile" and column == "v":
            column = "x"  # the GK bound is a rank bound: NaN/-0.0 ties are checked exactly
        aggregates.append((array_name(function, ps, accuracy), ["col", column]))
        select.append(f"{sql.format(ps=', '.join(map(str, ps)), a=column)} AS a{number}")
    # a single-p percentile and an incremental aggregate beside the arrays
    aggregates += [("percentile_cont:0.5", ["col", "v"]), ("sum", ["col", "x"])]
    select += ["MEDIAN(v) AS m", "SUM(x) AS s"]
    arrays = len(aggregates) - 2
    outputs = [("k", ["col", "k"]), ("ws", ["bound", "start"])]
    outputs += [(f"a{i}", ["agg", i]) for i in range(arrays)]
    outputs += [("m", ["agg", arrays]), ("s", ["agg", arrays + 1])]
    query = f"SELECT {', '.join(select)} FROM s [{window_clause(kind, size, slide)}] GROUP BY k"
    oracle = OracleQuery(
        columns=dict(COLUMNS),
        event_time="ts",
        kind=kind,
        size=size,
        slide=slide,
        delay=delay,
        keys=("k",),
        aggregates=tuple(aggregates),
        outputs=tuple(outputs),
    )
    snapshot = tuple(sorted(set(draw(st.lists(st.integers(0, len(batches)), max_size=2)))))
    return Scenario(DDL.format(delay=delay), query, oracle, batches, snapshot)


@settings(max_examples=60, **SETTINGS)
@given(array_scenarios("time"))
def test_array_percentiles_over_time_windows_match_the_oracle(scenario):
    failure = check_arrays(scenario, "cpu")
    assert failure is None, f"{failure}\n{scenario.query}"


@settings(max_examples=30, **SETTINGS)
@given(array_scenarios("count"))
def test_array_percentiles_over_count_windows_match_the_oracle(scenario):
    failure = check_arrays(scenario, "cpu")
    assert failure is None, f"{failure}\n{scenario.query}"


@settings(max_examples=30, **SETTINGS)
@given(array_scenarios("session"))
def test_array_percentiles_over_session_windows_match_the_oracle(scenario):
    failure = check_arrays(scenario, "cpu")
    assert failure is None, f"{failure}\n{scenario.query}"


@settings(max_examples=15, **SETTINGS)
@given(array_scenarios("time"))
def test_array_percentiles_over_the_gpu_kernels_match_the_oracle(gpu_path_on_the_host, scenario):  # noqa: F811
    """The holistic step through the GPU kernels' code (device sort, runs, the selection
    kernel with its array of p) compiled by g++: each form, one launch per chunk."""
    failure = check_arrays(scenario, "cpu")
    assert failure is None, f"{failure}\n{scenario.query}"


def _rows(query: str, rows: list[dict]) -> pa.Table:
    return cpu_session().sql(query).run([batch_of(rows)])


def test_known_values_in_the_order_given_and_null_over_no_value():
    # 1, 2, 2, 3, 10 and a NULL in window [0, 10); window [10, 20) holds a NULL only
    values = [1.0, 2.0, None, 2.0, 3.0, 10.0]
    rows = [{"ts": t, "v": v, "x": None if v is None else int(v)} for t, v in enumerate(values)]
    rows.append({"ts": 12, "v": None, "x": None})
    table = _rows(
        "SELECT window_start AS ws, "
        "PERCENTILE_CONT(ARRAY(0.75, 0, 0.5, 1, 0.5)) WITHIN GROUP (ORDER BY v) AS c, "
        "PERCENTILE(x, ARRAY(0.1)) AS one, "
        "PERCENTILE_DISC(ARRAY(0.5, 0.2, 1)) WITHIN GROUP (ORDER BY x) AS d, "
        "APPROX_PERCENTILE(n + x, ARRAY(0.5, 1)) AS a "
        "FROM s [RANGE 10 MICROSECONDS]",
        rows,
    )
    assert table.schema.field("c").type == ArrayType(SqlType.DOUBLE).info.arrow
    assert table.schema.field("d").type == ArrayType(SqlType.BIGINT).info.arrow
    assert table.schema.field("a").type == ArrayType(SqlType.BIGINT).info.arrow
    first, second = table.to_pylist()
    assert first["c"] == [3.0, 1.0, 2.0, 10.0, 2.0]
    assert first["one"] == [pytest.approx(1.4)]
    assert first["d"] == [2, 1, 10]
    assert first["a"] == [2, 10]
    assert second == {"ws": second["ws"], "c": None, "one": None, "d": None, "a": None}


def test_an_array_over_an_int_argument_keeps_its_type_for_disc_and_approx():
    table = _rows(
        "SELECT PERCENTILE_DISC(ARRAY(0, 1)) WITHIN GROUP (ORDER BY n) AS d, "
        "APPROX_PERCENTILE(n, ARRAY(0.5)) AS a, PERCENTILE(n, ARRAY(0.5)) AS c "
        "FROM s [RANGE 10 MICROSECONDS]",
        [{"ts": 1, "n": 4}, {"ts": 2, "n": -7}],
    )
    assert result_type_from_arrow(table.schema.field("d").type) == ArrayType(SqlType.INT)
    assert result_type_from_arrow(table.schema.field("a").type) == ArrayType(SqlType.INT)
    assert result_type_from_arrow(table.schema.field("c").type) == ArrayType(SqlType.DOUBLE)
    assert table.to_pylist() == [{"d": [-7, 4], "a": [-7], "c": [-1.5]}]


def test_explain_names_the_array_and_its_type():
    text = (
        cpu_session()
        .sql(
            "SELECT k, PERCENTILE(v, ARRAY(0.25, 0.75)) AS p, "
            "APPROX_PERCENTILE(x, ARRAY(0.5, 0.9), 100) AS a FROM s [RANGE 10 MICROSECONDS] "
            "GROUP BY k"
        )
        .explain()
    )
    assert "p:ARRAY<DOUBLE>=agg0" in text
    assert "PERCENTILE(v, ARRAY(0.25, 0.75))<-values_2/count_1:ARRAY<DOUBLE>" in text
    assert "APPROX_PERCENTILE(x, ARRAY(0.5, 0.9), 100)" in text and ":ARRAY<BIGINT>" in text


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("SELECT PERCENTILE(v, ARRAY()) FROM s [RANGE 1 SECOND]", "array of percentages is empty"),
        (
            "SELECT PERCENTILE(v, ARRAY(0.5, 1.5)) FROM s [RANGE 1 SECOND]",
            "percentage must lie between 0 and 1, got 1.5",
        ),
        (
            "SELECT PERCENTILE_DISC(ARRAY(0.5, x)) WITHIN GROUP (ORDER BY v) "
            "FROM s [RANGE 1 SECOND]",
            "takes a numeric literal percentage",
        ),
        (
            "SELECT APPROX_PERCENTILE(v, ARRAY('a')) FROM s [RANGE 1 SECOND]",
            "takes a numeric literal percentage",
        ),
        (
            "SELECT PERCENTILE(v, ARRAY(0.5)) + 1 FROM s [RANGE 1 SECOND]",
            "is an ARRAY<DOUBLE>: it can only be selected as it is",
        ),
        (
            "SELECT COUNT(*) FROM s [RANGE 1 SECOND] HAVING PERCENTILE(v, ARRAY(0.5)) IS NOT NULL",
            "is an ARRAY<DOUBLE>: it can only be selected as it is",
        ),
        (
            "SELECT COALESCE(PERCENTILE_DISC(ARRAY(0.5)) WITHIN GROUP (ORDER BY x)) "
            "FROM s [RANGE 1 SECOND]",
            "is an ARRAY<BIGINT>",
        ),
        (
            "SELECT MEDIAN(ARRAY(0.5)) FROM s [RANGE 1 SECOND]",
            "",  # an ARRAY is no aggregate argument: refused, whatever the words
        ),
    ],
)
def test_bad_array_queries_are_refused_clearly(query, message):
    with pytest.raises(MangonelError) as raised:
        cpu_session().sql(query)
    assert message in str(raised.value)


@pytest.mark.parametrize(
    "statement",
    [
        "CREATE STREAM t (ts TIMESTAMP, p ARRAY<DOUBLE>) WITH (event_time = 'ts')",
        "CREATE TABLE t (w STRUCT<start: TIMESTAMP>)",
    ],
)
def test_an_array_or_struct_column_is_no_input(statement):
    with pytest.raises(SqlError) as raised:
        mangonel.Session().execute(statement)
    assert "columns are not supported" in str(raised.value)
    assert "result types only" in str(raised.value)


def test_an_arrow_list_column_is_no_stream_column():
    assert type_from_arrow(pa.list_(pa.float64())) is None  # inputs read scalars only
    assert result_type_from_arrow(pa.list_(pa.float64())) == ArrayType(SqlType.DOUBLE)


def test_the_type_model_names_and_maps_both_composites():
    array = ArrayType(SqlType.DOUBLE)
    struct = StructType((("start", SqlType.TIMESTAMP), ("end", SqlType.TIMESTAMP)))
    assert str(array) == "ARRAY<DOUBLE>" and array.info.spark == "ARRAY<DOUBLE>"
    assert str(struct) == "STRUCT<start: TIMESTAMP, end: TIMESTAMP>"
    assert struct.info.spark == "STRUCT<`start`: TIMESTAMP, `end`: TIMESTAMP>"
    assert not array.is_numeric and array.is_composite and not SqlType.DOUBLE.is_composite
    assert result_type_from_arrow(array.info.arrow) == array
    assert result_type_from_arrow(struct.info.arrow) == struct
    assert result_type_from_arrow(pa.list_(pa.binary())) is None


def test_nan_and_signed_zero_take_spark_order_in_every_element():
    rows = [{"ts": t, "v": v} for t, v in enumerate([math.nan, -0.0, 1.0, math.inf, 0.0])]
    table = _rows(
        "SELECT PERCENTILE_DISC(ARRAY(1, 0, 0.4)) WITHIN GROUP (ORDER BY v) AS d "
        "FROM s [RANGE 10 MICROSECONDS]",
        rows,
    )
    (row,) = table.to_pylist()
    assert math.isnan(row["d"][0]) and row["d"][1:] == [0.0, 0.0]
    assert math.copysign(1.0, row["d"][1]) == 1.0  # -0.0 reads as 0.0, as Spark's
