"""The approximate holistic functions (APPROX_COUNT_DISTINCT, APPROX_PERCENTILE) in the window
operators: mergeable sketches instead of raw values (docs/sketches.md).

- time windows (`SketchPanes`, used by `holistic.HolisticTimeWindows`, strategy
  `sketch-panes`): per approximate aggregate and pane, one sketch per key present in the
  pane (the pane's sorted key slots beside them: memory grows with the (key, pane) cells
  that hold values, not with keys x panes). A batch's kept rows (contributing, non-NULL,
  not late: the wrapped operator's rule) are built into sketches for all the panes they hit
  in one kernel call, and merged into the panes' sketches (HLL: register max; GK: a merge).
  A firing window's answer merges the sketches of its panes: all rows of a result batch in
  one merge call. A pane is freed with the raw
  values' panes, once every window covering it has fired.
- count windows (`run_answers`): a window is a run of its key's kept tuples (count windows
  hold them for their per-tuple partials anyway); the window's sketch is built from the run.

The sketch kernels are the backend's `kernels.sketches` (`runtime/cpu/sketch_windows.py`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mangonel.compiler.holistic import hll_precision, sketch_parameter
from mangonel.compiler.physical import AggregatePlan, StateField

# a build covers at most about this many register bytes ((pane, key) cells x 2^p): a batch
# that hits very many cells is built in chunks of panes
MAX_BUILD_BYTES = 1 << 26
MAX_MEMBERS = 1 << 22  # (rows x panes per window) members per merge call


def _register_bytes(plan: AggregatePlan) -> int:
    """Bytes per cell a build allocates up front (HLL registers; GK grows with the data)."""
    if plan.function.definition.holistic.evaluation != "approx_count_distinct":
        return 64
    return 1 << hll_precision(plan)


class SketchPanes:
    """Per approximate aggregate (its position in the node's aggregates), per pane the
    sorted key slots present in it and their sketches (cell i: key slots[i])."""

    def __init__(
        self,
        plans: dict[int, AggregatePlan],
        fields: dict[str, StateField],
        kernels: Any,  # noqa: ANN401 - the holistic step's kernels (`sketches`)
    ) -> None:
        self.plans = plans
        self.fields = fields
        self.sketches = kernels.sketches
        self.panes: dict[int, dict[int, tuple[np.ndarray, Any]]] = {p: {} for p in plans}

    def reads(self, name: str) -> bool:
        """Does an approximate aggregate read the `values` field `name`?"""
        return any(plan.value_field == name for plan in self.plans.values())

    def add(self, name: str, pane_ids: list[int], chunks: list[tuple], presorted: bool) -> None:
        """Fold a batch's kept rows of the `values` field `name`, one chunk (key slots, order
        keys, ...) per pane (`split_panes`; `presorted`: each chunk sorted by slot) into the
        sketches of every aggregate that reads it: one build over the cells (pane, key
        present in it) of a chunk of panes, then per pane a merge with the sketches it holds
        already. The chunks stay where the kernels keep them (on the GPU, the device)."""
        for position, plan in self.plans.items():
            if plan.value_field != name:
                continue
            evaluation = plan.function.definition.holistic.evaluation
            argument = self.fields[name].type
            store = self.panes[position]
            cell_bytes = _register_bytes(plan)
            first = 0
            while first < len(pane_ids):
                # panes first..last-1: as many as keep the build under MAX_BUILD_BYTES
                last, cells = first, 0
                pane_slots: list[np.ndarray] = []
                row_cells: list[Any] = []
                while last < len(pane_ids) and (
                    last == first or cells * cell_bytes < MAX_BUILD_BYTES
                ):
                    present, ids = self.sketches.pane_cells(chunks[last][0], presorted)
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
                at = 0
                for index in range(last - first):
                    pane = int(pane_ids[first + index])
                    present = pane_slots[index]
                    part = self.sketches.cell_range(built, at, at + len(present))
                    at += len(present)
                    old = store.get(pane)
                    store[pane] = (
                        (present, part) if old is None else self._union(old, present, part)
                    )
                first = last

    def _union(self, old: tuple, slots: np.ndarray, part: Any) -> tuple:  # noqa: ANN401
        """A pane's (key slots, sketches) with more rows' sketches of `slots` merged in."""
        old_slots, old_sketches = old
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
        the `panes_per_window` panes from `first_panes[row]`."""
        plan = self.plans[position]
        store = self.panes[position]
        rows = len(slots)
        counts, results = [], []
        chunk = max(1, MAX_MEMBERS // panes_per_window)
        for begin in range(0, max(rows, 1), chunk):
            part_slots = slots[begin : begin + chunk]
            part_panes = first_panes[begin : begin + chunk]
            n, value = self._answer(plan, store, part_slots, part_panes, panes_per_window)
            counts.append(n)
            results.append(value)
        return np.concatenate(counts), np.concatenate(results)

    def _answer(self, plan, store, slots, first_panes, pw):  # noqa: ANN001, ANN202
        evaluation = plan.function.definition.holistic.evaluation
        sets: list[Any] = []
        rows = len(slots)
        if rows:
            low = int(first_panes.min())
            span = int(first_panes.max()) - low + pw
            # cell[i, s]: key slot s's cell in pane low + i of the joined sets, -1 if none
            # (a dense table over the rows' slots: a gather per (row, pane) after it)
            used, compact = np.unique(slots, return_inverse=True)
            cell = np.full((span, len(used)), -1, np.int64)
            total = 0
            for index in range(span):
                held = store.get(low + index)
                if held is None:
                    continue
                pane_slots, sketches = held
                at = np.minimum(np.searchsorted(pane_slots, used), len(pane_slots) - 1)
                cell[index] = np.where(pane_slots[at] == used, total + at, -1)
                total += sketches.cells
                sets.append(sketches)
            covered = (first_panes - low)[:, None] + np.arange(pw, dtype=np.int64)
            chosen = cell[covered, compact.reshape(-1)[:, None]]
            present = chosen >= 0
            members = chosen[present]
            offsets = np.concatenate(([0], np.cumsum(present.sum(axis=1))))
        else:
            members, offsets = np.empty(0, np.int64), np.zeros(1, np.int64)
        if not sets:  # no pane holds a sketch: every row is over no value
            sets = [self.sketches.empty(evaluation, sketch_parameter(plan))]
            members = np.empty(0, np.int64)
            offsets = np.zeros(len(slots) + 1, np.int64)
        merged = self.sketches.merge(sets, members, offsets)
        return self.sketches.answer(merged, plan.fraction)

    def free(self, before: int, panes_per_slide: int) -> None:
        """Drop the panes no window from `before` on covers."""
        for store in self.panes.values():
            for pane in [q for q in store if q // panes_per_slide < before]:
                del store[pane]

    @property
    def nbytes(self) -> int:
        return sum(
            slots.nbytes + sketches.nbytes
            for store in self.panes.values()
            for slots, sketches in store.values()
        )

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Snapshot arrays: per aggregate its pane ids, and each pane's sketch bytes."""
        arrays = {}
        for position, store in self.panes.items():
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
    return kernels.sketches.answer(built, plan.fraction)
