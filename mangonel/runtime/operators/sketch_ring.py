"""An approximate aggregate's panes as one ring table (`SketchPanes`' form where the kernels
offer it: the GPU's HLL registers, `runtime/gpu/sketches.py` `ring_*`).

The registers of pane q and key slot s sit at row [q mod ring, s] of one table of `ring`
panes by `slot_capacity` slots. A batch's kept rows raise their registers where they lie in
one launch: no split of the rows by pane, no per-pane cell numbering or read back, no
member lists, no pane unions. A window's answer reads its panes' rows straight from the
table and counts the maxima in the same launch. The price is memory for every (pane, slot)
whether it holds a value or not, so the table is kept while it stays under MAX_RING_BYTES;
past it the panes move to `SketchPanes`' sparse form for good (`spill`).

Invariant: only panes low..high may hold a value (every other row of the table is zero),
and high - low < ring, so no two live panes share a row. A freed pane's rows are zeroed; the
table grows (a new ring, every live pane moved to its row there) before a batch would break
the invariant.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mangonel.catalog.types import SqlType

MAX_RING_BYTES = 1 << 30  # per aggregate; past it the panes are kept sparse
MIN_SPARE_PANES = 16  # panes a new or grown ring holds beyond the ones it must


class SketchRing:
    """One approximate aggregate's panes as a ring table on the kernels' device."""

    def __init__(
        self,
        sketches: Any,  # noqa: ANN401 - the kernels' sketches (`ring_*`)
        evaluation: str,
        parameter: float,
        panes_per_window: int,
    ) -> None:
        self.sketches = sketches
        self.evaluation = evaluation
        self.parameter = parameter
        self.panes_per_window = panes_per_window
        self.table: Any = None
        self.low: int | None = None  # panes low..high may hold values
        self.high: int | None = None
        self.cell_bytes = sketches.ring_cell_bytes(evaluation, parameter)

    def fits(self, low: int, high: int, n_slots: int) -> bool:
        """Would the panes held and low..high of `n_slots` slots stay under MAX_RING_BYTES?"""
        if self.low is not None:
            low, high = min(low, self.low), max(high, self.high)
        return (high - low + 1) * n_slots * self.cell_bytes <= MAX_RING_BYTES

    def _reserve(self, low: int, high: int, n_slots: int) -> None:
        """Room for panes low..high (with those held) of `n_slots` slots."""
        if self.low is not None:
            low, high = min(low, self.low), max(high, self.high)
        span = high - low + 1
        if self.table is None:
            ring = span + max(self.panes_per_window, MIN_SPARE_PANES)
            self.table = self.sketches.ring_table(
                self.evaluation, self.parameter, ring, max(n_slots, 64)
            )
        elif span > self.table.ring or n_slots > self.table.slot_capacity:
            ring = self.table.ring
            if span > ring:
                ring = max(2 * ring, span + MIN_SPARE_PANES)
            capacity = self.table.slot_capacity
            if n_slots > capacity:
                capacity = max(2 * capacity, n_slots)
            held_low = self.low if self.low is not None else 0
            held_high = self.high if self.high is not None else -1
            self.table = self.sketches.ring_resize(self.table, held_low, held_high, ring, capacity)
        self.low, self.high = low, high

    def add(
        self,
        panes: Any,  # noqa: ANN401 - the kernels' array of each row's pane, or one int
        slots: Any,  # noqa: ANN401
        keys: Any,  # noqa: ANN401 - order keys
        keep: Any,  # noqa: ANN401 - the rows to add, or None: every row
        argument: SqlType,
        extent: tuple[int, int],
        n_slots: int,
    ) -> None:
        """The rows (kept ones in panes extent[0]..extent[1]) into their registers."""
        self._reserve(extent[0], extent[1], n_slots)
        self.sketches.ring_update(self.table, panes, slots, keys, keep, argument)

    def answer(self, slots: np.ndarray, first_panes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(non-NULL count, result) per row: its key's window from first_panes[row]."""
        low = self.low if self.low is not None else 0
        high = self.high if self.high is not None else -1
        return self.sketches.ring_answer(
            self.table, slots, first_panes, self.panes_per_window, low, high
        )

    def free(self, before: int) -> None:
        """Empty the panes before `before` (no window still to fire covers them)."""
        if self.low is None or before <= self.low:
            return
        self.sketches.ring_clear(self.table, self.low, min(before, self.high + 1))
        if before > self.high:
            self.low = self.high = None
        else:
            self.low = before

    def panes(self) -> dict[int, tuple[np.ndarray, Any]]:
        """The live panes in `SketchPanes`' sparse form: pane -> (key slots holding a value,
        their sketches); panes holding none left out."""
        out = {}
        if self.low is None:
            return out
        for pane in range(self.low, self.high + 1):
            present, sketches = self.sketches.ring_pane(self.table, pane)
            if len(present):
                out[pane] = (present, sketches)
        return out

    @property
    def nbytes(self) -> int:
        return 0 if self.table is None else self.table.nbytes
