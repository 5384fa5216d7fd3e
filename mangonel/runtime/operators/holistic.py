"""Holistic window functions (MEDIAN, PERCENTILE_*, COUNT DISTINCT, Python window functions)
in the window operators.

`evaluate` turns runs of order keys (per result row, ranges of one flat array) into each
holistic aggregate's (non-NULL count, value) with the backend's `holistic_select` kernel
(`python_window` for a Python window function);
`results.finalize` reads them. Both window kinds use it:

- count windows (`count_window.py`) keep the `values` fields with their per-tuple partials
  (order key and validity per tuple): a window is one run of its key's final tuples;
- time windows: `HolisticTimeWindows` wraps the pane-and-tree operator of the node's
  incremental part (`compiler.holistic.incremental_part`), which decides lateness, the
  watermark and which (window, key) fire, exactly as without holistic aggregates. Beside it
  this driver keeps, per (pane, key), the values of each `values` field: a tuple is kept
  when it contributes and is not late against the watermark from before its batch (the
  rule of the wrapped operator). A pane's values are sorted once by (key, value) when a
  window first reads the pane (again only if late-but-allowed tuples arrive after that),
  and a pane is freed once every window covering it has fired. For each result batch of the
  wrapped operator, the holistic columns are computed from the sorted runs of the window's
  panes and put between the incremental ones, in the node's aggregate order. The
  approximate functions keep a sketch per (pane, key) instead (`sketch_panes.SketchPanes`);
  a `values` field read only by them keeps no raw values.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from mangonel.aggregates.holistic import from_order_keys
from mangonel.compiler import physical as ph
from mangonel.compiler.holistic import (
    holistic_positions,
    sketch_parameters,
    windows_per_launch,
)
from mangonel.compiler.physical import AggregatePlan, StateField
from mangonel.errors import DataError
from mangonel.runtime.operators import pane_values
from mangonel.runtime.operators.base import PANE_META
from mangonel.runtime.operators.protocol import OperatorMetrics
from mangonel.runtime.operators.registry import StepKernels
from mangonel.runtime.operators.results import finalize, window_result_schema
from mangonel.runtime.operators.sketch_panes import SketchPanes
from mangonel.runtime.operators.snapshot import SNAPSHOT_FORMAT, SNAPSHOT_VERSION, pack, unpack


def evaluate(
    kernels: Any,  # noqa: ANN401 - the backend's kernels (`holistic_select`)
    plan: AggregatePlan,
    value_field: StateField,
    values: np.ndarray,
    runs: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    sorted_runs: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """(non-NULL count, value) per result row of one holistic aggregate over its rows'
    runs `(run_start, run_end, row_first, row_runs)` into `values` (order keys)."""
    holistic = plan.function.definition.holistic
    assert holistic is not None
    if plan.python is not None:  # the user's function over the sorted, decoded values
        floating = value_field.type.is_floating
        return kernels.python_window(plan.python, values, *runs, sorted_runs, floating)
    fraction = 0.0 if plan.fraction is None else plan.fraction
    n, lower, higher = kernels.holistic_select(
        values, *runs, holistic.evaluation, fraction, sorted_runs
    )
    if holistic.evaluation == "count_distinct":
        return n, lower
    floating = value_field.type.is_floating
    low = from_order_keys(lower, floating)
    if holistic.evaluation == "percentile_disc":
        return n, low
    # Spark's interpolation: position p * (n - 1) between its floor and ceiling
    high = from_order_keys(higher, floating).astype(np.float64)
    low = low.astype(np.float64)
    position = fraction * (np.maximum(n, 1) - 1).astype(np.float64)
    below = np.floor(position)
    above = np.ceil(position)
    with np.errstate(invalid="ignore"):
        mixed = (above - position) * low + (position - below) * high
    return n, np.where(above == below, low, mixed)


@dataclass
class _Pane:
    """One pane's values of one field: chunks as they arrived (key slot, order key), and
    once a window read it, the values sorted by (slot, value) with per-slot offsets."""

    chunks: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    sorted_values: np.ndarray | None = None
    offsets: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        held = sum(s.nbytes + v.nbytes for s, v in self.chunks)
        if self.sorted_values is not None and self.offsets is not None:
            held += self.sorted_values.nbytes + self.offsets.nbytes
        return held

    def raw(self, to_host: Any) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN401
        """(slots, order keys) of every value on the host, sorted ones first (`to_host`
        copies sorted values the GPU kernels keep on the device)."""
        slots, values = [], []
        if self.sorted_values is not None and self.offsets is not None:
            counts = np.diff(self.offsets)
            slots.append(np.repeat(np.arange(len(counts), dtype=np.int64), counts))
            values.append(np.asarray(to_host(self.sorted_values), np.int64))
        for chunk_slots, chunk_values in self.chunks:
            slots.append(chunk_slots)
            values.append(chunk_values)
        if not slots:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        return np.concatenate(slots), np.concatenate(values)


class HolisticTimeWindows:
    """Time windows with holistic aggregates (see the module docstring): the wrapped
    `TimeWindowOperator` of the incremental part, and the panes' values beside it."""

    stateful = True

    def __init__(
        self,
        node: ph.WindowAggregateExec,
        inner: Any,  # noqa: ANN401 - window.TimeWindowOperator (window.py imports this module)
        kernels: StepKernels,
    ) -> None:
        self.node = node
        self.inner = inner
        self.schema = window_result_schema(node)
        # the values are lifted, keyed and kept on the host (the `values` state has no CUDA
        # lift); sorting panes and selecting run on the holistic step's backend, whose
        # kernels keep sorted panes where they run (the GPU's on the device)
        self.host = kernels.kernels_of("cpu")
        assert node.holistic is not None
        self.kernels = kernels("holistic").holistic_for(node.holistic)
        self.spec = node.window
        self.pane_length = node.pane_length
        self.panes_per_window = node.panes_per_window
        self.panes_per_slide = node.panes_per_slide
        self.value_fields = tuple(f for f in node.fields if f.kind.holistic)
        # the holistic lift evaluates WHERE and the `values` arguments only
        self.values_lift = dataclasses.replace(node.lift, fields=self.value_fields)
        self.key_types = tuple(k.type for k in node.keys)
        self.keys = self.host.new_key_map(self.key_types)
        self.panes: dict[str, dict[int, _Pane]] = {f.name: {} for f in self.value_fields}
        self.incremental, self.holistic = holistic_positions(node)
        self.fields_by_name = {f.name: f for f in node.fields}
        approximate = {
            p: node.aggregates[p]
            for p in self.holistic
            if node.aggregates[p].function.definition.holistic.sketch
        }
        # sketches are built and merged on the host whatever the plan (SKETCHES_ON_CPU)
        self.sketches = SketchPanes(approximate, self.fields_by_name, self.host)
        # the `values` fields whose raw values an exact aggregate reads
        self.raw_fields = {
            node.aggregates[p].value_field for p in self.holistic if p not in approximate
        }

    # -- input ----------------------------------------------------------------------------

    def process(self, batch: pa.RecordBatch | pa.Table, input: int = 0) -> list[pa.RecordBatch]:
        conformed, _ = self.inner._input(batch)  # the wrapped operator reuses this object
        self._keep(conformed)
        return self._complete(self.inner.process(batch, input))

    def prefetch(self, batch: pa.RecordBatch) -> None:
        self.inner.prefetch(batch)

    def _keep(self, batch: pa.RecordBatch) -> None:
        """The values of the batch's contributing, not late tuples, into their panes."""
        kernels = self.host
        lifted = kernels.lift_tuples(self.values_lift, batch)
        if not lifted.rows:
            return
        panes = kernels.pane_ids(lifted, self.pane_length)
        include = lifted.contributes & ~self._late(panes, lifted.contributes)
        slots = kernels.to_host(self.keys.map_columns(lifted.keys, include))
        for value_field in self.value_fields:
            values, valid = (kernels.to_host(a) for a in lifted.partials[value_field.name])
            rows = np.flatnonzero(include & (valid != 0))
            self._store(value_field.name, panes[rows], slots[rows], values[rows])

    def _late(self, panes: np.ndarray, include: np.ndarray) -> np.ndarray:
        """Rows of panes that are late against the watermark from before the batch (the
        wrapped operator's rule): no window over them is still open."""
        watermark = self.inner.watermark
        if watermark is None:
            return np.zeros(len(panes), np.bool_)
        return self.host.late_tuples(
            panes, include, self.pane_length, self.spec.slide, self.spec.size, watermark
        )

    def _store(self, name: str, panes: np.ndarray, slots: np.ndarray, values: np.ndarray) -> None:
        """Kept values of the `values` field `name` (each with its pane and key slot) into
        the panes' sketches and, where an exact aggregate reads the field, raw values."""
        if not len(values):
            return
        order = np.argsort(panes, kind="stable")
        row_panes, slots, values = panes[order], slots[order], values[order]
        bounds = np.flatnonzero(np.diff(row_panes)) + 1
        starts = np.concatenate(([0], bounds))
        ends = np.concatenate((bounds, [len(row_panes)]))
        self.sketches.add(name, row_panes, slots, values, (starts, ends))
        if name not in self.raw_fields:
            return
        store = self.panes[name]
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
            pane = int(row_panes[start])
            store.setdefault(pane, _Pane()).chunks.append((slots[start:end], values[start:end]))

    # -- split form (Spark): stage 1 ships each (key, pane)'s values, stage 2 keeps them ----

    def preaggregate(self, batch: pa.RecordBatch | pa.Table) -> pa.RecordBatch:
        """Stage 1 (stateless): the wrapped operator's partial rows, one per (key, pane),
        with one packed column per `values` field (`pane_values`): that (key, pane)'s
        non-NULL values. Stateless: a key map of its own, no lateness (stage 2 decides)."""
        partials = self.inner.preaggregate(batch)
        conformed, _ = self.inner._lift_input(batch)
        host = self.host
        lifted = host.lift_tuples(self.values_lift, conformed)
        panes = np.asarray(host.to_host(host.pane_ids(lifted, self.pane_length)), np.int64)
        local = host.new_key_map(self.key_types)
        include = host.to_host(lifted.contributes)
        value_slots = host.to_host(local.map_columns(lifted.keys, include))
        row_keys = [partials.column(k.name) for k in self.node.keys]
        every = np.ones(partials.num_rows, np.bool_)
        row_slots = host.to_host(local.map_columns(row_keys, every))
        row_panes = np.asarray(partials.column(PANE_META)).astype(np.int64)
        columns, names = list(partials.columns), list(partials.schema.names)
        for value_field in self.value_fields:
            values, valid = (host.to_host(a) for a in lifted.partials[value_field.name])
            rows = np.flatnonzero(include & (valid != 0))
            counts, ordered = pane_values.align(
                row_slots, row_panes, value_slots[rows], panes[rows], values[rows]
            )
            columns.append(pane_values.pack(counts, ordered))
            names.append(value_field.name)
        return pa.RecordBatch.from_arrays(columns, names=names).replace_schema_metadata(
            partials.schema.metadata
        )

    def merge(self, partials: pa.RecordBatch) -> None:
        """Stage 2: partial rows of `preaggregate` (of any process): the incremental columns
        into the wrapped operator, the values of panes that are not late into the panes."""
        keys = [partials.column(k.name) for k in self.node.keys]
        panes = np.asarray(partials.column(PANE_META)).astype(np.int64)
        include = np.ones(partials.num_rows, np.bool_)
        include &= ~self._late(panes, include)  # before the wrapped merge: the same rule
        slots = self.host.to_host(self.keys.map_columns(keys, include))
        for value_field in self.value_fields:
            counts, values = pane_values.unpack(partials.column(value_field.name))
            values = values[np.repeat(include, counts)]
            counts = np.where(include, counts, 0)
            self._store(
                value_field.name, np.repeat(panes, counts), np.repeat(slots, counts), values
            )
        self.inner.merge(partials)

    # -- output ---------------------------------------------------------------------------

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        return self._complete(self.inner.on_watermark(watermark))

    def advance_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        return self._complete(self.inner.advance_watermark(watermark))

    def finish(self) -> list[pa.RecordBatch]:
        return self._complete(self.inner.finish())

    def _complete(self, batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
        """The wrapped operator's results with the holistic columns put in; then the panes
        no unfired window covers are freed."""
        out = [self._with_holistic(batch) for batch in batches]
        next_window = self.inner.next_window
        if next_window is not None:
            for store in self.panes.values():
                done = [q for q in store if q // self.panes_per_slide < next_window]
                for pane in done:
                    del store[pane]
            self.sketches.free(next_window, self.panes_per_slide)
        return out

    def _with_holistic(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        n_keys = len(self.node.keys)
        key_columns = [batch.column(i) for i in range(n_keys)]
        rows = batch.num_rows
        slots = self.host.to_host(
            self.keys.map_columns(key_columns, self.host.from_host(np.ones(rows, np.bool_)))
        ).astype(np.int64)
        starts = batch.column(n_keys).cast(pa.int64()).to_numpy(zero_copy_only=False)
        first_panes = starts // self.pane_length
        # rows in chunks of at most MAX_RUNS runs (rows x panes per window; one selection
        # launch on the GPU): the run arrays and the per-pane offsets of one chunk stay
        # bounded whatever a firing holds
        chunk = windows_per_launch(self.panes_per_window)
        pieces: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {p: [] for p in self.holistic}
        for start in range(0, rows, chunk):
            chunk_slots = slots[start : start + chunk]
            chunk_panes = first_panes[start : start + chunk]
            runs_of: dict[str, tuple[np.ndarray, tuple]] = {}
            for position in self.holistic:
                plan = self.node.aggregates[position]
                assert plan.value_field is not None
                if position in self.sketches.plans:
                    pieces[position].append(
                        self.sketches.answer(
                            position, chunk_slots, chunk_panes, self.panes_per_window
                        )
                    )
                    continue
                if plan.value_field not in runs_of:
                    runs_of[plan.value_field] = self._runs(
                        plan.value_field, chunk_slots, chunk_panes
                    )
                values, runs = runs_of[plan.value_field]
                value_field = self.fields_by_name[plan.value_field]
                pieces[position].append(
                    evaluate(self.kernels, plan, value_field, values, runs, True)
                )
        results = {
            position: (
                np.concatenate([n for n, _ in chunks]) if chunks else np.empty(0, np.int64),
                np.concatenate([v for _, v in chunks]) if chunks else np.empty(0, np.int64),
            )
            for position, chunks in pieces.items()
        }
        holistic_arrays = finalize(
            tuple(self.node.aggregates[p] for p in self.holistic),
            {},
            {i: results[p] for i, p in enumerate(self.holistic)},
        )
        columns: list[pa.Array] = [batch.column(i) for i in range(n_keys + 2)]
        by_position = dict(zip(self.holistic, holistic_arrays, strict=True))
        for number, position in enumerate(self.incremental):
            by_position[position] = batch.column(n_keys + 2 + number)
        columns += [by_position[p] for p in range(len(self.node.aggregates))]
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

    def _runs(self, name: str, slots: np.ndarray, first_panes: np.ndarray):
        """The flat sorted values of the panes the rows' windows cover, and per row one run
        per pane (`evaluate`'s runs)."""
        rows = len(slots)
        pw = self.panes_per_window
        if not rows:
            empty = np.empty(0, np.int64)
            return empty, (empty, empty, empty, empty)
        low = int(first_panes.min())
        span = int(first_panes.max()) - low + pw
        store = self.panes[name]
        # offsets of the rows' key slots only (`used`), not of every key
        used, compact = np.unique(slots, return_inverse=True)
        base = np.zeros(span, np.int64)
        starts = np.zeros((span, len(used)), np.int64)
        ends = np.zeros((span, len(used)), np.int64)
        pieces = []
        total = 0
        for index in range(span):
            pane = store.get(low + index)
            if pane is None:
                continue
            self._sort(pane)
            assert pane.sorted_values is not None and pane.offsets is not None
            last = len(pane.offsets) - 1  # keys first seen after the sort have no values here
            starts[index] = pane.offsets[np.minimum(used, last)]
            ends[index] = pane.offsets[np.minimum(used + 1, last)]
            base[index] = total
            total += len(pane.sorted_values)
            pieces.append(pane.sorted_values)
        values = self.kernels.concatenate(pieces)
        runs = self.kernels.pane_runs(
            base, starts, ends, compact.astype(np.int64), first_panes - low, pw
        )
        return values, runs

    def _sort(self, pane: _Pane) -> None:
        """Sort a pane's values by (slot, value) once (again after values arrived late)."""
        if pane.sorted_values is not None and not pane.chunks:
            return
        slots, values = pane.raw(self.kernels.to_host)
        pane.sorted_values, pane.offsets = self.kernels.sort_pane(slots, values, self.keys.n_slots)
        pane.chunks = []

    # -- state, metrics -------------------------------------------------------------------

    @property
    def watermark(self) -> int | None:
        return self.inner.watermark

    @property
    def next_window(self) -> int | None:
        return self.inner.next_window

    @property
    def max_event_time(self) -> int | None:
        return self.inner.max_event_time

    def add_rows_out(self, rows: int) -> None:
        self.inner.add_rows_out(rows)

    def state_bytes(self) -> int:
        held = sum(p.nbytes for store in self.panes.values() for p in store.values())
        return self.inner.state_bytes() + held + self.sketches.nbytes + self.keys.nbytes

    def metrics(self) -> OperatorMetrics:
        return dataclasses.replace(self.inner.metrics(), state_bytes=self.state_bytes())

    def snapshot(self) -> bytes:
        arrays = self.keys.to_arrays("holistic_keys.")
        arrays["inner"] = np.frombuffer(self.inner.snapshot(), np.uint8)
        arrays.update(self.sketches.to_arrays())
        for value_field in self.value_fields:
            store = self.panes[value_field.name]
            panes, slots, values = [], [], []
            for pane_id, pane in store.items():
                pane_slots, pane_values = pane.raw(self.kernels.to_host)
                panes.append(np.full(len(pane_slots), pane_id, np.int64))
                slots.append(pane_slots)
                values.append(pane_values)
            for part, pieces in (("pane", panes), ("slot", slots), ("value", values)):
                joined = np.concatenate(pieces) if pieces else np.empty(0, np.int64)
                arrays[f"{value_field.name}.{part}"] = joined
        header = {
            "format": SNAPSHOT_FORMAT,
            "version": SNAPSHOT_VERSION,
            "operator": "time+holistic",
            "fields": [f.name for f in self.value_fields],
            "sketches": self._sketch_names(),
        }
        return pack(header, arrays)

    def _sketch_names(self) -> list[str]:
        """The approximate aggregates by position and sketch (snapshots must match)."""
        return [
            f"{position}:{sketch_parameters(plan)}"
            for position, plan in self.sketches.plans.items()
        ]

    def restore(self, data: bytes) -> None:
        header, arrays = unpack(data)
        expected = [f.name for f in self.value_fields]
        if header.get("operator") != "time+holistic" or header.get("fields") != expected:
            raise DataError(
                f"snapshot does not match this query: it holds no holistic values of {expected}"
            )
        if header.get("sketches", []) != self._sketch_names():
            raise DataError(
                "snapshot does not match this query: it holds the sketches "
                f"{header.get('sketches', [])}, the query keeps {self._sketch_names()}"
            )
        self.inner.restore(arrays.pop("inner").tobytes())
        self.keys = self.host.key_map_from_arrays(self.key_types, arrays, "holistic_keys.")
        self.sketches.restore(arrays)
        for value_field in self.value_fields:
            name = value_field.name
            panes = arrays[f"{name}.pane"]
            slots = arrays[f"{name}.slot"]
            values = arrays[f"{name}.value"]
            store: dict[int, _Pane] = {}
            for pane_id in np.unique(panes).tolist():
                chosen = panes == pane_id
                store[int(pane_id)] = _Pane([(slots[chosen], values[chosen])])
            self.panes[name] = store
