"""Session windows (`[SESSION GAP g]`, Spark's `session_window`) on the CPU: hand-written
cases with exact rows, random streams against the oracle (in order, out of order, late rows,
NULL keys and values, snapshot/restore), the two SQL forms, errors and GPU-plan placement.

Times are microseconds; `window_start`/`window_end` come back as int microseconds here.
"""

from __future__ import annotations

import fake_gpu_backend
import numpy as np
import pyarrow as pa
import pytest
from fuzzer import check
from fuzzer import engine_rows as rows_of
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import rows_close
from plans import make_plan, oracle_for
from sqlglot import exp
from test_holistic import scenarios as holistic_scenarios
from test_window_properties import (
    AGGREGATES,
    COLUMNS,
    KEY_CHOICES,
    SETTINGS,
    STAMP,
    random_batches,
)

from mangonel.catalog.types import SqlType as T
from mangonel.compiler import physical as ph
from mangonel.compiler.explain import explain_text
from mangonel.compiler.logical import AggregateFunction as F
from mangonel.errors import SqlError
from mangonel.runtime.cpu import sessions
from mangonel.runtime.local.query import LocalQuery
from mangonel.runtime.operators import registry
from mangonel.session import Session

SIMPLE = [("ts", T.TIMESTAMP), ("k", T.BIGINT), ("v", T.DOUBLE)]


def batch(ts, k, v=None) -> pa.RecordBatch:
    v = v if v is not None else [1.0] * len(ts)
    return pa.RecordBatch.from_arrays(
        [pa.array(ts, pa.int64()).cast(STAMP), pa.array(k, pa.int64()), pa.array(v, pa.float64())],
        names=["ts", "k", "v"],
    )


def session_plan(gap: int, delay: int = 0, columns=SIMPLE, keys=("k",), aggregates=None, **kw):
    aggregates = aggregates or [(F.COUNT_STAR, None), (F.SUM, exp.column("v"))]
    return make_plan(
        columns, keys=keys, aggregates=aggregates, size=gap, delay=delay, kind="session", **kw
    )


def run_both(plan, batches, snapshot_at=None):
    """Engine and oracle rows after every batch and at end; metrics compared."""
    query, oracle = LocalQuery(plan), oracle_for(plan)
    got, want = [], []
    for position, b in enumerate(batches):
        if position == snapshot_at:
            saved = query.snapshot()
            query = LocalQuery(plan)
            query.restore(saved)
        got.append(rows_of(query.process(b)))
        want.append(oracle.process(b))
    got.append(rows_of(query.finish()))
    want.append(oracle.finish())
    for position, (g, w) in enumerate(zip(got, want, strict=True)):
        assert rows_close(g, w), f"firing {position}: engine {g} != oracle {w}"
    m = query.metrics
    assert (m.tuples_in, m.late_tuples_dropped, m.null_event_time_dropped, m.windows_fired) == (
        oracle.tuples_in,
        oracle.late,
        oracle.null_event_time,
        oracle.windows_fired,
    )
    return got, query


def r(start, end, n, total, k=1):
    return {"k": k, "window_start": start, "window_end": end, "a0": n, "a1": total}


def test_rows_closer_than_the_gap_form_one_session_per_key():
    got, _ = run_both(
        session_plan(10),
        [batch([0, 5, 14, 30, 3], [1, 1, 1, 1, 2], [1, 2, 3, 4, 5]), batch([100], [9])],
    )
    # [0,10) [5,15) [14,24) chain into [0, 24); 30 is its own session; key 2 apart
    assert got[0] == [r(0, 24, 3, 6.0), r(3, 13, 1, 5.0, k=2)]  # W = 30: both ended
    assert got[1] == [r(30, 40, 1, 4.0)]
    assert got[2] == [r(100, 110, 1, 1.0, k=9)]


def test_an_out_of_order_row_bridges_two_sessions():
    got, _ = run_both(
        session_plan(10, delay=50),
        [batch([0, 18], [1, 1], [1, 2]), batch([9], [1], [4]), batch([200], [2])],
    )
    # [0,10) and [18,28) are apart until 9 arrives: [9,19) touches both -> [0, 28)
    assert got[2] == [r(0, 28, 3, 7.0)]


def test_intervals_that_only_touch_merge_as_in_spark():
    # Spark 4.3's session_window makes rows at 0 s and 1 s with a 1 s gap one session [0, 2 s)
    # (found by probing against Spark: they were two sessions here, one inside Spark); one
    # microsecond more apart, two sessions
    got, _ = run_both(session_plan(10), [batch([0, 10, 31], [1, 1, 1], [1.0, 2.0, 4.0])])
    assert got[0] + got[1] == [r(0, 20, 2, 3.0), r(31, 41, 1, 4.0)]
    got, _ = run_both(session_plan(10), [batch([0], [1]), batch([10, 31], [1, 1], [2.0, 4.0])])
    assert got[1] + got[2] == [r(0, 20, 2, 3.0), r(31, 41, 1, 4.0)]


def test_a_row_whose_own_interval_ended_at_the_watermark_is_late():
    # Spark's rule (checked against Spark 4 on these rows): W = 100 after batch 1; in batch 2
    # 85 (85 + 10 <= 100) is late although 93 of the same batch would reach past W
    got, query = run_both(
        session_plan(10),
        [batch([100], [1]), batch([85, 93, 87, 89, 98], [2, 2, 3, 3, 4]), batch([300], [5])],
    )
    assert query.metrics.late_tuples_dropped == 3
    assert got[2] == [r(93, 103, 1, 1.0, k=2), r(98, 108, 1, 1.0, k=4), r(100, 110, 1, 1.0)]


def test_a_row_overlapping_an_emitted_session_opens_a_new_one():
    # [0, 10) fires at W = 12; 5 arrives with 5 + 10 > 12: not late, and the emitted session
    # is final, so it opens [5, 15) (as Spark, whose state no longer holds [0, 10))
    got, _ = run_both(session_plan(10), [batch([0], [1]), batch([12], [2]), batch([5], [1])])
    assert got[1] == [r(0, 10, 1, 1.0)]
    assert got[-1] == [r(5, 15, 1, 1.0), r(12, 22, 1, 1.0, k=2)]


def test_null_keys_form_their_own_sessions_and_null_times_are_counted():
    b = pa.RecordBatch.from_arrays(
        [
            pa.array([0, 4, None, 6], pa.int64()).cast(STAMP),
            pa.array([None, None, 1, 1], pa.int64()),
            pa.array([1.0, None, 2.0, 3.0]),
        ],
        names=["ts", "k", "v"],
    )
    got, query = run_both(session_plan(5), [b])
    assert got[-1] == [r(0, 9, 2, 1.0, k=None), r(6, 11, 1, 3.0)]
    assert query.metrics.null_event_time_dropped == 1


def test_fired_sessions_free_their_state():
    plan = session_plan(10)
    query = LocalQuery(plan)
    query.process(batch(list(range(0, 1000, 20)), list(range(50))))
    operator = query.window_operator
    assert operator.open_sessions == 1  # every session but the last (ts 980) has ended
    query.process(batch([5000], [1]))
    assert operator.open_sessions == 1  # 980's fired; 5000's is open


@st.composite
def session_streams(draw):
    gap = draw(st.integers(1, 30))
    delay = draw(st.one_of(st.integers(0, 3 * gap), st.just(0)))
    disorder = draw(st.sampled_from([0, 0, 5, 40]))  # in order, a little, a lot (late rows)
    spacing = draw(st.integers(0, 12))
    keys, batches = random_batches(draw, spacing, disorder, (4, 200), 100, outlier=False)
    plan = make_plan(
        COLUMNS,
        keys=KEY_CHOICES[keys],
        kind="session",
        size=gap,
        delay=delay,
        aggregates=AGGREGATES,
        where=exp.column("ok") if draw(st.booleans()) else None,
    )
    snapshot_at = draw(st.one_of(st.none(), st.integers(0, len(batches))))
    return plan, batches, snapshot_at


@settings(max_examples=200, **SETTINGS)
@given(session_streams())
def test_random_streams_equal_the_oracle(case):
    plan, batches, snapshot_at = case
    run_both(plan, batches, snapshot_at)


# -- SQL forms, errors, placement ----------------------------------------------------------

DDL = (
    "CREATE STREAM s (ts TIMESTAMP, k BIGINT, v DOUBLE) "
    "WITH (event_time = 'ts', watermark = '2 seconds')"
)


@pytest.fixture
def session() -> Session:
    s = Session(backend="cpu")
    s.execute(DDL)
    return s


def plan_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("==")]


def test_spark_session_window_plans_as_the_cql_clause(session):
    cql = session.sql(
        "SELECT window_start AS start, window_end AS end, k, SUM(v) AS total "
        "FROM s [SESSION GAP 30 SECONDS] WHERE v > 0 GROUP BY k"
    )
    spark = session.sql(
        "SELECT session_window.start, session_window.end, k, SUM(v) AS total "
        "FROM s WHERE v > 0 GROUP BY session_window(ts, '30 seconds'), k"
    )
    assert spark.plan == cql.plan
    flink = session.sql(
        "SELECT window_start AS start, window_end AS end, k, SUM(v) AS total "
        "FROM TABLE(SESSION(TABLE s PARTITION BY k, DESCRIPTOR(ts), INTERVAL '30' SECOND)) "
        "WHERE v > 0 GROUP BY window_start, window_end, k"
    )
    assert flink.plan == cql.plan
    assert spark.schema.names == ["start", "end", "k", "total"]
    text = cql.explain()
    assert "window=session gap=30s watermark=2s" in text and "strategy=session-merge" in text
    batches = [batch([0, 20_000_000, 100_000_000], [1, 1, 2], [1.0, 2.0, 5.0])]
    assert spark.run(batches).to_pylist() == cql.run(batches).to_pylist()


def test_the_query_watermark_overrides_the_streams(session):
    query = session.sql(
        "SELECT k, COUNT(*) FROM s [SESSION GAP 1 SECOND WATERMARK 0 SECONDS] GROUP BY k"
    )
    assert ph.find(query.plan, ph.WindowAggregateExec).window.watermark_delay_us == 0


@pytest.mark.parametrize(
    "query, message",
    [
        ("SELECT COUNT(*) FROM s [SESSION 1 SECOND]", "expected GAP after SESSION"),
        ("SELECT COUNT(*) FROM s [SESSION GAP 1 SECOND SLIDE 1 SECOND]", "has no SLIDE"),
        ("SELECT COUNT(*) FROM s [SESSION GAP 0 SECONDS]", "SESSION GAP must be positive"),
        (
            "SELECT COUNT(*) FROM s GROUP BY session_window(v, '1 second')",
            "runs over the stream's event time 'ts'",
        ),
        ("SELECT COUNT(*) FROM s GROUP BY session_window(ts, v)", "a duration string"),
        ("SELECT COUNT(*) FROM s GROUP BY session_window(ts, '1 parsec')", "malformed session gap"),
        (
            "SELECT COUNT(*) FROM s [RANGE 1 SECOND] GROUP BY session_window(ts, '1 second')",
            "a query has one window",
        ),
        (
            "SELECT session_window.middle, COUNT(*) FROM s GROUP BY session_window(ts, '1 second')",
            "no field 'middle'",
        ),
        ("SELECT session_window.start, COUNT(*) FROM s [RANGE 1 SECOND]", "goes in GROUP BY"),
        (
            "SELECT session_window.start < session_window, COUNT(*) FROM s "
            "GROUP BY session_window(ts, '1 second')",
            "the session_window struct is output as a column as it is",
        ),
        (
            "SELECT COUNT(*) FROM TABLE(SESSION(TABLE s PARTITION BY k, DESCRIPTOR(v), "
            "INTERVAL '1' SECOND)) GROUP BY window_start, window_end, k",
            "must name the stream's event time",
        ),
        (
            "SELECT COUNT(*) FROM TABLE(SESSION(TABLE s PARTITION BY k, DESCRIPTOR(ts), "
            "INTERVAL '1' SECOND)) GROUP BY window_start, window_end",
            "must be its PARTITION BY columns",
        ),
        (
            "SELECT COUNT(*) FROM TABLE(SESSION(TABLE s PARTITION BY k, DESCRIPTOR(ts), "
            "INTERVAL '1' SECOND)) GROUP BY k",
            "groups by window_start and window_end",
        ),
        (
            "SELECT COUNT(*) FROM TABLE(SESSION(TABLE s PARTITION BY k DESCRIPTOR(ts), "
            "INTERVAL '1' SECOND)) GROUP BY window_start, window_end, k",
            "expected ',' before DESCRIPTOR",
        ),
    ],
)
def test_malformed_session_windows_are_positioned_errors(session, query, message):
    with pytest.raises(SqlError, match=message) as error:
        session.sql(query)
    assert error.value.line == 1 and error.value.column is not None


@settings(max_examples=100, **SETTINGS)
@given(holistic_scenarios("session"))
def test_holistic_aggregates_over_sessions_equal_the_oracle(scenario):
    """MEDIAN, percentiles, COUNT(DISTINCT) beside incremental aggregates: values follow
    their sessions through merges, snapshots and firings."""
    failure = check(scenario, "cpu")
    assert failure is None, f"{failure}\n{scenario.query}"


def test_holistic_values_merge_with_their_sessions_and_are_freed(session):
    query = session.sql(
        "SELECT k, window_start, MEDIAN(v) AS m, COUNT(DISTINCT v) AS d, "
        "APPROX_COUNT_DISTINCT(v) AS a FROM s [SESSION GAP 10 MICROSECONDS "
        "WATERMARK 50 MICROSECONDS] GROUP BY k"
    )
    assert "holistic=session-runs" in query.explain()
    runner = LocalQuery(query.plan)
    # [0,10) and [18,28) open; 9 bridges them: one session of 1, 4, 7
    assert runner.process(batch([0, 18], [1, 1], [1.0, 7.0])) == []
    assert runner.process(batch([9], [1], [4.0])) == []
    rows = rows_of(runner.process(batch([200], [2], [0.0])))  # W = 150
    assert rows == [{"k": 1, "window_start": 0, "m": 4.0, "d": 3, "a": 3}]
    operator = runner.window_operator
    assert len(operator.values["session"]) == 1  # only the open session's value is kept


def test_gpu_plans_form_sessions_on_the_gpu_and_finalize_on_the_host(monkeypatch):
    monkeypatch.setitem(registry.BACKEND_MODULES, "gpu", "fake_gpu_backend")
    fake_gpu_backend.LIFTS.clear()
    fake_gpu_backend.SESSION_CALLS.clear()
    plan = ph.with_backend(session_plan(10), "gpu", "test")
    window = ph.find(plan, ph.WindowAggregateExec)
    assert {p.step: p.backend for p in window.placements} == {
        "lift": "gpu",
        "session": "gpu",
        "finalize": "cpu",
    }
    text = explain_text(plan)
    assert "! finalize runs on cpu because the window values are finalized on the host" in text
    assert "! session runs" not in text and "! lift runs" not in text
    query = LocalQuery(plan)
    rows = rows_of(query.process(batch([0, 5, 40], [1, 1, 1])))
    assert rows == [r(0, 15, 2, 2.0)]
    assert fake_gpu_backend.LIFTS == [3]  # the lift ran on the (stand-in) GPU kernels
    # the batch's rows formed and combined there; no open session to merge with yet
    assert fake_gpu_backend.SESSION_CALLS == ["batch", "combine"]
    rows = rows_of(query.process(batch([45, 70], [1, 1], [2.0, 3.0])))
    assert rows == [r(40, 55, 2, 3.0)]  # [40, 50) open, joined by 45
    # then the batch's sessions with the touched key's open one
    assert fake_gpu_backend.SESSION_CALLS[2:] == ["batch", "combine", "assign", "combine"]


def test_gpu_plans_keep_holistic_sessions_on_the_cpu_and_say_why(monkeypatch):
    monkeypatch.setitem(registry.BACKEND_MODULES, "gpu", "fake_gpu_backend")
    fake_gpu_backend.LIFTS.clear()
    plan = ph.with_backend(
        session_plan(10, aggregates=[(F.COUNT_STAR, None), (F.MEDIAN, exp.column("v"))]),
        "gpu",
        "test",
    )
    window = ph.find(plan, ph.WindowAggregateExec)
    assert {p.step: p.backend for p in window.placements} == dict.fromkeys(
        ("lift", "session", "finalize", "holistic"), "cpu"
    )
    assert "! session runs on cpu because session windows with holistic aggregates run on " in (
        explain_text(plan)
    )
    rows = rows_of(LocalQuery(plan).process(batch([0, 5, 40], [1, 1, 1], [1.0, 3.0, 9.0])))
    assert rows == [{"k": 1, "window_start": 0, "window_end": 15, "a0": 2, "a1": 2.0}]
    assert fake_gpu_backend.LIFTS == []  # the lift ran on the CPU's kernels


@pytest.mark.parametrize("disorder", [0, 3, 10_000])  # in order, nearly, shuffled (fallback)
def test_session_assignment_kernel_equals_a_plain_merge(disorder):
    rng = np.random.default_rng(disorder)
    n, keys, gap = 5000, 7, 4
    slots = rng.integers(0, keys, n)
    starts = np.arange(n) + rng.integers(0, disorder + 1, n)
    order = sessions._by_slot(slots, keys)
    in_place = sessions._sort_runs_by_start(order, slots, starts, sessions.MOVES_PER_ROW * n)
    assert in_place == (disorder < 10_000)  # the shuffled stream takes the general sort
    numbers, first, ends = sessions.assign_sessions(slots, starts, starts + gap, keys)
    expected = {}  # (slot, session start) -> (end, rows), merged the plain way
    for slot in range(keys):
        current = None
        for start in sorted(starts[slots == slot]):
            if current is not None and start <= current[1]:  # touching merges, as in Spark
                current[1], current[2] = max(current[1], start + gap), current[2] + 1
            else:
                current = [start, start + gap, 1]
                expected[(slot, start)] = current
    got = {
        (int(slots[f]), int(starts[f])): [int(starts[f]), int(e), int((numbers == s).sum())]
        for s, (f, e) in enumerate(zip(first, ends, strict=True))
    }
    assert got == {k: list(map(int, v)) for k, v in expected.items()}


def test_python_window_functions_run_over_sessions(session):
    def spread(values):
        return values[-1] - values[0]  # sorted ascending: max - min

    session.register_window_function("spread", spread, returns="DOUBLE")
    query = session.sql(
        "SELECT k, window_start, spread(v) AS s FROM s [SESSION GAP 10 MICROSECONDS] GROUP BY k"
    )
    rows = rows_of(
        query.run([batch([0, 5, 12, 40], [1, 1, 1, 1], [3.0, 9.0, 1.0, 2.0])]).to_batches()
    )
    assert rows == [{"k": 1, "window_start": 0, "s": 8.0}, {"k": 1, "window_start": 40, "s": 0.0}]


def test_explain_codegen_of_a_gpu_session_plan_lists_its_session_kernels():
    from mangonel.compiler import codegen

    text = codegen.explain_codegen(ph.with_backend(session_plan(10), "gpu", "test"))
    assert "// window tree: none (session windows" in text
    session_kernels = codegen.render_session_kernels()
    assert f"// module sha256: {session_kernels.digest}" in text
    assert all(name in text for name in session_kernels.names.values())
    holistic = session_plan(10, aggregates=[(F.COUNT_STAR, None), (F.MEDIAN, exp.column("v"))])
    # every step on the cpu: no session kernels to show
    assert session_kernels.digest not in codegen.explain_codegen(
        ph.with_backend(holistic, "gpu", "test")
    )
