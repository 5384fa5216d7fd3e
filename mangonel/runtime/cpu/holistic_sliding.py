"""Exact percentiles over a key's consecutive sliding windows, one pane out and one in per step
(the CPU's path for MEDIAN, PERCENTILE_* and APPROX_PERCENTILE's exact path over sliding time
windows; `runtime.operators.holistic_sliding` drives it).

A key's next window differs from its last by the panes that left and those that entered (one
slide: ~100 values of ~10,000 in issue 11's shape), so each key keeps, per p, a band of
values [lo, hi] (inclusive; the whole int64 range at an end of the window) around the
percentile's positions: `below`, the number of the window's values under lo, and the band's
values sorted. A step scans only the leaving and entering panes' values: each one under lo
moves `below`, each one in the band is removed from or inserted into it (a binary search and
a shift). The percentile's positions then lie in the band unless the values drifted: its
answer is the band's value at position - below; otherwise the band is rebuilt from the
window's values (`_rebuild_band`: a copy, two selections; margin `band_margin(n)` ranks
either side, so a stationary stream rebuilds rarely). Panes are read grouped by key slot, not
sorted (`group_pane`): no per-pane sort at all.

The state of a key is valid for its window `first` while none of that window's panes changed
(`pane_changed` above the key's `epoch`: rows arrived after the state was made, out of order
or restored) and the panes that leave are still listed (the driver keeps freed panes one
slide longer); anything else rebuilds. Rows of any order are correct (each steps its key's
state from where it is); a firing's rows key by key read a key's band from cache.

Results are the values the selection over the sorted window gives (order keys,
`aggregates.holistic.order_keys`: ties, NaN and -0.0 order as there; p = 0 and 1; PERCENTILE_
DISC's and _CONT's positions, `holistic._positions`).
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import types
from numba.typed import List

from mangonel.runtime.cpu.holistic import _positions, _select

# a key's window of no state: no band to step from
NO_WINDOW = -(1 << 62)
INT64_MIN = np.iinfo(np.int64).min
INT64_MAX = np.iinfo(np.int64).max
# a pane the driver no longer holds (its values unknown): a state stepping it out rebuilds
UNKNOWN_PANE = np.iinfo(np.int64).max


@numba.njit(cache=True)
def band_margin(total):
    """Ranks kept either side of a percentile's positions: ~2 standard deviations of how far
    the positions move against a fixed band while the window is replaced (sqrt(n) / 2 per
    pane of n / 100 values, a random walk over a window's life), so a stationary stream
    rebuilds seldom while a step's inserts stay short."""
    return int(1.25 * math.sqrt(total)) + 16


@numba.njit(cache=True)
def _segment(offsets, slot):
    """(start, end) of key slot `slot`'s values in a grouped pane (a slot past the pane's
    last, first seen after it was grouped, has none)."""
    if slot + 1 >= offsets.shape[0]:
        return 0, 0
    return offsets[slot], offsets[slot + 1]


@numba.njit(cache=True)
def _find(band, size, value):
    """The first index of band[:size] (sorted) holding `value` or more."""
    start, end = 0, size
    while start < end:
        middle = (start + end) >> 1
        if band[middle] < value:
            start = middle + 1
        else:
            end = middle
    return start


@numba.njit(cache=True)
def _gather(pane_values, pane_offsets, base, slot, first, panes_per_window, scratch):
    """The key's values of the window's panes into scratch (grown where short)."""
    filled = 0
    for q in range(first, first + panes_per_window):
        values = pane_values[q - base]
        start, end = _segment(pane_offsets[q - base], slot)
        if filled + end - start > scratch.shape[0]:
            grown = np.empty(2 * (filled + end - start), np.int64)
            grown[:filled] = scratch[:filled]
            scratch = grown
        for i in range(start, end):
            scratch[filled] = values[i]
            filled += 1
    return scratch, filled


@numba.njit(cache=True)
def _rebuild_band(scratch, total, low, high, band):
    """A band around positions low .. high of scratch[:total] (permuted): (lo, hi, below,
    size, band) with band[:size] the values in [lo, hi] sorted (`band` reallocated where
    short), `below` the values under lo."""
    margin = band_margin(total)
    first = max(low - margin, 0)
    last = min(high + margin, total - 1)
    if first == 0:
        lo = INT64_MIN
        first_tie = 0
    else:
        _select(scratch, total, first)
        lo = scratch[first]
        first_tie = 0  # values equal to lo before its position: in the band too
        for i in range(first):
            first_tie += scratch[i] == lo
    if last == total - 1:
        hi = INT64_MAX
        last_tie = 0
    else:
        suffix = scratch[first:]
        _select(suffix, total - first, last - first)
        hi = scratch[last]
        last_tie = 0
        for i in range(last + 1, total):
            last_tie += scratch[i] == hi
    size = last - first + 1 + first_tie + last_tie
    if band.shape[0] < size:
        band = np.empty(size + size // 2 + 16, np.int64)
    filled = 0
    if first_tie:
        for i in range(first):
            if scratch[i] == lo:
                band[filled] = lo
                filled += 1
    for i in range(first, last + 1):
        band[filled] = scratch[i]
        filled += 1
    if last_tie:
        for i in range(last + 1, total):
            if scratch[i] == hi:
                band[filled] = hi
                filled += 1
    band[:size].sort()
    return lo, hi, first - first_tie, size, band


@numba.njit(cache=True)
def _move(values, start, end, sign, lo, hi, below, size, band):
    """Values values[start:end] out of (sign -1) or into (+1) a band state: (below, size,
    band, whether band is a new array); size -1 where a value to remove is not in the band
    (the state was not the window's: the caller rebuilds)."""
    grown = False
    for i in range(start, end):
        x = values[i]
        below += sign * (x < lo)
        if x < lo or x > hi:  # most values: predicted, no band work
            continue
        at = _find(band, size, x)
        if sign < 0:
            if at >= size or band[at] != x:
                return below, -1, band, grown
            for j in range(at, size - 1):
                band[j] = band[j + 1]
            size -= 1
        else:
            if size == band.shape[0]:
                larger = np.empty(2 * size + 16, np.int64)
                larger[:size] = band[:size]
                band = larger
                grown = True
            for j in range(size, at, -1):
                band[j] = band[j - 1]
            band[at] = x
            size += 1
    return below, size, band, grown


@numba.njit(cache=True)
def sliding_percentiles(
    pane_values, pane_offsets, pane_changed, base, panes_per_window, row_slots, row_first,
    mode, fractions, generation, state_first, state_epoch, state_count, state_bounds, bands,
    n, lower, higher,
):  # fmt: skip
    """Fill n, lower and higher (one entry per row and p) for rows (key slot `row_slots[r]`,
    window from absolute pane `row_first[r]`) over panes listed from `base`
    (`pane_values[q - base]` grouped by `pane_offsets[q - base]`, `pane_changed[q - base]`:
    the generation of its last change, UNKNOWN_PANE where not held), stepping and updating
    each key's state (`state_first`, `state_epoch`, `state_count` per slot; per slot and p
    `state_bounds[slot, p]` = (lo, hi, below, size) and `bands[slot * ps + p]`); states made
    here get epoch `generation`. See the module docstring."""
    ps = fractions.shape[0]
    pw = panes_per_window
    listed = len(pane_values)
    scratch = np.empty(1024, np.int64)
    for r in range(row_slots.shape[0]):
        slot = row_slots[r]
        first = row_first[r]
        before = state_first[slot]
        stepped = before != NO_WINDOW and before <= first < before + pw and before >= base
        if stepped and state_epoch[slot] != generation:
            # made by an earlier call: valid while none of its window's panes changed since
            for q in range(before, min(before + pw, base + listed)):
                if pane_changed[q - base] > state_epoch[slot]:
                    stepped = False
                    break
        total = 0
        if stepped:
            total = state_count[slot]
            leave_end = min(first, before + pw)
            enter_start = max(before + pw, first)
            for q in range(before, first + pw):
                if leave_end <= q < enter_start:
                    continue  # in both windows
                sign = -1 if q < leave_end else 1
                values = pane_values[q - base]
                start, end = _segment(pane_offsets[q - base], slot)
                total += sign * (end - start)
                for f in range(ps):
                    k = slot * ps + f
                    if state_bounds[slot, f, 3] < 0:
                        continue
                    below, size, band, grown = _move(
                        values, start, end, sign, state_bounds[slot, f, 0],
                        state_bounds[slot, f, 1], state_bounds[slot, f, 2],
                        state_bounds[slot, f, 3], bands[k],
                    )  # fmt: skip
                    if grown:
                        bands[k] = band
                    state_bounds[slot, f, 2] = below
                    state_bounds[slot, f, 3] = size
        else:
            for q in range(first, first + pw):
                start, end = _segment(pane_offsets[q - base], slot)
                total += end - start
        n[r] = total
        state_first[slot] = first
        state_epoch[slot] = generation
        state_count[slot] = total
        gathered = -1
        for f in range(ps):
            lower[r, f] = 0
            higher[r, f] = 0
            if total == 0:
                state_bounds[slot, f, 3] = -1
                continue
            low, high = _positions(mode, fractions[f], total)
            below = state_bounds[slot, f, 2]
            size = state_bounds[slot, f, 3]
            # a band grown with a drift is recentred too (its inserts got long)
            oversized = size > 8 * band_margin(total) + 64
            if not stepped or size < 0 or below > low or high >= below + size or oversized:
                if gathered < 0:
                    scratch, gathered = _gather(
                        pane_values, pane_offsets, base, slot, first, pw, scratch
                    )
                k = slot * ps + f
                lo, hi, below, size, band = _rebuild_band(scratch, gathered, low, high, bands[k])
                bands[k] = band
                state_bounds[slot, f, 0] = lo
                state_bounds[slot, f, 1] = hi
                state_bounds[slot, f, 2] = below
                state_bounds[slot, f, 3] = size
            band = bands[slot * ps + f]
            lower[r, f] = band[low - below]
            higher[r, f] = band[high - below]


@numba.njit(cache=True)
def _extend_bands(bands, count):
    for _ in range(count - len(bands)):
        bands.append(np.empty(0, np.int64))


def new_bands() -> List:
    """An empty list of band buffers (one int64 array per key slot and p)."""
    return List.empty_list(types.int64[::1])


def extend_bands(bands: List, count: int) -> None:
    """Grow the list to `count` band buffers (empty ones)."""
    if len(bands) < count:
        _extend_bands(bands, count)


@numba.njit(cache=True)
def _group_pane(slots, values, offsets, out):
    for i in range(slots.shape[0]):
        offsets[slots[i] + 1] += 1
    for s in range(1, offsets.shape[0]):
        offsets[s] += offsets[s - 1]
    fill = offsets[:-1].copy()
    for i in range(slots.shape[0]):
        out[fill[slots[i]]] = values[i]
        fill[slots[i]] += 1


def group_pane(
    slots: np.ndarray, values: np.ndarray, n_slots: int
) -> tuple[np.ndarray, np.ndarray]:
    """One pane's values grouped by key slot (a counting sort; not sorted within a slot) and
    each slot's offsets into them (n_slots + 1 entries)."""
    offsets = np.zeros(n_slots + 1, np.int64)
    out = np.empty(len(values), np.int64)
    if len(values):
        _group_pane(
            np.ascontiguousarray(slots, np.int64),
            np.ascontiguousarray(values, np.int64),
            offsets,
            out,
        )
    return out, offsets


def pane_list(arrays: list[np.ndarray]) -> List:
    """A numba list of the panes' arrays (int64, contiguous) for `sliding_percentiles`."""
    listed = List.empty_list(types.int64[::1])
    for array in arrays:
        listed.append(np.ascontiguousarray(array, np.int64))
    return listed


@numba.njit(cache=True)
def _band_bytes(bands):
    total = 0
    for band in bands:
        total += band.nbytes
    return total


def band_bytes(bands: List) -> int:
    """Bytes the band buffers hold."""
    return int(_band_bytes(bands)) if len(bands) else 0
