"""Holistic window functions (MEDIAN, PERCENTILE_CONT/PERCENTILE, PERCENTILE_DISC,
COUNT(DISTINCT)) against the oracle (tests/oracle.py: sort the window's values and pick), on
time windows (sliding and tumbling) and count windows: ties, NULLs, NaN/-0.0/infinities, p = 0
and 1, single-value windows, disorder, late rows, snapshot/restore; mixed with incremental
aggregates, HAVING and expressions over holistic results. Plus the definitions, EXPLAIN and
the refusals (Spark, joins)."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from fuzzer import Scenario, check
from holistic_stream import COLUMNS, DDL, batch_of, cpu_session, run_rows
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import OracleQuery

from mangonel import aggregates
from mangonel.aggregates.holistic import VALUES, from_order_keys, order_keys
from mangonel.compiler import physical as ph
from mangonel.compiler.explain import explain_text
from mangonel.compiler.holistic import COUNT_HOLISTIC_ON_CPU, gpu_form
from mangonel.errors import PlanError
from mangonel.runtime.cpu import holistic as cpu_holistic
from mangonel.runtime.local.query import LocalQuery

SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
# (oracle name, SQL with {a} for the argument)
FUNCTIONS = [
    ("median", "MEDIAN({a})"),
    ("percentile_cont:{p}", "PERCENTILE_CONT({p}) WITHIN GROUP (ORDER BY {a})"),
    ("percentile:{p}", "PERCENTILE({a}, {p})"),
    ("percentile_disc:{p}", "PERCENTILE_DISC({p}) WITHIN GROUP (ORDER BY {a})"),
    ("count_distinct", "COUNT(DISTINCT {a})"),
    ("sum", "SUM({a})"),  # an incremental aggregate beside them
    ("count", "COUNT({a})"),
]
FRACTIONS = [0.0, 1.0, 0.5, 0.25, 0.9, 0.333]
SPECIAL = [math.nan, -0.0, 0.0, math.inf, -math.inf]


@st.composite
def scenarios(draw, kind: str) -> Scenario:
    if kind == "time":
        slide = draw(st.integers(1, 10))
        size = draw(st.one_of(st.just(slide), st.integers(1, 6).map(lambda f: f * slide)))
        size = draw(st.one_of(st.just(size), st.integers(slide, 40)))
    elif kind == "session":  # the gap (test_session_window.py)
        size = slide = draw(st.integers(1, 12))
    else:
        size = draw(st.integers(1, 6))
        slide = draw(st.integers(1, size))
    delay = draw(st.integers(0, 30))
    disorder = draw(st.integers(0, 40))
    rows = draw(st.integers(0, 90))
    keys = draw(st.integers(1, 6))
    spread = draw(st.sampled_from([2, 5, 1000]))  # few distinct values: many ties
    null_rate = draw(st.sampled_from([0.0, 0.2, 0.7]))
    special = draw(st.booleans())
    data = []
    for i in range(rows):
        ts = i + draw(st.integers(0, disorder))
        x = draw(st.integers(-spread, spread))
        v: float | None = float(draw(st.integers(-spread, spread))) / 2
        if special and draw(st.integers(0, 5)) == 0:
            v = draw(st.sampled_from(SPECIAL))
        if draw(st.floats(0, 1)) < null_rate:
            v = None
        data.append(
            {
                "ts": ts,
                "k": draw(st.integers(0, keys - 1)),
                "x": None if draw(st.floats(0, 1)) < null_rate else x,
                "n": draw(st.integers(-3, 3)),
                "v": v,
            }
        )
    cuts = sorted(draw(st.lists(st.integers(0, rows), max_size=4)))
    batches = [data[a:b] for a, b in zip([0, *cuts], [*cuts, rows], strict=True)]
    count = draw(st.integers(1, 4))
    aggregates_ = []
    for _ in range(count):
        name, sql = draw(st.sampled_from(FUNCTIONS))
        p = draw(st.sampled_from(FRACTIONS))
        argument = draw(st.sampled_from([["col", "v"], ["col", "x"], ["col", "n"]]))
        if draw(st.integers(0, 4)) == 0:
            argument = ["+", ["col", "x"], ["col", "n"]]
        aggregates_.append((name.format(p=p), sql.format(p=p, a=_sql(argument)), argument))
    having = None
    if draw(st.booleans()):  # HAVING over a holistic result (NULL windows drop out)
        having = (["is_not_null", ["agg", 0]], f"{aggregates_[0][1]} IS NOT NULL")
    expressions = []
    if draw(st.booleans()):  # an expression over a holistic result
        expressions.append(("e", ["*", ["agg", 0], ["lit", 2]], f"({aggregates_[0][1]}) * 2"))
    snapshot = tuple(sorted(set(draw(st.lists(st.integers(0, len(batches)), max_size=2)))))
    return grouped_scenario(
        kind, size, slide, delay, aggregates_, batches, snapshot, expressions, having
    )


def grouped_scenario(
    kind: str,
    size: int,
    slide: int,
    delay: int,
    calls: list[tuple[str, str, list]],
    batches: list[list[dict]],
    snapshot: tuple[int, ...],
    expressions: list[tuple[str, list, str]] = (),  # type: ignore[assignment]
    having: tuple[list, str] | None = None,
    window_functions: tuple = (),
) -> Scenario:
    """`SELECT k, window_start AS ws, <calls> [, <expressions>] FROM s [window] GROUP BY k
    [HAVING]` over stream `s` (DDL), for the engine and the oracle alike. `calls`: (oracle
    name, SQL, oracle argument); `expressions`: (output name, oracle expression, SQL)."""
    outputs = [("k", ["col", "k"]), ("ws", ["bound", "start"])]
    outputs += [(f"a{i}", ["agg", i]) for i in range(len(calls))]
    select = ["k", "window_start AS ws"] + [f"{sql} AS a{i}" for i, (_, sql, _) in enumerate(calls)]
    for name, expression, sql in expressions:
        outputs.append((name, expression))
        select.append(f"{sql} AS {name}")
    window = f"RANGE {size} MICROSECONDS SLIDE {slide} MICROSECONDS"
    if kind == "count":
        window = f"ROWS {size} SLIDE {slide}"
    elif kind == "session":
        window = f"SESSION GAP {size} MICROSECONDS"
    query = f"SELECT {', '.join(select)} FROM s [{window}] GROUP BY k"
    if having is not None:
        query += f" HAVING {having[1]}"
    oracle = OracleQuery(
        columns=dict(COLUMNS),
        event_time="ts",
        kind=kind,
        size=size,
        slide=slide,
        delay=delay,
        keys=("k",),
        aggregates=tuple((name, argument) for name, _, argument in calls),
        having=None if having is None else having[0],
        outputs=tuple(outputs),
    )
    return Scenario(
        DDL.format(delay=delay),
        query,
        oracle,
        batches,
        snapshot,
        window_functions=window_functions,
    )


def _sql(argument: list) -> str:
    if argument[0] == "col":
        return argument[1]
    return f"({_sql(argument[1])} {argument[0]} {_sql(argument[2])})"


@settings(max_examples=120, **SETTINGS)
@given(scenarios("time"))
def test_holistic_time_windows_match_the_oracle(scenario):
    failure = check(scenario, "cpu")
    assert failure is None, f"{failure}\n{scenario.query}"


@settings(max_examples=80, **SETTINGS)
@given(scenarios("count"))
def test_holistic_count_windows_match_the_oracle(scenario):
    failure = check(scenario, "cpu")
    assert failure is None, f"{failure}\n{scenario.query}"


def test_known_values_of_every_function_in_one_tumbling_window():
    # 1, 2, 2, 3, 10 and a NULL: n = 5
    rows = [{"ts": t, "v": value} for t, value in enumerate([1.0, 2.0, None, 2.0, 3.0, 10.0])]
    query = (
        "SELECT MEDIAN(v) AS m, PERCENTILE(v, 0.9) AS p90, PERCENTILE_CONT(0) WITHIN GROUP "
        "(ORDER BY v) AS lo, PERCENTILE_CONT(1) WITHIN GROUP (ORDER BY v) AS hi, "
        "PERCENTILE_DISC(0.5) WITHIN GROUP (ORDER BY v) AS d50, "
        "PERCENTILE_DISC(0) WITHIN GROUP (ORDER BY v) AS d0, COUNT(DISTINCT v) AS nd "
        "FROM s [RANGE 100 MICROSECONDS]"
    )
    (row,) = run_rows(cpu_session(), query, rows)
    # p90: position 0.9 * 4 = 3.6 between 3 and 10: 0.4 * 3 + 0.6 * 10
    assert row == {
        "m": 2.0,
        "p90": pytest.approx(0.4 * 3.0 + 0.6 * 10.0),
        "lo": 1.0,
        "hi": 10.0,
        "d50": 2.0,
        "d0": 1.0,
        "nd": 4,
    }


def test_percentile_interpolates_as_spark_4_bit_for_bit():
    """v[lower] + (position - lower) * (v[higher] - v[lower]), each step rounded in that
    order: Spark 4.3's `percentile` gave it for 40 of 40 random pairs where the form
    (higher - position) * v[lower] + (position - lower) * v[higher] differs in the last bit
    (found by probing against Spark SQL, which also gives +inf for the median of
    +/-1.7e308 and NaN for that of -inf and 0; the old form gave 0.0 and -inf)."""
    rng = np.random.default_rng(23)
    pairs = rng.uniform(-100.0, 100.0, (60, 2))
    rows = [
        {"ts": 0, "k": key, "v": float(value)} for key, pair in enumerate(pairs) for value in pair
    ]
    rows += [{"ts": 0, "k": 60, "v": v} for v in (-1.7e308, 1.7e308)]
    rows += [{"ts": 0, "k": 61, "v": v} for v in (-math.inf, 0.0)]
    query = "SELECT k, PERCENTILE(v, 0.3) AS p FROM s [RANGE 100 MICROSECONDS] GROUP BY k"
    got = {row["k"]: row["p"] for row in run_rows(cpu_session(), query, rows)}
    for key, pair in enumerate(pairs):
        low, high = sorted(float(v) for v in pair)
        assert got[key] == low + 0.3 * (high - low), key  # bit for bit, not approximately
    assert got[60] == math.inf and math.isnan(got[61])


def test_all_null_window_gives_null_and_zero_distinct():
    rows = [{"ts": 1, "v": None}, {"ts": 2, "v": None}]
    query = (
        "SELECT MEDIAN(v) AS m, PERCENTILE_DISC(0.5) WITHIN GROUP (ORDER BY x) AS d, "
        "COUNT(DISTINCT v) AS nd, COUNT(*) AS c FROM s [RANGE 100 MICROSECONDS]"
    )
    assert run_rows(cpu_session(), query, rows) == [{"m": None, "d": None, "nd": 0, "c": 2}]


def test_nan_is_the_largest_value_and_minus_zero_is_zero():
    rows = [{"ts": t, "v": v} for t, v in enumerate([math.nan, -0.0, 0.0, 5.0, math.nan])]
    query = (
        "SELECT PERCENTILE_DISC(1) WITHIN GROUP (ORDER BY v) AS top, "
        "PERCENTILE_DISC(0.2) WITHIN GROUP (ORDER BY v) AS low, COUNT(DISTINCT v) AS nd "
        "FROM s [RANGE 100 MICROSECONDS]"
    )
    (row,) = run_rows(cpu_session(), query, rows)
    assert math.isnan(row["top"]) and row["low"] == 0.0 and row["nd"] == 3
    assert math.copysign(1.0, row["low"]) == 1.0  # -0.0 reads as 0.0


def test_integer_percentiles_return_double_and_disc_the_argument_type():
    rows = [{"ts": t, "n": value} for t, value in enumerate([1, 2, 3, 4])]
    session = cpu_session()
    query = session.sql(
        "SELECT MEDIAN(n) AS m, PERCENTILE_DISC(0.5) WITHIN GROUP (ORDER BY n) AS d "
        "FROM s [RANGE 100 MICROSECONDS]"
    )
    assert query.schema.field("m").type == pa.float64()
    assert query.schema.field("d").type == pa.int32()
    assert run_rows(session, query.text, rows) == [{"m": 2.5, "d": 2}]


def test_order_keys_sort_as_spark_and_round_trip():
    values = np.array([math.nan, math.inf, 3.5, 0.0, -0.0, -1e-300, -2.0, -math.inf])
    keys = order_keys(values)
    ordered = from_order_keys(np.sort(keys), True)
    assert ordered[:-1].tolist() == [-math.inf, -2.0, -1e-300, 0.0, 0.0, 3.5, math.inf]
    assert math.isnan(ordered[-1])
    integers = np.array([5, -(2**63), 2**63 - 1, 0])
    assert np.array_equal(from_order_keys(order_keys(integers), False), integers)
    # every NaN (sign bit, payload) is one key, the largest; -0.0 is 0.0; FLOAT as DOUBLE
    nans = np.array([0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001], np.uint64)
    nan_keys = order_keys(nans.view(np.float64))
    assert (nan_keys == keys[0]).all() and keys[0] == keys.max()
    assert keys[3] == keys[4] == 0 and keys[5] < 0 and (keys[6] < keys[5])
    assert np.array_equal(
        order_keys(values.astype(np.float32)),
        order_keys(values.astype(np.float32).astype(np.float64)),
    )


def test_the_kernel_selects_over_several_sorted_runs_and_in_place():
    values = np.array([1, 4, 9, 2, 3, 3, 7], np.int64)  # runs [1 4 9] and [2 3 3 7]
    runs = (
        np.array([0, 3, 3], np.int64),
        np.array([3, 7, 7], np.int64),
        np.array([0, 2], np.int64),
        np.array([2, 1], np.int64),
    )
    n, lower, higher = cpu_holistic.holistic_select(values, *runs, "percentile_cont", 0.5, True)
    assert n.tolist() == [7, 4] and lower.tolist() == [3, 3] and higher.tolist() == [3, 3]
    n, lower, _ = cpu_holistic.holistic_select(values, *runs, "count_distinct", 0.0, True)
    assert lower.tolist() == [6, 3]  # {1, 2, 3, 4, 7, 9} and {2, 3, 7}
    n, lower, _ = cpu_holistic.holistic_select(values, *runs, "percentile_disc", 1.0, True)
    assert lower.tolist() == [9, 7]


def test_every_holistic_function_is_defined_once_with_a_variable_state():
    # the exact ones (the approximate ones keep sketches: tests/test_sketch_sql.py)
    holistic = [a for a in aggregates.aggregates() if a.is_holistic and not a.holistic.sketch]
    assert {a.key for a in holistic} == {
        "MEDIAN",
        "PERCENTILE_CONT",
        "PERCENTILE",
        "PERCENTILE_DISC",
        "COUNT_DISTINCT",
        "PYTHON",  # user window functions written in Python (tests/test_python_window.py)
    }
    for definition in holistic:
        assert definition.state is not None and definition.state.kind is VALUES
        evaluation = definition.holistic.evaluation
        assert evaluation in cpu_holistic.MODES or (definition.key, evaluation) == (
            "PYTHON",
            "python",
        )
    assert VALUES.layout is aggregates.Layout.VARIABLE and VALUES.holistic
    assert not VALUES.algebraic


def test_holistic_and_incremental_fields_share_one_window_node():
    plan = (
        cpu_session()
        .sql(
            "SELECT k, MEDIAN(v), PERCENTILE(v, 0.9), SUM(v) FROM s "
            "[RANGE 1 SECOND SLIDE 10 MILLISECONDS] GROUP BY k"
        )
        .plan
    )
    window = ph.find(plan, ph.WindowAggregateExec)
    assert window.holistic is not None and window.holistic.strategy == "sorted-panes"
    assert [f.kind.name for f in window.fields].count("values") == 1  # shared by both
    assert ph.placement(window, "holistic").backend == "cpu"


def test_gpu_plans_place_the_holistic_step_of_time_windows_on_the_gpu_with_its_form():
    session = cpu_session()
    sliding = session.sql(
        "SELECT k, MEDIAN(v), SUM(v) FROM s [RANGE 1 SECOND SLIDE 10 MILLISECONDS] GROUP BY k"
    ).plan
    gpu = ph.with_backend(sliding, "gpu", "test")
    window = ph.find(gpu, ph.WindowAggregateExec)
    assert ph.placement(window, "holistic").backend == "gpu"
    assert ph.placement(window, "lift").backend == "gpu"  # SUM stays on the GPU
    # 100 panes a window: a warp per window, 2^22 runs (41,943 windows) per launch
    assert window.holistic.gpu_form == "warp-per-window"
    assert window.holistic.windows_per_launch == (1 << 22) // 100
    assert "holistic=sorted-panes(warp-per-window, 41943 windows/launch)" in explain_text(gpu)
    # back on the CPU: no GPU form in the plan or EXPLAIN
    cpu = ph.find(ph.with_backend(gpu, "cpu", "test"), ph.WindowAggregateExec)
    assert cpu.holistic.gpu_form is None and "holistic=sorted-panes " in explain_text(
        ph.with_backend(gpu, "cpu", "test")
    )
    tumbling = session.sql("SELECT k, MEDIAN(v) FROM s [RANGE 1 SECOND] GROUP BY k").plan
    window = ph.find(ph.with_backend(tumbling, "gpu", "test"), ph.WindowAggregateExec)
    assert window.holistic.gpu_form == "thread-per-window"  # one sorted run, read in place
    wide = session.sql(
        "SELECT k, MEDIAN(v) FROM s [RANGE 1 SECOND SLIDE 1 MILLISECONDS] GROUP BY k"
    ).plan
    window = ph.find(ph.with_backend(wide, "gpu", "test"), ph.WindowAggregateExec)
    assert window.holistic.gpu_form == "block-per-window"  # 1,000 runs a window
    assert [gpu_form(p) for p in (1, 7, 8, 255, 256)] == [
        "thread-per-window",
        "thread-per-window",
        "warp-per-window",
        "warp-per-window",
        "block-per-window",
    ]


def test_gpu_plans_keep_the_holistic_step_of_count_windows_on_the_cpu_with_a_reason():
    plan = cpu_session().sql("SELECT k, MEDIAN(v) FROM s [ROWS 10] GROUP BY k").plan
    window = ph.find(ph.with_backend(plan, "gpu", "test"), ph.WindowAggregateExec)
    step = ph.placement(window, "holistic")
    assert (step.backend, step.reason) == ("cpu", COUNT_HOLISTIC_ON_CPU)
    assert window.holistic.gpu_form is None


def test_holistic_functions_inside_spark_plan_the_two_stages_even_when_tumbling():
    from mangonel.runtime.spark.planner import plan_spark

    query = cpu_session().sql("SELECT k, MEDIAN(v) FROM s [RANGE 1 SECOND] GROUP BY k")
    planned = plan_spark(query.text, query.plan, partitions=2)
    assert not planned.native and "holistic functions run in mangonel's stages" in (
        planned.native_reason
    )
    with pytest.raises(PlanError, match="native=True: Spark's streaming aggregation.*MEDIAN"):
        plan_spark(query.text, query.plan, partitions=2, native=True)


def test_holistic_functions_inside_spark_over_count_and_session_windows():
    """Count and session windows run them in the two stages (per-tuple partials carry the
    values); Spark's own session_window aggregation cannot run them."""
    from mangonel.runtime.spark.planner import plan_spark, spark_stages_text

    session = cpu_session()
    counted = session.sql("SELECT k, MEDIAN(v) FROM s [ROWS 3 SLIDE 2] GROUP BY k")
    planned = plan_spark(counted.text, counted.plan, partitions=2)
    assert not planned.native and planned.stage1 == "kernels"
    assert "holistic=tuple-runs" in spark_stages_text(planned)
    sessions = session.sql("SELECT k, MEDIAN(v) FROM s [SESSION GAP 1 SECOND] GROUP BY k")
    planned = plan_spark(sessions.text, sessions.plan, partitions=2)
    assert not planned.native and planned.stage1 == "kernels"
    assert "holistic=session-runs" in spark_stages_text(planned)
    with pytest.raises(PlanError, match="cannot run MEDIAN"):
        plan_spark(sessions.text, sessions.plan, partitions=2, native=True)


def test_holistic_functions_over_joins_are_refused():
    session = cpu_session()
    session.execute("CREATE STREAM t (ts TIMESTAMP, k BIGINT, w DOUBLE) WITH (event_time = 'ts')")
    with pytest.raises(PlanError, match="holistic functions over joins: not yet"):
        session.sql(
            "SELECT a.k, MEDIAN(b.w) FROM s [RANGE 1 SECOND] AS a JOIN t [RANGE 1 SECOND] AS b "
            "ON a.k = b.k GROUP BY a.k"
        )


def test_state_is_freed_once_windows_fire_and_counted():
    session = cpu_session()
    runner = LocalQuery(
        session.sql(
            "SELECT k, MEDIAN(v) FROM s [RANGE 10 MICROSECONDS SLIDE 5 MICROSECONDS] GROUP BY k"
        ).plan
    )
    runner.process(batch_of([{"ts": t, "k": t % 3, "x": 0, "v": float(t)} for t in range(1000)]))
    held = runner.metrics.state_bytes
    assert held > 0
    operator = runner.window_operator
    # only panes of unfired windows stay: the last window (10 us) and what the watermark holds
    assert sum(len(store) for store in operator.panes.values()) <= 4


def test_a_snapshot_of_another_query_is_refused():
    from mangonel.errors import DataError

    session = cpu_session()
    plain = LocalQuery(
        session.sql("SELECT k, SUM(v) FROM s [RANGE 10 MICROSECONDS] GROUP BY k").plan
    )
    holistic = LocalQuery(
        session.sql("SELECT k, MEDIAN(v) FROM s [RANGE 10 MICROSECONDS] GROUP BY k").plan
    )
    with pytest.raises(DataError, match="snapshot does not match this query"):
        holistic.restore(plain.snapshot())


@settings(max_examples=30, **SETTINGS)
@given(scenarios("time"))
def test_results_are_the_same_in_small_row_chunks(monkeypatch, scenario):
    # a firing's rows are evaluated in chunks of MAX_RUNS runs: chunk boundaries anywhere
    from mangonel.compiler import holistic as planning

    monkeypatch.setattr(planning, "MAX_RUNS", 7)
    failure = check(scenario, "cpu")
    assert failure is None, f"{failure}\n{scenario.query}"


@settings(max_examples=20, **SETTINGS)
@given(scenarios("time"))
def test_results_are_the_same_when_a_firings_span_is_cut(monkeypatch, scenario):
    # small chunks read one span of sorted panes concatenated for the whole firing (the test
    # above); with a span of at most a few values beyond a chunk's need, later chunks
    # concatenate spans of their own, starting anywhere
    from mangonel.compiler import holistic as planning
    from mangonel.runtime.operators import holistic_pane

    monkeypatch.setattr(planning, "MAX_RUNS", 7)
    monkeypatch.setattr(holistic_pane, "MAX_SPAN_VALUES", 3)
    failure = check(scenario, "cpu")
    assert failure is None, f"{failure}\n{scenario.query}"
