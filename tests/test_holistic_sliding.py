"""The CPU's sliding percentiles (`runtime.cpu.holistic_sliding`): a key's band stepped pane by
pane gives the values the sorted window gives, over rows in any order, states carried across
calls, panes that changed after a state was made, panes no longer held, ties, drifting values,
p = 0 and 1, arrays of p, both positions' rules."""

from __future__ import annotations

import numpy as np
import pytest
from test_holistic_band import expected_percentiles

from mangonel.runtime.cpu import holistic_sliding as hs
from mangonel.runtime.cpu.holistic import MODES


class _Sliding:
    """Panes of per-key values and a key state, as the driver holds them."""

    def __init__(self, slots: int, fractions, evaluation: str, pw: int) -> None:  # noqa: ANN001
        self.fractions = np.asarray(fractions, np.float64)
        self.mode = MODES[evaluation]
        self.evaluation = evaluation
        self.pw = pw
        self.slots = slots
        ps = len(self.fractions)
        self.first = np.full(slots, hs.NO_WINDOW, np.int64)
        self.epoch = np.zeros(slots, np.int64)
        self.count = np.zeros(slots, np.int64)
        self.bounds = np.zeros((slots, ps, 4), np.int64)
        self.bounds[:, :, 3] = -1
        self.bands = hs.new_bands()
        hs.extend_bands(self.bands, slots * ps)
        self.panes: dict[int, list[np.ndarray]] = {}  # pane -> per slot values
        self.changed: dict[int, int] = {}
        self.generation = 1

    def add(self, pane: int, slot: int, values: np.ndarray) -> None:
        per_slot = self.panes.setdefault(pane, [np.empty(0, np.int64)] * self.slots)
        per_slot = list(per_slot)
        per_slot[slot] = np.concatenate((per_slot[slot], values.astype(np.int64)))
        self.panes[pane] = per_slot
        self.changed[pane] = self.generation

    def evaluate(self, slots: np.ndarray, firsts: np.ndarray, forget_before: int | None = None):  # noqa: ANN201
        base = int(firsts.min()) - self.pw
        end = int(firsts.max()) + self.pw
        values, offsets, changed = [], [], []
        for q in range(base, end):
            per_slot = self.panes.get(q)
            if per_slot is None or (forget_before is not None and q < forget_before):
                values.append(np.empty(0, np.int64))
                offsets.append(np.zeros(1, np.int64))
                unknown = forget_before is not None and q < forget_before
                changed.append(hs.UNKNOWN_PANE if unknown else 0)
                continue
            lengths = [len(v) for v in per_slot]
            # grouped, each slot's values shuffled (not sorted)
            rng = np.random.default_rng(q)
            values.append(np.concatenate([rng.permutation(v) for v in per_slot]))
            offsets.append(np.concatenate(([0], np.cumsum(lengths))).astype(np.int64))
            changed.append(self.changed[q])
        rows = len(slots)
        ps = len(self.fractions)
        n = np.zeros(rows, np.int64)
        lower = np.zeros((rows, ps), np.int64)
        higher = np.zeros((rows, ps), np.int64)
        table, _held = hs.pane_table(values)  # held: alive while the kernel reads it
        hs.sliding_percentiles(
            table, *hs.flat_offsets(offsets), np.array(changed, np.int64), base,
            self.pw, slots.astype(np.int64), firsts.astype(np.int64), self.mode,
            self.fractions, self.generation, self.first, self.epoch, self.count, self.bounds,
            self.bands, n, lower, higher,
        )  # fmt: skip
        self.generation += 1
        for r in range(rows):
            window = [
                self.panes[q][slots[r]]
                for q in range(firsts[r], firsts[r] + self.pw)
                if q in self.panes
            ]
            joined = np.concatenate(window) if window else np.empty(0, np.int64)
            lows, highs = expected_percentiles(joined, self.evaluation, self.fractions)
            assert n[r] == len(joined), r
            assert list(lower[r]) == lows, (r, firsts[r])
            assert list(higher[r]) == highs, (r, firsts[r])
        return n


@pytest.mark.parametrize("evaluation", ["percentile_cont", "percentile_disc"])
@pytest.mark.parametrize("spread", [10**12, 5])
def test_stepped_bands_give_the_sorted_windows_values(evaluation, spread):
    rng = np.random.default_rng(spread % 97)
    pw, keys = 20, 4
    fractions = (0.0, 0.01, 0.5, 0.77, 1.0)
    sliding = _Sliding(keys, fractions, evaluation, pw)
    for pane in range(140):
        for slot in range(keys):
            sliding.add(pane, slot, rng.integers(-spread, spread + 1, int(rng.integers(0, 300))))
    # firings of 5 windows per key, rows window-major (as a result batch), then key-major
    for start in range(0, 100, 5):
        firsts = np.repeat(np.arange(start, start + 5), keys)
        slots = np.tile(np.arange(keys), 5)
        if start % 10:
            order = np.lexsort((firsts, slots))
            firsts, slots = firsts[order], slots[order]
        sliding.evaluate(slots, firsts)


def test_extreme_values_ties_and_a_drift():
    """int64's extremes (the band's open ends), all-equal panes, values that rise with time
    (the percentile leaves any fixed band) and empty windows."""
    rng = np.random.default_rng(3)
    pw = 10
    sliding = _Sliding(2, (0.0, 0.5, 1.0), "percentile_cont", pw)
    top, bottom = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    for pane in range(60):
        sliding.add(pane, 0, pane * 1000 + rng.integers(0, 3000, 300))
        if pane % 7 == 0:
            sliding.add(pane, 0, np.array([top, bottom, top]))
        if 20 <= pane < 40:
            sliding.add(pane, 1, np.full(200, 5))
    for start in range(0, 50, 3):
        firsts = np.repeat(np.arange(start, start + 3), 2)
        sliding.evaluate(np.tile(np.arange(2), 3), firsts)


def test_changed_panes_skipped_windows_and_unknown_panes_rebuild():
    rng = np.random.default_rng(5)
    pw = 8
    sliding = _Sliding(3, (0.25, 0.5), "percentile_disc", pw)
    for pane in range(12):
        for slot in range(3):
            sliding.add(pane, slot, rng.integers(0, 1000, 150))
    sliding.evaluate(np.arange(3), np.zeros(3, np.int64))
    # out-of-order values into the stepped window's panes (not late): the states rebuild
    sliding.add(3, 0, rng.integers(0, 10, 500))
    sliding.add(5, 2, rng.integers(990, 1000, 500))
    sliding.evaluate(np.arange(3), np.ones(3, np.int64))
    # a key skips a window; another steps where its leaving pane is no longer held
    sliding.evaluate(np.array([0, 2]), np.array([3, 2]))
    sliding.evaluate(np.array([1, 2]), np.array([4, 3]), forget_before=3)
    # the same window again (no pane changed), then one whose panes did
    sliding.evaluate(np.array([1]), np.array([4]))
    sliding.add(6, 1, rng.integers(0, 1000, 40))
    sliding.evaluate(np.array([1]), np.array([4]))


def test_group_pane_groups_by_slot():
    slots = np.array([2, 0, 2, 1, 0, 2], np.int64)
    values = np.array([5, 4, 3, 2, 1, 0], np.int64)
    grouped, offsets = hs.group_pane(slots, values, 4)
    assert offsets.tolist() == [0, 2, 3, 6, 6]
    assert grouped.tolist() == [4, 1, 2, 5, 3, 0]


def test_a_sample_that_misses_the_band_falls_back_to_every_value():
    """The rebuild brackets its band from a strided sample: values laid out so that every
    sampled one is far above the rest make the bracket miss; the band is then selected
    from every value."""
    total = 8 * hs.SAMPLE
    rng = np.random.default_rng(9)
    values = rng.integers(0, 1000, total).astype(np.int64)
    values[:: total // hs.SAMPLE] = 10**9 + np.arange(hs.SAMPLE)
    offsets = np.array([0, total], np.int64)
    expected = np.sort(values)
    table, _held = hs.pane_table([values])
    for low in (0, total // 2, total - 1):
        band = np.empty(0, np.int64)
        lo, hi, below, size, band, _ = hs._rebuild(
            table, *hs.flat_offsets([offsets]), 0, 0, 0, 1, total, low, low,
            band, np.empty(0, np.int64), np.empty(hs.SAMPLE, np.int64),
        )  # fmt: skip
        assert below <= low < below + size
        assert band[low - below] == expected[low]
        assert (np.sort(band[:size]) == band[:size]).all()
        assert below == int((values < lo).sum())
        assert size == int(((values >= lo) & (values <= hi)).sum())


# -- the engine: the operator drives the bands (tests/oracle.py decides) ---------------------


def _stream_rows(seed: int, count: int, per_us: int, disorder: int) -> list[dict]:
    """`count` rows of 3 keys, `per_us` a microsecond (windows of ~2,500 values a key: the
    sampled rebuild), event times up to `disorder` behind (past a shorter watermark delay,
    values arrive in panes of windows a key's band already stepped, or are late), key 2
    3 us in 60 (over a 40 us window its next window skips some: panes freed since, no
    longer held, step out), DOUBLE
    values with NaN, -0.0, infinities and NULLs, BIGINT values with many ties."""
    import math

    rng = np.random.default_rng(seed)
    special = [math.nan, -0.0, 0.0, math.inf, -math.inf]
    rows = []
    for i in range(count):
        v = float(rng.integers(-500, 500)) / 4
        if rng.integers(0, 40) == 0:
            v = special[int(rng.integers(0, len(special)))]
        rows.append(
            {
                "ts": i // per_us + int(rng.integers(0, disorder + 1)),
                "k": int(rng.integers(0, 3 if (i // per_us) % 60 < 3 else 2)),
                "x": None if rng.integers(0, 20) == 0 else int(rng.integers(-30, 30)),
                "n": 0,
                "v": None if rng.integers(0, 25) == 0 else v,
            }
        )
    return rows


SLIDING_CALLS = [
    ("median", "MEDIAN(v)", ["col", "v"]),
    ("percentile_cont:0.0", "PERCENTILE_CONT(0.0) WITHIN GROUP (ORDER BY v)", ["col", "v"]),
    ("percentile_disc:1.0", "PERCENTILE_DISC(1.0) WITHIN GROUP (ORDER BY v)", ["col", "v"]),
    ("percentile_disc:0.25", "PERCENTILE_DISC(0.25) WITHIN GROUP (ORDER BY x)", ["col", "x"]),
    ("percentile:0.9", "PERCENTILE(x, 0.9)", ["col", "x"]),
    ("approx_percentile:0.333:10000", "APPROX_PERCENTILE(v, 0.333)", ["col", "v"]),
    ("sum", "SUM(x)", ["col", "x"]),
]


@pytest.mark.parametrize(
    ("size", "delay", "disorder", "snapshots"),
    [(400, 40, 0, ()), (400, 10, 40, (3, 6)), (40, 5, 20, (4,))],
)
def test_sliding_percentiles_in_the_engine_match_the_oracle(size, delay, disorder, snapshots):
    """100 panes a window over ~2,500 values a key (and 10 over ~250), states carried over 9
    batches' firings, out-of-order rows into panes of stepped windows, a key whose windows
    skip, restores from snapshots; every aggregate takes the bands (the plan says so) and
    equals the oracle."""
    from fuzzer import check
    from holistic_stream import cpu_session
    from test_holistic import grouped_scenario

    from mangonel.compiler import physical as ph
    from mangonel.runtime.cpu.kernels import CpuKernels
    from mangonel.runtime.operators.holistic_sliding import sliding_positions

    rows = _stream_rows(seed=disorder + 1, count=10_000, per_us=25, disorder=disorder)
    cuts = list(range(0, len(rows), 1200)) + [len(rows)]
    batches = [rows[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]
    scenario = grouped_scenario("time", size, 4, delay, SLIDING_CALLS, batches, snapshots)
    failure = check(scenario, "cpu")
    assert failure is None, str(failure)
    session = cpu_session(delay)
    node = ph.find(session.sql(scenario.query).plan, ph.WindowAggregateExec)
    exact = [p for p, a in enumerate(node.aggregates) if a.holistic and not a.sketch]
    assert sliding_positions(node, exact, frozenset(), CpuKernels()) == set(exact)
    assert len(exact) == 6


def test_array_percentiles_take_the_bands_and_match_the_oracle():
    from fuzzer import Scenario
    from holistic_stream import COLUMNS, DDL
    from oracle import OracleQuery
    from oracle_arrays import array_name
    from test_percentile_arrays import check_arrays

    rows = _stream_rows(seed=7, count=6000, per_us=25, disorder=10)
    cuts = list(range(0, len(rows), 1500)) + [len(rows)]
    batches = [rows[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]
    ps = [0.0, 0.5, 0.25, 1.0, 0.5]
    aggregates = (
        (array_name("percentile_cont", ps, None), ["col", "v"]),
        (array_name("percentile_disc", ps, None), ["col", "x"]),
    )
    listed = ", ".join(map(str, ps))
    query = (
        f"SELECT k, window_start AS ws, PERCENTILE(v, ARRAY({listed})) AS a0, "
        f"PERCENTILE_DISC(ARRAY({listed})) WITHIN GROUP (ORDER BY x) AS a1 "
        "FROM s [RANGE 200 MICROSECONDS SLIDE 4 MICROSECONDS] GROUP BY k"
    )
    oracle = OracleQuery(
        columns=dict(COLUMNS),
        event_time="ts",
        kind="time",
        size=200,
        slide=4,
        delay=20,
        keys=("k",),
        aggregates=aggregates,
        outputs=(("k", ["col", "k"]), ("ws", ["bound", "start"]), ("a0", ["agg", 0]))
        + (("a1", ["agg", 1]),),
    )
    scenario = Scenario(DDL.format(delay=20), query, oracle, batches, (2,))
    failure = check_arrays(scenario, "cpu")
    assert failure is None, failure


def test_split_panes_scatters_int64_rows_as_the_ordered_gather_does():
    """`split_panes`' int64 path (rows scattered straight to their pane) against its general
    one (a row order, then a gather: taken for int32 slots): the same panes, chunks and row
    order within a pane."""
    from mangonel.runtime.cpu import holistic

    rng = np.random.default_rng(4)
    rows = 5000
    panes = rng.integers(100, 140, rows).astype(np.int64)
    slots = rng.integers(0, 50, rows).astype(np.int64)
    values = rng.integers(-(2**62), 2**62, rows).astype(np.int64)
    keep = rng.random(rows) < 0.8
    got_panes, got_chunks, _ = holistic.split_panes(panes, slots, values, keep)
    want_panes, want_chunks, _ = holistic.split_panes(panes, slots.astype(np.int32), values, keep)
    assert got_panes == want_panes == sorted(set(panes[keep].tolist()))
    for (got_slots, got_values, _), (want_slots, want_values, _) in zip(
        got_chunks, want_chunks, strict=True
    ):
        assert got_slots.tolist() == want_slots.tolist()
        assert got_values.tolist() == want_values.tolist()


def test_a_key_that_stops_arriving_keeps_no_band():
    """Once the panes a key's state would step out of are gone (`retire`), the state is dead
    (a step would rebuild) and its bands' memory goes: a key that stopped arriving holds
    none, and the results stay the oracle's."""
    import pyarrow as pa

    from mangonel.runtime.operators.holistic_sliding import SlidingStates
    from mangonel.session import Session

    session = Session(backend="cpu")
    schema = pa.schema([("ts", pa.timestamp("us")), ("k", pa.int64()), ("v", pa.float64())])
    session.create_stream("s", schema, event_time="ts", watermark=0)
    query = session.sql(
        "SELECT k, window_start, MEDIAN(v) AS m FROM s [RANGE 100 MICROSECONDS SLIDE 10 "
        "MICROSECONDS] GROUP BY k"
    )
    rng = np.random.default_rng(5)
    batches = []
    for start in range(0, 1000, 50):  # key 1 only in the first 200 us
        ts = np.arange(start, start + 50).repeat(20)
        keys = np.where((ts < 200) & (np.arange(len(ts)) % 2 == 1), 1, 0)
        columns = [pa.array(ts).cast(pa.timestamp("us")), keys, rng.random(len(ts))]
        batches.append(pa.record_batch(columns, schema=schema))
    runner = query._new_runner()
    results = [runner.operator.process(batch) for batch in batches]  # firing after each
    states = runner.window_operator.sliding
    assert isinstance(states, SlidingStates) and states.states
    slot_of_one = 1  # keys take slots in order of arrival: key 1 came second
    for state in states.states.values():
        ps = len(state.fractions)
        assert state.first[slot_of_one] == state.module.NO_WINDOW
        assert (state.bounds[slot_of_one, :, 3] == -1).all()
        assert all(len(state.bands[slot_of_one * ps + f]) == 0 for f in range(ps))
        assert len(state.bands[0]) > 0  # key 0 still arriving keeps its band
    fired = pa.Table.from_batches([b for out in results for b in out], schema=query.schema)
    assert fired.filter(pa.compute.equal(fired["k"], 1)).num_rows == 29  # windows over 0-199 us


def test_split_grouped_groups_by_pane_and_slot_and_keys_doubles():
    """`split_grouped` (a batch's values grouped by (pane, slot) as they come) against
    `split_panes` then `group_pane` (what the firing did): the same panes, offsets and
    values in the same order; doubles keyed as `order_keys` keys them (-0.0, NaNs of any
    sign and payload, infinities, negatives); None where the pane range is unknown,
    wrong or the cells would outnumber the rows."""
    from mangonel.aggregates.holistic import order_keys
    from mangonel.runtime.cpu import holistic

    rng = np.random.default_rng(11)
    rows, n_slots = 6000, 40
    panes = rng.integers(100, 112, rows).astype(np.int64)
    slots = rng.integers(0, n_slots, rows).astype(np.int64)
    doubles = rng.normal(0, 1e3, rows)
    special = [-0.0, 0.0, np.inf, -np.inf, np.nan, -np.nan, 5e-324, -5e-324]
    doubles[: len(special)] = special
    doubles[len(special)] = np.frombuffer(np.int64(0x7FF0000000000001).tobytes(), np.float64)[0]
    keep = rng.random(rows) < 0.8
    for values in (doubles, rng.integers(-(2**62), 2**62, rows), doubles.astype(np.float32)):
        keys = order_keys(values)
        got = hs.split_grouped(panes, slots, values, keep, n_slots, (100, 111))
        assert got is not None
        want_panes, want_chunks, _ = holistic.split_panes(panes, slots, keys, keep)
        assert got[0] == want_panes
        for (grouped, offsets), (chunk_slots, chunk_values, _) in zip(
            got[1], want_chunks, strict=True
        ):
            want_grouped, want_offsets = hs.group_pane(chunk_slots, chunk_values, n_slots)
            assert offsets.tolist() == want_offsets.tolist()
            assert grouped.tolist() == want_grouped.tolist()
    assert hs.split_grouped(panes, slots, doubles, keep, n_slots, None) is None
    assert hs.split_grouped(panes, slots, doubles, keep, n_slots, (101, 111)) is None
    assert hs.split_grouped(panes, slots, doubles, keep, n_slots - 1, (100, 111)) is None
    assert hs.split_grouped(panes, slots, doubles, keep, n_slots, (100, 10**6)) is None
