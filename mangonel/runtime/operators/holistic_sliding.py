"""Exact percentiles over sliding time windows by per-key bands stepped pane by pane, beside
`holistic.HolisticTimeWindows` (the CPU's path: its kernels' `sliding_percentiles`,
`runtime.cpu.holistic_sliding`; the GPU selects over sorted runs).

A key's next window differs from its last by a slide's panes out and in, so each key keeps a
band of values around the percentile's positions and a step reads only those panes' values
(the kernel module's docstring). The driver's part: which aggregates take the path
(`sliding_positions`), the panes grouped by key slot rather than sorted (`group`), the panes
listed for a firing's rows with when each last changed (rows added after a key's state was
made invalidate it: `HeldPane.changed` against the state's generation), and the panes freed
one slide ago kept so a key's state can step them out (`retire`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from mangonel.compiler import physical as ph
from mangonel.runtime.operators.holistic_evaluate import percentile_values
from mangonel.runtime.operators.holistic_pane import HeldPane

# the evaluations the bands answer (no Python function, no COUNT DISTINCT), as the kernels'
# modes number them (`runtime.cpu.holistic.MODES`; this layer imports no backend)
SLIDING_EVALUATIONS = {"percentile_cont": 0, "percentile_disc": 1}


def sliding_positions(
    node: ph.WindowAggregateExec,
    exact_positions: list[int],
    timed_fields: set[str] | frozenset[str],
    kernels: Any,  # noqa: ANN401 - the holistic step's kernels
) -> set[int]:
    """The exact aggregates that take the bands: on kernels that have them, over sliding
    windows (a tumbling window is one sorted pane, read in place), of fields every exact
    reader of which is such a percentile (the field's panes are then grouped, not sorted:
    no other reader needs sorted runs) and no Python function reads with its times."""
    if getattr(kernels, "sliding_percentiles", None) is None or node.panes_per_window < 2:
        return set()
    readers: dict[str, list[int]] = {}
    for position in exact_positions:
        field = node.aggregates[position].value_field
        assert field is not None
        readers.setdefault(field, []).append(position)
    chosen: set[int] = set()
    for field, positions in readers.items():
        plans = [node.aggregates[p] for p in positions]
        if field in timed_fields:
            continue
        if all(p.python is None and p.evaluation in SLIDING_EVALUATIONS for p in plans):
            chosen.update(positions)
    return chosen


def group(pane: HeldPane, kernels: Any, n_slots: int) -> None:  # noqa: ANN401
    """The pane's values grouped by key slot (`HeldPane.by_value` False: not sorted within a
    slot), again after new chunks came."""
    if pane.sorted_values is not None and not pane.chunks:
        return
    slots, values, _ = pane.raw(kernels, False)
    pane.sorted_values, pane.offsets = kernels.sliding_percentiles.group_pane(
        slots, values, n_slots
    )
    pane.by_value = False
    pane.chunks = []
    pane.presorted = True


def add_grouped(pane: HeldPane, values: np.ndarray, offsets: np.ndarray) -> None:
    """A batch's values of the pane grouped by slot (`split_grouped`): the pane's grouped
    values where it had none, else one more chunk (`group` joins them when a window reads
    the pane: a pane two batches share)."""
    if pane.sorted_values is None and not pane.chunks:
        pane.sorted_values, pane.offsets = values, offsets
        pane.by_value = False
        return
    slots = np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), np.diff(offsets))
    pane.add((slots, values, None), False)


class SlidingPercentiles:
    """One exact percentile aggregate's per-key states (window, epoch, count; per p a band)."""

    def __init__(self, kernels: Any, plan: ph.AggregatePlan, panes_per_window: int) -> None:  # noqa: ANN401
        self.module = kernels.sliding_percentiles
        assert plan.evaluation is not None
        self.mode = SLIDING_EVALUATIONS[plan.evaluation]
        fraction = plan.percentages
        self.fractions = np.atleast_1d(np.asarray(0.0 if fraction is None else fraction, float))
        self.array = isinstance(fraction, tuple)
        self.panes_per_window = panes_per_window
        self.clear()

    def clear(self) -> None:
        """No state (a restore renumbers key slots and replaces the panes)."""
        ps = len(self.fractions)
        self.first = np.empty(0, np.int64)
        self.epoch = np.empty(0, np.int64)
        self.count = np.empty(0, np.int64)
        self.bounds = np.empty((0, ps, 4), np.int64)
        self.bands = self.module.new_bands()

    def _grow(self, n_slots: int) -> None:
        held = len(self.first)
        if n_slots <= held:
            return
        size = max(n_slots, 2 * held)
        more = size - held
        ps = len(self.fractions)
        self.first = np.concatenate((self.first, np.full(more, self.module.NO_WINDOW, np.int64)))
        self.epoch = np.concatenate((self.epoch, np.zeros(more, np.int64)))
        self.count = np.concatenate((self.count, np.zeros(more, np.int64)))
        fresh = np.zeros((more, ps, 4), np.int64)
        fresh[:, :, 3] = -1  # no band
        self.bounds = np.concatenate((self.bounds, fresh))
        self.module.extend_bands(self.bands, size * ps)

    def forget(self, before: int) -> None:
        """Drop the states whose window starts before pane `before`, the first pane still
        held or retired: a step from them would read panes gone (it rebuilds), so they are
        dead, and a key that stopped arriving keeps no band."""
        stale = np.flatnonzero((self.first != self.module.NO_WINDOW) & (self.first < before))
        if len(stale):
            self.first[stale] = self.module.NO_WINDOW
            self.bounds[stale, :, 3] = -1  # no band
            self.module.drop_bands(self.bands, stale, len(self.fractions))

    @property
    def nbytes(self) -> int:
        arrays = self.first.nbytes + self.epoch.nbytes + self.count.nbytes + self.bounds.nbytes
        return arrays + self.module.band_bytes(self.bands)

    def evaluate(
        self,
        listed: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, list[np.ndarray]],
        slots: np.ndarray,
        first_panes: np.ndarray,
        generation: int,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(n, lower, higher) of the rows (key slot, first pane) over the `listed` panes
        (`list_panes`), lower and higher [rows, ps] for an ARRAY of p, else [rows]."""
        table, offsets, offset_first, changed, base, _held = listed  # held: alive till done
        rows = len(slots)
        self._grow(int(slots.max()) + 1 if rows else 0)
        ps = len(self.fractions)
        n = np.zeros(rows, np.int64)
        lower = np.zeros((rows, ps), np.int64)
        higher = np.zeros((rows, ps), np.int64)
        if rows:
            self.module.sliding_percentiles(
                table, offsets, offset_first, changed, base, self.panes_per_window,
                np.ascontiguousarray(slots, np.int64), np.ascontiguousarray(first_panes, np.int64),
                self.mode, self.fractions, generation, self.first, self.epoch, self.count,
                self.bounds, self.bands, n, lower, higher,
            )  # fmt: skip
        if self.array:
            return n, lower, higher
        return n, lower[:, 0].copy(), higher[:, 0].copy()


def list_panes(
    store: dict[int, HeldPane],
    retired: dict[int, HeldPane],
    first_panes: np.ndarray,
    panes_per_window: int,
    kernels: Any,  # noqa: ANN401
    n_slots: int,
    retired_from: int | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, list[np.ndarray]]:
    """The panes the rows' windows and the windows before them read, grouped, as the kernel
    takes them: (values' table, offsets, offset_first, changed, base, the arrays the table
    points into), from pane `base` = the rows' first less a window. A pane neither held
    nor retired has no values, unless it lies before `retired_from` (`retire`'s; None: no
    pane freed yet): then it is unknown (freed long ago: a state stepping it out
    rebuilds)."""
    module = kernels.sliding_percentiles
    low = int(first_panes.min())
    base = low - panes_per_window
    end = int(first_panes.max()) + panes_per_window
    empty_values = np.empty(0, np.int64)
    empty_offsets = np.zeros(1, np.int64)
    values, offsets = [], []
    changed = np.zeros(end - base, np.int64)
    for q in range(base, end):
        pane = store.get(q)
        if pane is None:
            pane = retired.get(q)
        if pane is None:
            values.append(empty_values)
            offsets.append(empty_offsets)
            if retired_from is not None and q < retired_from:
                changed[q - base] = module.UNKNOWN_PANE
            continue
        group(pane, kernels, n_slots)
        values.append(pane.sorted_values)
        offsets.append(pane.offsets)
        changed[q - base] = pane.changed
    table, held = module.pane_table(values)
    return (table, *module.flat_offsets(offsets), changed, base, held)


def retire(
    retired: dict[int, HeldPane], freed: dict[int, HeldPane], next_window: int, slide: int
) -> int:
    """Keep the panes freed now and those of the last slide (a key whose state is the last
    fired window steps them out of its next one); drop the older. Returns the first pane
    kept: a pane from it on that is neither held nor retired never had values."""
    retired.update(freed)
    keep_from = (next_window - 1) * slide
    for pane in [q for q in retired if q < keep_from]:
        del retired[pane]
    return keep_from


class SlidingStates:
    """A node's sliding percentiles (`sliding_positions`): each one's key states, the panes
    freed one slide ago per field (`retire`), and the generation the driver stamps on a
    pane when values come (`HeldPane.changed`; each `answers` call moves it on, so values
    kept after a call are newer than the states it made)."""

    def __init__(
        self,
        node: ph.WindowAggregateExec,
        exact_positions: list[int],
        timed_fields: set[str] | frozenset[str],
        kernels: Any,  # noqa: ANN401 - the holistic step's kernels
    ) -> None:
        self.node = node
        self.kernels = kernels
        positions = sliding_positions(node, exact_positions, timed_fields, kernels)
        self.states = {
            p: SlidingPercentiles(kernels, node.aggregates[p], node.panes_per_window)
            for p in sorted(positions)
        }
        self.fields = {node.aggregates[p].value_field for p in self.states}
        # fields grouped by (pane, slot) as batches come (`store`), where only the bands
        # read them (`group_on_arrival`)
        self.grouped: set[str] = set()
        self.value_fields = {f.name: f for f in node.fields}
        self.generation = 1
        self.clear()

    def __contains__(self, position: int) -> bool:
        return position in self.states

    def clear(self) -> None:
        """No key state, no retired pane (a restore renumbers slots and replaces panes)."""
        for state in self.states.values():
            state.clear()
        self.retired: dict[str, dict[int, HeldPane]] = {name: {} for name in self.fields}
        self.retired_from: int | None = None  # `retire`'s: the states read no pane before

    @property
    def nbytes(self) -> int:
        held = sum(p.nbytes for store in self.retired.values() for p in store.values())
        return held + sum(state.nbytes for state in self.states.values())

    def group_on_arrival(self, names: set[str]) -> None:
        """Group the values of fields `names` (of `fields`, no other reader: no sketch) by
        (pane, key slot) as they come (`store`), where the kernels can."""
        module = getattr(self.kernels, "sliding_percentiles", None)  # the GPU has none
        if getattr(module, "split_grouped", None) is not None:
            self.grouped = set(names) & self.fields

    def store(
        self,
        store: dict[int, HeldPane],
        panes: np.ndarray,
        slots: np.ndarray,
        values: np.ndarray,
        keep: np.ndarray,
        n_slots: int,
        pane_range: tuple[int, int] | None,
    ) -> bool:
        """A batch's kept values (order keys or the argument's values) of a `grouped` field
        into its panes grouped by key slot, stamped with the generation; False where the
        kernels split it no such way (the caller keeps the rows as chunks)."""
        split = self.kernels.sliding_percentiles.split_grouped(
            panes, slots, values, keep, n_slots, pane_range
        )
        if split is None:
            return False
        for pane_id, (grouped, offsets) in zip(*split, strict=True):
            held = store.setdefault(pane_id, HeldPane())
            add_grouped(held, grouped, offsets)
            held.changed = self.generation
        return True

    def retire(self, name: str, freed: dict[int, HeldPane], next_window: int, slide: int) -> None:
        """The panes of field `name` the driver freed (`retire`)."""
        if name in self.retired:
            self.retired_from = retire(self.retired[name], freed, next_window, slide)
            for position, state in self.states.items():
                if self.node.aggregates[position].value_field == name:
                    state.forget(self.retired_from)

    def answers(
        self,
        panes: dict[str, dict[int, HeldPane]],
        slots: np.ndarray,
        first_panes: np.ndarray,
        n_slots: int,
    ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """(n, value) of every row (key slot, first pane) of a result batch per aggregate:
        in one call (no per-chunk run arrays to bound) over the rows key by key (a key's
        band and panes stay in cache), back in the batch's row order."""
        if not self.states or not len(slots):
            return {}
        order = np.lexsort((first_panes, slots))
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        generation = self.generation
        self.generation += 1
        pw = self.node.panes_per_window
        listed: dict[str, tuple] = {}
        answers = {}
        for position, state in self.states.items():
            plan = self.node.aggregates[position]
            name = plan.value_field
            assert name is not None
            if name not in listed:
                listed[name] = list_panes(
                    panes[name], self.retired[name], first_panes, pw, self.kernels, n_slots,
                    self.retired_from,
                )  # fmt: skip
            n, lower, higher = state.evaluate(
                listed[name], slots[order], first_panes[order], generation
            )
            answers[position] = percentile_values(
                plan, self.value_fields[name], n[inverse], lower[inverse], higher[inverse]
            )
        return answers
