"""The CPU stage-1 numbering of (key slot, pane) pairs: the direct table (`dense_pairs`, a
partition whose panes span a short range) numbers pairs exactly as the hash table of pairs
does (first-seen order, -1 for excluded rows), so partials come out in the same order."""

from __future__ import annotations

import numpy as np

from mangonel.catalog.types import SqlType
from mangonel.runtime.cpu import aggregate as agg
from mangonel.runtime.cpu.kernels import CpuKernels
from mangonel.runtime.cpu.keys import KeyTable, first_rows


def hashed(slots: np.ndarray, panes: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    pairs = KeyTable((SqlType.BIGINT, SqlType.BIGINT))
    rows = np.zeros((3, len(slots)), np.int64)
    rows[0], rows[1] = slots, panes
    index = pairs.map_rows(rows, slots >= 0)
    return index, first_rows(index, pairs.n_slots), pairs.n_slots


def test_dense_pairs_number_as_the_hash_table_does():
    rng = np.random.default_rng(3)
    slots = rng.integers(-1, 50, 20_000).astype(np.int64)  # -1: rows WHERE dropped
    panes = rng.integers(-5, 40, 20_000).astype(np.int64) + 1_700_000_000  # out of order
    panes[slots < 0] = -(2**62)  # an excluded row's pane is never read
    index, first, count = agg.dense_pairs(slots, panes, int(panes[slots >= 0].min()), 45)
    expected = hashed(slots, panes)
    assert count == expected[2] and count > 1000
    np.testing.assert_array_equal(index, expected[0])
    np.testing.assert_array_equal(first, expected[1])
    # the kernels pick the table where it is dense, the hash table where it is not
    for spread in (1, 10**9):
        sparse = panes * spread
        got = CpuKernels._number_pairs(slots, sparse)
        want = hashed(slots, sparse)
        for a, b in zip(got[:2], want[:2], strict=True):
            np.testing.assert_array_equal(a, b)
        assert got[2] == want[2]


def test_no_included_row_gives_no_pairs():
    slots = np.full(4, -1, np.int64)
    index, first, count = CpuKernels._number_pairs(slots, np.zeros(4, np.int64))
    assert count == 0 and (index == -1).all() and len(first) == 0
