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
width: no host pass at all. Only the columns a query reads travel (STRING as int32
dictionary ids, BOOLEAN as one byte); a validity byte array travels only for columns that
hold NULLs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from mangonel.catalog.types import SqlType
from mangonel.runtime.gpu import pinned
from mangonel.runtime.gpu.device import cupy
from mangonel.runtime.gpu.wire import ChunkSource, ChunkWire, chunk_bounds, shared_pool
from mangonel.runtime.host.arrays import to_values
from mangonel.runtime.host.keys import StringDictionary

_HOST_MEMORY = 1  # cudaMemoryTypeHost: page-locked host memory
_ALIGN = 256


def _aligned(nbytes: int) -> int:
    return (nbytes + _ALIGN - 1) // _ALIGN * _ALIGN


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
    the column was not read by a host pass: pinned, or no rows)."""

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


class Stager:
    """The host copy pass and a copy stream for the columns of one operator (pinned
    buffers come from the process's pool).

    `strings` is the dictionary STRING columns are encoded into: the stager adds to it but
    does not own it. Its owner (`GpuKernels`) hands the same dictionary to its key maps and
    reads string literals' ids from it, because string literals, column-to-column comparisons
    and STRING keys need the same id for the same text everywhere in one operator.
    `threads`: host copy threads (0: one per core, at most 16)."""

    def __init__(self, strings: StringDictionary, threads: int = 0) -> None:
        cp = cupy()
        self.copy_stream = cp.cuda.Stream(non_blocking=True)
        self.pool = shared_pool(threads)
        self.strings = strings
        # arrays copied straight from pinned memory: kept alive until their copy is done
        self._direct: list[tuple[Any, list[np.ndarray]]] = []
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
        """Copy the batch's columns to the device chunk after chunk (`chunk_rows` rows each;
        None: one chunk), each chunk's event recorded on the copy stream; the compute stream
        waits for none: the caller waits for chunk c's event before its kernel, so that
        kernel runs while the next chunk is still crossing PCIe. `offsets[k]`: column k (an
        int64 column) travels as int32 offsets where a chunk's range fits.

        Stream discipline: the device arrays are allocated on the compute (current) stream, so
        CuPy's stream-aware pool hands this stream a block only once its earlier users are
        enqueued there; the copy stream first waits for everything enqueued on the compute
        stream (the block's last reader included), then copies; the compute stream waits for
        the copies. No block is ever written by one stream while another may still read it.
        """
        cp = cupy()
        offsets = offsets or (False,) * len(columns)
        compute = cp.cuda.get_current_stream()
        host = self.host_columns(arrays, columns, offsets)
        rows = len(host[0]) if host and host[0] is not None else 0
        # per host array (values, validity alternate): narrowed?, read straight from pinned?
        narrowable = [offsets[i // 2] and i % 2 == 0 for i in range(len(host))]
        direct = [a is not None and a.nbytes > 0 and _is_pinned(a.ctypes.data) for a in host]
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
        self.copy_stream.wait_event(ready)
        self._release_direct()
        kept: list[np.ndarray] = []
        bounds = chunk_bounds(rows, chunk_rows or max(rows, 1))
        chunks = []
        lows: list[int | None] = [None] * len(columns)
        highs: list[int | None] = [None] * len(columns)
        for first, end in bounds:
            wires, buffer = self._stage_chunk(host, inputs, narrowable, direct, first, end, kept)
            event = cp.cuda.Event(disable_timing=True)
            event.record(self.copy_stream)
            if buffer is not None:
                pinned.give_back(buffer, event)
            column_wires = [wires[2 * k] for k in range(len(columns))]
            for k, wire in enumerate(column_wires):
                if wire.low is not None:
                    lows[k] = wire.low if lows[k] is None else min(lows[k], wire.low)
                    highs[k] = wire.high if highs[k] is None else max(highs[k], wire.high)
            chunks.append(StagedChunk(first, end, event, column_wires))
        if kept:
            self._direct.append((chunks[-1].event, kept))
        extremes = [
            None if low is None else (low, high) for low, high in zip(lows, highs, strict=True)
        ]
        return StagedBatch(inputs, chunks, tuple(offsets), extremes)

    def _stage_chunk(
        self, host, inputs, narrowable, direct, first, end, kept
    ) -> tuple[list[ChunkWire], pinned.PinnedBuffer | None]:
        """Rows [first, end) of every host array: pageable ones through a borrowed pinned
        buffer (the copy pass, narrowing where allowed), pinned ones straight; then their
        copies. Returns each array's wire and the buffer used (None: none), which the caller
        hands back with the event after these copies."""
        rows = end - first
        regions = []  # (host index, byte offset in the slot) of the arrays that go through it
        nbytes = 0
        for i, array in enumerate(host):
            if array is None or direct[i] or rows == 0:
                continue
            regions.append((i, nbytes))
            nbytes += _aligned(rows * (8 if narrowable[i] else array.itemsize))
        wires: dict[int, ChunkWire] = {}
        source_of: dict[int, int] = {}
        buffer = None
        if regions:
            buffer = pinned.borrow(nbytes)
            slot = buffer.view
            sources = []
            for i, start in regions:
                width = 8 if narrowable[i] else host[i].itemsize
                sources.append(
                    ChunkSource(host[i], slot[start : start + rows * width], narrowable[i])
                )
            for (i, start), wire in zip(
                regions, self.pool.fill_chunk(sources, first, end), strict=True
            ):
                wires[i] = wire
                source_of[i] = slot[start:].ctypes.data
        for i, array in enumerate(host):
            if array is None:
                continue
            width = 8 if narrowable[i] else array.itemsize
            if i not in wires:  # pinned (copied as it is) or an empty chunk
                wires[i] = ChunkWire(False, 0, rows * array.itemsize, None, None)
                if rows:
                    source_of[i] = array.ctypes.data + first * array.itemsize
                    kept.append(array)
            if rows:
                (inputs[i].data + first * width).copy_from_host_async(
                    source_of[i], wires[i].nbytes, self.copy_stream
                )
        empty = ChunkWire(False, 0, 0, None, None)
        return [wires.get(i, empty) for i in range(len(host))], buffer

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
