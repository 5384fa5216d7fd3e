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
answer is the band's value at position - below. A band grown past its margins is cut back
in place (`_trim`); one that lost the positions is rebuilt from the window's values
(`_rebuild`: one copy of them, a bracket sampled in cache, the band selected in the
bracket's values; `band_margin(n)` ranks either side, so a stationary stream rebuilds about
once a window's life). Panes are read grouped by key slot, not sorted (`group_pane`): no
per-pane sort at all. A key's values lie in ~800-byte pieces over ~100 panes: they are read
through the panes' addresses (`pane_table`) and the next pieces prefetched.

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

from mangonel.aggregates.holistic import order_keys
from mangonel.runtime.cpu.holistic import _positions, _select, by_slot, group_by_slot
from mangonel.runtime.cpu.intrinsics import int64_at, prefetch_for_reading

# a key's window of no state: no band to step from
NO_WINDOW = -(1 << 62)
INT64_MIN = np.iinfo(np.int64).min
INT64_MAX = np.iinfo(np.int64).max
# a pane the driver no longer holds (its values unknown): a state stepping it out rebuilds
UNKNOWN_PANE = np.iinfo(np.int64).max


@numba.njit(cache=True)
def _pane(pane_table, index):
    """Listed pane `index`'s values (`pane_table[index]` = (address, length))."""
    return numba.carray(int64_at(pane_table[index, 0]), pane_table[index, 1])


@numba.njit(cache=True)
def band_margin(total):
    """Ranks kept either side of a percentile's positions. A key's count below the band
    walks by ~7 ranks a step (10^4 values, a pane of 10^2 out and in), so rebuilds fall as
    the margin squared while a step's inserts and their shifts grow with it: measured over
    0.3 .. 2 sqrt(n) on issue 11's shape, 0.6 .. 1.0 sqrt(n) cost the least."""
    return int(0.8 * math.sqrt(total)) + 16


@numba.njit(cache=True)
def _segment(offsets, offset_first, index, slot):
    """(start, end) of key slot `slot`'s values in listed pane `index`, whose slot offsets
    lie in `offsets` from `offset_first[index]` to `offset_first[index + 1]` (a slot past
    the pane's last, first seen after it was grouped, has none)."""
    at = offset_first[index] + slot
    if at + 1 >= offset_first[index + 1]:
        return 0, 0
    return offsets[at], offsets[at + 1]


@numba.njit(cache=True)
def _find(band, size, value):
    """The first index of band[:size] (sorted) holding `value` or more: halving without a
    branch on the comparison (a band's values are random: a branch is mispredicted half
    the time)."""
    if size == 0:
        return 0
    at = 0
    length = size
    while length > 1:
        half = length >> 1
        at += (band[at + half - 1] < value) * half
        length -= half
    return at + (band[at] < value)


# a rebuild over more values than 4x this many brackets the band from a sample first
SAMPLE = 512


@numba.njit(cache=True)
def _exact_band(values, count, first, last, open_low, open_high, band):
    """A band of values[:count] (permuted) from position `first` to `last`: (lo, hi, below,
    size, band) with band[:size] the values in [lo, hi] sorted (`band` reallocated where
    short) and `below` the values under lo; lo, hi the int64 extremes where `open_low`,
    `open_high` (the band reaches the window's end: every value that comes is inside)."""
    if open_low:
        lo = INT64_MIN
        first_tie = 0
    else:
        _select(values, count, first)
        lo = values[first]
        first_tie = 0  # values equal to lo before its position: in the band too
        for i in range(first):
            first_tie += values[i] == lo
    if open_high:
        hi = INT64_MAX
        last_tie = 0
    else:
        suffix = values[first:]
        _select(suffix, count - first, last - first)
        hi = values[last]
        last_tie = 0
        for i in range(last + 1, count):
            last_tie += values[i] == hi
    size = last - first + 1 + first_tie + last_tie
    if band.shape[0] < size:
        band = np.empty(size + size // 2 + 16, np.int64)
    filled = 0
    if first_tie:
        for i in range(first):
            if values[i] == lo:
                band[filled] = lo
                filled += 1
    band[filled : filled + last - first + 1] = values[first : last + 1]
    filled += last - first + 1
    if last_tie:
        for i in range(last + 1, count):
            if values[i] == hi:
                band[filled] = hi
                filled += 1
    band[:size].sort()
    return lo, hi, first - first_tie, size, band


@numba.njit(cache=True)
def _gather(pane_table, offsets, offset_first, base, slot, first, pw, total, work):
    """The key's window's values into work[:total] (`work` grown where short), the pieces
    a few panes ahead prefetched."""
    if work.shape[0] < total:
        work = np.empty(2 * total, np.int64)
    ahead = 4
    for q in range(first, min(first + ahead, first + pw)):
        start, end = _segment(offsets, offset_first, q - base, slot)
        prefetch_for_reading(pane_table[q - base, 0] + 8 * start)
    filled = 0
    for q in range(first, first + pw):
        if q + ahead < first + pw:
            start, end = _segment(offsets, offset_first, q + ahead - base, slot)
            address = pane_table[q + ahead - base, 0] + 8 * start
            for line in range(0, 8 * (end - start), 64):
                prefetch_for_reading(address + line)
        start, end = _segment(offsets, offset_first, q - base, slot)
        if end > start:
            work[filled : filled + end - start] = _pane(pane_table, q - base)[start:end]
        filled += end - start
    return work


@numba.njit(cache=True)
def _bracket(work, total, at_low, at_high, sample):
    """Floyd and Rivest's sampling: values (lo, hi) around positions at_low .. at_high of
    work[:total] from SAMPLE of them at even strides, 1.5 sqrt(SAMPLE) samples (3 standard
    deviations) beyond; the int64 extremes past the sample's ends."""
    for j in range(SAMPLE):
        sample[j] = work[(j * total) // SAMPLE]
    spread = int(1.5 * math.sqrt(SAMPLE)) + 2
    low_sample = (at_low * SAMPLE) // total - spread
    high_sample = (at_high * SAMPLE) // total + spread + 1
    lo = INT64_MIN
    if low_sample >= 0:
        _select(sample, SAMPLE, low_sample)
        lo = sample[low_sample]
    else:
        low_sample = 0
    hi = INT64_MAX
    if high_sample < SAMPLE:
        suffix = sample[low_sample:]
        _select(suffix, SAMPLE - low_sample, high_sample - low_sample)
        hi = sample[high_sample]
    return lo, hi


@numba.njit(cache=True)
def _rebuild(
    pane_table,
    offsets,
    offset_first,
    base,
    slot,
    first,
    pw,
    total,
    low,
    high,
    band,
    work,
    sample,
):
    """A band around positions low .. high of the key's window (`_exact_band`'s result,
    and `work` grown where short). The window's values are copied once (reading them from
    ~100 panes is most of the cost); over a few thousand, the values of a sampled bracket
    are kept in place by one pass in cache (where the bracket misses, all of them: copied
    again) and the band is selected in those."""
    margin = band_margin(total)
    at_low = max(low - margin, 0)
    at_high = min(high + margin, total - 1)
    open_low = at_low == 0
    open_high = at_high == total - 1
    work = _gather(pane_table, offsets, offset_first, base, slot, first, pw, total, work)
    below = 0
    kept = total
    if total > 4 * SAMPLE and not (open_low and open_high):
        lo, hi = _bracket(work, total, at_low, at_high, sample)
        lo = INT64_MIN if open_low else lo
        hi = INT64_MAX if open_high else hi
        for i in range(total):
            x = work[i]
            below += x < lo
            work[kept - total] = x  # in place: the kept count never passes i
            kept += (x >= lo) & (x <= hi)
        kept -= total
        if below > at_low or at_high >= below + kept:  # the sample missed: every value
            work = _gather(pane_table, offsets, offset_first, base, slot, first, pw, total, work)
            below = 0
            kept = total
    lo, hi, under, size, band = _exact_band(
        work, kept, at_low - below, at_high - below, open_low, open_high, band
    )
    return lo, hi, below + under, size, band, work


@numba.njit(cache=True)
def _trim(band, size, below, at_low, at_high):
    """A band that holds positions at_low .. at_high cut to them (with their values'
    ties), its values moved to its front: (lo or None, hi or None where a side is kept
    whole, below, size)."""
    start = 0
    lo_cut = at_low > below
    lo = band[at_low - below] if lo_cut else 0
    if lo_cut:
        start = _find(band, size, lo)
    end = size
    hi_cut = at_high - below < size - 1
    hi = band[at_high - below] if hi_cut else 0
    if hi_cut:
        end = at_high - below + 1
        while end < size and band[end] == hi:
            end += 1
    band[: end - start] = band[start:end]
    return lo_cut, lo, hi_cut, hi, below + start, end - start


@numba.njit(cache=True)
def _sort_small(values, count):
    """values[:count] sorted in place: insertion for the few a step brings, numba's sort
    past that."""
    if count > 32:
        values[:count].sort()
        return
    for i in range(1, count):
        x = values[i]
        j = i - 1
        while j >= 0 and values[j] > x:
            values[j + 1] = values[j]
            j -= 1
        values[j + 1] = x


@numba.njit(cache=True)
def _move(values, start, end, sign, lo, hi, below, size, band, picked):
    """Values values[start:end] out of (sign -1) or into (+1) a band state: (below, size,
    band, whether band is a new array); size -1 where a value to remove is not in the band
    (the state was not the window's: the caller rebuilds). The values inside the band are
    picked (`picked`: room for end - start), sorted, and taken out or merged in by one pass
    over the band from the first place they touch: a pane's few values cost one shift of
    the band's tail, not one each."""
    grown = False
    count = 0
    for i in range(start, end):
        x = values[i]
        below += sign * (x < lo)
        picked[count] = x  # kept only where inside: no branch
        count += (x >= lo) & (x <= hi)
    if count == 0:
        return below, size, band, grown
    _sort_small(picked, count)
    if sign < 0:
        write = _find(band, size, picked[0])
        matched = 0
        for read in range(write, size):
            x = band[read]
            if matched < count and x == picked[matched]:
                matched += 1
                continue
            band[write] = x
            write += 1
        if matched < count:
            return below, -1, band, grown
        return below, write, band, grown
    if size + count > band.shape[0]:
        larger = np.empty(2 * (size + count) + 16, np.int64)
        larger[:size] = band[:size]
        band = larger
        grown = True
    read = size - 1
    write = size + count - 1
    for come in range(count - 1, -1, -1):  # merged from the back: each value moves once
        x = picked[come]
        while read >= 0 and band[read] > x:
            band[write] = band[read]
            read -= 1
            write -= 1
        band[write] = x
        write -= 1
    return below, size + count, band, grown


@numba.njit(cache=True)
def sliding_percentiles(
    pane_table, offsets, offset_first, pane_changed, base, panes_per_window, row_slots,
    row_first, mode, fractions, generation, state_first, state_epoch, state_count,
    state_bounds, bands, n, lower, higher,
):  # fmt: skip
    """Fill n, lower and higher (one entry per row and p) for rows (key slot `row_slots[r]`,
    window from absolute pane `row_first[r]`) over panes listed from `base` (listed pane
    i = q - base: values at `pane_table[i]` = (address, length) grouped by key slot, the
    slots' offsets into them `offsets[offset_first[i]:offset_first[i + 1]]`,
    `pane_changed[i]` the generation of its last change, UNKNOWN_PANE where not held),
    stepping and updating each key's state (`state_first`, `state_epoch`, `state_count` per
    slot; per slot and p `state_bounds[slot, p]` = (lo, hi, below, size) and
    `bands[slot * ps + p]`); states made here get epoch `generation`. See the module docstring."""
    ps = fractions.shape[0]
    pw = panes_per_window
    listed = pane_table.shape[0]
    work = np.empty(1024, np.int64)
    sample = np.empty(SAMPLE, np.int64)
    picked = np.empty(1024, np.int64)
    # the last band fetched from `bands` (a typed list: 30-35 ns a read on this VM; the
    # rows go key by key, so one key's band is read once a run of its windows)
    cached_k = -1
    cached_band = np.empty(0, np.int64)
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
        if first + pw < base + listed:
            # the pane the key's next window takes in (the rows go key by key): its piece
            # is a cold miss otherwise
            start, end = _segment(offsets, offset_first, first + pw - base, slot)
            address = pane_table[first + pw - base, 0] + 8 * start
            for line in range(0, 8 * (end - start), 64):
                prefetch_for_reading(address + line)
        if first >= base:
            # ... and the one it leaves (read a window ago, from memory again)
            start, end = _segment(offsets, offset_first, first - base, slot)
            address = pane_table[first - base, 0] + 8 * start
            for line in range(0, 8 * (end - start), 64):
                prefetch_for_reading(address + line)
        total = 0
        if stepped:
            total = state_count[slot]
            leave_end = min(first, before + pw)
            enter_start = max(before + pw, first)
            for q in range(before, first + pw):
                if leave_end <= q < enter_start:
                    continue  # in both windows
                sign = -1 if q < leave_end else 1
                start, end = _segment(offsets, offset_first, q - base, slot)
                if end == start:
                    continue  # no band to fetch (a growing or shrinking window's side)
                values = _pane(pane_table, q - base)
                total += sign * (end - start)
                if end - start > picked.shape[0]:
                    picked = np.empty(2 * (end - start), np.int64)
                for f in range(ps):
                    k = slot * ps + f
                    if state_bounds[slot, f, 3] < 0:
                        continue
                    if k != cached_k:
                        cached_k = k
                        cached_band = bands[k]
                    below, size, band, grown = _move(
                        values, start, end, sign, state_bounds[slot, f, 0],
                        state_bounds[slot, f, 1], state_bounds[slot, f, 2],
                        state_bounds[slot, f, 3], cached_band, picked,
                    )  # fmt: skip
                    if grown:
                        bands[k] = band
                        cached_band = band
                    state_bounds[slot, f, 2] = below
                    state_bounds[slot, f, 3] = size
        else:
            for q in range(first, first + pw):
                start, end = _segment(offsets, offset_first, q - base, slot)
                total += end - start
        n[r] = total
        state_first[slot] = first
        state_epoch[slot] = generation
        state_count[slot] = total
        for f in range(ps):
            lower[r, f] = 0
            higher[r, f] = 0
            if total == 0:
                state_bounds[slot, f, 3] = -1
                continue
            k = slot * ps + f
            low, high = _positions(mode, fractions[f], total)
            below = state_bounds[slot, f, 2]
            size = state_bounds[slot, f, 3]
            if k != cached_k:
                cached_k = k
                cached_band = bands[k]
            band = cached_band
            covered = size >= 0 and below <= low and high < below + size
            margin = band_margin(total)
            if stepped and covered and size > 2 * margin + 16:
                # a band grown with a drift (or a window that grew): cut to the margin
                # again, so inserts stay short
                lo_cut, lo, hi_cut, hi, below, size = _trim(
                    band, size, below, max(low - margin, 0), min(high + margin, total - 1)
                )
                if lo_cut:
                    state_bounds[slot, f, 0] = lo
                if hi_cut:
                    state_bounds[slot, f, 1] = hi
                state_bounds[slot, f, 2] = below
                state_bounds[slot, f, 3] = size
            if not (stepped and covered):
                lo, hi, below, size, band, work = _rebuild(
                    pane_table, offsets, offset_first, base, slot, first, pw, total, low,
                    high, band, work, sample,
                )  # fmt: skip
                bands[k] = band
                cached_band = band
                state_bounds[slot, f, 0] = lo
                state_bounds[slot, f, 1] = hi
                state_bounds[slot, f, 2] = below
                state_bounds[slot, f, 3] = size
            lower[r, f] = band[low - below]
            higher[r, f] = band[high - below]


@numba.njit(cache=True)
def _extend_bands(bands, count):
    for _ in range(count - len(bands)):
        bands.append(np.empty(0, np.int64))


@numba.njit(cache=True)
def _drop_bands(bands, slots, ps):
    for slot in slots:
        for f in range(ps):
            bands[slot * ps + f] = np.empty(0, np.int64)


def drop_bands(bands: List, slots: np.ndarray, ps: int) -> None:
    """Empty the band buffers of key slots `slots` (`ps` per slot): their memory goes."""
    if len(slots):
        _drop_bands(bands, np.ascontiguousarray(slots, np.int64), ps)


def new_bands() -> List:
    """An empty list of band buffers (one int64 array per key slot and p)."""
    return List.empty_list(types.int64[::1])


def extend_bands(bands: List, count: int) -> None:
    """Grow the list to `count` band buffers (empty ones)."""
    if len(bands) < count:
        _extend_bands(bands, count)


def group_pane(
    slots: np.ndarray, values: np.ndarray, n_slots: int
) -> tuple[np.ndarray, np.ndarray]:
    """One pane's values grouped by key slot (a counting sort; not sorted within a slot) and
    each slot's offsets into them (n_slots + 1 entries)."""
    return by_slot(group_by_slot, slots, values, n_slots)


# `aggregates.holistic.order_keys` of a double's bits: NaN's one key, the flip of negatives
_NAN_KEY = 0x7FF8000000000000
_MAGNITUDE = 0x7FFFFFFFFFFFFFFF
_INFINITY_BITS = 0x7FF0000000000000


@numba.njit(cache=True, inline="always")
def _double_order_key(bits):
    """`order_keys` of one double given as its bits: -0.0 is 0.0, every NaN one key, a
    negative's bits flipped below the positives'."""
    if bits == INT64_MIN:  # -0.0
        return np.int64(0)
    if (bits & _MAGNITUDE) > _INFINITY_BITS:
        return np.int64(_NAN_KEY)
    if bits < 0:
        return bits ^ _MAGNITUDE
    return bits


@numba.njit(cache=True)
def _cell_bounds(panes, slots, keep, low, span, n_slots, cells):
    """Bounds of the kept rows' (pane - low, slot) cells into `cells` [span * n_slots + 1]
    (zeroed): cell c's rows go to cells[c] .. cells[c + 1]. False where a kept row lies
    outside the span or the slots (the caller splits another way)."""
    for i in range(panes.shape[0]):
        if keep[i]:
            q = panes[i] - low
            slot = slots[i]
            if q < 0 or q >= span or slot < 0 or slot >= n_slots:
                return False
            cells[q * n_slots + slot + 1] += 1
    for c in range(1, cells.shape[0]):
        cells[c] += cells[c - 1]
    return True


@numba.njit(cache=True)
def _scatter_cells(panes, slots, values, keep, low, n_slots, doubles, cells, out):
    """The kept rows' values (order keys; `doubles`: a double's bits, keyed here) to their
    cell's next place (row order within a cell)."""
    fill = cells[:-1].copy()
    for i in range(panes.shape[0]):
        if keep[i]:
            cell = (panes[i] - low) * n_slots + slots[i]
            x = values[i]
            out[fill[cell]] = _double_order_key(x) if doubles else x
            fill[cell] += 1


def split_grouped(
    panes: np.ndarray,
    slots: np.ndarray,
    values: np.ndarray,
    keep: np.ndarray,
    n_slots: int,
    pane_range: tuple[int, int] | None,
) -> tuple[list[int], list[tuple[np.ndarray, np.ndarray]]] | None:
    """A batch's kept values grouped by (pane, key slot) in one counting sort: (pane ids,
    per pane its values grouped by slot and the slots' offsets, n_slots + 1 entries), the
    form `group_pane` gives and `sliding_percentiles` reads, so the firing groups nothing
    (it did one more pass over every value). `values`: order keys, or doubles (keyed
    here: no order-key array). None where the (pane, slot) cells would outnumber the rows
    (a batch spread over many panes) or `pane_range` (first, last pane of the kept rows)
    is unknown or wrong: the caller splits by pane. The values lie in one NumPy array (from
    Arrow's pool, tried: 35-52 k page faults a run of issue 11's shape against ~1 k)."""
    if pane_range is None or n_slots <= 0:
        return None
    low, high = pane_range
    span = high - low + 1
    if span <= 0 or span * n_slots > 4 * len(panes) + 4096:
        return None
    doubles = values.dtype == np.float64
    if not doubles:
        values = order_keys(values)  # integers are their own keys: no copy
    cells = np.zeros(span * n_slots + 1, np.int64)
    slots = np.ascontiguousarray(slots, np.int64)
    keep = np.ascontiguousarray(keep, np.bool_)
    panes = np.ascontiguousarray(panes, np.int64)
    if not _cell_bounds(panes, slots, keep, low, span, n_slots, cells):
        return None
    out = np.empty(int(cells[-1]), np.int64)
    bits = np.ascontiguousarray(values).view(np.int64)
    _scatter_cells(panes, slots, bits, keep, low, n_slots, doubles, cells, out)
    starts = cells[::n_slots]  # each pane's first value (span + 1 entries)
    present = np.flatnonzero(starts[1:] > starts[:-1])
    pieces = []
    for q in present.tolist():
        offsets = cells[q * n_slots : (q + 1) * n_slots + 1] - cells[q * n_slots]
        pieces.append((out[starts[q] : starts[q + 1]], offsets))
    return (present + low).tolist(), pieces


def flat_offsets(per_pane: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The listed panes' slot offsets in one array, and where each pane's begin (one entry
    more than panes): `sliding_percentiles`' `offsets`, `offset_first`."""
    lengths = np.array([len(o) for o in per_pane], np.int64)
    offset_first = np.zeros(len(per_pane) + 1, np.int64)
    np.cumsum(lengths, out=offset_first[1:])
    joined = np.concatenate(per_pane).astype(np.int64, copy=False) if per_pane else lengths
    return joined, offset_first


def pane_table(arrays: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """The panes' values for `sliding_percentiles`: (address, length) per pane, and the
    arrays (int64, contiguous) those point into, which the caller must hold while the
    kernel runs."""
    held = [np.ascontiguousarray(array, np.int64) for array in arrays]
    table = np.zeros((len(held), 2), np.int64)
    for index, array in enumerate(held):
        table[index] = array.ctypes.data, len(array)
    return table, held


@numba.njit(cache=True)
def _band_bytes(bands):
    total = 0
    for band in bands:
        total += band.nbytes
    return total


def band_bytes(bands: List) -> int:
    """Bytes the band buffers hold."""
    return int(_band_bytes(bands)) if len(bands) else 0
