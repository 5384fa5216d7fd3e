"""Sliding windows of counts and integer sums by differences, used instead of the aggregation
tree where windows overlap and every part is an int64 added mod 2^64: `sliding_sums` (tasks,
`cpu.kernels._run_trees`: contiguous leaves of count windows, or strided ones) and
`sliding_sums_runs` (`CpuPaneState.windows`: runs of windows of every key of the pane-major
state, a row of keys at a time) give the same cells as the tree, values near the int64 limits
wrapping as the tree's do; `sliding_sums_runs` also over the state's ring of pane rows, runs
wrapping around its end, and from the sums of the window one slide before (carried from the
firing before)."""

from __future__ import annotations

import numpy as np
import pytest

from mangonel.aggregates import state_kind
from mangonel.runtime.cpu.aggregate import sliding_sums, sliding_sums_runs
from mangonel.runtime.cpu.generated import kind_kernels

KEYS = 37
RUNS = [(0, 5), (9, 1), (3, 11)]  # strided: (first pane, windows) of every key


def _tasks(rng: np.random.Generator, strided: bool, pps: int, ppw: int):  # noqa: ANN202
    """Leaves and tasks as `CpuPaneState.windows` (strided: runs of windows over every key)
    or `tree_over_segments` (contiguous: a segment per task) lay them out."""
    if strided:
        keys, key_capacity, runs = KEYS, 40, RUNS
        panes = max(p + ppw + (n - 1) * pps for p, n in runs) + 2
        leaves = rng.integers(-(2**62), 2**62, panes * key_capacity) * 2  # sums wrap
        leaves[rng.random(len(leaves)) < 0.3] = 0
        base, windows, out_at, offset = [], [], [], 0
        for first, count in runs:
            base.append(first * key_capacity + np.arange(keys))
            windows.append(np.full(keys, count))
            out_at.append(offset * keys + np.arange(keys))
            offset += count
        size = offset * keys
        stride = np.full(len(runs) * keys, keys)
        return leaves, key_capacity, base, windows, out_at, stride, size
    counts = rng.integers(0, 9, 12)
    lengths = np.where(counts > 0, ppw + (counts - 1) * pps, 0)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    leaves = rng.integers(-(2**62), 2**62, int(lengths.sum()) + 1) * 2
    out_at = np.concatenate([[0], np.cumsum(counts)[:-1]])
    return leaves, 1, [starts], [counts], [out_at], np.ones(12), int(counts.sum())


@pytest.mark.parametrize("strided", [True, False])
@pytest.mark.parametrize(("pps", "ppw"), [(1, 100), (2, 5), (3, 7), (1, 2)])
def test_sliding_sums_equal_the_tree(strided: bool, pps: int, ppw: int) -> None:
    rng = np.random.default_rng(pps * 100 + ppw)
    leaves, leaf_stride, base, windows, out_at, stride, size = _tasks(rng, strided, pps, ppw)
    arrays = [np.concatenate(a).astype(np.int64) for a in (base, windows, out_at)]
    stride = stride.astype(np.int64)
    got = np.full(size, 0, np.int64)
    sliding_sums(leaves, leaf_stride, *arrays, stride, pps, ppw, got)
    want = np.full(size, 0, np.int64)
    tree = kind_kernels(state_kind("count")).tree_windows
    tree(leaves, np.int64(0), leaf_stride, *arrays, stride, pps, ppw, 4, want)
    assert size > 20 and np.array_equal(got, want)
    assert (np.abs(got) > 2**62).any()  # sums that wrapped around
    if strided:  # the same runs over every key, as the pane-major state takes them
        columns, counts = (np.array(r, np.int64) for r in zip(*RUNS, strict=True))
        by_runs = np.empty(size, np.int64)
        acc = np.zeros(KEYS, np.int64)
        sliding_sums_runs(
            leaves, leaf_stride, -1, KEYS, columns, counts, pps, ppw, acc, False, by_runs
        )
        assert np.array_equal(by_runs, want)
        # the last run's last window is left in acc: a run one slide later steps from it
        last = RUNS[-1][0] + (RUNS[-1][1] - 1) * pps
        assert np.array_equal(acc, want[-KEYS:])
        more = np.empty(2 * KEYS, np.int64)
        extended = np.concatenate([leaves, np.zeros(3 * pps * leaf_stride, np.int64)])
        step = (np.array([last + pps]), np.array([2]))
        sliding_sums_runs(extended, leaf_stride, -1, KEYS, *step, pps, ppw, acc, True, more)
        fresh = np.empty(2 * KEYS, np.int64)
        zeros = np.zeros(KEYS, np.int64)
        sliding_sums_runs(extended, leaf_stride, -1, KEYS, *step, pps, ppw, zeros, False, fresh)
        assert np.array_equal(more, fresh)
        # the same rows in a ring (`CpuPaneState`: pane column c at row c & mask), turned so
        # that every run wraps around the ring's end or starts past it
        rows = leaves.reshape(-1, leaf_stride)
        capacity = 1 << (len(rows) - 1).bit_length()
        for shift in (capacity - 3, capacity - 1, 5):
            ring = np.zeros((capacity, leaf_stride), np.int64)
            ring[(np.arange(len(rows)) + shift) % capacity] = rows
            in_ring = np.empty(size, np.int64)
            sliding_sums_runs(
                ring.reshape(-1), leaf_stride, capacity - 1, KEYS, columns + shift, counts,
                pps, ppw, np.zeros(KEYS, np.int64), False, in_ring,
            )  # fmt: skip
            assert np.array_equal(in_ring, want), shift
