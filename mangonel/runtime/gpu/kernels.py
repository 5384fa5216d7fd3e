"""The GPU implementation of `WindowKernels` (CuPy + kernels rendered by compiler.codegen).

Driven by the same backend-neutral driver as the CPU (`runtime.operators.window`). What runs
on the device: the fused lift (filter + projection + event time + per-row partial state, one
generated kernel), key slots through a GPU open-addressing hash table (`gpu.keys`; STRING
keys first go through a host dictionary to int ids), the pane merge into the flat
`[keys x panes]` store (`gpu.state`; warp-combined atomics, no sort), and every fired window
of every key in one tree launch per level plus one compute launch. Columns travel host ->
device chunk after chunk through reused pinned buffers filled by a pool of host threads, on
a copy stream (`gpu.staging`), only those the query reads, in the wire format of
`compiler.wire` (64-bit integers as int32 offsets from a per-chunk base where they fit,
STRING as int32 ids, BOOLEAN as one byte): each launch gets its chunk's bases and wide
flags. Modules come from a `CompileContext` (`gpu.compile`); tuning comes from `GpuOptions`
(`compiler.options`). The holistic step's pane sort and selection kernels are
`gpu.holistic`'s (`holistic_for`).

Session windows: `batch_sessions`, `assign_sessions`, `combine_sessions` (`gpu.sessions`).

Not here: stage 1's pane pre-aggregation of the split Spark form (`preaggregate`) and the
count-window tree (`segment_windows`). The plan places those steps on the CPU
(`physical.window_placements`, `spark.planner`), so the operators call the CPU kernels for
them and EXPLAIN says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from mangonel.aggregates import Layout
from mangonel.catalog.types import SqlType
from mangonel.compiler import codegen
from mangonel.compiler import physical as ph
from mangonel.compiler.holistic import HolisticPlan
from mangonel.compiler.options import GpuOptions
from mangonel.compiler.physical import LiftExec, StateField, WindowAggregateExec
from mangonel.runtime.gpu import device, pinned
from mangonel.runtime.gpu.compile import CompileContext, shared_context
from mangonel.runtime.gpu.holistic import GpuHolistic
from mangonel.runtime.gpu.keys import GpuKeyMap
from mangonel.runtime.gpu.sessions import GpuSessions
from mangonel.runtime.gpu.sketches import GpuSketches
from mangonel.runtime.gpu.staging import PendingBatch, StagedBatch, Stager
from mangonel.runtime.gpu.state import GpuPaneState
from mangonel.runtime.gpu.wire import shared_worker
from mangonel.runtime.host.arrays import batch_columns, column
from mangonel.runtime.host.keys import StringDictionary
from mangonel.runtime.operators.kernels import FusedMerge, LiftedTuples, PaneTarget

_STATUS_WORDS = 6
# prefetched batches kept: the one being processed and the two a runner names ahead of it
# (`TimeWindowOperator.prefetch_depth` with the copy worker)
PREFETCHES_KEPT = 3
_INT64_MIN = int(np.iinfo(np.int64).min)
_U64 = (1 << 64) - 1


def _render(lift: LiftExec, window: WindowAggregateExec | None) -> codegen.GeneratedModule:
    """Every kernel of a query; only the lift for the holistic step's lift of raw values
    (variable-size state: lifted per tuple and kept, never merged into a pane cell)."""
    if any(f.kind.layout is Layout.VARIABLE for f in lift.fields):
        return codegen.render_lift_kernels(lift)
    return codegen.render_kernels(lift, window)


def _unbias(value: int) -> int:
    """The signed value the fused kernel stored as x ^ 2^63 (unsigned order = signed order)."""
    value ^= 1 << 63
    return value - (1 << 64) if value >= 1 << 63 else value


@dataclass
class GpuKernelMetrics:
    """What the GPU kernels did so far (counts since the kernels were made)."""

    fused_passes: int = 0  # batches merged by the fused lift + merge kernel
    block_table_passes: int = 0  # of those, passes that combined in the shared-memory table
    passes_with_rest: int = 0  # fused passes that left rows to the split path (new keys...)
    prefetches: int = 0  # batches whose copies `prefetch` started
    prefetch_hits: int = 0  # fused passes that found their batch's copies already queued
    shared_stagings: int = 0  # other lifts of a batch (the holistic values) that read them too
    staged_rows: int = 0  # rows staged for the lift and fused kernels
    wire_bytes: int = 0  # bytes of their values that crossed PCIe (`compiler.wire`)
    narrow_chunks: int = 0  # (chunk, offset column) pairs that travelled as int32 offsets
    wide_chunks: int = 0  # ... that travelled at 8 bytes (range too wide, or pinned source)


@dataclass
class _Prefetched:
    """A batch's fused-kernel columns, queued for copy (device arrays, one event per chunk),
    or still being staged by the copy worker (`PendingBatch`: `GpuKernels._staged` waits)."""

    batch: pa.RecordBatch
    lift: LiftExec
    staging: StagedBatch | PendingBatch


class _Staging:
    """A prefetched batch's staging as the operators see it (`operators.kernels.Staging`):
    `ready` once the copy worker is done with it; calling it gives the event time's extremes
    the copy pass measured (`column`: the event time's staged column, None: not staged)."""

    def __init__(self, kernels: GpuKernels, entry: _Prefetched, column: int | None) -> None:
        self._kernels, self._entry, self._column = kernels, entry, column

    @property
    def ready(self) -> bool:
        staging = self._entry.staging
        return not isinstance(staging, PendingBatch) or staging.ready

    def __call__(self) -> tuple[int, int] | None:
        staged = self._kernels._staged(self._entry)
        return None if self._column is None else staged.extremes[self._column]


class GpuKernels:
    """CuPy kernels rendered per query; the driver is `runtime.operators.window`.

    `options` sets launch geometry, chunking and the block-table choice (defaults: today's
    tuned values); `compiler` owns compiled modules (default: the process's shared context).
    The kernels own one string dictionary (`strings`): the stager encodes STRING columns into
    it, key maps hold its ids, string literals are looked up in it; its ids stay valid for
    the kernels' lifetime (it only grows), so device ids never need translating."""

    name = "gpu"
    # `lift_merge(share_rows=True)` hands its per-row decisions back (`FusedMerge.shared`):
    # device arrays the fused kernel writes beside its merge
    shares_fused_rows = True

    def __init__(
        self, options: GpuOptions | None = None, compiler: CompileContext | None = None
    ) -> None:
        self.options = options if options is not None else GpuOptions()
        self.compiler = (
            compiler if compiler is not None else shared_context(self.options.module_cache_size)
        )
        self.metrics = GpuKernelMetrics()
        # modules by plan data: (lift, window) -> (GeneratedModule, RawModule); by lift alone
        # the last one made for it (any module of a lift serves its lift and state kernels)
        self._query_modules: dict[tuple, tuple] = {}
        self._lift_modules: dict[LiftExec, tuple] = {}
        self._last_module: tuple | None = None  # (lift, window, found) of the last call
        self._fields_module: dict[tuple, tuple] = {}
        self.strings = StringDictionary()
        self.stager = Stager(self.strings, self.options.staging_threads, self.compiler.module)
        cp = device.cupy()
        # the fused pass's status words and their pinned host mirror: one copy, one sync
        self._status = cp.zeros(_STATUS_WORDS, cp.uint64)
        self._status_host = cp.cuda.alloc_pinned_memory(8 * _STATUS_WORDS)
        self._status_view = np.frombuffer(self._status_host, np.uint64, _STATUS_WORDS)
        # batches whose copies `prefetch` started; the driver's lookahead keeps at most two
        # (batch k and k + 1)
        self._prefetched: list[_Prefetched] = []
        # the columns the last fused pass read: a holistic driver lifts the same batch's
        # values after it (`_peek_prefetched`), from the same staged columns
        self._taken: _Prefetched | None = None
        # (key, pane) cells the last fused pass merged into (known keys x its pane span):
        # block_table="auto" uses the shared-memory block table when they would fit it
        self._last_cells: int | None = None
        self._holistic: dict[str, GpuHolistic] = {}  # by selection kernel form
        self._sessions: GpuSessions | None = None  # session windows' kernels, made on first use
        self._session_states: dict[tuple, GpuPaneState] = {}  # their combine, by fields
        self._sketches: GpuSketches | None = None
        self._last_finalize: tuple | None = None  # (fields, plans, found): `_finalize_module`

    # -- compile --------------------------------------------------------------------------

    def module_for(self, lift: LiftExec, window: WindowAggregateExec | None = None):
        """(GeneratedModule, module) of one query, found by plan data (equal plans share a
        module); `window` bakes pane/slide/size into the fused kernel. Without `window`, the
        last module made for the lift serves (its lift and state kernels do not depend on
        the window)."""
        last = self._last_module
        # the hot path (every batch asks for the same plan): the last answer, by identity.
        # The memo holds both plan nodes, so no other object can take their ids: an identity
        # hit is a value hit. Hashing a plan node costs microseconds per call; this, none.
        if last is not None and last[0] is lift and (window is None or last[1] is window):
            return last[2]
        found = self._lift_modules.get(lift) if window is None else None
        if found is None:
            key = (lift, window)
            found = self._query_modules.get(key)
            if found is None:
                found = self.compiler.rendered(
                    ("query", lift, window), lambda: _render(lift, window)
                )
                self._query_modules[key] = found
            self._lift_modules[lift] = found
            self._fields_module[lift.fields] = found
        self._last_module = (lift, window, found)
        return found

    def _module_for_fields(self, fields: tuple[StateField, ...]):
        found = self._fields_module.get(fields)
        if found is None:
            found = self.compiler.state_module(fields)
            self._fields_module[fields] = found
        return found

    # -- WindowKernels --------------------------------------------------------------------

    def lift_tuples(
        self,
        lift: LiftExec,
        batch: pa.RecordBatch,
        key_words: bool = False,
        extremes: bool = True,
        staged: StagedBatch | None = None,
    ) -> LiftedTuples:
        """The per-row lift of a batch (one launch per staged chunk); `staged`: its columns
        already on the device (the fused pass's), else they are staged here. `key_words`:
        the lift also writes the rows' key words (`LiftedTuples.key_words`) where every key
        type gives the host's word on the device (`GpuKeyMap.device_keys`: not floats).
        `extremes` False: no device read for the timed rows' count and latest time.
        The staged columns stay at hand for another lift of the batch (`_taken`)."""
        cp = device.cupy()
        generated, module = self.module_for(lift)
        length = batch.num_rows
        columns = batch_columns(batch)
        if staged is None:
            # the holistic step's values lift reads the batch the incremental part's fused
            # pass prefetched: the same scan, so the same staged columns (one staging a batch)
            staged = self._peek_prefetched(lift, batch) or self._stage(generated, batch)
        self._taken = _Prefetched(batch, lift, staged)
        event_time = cp.empty(length, cp.int64)
        # bool arrays: the kernel writes each flag as one byte, 0 or 1 (a C++ bool through
        # `unsigned char*`), so no conversion pass after it
        has_time = cp.empty(length, cp.bool_)
        contributes = cp.empty(length, cp.bool_)
        partials = {p.member: cp.empty(length, p.numpy) for p in generated.parts}
        words = None
        if key_words and all(not k.type.is_floating for k in lift.keys):
            words = cp.empty(generated.key_words * length, cp.int64)
        literal_ids = self.stager.literal_ids(generated.string_literals)
        stream = cp.cuda.get_current_stream()
        threads = self.options.threads
        whole = len(staged.chunks) == 1
        for chunk in staged.chunks if length else []:
            stream.wait_event(chunk.event)
            rows = chunk.end - chunk.first
            if not rows:
                continue
            part = slice(chunk.first, chunk.end)
            module.get_function(generated.names["lift"])(
                (device.grid(rows, threads),),
                (threads,),
                (
                    *staged.chunk_arguments(chunk, whole),
                    event_time[part],
                    has_time[part],
                    contributes[part],
                    *[partials[p.member][part] for p in generated.parts],
                    None if words is None else words[chunk.first :],
                    np.int64(length),  # the words' stride: word w of row i at w * length + i
                    literal_ids,
                    np.int64(rows),
                ),
            )
        # the count of rows with an event time and the latest one in one read (one wait for
        # the device per lift, not two)
        latest = None
        if length and extremes:
            latest = cp.where(has_time, event_time, np.iinfo(np.int64).min).max()
        with_time, max_event_time = (0 if extremes else length), None
        if latest is not None:
            with_time, max_event_time = (
                int(x) for x in cp.stack((has_time.sum(dtype=cp.int64), latest)).get()
            )
        if not with_time:
            max_event_time = None
        by_field: dict[str, list] = {}
        for part in generated.parts:
            by_field.setdefault(part.field, []).append(partials[part.member])
        keys = [column(columns, key.name) for key in lift.keys]
        keys = [k.combine_chunks() if isinstance(k, pa.ChunkedArray) else k for k in keys]
        return LiftedTuples(
            length,
            event_time,
            has_time,
            contributes,
            keys,
            {name: tuple(v) for name, v in by_field.items()},
            max_event_time,
            length - with_time,
            words,
        )

    def pane_ids(self, lifted: LiftedTuples, pane_length: int):
        cp = device.cupy()
        return cp.where(lifted.has_event_time, lifted.event_time // pane_length, 0)

    def late_tuples(self, panes, include, pane_length, slide, size, watermark):
        last_window_end = (panes * pane_length) // slide * slide + size
        return include & (last_window_end <= watermark)

    def new_key_map(self, types: tuple[SqlType, ...]) -> GpuKeyMap:
        return GpuKeyMap(types, self.strings, self.compiler, self.options)

    def key_map_from_arrays(self, types, arrays, prefix) -> GpuKeyMap:
        return GpuKeyMap.from_arrays(
            types, arrays, prefix, self.strings, self.compiler, self.options
        )

    def _stage(self, generated, batch: pa.RecordBatch) -> StagedBatch:
        """The batch's columns to the device, chunk after chunk (copy stream), in the wire
        format (`compiler.wire`: offset columns narrowed per chunk where they fit)."""
        return self._counted(self._stage_later(generated, batch, background=False).result())

    def _stage_later(
        self, generated, batch: pa.RecordBatch, background: bool, measured: int | None = None
    ) -> PendingBatch:
        columns = batch_columns(batch)
        return self.stager.stage_later(
            [column(columns, c.name) for c in generated.columns],
            generated.columns,
            self.options.chunk_rows,
            tuple(c.offset for c in generated.columns),
            background=background,
            measured=measured,
        )

    @property
    def stages_in_background(self) -> bool:
        """Whether `prefetch` hands the copy pass to the process's copy worker (so it runs
        beside the driver's Python) rather than running it in the caller's thread."""
        return self.options.copy_worker and shared_worker() is not None

    def _counted(self, staged: StagedBatch) -> StagedBatch:
        """A staged batch, counted into the metrics (rows, wire bytes, narrow chunks)."""
        metrics = self.metrics
        metrics.staged_rows += staged.chunks[-1].end if staged.chunks else 0
        metrics.wire_bytes += staged.wire_bytes()
        for chunk in staged.chunks:
            for wire, offset in zip(chunk.wires, staged.offsets, strict=True):
                if offset and chunk.end > chunk.first:
                    metrics.narrow_chunks += wire.narrow
                    metrics.wide_chunks += not wire.narrow
        return staged

    def prefetch(
        self, lift: LiftExec, window: WindowAggregateExec, batch: pa.RecordBatch
    ) -> _Staging | None:
        """Stage a batch's columns now: the copy pass and the host-to-device copies run
        while the batch before is merged and its windows fire (in the copy worker's thread
        where `stages_in_background`, else here); `lift_merge` (and the split path's
        `lift_tuples`) of the same batch object then wait only for those copies' events.
        Returns the staging (`operators.kernels.Staging`): it gives the event time's (min,
        max) the copy pass measured (a column read straight from pinned memory is measured
        by a parallel pass here), waiting for the pass. Count windows and empty batches take
        no fused pass, so nothing is copied for them (None).

        Contract: a prefetch is used by the `lift_merge` that receives the very same batch
        object (and an equal lift). Identity, not equality, on purpose: comparing contents
        would cost a pass over the data, and an Arrow batch is immutable, so the same object
        is the same data. The caller (`OperatorBase._input`) conforms each input once and
        hands that one object to both calls. PREFETCHES_KEPT prefetches are kept (batch k and
        those named ahead of it); older ones, and those before the one used, were never
        processed: they are dropped."""
        if window.window.kind is ph.WindowKind.COUNT or batch.num_rows == 0:
            return None
        generated, _ = self.module_for(lift, window)
        event_time = lift.scan.stream.event_time.lower()
        timed = [k for k, c in enumerate(generated.columns) if c.name.lower() == event_time]
        measured = timed[0] if timed else None
        pending = self._stage_later(
            generated, batch, background=self.stages_in_background, measured=measured
        )
        self.metrics.prefetches += 1
        entry = _Prefetched(batch, lift, pending)
        self._prefetched = [*self._prefetched[-(PREFETCHES_KEPT - 1) :], entry]
        return _Staging(self, entry, measured)

    def _peek_prefetched(self, lift: LiftExec, batch: pa.RecordBatch) -> StagedBatch | None:
        """The columns a prefetch staged for this batch object, left for its `lift_merge`,
        where `lift` reads the same scan: the staged columns (`generated.columns`) and their
        wire form depend on the scan's columns only (`compiler.wire.wire_columns`), not on
        the lift's fields, so another lift of the same scan reads them as they are."""
        taken = [] if self._taken is None else [self._taken]
        for entry in [*self._prefetched, *taken]:
            if entry.batch is batch and (
                entry.lift.scan is lift.scan or entry.lift.scan.columns == lift.scan.columns
            ):
                self.metrics.shared_stagings += 1
                return self._staged(entry)
        return None

    def _staged(self, entry: _Prefetched) -> StagedBatch:
        """The entry's staged batch, waiting for the copy worker if it is still staging
        (counted into the metrics once, when it is done)."""
        if isinstance(entry.staging, PendingBatch):
            entry.staging = self._counted(entry.staging.result())
        return entry.staging

    def _take_prefetched(self, lift: LiftExec, batch: pa.RecordBatch) -> StagedBatch | None:
        for index, entry in enumerate(self._prefetched):
            if entry.batch is batch and (entry.lift is lift or entry.lift == lift):
                # entries before it were never processed (stale): drop them with it
                del self._prefetched[: index + 1]
                self.metrics.prefetch_hits += 1
                return self._staged(entry)
        return None

    def _use_block_table(self, block_cells: int) -> bool:
        """Whether this fused pass combines rows per block in shared memory first (few
        cells: few keys, out of order); many cells would overflow the table and only add
        work. With block_table="auto" the cells of the previous fused pass decide (the only
        input from an earlier batch; the choice changes the order of combines, never which
        rows combine)."""
        mode = self.options.block_table
        if mode != "auto":
            return mode == "on"
        return (
            self._last_cells is not None
            and 0 < self._last_cells <= block_cells * self.options.block_table_load
        )

    def lift_merge(
        self,
        lift: LiftExec,
        window: WindowAggregateExec,
        batch: pa.RecordBatch,
        keys,
        target: PaneTarget | None,
        watermark: int | None,
        while_running: Callable[[], None] | None = None,
        share_rows: bool = False,
    ) -> FusedMerge:
        """One batch in one launch per staged chunk (`GpuOptions.chunk_rows`): staged columns
        -> fused lift + key probe + pane + lateness + block-combined merge into the target
        segment (each launch waits only for its chunk's copies); one pinned read of the status
        (late, NULL times, max event time, merged pane range, rows left) and one sync.

        Rows it leaves (a key the table does not hold yet, a pane outside the target; in a
        steady stream only the first batch and new keys) are lifted again by `lift_tuples`
        and returned as the rest for the driver's split path. `share_rows`: the kernel also
        writes each row's pane and key slot (`FusedMerge.shared`, device arrays)."""
        rows = batch.num_rows
        staged = self._take_prefetched(lift, batch)
        usable = (
            target is not None
            and isinstance(keys, GpuKeyMap)
            and keys.device_keys
            and window.window.kind is not ph.WindowKind.COUNT
            and rows > 0
        )
        if not usable:
            if while_running is not None:
                while_running()
            lifted = self.lift_tuples(lift, batch, staged=staged)
            return FusedMerge.unplaced(lifted)
        cp = device.cupy()
        generated, module = self.module_for(lift, window)
        staged = staged or self._stage(generated, batch)
        self._taken = _Prefetched(batch, lift, staged)
        whole = len(staged.chunks) == 1
        stream = cp.cuda.get_current_stream()
        status = self._status
        cp.cuda.runtime.memsetAsync(status.data.ptr, 0, 8 * _STATUS_WORDS, stream.ptr)
        decided = cp.empty(rows, cp.uint8)
        shared_panes = cp.empty(rows, cp.int64) if share_rows else None
        shared_slots = cp.empty(rows, cp.int32) if share_rows else None
        state = target.state
        fused = module.get_function(generated.names["fused"])
        literal_ids = self.stager.literal_ids(generated.string_literals)
        use_block_table = np.int32(self._use_block_table(generated.block_cells))
        self.metrics.fused_passes += 1
        self.metrics.block_table_passes += int(use_block_table)
        threads = self.options.threads
        # one launch per chunk, each after its chunk's copy: chunk c merges while chunk c + 1
        # crosses PCIe
        for chunk in staged.chunks:
            first, end = chunk.first, chunk.end
            stream.wait_event(chunk.event)
            fused(
                (device.fused_grid(end - first, threads),),
                (threads,),
                (
                    *staged.chunk_arguments(chunk, whole),
                    keys.table_words,
                    keys.table_slots,
                    np.int64(keys.capacity),
                    np.int32(target.known_keys),
                    *state.struct_args(),
                    literal_ids,
                    np.int64(end - first),
                    np.int64(state.pane_capacity),
                    np.int64(state.origin),
                    np.int64(target.first_pane),
                    np.int64(target.end_pane),
                    np.int64(_INT64_MIN if watermark is None else watermark),
                    use_block_table,
                    decided[first:end],
                    status,
                    state.block_partials,
                    None if shared_panes is None else shared_panes[first:end],
                    None if shared_slots is None else shared_slots[first:end],
                ),
            )
        status.data.copy_to_host_async(self._status_host.ptr, 8 * _STATUS_WORDS, stream)
        if while_running is not None:  # e.g. the next batch's host copy pass, beside the kernels
            while_running()
        stream.synchronize()
        late, nulls, max_ts, low, high, undecided = (int(v) for v in self._status_view)
        max_event_time = _unbias(max_ts) if nulls < rows else None
        first_pane = _unbias(~low & _U64) if high else None
        last_pane = _unbias(high) if high else None
        self._last_cells = (
            None if first_pane is None else target.known_keys * (last_pane - first_pane + 1)
        )
        # the kernel's per-row verdict (2: counted late) is the late rows' mask: the rows
        # counted are the rows handed out, never a second rule
        late_rows = (decided == 2) if late else None
        if first_pane is not None:
            state.mark_merged(first_pane, last_pane + 1)  # the kept tree's stale columns
        # (pane, contributing and not late: decided 1 or 3, slot of the rows merged or -1)
        shared = None if shared_slots is None else (shared_panes, (decided & 1) != 0, shared_slots)
        rest = rest_include = None
        if undecided:
            self.metrics.passes_with_rest += 1
            rest = self.lift_tuples(lift, batch, staged=staged)
            rest_include = decided == 3  # contributing, neither merged nor late
        return FusedMerge(
            rows,
            late,
            nulls,
            max_event_time,
            first_pane,
            last_pane,
            rest,
            rest_include,
            late_rows,
            shared,
        )

    def preaggregate(self, slots, panes, partials, fields):
        """Stage 1's pre-aggregation on the device: one row per (key slot, pane) pair of the
        rows with a slot (-1: none), pairs numbered in first-seen order by a device key map of
        two BIGINT words, each field's partials combined per pair by the merge kernel into a
        pane state of one column. Returns (each pair's first row, its pane, the combined
        partials per field), the CPU's `preaggregate` on device arrays."""
        cp = device.cupy()
        rows = int(slots.shape[0])
        include = slots >= 0
        pairs = self.new_key_map((SqlType.BIGINT, SqlType.BIGINT))
        words = cp.zeros((pairs.words, rows), cp.int64)  # the NULL-mask word stays 0
        words[0] = slots
        words[1] = panes
        cells = pairs.map_words(words.reshape(-1), rows, include.astype(cp.uint8))
        count = pairs.n_slots
        cells = cp.where(include, cells.astype(cp.int64), -1)
        # each pair's first row: the smallest (cell, row) key of its cell
        order = cp.sort(cp.where(include, cells * rows + cp.arange(rows, dtype=cp.int64), -1))
        order = order[rows - int(include.sum()) :]
        starts = cp.searchsorted(order // max(rows, 1), cp.arange(count, dtype=cp.int64))
        first = order[starts] % max(rows, 1)
        state = self.new_pane_state(fields)
        state.reshape(max(count, 1), 1, 0)
        state.merge(cells, partials)  # one pane column: the flat index is the cell
        state.settle()  # lock-free merges (MOMENTS) back to the kinds' parts
        combined: dict[str, list] = {}
        for part in state.parts:
            combined.setdefault(part.field, []).append(state.arrays[part.member][:count])
        return first, panes[first], {name: tuple(values) for name, values in combined.items()}

    def new_pane_state(self, fields: tuple[StateField, ...]) -> GpuPaneState:
        return GpuPaneState(
            fields,
            lambda: self._module_for_fields(fields),
            self.options,
            lambda plans: self._finalize_module(fields, plans),
        )

    def _finalize_module(self, fields: tuple[StateField, ...], plans: tuple) -> tuple | None:
        """(GeneratedModule, module, result C types) of the window finalize kernel of `plans`
        over `fields`, or None when an aggregate has no device finalize. Every firing asks:
        the last answer is kept by identity (hashing plans costs microseconds)."""
        last = self._last_finalize
        if last is not None and last[0] is fields and last[1] is plans:
            return last[2]
        ctypes = codegen.finalize_ctypes(fields, plans)
        found = None
        if ctypes is not None:
            generated, module = self.compiler.rendered(
                ("finalize", fields, plans),
                lambda: codegen.render_finalize_kernels(fields, plans),
            )
            found = (generated, module, ctypes)
        self._last_finalize = (fields, plans, found)
        return found

    def flat_index(self, slots, panes, state: GpuPaneState):
        cp = device.cupy()
        slots64 = slots.astype(cp.int64)
        return cp.where(slots64 >= 0, slots64 * state.pane_capacity + (panes - state.origin), -1)

    def holistic_for(self, plan: HolisticPlan) -> GpuHolistic:
        """The holistic step's sort and selection kernels in the plan's form
        (`runtime.gpu.holistic`)."""
        form = plan.gpu_form or "warp-per-window"
        found = self._holistic.get(form)
        if found is None:
            found = self._holistic[form] = GpuHolistic(device.cupy(), self.compiler.module, form)
        return found

    # -- session windows (`operators.session_window`; kernels in `gpu/sessions.py`) ----------

    @property
    def sessions(self) -> GpuSessions:
        if self._sessions is None:
            self._sessions = GpuSessions(device.cupy(), self.compiler.module, self._session_state)
        return self._sessions

    def _session_state(self, fields: tuple[StateField, ...]) -> GpuPaneState:
        """One pane state per set of fields for the sessions' combine (its merge scratch is
        allocated once)."""
        found = self._session_states.get(fields)
        if found is None:
            found = self._session_states[fields] = self.new_pane_state(fields)
        return found

    def batch_sessions(self, slots, starts, gap: int, n_slots: int) -> tuple:
        return self.sessions.batch_sessions(slots, starts, gap, n_slots)

    def assign_sessions(
        self, slots, starts, ends, n_slots: int, disjoint_first: int | None = None
    ) -> tuple:
        return self.sessions.assign_sessions(slots, starts, ends, n_slots, disjoint_first)

    def combine_sessions(
        self, fields: tuple[StateField, ...], numbers, count: int, partials: dict
    ) -> dict:
        return self.sessions.combine_sessions(fields, numbers, count, partials)

    @property
    def sketches(self) -> GpuSketches:
        """APPROX_COUNT_DISTINCT's HLL registers on the device (`runtime.gpu.sketches`)."""
        if self._sketches is None:
            self._sketches = GpuSketches(device.cupy(), self.compiler.module, pinned.download_one)
        return self._sketches

    def to_host(self, array) -> np.ndarray:
        cp = device.cupy()
        if isinstance(array, cp.ndarray):
            return cp.asnumpy(array)
        return np.asarray(array)

    def from_host(self, array: np.ndarray):
        return device.cupy().asarray(array)


__all__ = ["GpuKernelMetrics", "GpuKernels"]
