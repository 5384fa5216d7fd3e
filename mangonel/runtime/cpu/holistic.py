"""numba kernels of the holistic window functions (MEDIAN, PERCENTILE_*, COUNT DISTINCT).

A result row reads a list of runs, `[run_start, run_end)` ranges of one flat array of order
keys (`aggregates.holistic.order_keys`): the sorted values of each pane its window covers
(time windows), or the one run of its tuples (count windows). Per row the kernel returns the
number of values n and two order keys: for the percentiles the values at the lower and the
higher position (`select`), for COUNT DISTINCT the count in `lower`.

A row whose values lie in one sorted run (a tumbling window's pane) is read in place: an index
for the percentiles, one pass for COUNT DISTINCT. A percentile over BAND_FROM values or more
in sorted runs (a sliding window's panes) first narrows each run to a band sampled from the
runs (`_narrow`: one sample per run, the band's ranks counted by binary searches; a sliding
window of 100 runs x 100 values copies ~550 values, not 10,000). Otherwise the runs are
copied into a scratch buffer once, and the percentiles select in it (in-place selection by
branch-free three-way partitions: O(n) per row), COUNT DISTINCT sorts it. One pass over the
rows, no per-row Python. A percentile over an ARRAY of p selects each p in turn (a band of
its own, or the same scratch copy), lower and higher then one column per p.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numba
import numpy as np

from mangonel.runtime.host.arrays import pane_rows

PERCENTILE_CONT = 0
PERCENTILE_DISC = 1
COUNT_DISTINCT = 2
MODES = {
    "percentile_cont": PERCENTILE_CONT,
    "percentile_disc": PERCENTILE_DISC,
    "count_distinct": COUNT_DISTINCT,
}


@numba.njit(cache=True)
def _positions(mode, fraction, n):
    """(lower, higher) positions of a percentile over n sorted values (Spark's rules)."""
    if mode == PERCENTILE_CONT:
        position = fraction * (n - 1)
        return int(math.floor(position)), int(math.ceil(position))
    index = max(int(math.ceil(fraction * n)) - 1, 0)
    return index, index


@numba.njit(cache=True)
def _partition(a, lo, hi, pivot, equal):
    """Move a[lo:hi]'s values under `pivot` (at or under it where `equal`) to its front, in
    order kept by neither side; return where the rest starts. Branch-free (Lomuto's swap
    every step, the boundary moved by the comparison): on random data a branch per value
    is mispredicted half the time, which made selection 4x slower."""
    store = lo
    for i in range(lo, hi):
        x = a[i]
        a[i] = a[store]
        a[store] = x
        store += (x <= pivot) if equal else (x < pivot)
    return store


@numba.njit(cache=True)
def _select(a, n, k):
    """Put the k-th smallest of a[:n] at a[k], smaller or equal before, larger or equal
    after (in place: three-way partitions around a median-of-three pivot, the last few
    values by insertion)."""
    lo, hi = 0, n  # the k-th lies in a[lo:hi]
    while hi - lo > 16:
        mid = (lo + hi) // 2
        x, y, z = a[lo], a[mid], a[hi - 1]
        pivot = max(min(x, y), min(max(x, y), z))
        under = _partition(a, lo, hi, pivot, False)
        if k < under:
            hi = under
            continue
        through = _partition(a, under, hi, pivot, True)  # the pivot's copies next
        if k < through:
            return
        lo = through
    for i in range(lo + 1, hi):
        x = a[i]
        j = i - 1
        while j >= lo and a[j] > x:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = x


@numba.njit(cache=True)
def _distinct_sorted(values, start, end):
    count = 0
    for i in range(start, end):
        if i == start or values[i] != values[i - 1]:
            count += 1
    return count


# a percentile over this many values or more, in two sorted runs or more, selects in a band
# of them narrowed by sampling (`_narrow`) until it holds fewer; fewer are copied whole
BAND_FROM = 2048


@numba.njit(cache=True)
def _lower_bound(values, start, end, value):
    """The first index of values[start:end] (sorted) holding `value` or more."""
    while start < end:
        middle = (start + end) >> 1
        if values[middle] < value:
            start = middle + 1
        else:
            end = middle
    return start


@numba.njit(cache=True)
def _sampled_bracket(values, lo, hi, runs, size, low, samples):
    """Floyd and Rivest's sampling over sorted ranges values[lo[j]:hi[j]] (size values in
    all): each range's value at the fraction low / size of its length estimates the value
    at position `low`; two of these samples around their median, 2 sqrt(samples) apart:
    (v_lo, v_hi), a band that holds position `low` unless the samples' median lies about 4
    standard deviations off (where the ranges are alike)."""
    count = 0
    for j in range(runs):
        length = hi[j] - lo[j]
        if length > 0:
            samples[count] = values[lo[j] + (low * length) // size]
            count += 1
    spread = 2 * int(math.sqrt(count)) + 1
    first_sample = max(count // 2 - spread, 0)
    last_sample = min(count // 2 + spread, count - 1)
    # the two samples by selection: sorting them all cost more than the binary searches
    _select(samples, count, first_sample)
    v_lo = samples[first_sample]
    _select(samples, count, last_sample)
    return v_lo, samples[last_sample]


@numba.njit(cache=True)
def _narrow(values, lo, hi, runs, low, high, v_lo, v_hi, new_lo, new_hi):
    """The ranges values[lo[j]:hi[j]] (sorted each) cut to the band [v_lo, v_hi), its ranks
    counted by a binary search per range: where the band holds positions low .. high, its
    ranges go to new_lo/new_hi: (values in the band, values below it); else (-1, 0)."""
    below = 0  # values under v_lo
    under = 0  # values under v_hi
    for j in range(runs):
        start = _lower_bound(values, lo[j], hi[j], v_lo)
        end = _lower_bound(values, start, hi[j], v_hi)
        new_lo[j] = start
        new_hi[j] = end
        below += start - lo[j]
        under += end - lo[j]
    if below > low or high >= under:
        return -1, 0
    return under - below, below


@numba.njit(cache=True)
def _band_pair(values, lo, hi, runs, size, low, high, samples, new_lo, new_hi, scratch, bracket):
    """The values at positions low and high of the sorted union of ranges values[lo[j]:
    hi[j]] (sorted each; `lo`, `hi` are overwritten): the ranges narrowed to sampled bands
    (`_sampled_bracket`, `_narrow`) while they hold BAND_FROM values or more and a step
    shrinks them, then copied and selected. `bracket` (v_lo, v_hi, held): the first band of
    the row before, tried first (the next window of a key moves its percentile by a pane's
    values, well inside it: no sampling); it keeps this row's first band."""
    first = True
    while size >= BAND_FROM:
        found = -1
        if first and bracket[2]:
            found, below = _narrow(
                values, lo, hi, runs, low, high, bracket[0], bracket[1], new_lo, new_hi
            )
        if found < 0:
            v_lo, v_hi = _sampled_bracket(values, lo, hi, runs, size, low, samples)
            found, below = _narrow(values, lo, hi, runs, low, high, v_lo, v_hi, new_lo, new_hi)
            if first and found >= 0:
                bracket[0], bracket[1], bracket[2] = v_lo, v_hi, 1
        first = False
        if found < 0 or found >= size:
            break
        for j in range(runs):
            lo[j] = new_lo[j]
            hi[j] = new_hi[j]
        size = found
        low -= below
        high -= below
    filled = 0
    for j in range(runs):
        for i in range(lo[j], hi[j]):
            scratch[filled] = values[i]
            filled += 1
    return _select_pair(scratch, filled, low, high)


@numba.njit(cache=True)
def _select_pair(scratch, total, low, high):
    """(the values at positions low and high, high = low or low + 1) of scratch[:total]:
    `_select` puts position low in place, position high is the smallest value after it."""
    _select(scratch, total, low)
    if high == low:
        return scratch[low], scratch[low]
    smallest = scratch[low + 1]  # the next value: the smallest above position low
    for i in range(low + 2, total):
        if scratch[i] < smallest:
            smallest = scratch[i]
    return scratch[low], smallest


@numba.njit(cache=True)
def evaluate_runs(
    values, run_start, run_end, row_first, row_runs, mode, fractions, sorted_runs, n, lower, higher
):
    """Fill n (one entry per row), lower and higher (one per row and p of `fractions`) from
    the rows' runs (module docstring). A percentile over at least BAND_FROM values in
    sorted runs selects in a band of them (`_band_pair`: about a hundred values of ten
    thousand, not all of them); otherwise every p of a row selects in the row's one scratch
    copy (a selection leaves the copy a permutation of the values, so the next p selects
    in it)."""
    rows = row_first.shape[0]
    ps = fractions.shape[0]
    largest = 0
    most_runs = 1
    for r in range(rows):
        total = 0
        for j in range(row_first[r], row_first[r] + row_runs[r]):
            total += run_end[j] - run_start[j]
        n[r] = total
        largest = max(largest, total)
        most_runs = max(most_runs, row_runs[r])
    scratch = np.empty(largest, np.int64)
    samples = np.empty(most_runs, np.int64)
    ranges = np.empty((4, most_runs), np.int64)  # a row's runs, then the narrowed ones
    brackets = np.zeros((ps, 3), np.int64)  # per p the last row's first band (`_band_pair`)
    for r in range(rows):
        total = n[r]
        for f in range(ps):
            lower[r, f] = 0
            higher[r, f] = 0
        if total == 0:
            continue
        single = -1
        nonempty = 0
        for j in range(row_first[r], row_first[r] + row_runs[r]):
            if run_end[j] > run_start[j]:
                nonempty += 1
                single = j
        in_place = sorted_runs and nonempty == 1
        if mode == COUNT_DISTINCT:
            if in_place:
                lower[r, 0] = _distinct_sorted(values, run_start[single], run_end[single])
                continue
        elif in_place:
            for f in range(ps):
                low, high = _positions(mode, fractions[f], total)
                lower[r, f] = values[run_start[single] + low]
                higher[r, f] = values[run_start[single] + high]
            continue
        elif sorted_runs and total >= BAND_FROM:
            for f in range(ps):
                low, high = _positions(mode, fractions[f], total)
                runs = 0
                for j in range(row_first[r], row_first[r] + row_runs[r]):
                    if run_end[j] > run_start[j]:
                        ranges[0, runs] = run_start[j]
                        ranges[1, runs] = run_end[j]
                        runs += 1
                lower[r, f], higher[r, f] = _band_pair(
                    values, ranges[0], ranges[1], runs, total, low, high, samples,
                    ranges[2], ranges[3], scratch, brackets[f],
                )  # fmt: skip
            continue
        filled = 0
        for j in range(row_first[r], row_first[r] + row_runs[r]):
            for i in range(run_start[j], run_end[j]):
                scratch[filled] = values[i]
                filled += 1
        if mode == COUNT_DISTINCT:
            window = np.sort(scratch[:total])
            lower[r, 0] = _distinct_sorted(window, 0, total)
            continue
        for f in range(ps):
            low, high = _positions(mode, fractions[f], total)
            lower[r, f], higher[r, f] = _select_pair(scratch, total, low, high)


@numba.njit(cache=True)
def _window_runs(
    flat_offsets, offset_first, offset_last, base, slots, first_index, panes_per_row, bounds
):
    for r in range(slots.shape[0]):
        slot = slots[r]
        for i in range(panes_per_row):
            pane = first_index[r] + i
            k = r * panes_per_row + i
            last = offset_last[pane]
            if last < 0:  # the span holds no values of this pane: an empty run
                bounds[0, k] = 0
                bounds[1, k] = 0
                continue
            first = offset_first[pane]
            bounds[0, k] = base[pane] + flat_offsets[first + min(slot, last)]
            bounds[1, k] = base[pane] + flat_offsets[first + min(slot + 1, last)]


def window_runs(
    flat_offsets: np.ndarray,
    offset_first: np.ndarray,
    offset_last: np.ndarray,
    base: np.ndarray,
    slots: np.ndarray,
    first_index: np.ndarray,
    panes_per_row: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The runs (`run_start, run_end, row_first, row_runs`) of rows that each read
    `panes_per_row` consecutive panes of a span from `first_index[r]`, in the flat array of
    the span's sorted panes: span pane p's values start at `base[p]` of it, its per-slot
    offsets at `offset_first[p]` of `flat_offsets` (`offset_last[p] + 1` entries; -1: no
    values); row r's run over pane p is its key slot s's `offsets[min(s, last)] ..
    offsets[min(s + 1, last)]` (a key first seen after the pane's sort has none there).
    The GPU twin: `runtime.gpu.holistic.GpuHolistic.window_runs`."""
    rows = len(slots)
    bounds = np.zeros((2, rows * panes_per_row), np.int64)
    if rows:
        _window_runs(
            np.ascontiguousarray(flat_offsets, np.int64),
            np.ascontiguousarray(offset_first, np.int64),
            np.ascontiguousarray(offset_last, np.int64),
            np.ascontiguousarray(base, np.int64),
            np.ascontiguousarray(slots, np.int64),
            np.ascontiguousarray(first_index, np.int64),
            panes_per_row,
            bounds,
        )
    row_first = np.arange(rows, dtype=np.int64) * panes_per_row
    return bounds[0], bounds[1], row_first, np.full(rows, panes_per_row, np.int64)


def holistic_select(
    values: np.ndarray,
    run_start: np.ndarray,
    run_end: np.ndarray,
    row_first: np.ndarray,
    row_runs: np.ndarray,
    evaluation: str,
    fraction: float | tuple[float, ...],
    sorted_runs: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(n, lower, higher) per row: see the module docstring. `fraction` a tuple (a
    percentile over an ARRAY of p): lower and higher are [rows, len(fraction)], every p
    selected in the one pass over the rows."""
    rows = len(row_first)
    fractions = np.atleast_1d(np.asarray(fraction, np.float64))
    n = np.zeros(rows, np.int64)
    lower = np.zeros((rows, len(fractions)), np.int64)
    higher = np.zeros((rows, len(fractions)), np.int64)
    if rows:
        evaluate_runs(
            np.ascontiguousarray(values, np.int64),
            np.ascontiguousarray(run_start, np.int64),
            np.ascontiguousarray(run_end, np.int64),
            np.ascontiguousarray(row_first, np.int64),
            np.ascontiguousarray(row_runs, np.int64),
            MODES[evaluation],
            fractions,
            bool(sorted_runs),
            n,
            lower,
            higher,
        )
    if isinstance(fraction, tuple):
        return n, lower, higher
    return n, lower[:, 0].copy(), higher[:, 0].copy()


@numba.njit(cache=True)
def group_by_slot(slots, values, offsets, out):
    """values into `out` grouped by key slot (a counting sort: within a slot in input
    order), each slot's offsets into it counted into `offsets` (zeros, n_slots + 1)."""
    for i in range(slots.shape[0]):
        offsets[slots[i] + 1] += 1
    for s in range(1, offsets.shape[0]):
        offsets[s] += offsets[s - 1]
    fill = offsets[:-1].copy()
    for i in range(slots.shape[0]):
        out[fill[slots[i]]] = values[i]
        fill[slots[i]] += 1


@numba.njit(cache=True)
def _sort_pane(slots, keys, offsets, out):
    group_by_slot(slots, keys, offsets, out)
    for s in range(offsets.shape[0] - 1):
        out[offsets[s] : offsets[s + 1]].sort()


def sort_pane_timed(
    slots: np.ndarray, keys: np.ndarray, times: np.ndarray, n_slots: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`sort_pane` of values with their event times (a Python window function
    `with_timestamps` reads them): sorted by (slot, value, time), (values, times, offsets)."""
    slots = np.ascontiguousarray(slots, np.int64)
    order = np.lexsort((times, keys, slots))  # the last key is the primary one
    offsets = np.searchsorted(slots[order], np.arange(n_slots + 1, dtype=np.int64))
    return (
        np.ascontiguousarray(keys[order], np.int64),
        np.ascontiguousarray(times[order], np.int64),
        offsets.astype(np.int64),
    )


def sort_pane(slots: np.ndarray, keys: np.ndarray, n_slots: int) -> tuple[np.ndarray, np.ndarray]:
    """One pane's values sorted by (key slot, value), and each slot's offsets into them
    (`offsets[s]:offsets[s + 1]`, n_slots + 1 entries): a counting sort by slot, then each
    slot's values sorted in place (O(n) + per-key sorts, not one global O(n log n) sort)."""
    return by_slot(_sort_pane, slots, keys, n_slots)


def sort_panes(
    panes: list[tuple[tuple | None, list[tuple]]], n_slots: int, timed: bool
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
    """Each pane's values sorted by (slot, value[, time]): (values, offsets, times or None)
    per pane, as `sort_pane` / `sort_pane_timed` give. A pane is (its sorted part as (values,
    offsets, times) or None, its chunks as (slots, values, times)); the sorted part's values
    need be grouped by slot only. A loop over the panes: the per-pane counting sort is
    O(n) whatever the panes' number (a batched form measured no faster,
    docs/performance/holistic.md)."""
    out = []
    for sorted_part, chunks in panes:
        slots, values, times = pane_rows(sorted_part, chunks, timed)
        if timed:
            sorted_values, sorted_times, offsets = sort_pane_timed(slots, values, times, n_slots)
            out.append((sorted_values, offsets, sorted_times))
        else:
            sorted_values, offsets = sort_pane(slots, values, n_slots)
            out.append((sorted_values, offsets, None))
    return out


def by_slot(
    kernel: Callable[..., None], slots: np.ndarray, values: np.ndarray, n_slots: int
) -> tuple[np.ndarray, np.ndarray]:
    """One pane's values placed by `kernel(slots, values, offsets, out)` (`group_by_slot`,
    `_sort_pane`) and each slot's offsets into them (n_slots + 1 entries)."""
    offsets = np.zeros(n_slots + 1, np.int64)
    out = np.empty(len(values), np.int64)
    if len(values):
        kernel(
            np.ascontiguousarray(slots, np.int64),
            np.ascontiguousarray(values, np.int64),
            offsets,
            out,
        )
    return out, offsets


@numba.njit(cache=True)
def kept_pane_range(panes, keep):
    """(least, greatest, count) of the kept rows' panes (count 0: none kept)."""
    low, high, count = 0, -1, 0
    for i in range(panes.shape[0]):
        if keep[i]:
            pane = panes[i]
            if count == 0 or pane < low:
                low = pane
            if count == 0 or pane > high:
                high = pane
            count += 1
    return low, high, count


@numba.njit(cache=True)
def _pane_bounds(panes, keep, low, offsets):
    """The counting half of a stable counting sort of the kept rows by pane - low: each
    pane's bounds into `offsets` [span + 1] (zeroed); returns each pane's next free place."""
    for i in range(panes.shape[0]):
        if keep[i]:
            offsets[panes[i] - low + 1] += 1
    for q in range(1, offsets.shape[0]):
        offsets[q] += offsets[q - 1]
    return offsets[:-1].copy()


@numba.njit(cache=True)
def _rows_by_pane(panes, keep, low, offsets, order):
    """A stable counting sort of the kept rows by pane - low: `offsets` [span + 1] (zeroed)
    gets each pane's bounds, `order` the rows in pane order (row order within a pane)."""
    fill = _pane_bounds(panes, keep, low, offsets)
    for i in range(panes.shape[0]):
        if keep[i]:
            q = panes[i] - low
            order[fill[q]] = i
            fill[q] += 1


@numba.njit(cache=True)
def _scatter_by_pane(panes, keep, low, offsets, slots, values, out_slots, out_values):
    """`_rows_by_pane` and `_gather_two` in one: the kept rows' slots and values written
    straight to their pane's place (no row order array: one pass and 8 bytes a row less)."""
    fill = _pane_bounds(panes, keep, low, offsets)
    for i in range(panes.shape[0]):
        if keep[i]:
            q = panes[i] - low
            out_slots[fill[q]] = slots[i]
            out_values[fill[q]] = values[i]
            fill[q] += 1


@numba.njit(cache=True)
def _gather_two(order, slots, values, out_slots, out_values):
    for j in range(order.shape[0]):
        out_slots[j] = slots[order[j]]
        out_values[j] = values[order[j]]


def split_panes(
    panes: np.ndarray,
    slots: np.ndarray,
    values: np.ndarray,
    keep: np.ndarray,
    times: np.ndarray | None = None,
) -> tuple[list[int], list[tuple[np.ndarray, np.ndarray, np.ndarray | None]], bool]:
    """The kept rows' (slot, order key, event time or None) grouped by pane: (pane ids, one
    chunk per pane, whether the chunks are sorted by (slot, value[, time]): not here, a pane
    is sorted when a window first reads it). `times`: the rows' event times, kept where a
    Python function `with_timestamps` reads the field. Rows keep their order within a pane.
    A counting sort by pane where the kept panes span a range not much longer than the batch
    (a batch in event-time order spans a few panes: O(n), where a stable argsort was O(n log
    n) and a gather per pane); a stable argsort otherwise. The chunks are consecutive slices
    (views) of one gathered copy per column."""
    panes = np.ascontiguousarray(panes, np.int64)
    keep = np.ascontiguousarray(keep, np.bool_)
    low, high, count = kept_pane_range(panes, keep)
    if not count:
        return [], [], False
    span = high - low + 1
    slot_dtype = np.asarray(slots).dtype
    value_dtype = np.asarray(values).dtype
    if (
        span <= 4 * count + 4096
        and times is None
        and slot_dtype == np.int64
        and value_dtype == np.int64
    ):
        offsets = np.zeros(span + 1, np.int64)
        out_slots = np.empty(count, np.int64)
        out_values = np.empty(count, np.int64)
        _scatter_by_pane(
            panes,
            keep,
            low,
            offsets,
            np.ascontiguousarray(slots),
            np.ascontiguousarray(values),
            out_slots,
            out_values,
        )
        present = np.flatnonzero(np.diff(offsets))
        chunks = [
            (out_slots[a:b], out_values[a:b], None)
            for a, b in zip(offsets[present].tolist(), offsets[present + 1].tolist(), strict=True)
        ]
        return (present + low).tolist(), chunks, False
    if span <= 4 * count + 4096:
        offsets = np.zeros(span + 1, np.int64)
        order = np.empty(count, np.int64)
        _rows_by_pane(panes, keep, low, offsets, order)
        sizes = np.diff(offsets)
        present = np.flatnonzero(sizes)
        pane_ids = (present + low).tolist()
        starts = offsets[present].tolist()
        ends = offsets[present + 1].tolist()
    else:
        rows = np.flatnonzero(keep)
        order = rows[np.argsort(panes[rows], kind="stable")]
        row_panes = panes[order]
        bounds = np.flatnonzero(np.diff(row_panes)) + 1
        starts = np.concatenate(([0], bounds)).tolist()
        ends = np.concatenate((bounds, [count])).tolist()
        pane_ids = row_panes[starts].tolist()
    if slot_dtype == np.int64 and value_dtype == np.int64:
        out_slots = np.empty(count, np.int64)
        out_values = np.empty(count, np.int64)
        _gather_two(
            order, np.ascontiguousarray(slots), np.ascontiguousarray(values), out_slots, out_values
        )
    else:
        out_slots, out_values = np.asarray(slots)[order], np.asarray(values)[order]
    out_times = None if times is None else np.asarray(times[order], np.int64)
    chunks = [
        (out_slots[a:b], out_values[a:b], None if out_times is None else out_times[a:b])
        for a, b in zip(starts, ends, strict=True)
    ]
    return pane_ids, chunks, False
