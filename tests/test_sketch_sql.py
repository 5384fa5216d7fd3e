"""APPROX_COUNT_DISTINCT and APPROX_PERCENTILE / PERCENTILE_APPROX in SQL, against the oracle
(tests/oracle.py computes the exact answer and the answers the sketch's bound accepts:
`oracle.Approximate`) on time windows (sliding, tumbling; disorder, late rows) and count
windows, with NULLs, ties, NaN/-0.0/infinities, snapshot/restore, mixed with exact holistic
and incremental aggregates. Plus larger windows where the HLL estimate and the GK compression
matter, EXPLAIN, the GPU placement, the Spark refusal, state_bytes and the snapshot checks."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from fuzzer import Scenario, check
from holistic_stream import SCHEMA, batch_of, cpu_session, run_rows
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_holistic import grouped_scenario

from mangonel.compiler import physical as ph
from mangonel.compiler.holistic import SKETCHES_ON_CPU
from mangonel.errors import DataError, PlanError, SqlError
from mangonel.runtime.local.query import LocalQuery

SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
SPECIAL = [math.nan, -0.0, 0.0, math.inf, -math.inf]
RSDS = [0.05, 0.1, 0.02, 0.3]
ACCURACIES = [10000, 100, 10, 4, 2]  # small ones compress summaries of a few values
FRACTIONS = [0.0, 1.0, 0.5, 0.25, 0.9, 0.333]
PATHS = ["sketch", None, "exact"]  # the session's approx_percentile option


def _function(draw, hll_only: bool = False) -> tuple[str, str]:
    """(oracle name, SQL with {a} for the argument) of one aggregate call; `hll_only`: no
    APPROX_PERCENTILE (a GPU plan keeps such a node's holistic step on the GPU)."""
    choice = draw(st.sampled_from([0, 1, 4, 5]) if hll_only else st.integers(0, 5))
    if choice <= 1:
        rsd = draw(st.sampled_from(RSDS))
        if draw(st.booleans()) and rsd == 0.05:
            return f"approx_count_distinct:{rsd}", "APPROX_COUNT_DISTINCT({a})"
        return f"approx_count_distinct:{rsd}", f"APPROX_COUNT_DISTINCT({{a}}, {rsd})"
    if choice <= 3:
        p = draw(st.sampled_from(FRACTIONS))
        accuracy = draw(st.sampled_from(ACCURACIES))
        name = draw(st.sampled_from(["APPROX_PERCENTILE", "PERCENTILE_APPROX"]))
        if accuracy == 10000 and draw(st.booleans()):
            return f"approx_percentile:{p}:{accuracy}", f"{name}({{a}}, {p})"
        return f"approx_percentile:{p}:{accuracy}", f"{name}({{a}}, {p}, {accuracy})"
    return draw(
        st.sampled_from(
            [
                ("median", "MEDIAN({a})"),
                ("sum", "SUM({a})"),
                ("count_distinct", "COUNT(DISTINCT {a})"),
            ]
        )
    )


@st.composite
def scenarios(draw, kind: str, hll_only: bool = False) -> Scenario:
    if kind == "time":
        slide = draw(st.integers(1, 10))
        size = draw(st.one_of(st.just(slide), st.integers(1, 6).map(lambda f: f * slide)))
        size = draw(st.one_of(st.just(size), st.integers(slide, 40)))
    else:
        size = draw(st.integers(1, 30))
        slide = draw(st.integers(1, size))
    delay = draw(st.integers(0, 30))
    disorder = draw(st.integers(0, 40))
    rows = draw(st.integers(0, 200))
    keys = draw(st.integers(1, 4))
    spread = draw(st.sampled_from([2, 50, 100000]))  # ties, and all distinct
    null_rate = draw(st.sampled_from([0.0, 0.2, 1.0]))  # 1.0: all-NULL windows
    special = draw(st.booleans())
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    data = []
    for i in range(rows):
        v: float | None = float(rng.integers(-spread, spread + 1)) / 2
        if special and rng.integers(0, 6) == 0:
            v = SPECIAL[int(rng.integers(0, len(SPECIAL)))]
        data.append(
            {
                "ts": i + int(rng.integers(0, disorder + 1)),
                "k": int(rng.integers(0, keys)),
                "x": None if rng.random() < null_rate else int(rng.integers(-spread, spread + 1)),
                "n": int(rng.integers(-spread, spread + 1)) % 1000,
                "v": None if rng.random() < null_rate else v,
            }
        )
    cuts = sorted(draw(st.lists(st.integers(0, rows), max_size=4)))
    batches = [data[a:b] for a, b in zip([0, *cuts], [*cuts, rows], strict=True)]
    calls = []
    for _ in range(draw(st.integers(1, 4))):
        name, sql = _function(draw, hll_only)
        argument = draw(st.sampled_from([["col", "v"], ["col", "x"], ["col", "n"]]))
        calls.append((name, sql.format(a=argument[1]), argument))
    if hll_only and not any(name.startswith("approx_count_distinct") for name, _, _ in calls):
        argument = draw(st.sampled_from([["col", "v"], ["col", "x"], ["col", "n"]]))
        calls.append(
            ("approx_count_distinct:0.05", f"APPROX_COUNT_DISTINCT({argument[1]})", argument)
        )
    snapshot = tuple(sorted(set(draw(st.lists(st.integers(0, len(batches)), max_size=2)))))
    scenario = grouped_scenario(kind, size, slide, delay, calls, batches, snapshot)
    # APPROX_PERCENTILE's path: the planner's rule, or either path forced
    scenario.approx_percentile = draw(st.sampled_from(PATHS))
    return scenario


@settings(max_examples=120, **SETTINGS)
@given(scenarios("time"))
def test_sketches_on_time_windows_stay_within_their_bounds(scenario):
    failure = check(scenario, "cpu")
    assert failure is None, f"{failure}\n{scenario.query}"


@settings(max_examples=60, **SETTINGS)
@given(scenarios("count"))
def test_sketches_on_count_windows_stay_within_their_bounds(scenario):
    failure = check(scenario, "cpu")
    assert failure is None, f"{failure}\n{scenario.query}"


@settings(max_examples=25, **SETTINGS)
@given(scenarios("time"))
def test_sketch_results_are_the_same_in_small_chunks(monkeypatch, scenario):
    # builds span few panes and merges few rows at a time: chunk boundaries anywhere
    from mangonel.runtime.operators import sketch_panes

    monkeypatch.setattr(sketch_panes, "MAX_BUILD_BYTES", 1)
    monkeypatch.setattr(sketch_panes, "MAX_MEMBERS", 3)
    failure = check(scenario, "cpu")
    assert failure is None, f"{failure}\n{scenario.query}"


def test_known_values_and_all_null_windows():
    rows = [{"ts": t, "x": value} for t, value in enumerate([1, 2, None, 2, 3, 10])]
    rows += [{"ts": 100 + t, "x": None} for t in range(3)]  # a window of only NULLs
    query = (
        "SELECT APPROX_COUNT_DISTINCT(x) AS d, APPROX_PERCENTILE(x, 0.5) AS m, "
        "PERCENTILE_APPROX(x, 1) AS hi, APPROX_PERCENTILE(v, 0.5) AS nv, COUNT(*) AS c "
        "FROM s [RANGE 100 MICROSECONDS]"
    )
    assert run_rows(cpu_session(), query, rows) == [
        {"d": 4, "m": 2, "hi": 10, "nv": None, "c": 6},
        {"d": 0, "m": None, "hi": None, "nv": None, "c": 3},
    ]


def test_result_types_follow_spark():
    session = cpu_session()
    query = session.sql(
        "SELECT APPROX_COUNT_DISTINCT(n) AS d, APPROX_PERCENTILE(n, 0.5) AS pn, "
        "APPROX_PERCENTILE(x, 0.5) AS px, APPROX_PERCENTILE(v, 0.5) AS pv "
        "FROM s [RANGE 1 SECOND]"
    )
    types = [query.schema.field(name).type for name in ("d", "pn", "px", "pv")]
    assert types == [pa.int64(), pa.int32(), pa.int64(), pa.float64()]


def _large(rows: int, keys: int, distinct: int, seed: int) -> pa.RecordBatch:
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, 10_000, rows))
    x = rng.integers(0, distinct, rows)
    v = rng.lognormal(size=rows)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(ts, pa.timestamp("us")),
            pa.array(rng.integers(0, keys, rows)),
            pa.array(x),
            pa.array(np.zeros(rows, np.int32)),
            pa.array(v),
        ],
        schema=SCHEMA,
    )


@pytest.mark.parametrize("rsd", [0.05, 0.02])
def test_hll_estimates_of_large_sliding_windows_are_within_three_rsd(rsd):
    batch = _large(200_000, 3, 60_000, seed=7)
    query = (
        f"SELECT k, window_start, APPROX_COUNT_DISTINCT(x, {rsd}) AS d FROM s "
        "[RANGE 4000 MICROSECONDS SLIDE 1000 MICROSECONDS] GROUP BY k"
    )
    runner = LocalQuery(cpu_session().sql(query).plan)
    got = pa.Table.from_batches(runner.process(batch) + runner.finish()).to_pylist()
    ts = batch.column(0).cast(pa.int64()).to_numpy()
    keys, x = batch.column(1).to_numpy(), batch.column(2).to_numpy()
    assert len(got) > 20
    errors = []
    for row in got:
        start = _micros(row["window_start"])
        chosen = (ts >= start) & (ts < start + 4000) & (keys == row["k"])
        exact = len(np.unique(x[chosen]))
        assert abs(row["d"] - exact) <= 3 * rsd * exact, (row, exact)
        errors.append((row["d"] - exact) / exact)
    # and the errors are spread like the sketch's standard deviation, not biased
    assert abs(np.mean(errors)) < rsd


def _micros(value) -> int:  # noqa: ANN001 - a datetime
    return int(pa.scalar(value, pa.timestamp("us")).cast(pa.int64()).as_py())


@pytest.mark.parametrize("accuracy", [10000, 100, 20])
def test_gk_ranks_of_large_sliding_windows_are_within_the_bound(accuracy):
    batch = _large(60_000, 2, 10**9, seed=3)
    fractions = (0.0, 0.1, 0.5, 0.99, 1.0)
    calls = ", ".join(
        f"APPROX_PERCENTILE(v, {p}, {accuracy}) AS p{i}" for i, p in enumerate(fractions)
    )
    query = (
        f"SELECT k, window_start, {calls} FROM s "
        "[RANGE 3000 MICROSECONDS SLIDE 500 MICROSECONDS] GROUP BY k"
    )
    runner = LocalQuery(cpu_session().sql(query).plan)
    # several batches: panes grow by unions of their summaries
    got = []
    for part in range(4):
        got += runner.process(batch.slice(part * 15_000, 15_000))
    got = pa.Table.from_batches(got + runner.finish()).to_pylist()
    ts = batch.column(0).cast(pa.int64()).to_numpy()
    keys, v = batch.column(1).to_numpy(), batch.column(4).to_numpy()
    assert len(got) > 20
    for row in got:
        start = _micros(row["window_start"])
        values = np.sort(v[(ts >= start) & (ts < start + 3000) & (keys == row["k"])])
        n = len(values)
        bound = math.floor(n / accuracy + 0.5)
        for i, p in enumerate(fractions):
            target = min(max(math.ceil(p * n), 1), n)
            low = np.searchsorted(values, row[f"p{i}"], "left") + 1
            high = np.searchsorted(values, row[f"p{i}"], "right")
            assert low <= high, "the answer is one of the window's values"
            assert low - bound <= target <= high + bound, (p, n, low, high, target)


def test_explain_names_the_sketches_and_their_parameters():
    text = (
        cpu_session()
        .sql(
            "SELECT k, APPROX_COUNT_DISTINCT(x, 0.01), PERCENTILE_APPROX(v, 0.9, 500), "
            "MEDIAN(v), SUM(v) FROM s [RANGE 1 SECOND SLIDE 10 MILLISECONDS] GROUP BY k"
        )
        .explain()
    )
    assert "APPROX_COUNT_DISTINCT(x, 0.01)<-" in text
    assert "APPROX_PERCENTILE(v, 0.9, 500)<-" in text
    assert "holistic=sorted-panes+sketch-panes" in text
    # MEDIAN(v) keeps v's raw values: the percentile selects over them, no GK summary
    assert "sketches=[HLL(p=14)]" in text
    assert (
        'approx_percentile=[APPROX_PERCENTILE(v, 0.9, 500): exact because "the raw values '
        'of its argument are kept anyway for MEDIAN"]'
    ) in text
    alone = cpu_session().sql(
        "SELECT k, PERCENTILE_APPROX(v, 0.9, 500) FROM s [RANGE 1 SECOND SLIDE 10 MILLISECONDS] "
        "GROUP BY k"
    )
    assert "sketches=[GK(accuracy=500)]" in alone.explain()
    count = cpu_session().sql("SELECT APPROX_COUNT_DISTINCT(x) FROM s [ROWS 10]").explain()
    assert "holistic=tuple-runs" in count and "sketches=[HLL(p=9)]" in count


def _gpu_window(select: str) -> ph.WindowAggregateExec:
    plan = cpu_session().sql(
        f"SELECT k, {select} FROM s [RANGE 1 SECOND SLIDE 10 MILLISECONDS] GROUP BY k"
    )
    return ph.find(ph.with_backend(plan.plan, "gpu", "test"), ph.WindowAggregateExec)


def test_gpu_plans_place_a_quantile_sketch_step_on_the_cpu_with_a_reason():
    for select in (
        "APPROX_PERCENTILE(v, 0.5, 100), SUM(v)",
        "APPROX_COUNT_DISTINCT(x), PERCENTILE_APPROX(v, 0.9, 100)",  # HLL goes with it
    ):
        window = _gpu_window(select)
        step = ph.placement(window, "holistic")
        assert (step.backend, step.reason) == ("cpu", SKETCHES_ON_CPU)
        assert ph.placement(window, "lift").backend == "gpu"  # SUM stays on the GPU
        assert window.holistic.gpu_form is None
    assert SKETCHES_ON_CPU.startswith("APPROX_PERCENTILE's GK summaries have no GPU kernels")


def test_gpu_plans_keep_hll_sketches_on_the_gpu():
    window = _gpu_window("APPROX_COUNT_DISTINCT(x), SUM(v)")
    assert ph.placement(window, "holistic").backend == "gpu"
    assert window.holistic.describe() == "sketch-panes"
    # beside raw values, the selection kernel's form and batch are planned as without HLL
    mixed = _gpu_window("APPROX_COUNT_DISTINCT(x), MEDIAN(v)")
    assert ph.placement(mixed, "holistic").backend == "gpu"
    assert mixed.holistic.strategy == "sorted-panes+sketch-panes"
    assert mixed.holistic.gpu_form == "warp-per-window"


def test_sketches_inside_spark_plan_the_two_stages():
    from mangonel.runtime.spark.planner import plan_spark, spark_stages_text

    query = cpu_session().sql(
        "SELECT k, APPROX_COUNT_DISTINCT(v) FROM s [RANGE 1 SECOND] GROUP BY k"
    )
    planned = plan_spark(query.text, query.plan, partitions=2)
    assert not planned.native and "APPROX_COUNT_DISTINCT" in planned.native_reason
    assert "holistic=sketch-panes on cpu at window close" in spark_stages_text(planned)


def test_panes_keep_sketches_not_values_and_are_freed():
    runner = LocalQuery(
        cpu_session()
        .sql(
            "SELECT k, APPROX_COUNT_DISTINCT(x), APPROX_PERCENTILE(x, 0.5, 100) FROM s "
            "[RANGE 10 MICROSECONDS SLIDE 5 MICROSECONDS] GROUP BY k"
        )
        .plan
    )
    rows = [{"ts": t, "k": t % 3, "x": t} for t in range(1000)]
    runner.process(batch_of(rows))
    operator = runner.window_operator
    assert all(not store for store in operator.panes.values())  # no raw values kept
    held = sum(len(store) for store in operator.sketches.panes.values())
    assert 0 < held <= 2 * 4  # per aggregate the panes of unfired windows only
    assert runner.metrics.state_bytes >= operator.sketches.nbytes > 0


def test_a_snapshot_with_other_sketches_is_refused():
    session = cpu_session()
    first = LocalQuery(
        session.sql(
            "SELECT k, APPROX_COUNT_DISTINCT(x) FROM s [RANGE 10 MICROSECONDS] GROUP BY k"
        ).plan
    )
    other = LocalQuery(
        session.sql(
            "SELECT k, APPROX_COUNT_DISTINCT(x, 0.01) FROM s [RANGE 10 MICROSECONDS] GROUP BY k"
        ).plan
    )
    with pytest.raises(DataError, match="snapshot does not match this query"):
        other.restore(first.snapshot())


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("APPROX_COUNT_DISTINCT(x, 0.5)", "rsd 0.5 is too large"),
        ("APPROX_COUNT_DISTINCT(x, 0)", "rsd must be positive"),
        ("APPROX_COUNT_DISTINCT(x, k)", "rsd must be a numeric literal"),
        ("APPROX_PERCENTILE(x, 1.5)", "percentage must lie between 0 and 1"),
        ("APPROX_PERCENTILE(x, 0.5, 0)", r"accuracy must be in \[1, 2147483647\]"),
        ("APPROX_PERCENTILE(x, 0.5, 2.5)", "accuracy must be an integer"),
        ("APPROX_PERCENTILE(x, ARRAY())", "array of percentages is empty"),
        ("APPROX_PERCENTILE(x, ARRAY(0.1, 2))", "percentage must lie between 0 and 1"),
        ("APPROX_PERCENTILE(ts, 0.5)", "APPROX_PERCENTILE"),
        ("APPROX_PERCENTILE(x, 0.5) WITHIN GROUP (ORDER BY x)", "does not take WITHIN GROUP"),
    ],
)
def test_bad_parameters_are_refused_with_a_clear_error(call, message):
    with pytest.raises((SqlError, PlanError), match=message):
        cpu_session().sql(f"SELECT {call} FROM s [RANGE 1 SECOND]")


@settings(max_examples=40, **SETTINGS)
@given(scenarios("time", hll_only=True))
def test_blocked_prefix_suffix_sets_answer_as_the_panes_do(scenario):
    """Windows of 3+ panes read two blocked prefix/suffix sets, not their panes; HLL's merge
    (a maximum) does not care how it is grouped, so the answers equal the pane-by-pane merge's
    exactly (disorder, late rows into answered blocks, snapshots included)."""
    from fuzzer import engine_run
    from oracle import first_difference

    from mangonel.runtime.operators import sketch_panes

    blocked, blocked_metrics = engine_run(scenario, "cpu")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sketch_panes, "BLOCKED_FROM", 10**9)
        direct, direct_metrics = engine_run(scenario, "cpu")
    for got, want in zip(blocked, direct, strict=True):
        assert first_difference(got, want) is None  # integers (the estimates) exactly
    assert blocked_metrics == direct_metrics
