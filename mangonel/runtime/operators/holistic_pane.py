"""One pane's held values of one holistic field (`HolisticTimeWindows` keeps one per field and
pane until no unfired window reads the pane): the chunks as batches brought them, and once a
window read the pane, its values sorted per key slot."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mangonel.runtime.host.arrays import pane_rows

# values a firing's span of sorted panes may hold beyond what its current chunk needs
# (`pane_span`: the chunks after it read the same concatenation; 256 MB of order keys)
MAX_SPAN_VALUES = 1 << 25


@dataclass
class HeldPane:
    """One pane's values of one field: chunks as they arrived (key slot, order key, and the
    event time where a Python function `with_timestamps` reads the field, else None) on the
    holistic step's backend, and once a window read it, the values sorted by
    (slot, value[, time]) with per-slot offsets (and their times in the same order).
    `presorted`: every chunk came sorted (the GPU's `split_panes`), so a pane of one chunk
    needs no sort. `by_value` False: the values are grouped by slot but not sorted within
    one (the CPU's sliding percentiles read them so, `holistic_sliding.group`). `changed`:
    the driver's generation when values last came (a key's sliding state made before it
    is stale)."""

    chunks: list[tuple[Any, Any, Any]] = field(default_factory=list)
    sorted_values: Any = None
    offsets: Any = None  # host (CPU) or device (GPU) offsets
    sorted_times: Any = None
    presorted: bool = True
    by_value: bool = True
    changed: int = 0

    @property
    def nbytes(self) -> int:
        held = sum(s.nbytes + v.nbytes + (0 if t is None else t.nbytes) for s, v, t in self.chunks)
        if self.sorted_values is not None and self.offsets is not None:
            held += self.sorted_values.nbytes + self.offsets.nbytes
        if self.sorted_times is not None:
            held += self.sorted_times.nbytes
        return held

    @property
    def length(self) -> int:
        """Values held, sorted or not (from the arrays' shapes: no device read)."""
        held = 0 if self.sorted_values is None else len(self.sorted_values)
        return held + sum(len(values) for _, values, _ in self.chunks)

    @property
    def needs_sort(self) -> bool:
        """Whether a window reading the pane needs it sorted first: it has unsorted chunks,
        or its values are grouped by slot but not sorted within one (`by_value` False)."""
        return self.sorted_values is None or bool(self.chunks) or not self.by_value

    def unsorted(self) -> tuple[tuple[Any, Any, Any] | None, list[tuple[Any, Any, Any]]]:
        """The pane as the kernels' `sort_panes` takes it: (its sorted part as (values,
        offsets, times), or None; its chunks)."""
        if self.sorted_values is None or self.offsets is None:
            return None, list(self.chunks)
        return (self.sorted_values, self.offsets, self.sorted_times), list(self.chunks)

    def take_sorted(self, values: Any, offsets: Any, times: Any) -> None:  # noqa: ANN401
        """Hold `values` sorted by (slot, value[, time]) with their `offsets` (and times),
        in place of every chunk."""
        self.sorted_values, self.offsets, self.sorted_times = values, offsets, times
        self.chunks = []
        self.presorted = True
        self.by_value = True

    def add(self, chunk: tuple[Any, Any, Any], presorted: bool) -> None:
        self.chunks.append(chunk)
        self.presorted = self.presorted and presorted

    def raw(self, kernels: Any, timed: bool) -> tuple[Any, Any, Any]:  # noqa: ANN401
        """(slots, order keys, event times) of every value where `kernels` (the holistic
        kernels) keep them (`concatenate`), sorted ones first; the times are empty unless
        `timed`."""
        sorted_part = (
            None
            if self.sorted_values is None or self.offsets is None
            else (self.sorted_values, self.offsets, self.sorted_times)
        )
        return pane_rows(sorted_part, self.chunks, timed, kernels.concatenate, kernels.to_host)


@dataclass
class PaneSpan:
    """A field's sorted panes [low, end) in one flat array (`values`, `times` where timed)
    with their offsets (`offsets`; pane i's start at `offset_first[i]`, its last index
    `offset_last[i]`, -1 where no pane) and the values' `base` per pane: the inputs of the
    kernels' `window_runs`."""

    low: int
    end: int
    values: Any
    times: Any
    offsets: Any
    offset_first: np.ndarray
    offset_last: np.ndarray
    base: np.ndarray


# values an arena holds at least (a query's first firings do not regrow it every time)
MIN_ARENA_VALUES = 1 << 16


@dataclass
class _Placed:
    """A pane in an arena: the pane, the arrays it holds (views of the arena's buffers: a
    pane that holds others since, re-sorted after late values, is placed anew) and their
    starts in the buffers."""

    pane: HeldPane
    arrays: tuple[Any, Any, Any]  # sorted values, offsets, sorted times (None untimed)
    starts: tuple[int, int, int]


def _held_arrays(pane: HeldPane) -> tuple[Any, Any, Any]:
    return pane.sorted_values, pane.offsets, pane.sorted_times


class PaneArena:
    """One holistic field's sorted panes in three flat buffers that outlive a firing: the
    values, the per-slot offsets and, for a timed field, the event times, on the holistic
    kernels' backend. A pane is copied in once, when a firing first reads it sorted, and
    from then on holds views of the buffers, so a firing's span is the buffers and each
    pane's starts. Before, every firing concatenated the panes its windows cover: at
    w / s = 100 each value was copied 100 times, 800 MB a firing of 1 M-value panes.

    Space of panes freed or re-sorted is taken back when a buffer is full: the live panes
    and the new ones are copied into buffers twice their size (each value is copied again
    only after as many new values as live ones have come), and the old buffers are freed
    with the last view of them."""

    def __init__(self, kernels: Any, timed: bool) -> None:  # noqa: ANN401 - the holistic kernels
        self.kernels = kernels
        self.timed = timed
        self.buffers: list[Any] = [None, None, None]
        self.used = [0, 0, 0]
        self.placed: dict[int, _Placed] = {}

    @property
    def parts(self) -> range:
        return range(3 if self.timed else 2)

    @property
    def spare_bytes(self) -> int:
        """Bytes of the buffers no live pane's view holds (free, or of panes gone)."""
        held = sum(int(b.nbytes) for b in self.buffers if b is not None)
        live = sum(int(a.nbytes) for p in self.placed.values() for a in p.arrays if a is not None)
        return held - live

    def arrays(self) -> tuple[Any, Any, Any]:
        """The buffers (values, offsets, times; an empty array where none was made yet)."""
        return tuple(
            self.kernels.allocate(0, np.int64) if buffer is None else buffer
            for buffer in self.buffers
        )

    def clear(self) -> None:
        """Forget every pane and free the buffers (the panes keep their views)."""
        self.buffers = [None, None, None]
        self.used = [0, 0, 0]
        self.placed = {}

    def forget(self, numbers: Iterable[int]) -> None:
        """The panes `numbers` were freed: their space is taken back at the next compaction
        (and at once when no pane is left)."""
        for number in numbers:
            self.placed.pop(number, None)
        if not self.placed:
            self.used = [0, 0, 0]  # nothing live: the buffers are written from their start

    def place(
        self, store: dict[int, HeldPane], listed: list[tuple[int, HeldPane]]
    ) -> list[tuple[int, int, int]]:
        """The starts (values, offsets, times) of each of `listed`'s sorted panes (number,
        pane of `store`) in the buffers, copying in those not there yet (or re-sorted since:
        a sort gives a pane new arrays). Only the listed panes are looked at: a firing costs
        no pass over every pane placed."""
        new = []
        for number, pane in listed:
            placed = self.placed.get(number)
            if (
                placed is None
                or placed.pane is not pane
                or placed.arrays[0] is not pane.sorted_values
            ):
                new.append((number, pane))
        if new:
            self._add(store, new)
        return [self.placed[number].starts for number, _ in listed]

    def _add(self, store: dict[int, HeldPane], new: list[tuple[int, HeldPane]]) -> None:
        needs = [sum(len(_held_arrays(pane)[k]) for _, pane in new) for k in self.parts]
        fits = all(
            self.buffers[k] is not None
            and self.used[k] + needs[k] <= len(self.buffers[k])
            and all(_held_arrays(pane)[k].dtype == self.buffers[k].dtype for _, pane in new)
            for k in self.parts
        )
        if not fits:  # every live pane and the new ones into fresh buffers
            renewed = {number for number, _ in new}
            live = [
                (number, placed.pane)
                for number, placed in self.placed.items()
                if number not in renewed
                and store.get(number) is placed.pane
                and placed.arrays[0] is placed.pane.sorted_values
            ]
            new = live + new
            self.placed = {}
            for k in self.parts:
                pieces = [_held_arrays(pane)[k] for _, pane in new]
                length = sum(len(piece) for piece in pieces)
                dtype = np.result_type(*[piece.dtype for piece in pieces])
                size = max(2 * length, MIN_ARENA_VALUES)
                self.buffers[k] = self.kernels.allocate(size, dtype)
                self.used[k] = 0
        starts = {number: [0, 0, 0] for number, _ in new}
        for k in self.parts:
            pieces = [_held_arrays(pane)[k] for _, pane in new]
            begin = self.used[k]
            stop = begin + sum(len(piece) for piece in pieces)
            self.kernels.concatenate(pieces, out=self.buffers[k][begin:stop])
            for number, piece in zip(starts, pieces, strict=True):
                starts[number][k] = begin
                begin += len(piece)
            self.used[k] = stop
        for number, pane in new:
            views = [None, None, None]
            for k in self.parts:
                start = starts[number][k]
                views[k] = self.buffers[k][start : start + len(_held_arrays(pane)[k])]
            pane.take_sorted(*views)
            self.placed[number] = _Placed(pane, tuple(views), tuple(starts[number]))


def sort_panes(kernels: Any, panes: list[HeldPane], timed: bool, n_slots: int) -> None:  # noqa: ANN401
    """Sort each pane's values by (slot, value) once (again after values arrived late) on
    `kernels` (the holistic kernels), offsets over `n_slots` slots; a timed field's by
    (slot, value, event time), their times with them. Every pane that needs it is sorted in
    one call of the kernels' `sort_panes` (on the GPU one sort of all their rows, not a few
    launches and a concatenation per pane); a pane of one presorted chunk (`split_panes`)
    only has its offsets found."""
    unsorted = []
    for pane in panes:
        if not pane.needs_sort:
            continue
        if pane.sorted_values is None and len(pane.chunks) == 1 and pane.presorted:
            chunk_slots, chunk_values, chunk_times = pane.chunks[0]
            values, offsets = kernels.sort_pane(chunk_slots, chunk_values, n_slots, presorted=True)
            # `split_panes` sorted the times with the values
            pane.take_sorted(values, offsets, chunk_times)
            continue
        unsorted.append(pane)
    if unsorted:
        found = kernels.sort_panes([pane.unsorted() for pane in unsorted], n_slots, timed)
        for pane, (values, offsets, times) in zip(unsorted, found, strict=True):
            pane.take_sorted(values, offsets, times)


def pane_span(
    arena: PaneArena,
    store: dict[int, HeldPane],
    extent: tuple[int, int, int],
    sort: Callable[[list[HeldPane]], None],
) -> PaneSpan:
    """The span of `store`'s panes from `low` to at least `needed`, and on to `reach` while
    it holds at most MAX_SPAN_VALUES values (`extent` = (low, needed, reach)); the span's
    panes sorted first by one call of `sort` (one batched sort of every pane that needs it,
    not a sort per pane: out of order a firing's panes each hold many chunks), then placed in
    the field's `arena` (only those not there yet are copied; a span of one pane, as
    tumbling windows read, is that pane's arrays). Only the span's panes are listed and
    their bases read from the arena's starts (no device read)."""
    low, needed, reach = extent
    listed: list[tuple[int, HeldPane]] = []
    held = 0
    end = low
    while end < reach and (end < needed or held <= MAX_SPAN_VALUES):
        pane = store.get(end)
        if pane is not None:
            listed.append((end, pane))
            held += pane.length  # a sort keeps every value
        end += 1
    sort([pane for _, pane in listed])
    if len(listed) == 1:  # one pane (tumbling windows): its own arrays, nothing copied
        (_, pane), starts = listed[0], [(0, 0, 0)]
        arrays = (pane.sorted_values, pane.offsets, pane.sorted_times)
    else:
        starts = arena.place(store, listed)
        arrays = arena.arrays()
    width = end - low
    # no pane: no offsets (a key slot past a pane's last offset reads its end; -1: none)
    offset_first = np.zeros(width, np.int64)
    offset_last = np.full(width, -1, np.int64)
    base = np.zeros(width, np.int64)
    for (number, pane), (value_start, offset_start, _) in zip(listed, starts, strict=True):
        assert pane.offsets is not None
        index = number - low
        base[index] = value_start
        offset_first[index] = offset_start
        offset_last[index] = len(pane.offsets) - 1
    values, offsets, times = arrays
    return PaneSpan(
        low=low,
        end=end,
        values=values,
        times=times if arena.timed else None,
        offsets=offsets,
        offset_first=offset_first,
        offset_last=offset_last,
        base=base,
    )
