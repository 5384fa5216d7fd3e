"""Staging Arrow columns for the device: reused pinned buffers, a parallel host copy pass, a
copy stream, chunk after chunk (issue 12, items 2 and 4).

Arrow batch -> pinned host staging -> asynchronous host-to-device copies on a copy stream.
A batch of any size is cut into chunks (`GpuOptions.chunk_rows`); the host copy pass
(`wire.CopyPool`: numba loops in parallel slices) copies chunk c's columns into a pinned
buffer borrowed from the process's pool (`gpu.pinned`), in the wire format of
`compiler.wire` (64-bit integer columns as int32 offsets from the chunk's first value where
the chunk's range fits, else 8 bytes; the others at their declared width), then chunk c's
host-to-device copies are queued, the buffer goes back with their event, and the pass goes
on with chunk c + 1 in another buffer while they run; the compute stream waits on chunk c's
event only. Buffers outlive the stager: cudaHostAlloc costs ~10 ms for 16 MB.

A column whose Arrow buffer already lives in pinned memory (a source that generates into
pinned batches, as the pinned-source harness does) is copied straight from it, at its full
width: no host pass at all (its event times' extremes are measured by the device). Only the
columns a query reads travel (STRING as int32 dictionary ids, BOOLEAN as one byte); a
validity byte array travels only for columns that hold NULLs.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from mangonel.catalog.types import SqlType
from mangonel.compiler import codegen
from mangonel.compiler.codegen import GeneratedModule
from mangonel.runtime.gpu import device, pinned
from mangonel.runtime.gpu.compile import shared_context
from mangonel.runtime.gpu.device import cupy
from mangonel.runtime.gpu.wire import (
    ChunkSource,
    ChunkWire,
    DeviceCalls,
    Pending,
    chunk_bounds,
    shared_pool,
    shared_worker,
)
from mangonel.runtime.host.arrays import to_values
from mangonel.runtime.host.keys import StringDictionary

_HOST_MEMORY = 1  # cudaMemoryTypeHost: page-locked host memory
# batches of one stager in flight at most (the worker's queue): the one being processed and
# the two a runner names ahead of it (`TimeWindowOperator.prefetch_depth` with a copy worker)
IN_FLIGHT = 3
_ALIGN = 256
_EXTREMES_SLOTS = 16  # pinned (min, max) pairs of a stager: a block of them, taken in turn
_EXTREMES_PARTS = 256  # a measured column's ranges, a block each (then one block over them)


def _is_pinned(address: int) -> bool:
    """Is this host address in page-locked memory (so the copy engine can read it as is)?"""
    runtime = cupy().cuda.runtime
    try:
        return runtime.pointerGetAttributes(address).type == _HOST_MEMORY
    except runtime.CUDARuntimeError:
        return False


def _plain_values(array: pa.Array, sql_type: SqlType) -> np.ndarray | None:
    """A zero-copy numpy view of a NULL-free fixed-width column already in its device type
    (int64/int32/float64/float32/timestamp[us]); None when it needs converting."""
    if array.null_count or sql_type in (SqlType.STRING, SqlType.BOOLEAN):
        return None
    if pa.types.is_timestamp(array.type):
        if array.type.unit != "us":
            return None
        array = array.view(pa.int64())
    dtype = np.dtype(sql_type.info.numpy)
    try:
        values = array.to_numpy(zero_copy_only=True)
    except (pa.ArrowInvalid, NotImplementedError):
        return None
    return values if values.dtype == dtype else None


@dataclass
class StagedChunk:
    """One chunk of a staged batch: rows [first, end), the copy stream's event after its
    copies, and per column how its values went on the wire (narrow: base + int32 offset)."""

    first: int
    end: int
    event: Any
    wires: list[ChunkWire]  # one per column (values; validity is never narrowed)


@dataclass
class StagedBatch:
    """A batch's columns on the device (values, validity or None per column; an offset
    column's values as a uint8 buffer of 8 bytes a row, chunk c's data at byte 8 * first),
    the chunks, and the min/max of each offset column over the batch's rows (None where
    no pass read it: a column copied straight from pinned memory and not `measured` by
    `Stager.stage_later`, or no rows)."""

    inputs: list[Any]
    chunks: list[StagedChunk]
    offsets: tuple[bool, ...]
    extremes: list[tuple[int, int] | None] = field(default_factory=list)

    def chunk_arguments(self, chunk: StagedChunk, whole: bool = False) -> list[Any]:
        """The kernel arguments of the columns for one chunk: per column its values (the
        chunk's view), then for an offset column its base (int64) and wide flag (int32),
        then its validity (the chunk's view, or None). `whole`: the batch is one chunk."""
        arguments: list[Any] = []
        first, end = chunk.first, chunk.end
        for k, offset in enumerate(self.offsets):
            values, valid = self.inputs[2 * k], self.inputs[2 * k + 1]
            if offset:
                wire = chunk.wires[k]
                arguments += [
                    values if whole else values[8 * first : 8 * end],
                    np.int64(wire.base),
                    np.int32(0 if wire.narrow else 1),
                ]
            else:
                arguments.append(values if whole or values is None else values[first:end])
            arguments.append(valid if whole or valid is None else valid[first:end])
        return arguments

    def wire_bytes(self) -> int:
        """Bytes of values that crossed (or will cross) PCIe for this batch."""
        return sum(w.nbytes for chunk in self.chunks for w in chunk.wires)


@functools.cache
def _driver() -> ctypes.CDLL:
    return ctypes.CDLL("libcuda.so.1")


@functools.cache
def driver_functions() -> tuple[int, int, int, int, int]:
    """The addresses of the CUDA driver calls the staging loop makes (`DeviceCalls`):
    cuCtxSetCurrent, cuMemcpyHtoDAsync_v2, cuEventRecord, cuEventSynchronize,
    cuStreamWaitEvent. The driver's,
    not CuPy's runtime's: one libcuda serves the process, and its streams and events are
    the handles CuPy's objects hold."""
    driver = _driver()
    names = (
        "cuCtxSetCurrent",
        "cuMemcpyHtoDAsync_v2",
        "cuEventRecord",
        "cuEventSynchronize",
        "cuStreamWaitEvent",
    )
    return tuple(ctypes.cast(getattr(driver, name), ctypes.c_void_p).value for name in names)


def current_context() -> int:
    """The CUDA context current in this thread (CuPy's): the copy worker's thread makes it
    current before its driver calls."""
    context = ctypes.c_void_p()
    status = _driver().cuCtxGetCurrent(ctypes.byref(context))
    if status:
        raise RuntimeError(f"cuCtxGetCurrent failed: CUresult {status}")
    return context.value or 0


@dataclass(eq=False)  # compared by identity: it holds arrays
class DeviceExtremes:
    """The (min, max) of a column read straight from pinned memory, measured by the device
    once the column is there: two int64 words copied into `slot` (pinned host memory)
    before `event`."""

    event: Any
    slot: np.ndarray

    @property
    def ready(self) -> bool:
        return bool(self.event.done)

    def result(self) -> tuple[int, int]:
        self.event.synchronize()
        return int(self.slot[0]), int(self.slot[1])


@dataclass(eq=False)  # compared by identity: it holds arrays
class PendingBatch:
    """A batch whose staging may still run in the copy worker: `result()` waits for it and
    gives the StagedBatch (its chunks' events are recorded by then), hands the pinned
    buffer back with the last chunk's event, and keeps pinned sources alive until their
    copies are done. `through`: the host arrays that went through the copy pass (`staged`
    gives their wires); `after`: the event the copy stream waits for first (alive until
    the worker's stream has waited for it)."""

    stager: Stager
    host: list[np.ndarray | None]
    inputs: list[Any]
    through: list[int]
    bounds: list[tuple[int, int]]
    events: list[Any]
    offsets: tuple[bool, ...]
    staged: Pending | None
    buffer: pinned.PinnedBuffer | None
    kept: list[np.ndarray]
    after: Any
    # the (min, max) of the `measured` column where it was read straight from pinned memory
    direct_extremes: dict[int, DeviceExtremes]
    _result: StagedBatch | None = field(default=None, init=False)

    @property
    def ready(self) -> bool:
        """Whether `result()` would not wait (for the copy worker, or the device's measure of
        a pinned column)."""
        if self._result is not None:
            return True
        measures = self.direct_extremes.values()
        return (self.staged is None or self.staged.ready) and all(m.ready for m in measures)

    def result(self) -> StagedBatch:
        if self._result is None:
            self._result = self._finish()
        return self._result

    def _finish(self) -> StagedBatch:
        stager, last = self.stager, self.events[-1]
        stager._in_flight = [pending for pending in stager._in_flight if pending is not self]
        try:
            through_wires = None if self.staged is None else self.staged.result()
        except BaseException:
            stager.copy_stream.synchronize()  # whatever was queued is done: the buffer is free
            if self.buffer is not None:
                pinned.give_back(self.buffer)
            raise
        if self.buffer is not None:
            pinned.give_back(self.buffer, last)
        if self.kept:
            stager._direct.append((last, self.kept))
        host, columns = self.host, len(self.offsets)
        empty = ChunkWire(False, 0, 0, None, None)
        chunks = []
        lows: list[int | None] = [None] * columns
        highs: list[int | None] = [None] * columns
        for c, ((first, end), event) in enumerate(zip(self.bounds, self.events, strict=True)):
            wires = [
                empty if a is None else ChunkWire(False, 0, (end - first) * a.itemsize, None, None)
                for a in host
            ]
            if through_wires is not None:
                for i, wire in zip(self.through, through_wires[c], strict=True):
                    wires[i] = wire
            column_wires = [wires[2 * k] for k in range(columns)]
            for k, wire in enumerate(column_wires):
                if wire.low is not None:
                    lows[k] = wire.low if lows[k] is None else min(lows[k], wire.low)
                    highs[k] = wire.high if highs[k] is None else max(highs[k], wire.high)
            chunks.append(StagedChunk(first, end, event, column_wires))
        extremes = [
            None if low is None else (low, high) for low, high in zip(lows, highs, strict=True)
        ]
        for k, measure in self.direct_extremes.items():
            extremes[k] = measure.result()
            stager._extremes_slots.append(measure.slot)
        return StagedBatch(self.inputs, chunks, self.offsets, extremes)


class Stager:
    """The host copy pass and a copy stream for the columns of one operator (pinned
    buffers come from the process's pool).

    `strings` is the dictionary STRING columns are encoded into: the stager adds to it but
    does not own it. Its owner (`GpuKernels`) hands the same dictionary to its key maps and
    reads string literals' ids from it, because string literals, column-to-column comparisons
    and STRING keys need the same id for the same text everywhere in one operator.
    `threads`: host copy threads (0: one per core, at most 16); `module_of` compiles the
    kernels that measure a pinned column (default: the process's shared context)."""

    def __init__(
        self,
        strings: StringDictionary,
        threads: int = 0,
        module_of: Callable[[GeneratedModule], Any] | None = None,
    ) -> None:
        cp = cupy()
        self.copy_stream = cp.cuda.Stream(non_blocking=True)
        self.pool = shared_pool(threads)
        self.strings = strings
        # arrays copied straight from pinned memory: kept alive until their copy is done
        self._direct: list[tuple[Any, list[np.ndarray]]] = []
        self._in_flight: list[PendingBatch] = []  # batches whose copies may be queued yet
        # a pinned column's (min, max) is measured on this stream once its copy is done, by
        # kernels compiled at the first such column, into device words reused in stream order
        self._module_of = module_of
        self._measure: tuple[Any, dict[str, Any], Any, Any] | None = None
        self._extremes_slots: list[np.ndarray] = []  # idle pinned (min, max) pairs
        self._extremes_memory: list[Any] = []  # the pinned blocks the slots are views of
        self._literal_cache: dict[tuple, Any] = {}

    def host_columns(
        self, arrays: list[pa.Array], columns, offsets: tuple[bool, ...] | None = None
    ) -> list[np.ndarray | None]:
        """Each column as (values, validity or None) numpy arrays of its device type. The
        NULL slots of an offset column hold one of its valid values (not 0), so NULLs never
        widen the chunk's range."""
        host: list[np.ndarray | None] = []
        for k, (array, column) in enumerate(zip(arrays, columns, strict=True)):
            if isinstance(array, pa.ChunkedArray):
                array = array.combine_chunks()
            plain = _plain_values(array, column.type)
            if plain is not None:  # no NULLs, already the device type: a view of the buffer
                host += [plain, None]
                continue
            if column.type is SqlType.STRING:
                codes, is_null = self.strings.encode(array)
                values, valid = np.asarray(codes, np.int32), ~is_null
            else:
                dtype = (
                    np.dtype(np.uint8) if column.type is SqlType.BOOLEAN else column.type.info.numpy
                )
                values, valid = to_values(array, dtype)
            values = np.ascontiguousarray(values)
            all_valid = bool(valid.all())
            if offsets is not None and offsets[k] and not all_valid and valid.any():
                values = values.copy() if not values.flags.writeable else values
                values[~valid] = values[int(np.argmax(valid))]
            host.append(values)
            host.append(None if all_valid else valid.astype(np.uint8))
        return host

    def stage(self, arrays: list[pa.Array], columns) -> list:
        """Device arrays (values, validity or None per column, each in its device type) of
        the batch's columns; the compute (current) stream waits for their copies."""
        staged = self.stage_batch(arrays, columns, None, None)
        cupy().cuda.get_current_stream().wait_event(staged.chunks[-1].event)
        return staged.inputs

    def stage_batch(
        self,
        arrays: list[pa.Array],
        columns,
        chunk_rows: int | None,
        offsets: tuple[bool, ...] | None,
    ) -> StagedBatch:
        """`stage_later`, waited for."""
        return self.stage_later(arrays, columns, chunk_rows, offsets, background=False).result()

    def stage_later(
        self,
        arrays: list[pa.Array],
        columns,
        chunk_rows: int | None,
        offsets: tuple[bool, ...] | None,
        background: bool = True,
        measured: int | None = None,
    ) -> PendingBatch:
        """Copy the batch's columns to the device chunk after chunk (`chunk_rows` rows each;
        None: one chunk), each chunk's event recorded on the copy stream; the compute stream
        waits for none: the caller waits for chunk c's event before its kernel, so that
        kernel runs while the next chunk is still crossing PCIe. `offsets[k]`: column k (an
        int64 column) travels as int32 offsets where a chunk's range fits.

        `background`: the copy pass and its copies run in the process's copy worker
        (`wire.CopyWorker`) while the caller goes on; `result()` of the returned batch waits
        for them (no chunk event may be waited on before: it is recorded by the worker).

        `measured`: the int64 column whose (min, max) the batch's `extremes` must give (the
        event time: the range check and the firing decision read it). The copy pass
        measures every column it narrows; a column copied straight from pinned memory is
        measured by the device once its copy is done (`_measure_on_device`), where the
        host would otherwise read it again (a parallel pass over a 2 M-row batch's event
        times took 0.65 ms of its 1.48 on the H100 host, 2026-12-07, against microseconds
        of the device's bandwidth).

        Stream discipline: the device arrays are allocated on the compute (current) stream, so
        CuPy's stream-aware pool hands this stream a block only once its earlier users are
        enqueued there; the copy stream first waits for everything enqueued on the compute
        stream (the block's last reader included), then copies; the compute stream waits for
        the copies. No block is ever written by one stream while another may still read it.
        IN_FLIGHT batches of a stager may be in flight (the worker runs them in order, so the copy
        stream's order is theirs); a batch this thread enqueues copies for itself (pinned
        sources, or nothing through the host pass) first waits for those in flight.
        """
        cp = cupy()
        offsets = offsets or (False,) * len(columns)
        compute = cp.cuda.get_current_stream()
        host = self.host_columns(arrays, columns, offsets)
        rows = len(host[0]) if host and host[0] is not None else 0
        # per host array (values, validity alternate): narrowed?, read straight from pinned?
        narrowable = [offsets[i // 2] and i % 2 == 0 for i in range(len(host))]
        direct = [a is not None and a.nbytes > 0 and _is_pinned(a.ctypes.data) for a in host]
        through = [i for i, a in enumerate(host) if a is not None and not direct[i] and rows]
        own_copies = not through or any(direct)  # this thread enqueues on the copy stream
        for earlier in list(self._in_flight):
            # a batch the worker stages may not have queued its copies yet: one whose copies
            # this thread enqueues goes after it (batches of pinned sources queued theirs)
            behind = own_copies and earlier.staged is not None
            if behind or earlier.ready or len(self._in_flight) >= IN_FLIGHT:
                earlier.result()  # finished: its buffer goes back (it leaves the list)
        inputs = [
            None
            if array is None
            else cp.empty(8 * len(array), cp.uint8)
            if narrowable[i]
            else cp.empty(array.shape, array.dtype)
            for i, array in enumerate(host)
        ]
        ready = cp.cuda.Event(disable_timing=True)
        ready.record(compute)
        if own_copies:
            self.copy_stream.wait_event(ready)
        self._release_direct()
        bounds = chunk_bounds(rows, chunk_rows or max(rows, 1))
        events = [cp.cuda.Event(disable_timing=True) for _ in bounds]
        kept = []
        for i, array in enumerate(host):  # pinned sources: copied as they are, first
            if array is not None and direct[i]:
                inputs[i].data.copy_from_host_async(
                    array.ctypes.data, array.nbytes, self.copy_stream
                )
                kept.append(array)
        direct_extremes = {}
        if measured is not None and direct[2 * measured]:  # before the worker queues more
            column = inputs[2 * measured].view(host[2 * measured].dtype)
            direct_extremes[measured] = self._measure_on_device(column)
        buffer, staged = None, None
        if through:
            largest = max(end - first for first, end in bounds)
            regions, slot_bytes = [], 0
            for i in through:
                regions.append(slot_bytes)
                width = 8 if narrowable[i] else host[i].itemsize
                slot_bytes += device.round_up(largest * width, _ALIGN)
            slots = min(len(bounds), pinned.RING)  # chunk c + 1 fills one while c's copy reads
            buffer = pinned.borrow(slot_bytes * slots)
            sources = [
                ChunkSource(host[i], region, narrowable[i])
                for i, region in zip(through, regions, strict=True)
            ]
            calls = DeviceCalls(
                driver_functions(),
                current_context(),
                self.copy_stream.ptr,
                ready.ptr,
                tuple(inputs[i].data.ptr for i in through),
                tuple(event.ptr for event in events),
            )
            worker = shared_worker() if background else None
            staged = self.pool.stage_later(
                sources,
                buffer.view[: slot_bytes * slots],
                slot_bytes,
                [b[0] for b in bounds] + [rows],
                calls,
                worker,
            )
        else:  # nothing through the host pass: this thread records the chunks' events
            for event in events:
                event.record(self.copy_stream)
        pending = PendingBatch(
            self,
            host,
            inputs,
            through,
            bounds,
            events,
            tuple(offsets),
            staged,
            buffer,
            kept,
            ready,
            direct_extremes,
        )
        self._in_flight.append(pending)
        return pending

    def _measure_on_device(self, column: Any) -> DeviceExtremes:  # noqa: ANN401
        """The (min, max) of a device int64 column whose copy is queued on the copy stream:
        reduced on the measure stream once the copy is done (the copy stream goes on with the
        next batch meanwhile; `extremes.cu.j2`, two launches: CuPy's min, max and stack cost
        0.19 ms of host time a batch on the H100 host), the two words copied into a pinned
        slot. The device words are reused: the measure stream runs one batch after another."""
        cp = cupy()
        if self._measure is None:
            generated = codegen.render_extremes_kernels()
            module = (self._module_of or shared_context().module)(generated)
            functions = {role: module.get_function(n) for role, n in generated.names.items()}
            stream = cp.cuda.Stream(non_blocking=True)
            with stream:
                partial = cp.empty(2 * _EXTREMES_PARTS, cp.int64)
                found = cp.empty(2, cp.int64)
            self._measure = (stream, functions, partial, found)
        stream, functions, partial, found = self._measure
        if not self._extremes_slots:  # a lost slot (a batch that failed) is not missed
            memory = cp.cuda.alloc_pinned_memory(16 * _EXTREMES_SLOTS)
            self._extremes_memory.append(memory)
            words = np.frombuffer(memory, np.int64, 2 * _EXTREMES_SLOTS)
            self._extremes_slots = [words[2 * i : 2 * i + 2] for i in range(_EXTREMES_SLOTS)]
        slot = self._extremes_slots.pop()
        copied = cp.cuda.Event(disable_timing=True)
        copied.record(self.copy_stream)
        stream.wait_event(copied)
        rows = int(column.shape[0])
        parts = max(1, min(_EXTREMES_PARTS, rows))
        threads = (codegen.EXTREMES_THREADS,)
        with stream:  # CuPy launches on the current stream
            functions["part_extremes"](
                (parts,), threads, (column, np.int64(rows), np.int64(parts), partial)
            )
            functions["extremes"]((1,), threads, (partial, np.int64(parts), found))
        found.data.copy_to_host_async(slot.ctypes.data, 16, stream)
        event = cp.cuda.Event(disable_timing=True)
        event.record(stream)
        return DeviceExtremes(event, slot)

    def _release_direct(self) -> None:
        """Drop the pinned sources whose copies are done."""
        self._direct = [(event, arrays) for event, arrays in self._direct if not event.done]

    def literal_ids(self, literals: tuple[str, ...]):
        """Device int32 ids of the plan's string literals in each STRING column's dictionary
        (-1 when a literal was never seen: then no row can equal it)."""
        cp = cupy()
        ids = []
        for text in literals:
            ids.append(self.strings.ids.get(text, -1))
        key = tuple(ids)
        cached = self._literal_cache.get(key)
        if cached is None:
            cached = cp.asarray(np.array(ids or [-1], np.int32))
            self._literal_cache[key] = cached
        return cached
