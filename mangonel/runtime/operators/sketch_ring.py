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

Windows of SCAN_FROM panes and more read two sets instead of every pane: blocks of
panes_per_window panes (block j: panes jB .. jB + B - 1) get their prefix and suffix maxima
(`ring_scan`, the sparse form's blocked sets, SPRINGALD's two stacks), and the window from
pane jB + i is block j's suffix from i and block j + 1's prefix to i - 1. A block's scans are
computed when a window first needs them, held in a pool of SCAN_ENTRIES entries, and dropped
when a batch adds rows to one of its panes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from mangonel.catalog.types import SqlType

MAX_RING_BYTES = 1 << 30  # per aggregate; past it the panes are kept sparse
MIN_SPARE_PANES = 16  # panes a new or grown ring holds beyond the ones it must
# windows of this many panes or more are answered from scanned blocks (two sets a window,
# not every pane), while the scans of SCAN_ENTRIES blocks fit beside the ring's bound
SCAN_FROM = 8
SCAN_ENTRIES = 4


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
        self.scan_pool: Any = None  # `ring_scan_pool`'s, for the table's slot capacity
        self.scanned: dict[int, int] = {}  # block -> its pool entry (scans up to date)

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
            if self.scan_pool is not None and capacity != self.scan_pool.shape[3]:
                self.scan_pool = None  # scans hold the old slot capacity
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
        # the blocks the rows may go to: their scans are out of date
        block = self.panes_per_window
        for stale in [b for b in self.scanned if extent[0] // block <= b <= extent[1] // block]:
            del self.scanned[stale]
        self.sketches.ring_update(self.table, panes, slots, keys, keep, argument)

    def answer(self, slots: np.ndarray, first_panes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(non-NULL count, result) per row: its key's window from first_panes[row]."""
        low = self.low if self.low is not None else 0
        high = self.high if self.high is not None else -1
        if self.table is None or high < low or not self._scans_fit():
            return self.sketches.ring_answer(
                self.table, slots, first_panes, self.panes_per_window, low, high
            )
        if self.scan_pool is None:
            self.scan_pool = self.sketches.ring_scan_pool(
                self.table, SCAN_ENTRIES, self.panes_per_window
            )
            self.scanned.clear()
        parts = self._scanned_parts(slots, first_panes)
        return self.sketches.ring_answer_scans(self.table, self.scan_pool, parts, len(slots))

    def _scanned_parts(self, slots: np.ndarray, first_panes: np.ndarray) -> Iterator[tuple]:
        """The rows in runs of consecutive first blocks whose scans (and the next block's)
        fit the pool: per run, its blocks scanned, then (rows, or None: every row in order;
        their slots; their first panes; the pool entries of the run's blocks from its first
        and the block after its last; its first block). The kernel finds each row's block and
        offset. Drawn one at a time: a run's scans may reuse the entries an earlier run's
        launch read, so that launch comes first."""
        block = self.panes_per_window
        lowest = int(first_panes.min()) // block
        highest = int(first_panes.max()) // block
        if highest + 2 - lowest <= SCAN_ENTRIES:  # the usual case: every row in one run
            yield None, slots, first_panes, self._entries(lowest, highest), lowest
            return
        blocks = first_panes // block
        found = np.flatnonzero(np.bincount(blocks - lowest)) + lowest  # ascending, distinct
        start = 0
        while start < len(found):
            stop = start + 1
            while stop < len(found) and found[stop] + 2 - found[start] <= SCAN_ENTRIES:
                stop += 1
            first, last = int(found[start]), int(found[stop - 1])
            entries = self._entries(first, last)
            rows = np.flatnonzero((blocks >= first) & (blocks <= last))
            yield rows, slots[rows], first_panes[rows], entries, first
            start = stop

    def _entries(self, first: int, last: int) -> np.ndarray:
        """Blocks first..last + 1 scanned: their pool entries, in block order."""
        entry_of = self._scan(first, last + 1)
        return np.asarray([entry_of[b] for b in range(first, last + 2)], np.int64)

    def _scans_fit(self) -> bool:
        """Do windows read scanned blocks (long enough, and the pool within bounds)?"""
        pool_bytes = SCAN_ENTRIES * 2 * self.panes_per_window * self.table.slot_capacity
        return self.panes_per_window >= SCAN_FROM and pool_bytes * self.cell_bytes <= MAX_RING_BYTES

    def _scan(self, first: int, last: int) -> dict[int, int]:
        """Blocks first..last scanned and in the pool (at most SCAN_ENTRIES): block -> its
        entry. Entries of other blocks are reused, lowest block first."""
        wanted = range(first, last + 1)
        free = [e for e in range(SCAN_ENTRIES) if e not in self.scanned.values()]
        spare = sorted(b for b in self.scanned if b not in wanted)
        for block in wanted:
            if block in self.scanned:
                continue
            entry = free.pop() if free else self.scanned.pop(spare.pop(0))
            self.sketches.ring_scan(
                self.table,
                self.scan_pool,
                entry,
                block * self.panes_per_window,
                self.low,
                self.high,
            )
            self.scanned[block] = entry
        return {block: self.scanned[block] for block in wanted}

    def free(self, before: int) -> None:
        """Empty the panes before `before` (no window still to fire covers them)."""
        if self.low is None or before <= self.low:
            return
        self.sketches.ring_clear(self.table, self.low, min(before, self.high + 1))
        # a scanned block holding a freed pane is read by no window still to fire
        block = self.panes_per_window
        for gone in [b for b in self.scanned if (b + 1) * block <= before]:
            del self.scanned[gone]
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
        pool = 0 if self.scan_pool is None else int(self.scan_pool.nbytes)
        return pool + (0 if self.table is None else self.table.nbytes)
