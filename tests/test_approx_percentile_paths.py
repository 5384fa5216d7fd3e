"""APPROX_PERCENTILE's two paths (`compiler.holistic.percentile_paths`): exact selection over
the panes' sorted raw values (PERCENTILE_DISC's answer, rank error 0) or the GK sketch per
pane. The planner's rule and the forcing option, EXPLAIN's reasons, the exact path's answers
(equal to PERCENTILE_DISC's: the value Spark's percentile_approx returns on data its summary
keeps whole, checked against Spark in tests/spark/test_spark_holistic.py), its state, the
GPU placement and snapshots across paths. The oracle runs of both paths are
tests/test_sketch_sql.py's (their scenarios draw the path)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from fuzzer import check
from holistic_stream import DDL, SCHEMA, batch_of
from test_holistic import grouped_scenario

import mangonel
from mangonel.compiler import physical as ph
from mangonel.compiler.holistic import EXACT_FROM_ACCURACY
from mangonel.errors import DataError, PlanError
from mangonel.runtime.local.query import LocalQuery

SLIDING = "[RANGE 1 SECOND SLIDE 10 MILLISECONDS]"


def _session(path: str | None = None) -> mangonel.Session:
    session = mangonel.Session(backend="cpu", approx_percentile=path)
    session.execute(DDL.format(delay=20))
    return session


def _window(select: str, window: str = SLIDING, path: str | None = None):
    plan = _session(path).sql(f"SELECT k, {select} FROM s {window} GROUP BY k").plan
    return ph.find(plan, ph.WindowAggregateExec)


@pytest.mark.parametrize(
    ("call", "window", "exact", "reason"),
    [
        ("APPROX_PERCENTILE(v, 0.5)", SLIDING, True, "accuracy 10000 >= 1000: "),
        (f"APPROX_PERCENTILE(v, 0.5, {EXACT_FROM_ACCURACY})", SLIDING, True, "accuracy 1000 >="),
        ("APPROX_PERCENTILE(v, 0.5, 999)", SLIDING, False, "accuracy 999 < 1000: "),
        ("PERCENTILE_APPROX(v, 0.5, 10)", "[ROWS 5]", True, "count windows keep every tuple"),
        ("APPROX_PERCENTILE(v, 0.5, 10)", "[SESSION GAP 5 MICROSECONDS]", True, "session windows"),
        ("APPROX_PERCENTILE(v, 0.5, 10), MEDIAN(v)", SLIDING, True, "kept anyway for MEDIAN"),
        # another APPROX_PERCENTILE answered exactly keeps them too
        (
            "APPROX_PERCENTILE(v, 0.5, 10), APPROX_PERCENTILE(v, 0.9)",
            SLIDING,
            True,
            "kept anyway for APPROX_PERCENTILE",
        ),
        # APPROX_COUNT_DISTINCT over the same argument keeps registers, not values
        ("APPROX_PERCENTILE(v, 0.5, 10), APPROX_COUNT_DISTINCT(v)", SLIDING, False, "< 1000"),
    ],
)
def test_the_planner_rule_chooses_a_path_and_says_why(call, window, exact, reason):
    node = _window(call, window)
    first = node.aggregates[0]
    assert first.exact is exact
    assert first.evaluation == ("percentile_disc" if exact else "approx_percentile")
    position, why = node.holistic.percentile_reasons[0]
    assert position == 0 and reason in why
    path = "exact" if exact else "sketch"
    explained = _session().sql(f"SELECT k, {call} FROM s {window} GROUP BY k").explain()
    assert f": {path} because " in explained and reason in explained
    if exact and window == SLIDING:
        assert "sorted-panes" in node.holistic.strategy.split("+")


@pytest.mark.parametrize("path", ["exact", "sketch"])
def test_the_option_forces_either_path_everywhere(path):
    for window in (SLIDING, "[ROWS 5]", "[RANGE 10 MILLISECONDS]"):
        node = _window("APPROX_PERCENTILE(v, 0.5, 10), MEDIAN(v)", window, path)
        assert node.aggregates[0].exact is (path == "exact")
        assert node.holistic.percentile_reasons == ((0, f"the approx_percentile='{path}' option"),)
    sketched = _window("APPROX_PERCENTILE(v, 0.5)", SLIDING, path)
    strategy = "sorted-panes" if path == "exact" else "sketch-panes"
    assert sketched.holistic.strategy == strategy
    assert sketched.holistic.sketches == (() if path == "exact" else ("GK(accuracy=10000)",))


def test_a_bad_option_is_refused_with_the_choices():
    with pytest.raises(PlanError, match="unknown approx_percentile path 'fast'") as raised:
        mangonel.Session(backend="cpu", approx_percentile="fast")
    assert "'auto', 'exact', 'sketch'" in str(raised.value.hint)


def _rows(seed: int, count: int = 600) -> list[dict]:
    """Out of order within the watermark delay (20 us), ties, NULLs, a key of only NULLs."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(count):
        key = int(rng.integers(0, 4))
        rows.append(
            {
                "ts": i // 3 + int(rng.integers(0, 15)),
                "k": key,
                "x": None if key == 3 or rng.random() < 0.1 else int(rng.integers(-40, 40)),
                "n": int(rng.integers(-5, 5)),
                "v": None if key == 3 else float(rng.integers(-30, 30)) / 4,
            }
        )
    return rows


def _run(session: mangonel.Session, query: str, rows: list[dict], cuts: int = 3) -> list[dict]:
    """Every result row over `rows` in `cuts` batches, a snapshot and restore between them."""
    plan = session.sql(query).plan
    runner = LocalQuery(plan)
    out = []
    size = len(rows) // cuts + 1
    for start in range(0, len(rows), size):
        out += runner.process(batch_of(rows[start : start + size]))
        saved = runner.snapshot()
        runner = LocalQuery(plan)
        runner.restore(saved)
    out += runner.finish()
    return pa.Table.from_batches(out, schema=out[0].schema).to_pylist()


@pytest.mark.parametrize(
    "window",
    [
        "[RANGE 40 MICROSECONDS SLIDE 10 MICROSECONDS]",
        "[RANGE 30 MICROSECONDS]",
        "[ROWS 25 SLIDE 10]",
        "[SESSION GAP 2 MICROSECONDS]",
    ],
)
def test_the_exact_path_answers_percentile_disc(window):
    """On every window kind, with disorder, ties, NULLs, an all-NULL key, p = 0 and 1, an
    ARRAY of p, and snapshots between batches: APPROX_PERCENTILE's exact answers are
    PERCENTILE_DISC's, of the argument's type (BIGINT, INT, DOUBLE)."""
    calls = []
    for column in ("x", "n", "v"):
        for i, p in enumerate((0.0, 0.3, 0.5, 1.0)):
            calls.append(
                f"APPROX_PERCENTILE({column}, {p}) AS a_{column}{i}, "
                f"PERCENTILE_DISC({p}) WITHIN GROUP (ORDER BY {column}) AS d_{column}{i}"
            )
    calls.append("APPROX_PERCENTILE(v, ARRAY(0.1, 0.9)) AS a_arr")
    calls.append("PERCENTILE_DISC(ARRAY(0.1, 0.9)) WITHIN GROUP (ORDER BY v) AS d_arr")
    query = f"SELECT k, window_start, {', '.join(calls)} FROM s {window} GROUP BY k"
    session = _session()
    node = ph.find(session.sql(query).plan, ph.WindowAggregateExec)
    assert all(a.exact for a in node.aggregates if a.function.value == "APPROX_PERCENTILE")
    assert node.holistic.sketches == ()
    got = _run(session, query, _rows(seed=len(window)))
    assert len(got) > 20
    assert any(row["a_v0"] is None for row in got)  # the all-NULL key
    for row in got:
        for column in ("x", "n", "v"):
            for i in range(4):
                assert row[f"a_{column}{i}"] == row[f"d_{column}{i}"], (row, column, i)
        assert row["a_arr"] == row["d_arr"]
    types = session.sql(query).schema
    assert [types.field(f"a_{c}0").type for c in "xnv"] == [pa.int64(), pa.int32(), pa.float64()]


def test_bigint_answers_round_through_a_double_on_both_paths():
    """Spark's percentile_approx keeps doubles: a BIGINT beyond 2^53 comes back rounded
    through the double on the exact path as on the sketch path."""
    big = 2**62 + 1
    rows = [{"ts": t, "x": big + t} for t in range(5)]
    query = "SELECT APPROX_PERCENTILE(x, 1) AS a FROM s [RANGE 10 MICROSECONDS]"
    answers = {}
    for path in ("exact", "sketch"):
        answers[path] = _run(_session(path), query, rows, cuts=1)[0]["a"]
    assert answers["exact"] == answers["sketch"] == int(float(big + 4))


def test_the_exact_path_keeps_raw_values_and_no_summary():
    query = (
        "SELECT k, APPROX_PERCENTILE(x, 0.5) AS a FROM s "
        "[RANGE 10 MICROSECONDS SLIDE 5 MICROSECONDS] GROUP BY k"
    )
    runner = LocalQuery(_session().sql(query).plan)
    runner.process(batch_of([{"ts": t, "k": t % 3, "x": t} for t in range(1000)]))
    operator = runner.window_operator
    assert not operator.sketches.plans and operator.sketches.nbytes == 0
    # only the panes of windows still open (watermark 20 us behind the last of 1000 us)
    assert 0 < sum(len(store) for store in operator.panes.values()) <= 8


def test_a_snapshot_of_one_path_is_refused_by_the_other():
    query = "SELECT k, APPROX_PERCENTILE(x, 0.5) AS a FROM s [RANGE 10 MICROSECONDS] GROUP BY k"
    rows = [{"ts": t, "k": 0, "x": t} for t in range(5)]
    exact = LocalQuery(_session("exact").sql(query).plan)
    exact.process(batch_of(rows))
    sketch = LocalQuery(_session("sketch").sql(query).plan)
    with pytest.raises(DataError, match="snapshot does not match this query") as raised:
        sketch.restore(exact.snapshot())
    assert "plan the query with the approx_percentile= option" in str(raised.value)
    sketch.process(batch_of(rows))
    with pytest.raises(DataError, match="snapshot does not match this query"):
        LocalQuery(_session("exact").sql(query).plan).restore(sketch.snapshot())


def test_gpu_plans_select_an_exact_percentile_on_the_gpu():
    """The exact path is PERCENTILE_DISC's selection: a GPU plan keeps the holistic step on
    the GPU (the sketch path keeps it on the CPU), and EXPLAIN CODEGEN renders that kernel."""
    query = _session().sql(
        f"SELECT k, APPROX_PERCENTILE(v, 0.5), SUM(v) FROM s {SLIDING} GROUP BY k"
    )
    gpu = ph.with_backend(query.plan, "gpu", "test")
    window = ph.find(gpu, ph.WindowAggregateExec)
    assert ph.placement(window, "holistic").backend == "gpu"
    assert window.holistic.describe().startswith("sorted-panes(warp-per-window, ")
    from mangonel.compiler.codegen import explain_codegen

    assert "mangonel GPU holistic kernel (percentile_disc, warp-per-window" in explain_codegen(gpu)
    sketched = ph.find(
        ph.with_backend(_session("sketch").sql(query.text).plan, "gpu", "test"),
        ph.WindowAggregateExec,
    )
    assert ph.placement(sketched, "holistic").backend == "cpu"


def test_large_windows_of_the_exact_path_equal_a_numpy_selection():
    """Panes of many values per key (several batches, so panes grow by chunks and are sorted
    once they are read): each answer is the window's sorted[ceil(p n) - 1]."""
    rng = np.random.default_rng(5)
    rows = 40_000
    ts = np.sort(rng.integers(0, 4000, rows))
    keys = rng.integers(0, 2, rows)
    v = rng.lognormal(size=rows)
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array(ts, pa.timestamp("us")),
            pa.array(keys),
            pa.array(np.zeros(rows, np.int64)),
            pa.array(np.zeros(rows, np.int32)),
            pa.array(v),
        ],
        schema=SCHEMA,
    )
    query = (
        "SELECT k, window_start, APPROX_PERCENTILE(v, ARRAY(0.01, 0.5, 0.99)) AS a FROM s "
        "[RANGE 1000 MICROSECONDS SLIDE 250 MICROSECONDS] GROUP BY k"
    )
    runner = LocalQuery(_session().sql(query).plan)
    out = []
    for part in range(4):
        out += runner.process(batch.slice(part * 10_000, 10_000))
    got = pa.Table.from_batches(out + runner.finish()).to_pylist()
    assert len(got) > 20
    for row in got:
        start = int(pa.scalar(row["window_start"], pa.timestamp("us")).cast(pa.int64()).as_py())
        values = np.sort(v[(ts >= start) & (ts < start + 1000) & (keys == row["k"])])
        n = len(values)
        want = [values[max(int(np.ceil(p * n)) - 1, 0)] for p in (0.01, 0.5, 0.99)]
        assert row["a"] == want


# -- the exact path over the GPU kernels' code (g++ over the CUDA shim, no GPU) ----------------

# the fixtures: CPU plans whose holistic step runs the GPU kernels' code over the shim
from test_holistic_kernels import gpu_path_on_the_host, host_module  # noqa: E402, F401

EXACT_CALLS = [
    ("approx_percentile:0.5:10000", "APPROX_PERCENTILE(x, 0.5)", ["col", "x"]),
    ("approx_percentile:0.0:10000", "PERCENTILE_APPROX(v, 0)", ["col", "v"]),
    ("approx_percentile:1.0:1000", "APPROX_PERCENTILE(n, 1, 1000)", ["col", "n"]),
    ("approx_percentile:0.9:5000", "APPROX_PERCENTILE(v, 0.9, 5000)", ["col", "v"]),
    ("percentile_disc:0.9", "PERCENTILE_DISC(0.9) WITHIN GROUP (ORDER BY v)", ["col", "v"]),
]


def test_the_exact_path_over_the_gpu_kernels_matches_the_oracle(gpu_path_on_the_host):  # noqa: F811
    """The holistic step of a GPU plan selects exact APPROX_PERCENTILEs with the device's
    sort, runs and PERCENTILE_DISC selection kernel: here that code over the host shim, in
    each selection form, sliding over 10 panes with disorder, NULLs and a snapshot."""
    rows = _rows(seed=9, count=400)
    batches = [rows[:120], rows[120:260], rows[260:]]
    scenario = grouped_scenario("time", 40, 4, 20, EXACT_CALLS, batches, (2,))
    session = _session()
    node = ph.find(session.sql(scenario.query).plan, ph.WindowAggregateExec)
    assert all(a.exact for a in node.aggregates[:4]) and node.holistic.sketches == ()
    failure = check(scenario, "cpu")
    assert failure is None, str(failure)
    got = _run(session, scenario.query, rows)
    assert all(row["a3"] == row["a4"] for row in got)  # the same selection, the same value
