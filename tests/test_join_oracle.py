"""The join oracle (tests/oracle_join.py) against results worked out by hand from
docs/semantics.md, "Joins": the differential tests trust it, so it is checked on its own."""

from __future__ import annotations

from pathlib import Path

from oracle_join import JoinInput, JoinOracle, JoinOracleQuery, canonical
from test_fuzz import imported_modules

HERE = Path(__file__).parent
S = 1_000_000  # one second in microseconds

LEFT = JoinInput("l", "clicks", {"ts": "timestamp", "k": "bigint", "x": "bigint"}, "ts", 0)
RIGHT = JoinInput("r", "views", {"ts": "timestamp", "k": "bigint", "y": "double"}, "ts", 0)
ROW_OUTPUTS = (
    ("start", ["bound", "start"]),
    ("x", ["col", "l.x"]),
    ("y", ["col", "r.y"]),
)


def query(**changes) -> JoinOracleQuery:
    base = dict(
        left=LEFT,
        right=RIGHT,
        kind="inner",
        size=S,
        slide=S,
        left_keys=("k",),
        right_keys=("k",),
        outputs=ROW_OUTPUTS,
    )
    base.update(changes)
    return JoinOracleQuery(**base)


def click(ts: float, k: int | None, x: int) -> dict:
    return {"ts": int(ts * S), "k": k, "x": x}


def view(ts: float, k: int | None, y: float) -> dict:
    return {"ts": int(ts * S), "k": k, "y": y}


def run(oracle: JoinOracle, arrivals: list) -> list[list[dict]]:
    """Rows after each arrival, then after finish."""
    return [oracle.process(name, rows) for name, rows in arrivals] + [oracle.finish()]


def test_nothing_fires_until_every_stream_had_a_batch_and_w_is_the_minimum() -> None:
    oracle = JoinOracle(query())
    steps = run(
        oracle,
        [
            ("clicks", [click(0.1, 1, 10), click(5.0, 2, 11)]),  # W_l = 5 s, W = -inf
            ("views", [view(0.5, 1, 1.5)]),  # W_r = 0.5 s: W = 0.5 s, nothing ends by then
            ("views", [view(1.2, 1, 2.5)]),  # W = 1.2 s: [0, 1) fires
        ],
    )
    assert steps[0] == [] and steps[1] == []
    assert steps[2] == [{"start": 0, "x": 10, "y": 1.5}]
    assert steps[3] == []  # finish: [1, 2) has no click, [5, 6) no view


def test_late_rows_are_counted_per_stream_and_null_keys_never_match() -> None:
    oracle = JoinOracle(query(kind="full"))
    steps = run(
        oracle,
        [
            ("clicks", [click(0.1, None, 1), click(2.5, 3, 2)]),
            ("views", [view(0.2, None, 0.5), view(2.0, 3, 1.0)]),  # W = 2.0: [0, 1) fires
            ("clicks", [click(0.9, 1, 3)]),  # late: [0, 1) has fired
        ],
    )
    # NULL keys: both rows unmatched, each once with the other side NULL
    assert canonical(steps[1]) == canonical(
        [{"start": 0, "x": 1, "y": None}, {"start": 0, "x": None, "y": 0.5}]
    )
    assert oracle.late == {"clicks": 1, "views": 0}
    assert steps[3] == [{"start": 2 * S, "x": 2, "y": 1.0}]


def test_a_pair_is_emitted_once_per_sliding_window_it_shares() -> None:
    # RANGE 1 s SLIDE 0.5 s: 0.7 s and 0.9 s share [0, 1) and [0.5, 1.5)
    oracle = JoinOracle(query(slide=S // 2))
    rows = run(oracle, [("clicks", [click(0.7, 1, 1)]), ("views", [view(0.9, 1, 2.0)])])
    flat = [row for step in rows for row in step]
    assert flat == [{"start": 0, "x": 1, "y": 2.0}, {"start": S // 2, "x": 1, "y": 2.0}]


def test_a_row_joins_only_the_windows_that_had_not_fired_when_it_arrived() -> None:
    # [0, 1) fires after the second batch (W = 1.0); the view at 0.8 s then only reaches
    # [0.5, 1.5), where the click at 0.6 s also is
    oracle = JoinOracle(query(slide=S // 2))
    steps = run(
        oracle,
        [
            ("clicks", [click(0.6, 1, 1), click(1.0, 9, 0)]),
            ("views", [view(1.0, 9, 0.0)]),
            ("views", [view(0.8, 1, 3.0)]),
        ],
    )
    flat = [row for step in steps for row in step if row["x"] == 1]
    assert flat == [{"start": S // 2, "x": 1, "y": 3.0}]


def test_residual_and_left_join_keep_unmatched_rows_once_per_window() -> None:
    oracle = JoinOracle(
        query(kind="left", slide=S // 2, residual=[">", ["col", "r.y"], ["lit", 1.0]])
    )
    steps = run(
        oracle,
        [("clicks", [click(0.7, 1, 1)]), ("views", [view(0.8, 1, 0.5), view(0.9, 1, 2.0)])],
    )
    flat = [row for step in steps for row in step]
    assert flat == [{"start": 0, "x": 1, "y": 2.0}, {"start": S // 2, "x": 1, "y": 2.0}]
    oracle = JoinOracle(query(kind="left", residual=[">", ["col", "r.y"], ["lit", 5.0]]))
    steps = run(oracle, [("clicks", [click(0.7, 1, 1)]), ("views", [view(0.8, 1, 0.5)])])
    assert [row for step in steps for row in step] == [{"start": 0, "x": 1, "y": None}]


def test_aggregation_over_the_joined_rows_and_where_after_the_join() -> None:
    oracle = JoinOracle(
        query(
            where=[">", ["col", "l.x"], ["lit", 1]],
            keys=("l.k",),
            aggregates=(("count_star", None), ("sum", ["*", ["col", "l.x"], ["col", "r.y"]])),
            outputs=(("k", ["col", "l.k"]), ("n", ["agg", 0]), ("s", ["agg", 1])),
        )
    )
    steps = run(
        oracle,
        [
            ("clicks", [click(0.1, 1, 2), click(0.2, 1, 3), click(0.3, 2, 1)]),
            ("views", [view(0.4, 1, 1.5), view(0.5, 1, 0.5), view(0.6, 2, 9.0)]),
        ],
    )
    # key 1: 2 clicks x 2 views = 4 pairs, sum = (2 + 3) * (1.5 + 0.5); key 2: x = 1 fails WHERE
    assert [row for step in steps for row in step] == [{"k": 1, "n": 4, "s": 10.0}]


def test_stream_joined_with_a_table_with_and_without_a_window() -> None:
    table = JoinInput("a", "ads", {"k": "bigint", "c": "string"})
    outputs = (("x", ["col", "l.x"]), ("c", ["col", "a.c"]))
    oracle = JoinOracle(query(right=table, kind="left", size=None, slide=None, outputs=outputs))
    oracle.load_table("ads", [{"k": 1, "c": "one"}, {"k": 1, "c": "uno"}])
    rows = oracle.process("clicks", [click(0.1, 1, 5), click(0.2, 2, 6)])
    assert canonical(rows) == canonical(
        [{"x": 5, "c": "one"}, {"x": 5, "c": "uno"}, {"x": 6, "c": None}]
    )
    assert oracle.finish() == []
    counted = JoinOracle(
        query(
            right=table,
            keys=("a.c",),
            aggregates=(("count_star", None),),
            outputs=(("c", ["col", "a.c"]), ("start", ["bound", "start"]), ("n", ["agg", 0])),
        )
    )
    counted.load_table("ads", [{"k": 1, "c": "one"}])
    first = counted.process("clicks", [click(0.1, 1, 5), click(0.3, 1, 6), click(1.5, 1, 7)])
    assert first == [{"c": "one", "start": 0, "n": 2}]  # W = 1.5 s: [0, 1) fired
    assert counted.finish() == [{"c": "one", "start": S, "n": 1}]


def test_the_join_oracle_shares_no_code_with_the_engine() -> None:
    imported = imported_modules(HERE / "oracle_join.py")
    assert imported <= {"__future__", "collections", "dataclasses", "typing", "oracle"}


def test_a_stream_joined_with_itself_pairs_its_rows_and_counts_late_rows_once() -> None:
    """Each batch arrives on both sides at once, judged against the watermark before it:
    a row pairs with itself and with every same-key row of its windows; a late row is
    counted (and kept) once."""
    again = JoinInput("r", "clicks", LEFT.columns, "ts", 0)
    outputs = (("start", ["bound", "start"]), ("x", ["col", "l.x"]), ("y", ["col", "r.x"]))
    oracle = JoinOracle(query(right=again, outputs=outputs))
    steps = run(
        oracle,
        [
            ("clicks", [click(0.1, 1, 10), click(0.2, 1, 11), click(0.3, 2, 12)]),  # W = 0.3 s
            ("clicks", [click(1.5, 1, 13), click(0.9, 2, 14)]),  # W = 1.5 s: [0, 1) fires
            ("clicks", [click(0.5, 1, 15)]),  # late: [0, 1) has fired
        ],
    )
    assert steps[0] == []
    pairs = [(10, 10), (10, 11), (11, 10), (11, 11), (12, 12), (12, 14), (14, 12), (14, 14)]
    assert canonical(steps[1]) == canonical([{"start": 0, "x": x, "y": y} for x, y in pairs])
    assert steps[2] == []
    assert steps[3] == [{"start": S, "x": 13, "y": 13}]
    assert oracle.late == {"clicks": 1}
    assert [row["x"] for row in oracle.late_rows] == [15]
