"""One pane's held values of one holistic field (`HolisticTimeWindows` keeps one per field and
pane until no unfired window reads the pane): the chunks as batches brought them, and once a
window read the pane, its values sorted per key slot."""

from __future__ import annotations

from collections.abc import Callable
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
    kernels: Any,  # noqa: ANN401 - the holistic kernels (`concatenate`)
    store: dict[int, HeldPane],
    extent: tuple[int, int, int],
    timed: bool,
    sort: Callable[[list[HeldPane]], None],
) -> PaneSpan:
    """The span of `store`'s panes from `low` to at least `needed`, and on to `reach` while
    it holds at most MAX_SPAN_VALUES values (`extent` = (low, needed, reach)); the span's
    panes sorted first by one call of `sort` (one batched sort of every pane that needs it,
    not a sort per pane: out of order a firing's panes each hold many chunks). Only the
    span's panes are listed and their bases scanned from their lengths (known from the
    arrays' shapes: no device read); a span of one pane is that pane's arrays, not a copy."""
    low, needed, reach = extent
    listed: list[HeldPane | None] = []
    held = 0
    end = low
    while end < reach and (end < needed or held <= MAX_SPAN_VALUES):
        pane = store.get(end)
        end += 1
        listed.append(pane)
        if pane is not None:
            held += pane.length  # a sort keeps every value
    sort([pane for pane in listed if pane is not None])
    lengths, widths = [], []  # values and offsets of each span pane (0: no pane)
    pieces, offset_pieces, time_pieces = [], [], []
    for pane in listed:
        if pane is None:
            lengths.append(0)
            widths.append(0)
            continue
        assert pane.sorted_values is not None and pane.offsets is not None
        lengths.append(len(pane.sorted_values))
        widths.append(len(pane.offsets))
        pieces.append(pane.sorted_values)
        offset_pieces.append(pane.offsets)
        time_pieces.append(pane.sorted_times)
    length_array = np.array(lengths, np.int64)
    width_array = np.array(widths, np.int64)

    def joined(arrays: list[Any]) -> Any:  # noqa: ANN401
        # a span of one pane (tumbling windows) reads that pane's arrays: no copy of them
        return arrays[0] if len(arrays) == 1 else kernels.concatenate(arrays)

    return PaneSpan(
        low=low,
        end=end,
        values=joined(pieces),
        times=joined(time_pieces) if timed else None,
        offsets=joined(offset_pieces),
        offset_first=np.cumsum(width_array) - width_array,
        # a key slot past a pane's last offset reads its end (-1: no pane)
        offset_last=width_array - 1,
        base=np.cumsum(length_array) - length_array,
    )
