"""A join's rows on arrival: `JoinKernels.window_ranges` (one pass for the window ranges, the
late count and the largest time) against the formulas of docs/semantics.md written out in
NumPy, and `Grow` (the stored rows' arrays, freed from the front in place) against a list."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mangonel.runtime.cpu.join import CpuJoinKernels
from mangonel.runtime.operators.join_sides import Grow

LARGE = 1 << 18  # rows: a batch as the benchmarks send them


def _by_formula(ts, has_ts, size, slide, closed):  # noqa: ANN001, ANN202
    origin = (ts - size) // slide + 1  # the first window covering t: k*s + w > t
    last = ts // slide  # the last: k*s <= t
    first = np.maximum(origin, closed + 1)
    keep = has_ts & (first <= last)
    top = int(ts[has_ts].max()) if has_ts.any() else None
    return keep, first[keep], last[keep], origin[keep], int((has_ts & ~keep).sum()), top


@settings(max_examples=200, deadline=None)
@given(
    times=st.lists(st.integers(-(10**6), 10**6), max_size=60),
    nulls=st.lists(st.booleans(), max_size=60),
    size=st.integers(1, 5000),
    slides=st.integers(1, 20),
    closed=st.one_of(st.just(-(2**62)), st.integers(-1000, 1000)),
)
def test_window_ranges_are_the_formulas(times, nulls, size, slides, closed):
    ts = np.asarray(times, np.int64)
    has_ts = np.ones(len(ts), np.bool_)
    has_ts[: len(nulls)] = ~np.asarray(nulls[: len(ts)], np.bool_)
    slide = max(1, size // slides)  # sliding, tumbling, and slides not dividing the size
    got = CpuJoinKernels().window_ranges(ts, has_ts, size, slide, closed)
    want = _by_formula(ts, has_ts, size, slide, closed)
    for g, w in zip(got[:4], want[:4], strict=True):
        assert np.array_equal(g, w)
    assert got[4:] == want[4:]


@pytest.mark.parametrize("size, slide", [(700_000, 300_000), (1_000_000, 10_000)])
def test_window_ranges_of_a_large_batch(size, slide):
    """A large batch: compaction, late rows, NULL times, the largest time."""
    rng = np.random.default_rng(size)
    ts = rng.integers(-(10**7), 10**7, LARGE).astype(np.int64)
    has_ts = rng.random(len(ts)) > 0.1
    got = CpuJoinKernels().window_ranges(ts, has_ts, size, slide, 5)
    want = _by_formula(ts, has_ts, size, slide, 5)
    for g, w in zip(got[:4], want[:4], strict=True):
        assert np.array_equal(g, w)
    assert got[4:] == want[4:] and want[4] > 0


def test_window_ranges_of_a_batch_without_times():
    ts = np.zeros(3, np.int64)
    keep, first, last, origin, late, top = CpuJoinKernels().window_ranges(
        ts, np.zeros(3, np.bool_), 10, 5, -(2**62)
    )
    assert not keep.any() and len(first) == len(last) == len(origin) == 0
    assert late == 0 and top is None


@pytest.mark.parametrize("width", [0, 3])
def test_grow_is_a_queue_of_rows(width):
    rng = np.random.default_rng(width)
    grow = Grow(np.int64 if not width else np.uint8, width)
    model: list = []
    counter = 0
    peak = 0
    for _ in range(400):
        if rng.random() < 0.55:
            count = int(rng.integers(0, 300))
            values = np.arange(counter, counter + count) % 251
            counter += count
            rows = values if not width else np.repeat(values[:, None], width, axis=1)
            grow.extend(rows.astype(grow.data.dtype))
            model.extend(rows.tolist())
        else:
            count = int(rng.integers(0, len(model) + 2))
            grow.drop_front(count)
            del model[:count]
        peak = max(peak, len(model))
        assert grow.size == len(model)
        assert grow.view.tolist() == model
        assert len(grow.data) <= max(64, 2 * peak)  # bounded by the most rows ever live
    grow.clear()
    assert grow.size == 0 and grow.view.shape[0] == 0


def test_grow_takes_rows_written_into_its_room_without_a_copy():
    grow = Grow()
    grow.extend(np.arange(10))
    grow.drop_front(4)
    room = grow.reserve(100)  # may move the live rows first: they stay the view's prefix
    room[:] = np.arange(100, 200)
    address = grow.data.ctypes.data
    grow.extend(room)
    assert grow.data.ctypes.data == address  # nothing moved or copied
    assert grow.view.tolist() == [*range(4, 10), *range(100, 200)]
    other = np.arange(7)  # an array of its own is copied in
    grow.extend(other)
    other[:] = -1
    assert grow.view.tolist()[-7:] == list(range(7))


@pytest.mark.parametrize("mine_is_left", [True, False])
@pytest.mark.parametrize("pairs", [0, 7, LARGE])
def test_pair_ranges_are_the_ids_and_the_shared_windows(mine_is_left, pairs):
    """`pair_ranges` (one pass over the matched pairs) against the NumPy it replaces, written
    into given arrays (the pending pairs' room) or new ones."""
    rng = np.random.default_rng(pairs)
    first, their_first = rng.integers(-50, 50, 300), rng.integers(-50, 50, 200)
    last, their_last = first + rng.integers(0, 9, 300), their_first + rng.integers(0, 9, 200)
    mine, theirs = rng.integers(0, 300, pairs), rng.integers(0, 200, pairs)
    mine_ids, their_ids = mine + 1000, theirs + 77
    want = (
        mine_ids if mine_is_left else their_ids,
        their_ids if mine_is_left else mine_ids,
        np.maximum(first[mine], their_first[theirs]),
        np.minimum(last[mine], their_last[theirs]),
    )
    kernels = CpuJoinKernels()
    arguments = (mine, theirs, first, last, their_first, their_last, (1000, 77, mine_is_left))
    room = tuple(np.full(pairs, -9, np.int64) for _ in range(4))
    for out in (None, room):
        got = kernels.pair_ranges(*arguments, out)
        for g, w in zip(got, want, strict=True):
            assert np.array_equal(g, w)
    assert all(r is g for r, g in zip(room, kernels.pair_ranges(*arguments, room), strict=True))
