"""APPROX_COUNT_DISTINCT's HyperLogLog++ registers on the device: the GPU twin of
`runtime/cpu/sketch_windows.py` for the HLL sketch, behind the same calls of the driver
(`runtime/operators/sketch_panes.py`: pane_cells, concatenate, build, cell_range, merge,
empty, answer, to_bytes, from_bytes).

A set of sketches is `DeviceHll`: p and the uint8 registers [cells, 2^p] in device memory. A
batch's rows arrive grouped by pane and sorted by key slot (`GpuHolistic.split_panes`), so a
pane's cells are the runs of equal slots (no host round trip for the rows: only the pane's
distinct slots come to the host, for the driver's index work). The kernels
(`kernels_templates/sketch_hll.cu.j2`) hash and update registers, take group maxima and count
register histograms and their raw sums; the estimate is finished on the host by
`aggregates.sketches.hll_estimate_of_sums`, the CPU's function, so both backends answer bit
for bit alike (the registers are the same: same hash, same rule; the sums are added in the
same order).

GK summaries (APPROX_PERCENTILE) have no device form here: the planner keeps a node with one
on the CPU (`compiler.holistic.holistic_cpu_reason`), so these kernels never see one.

`xp` is CuPy on the device; the tests pass numpy stand-ins and a host-compiled module
(tests/cuda_host.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from mangonel.aggregates.sketches import (
    hll_alpha_m2,
    hll_bins,
    hll_estimate_of_sums,
    hll_from_bytes,
    hll_hash_width,
    hll_precision,
    hll_registers,
    hll_to_bytes,
)
from mangonel.catalog.types import SqlType
from mangonel.compiler import codegen
from mangonel.compiler.codegen import GeneratedModule

HLL = "approx_count_distinct"
# the kernels' hash modes (`sketch_hll.cu.j2` MG_HLL_*: as runtime/cpu/sketch_hll.py's)
_LONG, _INT, _DOUBLE, _FLOAT = 0, 1, 2, 3
THREADS = 256
HISTOGRAM_THREADS = 128  # whole warps: the histograms count a value once per warp
MAX_BLOCKS = 65_535
HISTOGRAM_BINS = 64  # the kernel's bins per cell (values 0 .. 65 - p fit for every p >= 4)


@dataclass(frozen=True)
class DeviceHll:
    """HyperLogLog++ register sets of `cells` cells at precision p, on the device."""

    p: int
    registers: Any  # uint8 [cells, 2^p], device

    @property
    def cells(self) -> int:
        return int(self.registers.shape[0])

    @property
    def nbytes(self) -> int:
        return int(self.registers.nbytes)


@dataclass(frozen=True)
class DeviceHllRing:
    """One aggregate's panes as one table on the device: the registers of pane q and key
    slot s at [q mod ring, s] (`runtime/operators/sketch_ring.py` keeps which panes are live;
    every other row holds zeros)."""

    p: int
    registers: Any  # uint8 [ring, slot_capacity, 2^p], device

    @property
    def ring(self) -> int:
        return int(self.registers.shape[0])

    @property
    def slot_capacity(self) -> int:
        return int(self.registers.shape[1])

    @property
    def nbytes(self) -> int:
        return int(self.registers.nbytes)


def hash_mode(argument: SqlType) -> int:
    """How the update kernel turns an order key of `argument` into the bytes Spark hashes."""
    if argument is SqlType.DOUBLE:
        return _DOUBLE
    if argument is SqlType.FLOAT:
        return _FLOAT
    if argument is SqlType.STRING:
        raise TypeError("APPROX_COUNT_DISTINCT over STRING has no device hash")
    return _INT if hll_hash_width(argument) == 4 else _LONG


def _grid(n: int, threads: int) -> int:
    return max(1, min(-(-n // threads), MAX_BLOCKS))


class GpuSketches:
    """The HLL kernels over array module `xp`, compiling with `module_of`."""

    evaluations = (HLL,)
    # no whole-batch cell numbering here (the CPU's `sketch_windows.batch_cells`): the
    # driver groups the rows by pane on the device (`split_panes`) and numbers each pane's
    # cells (`pane_cells`)
    batch_cells = None

    def __init__(
        self,
        xp: Any,  # noqa: ANN401 - cupy (or a host stand-in in tests)
        module_of: Callable[[GeneratedModule], Any],
        read: Callable[[Any], np.ndarray] | None = None,
    ) -> None:
        self.xp = xp
        self.module_of = module_of
        # a firing's answer comes back through `read` (the GPU's: a pinned buffer of the
        # process's pool, `gpu.pinned`); None: a plain copy into new host memory
        self.read = read or _host
        self._functions: dict[str, Any] | None = None

    def _function(self, role: str) -> Any:  # noqa: ANN401
        if self._functions is None:
            generated = codegen.render_hll_kernels()
            module = self.module_of(generated)
            self._functions = {r: module.get_function(n) for r, n in generated.names.items()}
        return self._functions[role]

    @staticmethod
    def _check(evaluation: str) -> None:
        if evaluation != HLL:
            raise ValueError(
                f"the GPU keeps no {evaluation} sketch (the planner places it on the CPU)"
            )

    def _p(self, evaluation: str, parameter: float) -> int:
        self._check(evaluation)
        return hll_precision(parameter)

    # -- the driver's index work ----------------------------------------------------------

    def pane_cells(self, slots: Any, presorted: bool) -> tuple[np.ndarray, Any]:  # noqa: ANN401
        """(the pane's distinct key slots, ascending, on the host; each row's cell: the rank
        of its slot among them, on the device). A presorted chunk (sorted by slot) needs no
        sort: its cells are its runs of equal slots."""
        xp = self.xp
        slots = xp.asarray(slots).astype(xp.int64)
        if not slots.shape[0]:
            return np.empty(0, np.int64), xp.zeros(0, xp.int64)
        if not presorted:
            present, cells = xp.unique(slots, return_inverse=True)
            return _host(present).astype(np.int64), xp.asarray(cells, xp.int64).reshape(-1)
        starts = xp.concatenate((xp.ones(1, xp.bool_), slots[1:] != slots[:-1]))
        cells = xp.cumsum(starts.astype(xp.int64)) - 1
        return _host(slots[starts]).astype(np.int64), cells

    def panes_cells(
        self,
        pieces: list[Any],  # noqa: ANN401 - device chunks of key slots
        presorted: bool,
    ) -> list[tuple[np.ndarray, Any]]:
        """`pane_cells` of several panes' chunks with one read back for all of them: the
        chunks side by side, a cell starting at each chunk's start and each change of slot,
        the cells numbered across them, then each chunk's distinct slots and cells cut out
        (a read a pane cost a device sync each)."""
        xp = self.xp
        if not presorted or len(pieces) < 2:
            return [self.pane_cells(piece, presorted) for piece in pieces]
        lengths = np.asarray([int(piece.shape[0]) for piece in pieces], np.int64)
        ends = np.cumsum(lengths)
        total = int(ends[-1])
        if not total:
            return [self.pane_cells(piece, presorted) for piece in pieces]
        slots = xp.concatenate([xp.asarray(piece).astype(xp.int64) for piece in pieces])
        begins = ends - lengths
        held = np.flatnonzero(lengths)  # chunks with rows (an empty one has no cell)
        starts = xp.ones(total, xp.bool_)
        starts[1:] = slots[1:] != slots[:-1]
        starts[xp.asarray(begins[held])] = True  # each chunk starts a cell of its own
        cells = xp.cumsum(starts.astype(xp.int64)) - 1
        # one read: every chunk's distinct slots, then each chunk's first and last cell
        bounds = np.concatenate((begins[held], ends[held] - 1))
        read = _host(xp.concatenate((slots[starts], cells[xp.asarray(bounds)])))
        count = len(read) - len(bounds)
        present = read[:count]
        firsts, lasts = read[count : count + len(held)], read[count + len(held) :]
        out: list[tuple[np.ndarray, Any]] = [
            (np.empty(0, np.int64), xp.zeros(0, xp.int64)) for _ in pieces
        ]
        for at, index in enumerate(held.tolist()):
            first, last = int(firsts[at]), int(lasts[at]) + 1
            rows = slice(int(begins[index]), int(ends[index]))
            out[index] = (present[first:last].copy(), cells[rows] - first)
        return out

    def concatenate(self, pieces: list[Any]) -> Any:  # noqa: ANN401
        xp = self.xp
        if not pieces:
            return xp.zeros(0, xp.int64)
        return xp.concatenate([xp.asarray(p) for p in pieces])

    # -- sketches -------------------------------------------------------------------------

    def build(
        self,
        evaluation: str,
        cells: Any,  # noqa: ANN401 - device int64, a cell per row
        n_cells: int,
        keys: Any,  # noqa: ANN401 - device int64 order keys
        argument: SqlType,
        parameter: float,
    ) -> DeviceHll:
        """One register set per cell 0..n_cells-1 of the rows' values (order keys)."""
        xp = self.xp
        p = self._p(evaluation, parameter)
        registers = xp.zeros((n_cells, hll_registers(p)), xp.uint8)
        keys = xp.ascontiguousarray(xp.asarray(keys), dtype=xp.int64)
        cells = xp.ascontiguousarray(xp.asarray(cells), dtype=xp.int64)
        rows = int(keys.shape[0])
        if cells.shape[0] != rows:
            raise ValueError(f"{rows} values need {rows} cell ids, got {cells.shape[0]}")
        if rows:
            self._function("update")(
                (_grid(rows, THREADS),),
                (THREADS,),
                (
                    keys,
                    cells,
                    np.int64(rows),
                    np.int64(hash_mode(argument)),
                    np.int64(p),
                    registers,
                ),
            )
        return DeviceHll(p, registers)

    def cell_range(self, sketches: DeviceHll, start: int, stop: int) -> DeviceHll:
        return DeviceHll(sketches.p, sketches.registers[start:stop].copy())

    def merge(self, sets: list[DeviceHll], members: np.ndarray, offsets: np.ndarray) -> DeviceHll:
        """Group g = the register max over cells members[offsets[g]:offsets[g + 1]] of the
        sets taken as one (the cells of set i follow those of set i - 1)."""
        xp = self.xp
        p = sets[0].p
        m = hll_registers(p)
        members = np.ascontiguousarray(members, np.int64)
        offsets = np.ascontiguousarray(offsets, np.int64)
        total = sum(s.cells for s in sets)
        if members.shape[0] and (members.min() < 0 or members.max() >= total):
            raise ValueError(f"group members must be cells in [0, {total})")
        if offsets.shape[0] == 0 or offsets[0] != 0 or offsets[-1] != members.shape[0]:
            raise ValueError("group offsets must rise from 0 to the number of members")
        groups = offsets.shape[0] - 1
        out = xp.zeros((groups, m), xp.uint8)
        if groups and members.shape[0]:
            joined = (
                sets[0].registers if len(sets) == 1 else xp.concatenate([s.registers for s in sets])
            )
            joined = xp.ascontiguousarray(joined)
            words = m // 4
            self._function("merge")(
                (_grid(groups * words, THREADS),),
                (THREADS,),
                (
                    joined,
                    xp.asarray(members),
                    xp.asarray(offsets),
                    np.int64(groups),
                    np.int64(words),
                    out,
                ),
            )
        return DeviceHll(p, out)

    def merge_aligned(self, first: DeviceHll, second: DeviceHll) -> DeviceHll:
        """Cell i = the register max of cell i of both sets (the same keys in the same order:
        a dense pane's sketches and a batch's): one elementwise maximum on the device, no
        member lists to upload."""
        if first.cells != second.cells:
            raise ValueError(f"aligned sets need as many cells: {first.cells}, {second.cells}")
        return DeviceHll(first.p, self.xp.maximum(first.registers, second.registers))

    def merge_answer(
        self,
        sets: list[DeviceHll],
        members: np.ndarray,
        offsets: np.ndarray,
        fraction: float | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """`answer` of the `merge` (a window's answer from its sets; the CPU counts the
        maxima without keeping them, `sketch_windows.merge_answer`)."""
        return self.answer(self.merge(sets, members, offsets), fraction)

    def empty(self, evaluation: str, parameter: float) -> DeviceHll:
        p = self._p(evaluation, parameter)
        return DeviceHll(p, self.xp.zeros((0, hll_registers(p)), self.xp.uint8))

    def _histograms(self, sketches: DeviceHll) -> tuple[Any, Any, Any]:  # noqa: ANN401
        """Per cell on the device: the count of registers holding each value (int32
        [cells, 64]), the raw estimate's sum over them (float64 [cells]) and the highest
        register (int32 [cells])."""
        xp = self.xp
        cells = sketches.cells
        out = xp.zeros((cells, HISTOGRAM_BINS), xp.int32)
        z_inverse = xp.zeros(cells, xp.float64)
        tops = xp.zeros(cells, xp.int32)
        if cells:
            self._function("histogram")(
                (min(cells, MAX_BLOCKS),),
                (HISTOGRAM_THREADS,),
                (
                    xp.ascontiguousarray(sketches.registers),
                    np.int64(cells),
                    np.int64(hll_registers(sketches.p)),
                    out,
                    z_inverse,
                    tops,
                ),
            )
        return out, z_inverse, tops

    def histograms(self, sketches: DeviceHll) -> np.ndarray:
        """Per cell the count of registers holding each value, on the host (int64
        [cells, 64])."""
        return _host(self._histograms(sketches)[0]).astype(np.int64)

    def answer(self, sketches: DeviceHll, fraction: float | None) -> tuple[np.ndarray, np.ndarray]:
        """(count, estimate) per cell on the host: the estimate, int64 (its count is the
        estimate too, 0 only for an empty cell), as the CPU's `sketch_windows.answer`
        (`_estimates`: three numbers a cell come back, not a 256-byte histogram)."""
        return self._estimates(sketches.p, *self._histograms(sketches))

    def _estimates(
        self,
        p: int,
        histograms: Any,  # noqa: ANN401 - device int32 [cells, 64]
        z_inverse: Any,  # noqa: ANN401 - device float64 [cells]
        tops: Any,  # noqa: ANN401 - device int32 [cells]: the highest register
    ) -> tuple[np.ndarray, np.ndarray]:
        """(count, estimate) per cell: the device rounds the raw estimate of every cell with
        no zero register past Ertl's band (`estimate`: the host's operations, the same
        double); the host finishes the others (`hll_estimate_of_sums`, over those cells
        only). Four numbers a cell come back in one copy; a histogram only for a cell in
        Ertl's band whose sum is not exact (a register above 53 - p: `exact`)."""
        xp = self.xp
        bins = hll_bins(p)
        cells = int(z_inverse.shape[0])
        rounded = xp.empty(cells, xp.float64)
        if cells:
            self._function("estimate")(
                (_grid(cells, THREADS),),
                (THREADS,),
                (
                    histograms,
                    z_inverse,
                    np.int64(cells),
                    np.float64(hll_alpha_m2(p)),
                    np.float64(5.0 * hll_registers(p)),
                    rounded,
                ),
            )
        columns = (z_inverse, histograms[:, 0].astype(xp.float64), tops.astype(xp.float64), rounded)
        read = self.read(xp.concatenate(columns))
        sums, zeros, top = read[:cells], read[cells : 2 * cells], read[2 * cells : 3 * cells]
        estimate = read[3 * cells :].astype(np.int64)
        left = np.flatnonzero(estimate < 0)  # linear counting or Ertl's band: the host's
        if len(left):

            def band_counts(band: np.ndarray) -> np.ndarray:
                rows = _host(histograms[xp.asarray(left[np.flatnonzero(band)])])
                return np.ascontiguousarray(rows[:, :bins].T, dtype=np.float64)

            exact = top[left] <= 53 - p
            estimate[left] = hll_estimate_of_sums(sums[left], zeros[left], p, band_counts, exact)
        return estimate, estimate

    # -- the panes as a ring table (`sketch_ring.SketchRing`) -------------------------------

    ring_evaluations = (HLL,)

    def ring_cell_bytes(self, evaluation: str, parameter: float) -> int:
        """Bytes a (pane, key slot) of a ring table takes: its registers."""
        return hll_registers(self._p(evaluation, parameter))

    def ring_table(
        self, evaluation: str, parameter: float, ring: int, slot_capacity: int
    ) -> DeviceHllRing:
        """An empty table of `ring` panes of `slot_capacity` key slots."""
        p = self._p(evaluation, parameter)
        registers = self.xp.zeros((ring, slot_capacity, hll_registers(p)), self.xp.uint8)
        return DeviceHllRing(p, registers)

    def ring_resize(
        self, table: DeviceHllRing, low: int, high: int, ring: int, slot_capacity: int
    ) -> DeviceHllRing:
        """A larger table holding `table`'s panes low..high (each at its row of the new ring)."""
        xp = self.xp
        out = xp.zeros((ring, slot_capacity, table.registers.shape[2]), xp.uint8)
        if high >= low:
            panes = np.arange(low, high + 1, dtype=np.int64)
            held = table.slot_capacity
            out[xp.asarray(panes % ring), :held] = table.registers[xp.asarray(panes % table.ring)]
        return DeviceHllRing(table.p, out)

    def ring_clear(self, table: DeviceHllRing, first: int, stop: int) -> None:
        """Panes first..stop-1 emptied (their rows zeroed)."""
        if stop - first >= table.ring:
            table.registers[...] = 0
        elif stop > first:
            rows = np.arange(first, stop, dtype=np.int64) % table.ring
            table.registers[self.xp.asarray(rows)] = 0

    def ring_update(
        self,
        table: DeviceHllRing,
        panes: Any,  # noqa: ANN401 - device int per row, or one int for every row
        slots: Any,  # noqa: ANN401 - device int per row
        keys: Any,  # noqa: ANN401 - device int64 order keys
        keep: Any,  # noqa: ANN401 - device bool per row, or None: every row
        argument: SqlType,
    ) -> None:
        """The rows' values raised into their (pane, key slot) registers of the table."""
        xp = self.xp
        keys = xp.ascontiguousarray(xp.asarray(keys), dtype=xp.int64)
        rows = int(keys.shape[0])
        if not rows:
            return
        one_pane = isinstance(panes, (int, np.integer))
        panes = xp.full(1, int(panes), xp.int64) if one_pane else panes
        keep = xp.ones(1, xp.bool_) if keep is None else keep
        self._function("ring_update")(
            (_grid(rows, THREADS),),
            (THREADS,),
            (
                keys,
                xp.ascontiguousarray(xp.asarray(panes), dtype=xp.int64),
                xp.ascontiguousarray(xp.asarray(slots), dtype=xp.int64),
                xp.ascontiguousarray(xp.asarray(keep), dtype=xp.bool_).view(xp.uint8),
                np.int64(rows),
                np.int64(0 if one_pane else 1),
                np.int64(1 if keep.shape[0] == rows else 0),
                np.int64(hash_mode(argument)),
                np.int64(table.p),
                np.int64(table.ring),
                np.int64(table.slot_capacity),
                table.registers,
            ),
        )

    def ring_extent(self, panes: Any, keep: Any) -> tuple[int, int] | None:  # noqa: ANN401
        """(lowest, highest) pane of the kept rows, None where none is kept: one read."""
        xp = self.xp
        panes = xp.asarray(panes, dtype=xp.int64)
        if not panes.shape[0]:
            return None
        big = np.iinfo(np.int64).max
        low = xp.where(keep, panes, big).min()
        high = xp.where(keep, panes, -big).max()
        found = _host(xp.stack((low, high)))
        return None if found[0] == big else (int(found[0]), int(found[1]))

    def ring_answer(
        self,
        table: DeviceHllRing | None,
        slots: np.ndarray,
        first_panes: np.ndarray,
        panes_per_window: int,
        low: int,
        high: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        """`answer` of each row's window: the max over the registers of its key slot in panes
        first_panes[row] .. + panes_per_window - 1 (those in low..high), counted where it is
        read (no merged registers written)."""
        xp = self.xp
        rows = len(slots)
        if table is None or high < low or not rows:  # no pane holds a value: every row 0
            return np.zeros(rows, np.int64), np.zeros(rows, np.int64)
        histograms = xp.zeros((rows, HISTOGRAM_BINS), xp.int32)
        z_inverse = xp.zeros(rows, xp.float64)
        tops = xp.zeros(rows, xp.int32)
        m = hll_registers(table.p)
        self._function("ring_window")(
            (min(rows, MAX_BLOCKS),),
            (HISTOGRAM_THREADS,),
            (
                table.registers,
                xp.asarray(np.ascontiguousarray(slots, np.int64)),
                xp.asarray(np.ascontiguousarray(first_panes, np.int64)),
                np.int64(rows),
                np.int64(panes_per_window),
                np.int64(low),
                np.int64(high),
                np.int64(table.ring),
                np.int64(table.slot_capacity),
                np.int64(m // 4),
                histograms,
                z_inverse,
                tops,
            ),
        )
        return self._estimates(table.p, histograms, z_inverse, tops)

    def ring_scan_pool(self, table: DeviceHllRing, entries: int, block: int) -> Any:  # noqa: ANN401
        """Room for the prefix and suffix maxima of `entries` blocks of `block` panes of
        `table`'s slots: uint8 [entries, 2, block, slot_capacity, 2^p]."""
        shape = (entries, 2, block, table.slot_capacity, table.registers.shape[2])
        return self.xp.zeros(shape, self.xp.uint8)

    def ring_scan(
        self,
        table: DeviceHllRing,
        pool: Any,  # noqa: ANN401 - `ring_scan_pool`'s
        entry: int,
        first_pane: int,
        low: int,
        high: int,
    ) -> None:
        """Pool entry `entry` := the prefix and suffix maxima of panes first_pane .. +
        block - 1 (those in low..high hold values)."""
        block = int(pool.shape[2])
        words = table.registers.shape[2] // 4
        cells = table.slot_capacity * words
        self._function("ring_scan")(
            (_grid(cells, THREADS),),
            (THREADS,),
            (
                table.registers,
                np.int64(first_pane),
                np.int64(block),
                np.int64(low),
                np.int64(high),
                np.int64(table.ring),
                np.int64(table.slot_capacity),
                np.int64(words),
                pool[entry, 0],
                pool[entry, 1],
            ),
        )

    def ring_answer_scans(
        self,
        table: DeviceHllRing,
        pool: Any,  # noqa: ANN401 - `ring_scan_pool`'s, the parts' entries scanned
        parts: Iterable[tuple[Any, ...]],
        rows: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        """`ring_answer` from scanned blocks: each part (positions in the answer or None:
        rows 0.. in order, key slots, first panes, the pool entries of blocks first_block..,
        first_block) one upload and one launch; the kernel finds each row's first block,
        its offset there and the two entries; every row's window the max of two sets; one
        read for all. Each part is launched before the next is drawn (drawing one may scan
        into entries an earlier one read)."""
        xp = self.xp
        histograms = xp.zeros((rows, HISTOGRAM_BINS), xp.int32)
        z_inverse = xp.zeros(rows, xp.float64)
        tops = xp.zeros(rows, xp.int32)
        block = int(pool.shape[2])
        words = table.registers.shape[2] // 4
        for positions, slots, first_panes, entries, first_block in parts:
            count = len(slots)
            if not count:
                continue
            columns = [slots, first_panes, entries]
            if positions is not None:
                columns.append(positions)
            device = xp.asarray(np.concatenate(columns).astype(np.int64, copy=False))
            self._function("ring_window_scans")(
                (min(count, MAX_BLOCKS),),
                (HISTOGRAM_THREADS,),
                (
                    pool,
                    None if positions is None else device[2 * count + len(entries) :],
                    device[:count],
                    device[count : 2 * count],
                    device[2 * count : 2 * count + len(entries)],
                    np.int64(first_block),
                    np.int64(count),
                    np.int64(block),
                    np.int64(table.slot_capacity),
                    np.int64(words),
                    histograms,
                    z_inverse,
                    tops,
                ),
            )
        return self._estimates(table.p, histograms, z_inverse, tops)

    def ring_pane(self, table: DeviceHllRing, pane: int) -> tuple[np.ndarray, DeviceHll]:
        """Pane `pane`'s (key slots holding a value, their registers): the sparse form
        `SketchPanes` keeps (a slot holds a value iff a register is raised)."""
        xp = self.xp
        rows = table.registers[pane % table.ring]
        present = np.flatnonzero(_host(rows.max(axis=1)))
        return present.astype(np.int64), DeviceHll(table.p, rows[xp.asarray(present)])

    def to_bytes(self, sketches: DeviceHll) -> bytes:
        """The CPU's snapshot format (`aggregates.sketches.hll_to_bytes`)."""
        return hll_to_bytes(_host(sketches.registers), sketches.p)

    def from_bytes(self, evaluation: str, blob: bytes) -> DeviceHll:
        self._check(evaluation)
        registers, p = hll_from_bytes(blob)
        return DeviceHll(p, self.xp.asarray(registers))


def _host(array: Any) -> np.ndarray:  # noqa: ANN401
    """A host copy of a device array (numpy arrays as they are)."""
    getter = getattr(array, "get", None)
    return np.asarray(getter() if getter is not None else array)
