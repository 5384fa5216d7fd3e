"""Holistic window functions (MEDIAN, PERCENTILE_*, COUNT DISTINCT, Python window functions)
in the window operators.

`holistic_evaluate.evaluate` turns runs of order keys (per result row, ranges of one flat
array) into each holistic aggregate's (non-NULL count, value) with the backend's
`holistic_select_later` kernel (`python_window` for a Python window function); `results.finalize`
reads them. Both window kinds use it:

- count windows (`count_window.py`) keep the `values` fields with their per-tuple partials
  (order key and validity per tuple): a window is one run of its key's final tuples;
- time windows: `HolisticTimeWindows` wraps the pane-and-tree operator of the node's
  incremental part (`compiler.holistic.incremental_part`), which decides lateness, the
  watermark and which (window, key) fire, exactly as without holistic aggregates. Beside it
  this driver keeps, per (pane, key), the values of each `values` field: a tuple is kept
  when it contributes and is not late against the watermark from before its batch (the
  rule of the wrapped operator). A pane's values are sorted once by (key, value) when a
  window first reads it (again only if late-but-allowed tuples come after), and freed once
  every window covering it has fired; exact percentiles over sliding windows on the CPU
  step a band per key pane by pane instead (`holistic_sliding`). Each result batch of the
  wrapped operator gets the holistic columns from the sorted runs of the window's panes,
  in the node's aggregate order. The approximate functions keep a sketch per (pane, key)
  (`sketch_panes.SketchPanes`); a `values` field read only by them keeps no raw values.

The firing is tuned online (`tuner.Tuner`, unless the plan's tuning is off): the result rows
evaluated together (GASSER's windows per launch) and, on the GPU, the selection form (a
thread, warp or block per window), from the measured seconds per value read between
firings. Neither changes a result; a restored query tunes anew.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from mangonel.aggregates.holistic import order_keys
from mangonel.compiler import physical as ph
from mangonel.compiler.holistic import (
    holistic_positions,
    sketch_parameters,
    timed_fields,
    windows_per_launch,
)
from mangonel.errors import DataError
from mangonel.runtime.operators import holistic_sliding as sliding
from mangonel.runtime.operators import pane_values
from mangonel.runtime.operators.base import PANE_META
from mangonel.runtime.operators.holistic_evaluate import evaluate_later
from mangonel.runtime.operators.holistic_firing import firing_knobs, in_row_order, sketch_answers
from mangonel.runtime.operators.holistic_pane import HeldPane, PaneSpan, pane_span, sort_panes
from mangonel.runtime.operators.protocol import OperatorMetrics
from mangonel.runtime.operators.registry import StepKernels
from mangonel.runtime.operators.results import finalize, window_result_schema
from mangonel.runtime.operators.sketch_panes import SketchPanes
from mangonel.runtime.operators.snapshot import SNAPSHOT_FORMAT, SNAPSHOT_VERSION, pack, unpack
from mangonel.runtime.operators.tuner import Knob, Tuner, TunerMetrics


def new_tuner(knobs: list[Knob]) -> Tuner:
    """The tuner of a holistic firing (tests replace it with a faster-moving one)."""
    return Tuner(knobs)


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
        # the wrapped operator judges lateness: its late rows are the query's
        self.late_sinks = inner.late_sinks
        self.late_rows = inner.late_rows  # Spark's late rows take the wrapped verdict (late.py)
        self.schema = window_result_schema(node)
        # the values are lifted, keyed, grouped by pane, sorted and selected on the
        # holistic step's backend (on the GPU they stay on the device), and so are the
        # sketches built, merged and read (the GPU keeps HLL registers; a plan with a GK
        # summary places the step on the CPU: `compiler.holistic.holistic_cpu_reason`)
        self.lifting = kernels("holistic")
        # the split form (Spark) lifts stage 1's values and judges stage 2's partial rows
        # late on the host: both cross the process boundary through it
        self.host = kernels.kernels_of("cpu")
        assert node.holistic is not None
        self.kernels = self.lifting.holistic_for(node.holistic)
        self._select_kernels: dict[str | None, Any] = {node.holistic.gpu_form: self.kernels}
        self.spec = node.window
        self.pane_length = node.pane_length
        self.panes_per_window = node.panes_per_window
        self.panes_per_slide = node.panes_per_slide
        self.value_fields = tuple(f for f in node.fields if f.kind.holistic)
        # the holistic lift evaluates WHERE and the `values` arguments only
        self.values_lift = dataclasses.replace(node.lift, fields=self.value_fields)
        self.key_types = tuple(k.type for k in node.keys)
        self.keys = self.lifting.new_key_map(self.key_types)
        self.panes: dict[str, dict[int, HeldPane]] = {f.name: {} for f in self.value_fields}
        self.incremental, self.holistic = holistic_positions(node)
        self.fields_by_name = {f.name: f for f in node.fields}
        approximate = {
            p: node.aggregates[p]
            for p in self.holistic
            if node.aggregates[p].sketch  # an APPROX_PERCENTILE may be answered exactly
        }
        self.sketches = SketchPanes(
            approximate, self.fields_by_name, self.lifting, node.panes_per_window
        )
        # the `values` fields whose raw values an exact aggregate reads
        self.raw_fields = {
            node.aggregates[p].value_field for p in self.holistic if p not in approximate
        }
        # ... and those whose event times too (a Python function `with_timestamps`)
        self.timed_fields = timed_fields(node)
        # exact percentiles over sliding windows by per-key bands stepped pane by pane where
        # the kernels have them (`holistic_sliding`): a state per aggregate, the panes freed
        # one slide ago (stepped out of a key's next window), the generation of the panes'
        # changes (`HeldPane.changed`: a key's state made before a change is stale)
        exact = [p for p in self.holistic if p not in approximate]
        self.sliding = sliding.SlidingStates(node, exact, self.timed_fields, self.kernels)
        self.sliding.group_on_arrival({f for f in self.raw_fields if not self.sketches.reads(f)})
        self.clock = time.perf_counter
        # the firing's knobs: the plan's values, tuned online unless tuning is off or fixed
        self.planned = {"windows_per_launch": self._planned_chunk()}
        if node.holistic.gpu_form is not None:
            self.planned["gpu_form"] = node.holistic.gpu_form
        # the knobs the tuner may move (none where nothing is tuned or no raw values)
        knobs = firing_knobs(
            node.holistic, self.planned, bool(self.raw_fields), node.panes_per_window
        )
        self.tuner = new_tuner(knobs) if knobs else None
        if self.tuner is not None:
            self.clock = self.tuner.clock
        # the wrapped operator's row decisions serve the values where it runs on the holistic
        # step's backend (`_keep_decided`, `_slots_of_inner`): host arrays on the CPU, device
        # arrays on the GPU. A backend with `lift_arguments` (the CPU) hands raw host values,
        # which only its own holistic kernels take; one without lifts them (`lift_tuples`)
        self.lifts_arguments = hasattr(self.lifting, "lift_arguments")
        self.shares_rows = (
            inner.shares_rows
            and self.lifting is inner.kernels
            and (self.kernels is self.lifting or not self.lifts_arguments)
        )
        self._slot_of_inner = np.empty(0, np.int64)
        self._same_slots = True  # `_slot_of_inner` is the identity
        # the exact functions select over a firing's rows key by key where the holistic
        # kernels say so (`key_major_rows`: the CPU's, whose selection reads the runs from
        # memory: a window's runs are its key's in ~100 panes, spread over the span)
        self.key_major = bool(getattr(self.kernels, "key_major_rows", False))
        # input batches since the last firing that evaluated windows: the batches it served
        # (several where the wrapped operator combines firings, `batches_per_firing`)
        self._batches_unfired = 0
        self._waited: list[pa.RecordBatch] = []  # completed firings a raising `process` kept

    def _planned_chunk(self) -> int:
        assert self.node.holistic is not None
        planned = self.node.holistic.windows_per_launch
        return planned if planned is not None else windows_per_launch(self.panes_per_window)

    def _select_kernels_for(self, form: str | None) -> Any:  # noqa: ANN401
        """The holistic kernels whose selection runs in `form` (one object per form: the GPU
        compiles each form once; the CPU's are the same whatever the form)."""
        found = self._select_kernels.get(form)
        if found is None:
            assert self.node.holistic is not None
            plan = dataclasses.replace(self.node.holistic, gpu_form=form)
            found = self._select_kernels[form] = self.lifting.holistic_for(plan)
        return found

    @property
    def batches_per_firing(self) -> int:
        """How many batches' firings the wrapped operator may combine into one (the runner
        raises it over input held in memory: `TimeWindowOperator._firing_can_wait`; the same
        rule keeps the holistic columns those of per-batch firings)."""
        return self.inner.batches_per_firing

    @batches_per_firing.setter
    def batches_per_firing(self, batches: int) -> None:
        self.inner.batches_per_firing = batches

    # -- input ----------------------------------------------------------------------------

    def process(self, batch: pa.RecordBatch | pa.Table, input: int = 0) -> list[pa.RecordBatch]:
        conformed, _ = self.inner._input(batch)  # the wrapped operator reuses this object
        # firings that waited for this batch and that its rows could reach: completed before
        # its values are kept (they must not read them), and kept across an error below
        self._waited += self._complete(*self._fired(self.inner.fire_waiting_before, batch))
        out = self._process(batch, conformed, input)
        waited, self._waited = self._waited, []
        return waited + out

    def _process(
        self, batch: pa.RecordBatch | pa.Table, conformed: pa.RecordBatch, input: int
    ) -> list[pa.RecordBatch]:
        if self.tuner is not None:
            self.tuner.observe_input(conformed.num_rows)
        # the batch's panes lie in those of its event times' extremes (known on the host: no
        # device read to find them)
        extremes = self.inner._event_time_extremes(batch)
        pane_range = (
            None
            if extremes is None
            else (extremes[0] // self.pane_length, extremes[1] // self.pane_length)
        )
        self._batches_unfired += 1
        if not self.shares_rows:
            self._keep(conformed, pane_range)
            return self._complete(*self._fired(self.inner.process, batch, input))
        # the wrapped operator's decisions (panes, lateness against the watermark from before
        # the batch, key slots) serve the values: the batch is keyed once; its firings are
        # completed once the values are kept
        self.inner.shared_rows = decided = []
        try:
            fired, recorded = self._fired(self.inner.process, batch, input)
        finally:
            self.inner.shared_rows = None
        self._keep_decided(conformed, decided, pane_range)
        return self._complete(fired, recorded)

    def _fired(
        self, call: Callable[..., list[pa.RecordBatch]], *arguments: Any
    ) -> tuple[list[pa.RecordBatch], list[tuple[pa.RecordBatch, np.ndarray]]]:
        """The wrapped operator's result batches of `call(*arguments)`, and the key slots of
        their rows as it recorded them (`TimeWindowOperator.result_slots`): the firing keys
        its rows from those, not by mapping the key columns again."""
        self.inner.result_slots = recorded = []
        try:
            return call(*arguments), recorded
        finally:
            self.inner.result_slots = None

    @property
    def prefetch_depth(self) -> int:
        return self.inner.prefetch_depth

    def prefetch(self, batch: pa.RecordBatch) -> None:
        self.inner.prefetch(batch)

    def _keep(self, batch: pa.RecordBatch, pane_range: tuple[int, int] | None = None) -> None:
        """The values of the batch's contributing, not late tuples, into their panes;
        `pane_range`: (first, last) pane every such tuple lies in, where known."""
        kernels = self.lifting
        # the key words come from the lift (on the GPU: built on the device from the staged
        # columns, so the key columns are never encoded on the host per batch)
        lifted = kernels.lift_tuples(self.values_lift, batch, key_words=True)
        if not lifted.rows:
            return
        panes = kernels.pane_ids(lifted, self.pane_length)
        include = self._not_late(kernels, panes, lifted.contributes)
        slots = self.keys.map_columns(lifted.keys, include, lifted.key_words)
        self._store_lifted(lifted, panes, slots, include, pane_range)

    def _store_lifted(
        self,
        lifted,  # noqa: ANN001 - the kernels' LiftedTuples of the values lift
        panes: np.ndarray,
        slots: np.ndarray,
        include: np.ndarray,
        pane_range: tuple[int, int] | None,
        rows: slice | None = None,
    ) -> None:
        """Each value field's non-NULL values of the included rows into their panes; `rows`:
        the lifted rows `panes`, `slots` and `include` are of (all where None)."""
        event_times = lifted.event_time if self.timed_fields else None
        for value_field in self.value_fields:
            values, valid = lifted.partials[value_field.name]
            times = event_times if value_field.name in self.timed_fields else None
            if rows is not None:
                values, valid = values[rows], valid[rows]
                times = None if times is None else times[rows]
            keep = include & (valid != 0)
            self._store(value_field.name, panes, slots, values, keep, times, pane_range)

    def _keep_decided(
        self,
        batch: pa.RecordBatch,
        decided: list[tuple[Any, Any, Any]],
        pane_range: tuple[int, int] | None,
    ) -> None:
        """`_keep` from the wrapped operator's per-row decisions (`shared_rows`: one entry per
        piece of the batch it processed, in row order, on the holistic step's backend): only
        the values are lifted here. Their include flags already hold WHERE, the event time
        and lateness, so no key is probed again. On the CPU only the arguments are evaluated
        (`lift_arguments`, no event time, predicate or key pass); a field only sketches read
        keeps its values as they are (the sketch kernels hash and normalise them: no order
        keys to compute and hold), the others as order keys. On the GPU the values lift
        reads the columns the fused pass staged (one launch, the batch never staged twice)."""
        if not batch.num_rows:
            return
        if sum(len(panes) for panes, _, _ in decided) != batch.num_rows:
            raise AssertionError("the wrapped operator decided other rows than the batch's")
        # event times kept beside the values (a Python function `with_timestamps`), or kernels
        # without `lift_arguments` (the GPU: its values lift reads the columns the fused pass
        # staged): the full values lift
        full_lift = self.timed_fields or not self.lifts_arguments
        lifted = (
            self.lifting.lift_tuples(self.values_lift, batch, extremes=False) if full_lift else None
        )
        arguments = (
            {} if lifted is not None else self.lifting.lift_arguments(self.values_lift, batch)
        )
        # the bands' fields are keyed in their split (`SlidingStates.store`)
        grouped = self.sliding.grouped
        raw = {
            f.name: f.name not in self.raw_fields or f.name in grouped for f in self.value_fields
        }
        values_of = {}
        keys_of: dict[int, np.ndarray] = {}  # fields of one argument: its order keys once
        for name, (values, valid) in arguments.items():
            if not raw[name]:
                if id(values) not in keys_of:
                    keys_of[id(values)] = order_keys(values)
                values = keys_of[id(values)]
            values_of[name] = (values, valid)
        # piece by piece (a run's first batch comes in two): joining the pieces' decisions
        # would copy every row's pane, flag and slot into fresh memory
        start = 0
        for panes, include, inner_slots in decided:
            rows = slice(start, start + len(panes))
            slots = self._slots_of_inner(inner_slots)
            if lifted is not None:
                self._store_lifted(lifted, panes, slots, include, pane_range, rows)
            for name, (values, valid) in values_of.items():
                keep = include if valid is None else include & valid[rows]
                self._store(name, panes, slots, values[rows], keep, None, pane_range, raw[name])
            start = rows.stop

    def _slots_of_inner(self, inner_slots: Any) -> Any:  # noqa: ANN401 - host or device
        """This driver's key slots of the wrapped operator's (-1 stays -1), on the holistic
        step's backend. Keys the wrapped
        map holds beyond those seen so far are mapped here in its slot order (its first-seen
        order, the order `_keep` maps them in), so the numbering is `_keep`'s."""
        inner_keys = self.inner.keys
        known = len(self._slot_of_inner)
        if inner_keys.n_slots > known:
            new = np.arange(known, inner_keys.n_slots, dtype=np.int64)
            every = self.lifting.from_host(np.ones(len(new), np.bool_))
            mapped = self.lifting.to_host(self.keys.map_columns(inner_keys.decode(new), every))
            self._slot_of_inner = np.concatenate((self._slot_of_inner, mapped.astype(np.int64)))
            self._same_slots = bool((self._slot_of_inner == np.arange(inner_keys.n_slots)).all())
        if self._same_slots:  # the usual case: both maps met the keys in one order
            return inner_slots
        lookup = np.append(self._slot_of_inner, -1)  # index -1: not merged
        if isinstance(inner_slots, np.ndarray):  # a firing's recorded slots, or the CPU's
            return lookup[inner_slots]
        return self.lifting.from_host(lookup)[inner_slots]

    def _not_late(self, kernels: Any, panes: Any, include: Any) -> Any:  # noqa: ANN401
        """`include` less the rows of panes that are late against the watermark from before
        the batch (the wrapped operator's rule: no window over them is still open), on
        `kernels`' backend."""
        watermark = self.inner.watermark
        if watermark is None:
            return include
        slide, size = self.spec.outer_shape
        late = kernels.late_tuples(panes, include, self.pane_length, slide, size, watermark)
        return include & ~late

    def _store(
        self,
        name: str,
        panes: Any,  # noqa: ANN401 - host or the holistic backend's arrays, one per row
        slots: Any,  # noqa: ANN401
        values: Any,  # noqa: ANN401
        keep: Any,  # noqa: ANN401
        times: Any,  # noqa: ANN401 - event times where `name` is timed, else None
        pane_range: tuple[int, int] | None,
        raw: bool = False,
    ) -> None:
        """The kept rows' values of the `values` field `name` (each with its pane, key slot
        and, for a timed field, event time) into the panes' sketches and, where an exact
        aggregate reads the field, raw values, grouped by pane on the holistic backend.
        `pane_range`: (first, last) pane of every kept row where the host knows it (the GPU
        then finds the panes' bounds in one device read). `raw`: the values are the
        argument's (host arrays; a field only sketches read, `_keep_decided`), not order
        keys."""
        if name in self.sliding.grouped and self.sliding.store(
            self.panes[name], panes, slots, values, keep, self.keys.n_slots, pane_range
        ):
            return  # grouped by (pane, slot) as the bands read them
        if name not in self.raw_fields and self.sketches.add_rows(
            name, panes, slots, values, keep, self.keys.n_slots, pane_range, raw
        ):
            return  # sketches only, built from the batch's rows without a pane split
        if raw:  # the split keeps order keys (the chunks' sketch builds read them)
            values = order_keys(values)
        pane_ids, chunks, presorted = self.kernels.split_panes(
            panes,
            slots,
            values,
            keep,
            times,
            # raw values are kept sorted by value; sketches need their slots' runs only
            by_value=name in self.raw_fields,
            pane_range=pane_range,
            n_slots=self.keys.n_slots,
        )
        if not chunks:
            return
        if self.sketches.reads(name):
            self.sketches.add(name, pane_ids, chunks, presorted, self.keys.n_slots)
        if name not in self.raw_fields:
            return
        store = self.panes[name]
        for pane, chunk in zip(pane_ids, chunks, strict=True):
            held = store.setdefault(pane, HeldPane())
            held.add(chunk, presorted)
            held.changed = self.sliding.generation

    # -- split form (Spark): stage 1 ships each (key, pane)'s values, stage 2 keeps them ----

    def preaggregate(self, batch: pa.RecordBatch | pa.Table) -> pa.RecordBatch:
        """Stage 1 (stateless): the wrapped operator's partial rows, one per (key, pane),
        with one packed column per `values` field (`pane_values`): that (key, pane)'s
        non-NULL values, and for a timed field (a Python function `with_timestamps` reads
        it) their event times in the same order (`pane_values.times_column`). Stateless: a
        key map of its own, no lateness (stage 2 decides). The values are lifted on the host
        (they leave the process through it); the wrapped operator pre-aggregates where its
        `preaggregate` step is placed (on a GPU executor, the device)."""
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
        event_times = host.to_host(lifted.event_time) if self.timed_fields else None
        columns, names = list(partials.columns), list(partials.schema.names)
        for value_field in self.value_fields:
            values, valid = (host.to_host(a) for a in lifted.partials[value_field.name])
            rows = np.flatnonzero(include & (valid != 0))
            counts, order = pane_values.align(row_slots, row_panes, value_slots[rows], panes[rows])
            chosen = rows[order]
            columns.append(pane_values.pack(counts, values[chosen]))
            names.append(value_field.name)
            if event_times is not None and value_field.name in self.timed_fields:
                columns.append(pane_values.pack(counts, event_times[chosen]))
                names.append(pane_values.times_column(value_field.name))
        return pa.RecordBatch.from_arrays(columns, names=names).replace_schema_metadata(
            partials.schema.metadata
        )

    def merge(self, partials: pa.RecordBatch) -> None:
        """Stage 2: partial rows of `preaggregate` (of any process): the incremental columns
        into the wrapped operator, the values (and a timed field's event times) of panes
        that are not late into the panes, on the holistic step's backend."""
        keys = [partials.column(k.name) for k in self.node.keys]
        panes = np.asarray(partials.column(PANE_META)).astype(np.int64)
        # before the wrapped merge, which moves the watermark: the same rule as its own
        include = self._not_late(self.host, panes, np.ones(partials.num_rows, np.bool_))
        lifting = self.lifting
        slots = lifting.to_host(self.keys.map_columns(keys, lifting.from_host(include)))
        for value_field in self.value_fields:
            name = value_field.name
            counts, values = pane_values.unpack(partials.column(name))
            times = None
            if name in self.timed_fields:
                time_counts, times = pane_values.unpack(
                    partials.column(pane_values.times_column(name))
                )
                if not np.array_equal(time_counts, counts):
                    raise DataError(f"the event times of {name} do not match its values")
            keep = np.repeat(include, counts)
            pane_range = (int(panes.min()), int(panes.max())) if len(panes) else None
            self._store(
                name,
                np.repeat(panes, counts),
                np.repeat(slots, counts),
                values,
                keep,
                times,
                pane_range,
            )
        self.inner.merge(partials)

    # -- output ---------------------------------------------------------------------------

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        return self._complete(*self._fired(self.inner.on_watermark, watermark))

    def advance_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        return self._complete(*self._fired(self.inner.advance_watermark, watermark))

    def finish(self) -> list[pa.RecordBatch]:
        waited, self._waited = self._waited, []
        return waited + self._complete(*self._fired(self.inner.finish))

    def _complete(
        self,
        batches: list[pa.RecordBatch],
        recorded: list[tuple[pa.RecordBatch, np.ndarray]] = (),  # type: ignore[assignment]
    ) -> list[pa.RecordBatch]:
        """The wrapped operator's results with the holistic columns put in; then the panes
        no unfired window covers are freed. `recorded`: (result batch, its rows' key slots
        in the wrapped operator's numbering) where it recorded them (`_fired`)."""
        config = self.planned if self.tuner is None else {**self.planned, **self.tuner.config}
        select = self._select_kernels_for(config.get("gpu_form"))
        chunk = int(config["windows_per_launch"])
        started = self.clock()
        keyed = [self._result_keys(batch, recorded) for batch in batches]
        sketched = sketch_answers(
            self.sketches,
            [p for p in self.holistic if p in self.sketches.plans],
            keyed,
            self.panes_per_window,
        )
        out, units = [], 0
        for batch, (slots, first_panes), answers in zip(batches, keyed, sketched, strict=True):
            completed, work = self._with_holistic(batch, slots, first_panes, answers, chunk, select)
            out.append(completed)
            units += work
        if units:
            if self.tuner is not None:
                # the selection ends with its results' copy to the host: the time is the
                # work's; a combined firing served several batches (the tuner's work per
                # batch stays comparable)
                batches = max(1, self._batches_unfired)
                self.tuner.observe(units, self.clock() - started, batches)
            self._batches_unfired = 0
        next_window = self.inner.next_window
        if next_window is not None:
            for name, store in self.panes.items():
                done = [q for q in store if q // self.panes_per_slide < next_window]
                freed = {pane: store.pop(pane) for pane in done}
                self.sliding.retire(name, freed, next_window, self.panes_per_slide)
            self.sketches.free(next_window, self.panes_per_slide)
        return out

    def _result_keys(
        self, batch: pa.RecordBatch, recorded: list[tuple[pa.RecordBatch, np.ndarray]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """(this driver's key slot, first pane of the window) of each row of a result batch
        (host int64). The slots are the wrapped operator's, renumbered (`_slots_of_inner`:
        nothing to map once both maps hold the keys), where it recorded them; else (an
        operator that records none) the key columns are mapped here."""
        n_keys = len(self.node.keys)
        starts = batch.column(n_keys).cast(pa.int64()).to_numpy(zero_copy_only=False)
        first_panes = starts // self.pane_length
        for emitted, inner_slots in recorded:
            if emitted is batch:
                slots = self._slots_of_inner(inner_slots)
                return np.asarray(self.lifting.to_host(slots), np.int64), first_panes
        key_columns = [batch.column(i) for i in range(n_keys)]
        include = self.lifting.from_host(np.ones(batch.num_rows, np.bool_))
        slots = self.lifting.to_host(self.keys.map_columns(key_columns, include))
        return slots.astype(np.int64), first_panes

    def _with_holistic(
        self,
        batch: pa.RecordBatch,
        slots: np.ndarray,
        first_panes: np.ndarray,
        sketched: dict[int, tuple[np.ndarray, np.ndarray]],
        chunk: int,
        select: Any,  # noqa: ANN401 - the holistic kernels of the selection form
    ) -> tuple[pa.RecordBatch, int]:
        """The batch with its holistic columns put in, and the work done (result rows plus
        the values the first holistic aggregate read: the tuner's units). `slots`,
        `first_panes`: its rows' (`_result_keys`); `sketched`: the approximate aggregates'
        answers of its rows (`holistic_firing.sketch_answers`)."""
        n_keys = len(self.node.keys)
        rows = batch.num_rows
        # rows in chunks of `chunk` rows, at most MAX_RUNS runs (rows x panes per window; one
        # selection launch on the GPU) unless the user fixed more: the run arrays and the
        # per-pane offsets of one chunk stay bounded whatever a firing holds
        pieces: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {p: [] for p in self.holistic}
        answers = self.sliding.answers(self.panes, slots, first_panes, self.keys.n_slots)
        for position, answer in [*answers.items(), *sketched.items()]:
            pieces[position].append(answer)
        # each field's span of sorted panes, concatenated once for the chunks it covers
        # (a firing's chunks read overlapping panes)
        spans: dict[str, PaneSpan] = {}
        reach = int(first_panes.max()) + self.panes_per_window if rows else 0
        for start in range(0, rows, chunk):
            chunk_slots = slots[start : start + chunk]
            chunk_panes = first_panes[start : start + chunk]
            runs_of: dict[str, tuple[np.ndarray, tuple]] = {}
            order = inverse = None  # the exact functions' row order, where key-major
            for position in self.holistic:
                plan = self.node.aggregates[position]
                assert plan.value_field is not None
                if position in self.sliding or position in self.sketches.plans:
                    continue  # every row at once, above
                if order is None and self.key_major and len(chunk_slots) > 1:
                    # rows of one key next to each other: consecutive windows of a key
                    # share all runs but one, so the selection reads them from cache
                    order = np.lexsort((chunk_panes, chunk_slots))
                    inverse = np.empty_like(order)
                    inverse[order] = np.arange(len(order))
                rows_slots = chunk_slots if order is None else chunk_slots[order]
                rows_panes = chunk_panes if order is None else chunk_panes[order]
                if plan.value_field not in runs_of:
                    runs_of[plan.value_field] = self._runs(
                        plan.value_field, rows_slots, rows_panes, spans, reach
                    )
                values, runs, times = runs_of[plan.value_field]
                value_field = self.fields_by_name[plan.value_field]
                # read once every chunk is launched (`evaluate_later`): the host builds the
                # next chunk's runs while the device selects over this one's
                pieces[position].append(
                    in_row_order(
                        evaluate_later(select, plan, value_field, values, runs, True, times),
                        inverse,
                    )
                )
        results = {}
        for position, chunks in pieces.items():
            found = [chunk() if callable(chunk) else chunk for chunk in chunks]
            if len(found) == 1:  # one piece (sketches, bands, a one-chunk firing): no copy
                results[position] = found[0]
                continue
            results[position] = (
                np.concatenate([n for n, _ in found]) if found else np.empty(0, np.int64),
                np.concatenate([v for _, v in found]) if found else np.empty(0, np.int64),
            )
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
        values_read = int(results[self.holistic[0]][0].sum()) if self.holistic else 0
        return pa.RecordBatch.from_arrays(columns, schema=self.schema), rows + values_read

    def _runs(
        self,
        name: str,
        slots: np.ndarray,
        first_panes: np.ndarray,
        spans: dict[str, PaneSpan],
        reach: int,
    ):
        """The flat sorted values of the panes the rows' windows cover, per row one run per
        pane (`evaluate`'s runs), and the values' event times where the field is timed
        (else None). The runs are built on the holistic backend (`window_runs`: on the GPU
        from the panes' device offsets) over the field's span in `spans`, made anew only
        where the rows need a pane outside it (then up to `reach`, the end of the firing's
        last window, within `holistic_pane.MAX_SPAN_VALUES` values)."""
        rows = len(slots)
        pw = self.panes_per_window
        timed = name in self.timed_fields
        if not rows:
            empty = np.empty(0, np.int64)
            return empty, (empty, empty, empty, empty), (empty if timed else None)
        low = int(first_panes.min())
        needed = int(first_panes.max()) + pw
        span = spans.get(name)
        if span is None or low < span.low or needed > span.end:
            span = spans[name] = pane_span(
                self.kernels,
                self.panes[name],
                (low, needed, max(needed, reach)),
                timed,
                lambda panes: sort_panes(self.kernels, panes, timed, self.keys.n_slots),
            )
        runs = self.kernels.window_runs(
            span.offsets,
            span.offset_first,
            span.offset_last,
            span.base,
            slots,
            first_panes - span.low,
            pw,
        )
        return span.values, runs, span.times

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
        held += self.sliding.nbytes
        return self.inner.state_bytes() + held + self.sketches.nbytes + self.keys.nbytes

    def metrics(self) -> OperatorMetrics:
        return dataclasses.replace(
            self.inner.metrics(), state_bytes=self.state_bytes(), tuning=self.tuning_metrics()
        )

    def tuning_metrics(self) -> TunerMetrics | None:
        """The tuner's state; where nothing is tuned, the firing's fixed configuration with
        why ("off": the plan's tuning is off, "fixed": the user pinned every knob); None
        where the firing has no raw values to select over (sketches only)."""
        if self.tuner is not None:
            return self.tuner.metrics()
        plan = self.node.holistic
        assert plan is not None
        if not self.raw_fields or "sorted-panes" not in plan.strategy.split("+"):
            return None
        return TunerMetrics("off" if plan.tuning == "off" else "fixed", dict(self.planned))

    def snapshot(self) -> bytes:
        arrays = self.keys.to_arrays("holistic_keys.")
        arrays["inner"] = np.frombuffer(self.inner.snapshot(), np.uint8)
        arrays.update(self.sketches.to_arrays())
        for value_field in self.value_fields:
            store = self.panes[value_field.name]
            timed = value_field.name in self.timed_fields
            panes, slots, values, times = [], [], [], []
            for pane_id, pane in store.items():
                pane_slots, pane_values, pane_times = (
                    self.kernels.to_host(a) for a in pane.raw(self.kernels, timed)
                )
                panes.append(np.full(len(pane_slots), pane_id, np.int64))
                slots.append(pane_slots)
                values.append(pane_values)
                times.append(pane_times)
            parts = [("pane", panes), ("slot", slots), ("value", values)]
            if timed:
                parts.append(("time", times))
            for part, pieces in parts:
                joined = np.concatenate(pieces) if pieces else np.empty(0, np.int64)
                arrays[f"{value_field.name}.{part}"] = joined
        header = {
            "format": SNAPSHOT_FORMAT,
            "version": SNAPSHOT_VERSION,
            "operator": "time+holistic",
            "fields": [f.name for f in self.value_fields],
            "timed": sorted(self.timed_fields),
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
        if header.get("timed", []) != sorted(self.timed_fields):
            raise DataError(
                "snapshot does not match this query: it holds event times of the values of "
                f"{header.get('timed', [])}, the query reads those of {sorted(self.timed_fields)}"
            )
        if header.get("sketches", []) != self._sketch_names():
            held = header.get("sketches", [])
            # APPROX_PERCENTILE's path is the planner's choice (`percentile_paths`): a
            # snapshot of the other path restores under the session option that planned it
            paths = any("GK(" in name for name in [*held, *self._sketch_names()])
            raise DataError(
                "snapshot does not match this query: it holds the sketches "
                f"{held}, the query keeps {self._sketch_names()}"
                + (
                    "; plan the query with the approx_percentile= option its snapshot was "
                    "taken under ('sketch' keeps GK summaries, 'exact' raw values)"
                    if paths
                    else ""
                )
            )
        self.inner.restore(arrays.pop("inner").tobytes())
        self.keys = self.lifting.key_map_from_arrays(self.key_types, arrays, "holistic_keys.")
        self._slot_of_inner = np.empty(0, np.int64)  # mapped again from the restored maps
        self._same_slots = True
        self.sketches.restore(arrays)
        self.sliding.clear()  # slots renumbered, panes replaced
        for value_field in self.value_fields:
            name = value_field.name
            panes = arrays[f"{name}.pane"]
            slots = arrays[f"{name}.slot"]
            values = arrays[f"{name}.value"]
            times = arrays.get(f"{name}.time")
            store: dict[int, HeldPane] = {}
            for pane_id in np.unique(panes).tolist():
                chosen = panes == pane_id
                chunk_times = None if times is None else times[chosen]
                chunk = (slots[chosen], values[chosen], chunk_times)
                store[int(pane_id)] = HeldPane([chunk], presorted=False)
            self.panes[name] = store
