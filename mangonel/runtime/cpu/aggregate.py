"""numba kernels: scatter partials into state, and windows over a batched pane aggregation tree.

Scatter and the tree themselves are generic over the state kind, built once per kind from its
scalar combine (`mangonel.runtime.cpu.generated.kind_kernels`); this module holds their helpers
and the kind-independent kernels.

Scatter: `target[index[i]] = target[index[i]] (+) values[i]` for every i with index >= 0 — the
pane pre-aggregation of one batch straight into the flat pane-major `[panes x keys]` state
(one pass per state field, no sort), or into the partial rows of one batch (Spark's stage 1).

Windows: SPRINGALD's B-PAT (section V-B). A task is a run of consecutive windows of one key
whose leaves lie `leaf_stride` apart in a flat leaf array (window i of the task starts at
leaf `base + i * panes_per_slide * leaf_stride` and spans `panes_per_window` leaves). For
every `windows_per_batch` windows the kernel builds the tree levels over the
`m = n + (n_w - 1) * s_p` leaves they need, in the flat layout (level 0 = leaves, then each
level's nodes after the previous level's), up to level floor(log2 n) only, then answers each
window by the greedy aligned decomposition of Fig. 11: O(log n) combines per window, no
subtraction (exact for MIN/MAX, stable for floats).

Sliding windows (panes_per_window > panes_per_slide) skip the tree:
- an int64 part combined by addition mod 2^64 (the kinds flagged `invertible`: counts,
  integer sums; `sliding_sums`, `sliding_sums_runs`): a task's first window sums its leaves,
  each next one adds the `panes_per_slide` leaves entering and subtracts those leaving, so a
  window costs 2 x panes_per_slide reads whatever `panes_per_window` (w/s = 100: 2 reads where
  the tree combines about 12 nodes), and the result is the same residue mod 2^64;
- every other kind (floating sums, MIN/MAX, moments, ...; `block_windows`, `block_runs` of
  `generated.py`), without subtracting: the leaves in blocks of `panes_per_window`, each
  block's prefixes (from its first leaf) and suffixes (to its last), a window the suffix of
  the block it starts in combined with the prefix of the next one up to its last leaf (van
  Herk / Gil-Werman): 3 combines a window at w/s = 100. Combines stay left to right, so
  MIN/MAX and integer results are those of the tree; a floating sum is associated
  otherwise (within rounding, as docs/semantics.md allows).
The pane-major state's windows are runs of windows over every key (`*_runs`): walked a row
of keys at a time, so each pass reads and writes contiguous cells.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True)
def _level_layout(m, top):
    """Offsets of levels 0..top in the flat tree of m leaves (level l has m >> l full nodes)."""
    offsets = np.empty(top + 2, np.int64)
    offsets[0] = 0
    for level in range(top + 1):
        offsets[level + 1] = offsets[level] + (m >> level)
    return offsets


@numba.njit(cache=True)
def _top_level(panes_per_window):
    top = 0
    while (2 << top) <= panes_per_window:
        top += 1
    return top


@numba.njit(cache=True)
def occupied_panes(rows, key_capacity, ring_mask, n_keys, first_column, end_column):
    """Which pane columns in [first_column, end_column) of the pane ring (column c at row
    c & ring_mask, rows `key_capacity` cells apart) hold a tuple."""
    occupied = np.zeros(end_column - first_column, np.bool_)
    for column in range(first_column, end_column):
        row = (column & ring_mask) * key_capacity
        for key in range(n_keys):
            if rows[row + key] != 0:
                occupied[column - first_column] = True
                break
    return occupied


@numba.njit(cache=True)
def flat_index(slots, panes, base, ring_mask, key_capacity):
    """((pane - base) & ring_mask) * key_capacity + slot, -1 where slot is -1 (the pane
    ring: pane p at row (p - base) & ring_mask)."""
    out = np.empty(slots.shape[0], np.int64)
    for i in range(slots.shape[0]):
        if slots[i] >= 0:
            out[i] = ((panes[i] - base) & ring_mask) * key_capacity + slots[i]
        else:
            out[i] = -1
    return out


@numba.njit(cache=True)
def ring_offsets(index, key_capacity, ring_mask, origin_row):
    """The least and greatest (row - origin_row) & ring_mask over the cells of a pane-ring
    merge (index >= 0): how far past the ring's origin its lowest and highest panes lie;
    (-1, -1) if it has none."""
    lowest = highest = -1
    for i in range(index.shape[0]):
        if index[i] >= 0:
            offset = (index[i] // key_capacity - origin_row) & ring_mask
            if lowest < 0 or offset < lowest:
                lowest = offset
            if offset > highest:
                highest = offset
    return lowest, highest


@numba.njit(cache=True)
def fill_rows(array, key_capacity, ring_mask, first_column, end_column, value):
    """The rows of pane columns [first_column, end_column) of the ring = value."""
    for column in range(first_column, end_column):
        row = (column & ring_mask) * key_capacity
        array[row : row + key_capacity] = value


@numba.njit(cache=True)
def sliding_sums(
    leaves,
    leaf_stride,
    task_base,
    task_windows,
    task_out,
    task_stride,
    panes_per_slide,
    panes_per_window,
    out,
):
    """The tree's tasks (see the module docstring) for one int64 part added mod 2^64: window
    w of a task spans leaves [w * panes_per_slide, w * panes_per_slide + panes_per_window);
    each window is the one before plus the leaves entering minus the leaves leaving (int64
    arithmetic wraps in numba, as the combine does). Task by task: contiguous leaves (count
    windows); the pane-major state's runs take `sliding_sums_runs`."""
    for t in range(task_base.shape[0]):
        n = task_windows[t]
        if n == 0:
            continue
        base = task_base[t]
        acc = np.int64(0)
        for i in range(panes_per_window):
            acc += leaves[base + i * leaf_stride]
        out[task_out[t]] = acc
        for w in range(1, n):
            leaving = base + (w - 1) * panes_per_slide * leaf_stride
            entering = leaving + panes_per_window * leaf_stride
            for i in range(panes_per_slide):
                acc += leaves[entering + i * leaf_stride] - leaves[leaving + i * leaf_stride]
            out[task_out[t] + w * task_stride[t]] = acc


@numba.njit(cache=True)
def sliding_sums_runs(
    leaves,
    key_capacity,
    ring_mask,
    n_keys,
    run_column,
    run_count,
    panes_per_slide,
    panes_per_window,
    acc,
    carried,
    out,
):
    """`sliding_sums` over the pane-major state (row = pane, `key_capacity` cells apart;
    pane column c at row c & ring_mask, the pane ring; -1 for plain rows). `acc` (n_keys
    cells) holds, where `carried`, the sums of the window one slide before the first run's
    first window (the last window of the firing before): that window then steps from it
    (2 x panes_per_slide rows) instead of summing its panes_per_window rows; on return it
    holds the sums of the last window written. Run
    r is `run_count[r]` windows of every key from pane column `run_column[r]`, written
    window-major (n_keys cells a window) after the runs before it. Each window is the one
    before plus the rows entering minus those leaving, a row of keys at a time. The rows are
    taken as slices: LLVM vectorises a loop over slices, not one over `leaves[row + k]` and
    `out[at + k]` of one array each (twice the speed measured, 1,000 keys, w/s = 100)."""
    offset = 0
    for r in range(run_column.shape[0]):
        count = run_count[r]
        if count == 0:
            continue
        column = run_column[r]
        if carried:  # a step from the window one slide before
            for i in range(panes_per_slide):
                add = ((column - panes_per_slide + panes_per_window + i) & ring_mask) * key_capacity
                drop = ((column - panes_per_slide + i) & ring_mask) * key_capacity
                adding = leaves[add : add + n_keys]
                dropping = leaves[drop : drop + n_keys]
                for k in range(n_keys):
                    acc[k] += adding[k] - dropping[k]
            carried = False
        else:
            acc[:n_keys] = 0
            for i in range(panes_per_window):
                at = ((column + i) & ring_mask) * key_capacity
                row = leaves[at : at + n_keys]
                for k in range(n_keys):
                    acc[k] += row[k]
        first = out[offset * n_keys : (offset + 1) * n_keys]
        for k in range(n_keys):
            first[k] = acc[k]
        for w in range(1, count):
            leaving = column + (w - 1) * panes_per_slide
            entering = leaving + panes_per_window
            for i in range(panes_per_slide):
                add = ((entering + i) & ring_mask) * key_capacity
                drop = ((leaving + i) & ring_mask) * key_capacity
                adding = leaves[add : add + n_keys]
                dropping = leaves[drop : drop + n_keys]
                for k in range(n_keys):
                    acc[k] += adding[k] - dropping[k]
            window = out[(offset + w) * n_keys : (offset + w + 1) * n_keys]
            for k in range(n_keys):
                window[k] = acc[k]
        offset += count


@numba.njit(cache=True)
def pane_ids(ts, valid, pane_length):
    """floor(ts / pane_length) (floor division for negative times), 0 where ts is NULL."""
    out = np.empty(ts.shape[0], np.int64)
    for i in range(ts.shape[0]):
        out[i] = ts[i] // pane_length if valid[i] else 0
    return out


@numba.njit(cache=True)
def place_rows(slots, panes, known_keys):
    """Slots at or past `known_keys` made -1 in place; (rows left placed: slot >= 0, their
    least and greatest pane; 0, 0 where none)."""
    count, low, high = 0, np.int64(0), np.int64(0)
    for i in range(slots.shape[0]):
        slot = slots[i]
        if slot < 0:
            continue
        if slot >= known_keys:
            slots[i] = -1
            continue
        pane = panes[i]
        if count == 0 or pane < low:
            low = pane
        if count == 0 or pane > high:
            high = pane
        count += 1
    return count, low, high


@numba.njit(cache=True)
def dense_pairs(slots, panes, low, span):
    """Number the (key slot, pane) pairs of a batch in first-seen order without hashing, for
    pane ids in [low, low + span): a pair's dense id is slot * span + pane - low, and a table
    of `(max slot + 1) * span` entries maps it to its number. Returns (number per row, -1
    where slot < 0; first row of each number; count)."""
    n_slots = 0
    for i in range(slots.shape[0]):
        if slots[i] >= n_slots:
            n_slots = slots[i] + 1
    number_of = np.full(n_slots * span, -1, np.int64)
    out = np.empty(slots.shape[0], np.int64)
    first = np.empty(slots.shape[0], np.int64)
    count = 0
    for i in range(slots.shape[0]):
        slot = slots[i]
        if slot < 0:
            out[i] = -1
            continue
        dense = slot * span + panes[i] - low
        number = number_of[dense]
        if number < 0:
            number = count
            number_of[dense] = number
            first[count] = i
            count += 1
        out[i] = number
    return out, first[:count].copy(), count
