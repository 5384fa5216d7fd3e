"""What the window operators share: input conformance, watermark, metrics, the partial
wire format of the split (Spark) form, the snapshot header, and the operator protocol's
entries (`process`, `on_watermark`, `finish`; see protocol.py); and what the two that keep
per-tuple partials (count and session windows, `TupleWindowOperator`) share: their set-up,
the lift and the late judgement of a batch."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from mangonel.compiler import physical as ph
from mangonel.compiler.physical import StateField
from mangonel.errors import DataError
from mangonel.runtime.operators.conform import INT64_MIN, BatchConformer, event_time_range
from mangonel.runtime.operators.kernels import Staging
from mangonel.runtime.operators.late_rows import LateRows
from mangonel.runtime.operators.protocol import OperatorMetrics
from mangonel.runtime.operators.registry import StepKernels
from mangonel.runtime.operators.results import window_result_batch, window_result_schema
from mangonel.runtime.operators.snapshot import SNAPSHOT_FORMAT, SNAPSHOT_VERSION

PANE_META = "__pane"
EVENT_TIME_META = "__ts"


def as_record_batch(batch: pa.RecordBatch | pa.Table) -> pa.RecordBatch:
    if isinstance(batch, pa.Table):
        batch = batch.combine_chunks()
        return pa.RecordBatch.from_arrays(
            [column.combine_chunks() for column in batch.columns], schema=batch.schema
        )
    if not isinstance(batch, pa.RecordBatch):
        raise DataError(f"expected a pyarrow RecordBatch or Table, got {type(batch).__name__}")
    return batch


def field_arrays(fields: tuple[StateField, ...]) -> list[tuple[str, int]]:
    """(name, number of arrays) of every state field (one array per part of its kind)."""
    return [(f.name, len(f.kind.parts)) for f in fields]


def field_columns(fields: tuple[StateField, ...]) -> dict[str, np.ndarray]:
    """An empty array per part of every field (`<name>.<part>`), of the field's dtype."""
    return {
        f"{field.name}.{part}": np.empty(0, ph.field_dtype(field))
        for field in fields
        for part in range(len(field.kind.parts))
    }


def partial_column_name(field: StateField, part: int) -> str:
    """`<name>` for a kind of one part, else `<name>.<part name>` (MOMENTS: n, mean, m2)."""
    names = field.kind.parts
    return field.name if len(names) == 1 else f"{field.name}.{names[part]}"


class _Admitted:
    """A batch given to an operator: its columns in the declared types, the kernels'
    staging of them (`Staging`, or None), and, once asked for, the batch conformed
    (out-of-range event times made NULL, judged by the staging's extremes where it measured
    them) with those extremes."""

    def __init__(
        self, given: pa.RecordBatch | pa.Table, typed: pa.RecordBatch, staging: Staging | None
    ) -> None:
        self.given = given
        self.typed = typed
        self.staging = staging
        self.extremes: tuple[int, int] | None = None
        self._conformed: tuple[pa.RecordBatch, int] | None = None

    @property
    def done(self) -> bool:
        """Whether the batch was conformed (its `extremes` are known)."""
        return self._conformed is not None

    @property
    def ready(self) -> bool:
        """Whether `conformed` would not wait (for a staging still running)."""
        return self.done or self.staging is None or self.staging.ready

    def conformed(self, conform: BatchConformer) -> tuple[pa.RecordBatch, int]:
        if self._conformed is None:
            measured = self.staging() if self.staging is not None else None
            self.extremes = measured or conform.event_time_extremes(self.typed)
            self._conformed = conform.clip_event_time(self.typed, self.extremes)
        return self._conformed


class OperatorBase:
    """The window operator of a `WindowAggregateExec` (its Lift and StreamScan fused in): it
    reads the stream's batches and emits window results (`physical.window_result_columns`).
    `kernels` gives each step the kernels of the backend its placement names; `self.kernels`
    are the lift's (key map, pane state and merge run beside it)."""

    kind = ""
    stateful = True

    def __init__(self, node: ph.WindowAggregateExec, kernels: StepKernels) -> None:
        self.node = node
        self.lift_node = node.lift
        self.step_kernels = kernels
        self.kernels = kernels("lift")
        self.window = node
        self.spec = node.window
        self.fields = node.fields
        self.schema = window_result_schema(node)
        self.key_types = tuple(k.type for k in node.keys)
        self.keys = self.kernels.new_key_map(self.key_types)
        self.watermark: int | None = None  # None is -infinity
        self.max_event_time: int | None = None
        self.tuples_in = 0
        self.late = 0
        self.null_event_time = 0
        self.windows_fired = 0
        self.rows_out = 0
        self.finished = False
        scan = node.lift.scan
        self.conform = BatchConformer(
            scan.columns, scan.stream.name, scan.stream.event_time, event_time_range(self.spec)
        )
        self.out_of_range = 0
        # the rows judged late, kept only when the runner asks (late_rows.py); counting
        # (`self.late`) is unchanged either way
        self.late_rows = LateRows(node.lift.scan.stream.name)
        self.late_sinks = (self.late_rows,)
        self._early: list[pa.RecordBatch] = []  # results fired inside one `process`
        # the last two batches admitted (`_Admitted`): `prefetch` of batch k + 1 and `process`
        # of batch k each find their batch's one conformed object (the GPU matches a
        # prefetched batch by identity)
        self._conformed: list[_Admitted] = []

    # -- shared ---------------------------------------------------------------------------

    def metrics(self) -> OperatorMetrics:
        return OperatorMetrics(
            self.tuples_in,
            self.late,
            self.null_event_time,
            self.windows_fired,
            self.rows_out,
            self.state_bytes(),
            self.out_of_range,
        )

    def state_bytes(self) -> int:
        raise NotImplementedError

    def _observe(self, max_event_time: int | None) -> None:
        if max_event_time is not None:
            if self.max_event_time is None or max_event_time > self.max_event_time:
                self.max_event_time = max_event_time

    def _admit(self, batch: pa.RecordBatch | pa.Table) -> _Admitted:
        """The batch's admission: its columns conformed to the declared types (DataError if
        they cannot be) and handed to the kernels (`_stage_input`, which may go on in the
        background); found again, not redone, for the same batch object."""
        for entry in self._conformed:
            if entry.given is batch:
                return entry
        typed = self.conform.conform_types(as_record_batch(batch))
        entry = _Admitted(batch, typed, self._stage_input(typed))
        # the batches named ahead (`prefetch_depth`) and the one being processed
        self._conformed = [*self._conformed[-self.prefetch_depth :], entry]
        return entry

    def _admitted(self, batch: pa.RecordBatch | pa.Table) -> _Admitted | None:
        """The batch's admission; None where `_admit` has not taken it (not yet, or its
        columns were refused)."""
        return next((entry for entry in self._conformed if entry.given is batch), None)

    def _input(self, batch: pa.RecordBatch | pa.Table) -> tuple[pa.RecordBatch, int]:
        """The batch conformed to the declared stream (DataError if it cannot be), and how
        many of its event times were out of range (made NULL there)."""
        return self._admit(batch).conformed(self.conform)

    def _processed(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Forget a processed batch (holding it would keep a whole batch alive)."""
        self._conformed = [entry for entry in self._conformed if entry.given is not batch]

    def _earliest_event_time(self, batch: pa.RecordBatch) -> tuple[bool, int | None]:
        """(conformed, the least event time of `batch` or None when it has none) of a batch
        `_input` conformed; (False, None) when it has not or cannot (its `process` raises)."""
        try:
            self._input(batch)
        except DataError:
            return False, None
        extremes = self._event_time_extremes(batch)
        return True, None if extremes is None else extremes[0]

    def _event_time_extremes(self, batch: pa.RecordBatch | pa.Table) -> tuple[int, int] | None:
        """(min, max) of the non-NULL event times of a batch `_input` conformed, measured
        before out-of-range ones were made NULL (so they bound every kept row's); None where
        it has none or was not conformed here (a hint only: callers then do without)."""
        for entry in self._conformed:
            if entry.given is batch and entry.done:
                return entry.extremes
        return None

    def process(self, batch: pa.RecordBatch | pa.Table, input: int = 0) -> list[pa.RecordBatch]:
        """Lift + merge one batch, then update the watermark and fire (standalone form)."""
        conformed, out_of_range = self._input(batch)
        self._arriving(batch)
        try:
            self._process(conformed)
        finally:
            self.late_rows.done()
        self._count_out_of_range(out_of_range)
        self._processed(batch)
        # windows a chunked merge already fired (they come first: window order)
        early, self._early = self._early, []
        if self.max_event_time is None:
            return early
        return early + self._after_batch(self.max_event_time - self.spec.watermark_delay_us)

    def _after_batch(self, watermark: int) -> list[pa.RecordBatch]:
        """The watermark after a processed batch: raised, and what is due fires."""
        return self.advance_watermark(watermark)

    def _arriving(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Tell the late-row sink which rows the judgements of this batch index (the batch
        as given: conformance keeps its rows and their order)."""
        if self.late_rows.keep:
            self.late_rows.arriving(as_record_batch(batch))

    def _judged_late(self, late, reason: str) -> None:  # noqa: ANN001 - a NumPy or CuPy mask
        """The rows of the arriving batch found late against `self.watermark` (the watermark
        from before the batch), for the sink (a no-op unless late rows are kept)."""
        self.late_rows.judged(late, reason, self.watermark, self.kernels.to_host)

    def _watermark_after(self, max_event_time: int | None) -> int | None:
        """The watermark `process` sets after the batch being merged (None: none yet)."""
        latest = self.max_event_time
        if max_event_time is not None and (latest is None or max_event_time > latest):
            latest = max_event_time
        return None if latest is None else latest - self.spec.watermark_delay_us

    def _stage_input(self, batch: pa.RecordBatch) -> Staging | None:
        """Hand a typed batch to the kernels before its event times are checked (operators
        whose kernels stage their input: the time window's `prefetch`); returns the staging
        when it measures the event time's (min, max), else None."""
        return None

    @property
    def prefetch_depth(self) -> int:
        """How many batches the runner may name (`prefetch`) ahead of the one it processes."""
        return 1

    def prefetch(self, batch: pa.RecordBatch) -> None:
        """Let the kernels start moving `batch` (the next one `process` gets) to the device,
        so its copy runs beside the processing and firing of the batch before it. Only a hint:
        `process` of any other batch is unaffected. (Conforming the batch stages it:
        `_stage_input`.)"""
        if self.finished:
            return
        try:
            self._admit(batch)
        except DataError:
            return  # `process` of this batch raises it, after the batches before it ran

    def _count_out_of_range(self, count: int) -> None:
        """The lift saw out-of-range event times as NULL: count them apart."""
        self.out_of_range += count
        self.null_event_time -= count

    def _lift_input(self, batch: pa.RecordBatch | pa.Table) -> tuple[pa.RecordBatch, int]:
        return self.conform(as_record_batch(batch))

    def advance_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        """W = max(W, watermark); fire every window that ends at or before W."""
        self._raise_watermark(watermark)
        return self._fire(final=False)

    def _raise_watermark(self, watermark: int) -> None:
        watermark = max(watermark, INT64_MIN)  # max event time - delay may pass int64's end
        if self.watermark is None or watermark > self.watermark:
            self.watermark = watermark

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        return self.advance_watermark(watermark)

    def add_rows_out(self, rows: int) -> None:
        """Rows the plan above emitted from this operator's results (after HAVING): the
        `OperatorTree` counts them here, so the snapshot header keeps the query's counters
        together (`rows_out`)."""
        self.rows_out += rows

    def finish(self) -> list[pa.RecordBatch]:
        """End of input: everything fires."""
        self.finished = True
        early, self._early = self._early, []  # fired in a `process` that then raised
        return early + self._fire(final=True)

    def _emit(self, keys, aggregates, starts, ends) -> list[pa.RecordBatch]:
        self.windows_fired += len(starts)
        if not len(starts):
            return []
        return [window_result_batch(self.schema, keys, aggregates, starts, ends)]

    def _header(self) -> dict[str, Any]:
        return {
            "format": SNAPSHOT_FORMAT,
            "version": SNAPSHOT_VERSION,
            "operator": self.kind,
            "window": [
                self.spec.kind.value,
                self.spec.size,
                self.spec.slide,
                self.spec.watermark_delay_us,
            ],
            "fields": [[f.name, f.kind.value, f.type.value] for f in self.fields],
            "keys": [t.value for t in self.key_types],
            "watermark": self.watermark,
            "max_event_time": self.max_event_time,
            "counters": [
                self.tuples_in,
                self.late,
                self.null_event_time,
                self.windows_fired,
                self.rows_out,
                self.out_of_range,
            ],
            "finished": self.finished,
        }

    def _restore_header(self, header: dict[str, Any]) -> None:
        expected = self._header()
        for entry in ("operator", "window", "fields", "keys"):
            if header.get(entry) != expected[entry]:
                raise DataError(
                    f"snapshot does not match this query: {entry} is "
                    f"{header.get(entry)}, the plan has {expected[entry]}"
                )
        self.watermark = header["watermark"]
        self.max_event_time = header["max_event_time"]
        counters = header["counters"]
        (self.tuples_in, self.late, self.null_event_time, self.windows_fired, self.rows_out) = (
            counters[:5]
        )
        self.out_of_range = counters[5] if len(counters) > 5 else 0  # older snapshots: none
        self.finished = header["finished"]

    def _partial_batch(
        self, lifted, rows, extra_name, extra, partials, out_of_range: int
    ) -> pa.RecordBatch:
        host = self.kernels.to_host
        selection = pa.array(np.asarray(host(rows), np.int64), pa.int64())
        arrays = [key.take(selection) for key in lifted.keys]
        names = [k.name for k in self.node.keys]
        arrays.append(pa.array(host(extra), pa.int64()))
        names.append(extra_name)
        for field in self.fields:
            for part in range(len(field.kind.parts)):
                values = host(partials[field.name][part])
                arrays.append(pa.array(values, pa.from_numpy_dtype(values.dtype)))
                names.append(partial_column_name(field, part))
        metadata = {
            "mangonel.max_event_time": json.dumps(lifted.max_event_time),
            "mangonel.null_event_time": str(lifted.null_event_time),
            "mangonel.rows": str(lifted.rows),
            "mangonel.event_time_out_of_range": str(out_of_range),
        }
        return pa.RecordBatch.from_arrays(arrays, names=names).replace_schema_metadata(metadata)

    def _read_partials(self, partials: pa.RecordBatch, extra_name: str):
        metadata = {k.decode(): v.decode() for k, v in (partials.schema.metadata or {}).items()}
        self.tuples_in += int(metadata.get("mangonel.rows", 0))
        self.null_event_time += int(metadata.get("mangonel.null_event_time", 0))
        self.out_of_range += int(metadata.get("mangonel.event_time_out_of_range", 0))
        self._observe(json.loads(metadata.get("mangonel.max_event_time", "null")))
        keys = [partials.column(k.name) for k in self.node.keys]
        device = self.kernels.from_host
        extra = device(np.asarray(partials.column(extra_name)).astype(np.int64))
        values = {}
        for field in self.fields:
            values[field.name] = tuple(
                device(np.asarray(partials.column(partial_column_name(field, part))))
                for part in range(len(field.kind.parts))
            )
        return keys, extra, values

    def _process(self, batch: pa.RecordBatch) -> None:
        raise NotImplementedError

    def _fire(self, final: bool) -> list[pa.RecordBatch]:
        raise NotImplementedError


class TupleWindowOperator(OperatorBase):
    """The window operators that keep per-tuple partials (count and session windows) instead
    of panes: `tree_fields` are the incremental fields (combined per window or session),
    the holistic ones keep raw values beside them (`holistic_kernels`: the step's backend)."""

    def __init__(self, node: ph.WindowAggregateExec, kernels: StepKernels) -> None:
        super().__init__(node, kernels)
        self.holistic_kernels = kernels("holistic") if node.holistic is not None else None
        self.tree_fields = tuple(f for f in self.fields if not f.kind.holistic)

    def _process(self, batch: pa.RecordBatch) -> None:
        lifted = self.kernels.lift_tuples(self.lift_node, batch)
        self.tuples_in += lifted.rows
        self.null_event_time += lifted.null_event_time
        self._merge(lifted.keys, lifted.event_time, lifted.contributes, lifted.partials)
        self._observe(lifted.max_event_time)

    def preaggregate(self, batch: pa.RecordBatch | pa.Table) -> pa.RecordBatch:
        """Stage 1: the contributing tuples' partials, one per tuple (no pre-aggregation: a
        count window's order is final only at stage 2, a session's extent only once its
        key's rows have all met there)."""
        return self.preaggregate_rows(batch)[0]

    def preaggregate_rows(
        self, batch: pa.RecordBatch | pa.Table
    ) -> tuple[pa.RecordBatch, np.ndarray]:
        """`preaggregate`, and the batch's row of each partial (a partial is one tuple: late
        rows inside Spark carry the row beside it)."""
        conformed, out_of_range = self._lift_input(batch)
        lifted = self.kernels.lift_tuples(self.lift_node, conformed)
        lifted.null_event_time -= out_of_range  # counted apart (metadata of the partials)
        rows = np.nonzero(self.kernels.to_host(lifted.contributes))[0]
        partials = {
            name: tuple(self.kernels.to_host(p)[rows] for p in parts)
            for name, parts in lifted.partials.items()
        }
        event_time = self.kernels.to_host(lifted.event_time)[rows]
        batch = self._partial_batch(
            lifted, rows, EVENT_TIME_META, event_time, partials, out_of_range
        )
        return batch, rows

    def merge(self, partials: pa.RecordBatch) -> None:
        """Stage 2: `preaggregate`'s per-tuple partials (of any process), judged late and
        merged as `process` does a batch's lifted tuples."""
        keys, event_time, values = self._read_partials(partials, EVENT_TIME_META)
        include = self.kernels.from_host(np.ones(partials.num_rows, np.bool_))
        self._merge(keys, event_time, include, values)

    def _merge(self, keys, event_time, include, partials) -> None:  # noqa: ANN001
        raise NotImplementedError

    def _accept(
        self,
        keys: list,
        event_time: Any,
        include: Any,
        late_of: Callable[[int, np.ndarray], np.ndarray | None],
        reason: str,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Judges a batch's contributing rows late once a watermark W exists (`late_of(W,
        event times)`: the late mask, None when no row can be), counts them and hands them
        to the late-row sink with `reason`: (host event times, accepted rows, their key
        slots; new keys get slots here)."""
        host = self.kernels.to_host
        event_time = host(event_time)
        include = host(include).copy()
        if self.watermark is not None:
            late = late_of(self.watermark, event_time)
            if late is not None:
                late &= include
                self.late += int(late.sum())
                self._judged_late(late, reason)  # standalone rows only (late_rows.py)
                include &= ~late
        rows = np.nonzero(include)[0]
        if not len(rows):
            return event_time, rows, np.empty(0, np.int64)
        slots = host(self.keys.map_columns(keys, self.kernels.from_host(include)))[rows]
        return event_time, rows, slots

    def _taken(self, partials: dict, fields: tuple[StateField, ...], rows: np.ndarray) -> dict:
        """The `rows` of the fields' partials, on the host, as `<name>.<part>` columns."""
        host = self.kernels.to_host
        return {
            f"{name}.{part}": host(partials[name][part])[rows]
            for name, parts in field_arrays(fields)
            for part in range(parts)
        }
