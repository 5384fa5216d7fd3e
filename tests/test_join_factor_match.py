"""The factorised join's match over both sides' fired grids (`CpuJoinKernels.match_cells`,
`unseen_groups`): every (window, key id) with rows on both sides, read in place from (window,
key slot) grids, dense or sparse (runs of windows of different widths, windows out of order,
NULL keys, empty cells), in (window, group) order; and the matched key ids without a group,
first met first. Checked against a plain Python walk."""

from __future__ import annotations

import numpy as np

from mangonel.runtime.cpu.join import CpuJoinKernels


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


def test_match_cells_pairs_every_window_and_key_both_sides_hold():
    rng = np.random.default_rng(4)
    n_ids = 40
    left_ids = rng.permutation(n_ids)[:30].astype(np.int64)
    left_ids[[3, 17]] = -1  # NULL keys
    right_ids = rng.permutation(n_ids)[:35].astype(np.int64)
    # out of order, narrower runs, dense and sparse entries on both sides
    left = _grid(rng, [5, 2, 3, 9, 7, 8], [30, 30, 12, 30, 25, 30], {1, 4})
    right = _grid(rng, [2, 3, 4, 5, 7, 9, 8], [35, 20, 35, 35, 35, 10, 35], {0, 3, 6})
    group_of_id = rng.permutation(n_ids).astype(np.int64)
    order = np.argsort(np.where(left_ids >= 0, group_of_id[left_ids], -1), kind="stable")
    kernels = CpuJoinKernels()
    li, ri, windows, groups = kernels.match_cells(
        left, left_ids, right, right_ids, n_ids, group_of_id, order
    )
    on_left, on_right = _cells(left, left_ids), _cells(right, right_ids)
    want = sorted(
        (window, int(group_of_id[key]), cell, on_right[(window, key)][0])
        for (window, key), (cell, _) in on_left.items()
        if (window, key) in on_right
    )
    assert len(want) > 10
    assert list(zip(windows, groups, li, ri, strict=True)) == want  # (window, group) order

    # the matched ids without a group: first met, window then left slot
    group_of_id[group_of_id % 2 == 0] = -1
    unseen = kernels.unseen_groups(left, left_ids, right, right_ids, n_ids, group_of_id)
    met = []
    for (window, key), _ in sorted(on_left.items(), key=lambda c: (c[0][0], c[1][1])):
        if (window, key) in on_right and group_of_id[key] < 0 and key not in met:
            met.append(key)
    assert len(met) > 3 and unseen.tolist() == met
