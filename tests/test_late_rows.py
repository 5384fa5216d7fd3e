"""Late rows as data (docs/semantics.md, "Late rows as data"): the rows the engine judges
late equal the oracle's late rows exactly (none lost, none invented, same columns, reason and
watermark, same order), batch after batch: random time and count windows (in order and out of
order, NULLs, WHERE, snapshot/restore), holistic time windows, random window joins (both
algorithms, outer joins, per-stream delays) and factorised joins; the stream form; draining;
the errors. The oracles (tests/oracle.py, tests/oracle_join.py) mark late rows by their own
reading of the rule."""

from __future__ import annotations

import pyarrow as pa
import pytest
from fuzz_join_cases import draw_join_case
from hypothesis import given, settings
from oracle import rows_of
from oracle_join import JoinOracle
from plans import oracle_for
from test_join_factorised import arrivals as factorised_arrivals
from test_join_factorised import oracle_query as factorised_oracle_query
from test_join_factorised import session as join_session
from test_join_factorised import sql as factorised_sql
from test_session_window import session_streams
from test_window_properties import SETTINGS, streams

import mangonel
from mangonel.compiler import physical as ph
from mangonel.errors import DataError
from mangonel.runtime.local.query import LocalQuery

S = 1_000_000


def late_of(runner: LocalQuery, stream: str | None = None) -> list[dict]:
    """The runner's late rows so far (drained), as row dicts with int timestamps."""
    return rows_of(runner.late_rows(stream))


def check_window_late_rows(plan: ph.ProjectExec, batches, snapshot_at) -> int:  # noqa: ANN001
    """Batch after batch: the engine's late rows are the oracle's new ones. Returns how many
    rows were late in all."""
    runner = LocalQuery(plan, keep_late_rows=True)
    oracle = oracle_for(plan)
    seen = 0
    for position, batch in enumerate(batches):
        if position == snapshot_at:  # late rows are data handed out, not state: drained
            saved = runner.snapshot()
            runner = LocalQuery(plan, keep_late_rows=True)
            runner.restore(saved)
        runner.process(batch)
        oracle.process(batch)
        got, want = late_of(runner), oracle.late_rows[seen:]
        assert got == want, f"after batch {position}:\n{got}\n!=\n{want}"
        seen = len(oracle.late_rows)
    runner.finish()
    assert late_of(runner) == []  # end of input judges nothing late
    assert runner.metrics.late_tuples_dropped == oracle.late == seen  # counting unchanged
    return seen


@settings(max_examples=150, **SETTINGS)
@given(streams("time"))
def test_time_window_late_rows_are_the_oracles(case) -> None:  # noqa: ANN001
    check_window_late_rows(*case)


@settings(max_examples=60, **SETTINGS)
@given(streams("count"))
def test_count_window_late_rows_are_the_oracles(case) -> None:  # noqa: ANN001
    check_window_late_rows(*case)


@settings(max_examples=60, **SETTINGS)
@given(session_streams())
def test_session_window_late_rows_are_the_oracles(case) -> None:  # noqa: ANN001
    check_window_late_rows(*case)


def session(delay: str = "0 seconds") -> mangonel.Session:
    s = mangonel.Session("cpu")
    s.execute(
        "CREATE STREAM s (ts TIMESTAMP, k BIGINT, v DOUBLE) WITH (event_time = 'ts', "
        f"watermark = '{delay}')"
    )
    return s


def batch(ts: list, k: list, v: list, extra: list | None = None) -> pa.RecordBatch:
    columns = {
        "ts": pa.array(ts, pa.timestamp("us")),
        "k": pa.array(k, pa.int64()),
        "v": pa.array(v, pa.float64()),
    }
    if extra is not None:
        columns["note"] = pa.array(extra, pa.string())
    return pa.record_batch(columns)


# the semantics page's example: tuples at 0.2 s and 1.1 s, then 0.9 s (late) and 1.05 s
EXAMPLE = [
    batch([200_000, 1_100_000], [1, 2], [1.0, 2.0]),
    batch([900_000, 1_050_000], [1, 1], [3.0, 4.0]),
]


def test_the_semantics_example_run_then_late_rows_drains() -> None:
    query = session().sql("SELECT k, SUM(v) AS s FROM s [RANGE 1 SECOND] GROUP BY k")
    query.run(EXAMPLE)
    late = query.late_rows()
    assert late.schema.names == ["ts", "k", "v", "late_reason", "late_watermark"]
    assert late.schema.field("late_watermark").type == pa.timestamp("us", tz="UTC")
    assert rows_of(late) == [
        {
            "ts": 900_000,
            "k": 1,
            "v": 3.0,
            "late_reason": "window closed",
            "late_watermark": 1_100_000,
        }
    ]
    assert query.late_rows().num_rows == 0  # taken: drained
    assert query.metrics.late_tuples_dropped == 1


def test_late_rows_keep_the_batch_columns_as_given() -> None:
    """Columns the query does not read and types conformance would widen come back as they
    came in; an empty result has the stream's declared columns."""
    query = session().sql("SELECT k, COUNT(*) AS n FROM s [RANGE 1 SECOND] GROUP BY k")
    narrow = pa.record_batch(
        {
            "ts": pa.array([50], pa.timestamp("ms")),  # 50 ms: late
            "k": pa.array([7], pa.int32()),
            "v": pa.array([1.5], pa.float32()),
            "note": pa.array(["x"]),
        }
    )
    query.run([batch([2_000_000], [1], [0.0]), narrow])
    late = query.late_rows()
    assert late.schema.field("ts").type == pa.timestamp("ms")
    assert late.schema.field("k").type == pa.int32()
    assert late.column("note").to_pylist() == ["x"]
    query.run([batch([2_000_000], [1], [0.0])])
    assert query.late_rows().schema.names == ["ts", "k", "v", "late_reason", "late_watermark"]


def test_late_rows_whose_columns_cannot_be_unified_are_all_returned() -> None:
    """A column given as BIGINT in one late batch and STRING in another comes out as STRING
    (each value's text), and a batch column already named `late_reason` is kept as
    `late_reason_in_batch`: before, `late_rows()` raised, having already forgotten the rows,
    so they were lost for good."""
    query = session().sql("SELECT k, COUNT(*) AS n FROM s [RANGE 1 SECOND] GROUP BY k")
    numbered = batch([0], [1], [1.0]).append_column("e", pa.array([12], pa.int64()))
    texted = batch([1], [1], [2.0]).append_column("e", pa.array(["x"]))
    named = batch([2], [1], [3.0]).append_column("late_reason", pa.array(["mine"]))
    query.run([batch([2_000_000], [1], [0.0]), numbered, texted, named])
    late = query.late_rows()
    assert late.column("e").to_pylist() == ["12", "x", None]
    assert late.column("late_reason_in_batch").to_pylist() == [None, None, "mine"]
    assert late.column("late_reason").to_pylist() == ["window closed"] * 3
    assert late.num_rows == 3
    assert query.late_rows().num_rows == 0


def test_stream_yields_each_batchs_late_rows_before_its_results() -> None:
    query = session().sql("SELECT k, SUM(v) AS s FROM s [RANGE 1 SECOND] GROUP BY k")
    third = batch([2_500_000, 300_000, 1_999_999], [1, 2, 3], [5.0, 6.0, 7.0])
    kinds = [(kind, b.num_rows) for kind, b in query.stream([*EXAMPLE, third], late_rows=True)]
    # batch 1 fires [0, 1); batch 2: one late row, nothing fires; batch 3: one late row, then
    # [1, 2) fires (W = 2.5 s), then the end fires [2, 3)
    assert kinds == [("result", 1), ("late", 1), ("late", 1), ("result", 3), ("result", 1)]
    assert query.late_rows().num_rows == 0  # each was yielded once: none left
    plain = list(query.stream(EXAMPLE))
    assert all(isinstance(b, pa.RecordBatch) for b in plain)
    with pytest.raises(RuntimeError, match="not kept"):
        query.late_rows()  # the plain stream keeps nothing (memory as before)


def test_count_windows_say_behind_watermark() -> None:
    query = session().sql("SELECT k, SUM(v) AS s FROM s [ROWS 2] GROUP BY k")
    query.run(
        [batch([10, 20, 30], [1, 1, 1], [1.0, 2.0, 3.0]), batch([25, 30], [1, 1], [4.0, 5.0])]
    )
    late = rows_of(query.late_rows())
    assert late == [
        {"ts": 25, "k": 1, "v": 4.0, "late_reason": "behind watermark", "late_watermark": 30}
    ]


def test_holistic_time_windows_hand_out_the_wrapped_operators_late_rows() -> None:
    query = session("100 milliseconds").sql(
        "SELECT k, MEDIAN(v) AS m, COUNT(*) AS n FROM s [RANGE 1 SECOND SLIDE 500 MILLISECONDS] "
        "GROUP BY k"
    )
    batches = [
        batch([100_000, 1_900_000], [1, 1], [1.0, 2.0]),
        batch([400_000, 700_000, 1_600_000], [1, 2, 2], [3.0, 4.0, 5.0]),
        batch([3_000_000, 1_200_000], [1, 1], [6.0, 7.0]),
    ]
    query.run(batches)
    # W = 1.8 s after batch 1: 0.4 s (last window [0, 1)) and 0.7 s (last window
    # [0.5, 1.5)) are late, 1.6 s is not; W stays 1.8 s after batch 2: 1.2 s joins [1, 2)
    late = rows_of(query.late_rows())
    assert [(r["ts"], r["late_watermark"]) for r in late] == [
        (400_000, 1_800_000),
        (700_000, 1_800_000),
    ]
    assert query.metrics.late_tuples_dropped == 2


def test_late_rows_of_an_unknown_stream_and_before_any_run() -> None:
    query = session().sql("SELECT k, SUM(v) AS s FROM s [RANGE 1 SECOND] GROUP BY k")
    with pytest.raises(RuntimeError, match="has not run"):
        query.late_rows()
    query.run(EXAMPLE)
    with pytest.raises(DataError, match="not an input"):
        query.late_rows("nope")
    assert query.late_rows("S").num_rows == 1


# -- joins --------------------------------------------------------------------------------


def join_late_rows(seed: int) -> tuple[list[dict], list[dict]]:
    """(engine, oracle) late rows of a random join case, drained after every arrival (the
    engine with the case's snapshot/restore)."""
    case = draw_join_case(seed)
    session = mangonel.Session("cpu", join_algorithm=case.algorithm)
    for statement in case.ddl():
        session.execute(statement)
    plan = session.sql(case.query()).plan
    runner = LocalQuery(plan, keep_late_rows=True)
    oracle = JoinOracle(case.oracle_query())
    got: list[dict] = []
    for position, (name, batch) in enumerate(case.batches()):
        if position == case.restore_at:
            saved = runner.snapshot()
            runner = LocalQuery(plan, keep_late_rows=True)
            runner.restore(saved)
        runner.process(batch, name)  # by name: a self-join's arrivals feed both sides
        oracle.process(name, rows_of(batch))
        got += late_of(runner)
    runner.finish()
    got += late_of(runner)
    assert runner.metrics.late_tuples_dropped == len(got)
    return got, oracle.late_rows


@pytest.mark.parametrize("seed", range(40))
def test_random_join_late_rows_are_the_oracles(seed: int) -> None:
    got, want = join_late_rows(seed)
    assert got == want


def test_the_random_join_cases_hold_late_rows() -> None:
    assert sum(len(join_late_rows(seed)[1]) for seed in range(40)) > 20


@pytest.mark.parametrize("seed", [0, 1, 4, 5])  # cases with late rows on either stream
def test_factorised_join_late_rows_are_the_oracles(seed: int) -> None:
    delays = (0, 0)
    cases = factorised_arrivals(seed, 0.0)
    query = join_session(delays=delays).sql(factorised_sql(1000, 250))
    assert ph.find(query.plan, ph.JoinAggregateExec).factorised is not None
    oracle = JoinOracle(factorised_oracle_query(S, S // 4, delays))
    for name, batch in cases:
        oracle.process(name, batch)
    query.run(cases)
    assert oracle.late_rows
    for stream in ("clicks", "views"):
        got = rows_of(query.late_rows(stream))
        assert got == [row for row in oracle.late_rows if row["late_stream"] == stream]
    both = query.late_rows()  # drained per stream above
    assert both.num_rows == 0 and "late_stream" in both.schema.names


def test_a_joins_late_rows_of_both_streams_in_one_table() -> None:
    """Two streams' columns in one table: NULL where a row's stream has no such column."""
    delays = (0, 0)
    cases = factorised_arrivals(1, 0.0)
    query = join_session(delays=delays).sql(factorised_sql(1000, 1000))
    query.run(cases)
    late = query.late_rows()
    assert set(late.schema.names) == {
        "ts",
        "k",
        "x",
        "y",
        "late_reason",
        "late_watermark",
        "late_stream",
    }
    assert late.num_rows == query.metrics.late_tuples_dropped > 0
    for row in rows_of(late):
        assert (row["x"] is None) or row["late_stream"] == "clicks"


def test_a_join_streams_its_late_rows_after_each_arrival() -> None:
    """The stream form of a join: each arrival's late rows right after it, tagged with their
    stream; together they are the oracle's late rows in arrival order."""
    seed = next(s for s in range(40) if len(join_late_rows(s)[1]) >= 2)
    case = draw_join_case(seed)
    session = mangonel.Session("cpu", join_algorithm=case.algorithm)
    for statement in case.ddl():
        session.execute(statement)
    query = session.sql(case.query())
    late = [
        rows_of(b) for kind, b in query.stream(case.batches(), late_rows=True) if kind == "late"
    ]
    oracle = JoinOracle(case.oracle_query())
    for name, batch in case.arrivals:
        oracle.process(name, list(batch))
    assert [row for rows in late for row in rows] == oracle.late_rows
    assert all(len({row["late_stream"] for row in rows}) == 1 for rows in late)
