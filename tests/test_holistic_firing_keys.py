"""The holistic firing keys its result rows from the wrapped operator's key slots
(`TimeWindowOperator.result_slots`, renumbered by `HolisticTimeWindows._slots_of_inner`): in
the steady state it maps no key column through its own key map, and its rows equal the
oracle's, with keys first seen mid-stream, NULL keys, two key columns, several result batches
per firing (combined firings over input in memory), snapshot/restore between batches and the
split (Spark) form. The approximate aggregates answer a firing's rows in one sketch call per
aggregate, however few windows the exact selection evaluates together."""

from __future__ import annotations

import numpy as np
import pytest
from fuzzer import Scenario, _engine_query, arrow_batch, check, engine_run
from holistic_stream import COLUMNS, DDL
from oracle import OracleQuery
from test_holistic_split import QUERY as SPLIT_QUERY
from test_holistic_split import _batches as split_batches
from test_holistic_split import _plan as split_plan
from test_holistic_split import split_run, standalone_run

from mangonel.runtime.cpu.keys import KeyTable
from mangonel.runtime.local.query import LocalQuery
from mangonel.runtime.operators import holistic_firing, sketch_panes
from mangonel.runtime.operators.holistic import HolisticTimeWindows
from mangonel.runtime.operators.sketch_panes import SketchPanes

# (oracle name, SQL): exact selections, a sketch, an incremental aggregate
CALLS = [
    ("median", "MEDIAN(v)", ["col", "v"]),
    ("approx_count_distinct:0.05", "APPROX_COUNT_DISTINCT(x)", ["col", "x"]),
    ("count_distinct", "COUNT(DISTINCT x)", ["col", "x"]),
    ("percentile_disc:0.25", "PERCENTILE_DISC(0.25) WITHIN GROUP (ORDER BY v)", ["col", "v"]),
    ("sum", "SUM(v)", ["col", "v"]),
]


class FiringKeys:
    """Rows each holistic driver's key map (by object: a restore replaces it) was asked to
    map while a firing completed results, the result rows those firings gave, and the
    sketch answer calls made there."""

    def __init__(self) -> None:
        self.driver: HolisticTimeWindows | None = None
        self.mapped: dict[int, int] = {}
        self.result_rows = 0
        self.firings = 0  # `_complete` calls that completed rows
        self.answers = 0


@pytest.fixture
def firing_keys(monkeypatch) -> FiringKeys:
    seen = FiringKeys()
    complete = HolisticTimeWindows._complete

    def counted_complete(self, batches, *arguments):  # noqa: ANN001, ANN202
        seen.driver = self
        try:
            out = complete(self, batches, *arguments)
        finally:
            seen.driver = None
        seen.result_rows += sum(batch.num_rows for batch in out)
        seen.firings += any(batch.num_rows for batch in out)
        return out

    map_columns = KeyTable.map_columns

    def counted_map(self, columns, include, words=None):  # noqa: ANN001, ANN202
        if seen.driver is not None and self is seen.driver.keys:
            seen.mapped[id(self)] = seen.mapped.get(id(self), 0) + len(include)
        return map_columns(self, columns, include, words)

    answer = SketchPanes.answer

    def counted_answer(self, *arguments):  # noqa: ANN001, ANN202
        seen.answers += 1
        return answer(self, *arguments)

    monkeypatch.setattr(HolisticTimeWindows, "_complete", counted_complete)
    monkeypatch.setattr(KeyTable, "map_columns", counted_map)
    monkeypatch.setattr(SketchPanes, "answer", counted_answer)
    return seen


def _stream(seed: int, batches: int = 6, rows: int = 120) -> list[list[dict]]:
    """Two key columns (k, n), k NULL in some rows, new keys in every batch, some late rows
    and NULL values."""
    rng = np.random.default_rng(seed)
    out, clock = [], 0
    for number in range(batches):
        batch = []
        for _ in range(rows):
            k = int(rng.integers(0, 3 + 2 * number))
            batch.append(
                {
                    "ts": max(0, clock + int(rng.integers(-12, 20))),
                    "k": None if rng.random() < 0.1 else k,
                    "n": int(rng.integers(0, 2)),
                    "x": None if rng.random() < 0.15 else int(rng.integers(0, 30)),
                    "v": None if rng.random() < 0.15 else float(rng.integers(-20, 20)) / 2,
                }
            )
        out.append(batch)
        clock += 16
    return out


def _gapped_stream(seed: int, batches: int = 8, rows: int = 60) -> list[list[dict]]:
    """In order, each batch 30 us of event time and 70 us of nothing before the next (more
    than a window: each batch's panes are a segment of their own, one result batch each)."""
    rng = np.random.default_rng(seed)
    out = []
    for number in range(batches):
        ts = np.sort(rng.integers(0, 30, rows)) + 100 * number
        out.append(
            [
                {
                    "ts": int(t),
                    "k": None if rng.random() < 0.1 else int(rng.integers(0, 2 + number)),
                    "n": int(rng.integers(0, 2)),
                    "x": int(rng.integers(0, 30)),
                    "v": float(rng.integers(-20, 20)),
                }
                for t in ts
            ]
        )
    return out


def _scenario(batches: list[list[dict]], size: int, slide: int, snapshot=()) -> Scenario:  # noqa: ANN001
    outputs = [("k", ["col", "k"]), ("n", ["col", "n"]), ("ws", ["bound", "start"])]
    outputs += [(f"a{i}", ["agg", i]) for i in range(len(CALLS))]
    select = ", ".join(f"{sql} AS a{i}" for i, (_, sql, _) in enumerate(CALLS))
    window = f"RANGE {size} MICROSECONDS SLIDE {slide} MICROSECONDS"
    oracle = OracleQuery(
        columns=dict(COLUMNS),
        event_time="ts",
        kind="time",
        size=size,
        slide=slide,
        delay=4,
        keys=("k", "n"),
        aggregates=tuple((name, argument) for name, _, argument in CALLS),
        outputs=tuple(outputs),
    )
    query = f"SELECT k, n, window_start AS ws, {select} FROM s [{window}] GROUP BY k, n"
    return Scenario(DDL.format(delay=4), query, oracle, batches, tuple(snapshot))


def _distinct_keys(batches: list[list[dict]]) -> int:
    return len({(row["k"], row["n"]) for batch in batches for row in batch})


@pytest.mark.parametrize(
    ("size", "slide", "snapshot"),
    [(20, 5, ()), (20, 5, (3,)), (8, 8, (2, 4)), (30, 2, (1,))],
    ids=["sliding", "restored", "tumbling-restored-twice", "many-panes"],
)
def test_the_firing_maps_no_key_columns_and_equals_the_oracle(firing_keys, size, slide, snapshot):
    batches = _stream(size + slide)
    scenario = _scenario(batches, size, slide, snapshot)
    # the oracle per batch (with the snapshots), then the stream over the input in memory
    # (several batches' firings combined, `batches_per_firing`)
    failure = check(scenario, "cpu")
    assert failure is None, f"{failure}\n{scenario.query}"
    keys = _distinct_keys(batches)
    assert firing_keys.result_rows > 4 * keys
    # each key map renumbers each key of the wrapped operator once (`_slots_of_inner`), not
    # every result row again
    assert max(firing_keys.mapped.values(), default=0) <= keys


def test_combined_firings_answer_their_sketches_in_one_call(firing_keys):
    """Over input in memory the runner combines firings (several result batches per
    `_complete`): one sketch answer per firing and approximate aggregate, even where the
    selection evaluates one window per chunk."""
    batches = _gapped_stream(7)
    scenario = _scenario(batches, 20, 5)
    assert check(scenario, "cpu") is None
    firing_keys.answers = firing_keys.firings = 0
    runner = LocalQuery(_engine_query(scenario, "cpu").plan)
    driver = runner.window_operator
    driver.planned["windows_per_launch"] = 1  # one row per selection chunk
    driver.tuner = None
    inputs = [arrow_batch(batch, scenario.oracle.columns) for batch in batches]
    several = []
    complete = HolisticTimeWindows._complete

    def watched(self, batches, *arguments):  # noqa: ANN001, ANN202
        several.append(len(batches))
        return complete(self, batches, *arguments)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(HolisticTimeWindows, "_complete", watched)
        rows = [row for batch in runner.stream(inputs) for row in batch.to_pylist()]
    assert max(several) > 1  # a firing of several result batches
    assert firing_keys.answers <= firing_keys.firings  # one ACD aggregate
    plain = LocalQuery(_engine_query(scenario, "cpu").plan)
    want = [plain.process(batch) for batch in inputs] + [plain.finish()]
    assert rows == [row for out in want for batch in out for row in batch.to_pylist()]


def test_batches_far_apart_are_answered_apart():
    """`near_batches`: neighbours in event time join, a batch past a gap starts a group."""
    pw = 4

    def keyed(first: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        panes = np.arange(first, first + count, dtype=np.int64)
        return np.zeros(count, np.int64), panes

    batches = [keyed(0, 10), keyed(10, 10), (np.empty(0, np.int64),) * 2, keyed(20, 5)]
    assert holistic_firing.near_batches(batches, pw) == [[0, 1, 3]]
    far = holistic_firing.JOINED_MARGIN_PANES * 10
    batches.append(keyed(far, 3))
    batches.append(keyed(far + 3, 3))
    assert holistic_firing.near_batches(batches, pw) == [[0, 1, 3], [4, 5]]


def test_the_split_form_keys_its_firings_from_the_wrapped_slots(firing_keys):
    plan = split_plan(SPLIT_QUERY)
    expected = standalone_run(plan, split_batches())
    firing_keys.mapped.clear()
    got = split_run(plan, split_batches())
    assert [str(row) for row in got] == [str(row) for row in expected]
    keys = len({k for b in split_batches() for k in b.column("k").to_pylist()})
    assert firing_keys.result_rows > 4 * keys
    assert max(firing_keys.mapped.values(), default=0) <= keys


def test_results_of_an_operator_that_records_no_slots_are_mapped(monkeypatch):
    """The fallback: where the wrapped operator records no slots, the firing maps the key
    columns (the rows stay the same)."""
    batches = _stream(11, batches=4)
    scenario = _scenario(batches, 20, 5)
    want, want_metrics = engine_run(scenario, "cpu")
    monkeypatch.setattr(HolisticTimeWindows, "_fired", lambda self, call, *a: (call(*a), []))
    got, got_metrics = engine_run(scenario, "cpu")
    assert got == want and got_metrics == want_metrics


def test_null_keys_reach_their_values(firing_keys):
    """A NULL key's rows have their own values (a slot renumbered wrongly would read another
    key's, or none): the oracle's windows of the NULL key, with the other key's beside."""
    rows = [{"ts": t, "k": None if t % 2 else 1, "n": 0, "x": t, "v": float(t)} for t in range(40)]
    scenario = _scenario([rows[:20], rows[20:]], 10, 5)
    failure = check(scenario, "cpu")
    assert failure is None, f"{failure}\n{scenario.query}"
    got, _ = engine_run(scenario, "cpu")
    null_rows = [row for firing in got for row in firing if row["k"] is None]
    assert null_rows and all(row["a0"] is not None for row in null_rows)
    assert max(firing_keys.mapped.values(), default=0) <= 2


def test_sparse_sketch_answers_in_row_pieces_equal_the_oracle(monkeypatch):
    """A firing's rows reach `SketchPanes.answer` at once; the sparse form answers them in
    pieces of MAX_SPARSE_ROWS rows (3 here): the oracle's rows."""
    monkeypatch.setattr(sketch_panes, "MAX_SPARSE_ROWS", 3)
    scenario = _scenario(_stream(5), 20, 5, (2,))
    failure = check(scenario, "cpu")
    assert failure is None, f"{failure}\n{scenario.query}"
