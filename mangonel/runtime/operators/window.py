"""The backend-neutral driver of the window-aggregation operator (DESIGN section 3).

Time windows (`TimeWindowOperator`), SPRINGALD's two stages:

- pane level: every batch is lifted (filter, project, event time, per-tuple partial state),
  each tuple gets its pane `floor(ts / p)`, p = gcd(range, slide), and its key slot; lateness
  is decided per pane against the watermark from before the batch (a pane is late when its
  last window `floor(q*p / s)*s + w` ended at or before W); the partials of the remaining
  tuples are combined straight into the flat `[keys x panes]` state arrays (the pending
  panes). A pane stays updatable while any window that needs it is unfired, so "closed" panes
  and pending ones share those arrays; columns below the oldest unfired window are dropped
  when the arrays are next reshaped, so state stays proportional to the live panes. A batch
  whose dense block would be far larger than the batch (many keys over a long stretch of
  event time) is merged in pane-ordered chunks, and the windows the batch's watermark will
  fire that end before the next chunk fire in between (`_merge`): state stays at about
  keys x (chunk + window) panes, and results are those of the unchunked merge.
- window level: after the batch, W = max(W, max_ts - delay) (every row with an event time
  counts, also those WHERE drops), and every window with end <= W fires in window order: the
  runs of consecutive windows that hold data (empty stretches are skipped without work) go to
  the batched pane aggregation tree of `kernels.PaneState.windows`, `windows_per_batch`
  windows per tree build. A (window, key) emits a row only if one tuple of the key
  contributed (the first state field counts rows). Rows are ordered by window, then key in
  first-seen order (the order keys first contributed a tuple).

Split form (Spark): `lift(batch)` is stateless and returns a `pa.RecordBatch` of pane partials
(original key values, `__pane`, state fields; one row per (key, pane) of the batch, with the
batch's max event time and NULL-event-time count in the schema metadata); `merge(partials)`
decides lateness per pane and combines them; `advance_watermark(W)` fires. `process(batch)`
is the fused standalone form of lift + merge + watermark update + fire (it skips the
intermediate partial rows: tuples combine straight into the state): it calls the kernels'
`lift_merge` with the newest segment as target, and merges the rows the backend could not place
there (new keys, panes elsewhere; on the CPU every row) through the split path.

Count windows (`CountWindowOperator`, ROWS n SLIDE m): a window needs its key's tuples in
event-time order, which is final only once the watermark passes them, so the operator keeps
per-tuple partials: pending tuples (ts >= W) on one side, and per key the final tuples that
unfired windows still need (ordered by (ts, arrival)). When W advances, pending tuples with
ts < W become final (sorted per key by (ts, arrival) and appended); window j of a key fires
when the key has j*m + n final tuples; its aggregate comes from the same tree, built over
tuples as leaves. Its `window_start` is the event time of its first tuple and `window_end`
the event time of its last tuple + 1 microsecond (exclusive, like time windows). Rows are
ordered by window number, then key first-seen order. At end of input all pending tuples
become final; windows with fewer than n tuples never fire.

Input: every batch first passes `conform.BatchConformer` (declared types, lossless widening
only, NOT NULL; DataError otherwise) before any backend work. Event times outside
`event_time_range` (a window bound would not fit int64) become NULL there and are counted
apart (`event_time_out_of_range_dropped`; they do not move the watermark).

Other decisions: tuples with a NULL event time are dropped and counted
(`null_event_time_dropped`, whatever WHERE says); `late_tuples_dropped` counts late tuples
that passed WHERE (a tuple WHERE removes is not "dropped as late"); `windows_fired` counts
(window, key) results before HAVING, `rows_out` the rows after it.

Snapshots: `snapshot()` -> bytes is an .npz archive (numpy arrays only, loaded with
allow_pickle=False) whose `__header__` entry is UTF-8 JSON: format name, version, operator
kind, the plan's window and state fields (checked on restore), watermark and counters.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from mangonel.catalog.types import SqlType
from mangonel.compiler.logical import AggregateFunction, WindowKind
from mangonel.compiler.physical import AggregatePlan, StateKind, WindowPipeline
from mangonel.errors import DataError
from mangonel.runtime.cpu.evaluation import array_with_nulls, evaluate_expression, to_mask
from mangonel.runtime.operators.conform import INT64_MIN, BatchConformer, event_time_range
from mangonel.runtime.operators.kernels import PaneTarget, WindowKernels

SNAPSHOT_FORMAT = "mangonel.window-state"
SNAPSHOT_VERSION = 1
PANE_META = "__pane"
EVENT_TIME_META = "__ts"
MAX_RESULT_CELLS = 1 << 22  # (window, key) cells per tree call: bounds memory of one firing
DIRECT_WINDOWS = 64  # firings of at most this many windows skip the occupancy scan
# a batch whose dense `[keys x panes]` block would exceed this many cells per input row (and
# MAX_RESULT_CELLS) is merged in pane-ordered chunks, firing between them (see `_merge`)
DENSE_CELLS_PER_ROW = 16
MIN_SPLIT_GAP = 16  # panes: a segment holds at least 16 columns, smaller gaps save nothing


@dataclass(frozen=True)
class OperatorMetrics:
    tuples_in: int
    late_tuples_dropped: int
    null_event_time_dropped: int
    windows_fired: int
    rows_out: int
    state_bytes: int
    # tuples whose event time lies outside `event_time_range` (a window bound would not fit
    # int64): dropped and counted like NULL event times, but apart from them
    event_time_out_of_range_dropped: int = 0


# ---------------------------------------------------------------------------------------
# Finalize, HAVING and the output projection (host side, Arrow)


def finalize(
    plans: tuple[AggregatePlan, ...], values: dict[str, tuple[np.ndarray, ...]]
) -> list[pa.Array]:
    """The aggregate results (Arrow, plan result types) from selected field values."""
    results = []
    for plan in plans:
        count = values[plan.count_field][0]
        arrow_type = plan.result_type.info.arrow
        function = plan.function
        if function in (AggregateFunction.COUNT_STAR, AggregateFunction.COUNT):
            results.append(pa.array(count, pa.int64()).cast(arrow_type))
            continue
        empty = count == 0
        if not empty.any():
            empty = None  # no NULL result: no masking passes (the common case)
        value = values[plan.value_field]
        if function in (AggregateFunction.SUM, AggregateFunction.MIN, AggregateFunction.MAX):
            data = value[0] if empty is None else np.where(empty, 0, value[0])
            if plan.result_type is SqlType.TIMESTAMP:
                array = array_with_nulls(data.astype(np.int64), empty)
            else:
                array = array_with_nulls(data, empty)
            results.append(array.cast(arrow_type))
            continue
        if function is AggregateFunction.AVG:
            with np.errstate(divide="ignore", invalid="ignore"):
                data = value[0] / (count if empty is None else np.where(empty, 1, count))
            results.append(array_with_nulls(data.astype(np.float64), empty).cast(arrow_type))
            continue
        n, m2 = value[0], value[2]
        sample = function in (AggregateFunction.VAR_SAMP, AggregateFunction.STDDEV_SAMP)
        null = n < (2 if sample else 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            data = m2 / np.where(null, 1.0, n - 1.0 if sample else n)
        data = np.maximum(data, 0.0)  # rounding must not make a variance negative
        if function in (AggregateFunction.STDDEV_POP, AggregateFunction.STDDEV_SAMP):
            data = np.sqrt(data)
        results.append(array_with_nulls(data, null).cast(arrow_type))
    return results


_TIMESTAMP_UTC = pa.timestamp("us", tz="UTC")


def _timestamps(micros: np.ndarray) -> pa.Array:
    # a view of the int64 buffer as timestamps (an Arrow cast copies and checks every value)
    micros = np.ascontiguousarray(micros, np.int64)
    return pa.Array.from_buffers(_TIMESTAMP_UTC, len(micros), [None, pa.py_buffer(micros)])


def project(
    pipeline: WindowPipeline,
    keys: list[pa.Array],
    aggregates: list[pa.Array],
    window_start: np.ndarray,
    window_end: np.ndarray,
) -> pa.RecordBatch:
    """HAVING first, then the plan's output expressions, typed as the plan says."""
    length = len(window_start)
    key_columns = pipeline.lift.keys
    column_types = {c.name: c.type for c in key_columns}
    columns = {c.name: array for c, array in zip(key_columns, keys, strict=True)}
    aggregate_types = [p.result_type for p in pipeline.window.aggregates]
    bounds = {"start": _timestamps(window_start), "end": _timestamps(window_end)}
    if pipeline.having is not None and length:
        keep = to_mask(
            evaluate_expression(
                pipeline.having,
                column_types,
                columns,
                aggregates=aggregates,
                aggregate_types=aggregate_types,
                window_bounds=bounds,
                length=length,
            )
        )
        if not keep.all():
            selection = pa.array(np.nonzero(keep)[0], pa.int64())
            columns = {name: array.take(selection) for name, array in columns.items()}
            aggregates = [array.take(selection) for array in aggregates]
            bounds = {name: array.take(selection) for name, array in bounds.items()}
            length = int(keep.sum())
    arrays, fields = [], []
    for output in pipeline.outputs:
        arrow_type = output.type.info.arrow
        array = evaluate_expression(
            output.expression,
            column_types,
            columns,
            aggregates=aggregates,
            aggregate_types=aggregate_types,
            window_bounds=bounds,
            length=length,
        )
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        if array.type != arrow_type:
            array = array.cast(arrow_type)
        arrays.append(array)
        fields.append(pa.field(output.name, arrow_type))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def output_schema(pipeline: WindowPipeline) -> pa.Schema:
    return pa.schema([pa.field(o.name, o.type.info.arrow) for o in pipeline.outputs])


def as_record_batch(batch: pa.RecordBatch | pa.Table) -> pa.RecordBatch:
    if isinstance(batch, pa.Table):
        batch = batch.combine_chunks()
        return pa.RecordBatch.from_arrays(
            [column.combine_chunks() for column in batch.columns], schema=batch.schema
        )
    if not isinstance(batch, pa.RecordBatch):
        raise DataError(f"expected a pyarrow RecordBatch or Table, got {type(batch).__name__}")
    return batch


def _field_arrays(fields) -> list[tuple[str, int]]:
    return [(f.name, 3 if f.kind is StateKind.MOMENTS else 1) for f in fields]


def partial_column_name(field_name: str, part: int, parts: int) -> str:
    return field_name if parts == 1 else f"{field_name}.{('n', 'mean', 'm2')[part]}"


def _pack(header: dict[str, Any], arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    header_bytes = np.frombuffer(json.dumps(header, sort_keys=True).encode("utf-8"), np.uint8)
    np.savez(buffer, __header__=header_bytes, **arrays)
    return buffer.getvalue()


def _unpack(data: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
        header = json.loads(arrays.pop("__header__").tobytes().decode("utf-8"))
    except (ValueError, OSError, KeyError, AttributeError, UnicodeDecodeError) as error:
        raise DataError(f"not a mangonel window-operator snapshot ({error})") from error
    if header.get("format") != SNAPSHOT_FORMAT:
        raise DataError("not a mangonel window-operator snapshot")
    if header.get("version") != SNAPSHOT_VERSION:
        raise DataError(
            f"snapshot version {header.get('version')} is not supported "
            f"(this build reads version {SNAPSHOT_VERSION})"
        )
    return header, arrays


class _OperatorBase:
    kind = ""

    def __init__(self, pipeline: WindowPipeline, kernels: WindowKernels) -> None:
        self.pipeline = pipeline
        self.kernels = kernels
        self.window = pipeline.window
        self.spec = pipeline.window.window
        self.fields = pipeline.lift.fields
        self.key_types = tuple(k.type for k in pipeline.lift.keys)
        self.keys = kernels.new_key_map(self.key_types)
        self.watermark: int | None = None  # None is -infinity
        self.max_event_time: int | None = None
        self.tuples_in = 0
        self.late = 0
        self.null_event_time = 0
        self.windows_fired = 0
        self.rows_out = 0
        self.finished = False
        scan = pipeline.lift.child
        self.conform = BatchConformer(
            scan.columns, scan.stream.name, scan.stream.event_time, event_time_range(self.spec)
        )
        self.out_of_range = 0
        self._early: list[pa.RecordBatch] = []  # results fired inside one `process`
        # the last two batches conformed, (given, conformed): `prefetch` of batch k + 1 and
        # `process` of batch k each find their batch's one conformed object (the GPU matches
        # a prefetched batch by identity)
        self._conformed: list[tuple[pa.RecordBatch, tuple[pa.RecordBatch, int]]] = []

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

    def _input(self, batch: pa.RecordBatch | pa.Table) -> tuple[pa.RecordBatch, int]:
        """The batch conformed to the declared stream (DataError if it cannot be), and how
        many of its event times were out of range (made NULL there)."""
        for given, conformed in self._conformed:
            if given is batch:
                return conformed
        record_batch = as_record_batch(batch)
        conformed = self.conform(record_batch)
        self._conformed = [*self._conformed[-1:], (batch, conformed)]
        return conformed

    def process(self, batch: pa.RecordBatch | pa.Table) -> list[pa.RecordBatch]:
        """Lift + merge one batch, then update the watermark and fire (standalone form)."""
        conformed, out_of_range = self._input(batch)
        self._process(conformed)
        self._count_out_of_range(out_of_range)
        # processed: drop it (holding it would keep a whole batch alive)
        self._conformed = [entry for entry in self._conformed if entry[0] is not batch]
        # windows a chunked merge already fired (they come first: window order)
        early, self._early = self._early, []
        if self.max_event_time is None:
            return early
        return early + self.advance_watermark(self.max_event_time - self.spec.watermark_delay_us)

    def _watermark_after(self, max_event_time: int | None) -> int | None:
        """The watermark `process` sets after the batch being merged (None: none yet)."""
        latest = self.max_event_time
        if max_event_time is not None and (latest is None or max_event_time > latest):
            latest = max_event_time
        return None if latest is None else latest - self.spec.watermark_delay_us

    def prefetch(self, batch: pa.RecordBatch) -> None:
        """Let the kernels start moving `batch` (the next one `process` gets) to the device,
        so its copy runs beside the processing and firing of the batch before it. Only a hint:
        `process` of any other batch is unaffected."""
        if self.finished:
            return
        try:
            conformed, _ = self._input(batch)
        except DataError:
            return  # `process` of this batch raises it, after the batches before it ran
        self.kernels.prefetch(self.pipeline.lift, self.window, conformed)

    def _count_out_of_range(self, count: int) -> None:
        """The lift saw out-of-range event times as NULL: count them apart."""
        self.out_of_range += count
        self.null_event_time -= count

    def _lift_input(self, batch: pa.RecordBatch | pa.Table) -> tuple[pa.RecordBatch, int]:
        return self.conform(as_record_batch(batch))

    def advance_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        """W = max(W, watermark); fire every window that ends at or before W."""
        watermark = max(watermark, INT64_MIN)  # max event time - delay may pass int64's end
        if self.watermark is None or watermark > self.watermark:
            self.watermark = watermark
        return self._fire(final=False)

    def finish(self) -> list[pa.RecordBatch]:
        """End of input: everything fires."""
        self.finished = True
        return self._fire(final=True)

    def _emit(self, keys, aggregates, starts, ends) -> list[pa.RecordBatch]:
        self.windows_fired += len(starts)
        if not len(starts):
            return []
        batch = project(self.pipeline, keys, aggregates, starts, ends)
        self.rows_out += batch.num_rows
        return [batch] if batch.num_rows else []

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
        selection = pa.array(np.asarray(rows, np.int64), pa.int64())
        arrays = [key.take(selection) for key in lifted.keys]
        names = [k.name for k in self.pipeline.lift.keys]
        arrays.append(pa.array(host(extra), pa.int64()))
        names.append(extra_name)
        for name, parts in _field_arrays(self.fields):
            for part in range(parts):
                values = host(partials[name][part])
                arrays.append(pa.array(values, pa.from_numpy_dtype(values.dtype)))
                names.append(partial_column_name(name, part, parts))
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
        keys = [partials.column(k.name) for k in self.pipeline.lift.keys]
        device = self.kernels.from_host
        extra = device(np.asarray(partials.column(extra_name)).astype(np.int64))
        values = {}
        for name, parts in _field_arrays(self.fields):
            values[name] = tuple(
                device(np.asarray(partials.column(partial_column_name(name, part, parts))))
                for part in range(parts)
            )
        return keys, extra, values

    def _process(self, batch: pa.RecordBatch) -> None:
        raise NotImplementedError

    def _fire(self, final: bool) -> list[pa.RecordBatch]:
        raise NotImplementedError


@dataclass
class _Segment:
    """A dense block of the pane state: data panes [first, last]. Two segments are at least
    one window apart (a window never reads two), so sparse streams (gaps, far outliers) keep
    state proportional to the panes that hold data."""

    state: Any  # kernels.PaneState
    first: int
    last: int


class TimeWindowOperator(_OperatorBase):
    """RANGE w SLIDE s windows over panes of p = gcd(w, s) (see the module docstring)."""

    kind = "time"

    def __init__(self, pipeline: WindowPipeline, kernels: WindowKernels) -> None:
        super().__init__(pipeline, kernels)
        self.pane_length = self.window.pane_length
        self.panes_per_window = self.window.panes_per_window
        self.panes_per_slide = self.window.panes_per_slide
        self.segments: list[_Segment] = []  # ordered by pane, at least a window apart
        self.next_window: int | None = None  # the oldest window that has not fired

    # -- pane level -----------------------------------------------------------------------

    def _process(self, batch: pa.RecordBatch) -> None:
        """The fused entry: the backend merges what it can place in one pass (known keys,
        panes inside the newest segment); the rest (new keys, other panes) takes the split
        path, so segments and first-seen key order stay the driver's decisions."""
        target, segment = self._fused_target()
        fused = self.kernels.lift_merge(
            self.pipeline.lift, self.window, batch, self.keys, target, self.watermark
        )
        self.tuples_in += fused.rows
        self.null_event_time += fused.null_event_time
        self.late += fused.late
        if fused.first_pane is not None and segment is not None:
            segment.first = min(segment.first, fused.first_pane)
            segment.last = max(segment.last, fused.last_pane)
            self._reserve(segment)  # its windows must stay readable: last + pw columns
        if fused.rest is not None:
            panes = self.kernels.pane_ids(fused.rest, self.pane_length)
            self._merge(
                fused.rest.keys,
                panes,
                fused.rest_include,
                fused.rest.partials,
                self._watermark_after(fused.max_event_time),
            )
        self._observe(fused.max_event_time)

    def _fused_target(self) -> tuple[PaneTarget | None, _Segment | None]:
        """The newest segment's columns, less those within a window of the segment before it
        (a pane there belongs to that segment or bridges the two: the split path decides)."""
        if not self.segments:
            return None, None
        segment = self.segments[-1]
        state = segment.state
        first, end = state.origin, state.origin + state.pane_capacity
        if len(self.segments) > 1:
            first = max(first, self.segments[-2].last + self.panes_per_window)
        if end <= first:
            return None, None
        known = min(self.keys.n_slots, state.key_capacity)
        return PaneTarget(state, first, end, known), segment

    def lift(self, batch: pa.RecordBatch | pa.Table) -> pa.RecordBatch:
        """Stage 1 (stateless): one row of partial state per (key, pane) of the batch."""
        conformed, out_of_range = self._lift_input(batch)
        lifted = self.kernels.lift_tuples(self.pipeline.lift, conformed)
        lifted.null_event_time -= out_of_range  # counted apart (metadata of the partials)
        panes = self.kernels.pane_ids(lifted, self.pane_length)
        local_keys = self.kernels.new_key_map(self.key_types)
        slots = local_keys.map_columns(lifted.keys, lifted.contributes)
        rows, pane_of_row, partials = self.kernels.preaggregate(
            slots, panes, lifted.partials, self.fields
        )
        return self._partial_batch(lifted, rows, PANE_META, pane_of_row, partials, out_of_range)

    def merge(self, partials: pa.RecordBatch) -> None:
        """Stage 2: combine pane partials from `lift` (of any process) into the state."""
        keys, panes, values = self._read_partials(partials, PANE_META)
        include = self.kernels.from_host(np.ones(partials.num_rows, np.bool_))
        self._merge(keys, panes, include, values)

    def _merge(self, keys, panes, include, partials, fire_until: int | None = None) -> None:
        """Lateness (against the watermark from before the batch), key slots (first-seen
        order over the whole batch), then the partials into their segments.

        With `fire_until` (the watermark after this batch, known in `process`), a batch whose
        dense block (keys x panes it spans) would be far larger than the batch (one batch of
        many keys over a long stretch of event time) is merged in pane-ordered chunks, and
        the windows that end before the next chunk's first pane and at or before
        `fire_until` fire between chunks (into `self._early`): no later chunk touches them,
        so results equal the unchunked merge, but state stays at keys x (chunk + window)
        panes instead of keys x the batch's span."""
        kernels = self.kernels
        if self.watermark is not None:
            late = kernels.late_tuples(
                panes, include, self.pane_length, self.spec.slide, self.spec.size, self.watermark
            )
            rows = partials[self.fields[0].name][0]
            self.late += int(kernels.to_host((rows * late).sum()))
            include = include & ~late
        slots = self.keys.map_columns(keys, include)
        included = kernels.to_host(include)
        if not included.any():
            return
        live_rows = np.flatnonzero(included)
        host_panes = kernels.to_host(panes)[live_rows]
        chunk = self._chunk_panes(host_panes, fire_until)
        if chunk is None:
            self._merge_rows(slots, panes, host_panes, partials)
            return
        order = np.argsort(host_panes, kind="stable")
        sorted_panes = host_panes[order]
        start = 0
        while start < len(order):
            end = int(np.searchsorted(sorted_panes, sorted_panes[start] + chunk, side="left"))
            chosen = np.sort(order[start:end])  # batch order inside the chunk: same sums
            taken = kernels.from_host(live_rows[chosen])
            self._merge_rows(
                slots[taken],
                panes[taken],
                host_panes[chosen],
                {name: tuple(part[taken] for part in parts) for name, parts in partials.items()},
            )
            if end < len(order):
                # windows ending at or before the next chunk's first pane are complete
                boundary = int(sorted_panes[end]) * self.pane_length
                self._early += self.advance_watermark(min(fire_until, boundary))
            start = end

    def _chunk_panes(self, host_panes: np.ndarray, fire_until: int | None) -> int | None:
        """Panes per chunk of a batch's merge, or None to merge it at once: the common case,
        where the batch spans at most one chunk, its dense block is not far larger than the
        batch (DENSE_CELLS_PER_ROW), or no window holding its data can fire before its end.

        A chunk holds about MAX_RESULT_CELLS cells of the known keys beside the 2 windows of
        panes its segment keeps, but at least a window (and 8 slides) of panes, so each
        firing between chunks computes several windows per tree build."""
        if fire_until is None or (self.watermark is not None and fire_until <= self.watermark):
            return None
        pw, ps = self.panes_per_window, self.panes_per_slide
        keys = max(self.keys.n_slots, 1)
        chunk = max(pw, 8 * ps, MAX_RESULT_CELLS // keys - 2 * pw)
        first = int(host_panes.min())
        span = int(host_panes.max()) - first + 1
        if span <= chunk or span * keys <= DENSE_CELLS_PER_ROW * len(host_panes):
            return None
        if fire_until <= first * self.pane_length:
            return None  # no window of this batch's panes fires before its end
        return chunk

    def _merge_rows(self, slots, panes, host_panes: np.ndarray, partials) -> None:
        """Partials of rows with slots (-1: skip) into the segments of their panes;
        `host_panes` are the panes of the rows with a slot."""
        kernels = self.kernels
        touched = [self._segment_for(first, last) for first, last in self._clusters(host_panes)]
        for segment in {id(s): s for s in touched}.values():
            segment_slots = slots
            if len(self.segments) > 1:
                inside = (panes >= segment.first) & (panes <= segment.last)
                segment_slots = (slots + 1) * inside - 1  # -1 outside (numpy and CuPy alike)
            index = kernels.flat_index(segment_slots, panes, segment.state)
            segment.state.merge(index, partials)

    def _clusters(self, panes: np.ndarray) -> list[tuple[int, int]]:
        """The pane ranges of one batch's data, split where a window-wide gap separates them
        (only when one dense block would be large: the common case costs no sort)."""
        first, last = int(panes.min()), int(panes.max())
        keys = max(self.keys.n_slots, 1)
        if (last - first + 2 * self.panes_per_window) * keys <= MAX_RESULT_CELLS:
            return [(first, last)]
        distinct = np.unique(panes)
        gap = max(self.panes_per_window, MIN_SPLIT_GAP)
        breaks = np.nonzero(np.diff(distinct) >= gap)[0]
        starts = distinct[np.concatenate(([0], breaks + 1))]
        ends = distinct[np.concatenate((breaks, [len(distinct) - 1]))]
        return list(zip(starts.tolist(), ends.tolist(), strict=True))

    def _segment_for(self, first: int, last: int) -> _Segment:
        """The segment that holds panes [first, last], merging segments it bridges."""
        pw = self.panes_per_window
        near = [s for s in self.segments if s.first - last < pw and first - s.last < pw]
        if len(near) == 1:
            segment = near[0]
            segment.first, segment.last = min(segment.first, first), max(segment.last, last)
            self._reserve(segment)
            return segment
        merged = _Segment(
            self.kernels.new_pane_state(self.fields),
            min([first] + [s.first for s in near]),
            max([last] + [s.last for s in near]),
        )
        self._reserve(merged)
        for old in near:
            live = self._live_first_pane(old)
            if live <= old.last:
                old_arrays = old.state.to_arrays(self._segment_keys(old), live, old.last + 1)
                merged.state.load_arrays(old_arrays, live)
        self.segments = sorted(
            [s for s in self.segments if all(s is not n for n in near)] + [merged],
            key=lambda s: s.first,
        )
        return merged

    def _segment_keys(self, segment: _Segment) -> int:
        """How many key slots a segment's arrays hold. The key map is shared by every segment,
        but only the segments a batch touches are reserved for new keys: slots past a segment's
        key capacity have never been merged into it, and reading them would read past its
        arrays (the cause of issue 8's garbage windows)."""
        return min(self.keys.n_slots, segment.state.key_capacity)

    def _live_first_pane(self, segment: _Segment) -> int:
        if self.next_window is not None:
            return max(self.next_window * self.panes_per_slide, segment.first)
        return segment.first

    def _reserve(self, segment: _Segment) -> None:
        """Make a segment's arrays cover every key and the panes its windows read."""
        state = segment.state
        pw = self.panes_per_window
        # the first window holding a pane starts up to pw - 1 panes before it, and the last
        # one ends pw - 1 panes after it
        start_pane = self._live_first_pane(segment) - (pw - 1)
        end_pane = segment.last + pw
        need_keys = self.keys.n_slots
        fits = (
            state.pane_capacity > 0
            and state.origin <= start_pane
            and end_pane <= state.origin + state.pane_capacity
            and need_keys <= state.key_capacity
        )
        if fits:
            return
        span = end_pane - start_pane
        panes = max(16, state.pane_capacity)
        while panes < 2 * span:
            panes *= 2
        key_capacity = max(16, state.key_capacity)
        while key_capacity < need_keys:
            key_capacity *= 2
        state.reshape(key_capacity, panes, start_pane)

    # -- window level ---------------------------------------------------------------------

    def _fire(self, final: bool) -> list[pa.RecordBatch]:
        ps, pw = self.panes_per_slide, self.panes_per_window
        if final:
            if not self.segments:
                return []
            last_window = self.segments[-1].last // ps
        elif self.watermark is None:
            return []
        else:
            last_window = (self.watermark - self.spec.size) // self.spec.slide
        out: list[pa.RecordBatch] = []
        previous = self.next_window
        if previous is None or last_window >= previous:
            # every window ending at or before W has fired, also the empty ones
            self.next_window = last_window + 1
        for segment in self.segments:
            # windows before the first one holding the segment's oldest pane are empty
            first_window = -((pw - 1 - segment.first) // ps)  # ceil((q - pw + 1) / ps)
            if previous is not None:
                first_window = max(first_window, previous)
            out += self._fire_segment(segment, first_window, min(last_window, segment.last // ps))
        # a segment whose every window has fired is dropped
        self.segments = [s for s in self.segments if s.last // ps >= self.next_window]
        return out

    def _fire_segment(self, segment: _Segment, first_window: int, last_window: int):
        if last_window < first_window:
            return []
        ps, pw = self.panes_per_slide, self.panes_per_window
        n_keys = self._segment_keys(segment)
        span = last_window - first_window + 1
        if span <= DIRECT_WINDOWS and span * max(n_keys, 1) <= MAX_RESULT_CELLS:
            # a few windows (a firing after one batch): compute them all in one go; the cells
            # of windows without data are dropped like any empty (window, key). The occupancy
            # scan below (a reduction and a device round trip) pays only for long ranges.
            return self._compute(segment, [(first_window, span)], n_keys) if n_keys else []
        first_pane = first_window * ps
        end_pane = min(last_window * ps + pw, segment.last + 1)
        occupied = segment.state.occupied(n_keys, first_pane, end_pane)
        panes = np.nonzero(occupied)[0].astype(np.int64) + first_pane
        if not len(panes):
            return []
        starts = np.maximum(-((pw - 1 - panes) // ps), first_window)
        ends = np.minimum(panes // ps, last_window)
        breaks = np.nonzero(starts[1:] > ends[:-1] + 1)[0] + 1
        run_first = starts[np.concatenate(([0], breaks))]
        run_last = ends[np.concatenate((breaks - 1, [len(ends) - 1]))]
        out = []
        limit = max(1, MAX_RESULT_CELLS // max(n_keys, 1))
        pending: list[tuple[int, int]] = []
        pending_windows = 0
        for first, last in zip(run_first.tolist(), run_last.tolist(), strict=True):
            while first <= last:
                count = min(last - first + 1, limit - pending_windows)
                pending.append((first, count))
                pending_windows += count
                first += count
                if pending_windows >= limit:
                    out += self._compute(segment, pending, n_keys)
                    pending, pending_windows = [], 0
        if pending:
            out += self._compute(segment, pending, n_keys)
        return out

    def _compute(self, segment: _Segment, runs: list[tuple[int, int]], n_keys: int):
        ps = self.panes_per_slide
        values = segment.state.windows(
            n_keys,
            [(first * ps, count) for first, count in runs],
            ps,
            self.panes_per_window,
            self.window.windows_per_batch,
        )
        host = self.kernels.to_host
        # every array crosses once (the row counts are also a field's values)
        on_host = {name: tuple(host(part) for part in parts) for name, parts in values.items()}
        has_rows = on_host[self.fields[0].name][0] > 0
        everything = bool(has_rows.all())  # dense keys: no selection copy
        selected = None if everything else np.flatnonzero(has_rows)
        window_ids = np.concatenate([np.arange(f, f + c, dtype=np.int64) for f, c in runs])
        if everything:  # cells are window-major: no integer division per cell
            window_of_cell = np.repeat(window_ids, n_keys)
            slot_of_cell = np.tile(np.arange(n_keys, dtype=np.int64), len(window_ids))
        else:
            window_number, slot_of_cell = np.divmod(selected, n_keys)
            window_of_cell = window_ids[window_number]
        chosen = {
            name: tuple(part if everything else part[selected] for part in parts)
            for name, parts in on_host.items()
        }
        aggregates = finalize(self.window.aggregates, chosen)
        keys = self.keys.decode(slot_of_cell)
        starts = window_of_cell * self.spec.slide
        return self._emit(keys, aggregates, starts, starts + self.spec.size)

    # -- state ----------------------------------------------------------------------------

    def state_bytes(self) -> int:
        """Bytes allocated for the state: every segment's arrays at capacity, the key map."""
        return sum(s.state.nbytes for s in self.segments) + self.keys.nbytes

    def snapshot(self) -> bytes:
        header = self._header()
        arrays = self.keys.to_arrays("keys.")
        segments = []
        for number, segment in enumerate(self.segments):
            live = self._live_first_pane(segment)
            segments.append([segment.first, segment.last, live])
            if live <= segment.last:
                state = segment.state.to_arrays(self._segment_keys(segment), live, segment.last + 1)
                arrays.update({f"segment{number}.{name}": a for name, a in state.items()})
        header.update(next_window=self.next_window, segments=segments)
        return _pack(header, arrays)

    def restore(self, data: bytes) -> None:
        header, arrays = _unpack(data)
        self._restore_header(header)
        self.keys = self.kernels.key_map_from_arrays(self.key_types, arrays, "keys.")
        self.next_window = header["next_window"]
        self.segments = []
        for number, (first, last, live) in enumerate(header["segments"]):
            segment = _Segment(self.kernels.new_pane_state(self.fields), first, last)
            self._reserve(segment)
            prefix = f"segment{number}."
            state = {
                name[len(prefix) :]: array
                for name, array in arrays.items()
                if name.startswith(prefix)
            }
            if state:
                segment.state.load_arrays(state, live)
            self.segments.append(segment)


class CountWindowOperator(_OperatorBase):
    """ROWS n SLIDE m windows per key over per-tuple partials (see the module docstring)."""

    kind = "count"

    def __init__(self, pipeline: WindowPipeline, kernels: WindowKernels) -> None:
        super().__init__(pipeline, kernels)
        self.size = self.spec.size
        self.slide = self.spec.slide
        self.arrivals = 0  # arrival sequence number of the next tuple (ties in event time)
        self.pending = self._empty()  # tuples not final yet (ts >= W)
        self.final = self._empty()  # final tuples unfired windows need, by (slot, position)
        self.final_count = np.zeros(0, np.int64)  # final tuples per key so far
        self.next_window = np.zeros(0, np.int64)  # next window number per key

    def _empty(self) -> dict[str, np.ndarray]:
        columns = {
            "slot": np.empty(0, np.int64),
            "ts": np.empty(0, np.int64),
            "seq": np.empty(0, np.int64),
            "pos": np.empty(0, np.int64),
        }
        for field in self.fields:
            dtype = (
                np.float64
                if field.kind is StateKind.MOMENTS
                else (
                    np.int64
                    if field.type.is_integer or field.type is SqlType.TIMESTAMP
                    else np.float64
                )
            )
            for part in range(3 if field.kind is StateKind.MOMENTS else 1):
                columns[f"{field.name}.{part}"] = np.empty(0, dtype)
        return columns

    def _process(self, batch: pa.RecordBatch) -> None:
        lifted = self.kernels.lift_tuples(self.pipeline.lift, batch)
        self.tuples_in += lifted.rows
        self.null_event_time += lifted.null_event_time
        self._merge(lifted.keys, lifted.event_time, lifted.contributes, lifted.partials)
        self._observe(lifted.max_event_time)

    def lift(self, batch: pa.RecordBatch | pa.Table) -> pa.RecordBatch:
        """Stage 1: the contributing tuples' partials (no pre-aggregation: order not final)."""
        conformed, out_of_range = self._lift_input(batch)
        lifted = self.kernels.lift_tuples(self.pipeline.lift, conformed)
        lifted.null_event_time -= out_of_range  # counted apart (metadata of the partials)
        rows = np.nonzero(self.kernels.to_host(lifted.contributes))[0]
        partials = {
            name: tuple(self.kernels.to_host(p)[rows] for p in parts)
            for name, parts in lifted.partials.items()
        }
        event_time = self.kernels.to_host(lifted.event_time)[rows]
        return self._partial_batch(
            lifted, rows, EVENT_TIME_META, event_time, partials, out_of_range
        )

    def merge(self, partials: pa.RecordBatch) -> None:
        keys, event_time, values = self._read_partials(partials, EVENT_TIME_META)
        include = self.kernels.from_host(np.ones(partials.num_rows, np.bool_))
        self._merge(keys, event_time, include, values)

    def _merge(self, keys, event_time, include, partials) -> None:
        host = self.kernels.to_host
        event_time = host(event_time)
        include = host(include).copy()
        if self.watermark is not None:
            late = include & (event_time < self.watermark)
            self.late += int(late.sum())
            include &= ~late
        slots = host(self.keys.map_columns(keys, self.kernels.from_host(include)))
        rows = np.nonzero(include)[0]
        added = {
            "slot": slots[rows],
            "ts": event_time[rows],
            "seq": self.arrivals + np.arange(len(rows), dtype=np.int64),
            "pos": np.zeros(len(rows), np.int64),
        }
        self.arrivals += len(rows)
        for name, parts in _field_arrays(self.fields):
            for part in range(parts):
                added[f"{name}.{part}"] = host(partials[name][part])[rows]
        self.pending = {c: np.concatenate((self.pending[c], added[c])) for c in self.pending}

    def _fire(self, final: bool) -> list[pa.RecordBatch]:
        n_keys = self.keys.n_slots
        if len(self.final_count) < n_keys:
            grow = n_keys - len(self.final_count)
            self.final_count = np.concatenate((self.final_count, np.zeros(grow, np.int64)))
            self.next_window = np.concatenate((self.next_window, np.zeros(grow, np.int64)))
        if final:
            becoming = np.ones(len(self.pending["ts"]), np.bool_)
        elif self.watermark is None:
            return []
        else:
            becoming = self.pending["ts"] < self.watermark
        if becoming.any():
            new = {c: a[becoming] for c, a in self.pending.items()}
            self.pending = {c: a[~becoming] for c, a in self.pending.items()}
            order = np.lexsort((new["seq"], new["ts"], new["slot"]))
            new = {c: a[order] for c, a in new.items()}
            slots = new["slot"]
            group_start = np.searchsorted(slots, slots, side="left")
            new["pos"] = self.final_count[slots] + np.arange(len(slots)) - group_start
            np.add.at(self.final_count, slots, 1)
            merged = {c: np.concatenate((self.final[c], new[c])) for c in self.final}
            order = np.argsort(merged["slot"], kind="stable")
            self.final = {c: a[order] for c, a in merged.items()}
        return self._compute(n_keys)

    def _compute(self, n_keys: int) -> list[pa.RecordBatch]:
        n, m = self.size, self.slide
        last = np.where(self.final_count >= n, (self.final_count - n) // m, -1)
        counts = np.maximum(last - self.next_window + 1, 0)
        keys_firing = np.nonzero(counts)[0]
        if not len(keys_firing):
            return []
        slots = self.final["slot"]
        segment_start = np.searchsorted(slots, keys_firing, side="left")
        first_position = self.final["pos"][segment_start]
        base = segment_start + self.next_window[keys_firing] * m - first_position
        windows = counts[keys_firing]
        leaves = {
            name: tuple(self.final[f"{name}.{part}"] for part in range(parts))
            for name, parts in _field_arrays(self.fields)
        }
        values = self.kernels.segment_windows(
            self.fields, leaves, base, windows, m, n, self.window.windows_per_batch
        )
        slot_of_row = np.repeat(keys_firing, windows)
        row_in_task = np.arange(len(slot_of_row)) - np.repeat(np.cumsum(windows) - windows, windows)
        window_of_row = np.repeat(self.next_window[keys_firing], windows) + row_in_task
        first_leaf = np.repeat(base, windows) + row_in_task * m
        starts = self.final["ts"][first_leaf]
        ends = self.final["ts"][first_leaf + n - 1] + 1
        order = np.lexsort((slot_of_row, window_of_row))
        host = self.kernels.to_host
        chosen = {
            name: tuple(host(part)[order] for part in parts) for name, parts in values.items()
        }
        aggregates = finalize(self.window.aggregates, chosen)
        keys = self.keys.decode(slot_of_row[order])
        self.next_window[keys_firing] += windows
        keep = self.final["pos"] >= self.next_window[slots] * m
        self.final = {c: a[keep] for c, a in self.final.items()}
        return self._emit(keys, aggregates, starts[order], ends[order])

    def state_bytes(self) -> int:
        total = sum(a.nbytes for a in self.pending.values()) + sum(
            a.nbytes for a in self.final.values()
        )
        return total + self.final_count.nbytes + self.next_window.nbytes + self.keys.nbytes

    def snapshot(self) -> bytes:
        header = self._header()
        header["arrivals"] = self.arrivals
        arrays = self.keys.to_arrays("keys.")
        arrays.update({f"pending.{c}": a for c, a in self.pending.items()})
        arrays.update({f"final.{c}": a for c, a in self.final.items()})
        arrays["final_count"] = self.final_count
        arrays["next_window"] = self.next_window
        return _pack(header, arrays)

    def restore(self, data: bytes) -> None:
        header, arrays = _unpack(data)
        self._restore_header(header)
        self.arrivals = header["arrivals"]
        self.keys = self.kernels.key_map_from_arrays(self.key_types, arrays, "keys.")
        self.pending = {c: arrays[f"pending.{c}"] for c in self._empty()}
        self.final = {c: arrays[f"final.{c}"] for c in self._empty()}
        self.final_count = arrays["final_count"]
        self.next_window = arrays["next_window"]


WindowOperator = TimeWindowOperator | CountWindowOperator


def make_operator(pipeline: WindowPipeline, kernels: WindowKernels) -> WindowOperator:
    if pipeline.window.window.kind is WindowKind.COUNT:
        return CountWindowOperator(pipeline, kernels)
    return TimeWindowOperator(pipeline, kernels)
