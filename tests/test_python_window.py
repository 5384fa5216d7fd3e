"""User window functions written in Python (`Session.register_window_function`): results
against the oracle, which applies the plain (uncompiled) Python function to each window's
non-NULL values as it sorts them (tests/oracle.py, "python:<name>"), on time windows (sliding
and tumbling) and count windows, in and out of order, with NULLs, NaN/infinities, late rows,
snapshot/restore, beside MEDIAN and incremental aggregates, also functions registered
with_timestamps (the oracle hands them the values' event times); the registration API
(decorator, type checks, names), numba compile errors at registration and planning, EXPLAIN,
GPU placement and the Spark plan."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from fuzzer import Scenario, check
from holistic_stream import batch_of, cpu_session, run_rows
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import register_python_function
from test_holistic import SETTINGS, SPECIAL, _sql, grouped_scenario

import mangonel
from mangonel.aggregates.holistic import order_keys
from mangonel.compiler import physical as ph
from mangonel.compiler.holistic import holistic_cpu_reason
from mangonel.errors import CatalogError, FunctionError, PlanError, SqlError
from mangonel.runtime.cpu import python_window
from mangonel.runtime.local.query import LocalQuery


def trimmed_mean(values):
    """The mean of the values without the lowest and highest tenth (sorted input)."""
    n = values.shape[0]
    k = n // 10
    total = 0.0
    for i in range(k, n - k):
        total += values[i]
    return total / (n - 2 * k)


def spread(values):
    return float(values[values.shape[0] - 1]) - float(values[0])


def above_lowest(values):
    """How many values exceed the smallest (an integer result)."""
    count = 0
    for i in range(values.shape[0]):
        if values[i] > values[0]:
            count += 1
    return count


def time_weighted(values, times):
    """Reads the timestamps (registered with_timestamps): the rank-weighted sum of each
    value's time after the window's earliest, plus the time of the largest value; depends
    on the order the pairs arrive in (by value, equal values by time)."""
    earliest = times[0]
    for i in range(times.shape[0]):  # not min(): numba's CUDA target needs a GPU for it
        if times[i] < earliest:
            earliest = times[i]
    total = 0.0
    for i in range(times.shape[0]):
        total += (i + 1) * (times[i] - earliest)
    return total + times[times.shape[0] - 1]


# (name, function, returns, oracle result type, with_timestamps)
FUNCTIONS = [
    ("trimmed_mean", trimmed_mean, "DOUBLE", "double", False),
    ("spread", spread, "DOUBLE", "double", False),
    ("above_lowest", above_lowest, "BIGINT", "bigint", False),
    ("time_weighted", time_weighted, "DOUBLE", "double", True),
]
WINDOW_FUNCTIONS = tuple(
    (name, function, returns, timed) for name, function, returns, _, timed in FUNCTIONS
)


def _oracle_function(function, timed):
    """The user's function over the oracle's lists (as NumPy arrays of the engine's dtypes)."""
    if timed:
        return lambda values, times, integral: function(
            np.array(values, np.int64 if integral else np.float64), np.array(times, np.int64)
        )
    return lambda values, integral: function(np.array(values, np.int64 if integral else np.float64))


for _name, _function, _, _result, _timed in FUNCTIONS:
    register_python_function(_name, _oracle_function(_function, _timed), _result, _timed)
# beside the Python functions: a holistic and an incremental aggregate
OTHERS = [("median", "MEDIAN({a})"), ("sum", "SUM({a})"), ("count", "COUNT({a})")]


@st.composite
def scenarios(draw, kind: str) -> Scenario:
    if kind == "time":
        slide = draw(st.integers(1, 10))
        size = draw(st.one_of(st.just(slide), st.integers(1, 6).map(lambda f: f * slide)))
    else:
        size = draw(st.integers(1, 12))
        slide = draw(st.integers(1, size))
    delay = draw(st.integers(0, 30))
    disorder = draw(st.sampled_from([0, 0, 5, 40]))  # in order, and out of order
    rows = draw(st.integers(0, 90))
    keys = draw(st.integers(1, 5))
    spread_ = draw(st.sampled_from([2, 1000]))
    null_rate = draw(st.sampled_from([0.0, 0.3, 0.9]))
    special = draw(st.booleans())
    data = []
    for i in range(rows):
        v: float | None = float(draw(st.integers(-spread_, spread_))) / 4
        if special and draw(st.integers(0, 5)) == 0:
            v = draw(st.sampled_from(SPECIAL))
        data.append(
            {
                "ts": i + draw(st.integers(0, disorder)),
                "k": draw(st.integers(0, keys - 1)),
                "x": None
                if draw(st.floats(0, 1)) < null_rate
                else draw(st.integers(-spread_, spread_)),
                "n": draw(st.integers(-3, 3)),
                "v": None if draw(st.floats(0, 1)) < null_rate else v,
            }
        )
    cuts = sorted(draw(st.lists(st.integers(0, rows), max_size=4)))
    batches = [data[a:b] for a, b in zip([0, *cuts], [*cuts, rows], strict=True)]
    calls = []
    for _ in range(draw(st.integers(1, 3))):
        argument = draw(st.sampled_from([["col", "v"], ["col", "x"], ["col", "n"]]))
        if draw(st.integers(0, 4)) == 0:
            argument = ["+", ["col", "x"], ["col", "n"]]
        if draw(st.integers(0, 3)) == 0:
            name, sql = draw(st.sampled_from(OTHERS))
            calls.append((name, sql.format(a=_sql(argument)), argument))
        else:
            name = draw(st.sampled_from([f[0] for f in FUNCTIONS]))
            calls.append((f"python:{name}", f"{name}({_sql(argument)})", argument))
    snapshot = tuple(sorted(set(draw(st.lists(st.integers(0, len(batches)), max_size=2)))))
    return grouped_scenario(
        kind, size, slide, delay, calls, batches, snapshot, window_functions=WINDOW_FUNCTIONS
    )


@settings(max_examples=80, **SETTINGS)
@given(scenarios("time"))
def test_python_functions_over_time_windows_match_the_oracle(scenario):
    failure = check(scenario, "cpu")
    assert failure is None, f"{failure}\n{scenario.query}"


@settings(max_examples=60, **SETTINGS)
@given(scenarios("count"))
def test_python_functions_over_count_windows_match_the_oracle(scenario):
    failure = check(scenario, "cpu")
    assert failure is None, f"{failure}\n{scenario.query}"


# -- known values, the API ---------------------------------------------------------------


def test_trimmed_mean_of_known_values_with_nulls_and_an_all_null_window():
    session = cpu_session()

    @session.window_function(returns="DOUBLE")
    def trimmed(values):  # drops one value at each end of 10 or more
        n = values.shape[0]
        k = n // 10
        return values[k : n - k].mean()

    values = [5.0, None, 1.0, 100.0, 2.0, 3.0, 4.0, -50.0, 6.0, 7.0, 8.0, None]
    rows = [{"ts": t, "v": v} for t, v in enumerate(values)]
    rows += [{"ts": 100 + t, "v": None} for t in range(3)]  # a window of NULLs only
    got = run_rows(
        session,
        "SELECT window_start AS ws, TRIMMED(v) AS t, MEDIAN(v) AS m, COUNT(*) AS c "
        "FROM s [RANGE 100 MICROSECONDS]",
        rows,
    )
    # sorted: -50 1 2 3 4 5 6 7 8 100: without -50 and 100, the mean of 1..8
    assert got[0]["t"] == pytest.approx(4.5) and got[0]["m"] == 4.5 and got[0]["c"] == 12
    assert got[1]["t"] is None and got[1]["c"] == 3


def test_a_function_that_fails_stops_the_query_with_its_name_and_error():
    """An index past the window's values raises IndexError (the function is compiled with
    bounds checking; its values are a view of a larger scratch buffer, so without it the
    read would return another window's value), and what a function raises stops the query
    with the function's name (docs/semantics.md); a function that does neither still runs."""
    session = cpu_session()

    def past_the_end(values):
        return values[values.shape[0]]

    def refuses_many(values):
        if values.shape[0] > 2:
            raise ValueError("more than two values")
        return values[0]

    session.register_window_function("past_the_end", past_the_end, returns="DOUBLE")
    session.register_window_function("refuses_many", refuses_many, returns="DOUBLE")
    rows = [{"ts": t, "v": float(t)} for t in range(5)] + [{"ts": 300, "v": 1.0}]
    for name, error in (("past_the_end", "IndexError"), ("refuses_many", "more than two")):
        with pytest.raises(FunctionError, match=f"'{name}' raised .*{error}"):
            run_rows(session, f"SELECT {name}(v) AS f FROM s [RANGE 100 MICROSECONDS]", rows)
    got = run_rows(
        session,
        "SELECT refuses_many(v) AS f FROM s [RANGE 100 MICROSECONDS]",
        [{"ts": 0, "v": 2.0}, {"ts": 1, "v": 1.0}, {"ts": 300, "v": 5.0}],
    )
    assert got == [{"f": 1.0}, {"f": 5.0}]


def test_integer_arguments_arrive_as_int64_and_bigint_results():
    session = cpu_session()

    def lowest_plus_count(values):
        return values[0] + values.shape[0]

    session.register_window_function("lpc", lowest_plus_count, returns="BIGINT")
    got = run_rows(
        session,
        "SELECT lpc(n) AS a, lpc(x) AS b FROM s [RANGE 100 MICROSECONDS]",
        [{"ts": t, "n": n, "x": 2**40 + n} for t, n in enumerate([4, -2, 9])],
    )
    assert got == [{"a": -2 + 3, "b": 2**40 - 2 + 3}]
    query = session.sql("SELECT lpc(n) AS a FROM s [RANGE 100 MICROSECONDS]")
    assert query.schema.field("a").type == pa.int64()


def test_an_int_result_outside_32_bits_wraps_as_a_cast_does():
    """returns="INT" with a result past int32: the low 32 bits, as Spark's non-ANSI CAST(x AS
    INT) gives and as a BIGINT result past int64 wraps (Arrow's checked cast raised
    ArrowInvalid out of the firing before); in range it is the value itself."""
    session = cpu_session()

    def count_plus(values):
        return values.shape[0] + 2**31 + 4  # 2**31 + 5 for one value: -(2**31) + 5 wrapped

    def how_many(values):
        return values.shape[0]

    session.register_window_function("count_plus", count_plus, returns="INT")
    session.register_window_function("how_many", how_many, returns="INT")
    got = run_rows(
        session,
        "SELECT count_plus(x) AS wrapped, how_many(x) AS plain FROM s [RANGE 100 MICROSECONDS]",
        [{"ts": 0, "x": 1.0}],
    )
    assert got == [{"wrapped": -(2**31) + 5, "plain": 1}]


def test_the_plan_names_the_function_and_a_gpu_plan_unchecked_for_cuda_keeps_it_on_the_cpu():
    # (plans the session checks for CUDA: tests/test_python_window_cuda.py)
    session = cpu_session()
    session.register_window_function("trimmed_mean", trimmed_mean, returns="DOUBLE")
    query = session.sql(
        "SELECT k, trimmed_mean(v), MEDIAN(v), SUM(v) FROM s "
        "[RANGE 1 SECOND SLIDE 10 MILLISECONDS] GROUP BY k"
    )
    assert "trimmed_mean(v) [python]<-values_" in query.explain()
    # a CPU plan re-placed on the GPU: no CUDA check ran, so the step stays on the CPU
    window = ph.find(ph.with_backend(query.plan, "gpu", "test"), ph.WindowAggregateExec)
    assert window.aggregates[0].python.function is trimmed_mean
    step = ph.placement(window, "holistic")
    assert step.backend == "cpu"
    assert step.reason == (
        "the function trimmed_mean was not checked for CUDA for float64 values "
        "(the plan was made without the session's CUDA check)"
    )
    assert window.holistic.gpu_form is None
    assert ph.placement(window, "lift").backend == "gpu"  # SUM stays on the GPU
    reason = holistic_cpu_reason(window.aggregates, window.fields)
    placements = ph.window_placements(window.window, "gpu", "test", True, reason)
    assert "! holistic runs on cpu because the function trimmed_mean was not checked" in (
        "\n".join(f"! {p.step} runs on {p.backend} because {p.reason}" for p in placements)
    )


def test_python_functions_inside_spark_plan_the_two_stages():
    from mangonel.runtime.spark.planner import plan_spark, spark_stages_text

    session = cpu_session()
    session.register_window_function("spread", spread)
    query = session.sql("SELECT k, spread(v) FROM s [RANGE 1 SECOND] GROUP BY k")
    planned = plan_spark(query.text, query.plan, partitions=2)
    assert not planned.native and "spread" in planned.native_reason
    assert "holistic=sorted-panes on cpu at window close" in spark_stages_text(planned)


def test_names_are_case_insensitive_and_replacing_needs_replace():
    session = cpu_session()
    session.register_window_function("Spread", spread)
    assert run_rows(
        session,
        "SELECT SPREAD(v) AS s FROM s [RANGE 10 MICROSECONDS]",
        [
            {"ts": 1, "v": 2.0},
            {"ts": 2, "v": 7.5},
        ],
    ) == [{"s": 5.5}]
    with pytest.raises(CatalogError, match="already registered"):
        session.register_window_function("spread", trimmed_mean)
    session.register_window_function("spread", trimmed_mean, replace=True)
    got = run_rows(
        session,
        "SELECT spread(v) AS s FROM s [RANGE 10 MICROSECONDS]",
        [
            {"ts": 1, "v": 2.0},
            {"ts": 2, "v": 7.5},
        ],
    )
    assert got == [{"s": 4.75}]


@pytest.mark.parametrize(
    ("name", "returns", "message"),
    [
        ("median", "DOUBLE", "built-in function"),
        ("abs", "DOUBLE", "built-in function"),
        ("window", "DOUBLE", "built-in function"),  # window(...) defines the window
        ("Session_Window", "DOUBLE", "built-in function"),
        ("window_time", "DOUBLE", "built-in function"),
        ("2fast", "DOUBLE", "not an identifier"),
        ("my fn", "DOUBLE", "not an identifier"),
        ("fine", "STRING", "returns=STRING is not supported"),
        ("fine", "DECIMAL", "not a type"),
        ("fine", 3, "returns must be a type name"),
    ],
)
def test_bad_registrations_are_refused(name, returns, message):
    with pytest.raises(CatalogError, match=message):
        cpu_session().register_window_function(name, spread, returns=returns)


def test_a_function_numba_cannot_compile_is_refused_at_registration_with_the_reason():
    def uses_a_dict(values):
        return {"n": values.shape[0]}["n"] + object().__hash__()

    with pytest.raises(PlanError, match="'uses_a_dict' does not compile with numba"):
        cpu_session().register_window_function("uses_a_dict", uses_a_dict)


def test_a_function_that_returns_nothing_is_refused_saying_so():
    """numba types a function that raises on every path (or never returns) as returning
    `none`: refused as returning nothing, not as a type that "does not fit"."""

    def always_raises(values):
        raise ValueError("boom")

    with pytest.raises(PlanError, match="'always_raises' returns nothing for float64 values"):
        cpu_session().register_window_function("always_raises", always_raises)


def test_a_float_result_for_an_integer_return_type_is_refused():
    with pytest.raises(PlanError, match="returns float64.*returns=BIGINT"):
        cpu_session().register_window_function("tm", trimmed_mean, returns="BIGINT")


def test_a_result_that_fits_only_for_integer_arguments_is_refused_at_planning():
    def lowest(values):
        return values[0]  # int64 for an integer argument, float64 for a floating one

    session = cpu_session()
    session.register_window_function("lowest", lowest, returns="BIGINT")
    assert (
        session.sql("SELECT lowest(x) AS lo FROM s [RANGE 1 SECOND]").schema.field("lo").type
        == pa.int64()
    )
    with pytest.raises(PlanError, match="'lowest' returns float64 for float64 values"):
        session.sql("SELECT lowest(v) FROM s [RANGE 1 SECOND]")


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("SELECT spread(v, x) FROM s [RANGE 1 SECOND]", "spread takes one argument"),
        ("SELECT spread(*) FROM s [RANGE 1 SECOND]", "spread takes one argument"),
        ("SELECT spread() FROM s [RANGE 1 SECOND]", "spread takes one argument"),
        ("SELECT k FROM s [RANGE 1 SECOND] WHERE spread(v) > 0 GROUP BY k", "spread in WHERE"),
        ("SELECT spread(spread(v)) FROM s [RANGE 1 SECOND]", "nested aggregates"),
        ("SELECT spread(v > 0) FROM s [RANGE 1 SECOND]", "spread cannot take a BOOLEAN"),
    ],
)
def test_bad_calls_are_refused(query, message):
    session = cpu_session()
    session.register_window_function("spread", spread)
    with pytest.raises(SqlError, match=message):
        session.sql(query)


def test_an_unregistered_name_is_still_an_unknown_function():
    with pytest.raises(SqlError, match="unknown function SPREAD"):
        cpu_session().sql("SELECT spread(v) FROM s [RANGE 1 SECOND]")


def test_the_kernel_merges_sorted_runs_sorts_unsorted_ones_and_decodes_order_keys():
    function = mangonel.aggregates.python.WindowFunction(
        "first", _first, mangonel.catalog.types.SqlType.DOUBLE
    )
    values = np.array([9.0, -4.0, math.nan, -0.0, 3.0, 1.0, math.inf], np.float64)
    keys = order_keys(values)
    runs = (  # row 0: [9 -4 nan] + [-0.0 3] + [1 inf]; row 1: [-0.0 3]; row 2: nothing
        np.array([0, 3, 5, 3, 0], np.int64),
        np.array([3, 5, 7, 5, 0], np.int64),
        np.array([0, 3, 4], np.int64),
        np.array([3, 1, 1], np.int64),
    )
    n, out = python_window.evaluate_python(function, keys, *runs, False, True)
    assert n.tolist() == [7, 2, 0] and out[:2].tolist() == [-4.0, 0.0]
    sorted_keys = keys.copy()
    sorted_keys[:3] = np.sort(keys[:3])  # every run ascending: merged, not sorted
    recorder = mangonel.aggregates.python.WindowFunction(
        "all", _sum_of_finite, mangonel.catalog.types.SqlType.DOUBLE
    )
    n, out = python_window.evaluate_python(recorder, sorted_keys, *runs, True, True)
    assert out[0] == -4.0 + 0.0 + 1.0 + 3.0 + 9.0
    n, out = python_window.evaluate_python(function, sorted_keys, *runs, True, True)
    assert out[0] == -4.0


def test_a_new_function_reuses_the_compiled_loop_of_its_dtypes():
    # the loop takes functions as first-class values of one signature: a function it has
    # not seen runs through the loop already compiled, not a specialisation of its own
    runs = (
        np.array([0], np.int64),
        np.array([3], np.int64),
        np.array([0], np.int64),
        np.array([1], np.int64),
    )
    keys = np.array([1, 5, 9], np.int64)
    double = mangonel.catalog.types.SqlType.DOUBLE
    first = mangonel.aggregates.python.WindowFunction("first", _first, double)
    python_window.evaluate_python(first, keys, *runs, True, False)
    loop = python_window._evaluate((np.dtype(np.int64), np.dtype(np.float64)))
    compiled = len(loop.overloads)
    last = mangonel.aggregates.python.WindowFunction("last", lambda v: v[v.shape[0] - 1], double)
    n, out = python_window.evaluate_python(last, keys, *runs, True, False)
    assert n.tolist() == [3] and out.tolist() == [9.0]
    assert len(loop.overloads) == compiled == 1


def _sum_of_finite(values):
    """Checks the order: ascending, NaN and +inf last; sums the finite values."""
    total = 0.0
    for i in range(1, values.shape[0]):
        if not values[i - 1] <= values[i] and not math.isnan(values[i]):
            return -1.0
    for i in range(values.shape[0]):
        if math.isfinite(values[i]):
            total += values[i]
    return total


def _first(values):
    return values[0]


def test_nan_and_infinities_reach_the_function_in_spark_order():
    session = cpu_session()
    session.register_window_function("spread", spread)
    session.register_window_function("lowest", _first)
    got = run_rows(
        session,
        "SELECT spread(v) AS s, lowest(v) AS lo FROM s [RANGE 10 MICROSECONDS]",
        [{"ts": t, "v": v} for t, v in enumerate([math.nan, 1.0, -math.inf, -0.0])],
    )
    assert math.isnan(got[0]["s"]) and got[0]["lo"] == -math.inf


def test_having_expressions_and_joins():
    session = cpu_session()
    session.register_window_function("spread", spread)
    rows = [{"ts": t, "k": t % 2, "v": float(t * t)} for t in range(6)]
    got = run_rows(
        session,
        "SELECT k, spread(v) * 2 AS twice FROM s [RANGE 10 MICROSECONDS] GROUP BY k "
        "HAVING spread(v) > 20",
        rows,
    )
    assert got == [{"k": 1, "twice": 48.0}]  # k = 1: 1, 9, 25; k = 0: 0, 4, 16 (spread 16)
    session.execute("CREATE STREAM t (ts TIMESTAMP, k BIGINT, w DOUBLE) WITH (event_time = 'ts')")
    with pytest.raises(PlanError, match="holistic functions over joins: not yet.*spread"):
        session.sql(
            "SELECT a.k, spread(b.w) FROM s [RANGE 1 SECOND] AS a JOIN t [RANGE 1 SECOND] AS b "
            "ON a.k = b.k GROUP BY a.k"
        )


def test_a_snapshot_restores_into_a_new_session_that_registers_the_function():
    query_text = (
        "SELECT k, trimmed_mean(v) AS t FROM s "
        "[RANGE 4 MICROSECONDS SLIDE 2 MICROSECONDS] GROUP BY k"
    )
    first = [{"ts": t, "v": float(t)} for t in range(3)]
    second = [{"ts": t, "v": float(10 * t)} for t in range(3, 7)]

    def runner():
        session = cpu_session()
        session.register_window_function("trimmed_mean", trimmed_mean)
        return LocalQuery(session.sql(query_text).plan)

    whole = runner()
    expected = [
        r
        for out in whole.process(batch_of(first)) + whole.process(batch_of(second))
        for r in out.to_pylist()
    ]
    expected += [r for out in whole.finish() for r in out.to_pylist()]
    before = runner()
    got = [r for out in before.process(batch_of(first)) for r in out.to_pylist()]
    after = runner()  # another session, the function registered again
    after.restore(before.snapshot())
    got += [r for out in after.process(batch_of(second)) + after.finish() for r in out.to_pylist()]
    assert got == expected and any(r["t"] is not None for r in got)


# -- with_timestamps ------------------------------------------------------------------------


def _value_time_pairs(values, times):
    """The pairs as the function sees them, encoded in one number each (checks the order)."""
    total = 0.0
    for i in range(values.shape[0]):
        total = total * 1000.0 + values[i] * 100.0 + times[i]
    return total


def test_a_function_with_timestamps_gets_each_values_event_time_in_value_order():
    session = cpu_session()
    session.register_window_function(
        "pairs", _value_time_pairs, returns="DOUBLE", with_timestamps=True
    )
    # values 3 1 3 2 1 at times 0..4 (two ties); one NULL at time 5 (skipped with its time)
    rows = [{"ts": t, "v": v} for t, v in enumerate([3.0, 1.0, 3.0, 2.0, 1.0, None])]

    def encode(pairs):
        total = 0.0
        for value, time in pairs:
            total = total * 1000.0 + value * 100.0 + time
        return total

    tumbling = run_rows(session, "SELECT pairs(v) AS p FROM s [RANGE 10 MICROSECONDS]", rows)
    # sorted by value, equal values by time: (1,1) (1,4) (2,3) (3,0) (3,2)
    assert tumbling == [{"p": encode([(1, 1), (1, 4), (2, 3), (3, 0), (3, 2)])}]
    # sliding: panes of 2 us merged, ties across panes stay in time order
    sliding = run_rows(
        session,
        "SELECT window_start AS ws, pairs(v) AS p FROM s "
        "[RANGE 4 MICROSECONDS SLIDE 2 MICROSECONDS]",
        rows,
    )
    assert [r["p"] for r in sliding] == [
        encode([(1, 1), (3, 0)]),  # [-2, 2)
        encode([(1, 1), (2, 3), (3, 0), (3, 2)]),  # [0, 4)
        encode([(1, 4), (2, 3), (3, 2)]),  # [2, 6)
        encode([(1, 4)]),  # [4, 8): the NULL's time is not there
    ]
    counted = run_rows(session, "SELECT pairs(v) AS p FROM s [ROWS 3 SLIDE 2]", rows)
    assert [r["p"] for r in counted] == [
        encode([(1, 1), (3, 0), (3, 2)]),  # tuples 0..2
        encode([(1, 4), (2, 3), (3, 2)]),  # tuples 2..4
    ]


def test_with_timestamps_registrations_are_checked():
    session = cpu_session()
    with pytest.raises(CatalogError, match="with_timestamps must be True or False"):
        session.register_window_function("f", spread, with_timestamps="yes")
    # a function of one array registered with timestamps: numba says it takes one argument
    with pytest.raises(PlanError, match="does not compile with numba.*argument"):
        session.register_window_function("f", spread, with_timestamps=True)
    registered = session.register_window_function("f", time_weighted, with_timestamps=True)
    assert registered.with_timestamps and "with_timestamps" in repr(registered)
