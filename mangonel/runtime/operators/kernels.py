"""The kernels a window-aggregation driver calls: the one interface every backend implements.

The driver (`mangonel.runtime.operators.window`) owns the state machine — watermark, lateness,
firing order, snapshots — and never touches the arrays inside a backend's objects on the hot
path: it hands them back to the kernels. A backend supplies:

- `lift_tuples`: filter + project + event time of one batch -> `LiftedTuples` (per-tuple
  partial state of every field, backend arrays), plus `pane_ids` and `late_tuples`;
- `KeyMap`: key columns -> dense key slots (first-seen order), and back;
- `PaneState`: the flat `[keys x panes]` arrays of every state field; `merge` combines tuple or
  pane partials into it (pane pre-aggregation), `windows` runs the batched pane aggregation
  tree over runs of consecutive windows and returns finalizable field values;
- `preaggregate`: stage 1 of the split (Spark) form: per-tuple partials -> one partial per
  (key, pane) of a batch (a step of its own: placed on the CPU for GPU plans, whose kernels
  lack it, as is `segment_windows`, the count-window tree);
- `to_host` / `from_host`: move an array to / from numpy (results, snapshots);
- `lift_merge`: the fused standalone entry (`process`): lift + key slots + pane + lateness +
  merge of one batch in one pass where the backend can (GPU: one generated kernel), with the
  rows it could not place (new keys, panes outside the target segment) handed back for the
  split path above. A backend without a fused pass returns every row as the rest;
- `batch_sessions`, `assign_sessions`, `combine_sessions`: session windows' rows into
  sessions, sessions merged with the open ones, and their partial states;
- `prefetch`: start moving a batch's columns to the backend's memory before the batch is
  processed (the time-window driver calls it for every batch as it conforms it: the
  standalone driver's lookahead conforms batch k + 1 before it processes and fires batch k,
  so the copy overlaps that work; a no-op on the CPU).

Arrays crossing this interface are the backend's own (numpy on CPU, CuPy on GPU); anything
host-sized (one value per key or per window run) is numpy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from mangonel.catalog.types import SqlType
from mangonel.compiler.physical import AggregatePlan, LiftExec, StateField, WindowAggregateExec
from mangonel.compiler.physical import neutral as neutral  # re-exported for the backends

Array = Any  # a backend array (numpy.ndarray on CPU, cupy.ndarray on GPU)


@dataclass
class LiftedTuples:
    """One batch after the lift: every array has one element per input row.

    `event_time` holds 0 where `has_event_time` is False. `contributes` is has_event_time AND
    the WHERE predicate. `partials[field.name]` is the field's per-tuple partial state (a tuple
    of arrays: one, or (n, mean, m2) for MOMENTS), neutral where the argument is NULL; the
    first field counts rows (1 where the tuple contributes, else 0). Other fields of rows that
    do not contribute are unspecified: the driver never merges those rows (slot -1).
    `keys` are the key columns (Arrow) in plan order. `key_words`: where the backend's lift
    built the rows' key words itself (`lift_tuples(..., key_words=True)` on the GPU: on the
    device, word-major), for its key map's `map_columns(..., words=)`; else None.
    """

    rows: int
    event_time: Array
    has_event_time: Array
    contributes: Array
    keys: list[pa.Array]
    partials: dict[str, tuple[Array, ...]]
    max_event_time: int | None  # over every row with an event time (WHERE does not matter)
    null_event_time: int
    key_words: Array | None = None


@dataclass
class PaneTarget:
    """Where a fused pass may merge: cells of `state` for panes in [first_pane, end_pane)
    (inside the state's columns, no other segment within a window) and key slots below
    `known_keys` (slots that already have their first-seen number)."""

    state: PaneState
    first_pane: int
    end_pane: int
    known_keys: int


@dataclass
class FusedMerge:
    """What `lift_merge` did with one batch.

    `late` counts contributing tuples it found late (not merged); `first_pane`/`last_pane` span
    the panes it merged into the target (None when it merged nothing). `rest` holds the lifted
    batch when some contributing, non-late rows were not placed: `rest_include` marks them, and
    the driver merges them through its split path (which decides their lateness again: they
    are not late, so nothing is counted twice). `rest` is None when every row was decided.
    `late_rows`: the per-row verdict behind `late` (bool per row of the batch, host or
    device), None when nothing was late; the driver hands it to its late-row sink.
    `shared`: where the kernels say `shares_fused_rows`, were asked (`share_rows`) and
    placed rows, the pass's decisions per row of the batch, (pane id, contributing and not
    late, key slot of the rows it merged, -1 elsewhere), on the kernels' backend: a
    holistic driver reads them instead of lifting and keying the batch again
    (`TimeWindowOperator.shared_rows`).
    """

    rows: int
    late: int
    null_event_time: int
    max_event_time: int | None
    first_pane: int | None
    last_pane: int | None
    rest: LiftedTuples | None
    rest_include: Array | None
    late_rows: Array | None = None
    shared: tuple[Array, Array, Array] | None = None

    @classmethod
    def unplaced(cls, lifted: LiftedTuples) -> FusedMerge:
        """Nothing merged: every contributing row goes to the driver's split path."""
        return cls(
            lifted.rows,
            0,
            lifted.null_event_time,
            lifted.max_event_time,
            None,
            None,
            lifted,
            lifted.contributes,
        )


class KeyMap(Protocol):
    n_slots: int
    nbytes: int  # bytes it holds (tables at capacity, string dictionaries): `state_bytes`

    def map_columns(
        self, columns: list[pa.Array], include: Array, words: Array | None = None
    ) -> Array:
        """Slots of the rows' keys (-1 where include is False); new keys get new slots.
        `words`: the rows' key words as the same backend's lift built them
        (`LiftedTuples.key_words`), read instead of encoding `columns`."""

    def decode(self, slots: np.ndarray) -> list[pa.Array]:
        """Key columns (declared Arrow types) of host slot numbers."""

    def to_arrays(self, prefix: str) -> dict[str, np.ndarray]: ...


class PaneState(Protocol):
    """The cells of every state field for key slots [0, key_capacity) and panes
    [origin, origin + pane_capacity), in flat arrays laid out as the backend chooses (CPU:
    pane-major, a batch's few panes stay cache-resident, a ring of pane rows; GPU: key-major,
    one key's leaves are contiguous for the tree). The driver never assumes the layout: it
    addresses cells through the kernels' `flat_index`, and `to_arrays`/`load_arrays` use the
    one shared `[n_keys, panes]` layout of snapshots. Cells never written hold the field's
    neutral element. A state with `ring = True` (the CPU's) moves its origin forward in
    place at no cost, so the driver sizes it to the panes its windows read; others get
    twice that, their moves amortised (`TimeWindowOperator._reserve`)."""

    key_capacity: int
    pane_capacity: int
    origin: int
    nbytes: int  # bytes its arrays hold at capacity: `state_bytes`

    def reshape(self, key_capacity: int, pane_capacity: int, origin: int) -> None:
        """Reallocate, keeping cells of panes >= origin that fit; new cells are neutral."""

    def merge(self, index: Array, partials: dict[str, tuple[Array, ...]]) -> None:
        """Combine partial i into flat cell index[i] (skip index -1), for every field."""

    def occupied(self, n_keys: int, first_pane: int, end_pane: int) -> np.ndarray:
        """Host bool per pane in [first_pane, end_pane): does any key have a tuple there."""

    def windows(
        self,
        n_keys: int,
        runs: list[tuple[int, int]],
        panes_per_slide: int,
        panes_per_window: int,
        windows_per_batch: int,
    ) -> dict[str, tuple[Array, ...]]:
        """Field values of every (window, key) of the runs [(first pane of first window,
        number of consecutive windows)], window-major then key order."""

    def cumulative_windows(
        self, n_keys: int, runs: list[tuple[int, int]], panes_per_period: int
    ) -> dict[str, tuple[Array, ...]]:
        """Field values of every (window, key) of CUMULATE runs [(last pane of the first
        window, number of consecutive windows)], window-major then key order: window g (its
        last pane) covers panes [g // panes_per_period * panes_per_period, g + 1), computed as
        a prefix combine (window g = window g - 1 combined with pane g, within a period)."""

    def fire(
        self,
        n_keys: int,
        runs: list[tuple[int, int]],
        panes_per_slide: int,
        panes_per_window: int,
        windows_per_batch: int,
        window_ids: np.ndarray,
        plans: tuple[AggregatePlan, ...],
        bounds: tuple[int, int],
        keys: KeyMap,
        with_slots: bool = True,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, list[pa.Array], list[pa.Array]]:
        """The finalized results of the runs' (window, key) cells that hold rows (the first
        field's row count > 0), window-major then key order: host (window start and end of
        cell in microseconds, `results.window_bounds` of its window id (from `window_ids`, one
        per window of the runs) and `bounds` = (slide, size); key slot of cell (may be None
        unless `with_slots`); the key columns of `keys` (the slots' keys: a backend may make
        them where it finalizes); one Arrow array per aggregate of `plans`, its result
        type)."""

    def to_arrays(self, n_keys: int, first_pane: int, end_pane: int) -> dict[str, np.ndarray]:
        """Host copy of the cells of keys [0, n_keys) and panes [first_pane, end_pane)."""

    def load_arrays(self, arrays: dict[str, np.ndarray], first_pane: int) -> None:
        """Inverse of to_arrays (after reshape to a large enough capacity)."""


class Staging(Protocol):
    """A batch's columns on their way to the backend (`WindowKernels.prefetch`): calling it
    gives the (min, max) of the batch's non-NULL event times the copy measured (None if it
    did not), waiting for the copy; `ready`: it would not wait."""

    @property
    def ready(self) -> bool: ...

    def __call__(self) -> tuple[int, int] | None: ...


class WindowKernels(Protocol):
    name: str
    # optional `shares_fused_rows = True`: `lift_merge(share_rows=True)` fills
    # `FusedMerge.shared` (the backend's arrays); absent, a holistic driver lifts and keys
    # the batch itself. Optional `lift_arguments` (the CPU's): a field's raw argument values;
    # absent, a driver sharing rows lifts the values (`lift_tuples`). Optional
    # `stages_in_background = True`: `prefetch` stages in another thread, so the time
    # window prefetches the next batch at once rather than during the fused pass

    def lift_tuples(
        self,
        lift: LiftExec,
        batch: pa.RecordBatch,
        key_words: bool = False,
        extremes: bool = True,
    ) -> LiftedTuples:
        """The per-row lift; `key_words`: the caller maps the rows' keys next, so a backend
        that can builds their key words in the lift (`LiftedTuples.key_words`). `extremes`
        False: the caller reads the rows only, so a backend may leave `max_event_time` None
        and `null_event_time` 0 (the GPU then needs no device read)."""

    def pane_ids(self, lifted: LiftedTuples, pane_length: int) -> Array: ...

    def late_tuples(
        self,
        panes: Array,
        include: Array,
        pane_length: int,
        slide: int,
        size: int,
        watermark: int,
    ) -> Array:
        """Bool per row: included and the pane's last window ended at or before watermark."""

    def new_key_map(self, types: tuple[SqlType, ...]) -> KeyMap: ...

    def key_map_from_arrays(
        self, types: tuple[SqlType, ...], arrays: dict[str, np.ndarray], prefix: str
    ) -> KeyMap: ...

    def new_pane_state(self, fields: tuple[StateField, ...]) -> PaneState: ...

    def flat_index(self, slots: Array, panes: Array, state: PaneState) -> Array:
        """slot * pane_capacity + (pane - origin), -1 where slot is -1."""

    def preaggregate(
        self,
        slots: Array,
        panes: Array,
        partials: dict[str, tuple[Array, ...]],
        fields: tuple[StateField, ...],
    ) -> tuple[np.ndarray, np.ndarray, dict[str, tuple[Array, ...]]]:
        """Stage 1: one partial per distinct (slot, pane), first-seen order. Returns
        (first row of each partial, its pane ids, its partial state)."""

    def segment_windows(
        self,
        fields: tuple[StateField, ...],
        leaves: dict[str, tuple[Array, ...]],
        base: np.ndarray,
        windows: np.ndarray,
        panes_per_slide: int,
        panes_per_window: int,
        windows_per_batch: int,
    ) -> dict[str, tuple[Array, ...]]:
        """Tree windows over contiguous leaves: task t has windows[t] consecutive windows, the
        first starting at leaf base[t]; results task after task (count windows)."""

    def lift_merge(
        self,
        lift: LiftExec,
        window: WindowAggregateExec,
        batch: pa.RecordBatch,
        keys: KeyMap,
        target: PaneTarget | None,
        watermark: int | None,
        while_running: Callable[[], None] | None = None,
        share_rows: bool = False,
    ) -> FusedMerge:
        """Fused lift + merge of one batch into `target` against `watermark` (None: -inf);
        see `FusedMerge` for the rows it leaves to the split path. `while_running` is called
        once the pass is under way and before its result is waited for (the GPU: after the
        launches, before the sync), so host work placed there overlaps the device's.
        `share_rows` (kernels with `shares_fused_rows`): fill `FusedMerge.shared`."""

    def prefetch(
        self, lift: LiftExec, window: WindowAggregateExec, batch: pa.RecordBatch
    ) -> Staging | None:
        """Start copying the columns `lift_merge` will read of `batch` (the next batch);
        `lift_merge` of that same object uses the copy. Never required: a batch that was not
        prefetched, or one prefetched but not processed next, is handled as if never seen.
        Returns the staging when the copy measures the batch's event-time extremes (the
        input conformer's range check reuses them), else None. The batch's event
        times are not range-checked yet: a batch the conformer then changes is a new object,
        which `lift_merge` stages again."""

    def batch_sessions(
        self, slots: Array, starts: Array, gap: int, n_slots: int
    ) -> tuple[Array, Array, Array, Array]:
        """Session windows: a batch's rows `[starts, starts + gap)` of key slots (below
        n_slots, any order) merged into sessions numbered in (slot, start) order: (session
        number of each row, each session's slot, start and end)."""

    def assign_sessions(
        self,
        slots: Array,
        starts: Array,
        ends: Array,
        n_slots: int,
        disjoint_first: int | None = None,
    ) -> tuple[Array, Array, Array]:
        """Intervals `[starts, ends)` of any length merged likewise (a batch's sessions and
        the open ones): (session number of each, index of each session's first interval,
        each session's end). `disjoint_first`: the first that many intervals are disjoint
        within each slot, and so are the rest (a backend may use it)."""

    def combine_sessions(
        self,
        fields: tuple[StateField, ...],
        numbers: Array,
        count: int,
        partials: dict[str, tuple[Array, ...]],
    ) -> dict[str, tuple[Array, ...]]:
        """Per session, the combine of the partial states of its rows (row i into session
        numbers[i]), from the fields' neutral elements."""

    def to_host(self, array: Array) -> np.ndarray: ...

    def from_host(self, array: np.ndarray) -> Array: ...
