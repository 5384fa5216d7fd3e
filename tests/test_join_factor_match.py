"""The factorised join's combine over both sides' fired grids (`CpuJoinKernels.combine_cells`,
`unseen_groups`): every (window, key id) with rows on both sides, read in place from (window,
key slot) grids, dense or sparse (runs of windows of different widths, windows out of order,
NULL keys, empty cells), in window order and, inside a window, in the key slot order of the
side whose values the ops read more (the left on a tie), with its window bounds and every
output part (products wrapping mod 2^64, doubles, values as they are); and the matched key
ids without a group, first met first. Checked against a plain Python walk."""

from __future__ import annotations

import numpy as np

from mangonel.runtime.cpu.join import CpuJoinKernels
from mangonel.runtime.operators.join_kernels import LEFT, LEFT_SCALED, RIGHT, RIGHT_SCALED, ROWS


def _grid(rng: np.random.Generator, windows: list[int], widths: list[int], sparse: set[int]):  # noqa: ANN202
    """Window entries of `widths` key slots, some cells without rows; the entries in
    `sparse` keep only their cells with rows, with their slots."""
    starts, cell_widths, slot_starts, slots, rows = [], [], [], [], []
    cells = taken = 0
    for entry, width in enumerate(widths):
        counts = rng.integers(0, 3, width) * (rng.random(width) < 0.7)
        if entry in sparse:
            kept = np.flatnonzero(counts > 0)
            slot_starts.append(taken)
            slots.append(kept)
            taken += len(kept)
            counts = counts[kept]
        else:
            slot_starts.append(-1)
        starts.append(cells)
        cell_widths.append(len(counts))
        rows.append(counts)
        cells += len(counts)
    arrays = (windows, starts, cell_widths, slot_starts)
    return (
        *(np.array(a, np.int64) for a in arrays),
        np.concatenate(slots).astype(np.int64) if slots else np.zeros(0, np.int64),
        np.concatenate(rows).astype(np.int64),
    )


def _cells(grid, ids):  # noqa: ANN001, ANN202
    """{(window, id): (cell, slot)} of a grid's cells with rows and a key."""
    windows, starts, widths, slot_starts, slots, rows = grid
    out = {}
    for window, start, width, at in zip(windows, starts, widths, slot_starts, strict=True):
        for s in range(width):
            slot = s if at < 0 else slots[at + s]
            if rows[start + s] > 0 and ids[slot] >= 0:
                out[(int(window), int(ids[slot]))] = (int(start + s), int(slot))
    return out


def test_combine_cells_writes_every_window_and_key_both_sides_hold():
    rng = np.random.default_rng(4)
    n_ids = 40
    left_ids = rng.permutation(n_ids)[:30].astype(np.int64)
    left_ids[[3, 17]] = -1  # NULL keys
    right_ids = rng.permutation(n_ids)[:35].astype(np.int64)
    # out of order, narrower runs, dense and sparse entries on both sides; a window held
    # densely by one entry on each side (3, 9) takes the kernel's slot-pairs path
    left = _grid(rng, [5, 2, 3, 9, 7, 8], [30, 30, 12, 30, 25, 30], {1, 4})
    right = _grid(rng, [2, 3, 4, 5, 7, 9, 8], [35, 20, 35, 35, 35, 10, 35], {0, 3, 6})
    group_of_id = rng.permutation(n_ids).astype(np.int64)
    n_left, n_right = len(left[5]), len(right[5])
    # a left int64 sum near 2^63 (its products wrap), a right double sum, MIN/MAX values
    left_values = (rng.integers(2**62, 2**63 - 1, n_left), rng.normal(size=n_left))
    right_values = (rng.normal(size=n_right), rng.integers(-9, 9, n_right))
    ops = ((ROWS, 0), (LEFT_SCALED, 0), (RIGHT_SCALED, 0), (LEFT, 1), (RIGHT, 1))
    size, slide = 1000, 10
    kernels = CpuJoinKernels()

    def combine(right_ids, group_values, ops):  # noqa: ANN001, ANN202
        return kernels.combine_cells(
            left,
            left_ids,
            right,
            right_ids,
            n_ids,
            group_of_id,
            group_values,
            left_values,
            right_values,
            ops,
            size,
            slide,
        )

    slots = np.arange(n_ids, dtype=np.int64)  # the group slots themselves
    start, end, groups, parts = combine(right_ids, slots, ops)
    on_left, on_right = _cells(left, left_ids), _cells(right, right_ids)
    want, left_slots, right_slots = [], [], []
    for (window, key), (lc, left_slot) in on_left.items():
        if (window, key) not in on_right:
            continue
        rc, right_slot = on_right[(window, key)]
        n_l, n_r = int(left[5][lc]), int(right[5][rc])
        wrapped = (int(left_values[0][lc]) * n_r + 2**63) % 2**64 - 2**63
        values = (n_l * n_r, wrapped, right_values[0][rc] * n_l)
        values += (left_values[1][lc], int(right_values[1][rc]))
        want.append((window * slide, window * slide + size, int(group_of_id[key]), *values))
        left_slots.append(left_slot)
        right_slots.append(right_slot)
    # the ops read two values of each side: the left drives, its slots in order per window
    want_unordered = want
    by_left = np.lexsort((left_slots, [row[0] for row in want]))
    want = [want[k] for k in by_left]
    assert len(want) > 10
    assert parts[1].dtype == np.int64 and parts[2].dtype == np.float64
    columns = (start, end, groups, *parts)
    got = list(zip(*(c.tolist() for c in columns), strict=True))
    assert got == want

    # a group column's values written in its dtype (an INT join key)
    key_of_group = rng.integers(-(2**31), 2**31 - 1, n_ids).astype(np.int32)
    keyed = combine(right_ids, key_of_group, ops)
    assert keyed[2].dtype == np.int32
    assert keyed[2].tolist() == [int(key_of_group[row[2]]) for row in want]

    # ops reading the right side more: the right drives, its slots in order per window; the
    # same products of the same operands (a double times a count commutes exactly)
    right_ops = ((RIGHT_SCALED, 0), (ROWS, 0), (RIGHT, 1), (LEFT_SCALED, 0))
    driven = combine(right_ids, slots, right_ops)
    by_right = np.lexsort((right_slots, [row[0] for row in want_unordered]))
    want_right = [
        (*want_unordered[k][:3], want_unordered[k][5], want_unordered[k][3])
        + (want_unordered[k][7], want_unordered[k][4])
        for k in by_right
    ]
    assert [p.dtype for p in driven[3]] == [np.float64, np.int64, np.int64, np.int64]
    got_right = list(zip(*(c.tolist() for c in (*driven[:3], *driven[3])), strict=True))
    assert got_right == want_right
    assert by_right.tolist() != by_left.tolist()  # the two orders differ here

    # nothing in common: empty columns of the ops' types
    none = combine(np.full(len(right_ids), -1, np.int64), slots, ops)
    assert len(none[0]) == 0 and [p.dtype for p in none[3]] == [p.dtype for p in parts]

    # the matched ids without a group: first met, window then left slot
    group_of_id[group_of_id % 2 == 0] = -1
    unseen = kernels.unseen_groups(left, left_ids, right, right_ids, n_ids, group_of_id)
    met = []
    for (window, key), _ in sorted(on_left.items(), key=lambda c: (c[0][0], c[1][1])):
        if (window, key) in on_right and group_of_id[key] < 0 and key not in met:
            met.append(key)
    assert len(met) > 3 and unseen.tolist() == met


def test_streaming_stores_write_each_dtype_as_a_plain_store_would():
    """`intrinsics.store_streaming` (the combine's result columns): the value cast to the
    array's dtype (a float's bits stored as an integer's), at the index given, as
    `array[index] = value` writes it; and the kernel's columns are read back right after
    its `streaming_fence`."""
    import numba

    from mangonel.runtime.cpu.intrinsics import store_streaming, streaming_fence

    @numba.njit
    def write(out, values, order):
        for k in range(order.shape[0]):
            store_streaming(out, order[k], values[k])
        streaming_fence()

    @numba.njit
    def plain(out, values, order):
        for k in range(order.shape[0]):
            out[order[k]] = values[k]

    rng = np.random.default_rng(7)
    order = rng.permutation(1000).astype(np.int64)
    sources = (
        rng.integers(-(2**63), 2**63 - 1, 1000),
        rng.normal(size=1000),
        rng.integers(0, 2**32 - 1, 1000).astype(np.uint32),
        rng.integers(-100, 100, 1000).astype(np.int32),
    )
    for values in sources:
        for dtype in (values.dtype, np.float64, np.float32, np.int64):
            got, want = np.zeros(1000, dtype), np.zeros(1000, dtype)
            write(got, values, order)
            plain(want, values, order)
            assert got.tobytes() == want.tobytes(), (values.dtype, dtype)
