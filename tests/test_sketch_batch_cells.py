"""The CPU's per-batch sketch path: `sketch_windows.batch_cells` numbers a batch's (pane, key)
cells without grouping its rows by pane, and `holistic.split_panes` groups rows by pane with
a counting sort. Both must give what the grouping they replace gives (the pane split then a
cell numbering per pane; a stable sort by pane), and a query must give the same rows whichever
path its sketches take."""

from __future__ import annotations

import numpy as np
import pytest
from fuzzer import same_with_and_without
from hypothesis import given, settings
from test_sketch_sql import SETTINGS, scenarios

from mangonel.aggregates.holistic import order_keys
from mangonel.aggregates.sketches import hll_alpha_m2, hll_estimate
from mangonel.catalog.types import SqlType
from mangonel.runtime.cpu import holistic, sketch_hll, sketch_windows


def _batch(seed: int, rows: int, pane_low: int, pane_high: int, keys: int):  # noqa: ANN202
    rng = np.random.default_rng(seed)
    panes = rng.integers(pane_low, pane_high + 1, rows).astype(np.int64)
    slots = rng.integers(0, keys, rows).astype(np.int64)
    values = rng.integers(-1000, 1000, rows).astype(np.int64)
    keep = rng.random(rows) < 0.7
    return panes, slots, values, keep


def _split_by_sort(panes, slots, values, keep, times=None):  # noqa: ANN001, ANN202
    """The reference grouping: a stable sort of the kept rows by pane."""
    rows = np.flatnonzero(keep)
    rows = rows[np.argsort(panes[rows], kind="stable")]
    ids = sorted(set(panes[rows].tolist()))
    chunks = []
    for pane in ids:
        chosen = rows[panes[rows] == pane]
        chunks.append((slots[chosen], values[chosen], None if times is None else times[chosen]))
    return ids, chunks


@pytest.mark.parametrize(
    ("pane_low", "pane_high"),
    [(-3, 5), (7, 7), (0, 10**9)],  # a few panes, one pane, spread far (the argsort path)
)
def test_split_panes_groups_rows_by_pane_in_row_order(pane_low, pane_high):
    panes, slots, values, keep = _batch(1, 2000, pane_low, pane_high, 13)
    times = np.arange(len(panes), dtype=np.int64) * 7
    for with_times in (None, times):
        got_ids, got, presorted = holistic.split_panes(panes, slots, values, keep, with_times)
        want_ids, want = _split_by_sort(panes, slots, values, keep, with_times)
        assert got_ids == want_ids and not presorted
        for got_chunk, want_chunk in zip(got, want, strict=True):
            for g, w in zip(got_chunk, want_chunk, strict=True):
                assert (g is None and w is None) or np.array_equal(g, w)
    nothing = np.zeros(len(panes), np.bool_)
    assert holistic.split_panes(panes, slots, values, nothing) == ([], [], False)


def test_split_panes_keeps_other_slot_and_value_types():
    panes, slots, values, keep = _batch(2, 500, 0, 4, 5)
    got_ids, got, _ = holistic.split_panes(panes, slots.astype(np.int32), values, keep)
    want_ids, want = _split_by_sort(panes, slots, values, keep)
    assert got_ids == want_ids
    for (g_slots, g_values, _), (w_slots, w_values, _) in zip(got, want, strict=True):
        assert np.array_equal(g_slots, w_slots) and np.array_equal(g_values, w_values)


@pytest.mark.parametrize(("pane_low", "pane_high", "keys"), [(-4, 6, 9), (3, 3, 1), (0, 40, 50)])
def test_batch_cells_number_the_cells_the_pane_split_would(pane_low, pane_high, keys):
    panes, slots, values, keep = _batch(3, 3000, pane_low, pane_high, keys)
    found = sketch_windows.batch_cells(panes, slots, keep, keys, 10**9)
    assert found is not None
    pane_ids, pane_slots, cells, n_cells = found
    want_ids, chunks = _split_by_sort(panes, slots, values, keep)
    assert pane_ids == want_ids
    start = 0
    for pane, present, (chunk_slots, _, _) in zip(pane_ids, pane_slots, chunks, strict=True):
        want_present, want_ranks = sketch_windows.pane_cells(chunk_slots, False)
        assert np.array_equal(present, want_present)
        rows = np.flatnonzero(keep & (panes == pane))
        assert np.array_equal(cells[rows], start + want_ranks)  # rows in row order
        start += len(present)
    assert n_cells == start
    assert not cells[~keep].any()  # unkept rows point at cell 0 (the build skips them)


def test_batch_cells_decline_spread_panes_and_too_many_cells():
    panes, slots, _, keep = _batch(4, 1000, 0, 10**6, 20)
    assert sketch_windows.batch_cells(panes, slots, keep, 20, 10**9) is None
    panes, slots, _, keep = _batch(5, 1000, 0, 3, 20)
    assert sketch_windows.batch_cells(panes, slots, keep, 20, 10) is None
    empty = sketch_windows.batch_cells(panes, slots, np.zeros(1000, np.bool_), 20, 10)
    assert empty is not None and empty[0] == [] and empty[3] == 0


@settings(max_examples=25, **SETTINGS)
@given(scenarios("time"))
def test_sketch_rows_are_the_same_with_and_without_batch_cells(scenario):
    """The same rows, byte for byte, whether the sketches are built from the batch's cells
    or from the rows split by pane (the GPU's way, and the CPU's where panes spread)."""
    same_with_and_without(scenario, sketch_windows, "batch_cells", None)


@settings(max_examples=25, **SETTINGS)
@given(scenarios("time"))
def test_sketch_rows_are_the_same_with_and_without_the_register_table(scenario):
    """The same rows, byte for byte, whether HLL registers are raised in the batch's (pane,
    key) table (`batch_sketches`) or built over the cells `batch_cells` numbers."""
    same_with_and_without(scenario, sketch_windows, "batch_sketches", lambda *_, **__: None)


@pytest.mark.parametrize(
    ("pane_low", "pane_high", "keys", "hint"),
    [
        (3, 9, 11, (3, 9)),  # the range given
        (3, 9, 11, None),  # measured
        (3, 9, 11, (5, 9)),  # a wrong hint: measured
        (7, 7, 5, (7, 7)),  # one pane, every key: a view of the table
        (0, 40, 60, (0, 40)),  # more cells than rows: declined
    ],
)
@pytest.mark.parametrize("argument", [SqlType.DOUBLE, SqlType.BIGINT])
def test_batch_sketches_equal_the_build_over_numbered_cells(
    pane_low, pane_high, keys, hint, argument
):
    panes, slots, values, keep = _batch(8, 2000, pane_low, pane_high, keys)
    if argument is SqlType.DOUBLE:
        values = order_keys(values.astype(np.float64) / 7.0)
    got = sketch_windows.batch_sketches(
        "approx_count_distinct", panes, slots, values, keep, keys, argument, 0.05, 1 << 26, hint
    )
    cells = sketch_windows.batch_cells(panes, slots, keep, keys, 10**9)
    if (pane_high - pane_low + 1) * keys > len(panes):
        assert got is None
        return
    pane_ids, pane_slots, parts = got
    built = sketch_windows.build(
        "approx_count_distinct", cells[2], cells[3], values, argument, 0.05, valid=keep
    )
    assert pane_ids == cells[0]
    at = 0
    for got_slots, want_slots, part in zip(pane_slots, cells[1], parts, strict=True):
        assert np.array_equal(got_slots, want_slots)
        want = built.registers[at : at + len(want_slots)]
        assert np.array_equal(part.registers, want)
        at += len(want_slots)
    assert at == cells[3]
    none = sketch_windows.batch_sketches(
        "approx_percentile", panes, slots, values, keep, keys, argument, 100, 1 << 26, hint
    )
    assert none is None  # GK summaries: numbered cells
    nothing = np.zeros(len(panes), np.bool_)
    assert (  # no key met yet (a batch whose every row fails WHERE): numbered cells
        sketch_windows.batch_sketches(
            "approx_count_distinct", panes, slots, values, nothing, 0, argument, 0.05, 1, hint
        )
        is None
    )
    with pytest.raises(ValueError, match="slots"):
        sketch_windows.batch_sketches(
            "approx_count_distinct",
            panes,
            slots + keys,
            values,
            keep,
            keys,
            argument,
            0.05,
            1 << 26,
            hint,
        )


def _raw_values(argument: SqlType, rows: int, seed: int) -> np.ndarray:
    """An argument's values as `lift_arguments` hands them over (float64 for a floating
    argument, else int64), with ties, -0.0 beside 0.0, NaNs of several payloads and the
    infinities for the floating ones."""
    rng = np.random.default_rng(seed)
    if not argument.is_floating:
        return rng.integers(-50, 50, rows).astype(np.int64)
    values = rng.integers(-50, 50, rows) / 4.0
    if argument is SqlType.FLOAT:
        values = values.astype(np.float32).astype(np.float64)
    nans = np.array([0x7FF8000000000000, 0xFFF8000000000001, 0x7FF0000000000123], np.uint64)
    special = np.concatenate([nans.view(np.float64), [-0.0, 0.0, np.inf, -np.inf]])
    chosen = rng.random(rows) < 0.2
    values[chosen] = special[rng.integers(0, len(special), int(chosen.sum()))]
    return values


@pytest.mark.parametrize(
    "argument", [SqlType.DOUBLE, SqlType.FLOAT, SqlType.BIGINT, SqlType.INT, SqlType.BOOLEAN]
)
def test_raw_values_build_the_sketches_of_their_order_keys(argument):
    """A field only sketches read reaches them as the argument's raw values (`raw`: the
    CPU's holistic driver lifts no order keys for it): HLL registers (the register table
    and the numbered cells' build) and GK summaries equal those built from the order keys,
    -0.0 counting as 0.0 and every NaN as one."""
    panes, slots, _, keep = _batch(9, 3000, 2, 6, 13)
    values = _raw_values(argument, len(panes), 9)
    if argument is SqlType.BOOLEAN:
        values = values & 1
    keys = order_keys(values)
    table = [
        sketch_windows.batch_sketches(
            "approx_count_distinct", panes, slots, v, keep, 13, argument, 0.05, 1 << 26, (2, 6), raw
        )
        for v, raw in ((keys, False), (values, True))
    ]
    assert table[0][0] == table[1][0]
    for want, got in zip(table[0][2], table[1][2], strict=True):
        assert np.array_equal(want.registers, got.registers)
    cells = sketch_windows.batch_cells(panes, slots, keep, 13, 10**9)
    for evaluation, parameter in (("approx_count_distinct", 0.05), ("approx_percentile", 100)):
        want, got = (
            sketch_windows.build(
                evaluation, cells[2], cells[3], v, argument, parameter, valid=keep, raw=raw
            )
            for v, raw in ((keys, False), (values, True))
        )
        assert sketch_windows.to_bytes(want) == sketch_windows.to_bytes(got)


@pytest.mark.parametrize("p", [4, 9, 12])
def test_merged_estimates_equal_the_estimates_of_the_merged_sets(p):
    """A window's answer straight from its sets' maxima equals the estimate of the merged
    register sets (groups of none, one and several members, across several arrays)."""
    rng = np.random.default_rng(p)
    m = 1 << p
    sets = [
        np.minimum(rng.geometric(0.4, (cells, m)), 64 - p + 1).astype(np.uint8)
        for cells in (3, 1, 5)
    ]
    sets[1][:] = 0  # an empty register set: estimate 0
    sizes = rng.integers(0, 4, 40)
    members = rng.integers(0, 9, int(sizes.sum())).astype(np.int64)
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    got = sketch_hll.merged_estimates(sets, members, offsets, p)
    merged = sketch_hll.merge_groups(np.concatenate(sets), members, offsets)
    assert np.array_equal(got, hll_estimate(sketch_hll.histograms(merged, p), p))
    assert np.array_equal(sketch_hll.estimate(merged, p), got)
    with pytest.raises(ValueError, match="cell"):
        sketch_hll.merged_estimates(sets, np.array([9]), np.array([0, 1]), p)


@pytest.mark.parametrize("p", [4, 9, 18])
def test_merged_estimates_are_the_histograms_estimate_past_the_exact_sum(p):
    """The estimates are `hll_estimate`'s of the histograms bit for bit on every path of
    `merged_estimates`: sums taken exactly in integers, groups with registers above the cap
    where that sum is exact (their float sum comes from their histograms), groups in Ertl's
    band, registers at the largest value 65 - p."""
    rng = np.random.default_rng(100 + p)
    m = 1 << p
    cap = 53 - p
    sets = [np.minimum(rng.geometric(0.5, (cells, m)), 65 - p).astype(np.uint8) for cells in (4, 3)]
    sets[0][1, rng.integers(0, m, 3)] = rng.integers(cap + 1, 66 - p, 3)  # past the cap
    sets[0][2, rng.integers(0, m, 2)] = 65 - p  # the largest register value
    sets[1][0] = 0
    sets[1][0, rng.integers(0, m, 5)] = 1  # a few values: linear counting
    sets[1][1] = rng.choice([0, 1, 2], m, p=[0.1, 0.6, 0.3])  # Ertl's band
    sets[1][2, : m // 2] = cap  # at the cap: still summed in integers
    sizes = rng.integers(0, 4, 60)
    members = rng.integers(0, 7, int(sizes.sum())).astype(np.int64)
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    members = np.concatenate((members, np.arange(7)))  # each set alone too
    offsets = np.concatenate((offsets, offsets[-1] + np.arange(1, 8)))
    got = sketch_hll.merged_estimates(sets, members, offsets, p)
    merged = sketch_hll.merge_groups(np.concatenate(sets), members, offsets)
    want = hll_estimate(sketch_hll.histograms(merged, p), p)
    assert np.array_equal(got, want)
    assert (merged.max(axis=1) > cap).any() and (merged.max(axis=1) == cap).any()


@pytest.mark.parametrize("p", [4, 9, 12])
def test_band_estimates_from_the_exact_sums_are_the_histograms_estimates(p):
    """In Ertl's band (raw estimate 2.5m .. 5m) a group whose registers stay at or below the
    cap is finished from its exact sum and zero count, no histogram (`hll_estimate_of_sums`'s
    `exact`); the estimate is `hll_estimate`'s of the histogram bit for bit, over
    cardinalities through the band and on both sides of it, with a register past the cap in
    some groups (those still take the histogram)."""
    m = 1 << p
    rng = np.random.default_rng(300 + p)
    cardinalities = np.linspace(2 * m, 6 * m, 60).astype(np.int64)
    cells = np.repeat(np.arange(60), cardinalities)
    registers = sketch_hll.build(cells, 60, rng.random(len(cells)), None, SqlType.DOUBLE, p)
    registers[::7, 0] = 53 - p + 1  # past the cap
    counts = sketch_hll.histograms(registers, p)
    raw = hll_alpha_m2(p) / (counts * 2.0 ** -np.arange(counts.shape[1])).sum(axis=1)
    band = (raw > 2.5 * m) & (raw < 5 * m)
    assert band.sum() >= 10 and (band & (registers.max(axis=1) <= 53 - p)).any()
    got = sketch_hll.estimate(registers, p)
    assert np.array_equal(got, hll_estimate(counts, p))
    halves = np.arange(60, dtype=np.int64)  # each with itself: the two-member group path
    members = np.stack([halves, halves + 60], axis=1).reshape(-1)
    offsets = np.arange(0, 121, 2, dtype=np.int64)
    pair = sketch_hll.merged_estimates([registers, registers], members, offsets, p)
    assert np.array_equal(pair, got)


def test_merge_pair_equals_the_merge_of_the_concatenated_sets():
    rng = np.random.default_rng(7)
    first, second = (rng.integers(0, 20, (cells, 16)).astype(np.uint8) for cells in (3, 4))
    sizes = rng.integers(0, 4, 30)
    members = rng.integers(0, 7, int(sizes.sum())).astype(np.int64)
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    got = sketch_hll.merge_pair(first, second, members, offsets)
    want = sketch_hll.merge_groups(np.concatenate((first, second)), members, offsets)
    assert np.array_equal(got, want)
    with pytest.raises(ValueError, match="cell"):
        sketch_hll.merge_pair(first, second, np.array([7]), np.array([0, 1]))


def test_batch_cells_take_a_pane_range_and_check_it():
    panes, slots, _, keep = _batch(6, 2000, 3, 9, 11)
    want = sketch_windows.batch_cells(panes, slots, keep, 11, 10**9)
    assert want is not None
    for hint in ((3, 9), (0, 12), (5, 9), (4, 20), (-(10**9), 10**9)):  # right, wide, wrong
        got = sketch_windows.batch_cells(panes, slots, keep, 11, 10**9, hint)
        assert got is not None and got[0] == want[0] and got[3] == want[3]
        assert all(np.array_equal(g, w) for g, w in zip(got[1], want[1], strict=True))
        assert np.array_equal(got[2], want[2])
