"""One pane's held values of one holistic field (`HolisticTimeWindows` keeps one per field and
pane until no unfired window reads the pane): the chunks as batches brought them, and once a
window read the pane, its values sorted per key slot."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


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

    def add(self, chunk: tuple[Any, Any, Any], presorted: bool) -> None:
        self.chunks.append(chunk)
        self.presorted = self.presorted and presorted

    def raw(self, kernels: Any, timed: bool) -> tuple[Any, Any, Any]:  # noqa: ANN401
        """(slots, order keys, event times) of every value where `kernels` (the holistic
        kernels) keep them (`concatenate`), sorted ones first; the times are empty unless
        `timed`."""
        slots, values, times = [], [], []
        if self.sorted_values is not None and self.offsets is not None:
            counts = np.diff(kernels.to_host(self.offsets))  # device offsets on the GPU
            slots.append(np.repeat(np.arange(len(counts), dtype=np.int64), counts))
            values.append(self.sorted_values)
            if timed:
                assert self.sorted_times is not None
                times.append(self.sorted_times)
        for chunk_slots, chunk_values, chunk_times in self.chunks:
            slots.append(chunk_slots)
            values.append(chunk_values)
            if timed:
                assert chunk_times is not None
                times.append(chunk_times)
        return (
            kernels.concatenate(slots),
            kernels.concatenate(values),
            kernels.concatenate(times),
        )
