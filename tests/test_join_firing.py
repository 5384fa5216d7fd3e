"""The CPU join without aggregation joined at the firing (`rows=firing`: each firing joins
the stored rows of its windows, no pair kept between batches) against the join oracle, at
its edges: empty sides, NULL keys, keys on one side only, a residual that drops every pair,
many windows per batch and per firing, windows far apart, snapshots between firings and
between this form and the pair form (`rows=arrival`), whose rows it must equal."""

from __future__ import annotations

import pyarrow as pa
import pytest
from oracle_join import JoinOracleQuery
from test_join_cpu import (
    CLICKS,
    LEFT,
    RIGHT,
    VIEWS,
    S,
    assert_same,
    batch,
    engine_rows,
    run_engine,
    run_oracle,
    session,
    window_order,
)

from mangonel.compiler import physical as ph
from mangonel.runtime.cpu.join import CpuJoinKernels
from mangonel.runtime.operators.join import JoinOperator

SQL = (
    "SELECT l.x, r.y, window_start AS start, window_end AS end FROM clicks [RANGE {size} "
    "MICROSECONDS SLIDE {slide} MICROSECONDS] AS l JOIN views [RANGE {size} MICROSECONDS "
    "SLIDE {slide} MICROSECONDS] AS r ON l.k = r.k{residual}{where}"
)
OUT = (
    ("x", ["col", "l.x"]),
    ("y", ["col", "r.y"]),
    ("start", ["bound", "start"]),
    ("end", ["bound", "end"]),
)


class PairKernels(CpuJoinKernels):
    """The CPU kernels without `join_windows`: the driver keeps the pair form."""

    join_windows = None  # type: ignore[assignment]

    def __getattribute__(self, name: str):  # noqa: ANN204
        if name == "join_windows":
            raise AttributeError(name)
        return super().__getattribute__(name)


def clicks(*rows: tuple) -> tuple[str, pa.RecordBatch]:
    return ("clicks", batch(CLICKS, [{"ts": t, "k": k, "x": x} for t, k, x in rows]))


def views(*rows: tuple) -> tuple[str, pa.RecordBatch]:
    return ("views", batch(VIEWS, [{"ts": t, "k": k, "y": y} for t, k, y in rows]))


def check(
    arrivals: list,
    size: int = S,
    slide: int = S,
    residual: tuple[str, list] | None = None,
    where: tuple[str, list] | None = None,
    restores: tuple[int | None, ...] = (None,),
    form: str = "firing",
) -> list[dict]:
    """The query's rows (restored from a snapshot after each arrival count in `restores`)
    equal the oracle's, window by window in order, and the plan joins at the firing."""
    sql = SQL.format(
        size=size,
        slide=slide,
        residual="" if residual is None else f" AND {residual[0]}",
        where="" if where is None else f" WHERE {where[0]}",
    )
    query = session().sql(sql)
    assert f"rows={form}" in query.explain()
    oracle_query = JoinOracleQuery(
        LEFT,
        RIGHT,
        "inner",
        size,
        slide,
        ("k",),
        ("k",),
        residual=None if residual is None else residual[1],
        where=None if where is None else where[1],
        outputs=OUT,
    )
    expected, _ = run_oracle(oracle_query, arrivals)
    for restore_at in restores:
        actual = run_engine(query, arrivals, restore_at)
        assert_same(actual, expected)
        assert window_order(actual)
    return expected


def test_explain_says_where_pairs_are_found() -> None:
    on = "FROM clicks [RANGE 1 SECOND] AS l {} JOIN views [RANGE 1 SECOND] AS r ON l.k = r.k"
    inner = session().sql(f"SELECT l.x, r.y {on.format('')}").explain()
    assert 'rows=firing rows_reason="an inner join, at most 4 windows a row: each firing' in inner
    left = session().sql(f"SELECT l.x, r.y {on.format('LEFT')}").explain()
    assert 'rows=arrival rows_reason="a LEFT join flags each kept row matched' in left
    table = session().sql(
        "SELECT l.x, a.c FROM clicks [RANGE 1 SECOND] AS l JOIN ads AS a ON l.k = a.k"
    )
    assert 'rows_reason="a static table side' in table.explain()
    many = session().sql(
        "SELECT l.x FROM clicks [RANGE 1 SECOND SLIDE 200 MILLISECONDS] AS l JOIN views "
        "[RANGE 1 SECOND SLIDE 200 MILLISECONDS] AS r ON l.k = r.k"
    )
    assert 'rows=arrival rows_reason="5 windows per row (over 4)' in many.explain()
    aggregated = session().sql(f"SELECT l.k, COUNT(*) AS n {on.format('')} GROUP BY l.k").explain()
    assert "rows=firing" not in aggregated and "rows=arrival" not in aggregated


def test_one_side_empty_or_without_rows_in_the_window() -> None:
    empty_clicks = ("clicks", batch(CLICKS, []))
    assert not check([empty_clicks, views((100, 1, 1.0)), views((3 * S, 1, 2.0))])
    # both sides have rows, never in the same window
    assert not check([clicks((100, 1, 1)), views((2 * S, 1, 1.0)), clicks((4 * S, 1, 2))])


def test_null_keys_and_keys_on_one_side_only() -> None:
    arrivals = [
        clicks((100, None, 1), (200, 1, 2), (300, 7, 3), (400, 1, 4)),
        views((150, None, 1.0), (250, 1, 2.0), (350, 8, 3.0), (450, 1, 4.0)),
        clicks((2 * S, 1, 5)),
        views((2 * S, 9, 5.0)),
    ]
    expected = check(arrivals, restores=(None, 1, 2, 3))
    assert len(expected) == 4  # two left rows of key 1 x two right rows


def test_a_residual_that_drops_every_pair_and_a_where() -> None:
    arrivals = [
        clicks((100, 1, 1), (200, 2, 2)),
        views((300, 1, 1.0), (400, 2, 2.0)),
        clicks((3 * S, 1, 3)),
        views((3 * S, 1, 3.0)),
    ]
    none = check(arrivals, residual=("r.y > 100", [">", ["col", "r.y"], ["lit", 100]]))
    assert not none
    some = check(
        arrivals,
        residual=("r.y > l.x - 1", [">", ["col", "r.y"], ["-", ["col", "l.x"], ["lit", 1]]]),
        where=("l.x < 2", ["<", ["col", "l.x"], ["lit", 2]]),
        restores=(None, 2),
    )
    assert len(some) == 1


def test_many_windows_per_batch_and_per_firing() -> None:
    """A batch spanning 40 tumbling windows, then sliding windows 1 s / 250 ms (4 windows a
    row, the most joined at firing), fired many at a time; snapshots between firings."""
    rows = [(i * S // 4, i % 3, i) for i in range(160)]
    arrivals = [
        clicks(*rows),
        views(*[(t + 1, k, float(x)) for t, k, x in rows]),
        clicks((60 * S, 0, 1000)),
        views((60 * S, 0, 1000.0)),
    ]
    tumbling = check(arrivals, restores=(None, 1, 2, 3))
    assert len({row["start"] for row in tumbling}) == 41  # 40 s of rows, then 60 s
    sliding = check(arrivals, slide=S // 4, restores=(None, 1, 3))
    assert len(sliding) > 4 * len(tumbling) // 2


def test_rows_in_over_four_windows_are_paired_on_arrival() -> None:
    """1 s / 100 ms (10 windows a row): rows=arrival, its window-ordered expansion counted
    by window; the oracle's rows, with snapshots."""
    rows = [(i * S // 10, i % 3, i) for i in range(40)]
    arrivals = [
        clicks(*rows[:20]),
        views(*[(t + 7, k, float(x)) for t, k, x in rows]),
        clicks(*rows[20:]),
    ]
    out = check(arrivals, slide=S // 10, restores=(None, 1, 2), form="arrival")
    assert len({row["start"] for row in out}) > 30


def test_windows_far_apart() -> None:
    """Window ids spread wider than the rows (numbered by their distinct ids, not a dense
    span): rows 10^6 windows apart."""
    far = 10**12
    arrivals = [
        clicks((100, 1, 1), (far, 1, 2), (2 * far, 1, 3)),
        views((200, 1, 1.0), (far + 5, 1, 2.0), (2 * far + 7, 2, 3.0)),
    ]
    assert len(check(arrivals, restores=(None, 1))) == 2


def test_snapshots_move_between_the_firing_and_pair_forms() -> None:
    """A snapshot of the rows=firing form (no pairs kept) restores into the pair form,
    which finds the stored rows' pairs again, and the other way round; same rows and
    windows_fired as either form alone."""
    rows = [(i * S // 8, i % 4, i) for i in range(64)]
    arrivals = [
        clicks(*rows[:32]),
        views(*[(t + 3, k, float(x)) for t, k, x in rows[:40]]),
        clicks(*rows[32:]),
        views(*[(t + 3, k, float(x)) for t, k, x in rows[40:]]),
    ]
    query = session().sql(SQL.format(size=S, slide=S // 2, residual=" AND r.y > 3", where=""))
    node = ph.find(query.plan, ph.WindowJoinExec)
    inputs = {child.stream.name: i for i, child in enumerate(node.children)}
    results = {}
    for first, second in ((CpuJoinKernels, PairKernels), (PairKernels, CpuJoinKernels)):
        for half in (1, 2, 3):
            operators = [JoinOperator(node, kernels()) for kernels in (first, second)]
            assert [op.at_firing for op in operators] == [
                k is CpuJoinKernels for k in (first, second)
            ]
            out = []
            for name, b in arrivals[:half]:
                out += operators[0].process(b, inputs[name])
            operators[1].restore(operators[0].snapshot())
            for name, b in arrivals[half:]:
                out += operators[1].process(b, inputs[name])
            out += operators[1].finish()
            rows_out = engine_rows(pa.Table.from_batches(out, schema=operators[1].schema))
            results[(first.__name__, half)] = (rows_out, operators[1].windows_fired)
    for kernels in (CpuJoinKernels, PairKernels):
        alone = JoinOperator(node, kernels())
        out = []
        for name, b in arrivals:
            out += alone.process(b, inputs[name])
        out += alone.finish()
        alone_rows = engine_rows(pa.Table.from_batches(out, schema=alone.schema))
        assert alone_rows
        for rows_out, windows in results.values():
            assert_same(rows_out, alone_rows)
            assert windows == alone.windows_fired


def test_pairs_are_not_kept_between_batches() -> None:
    """rows=firing keeps no pending pairs: the state is the stored rows alone."""
    query = session().sql(SQL.format(size=S, slide=S, residual="", where=""))
    node = ph.find(query.plan, ph.WindowJoinExec)
    operator = JoinOperator(node, CpuJoinKernels())
    operator.process(clicks((100, 1, 1), (200, 1, 2))[1], 0)
    operator.process(views((300, 1, 1.0))[1], 1)
    assert operator.at_firing and operator.pending["left"].size == 0
    out = operator.finish()
    assert sum(b.num_rows for b in out) == 2


@pytest.mark.parametrize("seed", range(3))
def test_a_lost_pair_is_caught(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """The checks can fail: join_windows losing the last pair of each firing is caught."""
    original = CpuJoinKernels.join_windows

    def loses_a_pair(self, left, right, lo, hi):  # noqa: ANN001, ANN202
        a, b, windows, rows = original(self, left, right, lo, hi)
        if not len(a):
            return a, b, windows, rows
        rows = rows.copy()
        rows[-1] -= 1
        keep = rows > 0
        return a[:-1], b[:-1], windows[keep], rows[keep]

    monkeypatch.setattr(CpuJoinKernels, "join_windows", loses_a_pair)
    arrivals = [clicks((100 + seed, 1, 1), (200, 1, 2)), views((300, 1, 1.0))]
    with pytest.raises(AssertionError):
        check(arrivals)


@pytest.mark.parametrize(
    "array",
    [
        pa.chunked_array([pa.array([1, None, 3], pa.int32()), pa.array([4, 5], pa.int32())]),
        pa.array([10, 20, None, 40], pa.timestamp("us", tz="UTC")).slice(1),
        pa.array([1.5, None, -0.0], pa.float32()),
        pa.array([True, None, False]),
        pa.array(["a", None, ""]),
        pa.array([], pa.int64()),
    ],
)
def test_take_rows_equals_arrows_take(array: pa.Array) -> None:
    """The output columns' gather (NumPy into Arrow-pool buffers for fixed widths, Arrow's
    take for the rest) equals Arrow's take, negative row numbers giving NULL."""
    import numpy as np

    from mangonel.runtime.host.arrays import take_rows

    n = len(array)
    rows = np.array([i % n for i in range(7)] if n else [], np.int64)
    for ids in (rows, np.where(np.arange(len(rows)) % 3 == 1, -1, rows), np.full(3, -1)):
        combined = array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array
        want = combined.take(pa.array(ids, mask=ids < 0, type=pa.int64()))
        got = take_rows(array, ids)
        assert got.type == want.type and got.to_pylist() == want.to_pylist()
        assert got.null_count == want.null_count


def test_pair_buffers_are_reused_and_given_back_after_a_burst() -> None:
    """join_windows' pair buffers: reused while firings fit, grown for a larger one, given
    back once a firing needs under a quarter of them (a burst at end of input is not kept)."""
    import numpy as np

    kernels = CpuJoinKernels()

    def fire(rows_a: int, rows_b: int) -> int:
        left = (np.zeros(rows_a, np.int64), np.zeros(rows_a, np.int64), np.zeros(rows_a, np.int64))
        right = (np.zeros(rows_b, np.int64), np.zeros(rows_b, np.int64), np.zeros(rows_b, np.int64))
        a, b, windows, per_window = kernels.join_windows(left, right, 0, 0)
        assert len(a) == rows_a * rows_b and list(per_window) == [rows_a * rows_b]
        assert (b[:rows_b] == np.arange(rows_b)).all() and (a[:rows_b] == 0).all()
        return len(kernels._pair_scratch[0])

    small = fire(10, 10)
    assert fire(5, 10) == small  # reused
    burst = fire(2000, 1000)
    assert burst >= 2_000_000
    assert fire(10, 10) < burst // 4  # given back
