"""Join queries: binding (the three forms of issue 10), the logical and physical join nodes,
EXPLAIN of the algorithm and its reason, placements in GPU plans. Errors with positions are in
tests/golden/errors.sql (join_* cases); EXPLAIN texts in tests/golden/explain/*join*."""

from __future__ import annotations

import pyarrow as pa
import pytest

from mangonel.compiler import logical as lg
from mangonel.compiler import physical as ph
from mangonel.compiler.explain import explain_text
from mangonel.errors import CatalogError, PlanError, SqlError
from mangonel.session import Session

STREAMS = (
    "CREATE STREAM clicks (ts TIMESTAMP, ad_id BIGINT, user_id BIGINT, bid DOUBLE) "
    "WITH (event_time = 'ts')",
    "CREATE STREAM views (ts TIMESTAMP, ad_id INT, price DOUBLE) "
    "WITH (event_time = 'ts', watermark = '1 second')",
    "CREATE TABLE ads (ad_id BIGINT, campaign STRING)",
)
SLIDING = (
    "SELECT l.ad_id, l.user_id, r.price, window_start, window_end "
    "FROM clicks [RANGE 1 SECOND SLIDE 100 MILLISECONDS] AS l "
    "JOIN views [RANGE 1 SECOND SLIDE 100 MILLISECONDS WATERMARK 3 SECONDS] AS r "
    "ON l.ad_id = r.ad_id AND r.price > 10"
)
AGGREGATED = (
    "SELECT l.ad_id, window_start, COUNT(*) AS n, SUM(l.bid * r.price) AS spend "
    "FROM clicks [RANGE 1 SECOND] AS l JOIN views [RANGE 1 SECOND] AS r "
    "ON l.ad_id = r.ad_id GROUP BY l.ad_id"
)
STATIC = (
    "SELECT c.ad_id, a.campaign, window_start, COUNT(*) FROM clicks [RANGE 1 MINUTE] AS c "
    "JOIN ads AS a ON c.ad_id = a.ad_id GROUP BY c.ad_id, a.campaign"
)


def session(**options) -> Session:
    s = Session("cpu", **options)
    for statement in STREAMS:
        s.execute(statement)
    return s


def join_node(plan: ph.ProjectExec) -> ph.WindowJoinExec:
    return ph.find(plan, ph.WindowJoinExec)


def test_window_join_of_two_streams_binds_keys_residual_and_per_stream_watermarks() -> None:
    query = session().sql(SLIDING)
    join = join_node(query.plan)
    assert join.kind is lg.JoinKind.INNER
    assert join.aliases == ("l", "r")
    assert [k.name for k in join.left_keys] == ["l.ad_id"]
    assert [k.name for k in join.right_keys] == ["r.ad_id"]  # INT joins BIGINT
    assert "r.price" in join.residual.sql() and join.where is None
    # each stream keeps its own watermark delay: the clause's WATERMARK, else the declared one
    assert join.watermark_delays == (0, 3_000_000)
    assert (join.pane_length, join.panes_per_window, join.panes_per_slide) == (100_000, 10, 1)
    assert join.pane_pairs
    # each side reads only its columns the query names, and its event time
    left, right = join.children
    assert [c.name for c in left.columns] == ["ts", "ad_id", "user_id"]
    assert [c.name for c in right.columns] == ["ts", "ad_id", "price"]
    assert query.schema.names == ["ad_id", "user_id", "price", "window_start", "window_end"]
    assert isinstance(query.plan.children[0], ph.WindowJoinExec)


def test_aggregation_over_the_join_is_fused_into_a_join_aggregate() -> None:
    plan = session().sql(AGGREGATED).plan
    aggregate = ph.find(plan, ph.JoinAggregateExec)
    assert [k.name for k in aggregate.keys] == ["l.ad_id"]
    assert [a.function.name for a in aggregate.aggregates] == ["COUNT_STAR", "SUM"]
    assert aggregate.fields[0].name == "rows"
    assert not join_node(plan).pane_pairs  # tumbling: a pane is a window
    assert ph.window_result_columns(aggregate)[0] == ("l.ad_id", aggregate.keys[0].type)


@pytest.mark.parametrize(
    ("word", "kind"),
    [("LEFT", "left"), ("LEFT OUTER", "left"), ("RIGHT", "right"), ("FULL OUTER", "full")],
)
def test_outer_joins(word: str, kind: str) -> None:
    text = AGGREGATED.replace(" JOIN ", f" {word} JOIN ")
    assert join_node(session().sql(text).plan).kind.value == kind


def test_stream_joined_with_a_static_table_with_and_without_a_window() -> None:
    s = session()
    join = join_node(s.sql(STATIC).plan)
    assert join.static_side == 1 and join.watermark_delays == (0, None)
    assert join.algorithm == "hash" and "static table is the build side" in join.algorithm_reason
    rows = s.sql(
        "SELECT c.user_id, a.campaign FROM clicks AS c LEFT JOIN ads AS a "
        "ON c.ad_id = a.ad_id WHERE c.bid > 1"
    )
    join = join_node(rows.plan)
    assert join.window is None and join.kind is lg.JoinKind.LEFT
    assert join.where is not None
    assert ph.join_row_columns(join)[-1][0] == "a.campaign"  # no window bounds
    # the table may be written first: an inner join is symmetric
    first = s.sql(
        "SELECT a.campaign, COUNT(*) FROM ads AS a JOIN clicks [RANGE 1 MINUTE] AS c "
        "ON a.ad_id = c.ad_id GROUP BY a.campaign"
    )
    assert join_node(first.plan).static_side == 0


def test_join_algorithm_is_a_session_option_and_explain_says_why() -> None:
    auto = session().sql(AGGREGATED).explain()
    assert "algorithm=hash" in auto and "no key statistics" in auto
    forced = session(join_algorithm="sort-merge").sql(AGGREGATED)
    assert join_node(forced.plan).algorithm == "sort-merge"
    assert 'algorithm_reason="join_algorithm=sort-merge option"' in forced.explain()
    assert join_node(session(join_algorithm="hash").sql(AGGREGATED).plan).algorithm == "hash"
    with pytest.raises(PlanError, match="unknown join_algorithm"):
        Session("cpu", join_algorithm="nested-loop")


def test_explain_says_whether_pane_pairs_are_credited() -> None:
    s = session()
    assert "windowing=pane-pairs" in s.sql(SLIDING).explain()
    assert "windowing=per-window" in s.sql(AGGREGATED).explain()
    json = s.sql(SLIDING).explain(format="json")
    join = json["children"][0]
    assert join["operator"] == "WindowJoin"
    assert join["parameters"]["windowing"] == "pane-pairs"
    assert join["parameters"]["left_keys"] == ["l.ad_id"]
    assert [c["operator"] for c in join["children"]] == ["StreamScan", "StreamScan"]


def test_gpu_plans_with_gpu_join_off_place_every_join_step_on_the_cpu_and_say_so() -> None:
    plan = ph.with_backend(session().sql(AGGREGATED).plan, "gpu", "test", gpu_join=False)
    assert ph.plan_backend(plan) == "gpu"
    for node in ph.walk(plan):
        for step in getattr(node, "placements", ()):
            assert step.backend == "cpu", (type(node).__name__, step)
    text = explain_text(plan)
    assert "! join runs on cpu because the gpu_join=False option keeps the join on" in text
    assert "! aggregate runs on cpu because the gpu_join=False option keeps the join" in text
    back = ph.with_backend(plan, "cpu", "again")
    assert all(p.backend == "cpu" and p.reason == "again" for p in join_node(back).placements)
    assert "none; the join steps run on the cpu" in session().sql(AGGREGATED).explain(codegen=True)


def test_having_and_where_over_a_join() -> None:
    plan = (
        session()
        .sql(
            AGGREGATED.replace(" GROUP BY", " WHERE r.price > 1 GROUP BY")
            + " HAVING COUNT(*) > 2 AND l.ad_id <> 7"
        )
        .plan
    )
    assert isinstance(plan.children[0], ph.FilterExec)
    assert join_node(plan).where is not None


def test_the_residual_may_read_one_side_only_and_double_equalities_stay_residual() -> None:
    join = join_node(
        session()
        .sql(
            "SELECT COUNT(*) FROM clicks [RANGE 1 SECOND] AS l JOIN views [RANGE 1 SECOND] "
            "AS r ON l.user_id = r.ad_id AND l.bid = r.price AND (l.bid > 1)"
        )
        .plan
    )
    assert [k.name for k in join.left_keys] == ["l.user_id"]
    assert "l.bid" in join.residual.sql() and "r.price" in join.residual.sql()


def test_several_key_pairs_in_either_order() -> None:
    s = session()
    s.execute(
        "CREATE STREAM clicks_2 (ts TIMESTAMP, ad_id BIGINT, user_id BIGINT, bid DOUBLE) "
        "WITH (event_time = 'ts')"
    )
    join = join_node(
        s.sql(
            "SELECT COUNT(*) FROM clicks [RANGE 1 SECOND] AS l JOIN clicks_2 [RANGE 1 SECOND] "
            "AS r ON r.user_id = l.user_id AND l.ad_id = r.ad_id"
        ).plan
    )
    assert [k.name for k in join.left_keys] == ["l.user_id", "l.ad_id"]
    assert [k.name for k in join.right_keys] == ["r.user_id", "r.ad_id"]


def test_a_stream_joined_with_itself_pairs_each_batch_on_both_sides() -> None:
    """A self-join: the runner found inputs by stream name and gave each batch to one side,
    so it emitted nothing (then it was refused). Now each batch of the stream arrives on both
    sides, in either input form; its late rows are reported and counted once; two different
    WATERMARKs are refused (tests/golden/errors.sql)."""
    s = session()
    query = s.sql(
        "SELECT l.user_id, r.user_id AS other, window_start FROM clicks [RANGE 1 SECOND] AS l "
        "JOIN clicks [RANGE 1 SECOND] AS r ON l.ad_id = r.ad_id AND l.user_id < r.user_id"
    )
    first = pa.RecordBatch.from_pydict(
        {
            "ts": pa.array([0, 1], pa.timestamp("us")),
            "ad_id": [5, 5],
            "user_id": [1, 2],
            "bid": [1.0, 2.0],
        }
    )
    later = pa.RecordBatch.from_pydict(
        {
            "ts": pa.array([1_500_000, 2, 2_500_000, 3], pa.timestamp("us")),
            "ad_id": [5, 5, 5, 5],
            "user_id": [3, 4, 5, 6],
            "bid": [3.0, 4.0, 5.0, 6.0],
        }
    )
    for arrivals in ([("clicks", first), ("clicks", later)], {"clicks": [first, later]}):
        got = query.run(arrivals)
        users, others = got.column("user_id").to_pylist(), got.column("other").to_pylist()
        # ts=2 and 3 arrive after W = 1 us: on time; the later windows hold one row each
        pairs = [(1, 2), (1, 4), (1, 6), (2, 4), (2, 6), (4, 6)]
        assert sorted(zip(users, others, strict=True)) == pairs
        assert query.metrics.tuples_in == 6  # the stream's rows, read once
    # a third batch after W = 2.5 s: the row at 0.5 s is late, once
    late = pa.RecordBatch.from_pydict(
        {
            "ts": pa.array([500_000], pa.timestamp("us")),
            "ad_id": [5],
            "user_id": [7],
            "bid": [7.0],
        }
    )
    query.run([("clicks", first), ("clicks", later), ("clicks", late)])
    assert query.metrics.late_tuples_dropped == 1
    assert dict(query.metrics.late_by_input) == {"clicks": 1}
    rows = query.late_rows()
    assert rows.column("user_id").to_pylist() == [7]
    assert rows.column("late_stream").to_pylist() == ["clicks"]
    # the same WATERMARK written on both sides joins
    s.sql(
        "SELECT l.user_id FROM clicks [RANGE 1 SECOND WATERMARK 1 SECOND] AS l "
        "JOIN clicks [RANGE 1 SECOND WATERMARK 1 SECOND] AS r ON l.ad_id = r.ad_id"
    )


def test_errors_are_positioned() -> None:
    s = session()
    with pytest.raises(SqlError) as error:
        s.sql(
            "SELECT COUNT(*) FROM clicks [RANGE 1 SECOND] AS l\n"
            "JOIN views [RANGE 2 SECONDS] AS r ON l.ad_id = r.ad_id"
        )
    assert (error.value.line, error.value.column) == (2, 6)
    with pytest.raises(CatalogError, match="unknown stream or table 'nope'"):
        s.sql("SELECT COUNT(*) FROM clicks [RANGE 1 SECOND] AS l JOIN nope AS n ON l.a = n.a")
