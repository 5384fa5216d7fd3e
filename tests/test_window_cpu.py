"""Hand-written window queries on the CPU backend, with exact expected rows.

Times are microseconds; `window_start`/`window_end` come back as int microseconds here.
"""

from __future__ import annotations

import math

import pyarrow as pa
import pytest
from fuzzer import engine_rows as as_rows
from oracle import Oracle, rows_close
from plans import aggregate_ref, make_plan, oracle_for
from sqlglot import exp

from mangonel.catalog.types import SqlType as T
from mangonel.compiler.logical import AggregateFunction as F
from mangonel.errors import DataError
from mangonel.runtime.local.query import LocalQuery

STAMP = pa.timestamp("us", tz="UTC")
COLUMNS = [("ts", T.TIMESTAMP), ("k", T.BIGINT), ("v", T.DOUBLE)]


def batch(ts, k=None, v=None, **extra) -> pa.RecordBatch:
    k = k if k is not None else [1] * len(ts)
    v = v if v is not None else [1.0] * len(ts)
    arrays = [
        pa.array(ts, pa.int64()).cast(STAMP),
        pa.array(k, pa.int64()),
        pa.array(v, pa.float64()),
    ]
    names = ["ts", "k", "v"]
    for name, values in extra.items():
        arrays.append(values if isinstance(values, pa.Array) else pa.array(values))
        names.append(name)
    return pa.RecordBatch.from_arrays(arrays, names=names)


def per_batch(plan, batches) -> tuple[list[list[dict]], LocalQuery]:
    """Engine output after each batch, and after end of input (last entry)."""
    query = LocalQuery(plan)
    out = [as_rows(query.process(b)) for b in batches]
    out.append(as_rows(query.finish()))
    return out, query


def oracle_per_batch(plan, batches) -> tuple[list[list[dict]], Oracle]:
    oracle = oracle_for(plan)
    out = [oracle.process(b) for b in batches]
    out.append(oracle.finish())
    return out, oracle


def check(plan, batches, expected: list[list[dict]] | None = None) -> LocalQuery:
    got, query = per_batch(plan, batches)
    want, oracle = oracle_per_batch(plan, batches)
    for position, (g, w) in enumerate(zip(got, want, strict=True)):
        assert rows_close(g, w), f"firing {position}: engine {g} != oracle {w}"
    if expected is not None:
        for position, (g, e) in enumerate(zip(got, expected, strict=True)):
            assert rows_close(g, e), f"firing {position}: engine {g} != expected {e}"
    m = query.metrics
    assert (m.tuples_in, m.late_tuples_dropped, m.null_event_time_dropped) == (
        oracle.tuples_in,
        oracle.late,
        oracle.null_event_time,
    )
    return query


def r(window_start, window_end, *values, k=1, key=True):
    row = {"k": k} if key else {}
    row.update(window_start=window_start, window_end=window_end)
    row.update({f"a{i}": value for i, value in enumerate(values)})
    return row


def test_tumbling_sum_and_count_fire_when_the_watermark_passes():
    plan = make_plan(
        COLUMNS, keys=["k"], size=10, aggregates=[(F.COUNT_STAR, None), (F.SUM, exp.column("v"))]
    )
    batches = [batch([1, 5, 12], v=[1.0, 2.0, 4.0]), batch([25], v=[8.0])]
    check(
        plan,
        batches,
        [
            [r(0, 10, 2, 3.0)],  # W = 12 closes [0, 10)
            [r(10, 20, 1, 4.0)],  # W = 25 closes [10, 20)
            [r(20, 30, 1, 8.0)],  # end of input
        ],
    )


def test_sliding_windows_in_window_order_then_key_first_seen():
    plan = make_plan(COLUMNS, keys=["k"], size=10, slide=5, aggregates=[(F.COUNT_STAR, None)])
    batches = [batch([7, 3, 8], k=[2, 1, 2]), batch([100], k=[1])]
    check(
        plan,
        batches,
        [
            [r(-5, 5, 1, k=1)],  # W = 8: only [-5, 5) has closed; key 1 holds ts 3
            [r(0, 10, 2, k=2), r(0, 10, 1, k=1), r(5, 15, 2, k=2)],  # key 2 was seen first
            [r(95, 105, 1, k=1), r(100, 110, 1, k=1)],
        ],
    )


def test_out_of_order_within_delay_is_counted_and_late_tuples_are_dropped():
    plan = make_plan(
        COLUMNS,
        keys=["k"],
        size=10,
        delay=5,
        aggregates=[(F.COUNT_STAR, None), (F.SUM, exp.column("v"))],
    )
    batches = [
        batch([14, 3], v=[1.0, 2.0]),  # W = 9: nothing fires
        batch([8, 21], v=[4.0, 8.0]),  # 8 is in time (window [0,10) open); W = 16
        batch([9, 12], v=[16.0, 32.0]),
    ]  # 9 is late ([0,10) fired); 12 counts
    query = check(
        plan,
        batches,
        [
            [],
            [r(0, 10, 2, 6.0)],
            [],
            [r(10, 20, 2, 33.0), r(20, 30, 1, 8.0)],
        ],
    )
    assert query.metrics.late_tuples_dropped == 1
    assert query.metrics.windows_fired == 3
    assert query.metrics.rows_out == 3


def test_a_window_ending_exactly_at_the_watermark_has_fired_so_its_tuples_are_late():
    plan = make_plan(COLUMNS, keys=["k"], size=10, aggregates=[(F.COUNT_STAR, None)])
    query = check(plan, [batch([0, 10]), batch([9, 10])], [[r(0, 10, 1)], [], [r(10, 20, 2)]])
    assert query.metrics.late_tuples_dropped == 1


def test_a_late_pane_can_still_update_windows_that_have_not_fired():
    # w = 10, s = 5: ts 7 lies in [0,10) (fired at W = 10) and in [5,15) (open): not late
    plan = make_plan(COLUMNS, keys=["k"], size=10, slide=5, aggregates=[(F.COUNT_STAR, None)])
    batches = [batch([2, 10]), batch([7])]
    query = check(
        plan,
        batches,
        [
            [r(-5, 5, 1), r(0, 10, 1)],
            [],
            [r(5, 15, 2), r(10, 20, 1)],
        ],
    )
    assert query.metrics.late_tuples_dropped == 0


def test_nulls_in_values_keys_and_event_times():
    plan = make_plan(
        COLUMNS,
        keys=["k"],
        size=10,
        aggregates=[
            (F.COUNT_STAR, None),
            (F.COUNT, exp.column("v")),
            (F.SUM, exp.column("v")),
            (F.AVG, exp.column("v")),
            (F.MIN, exp.column("v")),
            (F.VAR_POP, exp.column("v")),
        ],
    )
    b = pa.RecordBatch.from_arrays(
        [
            pa.array([1, 2, None, 3, 4], pa.int64()).cast(STAMP),
            pa.array([1, None, 1, None, 1], pa.int64()),
            pa.array([None, 2.0, 5.0, 4.0, None], pa.float64()),
        ],
        names=["ts", "k", "v"],
    )
    query = check(
        plan,
        [b],
        [
            [],
            [
                r(0, 10, 2, 0, None, None, None, None, k=1),  # all-NULL values: COUNT 0, rest NULL
                r(0, 10, 2, 2, 6.0, 3.0, 2.0, 1.0, k=None),
            ],  # NULL keys form their own group
        ],
    )
    assert query.metrics.null_event_time_dropped == 1


def test_every_aggregate_against_hand_computed_values():
    values = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]
    # every aggregate, in declaration order, but PYTHON: a call of it names a user's function
    # (tests/test_python_window.py)
    functions = [f for f in F if f is not F.PYTHON]
    plan = make_plan(
        COLUMNS,
        size=100,
        aggregates=[(f, None if f is F.COUNT_STAR else exp.column("v")) for f in functions],
    )
    got, _ = per_batch(plan, [batch(list(range(8)), v=values)])
    row = got[-1][0]
    assert [row[f"a{i}"] for i in range(5)] == [8, 8, 40.0, 2.0, 9.0]
    assert row["a5"] == 5.0 and row["a6"] == 4.0 and row["a8"] == 2.0
    assert math.isclose(row["a7"], 32.0 / 7) and math.isclose(row["a9"], math.sqrt(32.0 / 7))


def test_integer_sum_min_max_keep_integer_types_and_sample_variance_of_one_is_null():
    columns = [("ts", T.TIMESTAMP), ("k", T.BIGINT), ("x", T.INT)]
    plan = make_plan(
        columns,
        size=10,
        aggregates=[
            (F.SUM, exp.column("x")),
            (F.MIN, exp.column("x")),
            (F.MAX, exp.column("x")),
            (F.VAR_SAMP, exp.column("x")),
            (F.STDDEV_SAMP, exp.column("x")),
        ],
    )
    b = pa.RecordBatch.from_arrays(
        [
            pa.array([1, 2], pa.int64()).cast(STAMP),
            pa.array([1, 1], pa.int64()),
            pa.array([7, None], pa.int32()),
        ],
        names=["ts", "k", "x"],
    )
    table = LocalQuery(plan).run([b])
    assert table.schema.field("a0").type == pa.int64()
    assert table.schema.field("a1").type == pa.int32()
    assert table.column("window_start").type == STAMP
    assert as_rows(table.to_batches()) == [r(0, 10, 7, 7, 7, None, None, key=False)]


def test_count_windows_fire_when_their_last_tuple_is_final():
    plan = make_plan(
        COLUMNS, keys=["k"], kind="count", size=3, slide=2, aggregates=[(F.SUM, exp.column("v"))]
    )
    batches = [
        batch([5, 1, 3, 4], v=[5.0, 1.0, 3.0, 4.0]),  # W = 5: 1, 3, 4 final
        batch([9, 2, 6], v=[9.0, 2.0, 6.0]),  # 2 is late (< 5); W = 9: 5, 6 final
        batch([20], v=[20.0]),
    ]  # W = 20: 9 final
    query = check(
        plan,
        batches,
        [
            [r(1, 5, 8.0)],  # W = 5: tuples 1, 3, 4 are final -> window 0
            [r(4, 7, 15.0)],  # 2 is late; W = 9: 5, 6 final -> window 1 = (4, 5, 6)
            [],  # W = 20: 9 final; window 2 needs a 7th tuple
            [r(6, 21, 35.0)],  # end of input: 20 final -> window 2 = (6, 9, 20)
        ],
    )
    assert query.metrics.late_tuples_dropped == 1


def test_count_window_bounds_and_short_windows_never_fire():
    plan = make_plan(
        COLUMNS, keys=["k"], kind="count", size=2, slide=2, aggregates=[(F.COUNT_STAR, None)]
    )
    batches = [batch([10, 11, 12], k=[1, 2, 1])]
    # end of input: key 1 has (10, 12) -> one window; key 2 has one tuple -> no window
    check(plan, batches, [[], [r(10, 13, 2, k=1)]])


def test_string_and_multi_column_keys():
    columns = [("ts", T.TIMESTAMP), ("sym", T.STRING), ("k", T.BIGINT), ("v", T.DOUBLE)]
    plan = make_plan(columns, keys=["sym", "k"], size=10, aggregates=[(F.COUNT_STAR, None)])
    b = pa.RecordBatch.from_arrays(
        [
            pa.array([1, 2, 3, 4, 5], pa.int64()).cast(STAMP),
            pa.array(["b", "a", "b", None, "a"]),
            pa.array([1, 1, 2, 1, 1], pa.int64()),
            pa.array([1.0] * 5),
        ],
        names=["ts", "sym", "k", "v"],
    )
    got, _ = per_batch(plan, [b])
    assert got[-1] == [
        {"sym": "b", "k": 1, "window_start": 0, "window_end": 10, "a0": 1},
        {"sym": "a", "k": 1, "window_start": 0, "window_end": 10, "a0": 2},
        {"sym": "b", "k": 2, "window_start": 0, "window_end": 10, "a0": 1},
        {"sym": None, "k": 1, "window_start": 0, "window_end": 10, "a0": 1},
    ]
    check(plan, [b])


def test_dictionary_encoded_strings_are_keys_too():
    columns = [("ts", T.TIMESTAMP), ("sym", T.STRING)]
    plan = make_plan(columns, keys=["sym"], size=10, aggregates=[(F.COUNT_STAR, None)])
    sym = pa.array(["x", "y", "x"]).dictionary_encode()
    b = pa.RecordBatch.from_arrays(
        [pa.array([1, 2, 3], pa.int64()).cast(STAMP), sym], names=["ts", "sym"]
    )
    got, _ = per_batch(plan, [b])
    assert [(row["sym"], row["a0"]) for row in got[-1]] == [("x", 2), ("y", 1)]


def test_global_window_without_group_by():
    plan = make_plan(COLUMNS, size=10, slide=5, aggregates=[(F.MAX, exp.column("v"))])
    check(
        plan,
        [batch([1, 6], k=[1, 2], v=[1.0, 6.0])],
        [
            [r(-5, 5, 1.0, key=False)],
            [r(0, 10, 6.0, key=False), r(5, 15, 6.0, key=False)],
        ],
    )


def test_empty_batches_and_batches_without_event_times_change_nothing():
    plan = make_plan(COLUMNS, keys=["k"], size=10, aggregates=[(F.COUNT_STAR, None)])
    empty = batch([])
    only_null = pa.RecordBatch.from_arrays(
        [pa.array([None], STAMP), pa.array([1], pa.int64()), pa.array([1.0])],
        names=["ts", "k", "v"],
    )
    query = check(
        plan,
        [empty, batch([1]), empty, only_null, batch([11])],
        [[], [], [], [], [r(0, 10, 1)], [r(10, 20, 1)]],
    )
    assert query.metrics.null_event_time_dropped == 1
    assert query.metrics.tuples_in == 3


def test_where_on_a_boolean_column_filters_but_still_moves_the_watermark():
    columns = COLUMNS + [("ok", T.BOOLEAN)]
    plan = make_plan(
        columns, keys=["k"], size=10, where=exp.column("ok"), aggregates=[(F.COUNT_STAR, None)]
    )
    batches = [batch([1, 2, 30], ok=[True, None, False])]
    query = check(plan, batches, [[r(0, 10, 1)], []])  # ts 30 moves W, but is filtered
    assert query.metrics.windows_fired == 1


def test_windows_passed_before_any_tuple_contributed_stay_fired():
    # Batch 1 moves W to 70 with filtered tuples only: windows 0..4 (end <= 70) have fired,
    # empty. Batch 2's tuples at 37 and 40 may then only reach window 5 [35, 77).
    columns = COLUMNS + [("ok", T.BOOLEAN)]
    plan = make_plan(
        columns,
        keys=[],
        size=42,
        slide=7,
        delay=59,
        where=exp.column("ok"),
        aggregates=[(F.COUNT_STAR, None)],
    )
    batches = [batch([129, 77], ok=[False, False]), batch([37, 40], ok=[True, True])]
    check(plan, batches, [[], [], [r(35, 77, 2, key=False)]])


def test_having_and_expressions_in_outputs():
    pytest.importorskip("mangonel.runtime.cpu.expressions")
    plan = make_plan(
        COLUMNS,
        keys=["k"],
        size=10,
        aggregates=[(F.COUNT_STAR, None), (F.SUM, exp.column("v"))],
        where=exp.GT(this=exp.column("v"), expression=exp.Literal.number(0)),
        having=exp.GT(this=aggregate_ref(0), expression=exp.Literal.number(1)),
        outputs=[
            ("k", exp.column("k"), T.BIGINT),
            ("mean", exp.Div(this=aggregate_ref(1), expression=aggregate_ref(0)), T.DOUBLE),
        ],
    )
    b = batch([1, 2, 3, 4], k=[1, 1, 2, 2], v=[1.0, 3.0, 5.0, -1.0])
    got, query = per_batch(plan, [b])
    assert got[-1] == [{"k": 1, "mean": 2.0}]
    assert query.metrics.windows_fired == 2 and query.metrics.rows_out == 1
    check(plan, [b])


def test_end_of_input_fires_everything_including_far_future_data():
    plan = make_plan(
        COLUMNS, keys=["k"], size=10, delay=1_000_000, aggregates=[(F.COUNT_STAR, None)]
    )
    far = 10_000_000_000
    query = check(plan, [batch([5, far + 5, 7])], [[r(0, 10, 2)], [r(far, far + 10, 1)]])
    assert query.metrics.state_bytes < 1_000_000  # two small pane segments, not one huge one


def test_sparse_segments_merge_when_data_fills_the_gap():
    plan = make_plan(
        COLUMNS,
        keys=["k"],
        size=4,
        slide=2,
        delay=100_000_000,
        aggregates=[(F.COUNT_STAR, None), (F.SUM, exp.column("v"))],
    )
    filler = list(range(0, 9_001, 3))
    batches = [
        batch([0, 9_000, 50_000_000], v=[1.0, 2.0, 4.0]),
        batch(filler, k=[2] * len(filler)),
        batch([8_999, 1], k=[1, 3]),
    ]
    query = LocalQuery(plan)
    query.process(batches[0])
    assert len(query.window_operator.segments) == 3  # far apart: three small blocks
    query.process(batches[1])
    assert len(query.window_operator.segments) == 2  # the filler bridged the first two
    check(plan, batches)


def test_snapshot_restore_continues_the_stream_exactly():
    plan = make_plan(
        COLUMNS,
        keys=["k"],
        size=10,
        slide=5,
        delay=7,
        aggregates=[(F.SUM, exp.column("v")), (F.STDDEV_SAMP, exp.column("v"))],
    )
    batches = [
        batch([1, 9, 4], k=[1, 2, 1], v=[1.0, 2.0, 3.0]),
        batch([12, 3, 18], k=[2, 1, 1], v=[4.0, 5.0, 6.0]),
        batch([30, 2], k=[1, 2], v=[7.0, 8.0]),
    ]
    straight, _ = per_batch(plan, batches)
    first = LocalQuery(plan)
    out = [as_rows(first.process(batches[0]))]
    saved = first.snapshot()
    second = LocalQuery(plan)
    second.restore(saved)
    out += [as_rows(second.process(b)) for b in batches[1:]]
    out.append(as_rows(second.finish()))
    assert out == straight
    assert second.metrics.tuples_in == 8


def test_count_window_snapshot_restore():
    plan = make_plan(
        COLUMNS,
        keys=["k"],
        kind="count",
        size=2,
        slide=1,
        delay=2,
        aggregates=[(F.SUM, exp.column("v"))],
    )
    batches = [batch([1, 2, 5], v=[1.0, 2.0, 5.0]), batch([3, 4, 9], v=[3.0, 4.0, 9.0])]
    straight, _ = per_batch(plan, batches)
    first = LocalQuery(plan)
    out = [as_rows(first.process(batches[0]))]
    second = LocalQuery(plan)
    second.restore(first.snapshot())
    out += [as_rows(second.process(batches[1])), as_rows(second.finish())]
    assert out == straight


def test_a_snapshot_of_another_query_is_refused():
    one = LocalQuery(make_plan(COLUMNS, size=10, aggregates=[(F.COUNT_STAR, None)]))
    other = LocalQuery(make_plan(COLUMNS, size=20, aggregates=[(F.COUNT_STAR, None)]))
    with pytest.raises(DataError, match="window"):
        other.restore(one.snapshot())
    with pytest.raises(DataError):
        other.restore(b"not a snapshot at all")
    whole = one.snapshot()  # empty, cut short, cut to its start: a clear error, not numpy's
    for broken in (b"", whole[:-10], whole[:20]):
        with pytest.raises(DataError, match="not a mangonel window-operator snapshot"):
            one.restore(broken)


def test_split_lift_merge_equals_process():
    plan = make_plan(
        COLUMNS,
        keys=["k"],
        size=10,
        slide=5,
        aggregates=[(F.COUNT_STAR, None), (F.AVG, exp.column("v")), (F.VAR_SAMP, exp.column("v"))],
    )
    batches = [
        batch([1, 2, 7, 6], k=[1, 2, 1, 1], v=[1.0, 2.0, 3.0, None]),
        batch([13, 4, 30], k=[2, 1, 1], v=[4.0, 5.0, 6.0]),
    ]
    straight, _ = per_batch(plan, batches)
    stage2 = LocalQuery(plan).operator  # the operator tree, as Spark's stage 2 drives it
    stage1 = LocalQuery(plan).window_operator
    out = []
    for b in batches:
        partials = stage1.preaggregate(b)
        assert "__pane" in partials.schema.names
        stage2.leaf().merge(partials)
        out.append(as_rows(stage2.on_watermark(stage2.leaf().max_event_time)))
    out.append(as_rows(stage2.finish()))
    assert len(out) == len(straight)
    for a, b in zip(out, straight, strict=True):
        assert rows_close(a, b)


def test_many_keys_and_small_windows_per_batch_use_several_tree_builds():
    plan = make_plan(
        COLUMNS,
        keys=["k"],
        size=12,
        slide=3,
        windows_per_batch=2,
        aggregates=[(F.SUM, exp.column("v")), (F.MIN, exp.column("v"))],
    )
    ts = [i % 97 for i in range(600)]
    keys = [i % 37 for i in range(600)]
    values = [float((i * 7919) % 101) for i in range(600)]
    check(
        plan,
        [
            batch(ts[:300], k=keys[:300], v=values[:300]),
            batch(ts[300:], k=keys[300:], v=values[300:]),
        ],
    )


def test_through_the_session_sql_front_end():
    import mangonel as mg

    session = mg.Session(backend="cpu")
    session.execute(
        "CREATE STREAM t (ts TIMESTAMP, k BIGINT, v DOUBLE) "
        "WITH (event_time = 'ts', watermark = '5 microseconds')"
    )
    query = session.sql(
        "SELECT k, window_start, window_end, COUNT(*) AS n, SUM(v) / COUNT(v) AS mean "
        "FROM t [RANGE 10 MICROSECONDS SLIDE 5 MICROSECONDS] WHERE v > 0 GROUP BY k "
        "HAVING COUNT(*) > 1"
    )
    table = query.run([batch([1, 2, 3, 12], k=[1, 1, 2, 1], v=[1.0, 3.0, 5.0, -1.0])])
    assert as_rows(table.to_batches()) == [
        {"k": 1, "window_start": -5, "window_end": 5, "n": 2, "mean": 2.0},
        {"k": 1, "window_start": 0, "window_end": 10, "n": 2, "mean": 2.0},
    ]


@pytest.mark.parametrize("bad", [0, -1, "3", 2.0, True])
def test_windows_per_batch_must_be_a_whole_number_of_at_least_one(bad) -> None:
    """A bad `windows_per_batch` is refused when the session is made (-1 once hung the first
    firing; 0 was replaced by the default without a word, "3" failed inside numba); a
    NumPy integer is taken."""
    import numpy as np

    from mangonel import Session
    from mangonel.errors import PlanError

    with pytest.raises(PlanError, match="windows_per_batch must be a whole number >= 1"):
        Session("cpu", windows_per_batch=bad)
    s = Session("cpu", windows_per_batch=np.int64(3))
    s.execute("CREATE STREAM s (ts TIMESTAMP, k BIGINT) WITH (event_time = 'ts')")
    query = s.sql("SELECT k, window_start, COUNT(*) AS n FROM s [RANGE 1 SECOND] GROUP BY k")
    assert "windows_per_batch=3" in query.explain()
    rows = query.run(
        [pa.RecordBatch.from_pydict({"ts": pa.array([0], pa.timestamp("us")), "k": [1]})]
    )
    assert rows.column("n").to_pylist() == [1]
