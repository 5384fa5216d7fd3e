"""The CPU join kernels (numba): `runtime.operators.join_kernels.JoinKernels`.

Both algorithms compare key slots (the join's key table gives equal keys one slot) and keep a
pair only when the two rows' window ranges overlap. Results are written in two passes: count
the matches of each probe row (or run), exclusive scan, write.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from mangonel.runtime.cpu.evaluation import evaluate_expression
from mangonel.runtime.cpu.generated import kind_kernels
from mangonel.runtime.cpu.join_combine import combine_cells, unseen_groups
from mangonel.runtime.cpu.kernels import tuple_partials
from mangonel.runtime.cpu.keys import KeyTable
from mangonel.runtime.host.arrays import pool_array


@numba.njit(cache=True)
def _buckets(slots: np.ndarray, n_slots: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR of the rows of each slot: rows order[offsets[s]:offsets[s + 1]] have slot s."""
    offsets = np.zeros(n_slots + 1, np.int64)
    for i in range(len(slots)):
        if slots[i] >= 0:
            offsets[slots[i] + 1] += 1
    for s in range(n_slots):
        offsets[s + 1] += offsets[s]
    fill = offsets[:-1].copy()
    order = np.empty(offsets[n_slots], np.int64)
    for i in range(len(slots)):
        s = slots[i]
        if s >= 0:
            order[fill[s]] = i
            fill[s] += 1
    return offsets, order


# a row's window range bounds a search only where the ranges are not those of a static
# table's rows (every window: -2^62 .. 2^62) and the widest is far from overflowing
_SEARCHABLE = 2**61
_WIDEST_SEARCHED = 2**40


@numba.njit(cache=True)
def _window_sorted_buckets(slots, first, last, n_slots):
    """`_buckets` with each slot's rows ordered by first window, those first windows in that
    order, and the widest `last - first` of the rows (-1 where the ranges are too wide to
    bound a search). Stored rows arrive in event time order mostly, so a slot's run is
    sorted only where it is not already."""
    offsets, order = _buckets(slots, n_slots)
    for s in range(n_slots):
        lo, hi = offsets[s], offsets[s + 1]
        for q in range(lo + 1, hi):
            if first[order[q]] < first[order[q - 1]]:
                run = order[lo:hi].copy()
                by_first = np.argsort(first[run], kind="mergesort")
                for x in range(hi - lo):
                    order[lo + x] = run[by_first[x]]
                break
    sorted_first = np.empty(len(order), np.int64)
    span = 0
    for q in range(len(order)):
        b = order[q]
        sorted_first[q] = first[b]
        if first[b] < -_SEARCHABLE or last[b] > _SEARCHABLE:
            span = -1
        elif span >= 0:
            span = max(span, last[b] - first[b])
    if span > _WIDEST_SEARCHED:
        span = -1
    return offsets, order, sorted_first, span


@numba.njit(cache=True)
def _bound(sorted_values, lo, hi, value, upper):
    """The first place in sorted_values[lo:hi] whose value is >= value (upper: > value)."""
    while lo < hi:
        mid = lo + (hi - lo) // 2
        if sorted_values[mid] < value or (upper and sorted_values[mid] == value):
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True)
def _candidates(sorted_first, span, lo, hi, first, last):
    """The part of a slot's run [lo, hi) (rows by first window) that a row with window range
    [first, last] can overlap: first windows in [first - span, last], span the widest range
    of the run's rows (span < 0: the whole run). Without it a probe row walked every row of
    its key in every window (a 1 M-row batch against 1 M stored rows of 1,000 keys: 10^9
    checks for 2 10^7 pairs), as the GPU's `mg_candidates` (join.cu.j2) narrows it too."""
    if span < 0 or first < -_SEARCHABLE:
        return lo, hi
    start = _bound(sorted_first, lo, hi, first - span, False)
    return start, _bound(sorted_first, start, hi, last, True)


@numba.njit(cache=True)
def _hash_probe(build_slots, build_first, build_last, probe_slots, probe_first, probe_last):
    """Pairs (build row, probe row): build buckets once (each slot's rows by first window),
    probe twice (count, then write), each probe row over its slot's rows whose window range
    can overlap its own (`_candidates`)."""
    n_slots = 0
    for i in range(len(build_slots)):
        n_slots = max(n_slots, build_slots[i] + 1)
    for i in range(len(probe_slots)):
        n_slots = max(n_slots, probe_slots[i] + 1)
    offsets, order, sorted_first, span = _window_sorted_buckets(
        build_slots, build_first, build_last, n_slots
    )
    counts = np.zeros(len(probe_slots) + 1, np.int64)
    for p in range(len(probe_slots)):
        s = probe_slots[p]
        if s < 0:
            continue
        lo, hi = _candidates(
            sorted_first, span, offsets[s], offsets[s + 1], probe_first[p], probe_last[p]
        )
        c = 0
        for q in range(lo, hi):
            b = order[q]
            if max(build_first[b], probe_first[p]) <= min(build_last[b], probe_last[p]):
                c += 1
        counts[p + 1] = c
    for p in range(len(probe_slots)):
        counts[p + 1] += counts[p]
    out_build = np.empty(counts[-1], np.int64)
    out_probe = np.empty(counts[-1], np.int64)
    for p in range(len(probe_slots)):
        s = probe_slots[p]
        if s < 0:
            continue
        lo, hi = _candidates(
            sorted_first, span, offsets[s], offsets[s + 1], probe_first[p], probe_last[p]
        )
        w = counts[p]
        for q in range(lo, hi):
            b = order[q]
            if max(build_first[b], probe_first[p]) <= min(build_last[b], probe_last[p]):
                out_build[w] = b
                out_probe[w] = p
                w += 1
    return out_build, out_probe


@numba.njit(cache=True)
def _merge(
    order_a, slots_a, first_a, last_a, order_b, slots_b, first_b, last_b, sorted_first_b, span_b
):
    """Pairs of two sides sorted by slot (order_*: row numbers in slot order, NULL keys left
    out; b's by (slot, first window), `sorted_first_b` their first windows, `span_b` their
    widest range, as `_window_sorted_buckets` gives them): runs of one slot meet once, each a
    row over the b rows of its run whose range can overlap its own (`_candidates`); two
    passes over the runs (count, write)."""
    total = 0
    for write in range(2):
        if write == 1:
            out_a = np.empty(total, np.int64)
            out_b = np.empty(total, np.int64)
        else:
            out_a = np.empty(0, np.int64)
            out_b = np.empty(0, np.int64)
        w = 0
        i = 0
        j = 0
        while i < len(order_a) and j < len(order_b):
            sa = slots_a[order_a[i]]
            sb = slots_b[order_b[j]]
            if sa < sb:
                i += 1
            elif sb < sa:
                j += 1
            else:
                i_end = i
                while i_end < len(order_a) and slots_a[order_a[i_end]] == sa:
                    i_end += 1
                j_end = j
                while j_end < len(order_b) and slots_b[order_b[j_end]] == sb:
                    j_end += 1
                for x in range(i, i_end):
                    a = order_a[x]
                    lo, hi = _candidates(sorted_first_b, span_b, j, j_end, first_a[a], last_a[a])
                    for y in range(lo, hi):
                        b = order_b[y]
                        if max(first_a[a], first_b[b]) <= min(last_a[a], last_b[b]):
                            if write == 1:
                                out_a[w] = a
                                out_b[w] = b
                            w += 1
                i, j = i_end, j_end
        total = w
    return out_a, out_b


@numba.njit(cache=True)
def _expand(first, last, lo, hi):
    """(entry, k) per window k in [max(first, lo), min(last, hi)], entry by entry: count per
    entry, exclusive scan, write (the caller orders the result by k)."""
    counts = np.zeros(len(first) + 1, np.int64)
    for e in range(len(first)):
        counts[e + 1] = counts[e] + max(0, min(last[e], hi) - max(first[e], lo) + 1)
    entries = np.empty(counts[-1], np.int64)
    windows = np.empty(counts[-1], np.int64)
    for e in range(len(first)):
        w = counts[e]
        for k in range(max(first[e], lo), min(last[e], hi) + 1):
            entries[w] = e
            windows[w] = k
            w += 1
    return entries, windows


def _pair_windows(a_rows, a_offsets, a_slots, b_rows, b_offsets, b_slots, scratch=None):
    """The joined pairs of each window, from both sides' (row, window) entries grouped by
    window (`*_rows`: row numbers, window w's at `*_offsets[w]:*_offsets[w + 1]`, rows in
    order within it). Per window, the right entries are placed by key slot (counted, then
    each slot's run laid out where the slot is first met: a slot's count and run start are
    stamped with the window, so nothing of size n_slots is cleared or scanned per window),
    and each left entry notes its slot's run; then one pass copies every left entry's run
    (contiguous reads, no chain of dependent loads). Returns (left rows, right rows, pairs
    per window): window by window, left-row-major, right rows in order within a key.
    Outputs are allocated by NumPy (`_pair_runs` counts, `_pair_write` writes): numba's
    own allocations of this size came back from the OS page by page on every firing, 3-4x
    the cost of the writes themselves. `scratch` (a list, kept by the caller): the pair
    arrays are views of two buffers kept in it and reused by the next call, so they are
    not fresh pages each firing (fresh memory fills at ~3.5 GB/s on the project's VM)."""
    placed, a_start, a_length, per_window = _pair_runs(
        a_rows, a_offsets, a_slots, b_rows, b_offsets, b_slots
    )
    total = int(per_window.sum())
    if scratch is None:
        out_a, out_b = np.empty(total, np.int64), np.empty(total, np.int64)
    else:
        held = len(scratch[0]) if scratch else 0
        # grown by doubling; given back after a burst (a firing of many windows at once,
        # end of input) once a firing needs under a quarter of it
        if not scratch or held < total or (held > 4 * total and held > 1 << 20):
            capacity = max(total, 2 * held if held < total else total)
            scratch[:] = [np.empty(capacity, np.int64), np.empty(capacity, np.int64)]
        out_a, out_b = scratch[0][:total], scratch[1][:total]
    _pair_write(a_rows, a_start, a_length, placed, out_a, out_b)
    return out_a, out_b, per_window


@numba.njit(cache=True)
def _pair_runs(a_rows, a_offsets, a_slots, b_rows, b_offsets, b_slots):
    """`_pair_windows`' first pass: the right rows placed by window and slot, each left
    entry's run in them (start, length) and the pairs per window."""
    n_windows = len(a_offsets) - 1
    n_slots = 1
    for q in range(len(b_rows)):
        n_slots = max(n_slots, b_slots[b_rows[q]] + 1)
    stamp = np.full(n_slots, -1, np.int64)
    start = np.empty(n_slots, np.int64)
    length = np.empty(n_slots, np.int64)
    fill = np.empty(n_slots, np.int64)
    placed = np.empty(len(b_rows), np.int64)  # right rows by window, then by slot
    a_start = np.empty(len(a_rows), np.int64)
    a_length = np.zeros(len(a_rows), np.int64)
    per_window = np.zeros(n_windows, np.int64)
    for w in range(n_windows):
        if a_offsets[w] == a_offsets[w + 1] or b_offsets[w] == b_offsets[w + 1]:
            continue
        for q in range(b_offsets[w], b_offsets[w + 1]):
            s = b_slots[b_rows[q]]
            if s < 0:
                continue
            if stamp[s] != w:
                stamp[s] = w
                start[s] = -1
                length[s] = 0
            length[s] += 1
        running = b_offsets[w]
        for q in range(b_offsets[w], b_offsets[w + 1]):
            s = b_slots[b_rows[q]]
            if s < 0:
                continue
            if start[s] < 0:
                start[s] = running
                fill[s] = running
                running += length[s]
            placed[fill[s]] = b_rows[q]
            fill[s] += 1
        total = 0
        for q in range(a_offsets[w], a_offsets[w + 1]):
            s = a_slots[a_rows[q]]
            if 0 <= s < n_slots and stamp[s] == w:
                a_start[q] = start[s]
                a_length[q] = length[s]
                total += length[s]
        per_window[w] = total
    return placed, a_start, a_length, per_window


@numba.njit(cache=True)
def _pair_write(a_rows, a_start, a_length, placed, out_a, out_b):
    at = 0
    for q in range(len(a_rows)):
        row = a_rows[q]
        first = a_start[q]
        for j in range(a_length[q]):
            out_a[at + j] = row
            out_b[at + j] = placed[first + j]
        at += a_length[q]


@numba.njit(cache=True)
def _bounds(windows, rows, size, slide, start, end):
    """Both bound columns of window runs in one pass (each run's values repeated), into
    arrays NumPy allocated (see `_pair_windows`)."""
    at = 0
    for r in range(len(rows)):
        low = windows[r] * slide
        for _ in range(rows[r]):
            start[at] = low
            end[at] = low + size
            at += 1


@numba.njit(cache=True)
def _expand_counts(first, last, lo, hi, low, n_windows):
    """Entries per window low.. of `_expand_ordered` (window k at k - low)."""
    counts = np.zeros(n_windows + 1, np.int64)
    for e in range(len(first)):
        for k in range(max(first[e], lo), min(last[e], hi) + 1):
            counts[k - low + 1] += 1
    for w in range(n_windows):
        counts[w + 1] += counts[w]
    return counts


@numba.njit(cache=True)
def _expand_ordered(first, last, lo, hi, low, counts, entries, windows):
    """`_expand` grouped by window, entries in order within a window: a counting sort over
    the windows' span (`counts`: `_expand_counts`), not a sort of every (entry, window)."""
    fill = counts[:-1].copy()
    for e in range(len(first)):
        for k in range(max(first[e], lo), min(last[e], hi) + 1):
            at = fill[k - low]
            entries[at] = e
            windows[at] = k
            fill[k - low] = at + 1


@numba.njit(cache=True)
def _mark(matched, rows, first, last, origin):
    for p in range(len(rows)):
        r = rows[p]
        for k in range(first[p], last[p] + 1):
            matched[r, k - origin[r]] = 1


@numba.njit(cache=True)
def _prefix_windows(cell_k, cell_g, deltas, running, lo, hi):
    """Windows lo..hi of difference-credited cells (sorted by window): add each window's
    deltas to the running sums, then emit every group whose running row count (part 0) is
    positive; windows where no group is active are skipped. Two passes (count, write); the
    second leaves `running` at window hi."""
    n_parts, n_groups = running.shape[0], running.shape[1]
    total = 0
    out_k = np.empty(0, np.int64)
    out_g = np.empty(0, np.int64)
    out_v = np.empty((n_parts, 0), np.int64)
    for write in range(2):
        r = running.copy() if write == 0 else running
        if write == 1:
            out_k = np.empty(total, np.int64)
            out_g = np.empty(total, np.int64)
            out_v = np.empty((n_parts, total), np.int64)
        active = 0
        for g in range(n_groups):
            if r[0, g] != 0:
                active += 1
        w = 0
        c = 0
        k = lo
        while k <= hi:
            while c < len(cell_k) and cell_k[c] == k:
                g = cell_g[c]
                before = r[0, g] != 0
                for p in range(n_parts):
                    r[p, g] += deltas[p, c]
                after = r[0, g] != 0
                active += int(after) - int(before)
                c += 1
            if active > 0:
                for g in range(n_groups):
                    if r[0, g] > 0:
                        if write == 1:
                            out_k[w] = k
                            out_g[w] = g
                            for p in range(n_parts):
                                out_v[p, w] = r[p, g]
                        w += 1
                k += 1
            elif c < len(cell_k):
                k = max(k + 1, cell_k[c])
            else:
                break
        total = w
    return out_k, out_g, out_v


@numba.njit(cache=True)
def _window_ranges(ts, has_ts, size, slide, closed, keep, first, last, origin):
    """A batch's event times in one pass: keep[i] (a time, and a window left open), each
    row's window range at i (the caller compacts where a row is not kept), the count kept,
    the late count and the largest time (whether any). One thread: numba's parallel form
    of this loop ran 1.6-3x slower per row on the 2-core VM (7.5 against 12-24 ms for 2 M
    rows, 2026-11-27), whatever the slices."""
    kept = 0
    late = 0
    top = 0
    any_time = False
    # w a multiple of s (tumbling, and most sliding windows): floor((t - w) / s) is
    # floor(t / s) - w / s exactly, one division a row instead of two
    whole = size % slide == 0
    per_window = size // slide
    for i in range(ts.shape[0]):
        if not has_ts[i]:
            keep[i] = False
            continue
        t = ts[i]
        if not any_time or t > top:
            top = t
            any_time = True
        high = t // slide  # floor division, as Python's: negative times too
        low = high - per_window + 1 if whole else (t - size) // slide + 1
        start = max(low, closed + 1)
        first[i] = start
        last[i] = high
        origin[i] = low
        if start <= high:
            keep[i] = True
            kept += 1
        else:
            keep[i] = False
            late += 1
    return kept, late, top, any_time


@numba.njit(cache=True)
def _pair_ranges(mine, theirs, first, last, their_first, their_last, bases, out):
    """Per matched pair (mine[k], theirs[k]): its left and right global ids and the windows
    both rows share, [max(first), min(last)], written to out = (left, right, lo, hi)."""
    left, right, lo, hi = out
    mine_base, theirs_base, mine_is_left = bases
    for k in range(mine.shape[0]):
        i = mine[k]
        j = theirs[k]
        lo[k] = max(first[i], their_first[j])
        hi[k] = min(last[i], their_last[j])
        if mine_is_left:
            left[k] = i + mine_base
            right[k] = j + theirs_base
        else:
            left[k] = j + theirs_base
            right[k] = i + mine_base


def _sorted_rows(slots: np.ndarray) -> np.ndarray:
    rows = np.flatnonzero(slots >= 0)
    return rows[np.argsort(slots[rows], kind="stable")]


class CpuJoinKernels:
    """numba kernels of the join driver on the CPU."""

    name = "cpu"

    def __init__(self) -> None:
        self._pair_scratch: list[np.ndarray] = []  # join_windows' reused pair buffers

    def match(self, algorithm, slots_a, first_a, last_a, slots_b, first_b, last_b):
        if not len(slots_a) or not len(slots_b):
            empty = np.empty(0, np.int64)
            return empty, empty
        if algorithm == "sort-merge":
            n_slots = max(int(slots_a.max()), int(slots_b.max()), 0) + 1
            _, order_b, sorted_first_b, span_b = _window_sorted_buckets(
                slots_b, first_b, last_b, n_slots
            )
            return _merge(
                _sorted_rows(slots_a),
                slots_a,
                first_a,
                last_a,
                order_b,
                slots_b,
                first_b,
                last_b,
                sorted_first_b,
                span_b,
            )
        if len(slots_a) <= len(slots_b):  # build on the smaller side, probe with the other
            return _hash_probe(slots_a, first_a, last_a, slots_b, first_b, last_b)
        j, i = _hash_probe(slots_b, first_b, last_b, slots_a, first_a, last_a)
        return i, j

    def expand(self, first, last, lo, hi, ordered=True):
        if hi < lo or not len(first):
            empty = np.empty(0, np.int64)
            return empty, empty
        if ordered:
            # window order, entries in order within: counted by window where the windows'
            # span is no wider than the entries (a firing's usual case), else sorted
            low, high = max(lo, int(first.min())), min(hi, int(last.max()))
            if high < low:
                empty = np.empty(0, np.int64)
                return empty, empty
            if high - low < 4 * len(first) + 1024:
                counts = _expand_counts(first, last, lo, hi, low, high - low + 1)
                entries = np.empty(counts[-1], np.int64)
                windows = np.empty(counts[-1], np.int64)
                _expand_ordered(first, last, lo, hi, low, counts, entries, windows)
                return entries, windows
        entries, windows = _expand(first, last, lo, hi)
        if not ordered:
            return entries, windows  # entry by entry
        order = np.argsort(windows, kind="stable")
        return entries[order], windows[order]

    def join_windows(self, left, right, lo, hi):
        """Joined at a firing: the (row, window) entries of each side in lo..hi (`_expand`),
        grouped by window (a counting sort over the windows' span when it is dense, else
        over their distinct ids), then `_pair_windows`. The pair arrays returned are valid
        until the next call (reused buffers)."""
        entries = [_expand(first, last, lo, hi) for _slots, first, last in (left, right)]
        if not len(entries[0][0]) or not len(entries[1][0]):
            empty = np.empty(0, np.int64)
            return empty, empty, empty, empty
        windows = np.concatenate([entries[0][1], entries[1][1]])
        low, high = int(windows.min()), int(windows.max())
        if high - low < 4 * len(windows) + 1024:
            ids = np.arange(low, high + 1, dtype=np.int64)
            positions = [k - low for _rows, k in entries]
        else:  # windows far apart: number the distinct ones
            ids = np.unique(windows)
            positions = [np.searchsorted(ids, k) for _rows, k in entries]
        grouped = []
        for (rows, _k), position in zip(entries, positions, strict=True):
            offsets, order = _buckets(position, len(ids))
            grouped.append((rows[order], offsets))
        (a_rows, a_offsets), (b_rows, b_offsets) = grouped
        out_a, out_b, per_window = _pair_windows(
            a_rows, a_offsets, left[0], b_rows, b_offsets, right[0], self._pair_scratch
        )
        some = per_window > 0
        return out_a, out_b, ids[some], per_window[some]

    def window_bounds(self, windows, rows, size, slide):
        start = pool_array(int(rows.sum()), np.int64)  # output columns: Arrow's pool
        end = pool_array(len(start), np.int64)
        _bounds(windows, rows, size, slide, start, end)
        return start, end

    def mark_matched(self, matched, rows, first, last, origin) -> None:
        if len(rows):
            _mark(matched, rows, first, last, origin)

    def scatter(self, kind: Any) -> Any:  # noqa: ANN401
        return kind_kernels(kind).scatter

    def prefix_windows(self, cell_k, cell_g, deltas, running, lo, hi):
        return _prefix_windows(
            np.ascontiguousarray(cell_k),
            np.ascontiguousarray(cell_g),
            np.ascontiguousarray(deltas),
            running,
            lo,
            hi,
        )

    # the factorised firing's kernels (join_combine.py) as they are: the protocol's arguments
    combine_cells = staticmethod(combine_cells)
    unseen_groups = staticmethod(unseen_groups)

    def pair_ranges(self, mine, theirs, first, last, their_first, their_last, bases, out=None):
        count = len(mine)
        if out is None:
            out = tuple(np.empty(count, np.int64) for _ in range(4))
        if count:
            mine_base, theirs_base, mine_is_left = bases
            _pair_ranges(
                mine,
                theirs,
                first,
                last,
                their_first,
                their_last,
                (np.int64(mine_base), np.int64(theirs_base), bool(mine_is_left)),
                out,
            )
        return out

    def window_ranges(self, ts, has_ts, size, slide, closed, out=None):
        n = len(ts)
        keep = np.empty(n, np.bool_)
        if out is None:
            out = tuple(np.empty(n, np.int64) for _ in range(3))
        first, last, origin = out
        kept, late, top, any_time = _window_ranges(
            np.ascontiguousarray(ts, np.int64),
            np.ascontiguousarray(has_ts, np.bool_),
            size,
            slide,
            closed,
            keep,
            first,
            last,
            origin,
        )
        if kept < n:  # late or timeless rows (rare): the kept rows' ranges, in row order
            first, last, origin = first[keep], last[keep], origin[keep]
        return keep, first, last, origin, int(late), int(top) if any_time else None

    def new_key_map(self, types):
        return KeyTable(types)

    def key_map_from_arrays(self, types, arrays, prefix):
        return KeyTable.from_arrays(types, arrays, prefix)

    def evaluate(self, expression, column_types, columns, length=None):
        if length is None:
            length = len(next(iter(columns.values()))) if columns else 0
        return evaluate_expression(expression, column_types, columns, length=length)

    def partials(self, fields, column_types, columns, contributes, length):
        return tuple_partials(fields, column_types, columns, contributes, length)
