"""numba kernels: scatter partials into state, and windows over a batched pane aggregation tree.

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
"""

from __future__ import annotations

import numba
import numpy as np

OP_ADD = 0
OP_MIN = 1
OP_MAX = 2


@numba.njit(cache=True, inline="always")
def _combine(op, a, b):
    # MIN/MAX in Spark's order: NaN is larger than every other value (x != x only for NaN;
    # always false for integers). Integer + wraps around (numba's int64 arithmetic).
    if op == OP_ADD:
        return a + b
    if op == OP_MIN:
        return b if (b < a or a != a) else a
    return b if (b > a or b != b) else a


@numba.njit(cache=True)
def scatter(op, target, index, values):
    for i in range(index.shape[0]):
        j = index[i]
        if j >= 0:
            target[j] = _combine(op, target[j], values[i])


@numba.njit(cache=True, inline="always")
def _chan(n_a, mean_a, m2_a, n_b, mean_b, m2_b):
    # Chan et al.'s parallel combine of (count, mean, sum of squared deviations)
    if n_b == 0.0:
        return n_a, mean_a, m2_a
    if n_a == 0.0:
        return n_b, mean_b, m2_b
    n = n_a + n_b
    delta = mean_b - mean_a
    return n, mean_a + delta * n_b / n, m2_a + m2_b + delta * delta * n_a * n_b / n


@numba.njit(cache=True)
def scatter_moments(n_t, mean_t, m2_t, index, n_v, mean_v, m2_v):
    for i in range(index.shape[0]):
        j = index[i]
        if j >= 0:
            n_t[j], mean_t[j], m2_t[j] = _chan(
                n_t[j], mean_t[j], m2_t[j], n_v[i], mean_v[i], m2_v[i]
            )


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
def tree_windows(
    op,
    identity,
    leaves,
    leaf_stride,
    task_base,
    task_windows,
    task_out,
    task_stride,
    panes_per_slide,
    panes_per_window,
    windows_per_batch,
    out,
):
    """out[task_out[t] + i * task_stride[t]] = combine of window i of task t (see module doc)."""
    top = _top_level(panes_per_window)
    max_leaves = panes_per_window + (windows_per_batch - 1) * panes_per_slide
    tree = np.empty(2 * max_leaves + 2, leaves.dtype)
    for t in range(task_base.shape[0]):
        done = 0
        while done < task_windows[t]:
            count = min(windows_per_batch, task_windows[t] - done)
            m = panes_per_window + (count - 1) * panes_per_slide
            first_leaf = task_base[t] + done * panes_per_slide * leaf_stride
            offsets = _level_layout(m, top)
            for i in range(m):  # build: level 0 = the leaves
                tree[i] = leaves[first_leaf + i * leaf_stride]
            for level in range(1, top + 1):
                below = offsets[level - 1]
                here = offsets[level]
                for node in range(m >> level):
                    tree[here + node] = _combine(
                        op, tree[below + 2 * node], tree[below + 2 * node + 1]
                    )
            for w in range(count):  # compute: greedy aligned blocks, largest first
                position = w * panes_per_slide
                remaining = panes_per_window
                acc = identity
                while remaining > 0:
                    level = top
                    while level > 0 and (
                        (position & ((1 << level) - 1)) != 0 or (1 << level) > remaining
                    ):
                        level -= 1
                    acc = _combine(op, acc, tree[offsets[level] + (position >> level)])
                    position += 1 << level
                    remaining -= 1 << level
                out[task_out[t] + (done + w) * task_stride[t]] = acc
            done += count


@numba.njit(cache=True)
def tree_windows_moments(
    n_l,
    mean_l,
    m2_l,
    leaf_stride,
    task_base,
    task_windows,
    task_out,
    task_stride,
    panes_per_slide,
    panes_per_window,
    windows_per_batch,
    n_out,
    mean_out,
    m2_out,
):
    """tree_windows for MOMENTS state (three arrays combined with Chan's update)."""
    top = _top_level(panes_per_window)
    max_leaves = panes_per_window + (windows_per_batch - 1) * panes_per_slide
    tn = np.empty(2 * max_leaves + 2, np.float64)
    tmean = np.empty(2 * max_leaves + 2, np.float64)
    tm2 = np.empty(2 * max_leaves + 2, np.float64)
    for t in range(task_base.shape[0]):
        done = 0
        while done < task_windows[t]:
            count = min(windows_per_batch, task_windows[t] - done)
            m = panes_per_window + (count - 1) * panes_per_slide
            first_leaf = task_base[t] + done * panes_per_slide * leaf_stride
            offsets = _level_layout(m, top)
            for i in range(m):
                leaf = first_leaf + i * leaf_stride
                tn[i] = n_l[leaf]
                tmean[i] = mean_l[leaf]
                tm2[i] = m2_l[leaf]
            for level in range(1, top + 1):
                below = offsets[level - 1]
                here = offsets[level]
                for node in range(m >> level):
                    a = below + 2 * node
                    tn[here + node], tmean[here + node], tm2[here + node] = _chan(
                        tn[a], tmean[a], tm2[a], tn[a + 1], tmean[a + 1], tm2[a + 1]
                    )
            for w in range(count):
                position = w * panes_per_slide
                remaining = panes_per_window
                acc_n, acc_mean, acc_m2 = 0.0, 0.0, 0.0
                while remaining > 0:
                    level = top
                    while level > 0 and (
                        (position & ((1 << level) - 1)) != 0 or (1 << level) > remaining
                    ):
                        level -= 1
                    node = offsets[level] + (position >> level)
                    acc_n, acc_mean, acc_m2 = _chan(
                        acc_n, acc_mean, acc_m2, tn[node], tmean[node], tm2[node]
                    )
                    position += 1 << level
                    remaining -= 1 << level
                j = task_out[t] + (done + w) * task_stride[t]
                n_out[j] = acc_n
                mean_out[j] = acc_mean
                m2_out[j] = acc_m2
            done += count


@numba.njit(cache=True)
def occupied_panes(rows_matrix, n_keys, first_pane, end_pane):
    """Which panes (rows of a pane-major matrix) in [first_pane, end_pane) hold a tuple."""
    occupied = np.zeros(end_pane - first_pane, np.bool_)
    for pane in range(first_pane, end_pane):
        for key in range(n_keys):
            if rows_matrix[pane, key] != 0:
                occupied[pane - first_pane] = True
                break
    return occupied


@numba.njit(cache=True)
def flat_index(slots, panes, origin, key_capacity):
    """(pane - origin) * key_capacity + slot, -1 where slot is -1 (pane-major state)."""
    out = np.empty(slots.shape[0], np.int64)
    for i in range(slots.shape[0]):
        out[i] = (panes[i] - origin) * key_capacity + slots[i] if slots[i] >= 0 else -1
    return out


@numba.njit(cache=True)
def pane_ids(ts, valid, pane_length):
    """floor(ts / pane_length) (floor division for negative times), 0 where ts is NULL."""
    out = np.empty(ts.shape[0], np.int64)
    for i in range(ts.shape[0]):
        out[i] = ts[i] // pane_length if valid[i] else 0
    return out
