"""The approximate holistic functions (APPROX_COUNT_DISTINCT, APPROX_PERCENTILE) in the window
operators: mergeable sketches instead of raw values (docs/sketches.md).

- time windows (`SketchPanes`, used by `holistic.HolisticTimeWindows`, strategy
  `sketch-panes`): per approximate aggregate and pane, one sketch per key present in the
  pane (the pane's sorted key slots beside them: memory grows with the (key, pane) cells
  that hold values, not with keys x panes). A batch's kept rows (contributing, non-NULL,
  not late: the wrapped operator's rule) are built into sketches for all the panes they hit
  in one kernel call, and merged into the panes' sketches (HLL: register max; GK: a merge).
  A firing window's answer merges the sketches of its panes, or for HLL windows of
  BLOCKED_FROM panes and more its two blocked prefix/suffix sets (docs/sketches.md): all
  rows of a result batch in one merge call. A pane is freed with the raw values' panes,
  once every window covering it has fired; block sets once no unfired window reads them.
- count windows (`run_answers`): a window is a run of its key's kept tuples (count windows
  hold them for their per-tuple partials anyway); the window's sketch is built from the run.

The sketch kernels are the holistic step's `kernels.sketches` (`runtime/cpu/sketch_windows.py`;
on the GPU `runtime/gpu/sketches.py`, HLL registers on the device); the index work (which
cells a window reads) is on the host over the panes' distinct key slots.

Where the kernels keep a sketch as a ring table (`ring_evaluations`: the GPU's HLL), an
aggregate's panes are one table instead (`sketch_ring.SketchRing`: a batch raises its rows'
registers where they lie, a window reads its panes' rows; no index work on the host) while
the table stays under its memory bound; past it, or after a restore, the form above.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mangonel.aggregates.holistic import order_keys
from mangonel.compiler.holistic import hll_precision, sketch_parameter
from mangonel.compiler.physical import AggregatePlan, StateField
from mangonel.runtime.operators.sketch_ring import SketchRing

# a build covers at most about this many register bytes ((pane, key) cells x 2^p): a batch
# that hits very many cells is built in chunks of panes
MAX_BUILD_BYTES = 1 << 26
MAX_MEMBERS = 1 << 22  # (rows x panes per window) members per merge call
# rows per merge call of the sparse form: its (set, key) cell table stays cache-sized
MAX_SPARSE_ROWS = 1 << 16
# rows per ring-table answer call (the GPU's: a 256-byte histogram per row on the device)
MAX_RING_ROWS = 1 << 20
# APPROX_COUNT_DISTINCT's windows of this many panes or more are answered from blocked
# prefix/suffix sets (two merges a (window, key)); smaller ones, and GK summaries, merge
# their panes' sketches directly. GK's sets would be merges of large summaries (at accuracy
# 10000 a summary keeps about every value up to 10^4 values), built B times per block: on
# the benchmark they cost as much as the k-way merge they replace (docs/performance/sketches.md).
BLOCKED_FROM = 3
BLOCKED_SKETCHES = ("approx_count_distinct",)


def _register_bytes(plan: AggregatePlan) -> int:
    """Bytes per cell a build allocates up front (HLL registers; GK grows with the data)."""
    if plan.function.definition.holistic.evaluation != "approx_count_distinct":
        return 64
    return 1 << hll_precision(plan)


def _distinct(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(values, return_inverse=True)` of small-range integers (a firing's key slots
    or first panes) through a presence map: linear, where np.unique sorts (5x here); a wide
    range sorts."""
    values = np.asarray(values, np.int64).reshape(-1)
    if not len(values):
        return values, values
    low = int(values.min())
    span = int(values.max()) - low + 1
    if span > 4 * len(values) + 4096:
        found, inverse = np.unique(values, return_inverse=True)
        return found, inverse.reshape(-1)
    seen = np.zeros(span, np.bool_)
    seen[values - low] = True
    rank = np.cumsum(seen) - 1
    return np.flatnonzero(seen) + low, rank[values - low]


class SketchPanes:
    """Per approximate aggregate (its position in the node's aggregates), per pane the
    sorted key slots present in it and their sketches (cell i: key slots[i])."""

    def __init__(
        self,
        plans: dict[int, AggregatePlan],
        fields: dict[str, StateField],
        kernels: Any,  # noqa: ANN401 - the holistic step's kernels (`sketches`)
        panes_per_window: int = 1,
    ) -> None:
        self.plans = plans
        self.fields = fields
        self.sketches = kernels.sketches
        self.panes: dict[int, dict[int, tuple[np.ndarray, Any]]] = {p: {} for p in plans}
        # blocks of `panes_per_window` panes (BLOCKED_FROM panes per window and up): per
        # aggregate and block, its suffix and prefix sets (index i: the merge of the block's
        # panes i.. / ..i), computed when a window first reads them, dropped when one of
        # their panes receives rows; a window from pane a of block j is suffix_j[a % B]
        # merged with prefix_(j+1)[a % B - 1]: two sets, not panes_per_window panes
        self.block = panes_per_window
        self.blocked = {
            position: panes_per_window >= BLOCKED_FROM
            and plan.function.definition.holistic.evaluation in BLOCKED_SKETCHES
            for position, plan in plans.items()
        }
        self.suffixes: dict[int, dict[int, dict[int, tuple | None]]] = {p: {} for p in plans}
        self.prefixes: dict[int, dict[int, list[tuple | None]]] = {p: {} for p in plans}
        # aggregates whose panes are a ring table (`_ring`), and those that left it for good
        self.rings: dict[int, SketchRing] = {}
        self.spilled: set[int] = set()
        self.floor: int | None = None  # the panes freed are those before it (no row is kept there)

    def reads(self, name: str) -> bool:
        """Does an approximate aggregate read the `values` field `name`?"""
        return any(plan.value_field == name for plan in self.plans.values())

    def add(
        self, name: str, pane_ids: list[int], chunks: list[tuple], presorted: bool, n_slots: int
    ) -> None:
        """Fold a batch's kept rows of the `values` field `name`, one chunk (key slots, order
        keys, ...) per pane (`split_panes`; `presorted`: each chunk sorted by slot) into the
        sketches of every aggregate that reads it: one build over the cells (pane, key
        present in it) of a chunk of panes, then per pane a merge with the sketches it holds
        already (a ring table: each chunk raised into its pane's rows). The chunks stay where
        the kernels keep them (on the GPU, the device)."""
        cells_of = None
        extent = (min(pane_ids), max(pane_ids)) if pane_ids else None
        for position, plan in self.plans.items():
            if plan.value_field != name:
                continue
            argument = self.fields[name].type
            ring = self._ring(position, extent, n_slots)
            if ring is not None:
                for pane, chunk in zip(pane_ids, chunks, strict=True):
                    ring.add(int(pane), chunk[0], chunk[1], None, argument, extent, n_slots)
                continue
            evaluation = plan.function.definition.holistic.evaluation
            cell_bytes = _register_bytes(plan)
            if cells_of is None:  # each pane's (distinct slots, row cells), numbered once
                cells_of = self.sketches.panes_cells([chunk[0] for chunk in chunks], presorted)
            first = 0
            while first < len(pane_ids):
                # panes first..last-1: as many as keep the build under MAX_BUILD_BYTES
                last, cells = first, 0
                pane_slots: list[np.ndarray] = []
                row_cells: list[Any] = []
                while last < len(pane_ids) and (
                    last == first or cells * cell_bytes < MAX_BUILD_BYTES
                ):
                    present, ids = cells_of[last]
                    pane_slots.append(present)
                    row_cells.append(ids + cells)
                    cells += len(present)
                    last += 1
                built = self.sketches.build(
                    evaluation,
                    self.sketches.concatenate(row_cells),
                    cells,
                    self.sketches.concatenate([chunk[1] for chunk in chunks[first:last]]),
                    argument,
                    sketch_parameter(plan),
                )
                self._fold(position, pane_ids[first:last], pane_slots, built)
                first = last

    def add_rows(
        self,
        name: str,
        panes: Any,  # noqa: ANN401 - the kernels' arrays, one per row of the batch
        slots: Any,  # noqa: ANN401
        values: Any,  # noqa: ANN401 - order keys
        keep: Any,  # noqa: ANN401
        n_slots: int,
        pane_range: tuple[int, int] | None = None,
        raw: bool = False,
    ) -> bool:
        """`add` of a batch's rows straight from the per-row arrays, where the kernels number
        the cells of a whole batch (`sketches.batch_cells`: the CPU's; on the GPU None): no
        grouping of the rows by pane, no per-pane cell numbering, one build per aggregate
        over the batch's rows (the unkept ones skipped by the build); HLL registers where the
        batch's (pane, key) table is small are raised in that table directly
        (`sketches.batch_sketches`, no cell numbering at all). False where the kernels
        cannot here (the caller then groups the rows by pane and calls `add`).
        `pane_range`: (first, last) pane of the kept rows where the caller knows it. `raw`:
        `values` are the argument's values, not order keys (the kernels that number cells,
        the CPU's, hash and normalise either)."""
        batch_cells = self.sketches.batch_cells
        plans = [(p, plan) for p, plan in self.plans.items() if plan.value_field == name]
        if plans and self._add_to_rings(
            name, plans, panes, slots, values, keep, n_slots, pane_range, raw
        ):
            return True
        if batch_cells is None or not plans:
            return False
        argument = self.fields[name].type
        # HLL: straight into a (pane, key) table of registers where it is small
        # (`batch_sketches`); the others through the cells `batch_cells` numbers. Nothing is
        # folded until every aggregate has its sketches (False leaves the panes untouched).
        tabled, numbered = {}, []
        for position, plan in plans:
            evaluation = plan.function.definition.holistic.evaluation
            found = self.sketches.batch_sketches(
                evaluation,
                panes,
                slots,
                values,
                keep,
                n_slots,
                argument,
                sketch_parameter(plan),
                MAX_BUILD_BYTES,
                pane_range,
                raw,
            )
            if found is None:
                numbered.append((position, plan))
            else:
                tabled[position] = found
        built = {}
        if numbered:
            largest = max(_register_bytes(plan) for _, plan in numbered)
            most = max(1, MAX_BUILD_BYTES // largest)
            found = batch_cells(panes, slots, keep, n_slots, most, pane_range)
            if found is None:
                return False
            pane_ids, pane_slots, cells, n_cells = found
            for position, plan in numbered if n_cells else ():
                evaluation = plan.function.definition.holistic.evaluation
                parameter = sketch_parameter(plan)
                built[position] = self.sketches.build(
                    evaluation, cells, n_cells, values, argument, parameter, valid=keep, raw=raw
                )
        for position, (pane_ids_of, slots_of, parts) in tabled.items():
            self._fold_parts(position, pane_ids_of, slots_of, parts)
        for position, sketches in built.items():
            self._fold(position, pane_ids, pane_slots, sketches)
        return True

    def _ring(
        self, position: int, extent: tuple[int, int] | None, n_slots: int
    ) -> SketchRing | None:
        """Aggregate `position`'s ring table where its panes are kept as one, able to take
        panes `extent` (None: no row) of `n_slots` slots; else None (the sparse form). A ring
        starts where the kernels keep the sketch as one and no pane is held sparse (after a
        restore, once those are freed); one that would pass its memory bound moves its panes
        to the sparse form for good."""
        ring = self.rings.get(position)
        if ring is None:
            plan = self.plans[position]
            evaluation = plan.function.definition.holistic.evaluation
            if (
                evaluation not in getattr(self.sketches, "ring_evaluations", ())
                or position in self.spilled
                or self.panes[position]
            ):
                return None
            parameter = sketch_parameter(plan)
            ring = self.rings[position] = SketchRing(
                self.sketches, evaluation, parameter, self.block
            )
        if extent is not None and not ring.fits(extent[0], extent[1], n_slots):
            self.panes[position] = ring.panes()
            del self.rings[position]
            self.spilled.add(position)
            # block sets from before the ring read none of its rows: built again when read
            self.suffixes[position], self.prefixes[position] = {}, {}
            return None
        return ring

    def _add_to_rings(
        self,
        name: str,
        plans: list[tuple[int, AggregatePlan]],
        panes: Any,  # noqa: ANN401
        slots: Any,  # noqa: ANN401
        values: Any,  # noqa: ANN401
        keep: Any,  # noqa: ANN401
        n_slots: int,
        pane_range: tuple[int, int] | None,
        raw: bool,
    ) -> bool:
        """`add_rows` into ring tables, where every aggregate reading `name` keeps one: one
        launch per aggregate over the batch's rows. False where one does not (nothing added)."""
        if any(self._ring(position, None, n_slots) is None for position, _ in plans):
            return False
        if pane_range is None:
            extent = self.sketches.ring_extent(panes, keep)
        else:  # rows in panes before the floor are late: none is kept
            low = pane_range[0] if self.floor is None else max(pane_range[0], self.floor)
            extent = (low, pane_range[1]) if low <= pane_range[1] else None
        if extent is None:
            return True  # no row kept
        rings = [self._ring(position, extent, n_slots) for position, _ in plans]
        if any(ring is None for ring in rings):
            return False  # one moved to the sparse form: the rows go there (the rest by chunks)
        if raw:
            values = order_keys(values)
        argument = self.fields[name].type
        for ring in rings:
            ring.add(panes, slots, values, keep, argument, extent, n_slots)
        return True

    def _fold(
        self,
        position: int,
        pane_ids: list[int],
        pane_slots: list[np.ndarray],
        built: Any,  # noqa: ANN401 - the kernels' sketch set
    ) -> None:
        """Merge a build's cells (pane i's: the next len(pane_slots[i]), key slots
        pane_slots[i]) into the panes' sketches of aggregate `position`."""
        parts, at = [], 0
        for present in pane_slots:
            parts.append(self.sketches.cell_range(built, at, at + len(present)))
            at += len(present)
        self._fold_parts(position, pane_ids, pane_slots, parts)

    def _fold_parts(
        self, position: int, pane_ids: list[int], pane_slots: list[np.ndarray], parts: list
    ) -> None:
        """Merge pane i's sketches `parts[i]` (cell j: key slot pane_slots[i][j]) into the
        panes' sketches of aggregate `position`."""
        store = self.panes[position]
        for pane, present, part in zip(pane_ids, pane_slots, parts, strict=True):
            pane = int(pane)
            old = store.get(pane)
            store[pane] = (present, part) if old is None else self._union(old, present, part)
            self._invalidate(position, pane)

    def _invalidate(self, position: int, pane: int) -> None:
        """Drop the prefix and suffix sets that cover `pane` (it received rows)."""
        if not self.blocked[position]:
            return
        block, index = divmod(pane, self.block)
        suffix = self.suffixes[position].get(block)
        if suffix is not None:
            for i in [i for i in suffix if i <= index]:
                del suffix[i]
        prefix = self.prefixes[position].get(block)
        if prefix is not None:
            del prefix[index:]

    def _suffix(self, position: int, block: int, index: int) -> tuple | None:
        """The merge of block `block`'s panes index..B-1 (None where none holds a sketch),
        built down from the lowest one kept."""
        kept = self.suffixes[position].setdefault(block, {})
        if index in kept:
            return kept[index]
        store = self.panes[position]
        low = min(kept, default=self.block)
        current = kept.get(low)
        for i in range(low - 1, index - 1, -1):
            current = self._joined(current, store.get(block * self.block + i))
            kept[i] = current
        return current

    def _prefix(self, position: int, block: int, index: int) -> tuple | None:
        """The merge of block `block`'s panes 0..index, built up from the highest one kept."""
        kept = self.prefixes[position].setdefault(block, [])
        store = self.panes[position]
        while len(kept) <= index:
            pane = store.get(block * self.block + len(kept))
            kept.append(self._joined(kept[-1] if kept else None, pane))
        return kept[index]

    def _joined(self, held: tuple | None, pane: tuple | None) -> tuple | None:
        """(slots, sketches) of two sets merged (either may be None: none held)."""
        if held is None or pane is None:
            return pane if held is None else held
        return self._union(held, *pane)

    def _union(self, old: tuple, slots: np.ndarray, part: Any) -> tuple:  # noqa: ANN401
        """A pane's (key slots, sketches) with more rows' sketches of `slots` merged in."""
        old_slots, old_sketches = old
        if np.array_equal(old_slots, slots):  # the same keys (dense panes): cell by cell
            return old_slots, self.sketches.merge_aligned(old_sketches, part)
        union = np.union1d(old_slots, slots)
        in_old = np.isin(union, old_slots)
        in_new = np.isin(union, slots)
        choices = np.stack(
            [
                np.searchsorted(old_slots, union),
                old_sketches.cells + np.searchsorted(slots, union),
            ],
            axis=1,
        )
        present = np.stack([in_old, in_new], axis=1)
        members = choices[present]  # per key: its old cell, then its new one
        offsets = np.concatenate(([0], np.cumsum(present.sum(axis=1))))
        return union, self.sketches.merge([old_sketches, part], members, offsets)

    def answer(
        self, position: int, slots: np.ndarray, first_panes: np.ndarray, panes_per_window: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(non-NULL count, result) per row: the merge of the sketches of the row's key over
        the `panes_per_window` panes from `first_panes[row]` (from the block sets where
        aggregate's windows are blocked: `self.blocked`). The memory of a call is bounded
        here whatever the rows (chunks of MAX_MEMBERS members and MAX_SPARSE_ROWS rows, or
        MAX_RING_ROWS rows of a ring table): callers pass all their rows at once."""
        if panes_per_window != self.block:
            raise ValueError(f"windows of {panes_per_window} panes, planned {self.block}")
        ring = self.rings.get(position)
        rows = len(slots)
        counts, results = [], []
        if ring is not None:
            slots, first_panes = np.asarray(slots, np.int64), np.asarray(first_panes, np.int64)
            if rows <= MAX_RING_ROWS:  # the usual case: one launch, one read
                return ring.answer(slots, first_panes)
            for begin in range(0, rows, MAX_RING_ROWS):
                part = slice(begin, begin + MAX_RING_ROWS)
                n, value = ring.answer(slots[part], first_panes[part])
                counts.append(n)
                results.append(value)
            return np.concatenate(counts), np.concatenate(results)
        chunk = max(1, MAX_MEMBERS // (2 if self.blocked[position] else panes_per_window))
        chunk = min(chunk, MAX_SPARSE_ROWS)
        for begin in range(0, max(rows, 1), chunk):
            part_slots = slots[begin : begin + chunk]
            part_panes = first_panes[begin : begin + chunk]
            n, value = self._answer(position, part_slots, part_panes)
            counts.append(n)
            results.append(value)
        return np.concatenate(counts), np.concatenate(results)

    def _pieces(self, position: int, first_panes: np.ndarray) -> tuple[list, np.ndarray]:
        """(the sets the rows' windows read: (slots, sketches) or None, and per row the
        indices of its sets in that list, [rows, k], -1 for none)."""
        pw = self.block
        if not self.blocked[position]:
            low = int(first_panes.min())
            span = int(first_panes.max()) - low + pw
            store = self.panes[position]
            pieces = [store.get(low + index) for index in range(span)]
            return pieces, (first_panes - low)[:, None] + np.arange(pw, dtype=np.int64)
        starts, inverse = _distinct(first_panes)
        pieces = []
        for start in starts.tolist():
            block, index = divmod(start, pw)
            pieces.append(self._suffix(position, block, index))
            pieces.append(self._prefix(position, block + 1, index - 1) if index else None)
        inverse = inverse.reshape(-1).astype(np.int64)
        return pieces, np.stack([2 * inverse, 2 * inverse + 1], axis=1)

    def _answer(self, position: int, slots: np.ndarray, first_panes: np.ndarray):  # noqa: ANN202
        plan = self.plans[position]
        evaluation = plan.function.definition.holistic.evaluation
        sets: list[Any] = []
        rows = len(slots)
        if rows:
            pieces, row_pieces = self._pieces(position, first_panes)
            # cell[i, s]: key slot s's cell in piece i of the joined sets, -1 if none (a
            # dense table over the rows' slots, and a last row of -1 for no piece: a gather
            # per (row, piece) after it)
            used, compact = _distinct(slots)
            cell = np.full((len(pieces) + 1, len(used)), -1, np.int64)
            total = 0
            seen: dict[int, int] = {}  # a set read by several windows is joined once
            for index, held in enumerate(pieces):
                if held is None:
                    continue
                if id(held) in seen:
                    cell[index] = cell[seen[id(held)]]
                    continue
                seen[id(held)] = index
                piece_slots, sketches = held
                at = np.minimum(np.searchsorted(piece_slots, used), len(piece_slots) - 1)
                cell[index] = np.where(piece_slots[at] == used, total + at, -1)
                total += sketches.cells
                sets.append(sketches)
            row_pieces = np.where(row_pieces < 0, len(pieces), row_pieces)
            chosen = cell[row_pieces, compact.reshape(-1)[:, None]]
            present = chosen >= 0
            members = chosen[present]
            offsets = np.concatenate(([0], np.cumsum(present.sum(axis=1))))
        else:
            members, offsets = np.empty(0, np.int64), np.zeros(1, np.int64)
        if not sets:  # no pane holds a sketch: every row is over no value
            sets = [self.sketches.empty(evaluation, sketch_parameter(plan))]
            members = np.empty(0, np.int64)
            offsets = np.zeros(len(slots) + 1, np.int64)
        return self.sketches.merge_answer(sets, members, offsets, plan.percentages)

    def free(self, before: int, panes_per_slide: int) -> None:
        """Drop the panes no window from `before` on covers, and the block sets no such
        window reads (a block's suffixes serve windows starting in it, its prefixes those
        starting in the block before)."""
        for store in self.panes.values():
            for pane in [q for q in store if q // panes_per_slide < before]:
                del store[pane]
        first_start = before * panes_per_slide  # of the windows still to fire
        self.floor = first_start if self.floor is None else max(self.floor, first_start)
        for ring in self.rings.values():
            ring.free(first_start)
        for suffixes in self.suffixes.values():
            for block in [b for b in suffixes if (b + 1) * self.block <= first_start]:
                del suffixes[block]
        for prefixes in self.prefixes.values():
            for block in [b for b in prefixes if b * self.block <= first_start]:
                del prefixes[block]

    @property
    def nbytes(self) -> int:
        """Bytes of the panes' sketches and of the block sets (a set shared by two entries,
        where a pane added nothing, counts once)."""
        held = {id(entry): entry for store in self.panes.values() for entry in store.values()}
        for sets in self.suffixes.values():
            held.update((id(e), e) for kept in sets.values() for e in kept.values() if e)
        for sets in self.prefixes.values():
            held.update((id(e), e) for kept in sets.values() for e in kept if e)
        kept = sum(slots.nbytes + sketches.nbytes for slots, sketches in held.values())
        return kept + sum(ring.nbytes for ring in self.rings.values())

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Snapshot arrays: per aggregate its pane ids, and each pane's sketch bytes."""
        arrays = {}
        for position, store in self.panes.items():
            ring = self.rings.get(position)
            if ring is not None:  # the sparse form's arrays: one format whatever the form
                store = ring.panes()
            arrays[f"sketch.{position}.panes"] = np.asarray(list(store), np.int64)
            for pane, (slots, sketches) in store.items():
                blob = self.sketches.to_bytes(sketches)
                arrays[f"sketch.{position}.{pane}"] = np.frombuffer(blob, np.uint8)
                arrays[f"sketch.{position}.{pane}.slots"] = slots
        return arrays

    def restore(self, arrays: dict[str, np.ndarray]) -> None:
        for position, plan in self.plans.items():
            evaluation = plan.function.definition.holistic.evaluation
            store = {}
            for pane in arrays[f"sketch.{position}.panes"].tolist():
                blob = arrays[f"sketch.{position}.{pane}"].tobytes()
                slots = arrays[f"sketch.{position}.{pane}.slots"]
                store[int(pane)] = (slots, self.sketches.from_bytes(evaluation, blob))
            self.panes[position] = store
            self.rings.pop(position, None)  # a ring starts again once these are freed
            self.suffixes[position] = {}  # derived from the panes: built again when read
            self.prefixes[position] = {}


def run_answers(
    kernels: Any,  # noqa: ANN401 - the backend's kernels (`sketches`)
    plan: AggregatePlan,
    value_field: StateField,
    values: np.ndarray,
    run_start: np.ndarray,
    run_end: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(non-NULL count, result) per row of an approximate aggregate over one run of order
    keys `values[run_start[r]:run_end[r]]` per row (count windows): each row's sketch is
    built from its run in one build call."""
    rows = len(run_start)
    lengths = (run_end - run_start).astype(np.int64)
    cells = np.repeat(np.arange(rows, dtype=np.int64), lengths)
    first = np.concatenate(([0], np.cumsum(lengths)[:-1])) if rows else np.empty(0, np.int64)
    gather = np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(run_start - first, lengths)
    evaluation = plan.function.definition.holistic.evaluation
    built = kernels.sketches.build(
        evaluation, cells, rows, values[gather], value_field.type, sketch_parameter(plan)
    )
    return kernels.sketches.answer(built, plan.percentages)
