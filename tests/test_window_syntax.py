"""Spark's `GROUP BY window(..)` and Flink's `TABLE(TUMBLE | HOP | CUMULATE (..))`: the same
plan as the CQL clause (EXPLAIN equal), the same results on the fuzzer's cases, CUMULATE
against the oracle, and the errors of their arguments at their positions (the messages
themselves: tests/golden/errors.sql, `spark_*`, `flink_*`)."""

from __future__ import annotations

import math
from dataclasses import replace

import pyarrow as pa
import pytest
from fuzz_cases import HOLISTIC_FUNCTIONS, STREAM, Case, draw_case
from fuzzer import Scenario, arrow_batch, check, engine_rows, engine_run
from oracle import Oracle, OracleQuery
from sql_positions import line_and_column
from test_explain_golden import GOLDEN
from test_explain_golden import session as golden_session
from test_project_operators import host_gpu_evaluator  # noqa: F401 - the fixture

import mangonel
from mangonel.errors import PlanError, SqlError
from mangonel.runtime.local.query import LocalQuery

# (the form, the CQL query it must plan exactly as)
SAME_PLANS = {
    "spark_sliding": (
        "SELECT window.start, window.end, symbol, SUM(volume) FROM trades "
        "GROUP BY window(ts, '1 second', '10 milliseconds'), symbol",
        "SELECT window_start AS start, window_end AS end, symbol, SUM(volume) "
        "FROM trades [RANGE 1 SECOND SLIDE 10 MILLISECONDS] GROUP BY symbol",
    ),
    "spark_tumbling_string": (
        "SELECT symbol, window.end AS closes, COUNT(*) AS n FROM trades "
        "GROUP BY symbol, window(ts, '1 minute')",
        "SELECT symbol, window_end AS closes, COUNT(*) AS n FROM trades [RANGE 1 MINUTE] "
        "GROUP BY symbol",
    ),
    "spark_interval_literals": (
        "SELECT window.start AS s, AVG(price) AS p FROM trades WHERE volume > 0 "
        "GROUP BY window(ts, INTERVAL 2 HOURS, INTERVAL '30' MINUTE) "
        "HAVING window.end > TIMESTAMP '2026-01-01 00:00:00' AND COUNT(*) > 2",
        "SELECT window_start AS s, AVG(price) AS p FROM trades [RANGE 2 HOURS SLIDE 30 MINUTES] "
        "WHERE volume > 0 HAVING window_end > TIMESTAMP '2026-01-01 00:00:00' AND COUNT(*) > 2",
    ),
    "spark_zero_start_time": (
        "SELECT COUNT(*) AS n FROM trades GROUP BY window(ts, '1 second', '1 second', '0 seconds')",
        "SELECT COUNT(*) AS n FROM trades [RANGE 1 SECOND]",
    ),
    "flink_tumble": (
        "SELECT window_start, window_end, symbol, SUM(volume) AS v "
        "FROM TABLE(TUMBLE(TABLE trades, DESCRIPTOR(ts), INTERVAL '1' SECOND)) "
        "GROUP BY window_start, window_end, symbol",
        "SELECT window_start, window_end, symbol, SUM(volume) AS v FROM trades [RANGE 1 SECOND] "
        "GROUP BY symbol",
    ),
    "flink_hop_slide_first": (
        "SELECT window_end, MAX(price) AS high FROM TABLE(HOP(TABLE trades, DESCRIPTOR(ts), "
        "INTERVAL '10' MILLISECOND, INTERVAL '1' SECOND)) GROUP BY window_start, window_end",
        "SELECT window_end, MAX(price) AS high FROM trades [RANGE 1 SECOND SLIDE 10 MILLISECONDS]",
    ),
    "flink_hop_named_and_alias": (
        "SELECT t.symbol, window_start, STDDEV(t.price) AS sd FROM TABLE(HOP(DATA => TABLE "
        "trades, TIMECOL => DESCRIPTOR(ts), SIZE => INTERVAL '1 minute', SLIDE => INTERVAL "
        "'15' SECOND)) AS t WHERE t.price > 1 GROUP BY window_end, t.symbol, window_start "
        "HAVING COUNT(*) > 1",
        "SELECT t.symbol, window_start, STDDEV(t.price) AS sd FROM trades "
        "[RANGE 1 MINUTE SLIDE 15 SECONDS] AS t WHERE t.price > 1 GROUP BY t.symbol "
        "HAVING COUNT(*) > 1",
    ),
    "flink_tumble_holistic": (
        "SELECT window_start, MEDIAN(price) AS m FROM TABLE(TUMBLE(TABLE trades, "
        "DESCRIPTOR(ts), INTERVAL '5' SECOND)) GROUP BY window_start, window_end",
        "SELECT window_start, MEDIAN(price) AS m FROM trades [RANGE 5 SECONDS]",
    ),
}


@pytest.mark.parametrize("name", sorted(SAME_PLANS))
def test_every_form_plans_as_the_window_clause(name: str) -> None:
    form, cql = SAME_PLANS[name]
    session = golden_session()
    assert session.sql(form).explain() == session.sql(cql).explain()
    assert session.sql(form).explain(format="json") == session.sql(cql).explain(format="json")


def test_cumulate_named_and_positional_plan_alike() -> None:
    session = golden_session()
    positional = session.sql(
        "SELECT window_end, SUM(volume) FROM TABLE(CUMULATE(TABLE trades, DESCRIPTOR(ts), "
        "INTERVAL '1' MINUTE, INTERVAL '1' HOUR)) GROUP BY window_start, window_end"
    )
    named = session.sql(
        "SELECT window_end, SUM(volume) FROM TABLE(CUMULATE(DATA => TABLE trades, "
        "TIMECOL => DESCRIPTOR(ts), SIZE => INTERVAL '1' HOUR, STEP => INTERVAL '1' MINUTE)) "
        "GROUP BY window_start, window_end"
    )
    assert positional.explain() == named.explain()
    assert "window=cumulate range=1h slide=1min" in named.explain()


# -- results: the fuzzer's cases through every form --------------------------------------


def _bounds(case: Case, expression: str, form: str) -> str:
    # the fuzz expressions name the bounds window_start/window_end/window_time (`Case.sql`)
    if form == "spark":
        expression = expression.replace("window_start", "window.start")
        expression = expression.replace("window_end", "window.end")
        return expression.replace("window_time", "window_time(window)")
    return expression


def form_query(case: Case, form: str) -> str:
    """The case's query written in `form` ("spark", "flink"; "flink" for kind cumulate)."""
    select = ", ".join(f"{_bounds(case, case.sql(e), form)} AS {n}" for n, e in case.outputs)
    us = "MICROSECOND"
    if form == "spark":
        durations = [f"'{case.size} microseconds'"]
        if case.slide != case.size:
            durations.append(f"'{case.slide} microseconds'")
        source = STREAM
        group = [f"window(ts, {', '.join(durations)})", *case.keys]
    else:
        if case.kind == "cumulate":
            call = f"CUMULATE(TABLE {STREAM}, DESCRIPTOR(ts), INTERVAL '{case.slide}' {us}, "
            call += f"INTERVAL '{case.size}' {us})"
        elif case.slide == case.size:
            call = f"TUMBLE(TABLE {STREAM}, DESCRIPTOR(ts), INTERVAL '{case.size}' {us})"
        else:
            call = f"HOP(TABLE {STREAM}, DESCRIPTOR(ts), INTERVAL '{case.slide}' {us}, "
            call += f"INTERVAL '{case.size}' {us})"
        source = f"TABLE({call})"
        group = ["window_start", "window_end", *case.keys]
    text = f"SELECT {select} FROM {source}"
    if case.where is not None:
        text += f" WHERE {case.sql(case.where)}"
    text += " GROUP BY " + ", ".join(group)
    if case.having is not None:
        text += f" HAVING {_bounds(case, case.sql(case.having), form)}"
    return text


def _time_case(seed: int) -> Case | None:
    """The fuzz case of a seed with its watermark declared on the stream (neither form names
    one) and `window_time` output too, None for count windows."""
    case = draw_case(seed, large_share=0.0)
    if case.kind != "time":
        return None
    outputs = [*case.outputs, ("wt", ["bound", "time"])]
    return replace(case, declared_delay=case.delay, query_delay=None, outputs=outputs)


def _scenario(case: Case, query: str) -> Scenario:
    scenario = Scenario.from_case(case)
    scenario.query = query
    return scenario


@pytest.mark.parametrize("seed", range(40))
def test_fuzz_cases_in_every_form_equal_the_window_clause(seed: int) -> None:
    """Spark's and Flink's forms give exactly the CQL clause's rows and metrics after every
    batch (and the oracle's: `check`), on the fuzzer's time-window cases."""
    case = _time_case(seed)
    if case is None:
        pytest.skip("a count-window case: neither form has count windows")
    cql = engine_run(Scenario.from_case(case), "cpu")
    forms = ["spark"] + (["flink"] if case.size % case.slide == 0 else [])
    for form in forms:
        scenario = _scenario(case, form_query(case, form))
        # repr: NaN results compare equal to themselves
        assert repr(engine_run(scenario, "cpu")) == repr(cql), f"{form}: {scenario.query}"
        failure = check(scenario, "cpu")
        assert failure is None, f"{form} seed {seed}: {failure}\n{scenario.query}"


# -- CUMULATE against the oracle ----------------------------------------------------------

INCREMENTAL_ONLY = (*HOLISTIC_FUNCTIONS, "count_distinct", "approx", "python")


def cumulate_case(seed: int) -> Case | None:
    """A fuzz time case made CUMULATE: its pane is the step, max = step * n for the case's
    panes per window (at most 64); None when it has holistic aggregates (refused)."""
    case = _time_case(seed)
    if case is None or any(f.startswith(INCREMENTAL_ONLY) for f, _ in case.aggregates):
        return None
    step = math.gcd(case.size, case.slide)
    steps = min(case.size // step, 64)
    return replace(case, kind="cumulate", size=step * steps, slide=step)


@pytest.mark.parametrize("seed", range(60))
def test_cumulate_fuzz_cases_match_the_oracle(seed: int) -> None:
    case = cumulate_case(seed)
    if case is None:
        pytest.skip("a count-window case or holistic aggregates")
    scenario = _scenario(case, form_query(case, "flink"))
    failure = check(scenario, "cpu")
    assert failure is None, f"cumulate seed {seed}: {failure}\n{scenario.query}\n{case.describe()}"


def _timestamps(values: list[int]) -> pa.Array:
    return pa.array(values, pa.timestamp("us", tz="UTC"))


def test_cumulate_windows_by_hand() -> None:
    """Step 10 us, max 30 us; watermark delay 0. Windows [0,10) [0,20) [0,30) [30,40) ..."""
    session = mangonel.Session(backend="cpu")
    session.execute("CREATE STREAM s (ts TIMESTAMP, k BIGINT, v BIGINT) WITH (event_time = 'ts')")
    query = session.sql(
        "SELECT k, window_start, window_end, SUM(v) AS total, COUNT(*) AS n FROM TABLE(CUMULATE("
        "TABLE s, DESCRIPTOR(ts), INTERVAL '10' MICROSECOND, INTERVAL '30' MICROSECOND)) "
        "GROUP BY window_start, window_end, k"
    )
    first = pa.record_batch({"ts": _timestamps([5, 12]), "k": [1, 1], "v": [1, 2]})
    # 8 arrives after [0, 10) fired (W = 12): it counts in [0, 20) and [0, 30) only; 31
    # moves W to 31, which fires [0, 20) and [0, 30) (29 of key 2 counts in the latter)
    second = pa.record_batch({"ts": _timestamps([8, 31, 29]), "k": [1, 1, 2], "v": [4, 8, 16]})
    got = [
        (r["k"], r["window_start"], r["window_end"], r["total"], r["n"])
        for r in query.run([first, second])
        .cast(
            pa.schema(
                [
                    ("k", pa.int64()),
                    ("window_start", pa.int64()),
                    ("window_end", pa.int64()),
                    ("total", pa.int64()),
                    ("n", pa.int64()),
                ]
            )
        )
        .to_pylist()
    ]
    assert got == [
        (1, 0, 10, 1, 1),  # fired after the first batch
        (1, 0, 20, 1 + 2 + 4, 3),
        (1, 0, 30, 1 + 2 + 4, 3),
        (2, 0, 30, 16, 1),
        (1, 30, 40, 8, 1),  # at end of input, every window of the period that 31 is in
        (1, 30, 50, 8, 1),
        (1, 30, 60, 8, 1),
    ]


def test_cumulate_late_rows_are_those_of_a_fired_period() -> None:
    """A row is late once its whole period has fired, not when only its first windows have:
    engine and oracle count the same one."""
    session = mangonel.Session(backend="cpu")
    session.execute("CREATE STREAM s (ts TIMESTAMP, v BIGINT) WITH (event_time = 'ts')")
    query = session.sql(
        "SELECT window_end, COUNT(*) AS n FROM TABLE(CUMULATE(TABLE s, DESCRIPTOR(ts), "
        "INTERVAL '10' MICROSECOND, INTERVAL '30' MICROSECOND)) GROUP BY window_start, window_end"
    )
    rows = [
        [{"ts": 25, "v": 1}],
        # W = 25: [0, 10) and [0, 20) fired; 12 still counts in [0, 30)
        [{"ts": 12, "v": 1}, {"ts": 35, "v": 1}],
        # W = 35: the period [0, 30) fired whole; 29 is late
        [{"ts": 29, "v": 1}, {"ts": 31, "v": 1}],
    ]
    columns = {"ts": "timestamp", "v": "bigint"}
    oracle_query = OracleQuery(
        columns=columns,
        event_time="ts",
        kind="cumulate",
        size=30,
        slide=10,
        delay=0,
        aggregates=(("count_star", None),),
        outputs=(("window_end", ["bound", "end"]), ("n", ["agg", 0])),
    )
    oracle = Oracle(oracle_query)
    runner = LocalQuery(query.plan)
    for batch in rows:
        got = engine_rows(runner.process(arrow_batch(batch, columns)))
        assert got == oracle.process(batch)
    assert engine_rows(runner.finish()) == oracle.finish()
    assert runner.metrics.late_tuples_dropped == oracle.late == 1


# -- errors at their positions (the texts: tests/golden/errors.sql) -------------------------


@pytest.mark.parametrize(
    ("query", "at"),
    [
        ("SELECT COUNT(*) FROM trades GROUP BY window(ts, '1 parsec')", "'1 parsec'"),
        ("SELECT window(ts, '1 second') AS w, COUNT(*) FROM trades", "window(ts"),
        ("SELECT window.end, COUNT(*) FROM trades [RANGE 1 SECOND]", "window.end"),
        ("SELECT COUNT(*) FROM trades GROUP BY window(price, '1 second')", "price"),
        (
            "SELECT COUNT(*) FROM TABLE(HOP(TABLE trades, DESCRIPTOR(ts),\n"
            "  INTERVAL '400' MILLISECOND, INTERVAL '1' SECOND)) GROUP BY window_start, window_end",
            "INTERVAL '1' SECOND",
        ),
        (
            "SELECT COUNT(*) FROM TABLE(CUMULATE(TABLE trades, DESCRIPTOR(ts),\n"
            "  INTERVAL '3' SECOND, INTERVAL '10' SECOND)) GROUP BY window_start, window_end",
            "INTERVAL '10' SECOND",
        ),
        (
            "SELECT COUNT(*) FROM TABLE(TUMBLE(TABLE trades, DESCRIPTOR(ts), INTERVAL '1' "
            "SECOND)) GROUP BY window_start",
            "GROUP BY window_start",
        ),
        (
            "SELECT COUNT(*) FROM TABLE(TUMBLE(TABLE trades, DESCRIPTOR(ts), INTERVAL '0' "
            "SECOND)) GROUP BY window_start, window_end",
            "INTERVAL '0' SECOND",
        ),
        (
            "SELECT COUNT(*) FROM TABLE(TUMBLE(TABLE trades, DESCRIPTOR(ts),\n"
            "  INTERVAL '1' SECOND, STEP => INTERVAL '1' SECOND))\n"
            "GROUP BY window_start, window_end",
            "STEP =>",
        ),
    ],
)
def test_errors_point_at_their_argument(query: str, at: str) -> None:
    line, column = line_and_column(query, at)
    with pytest.raises(SqlError) as caught:
        golden_session().sql(query)
    assert (caught.value.line, caught.value.column) == (line, column), str(caught.value)


def test_cumulate_refuses_holistic_aggregates_at_planning_too() -> None:
    """The binder refuses them at their call; the planner's check covers plans built
    without the binder (a WindowSpec of kind CUMULATE with holistic aggregates)."""
    from mangonel.compiler.holistic import holistic_plan
    from mangonel.compiler.logical import WindowKind, WindowSpec

    session = golden_session()
    median = session.sql("SELECT MEDIAN(price) FROM trades [RANGE 1 MINUTE SLIDE 1 SECOND]")
    window = median.plan.children[0]
    spec = WindowSpec(WindowKind.CUMULATE, 60_000_000, 1_000_000, 0)
    with pytest.raises(PlanError, match="CUMULATE"):
        holistic_plan(spec, window.fields, window.aggregates)


def test_gpu_fused_kernel_decides_lateness_by_the_cumulate_period(tmp_path) -> None:
    """The fused lift-merge kernel bakes the lateness rule in: for CUMULATE a pane is late
    once its period (the max size) ended, not its first window (the step); the source
    compiles with nvcc where nvcc is on PATH."""
    import shutil
    import subprocess

    from mangonel.compiler import codegen
    from mangonel.compiler import physical as ph

    plan = golden_session().sql((GOLDEN / "cumulate.sql").read_text()).plan
    window = ph.find(ph.with_backend(plan, "gpu", "test"), ph.WindowAggregateExec)
    source = codegen.render_kernels(window.lift, window).source
    hour, minute = 3_600_000_000, 60_000_000
    assert f"mg_floor_div(pane * {minute}LL, {hour}LL)" in source
    assert f"* {hour}LL + {hour}LL;" in source
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not on PATH")
    (tmp_path / "cumulate.cu").write_text(source)
    subprocess.run(
        [nvcc, "--ptx", "-arch=sm_90", "-o", str(tmp_path / "cumulate.ptx"), "cumulate.cu"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )


def test_window_time_on_the_gpu_path_equals_the_cpu(host_gpu_evaluator) -> None:  # noqa: F811
    """`window_time` (window_end - 1 us) through the GPU Project/Filter kernels (run on the
    host through the g++ shim) equals the CPU evaluator; alone it is computed, not the
    window_end column passed through."""
    from sqlglot import exp
    from test_project_operators import (
        SCHEMA,
        WINDOW_END,
        differences,
        outputs_of,
        run_operators,
        window_results,
    )

    from mangonel.compiler import nodes
    from mangonel.compiler.codegen_project import is_bare_reference
    from mangonel.runtime.cpu.project import CpuProjectEvaluator

    window_time = nodes.WindowBound(this="time")
    assert not is_bare_reference(window_time)
    later = exp.GT(this=window_time.copy(), expression=nodes.WindowBound(this="start"))
    expressions = [window_time, later]
    outputs = outputs_of(expressions)
    batch = window_results(5, 120)
    got = run_operators(batch, later, outputs, host_gpu_evaluator)
    expected = run_operators(batch, later, outputs, CpuProjectEvaluator())
    assert differences(got, expected, expressions) == []
    ends = batch.column(SCHEMA.get_field_index(WINDOW_END)).cast(pa.int64()).to_pylist()
    computed = pa.concat_arrays([b.column(0) for b in expected]).cast(pa.int64()).to_pylist()
    kept = [e - 1 for e, keep in zip(ends, _later(batch), strict=True) if keep]
    assert computed == kept and kept


def _later(batch: pa.RecordBatch) -> list[bool]:
    from test_project_operators import SCHEMA, WINDOW_END, WINDOW_START

    starts = batch.column(SCHEMA.get_field_index(WINDOW_START)).cast(pa.int64()).to_pylist()
    ends = batch.column(SCHEMA.get_field_index(WINDOW_END)).cast(pa.int64()).to_pylist()
    return [end - 1 > start for start, end in zip(starts, ends, strict=True)]
