"""Staging Arrow columns for the device: pinned double buffers and a copy stream.

Arrow batch -> pinned host staging -> asynchronous host-to-device copies on a copy stream,
double-buffered: two pinned buffers alternate, so the host fills one while the other's copy
is in flight, and the compute stream waits on the copy's event only. A column whose Arrow
buffer already lives in pinned memory (a source that generates into pinned batches, as the
benchmark's does) is copied straight from it: no host copy at all. Only the columns a query
reads travel, in the narrowest device type of the SQL type (STRING: int32 dictionary ids,
BOOLEAN: one byte); a validity byte array travels only for columns that hold NULLs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from mangonel.catalog.types import SqlType
from mangonel.runtime.gpu.device import cupy
from mangonel.runtime.host.arrays import to_values
from mangonel.runtime.host.keys import StringDictionary

_HOST_MEMORY = 1  # cudaMemoryTypeHost: page-locked host memory


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


class Stager:
    """Pinned double buffers and a copy stream for the columns of one operator.

    `strings` is the dictionary STRING columns are encoded into: the stager adds to it but
    does not own it. Its owner (`GpuKernels`) hands the same dictionary to its key maps and
    reads string literals' ids from it, because string literals, column-to-column comparisons
    and STRING keys need the same id for the same text everywhere in one operator."""

    def __init__(self, strings: StringDictionary) -> None:
        cp = cupy()
        self.copy_stream = cp.cuda.Stream(non_blocking=True)
        self.buffers: list[Any] = [None, None]
        self.sizes = [0, 0]
        self.turn = 0
        self.events: list[Any] = [None, None]
        self.sources: list[Any] = [None, None]
        self.strings = strings
        self._literal_cache: dict[tuple, Any] = {}

    def _pinned(self, nbytes: int):
        cp = cupy()
        index = self.turn
        if self.events[index] is not None:
            self.events[index].synchronize()  # the copy that last used this buffer is done
        if self.sizes[index] < nbytes:
            self.buffers[index] = cp.cuda.alloc_pinned_memory(max(nbytes, 1 << 20))
            self.sizes[index] = max(nbytes, 1 << 20)
        return self.buffers[index]

    def host_columns(self, arrays: list[pa.Array], columns) -> list[np.ndarray]:
        """Each column as (values, validity or None) numpy arrays of its device type."""
        host = []
        for array, column in zip(arrays, columns, strict=True):
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
            host.append(np.ascontiguousarray(values))
            host.append(None if bool(valid.all()) else valid.astype(np.uint8))
        return host

    def stage(self, arrays: list[pa.Array], columns) -> list:
        """Device arrays (values, validity or None per column) of the batch's columns; the
        compute (current) stream waits for their copies."""
        targets, events = self.stage_chunks(arrays, columns, None)
        cupy().cuda.get_current_stream().wait_event(events[-1])
        return targets

    def stage_chunks(self, arrays: list[pa.Array], columns, bounds) -> tuple[list, list]:
        """Like `stage`, but the rows are copied chunk after chunk ([(first, end)] `bounds`;
        None: one chunk) with an event after each, and the compute stream waits for none:
        the caller waits for chunk c's event before its kernel, so that kernel runs while the
        next chunk is still crossing PCIe.

        Stream discipline: the device arrays are allocated on the compute (current) stream, so
        CuPy's stream-aware pool hands this stream a block only once its earlier users are
        enqueued there; the copy stream first waits for everything enqueued on the compute
        stream (the block's last reader included), then copies; the compute stream waits for
        the copies. No block is ever written by one stream while another may still read it.
        """
        cp = cupy()
        compute = cp.cuda.get_current_stream()
        host = self.host_columns(arrays, columns)
        pinned_already = [
            a is not None and a.nbytes > 0 and _is_pinned(a.ctypes.data) for a in host
        ]
        total = sum(
            a.nbytes + 256
            for a, direct in zip(host, pinned_already, strict=True)
            if a is not None and not direct
        )
        staged = np.frombuffer(self._pinned(total), np.uint8, total) if total else None
        targets = [None if array is None else cp.empty(array.shape, array.dtype) for array in host]
        ready = cp.cuda.Event(disable_timing=True)
        ready.record(compute)
        self.copy_stream.wait_event(ready)
        sources = []  # (host address, device target, bytes per row) of every array to copy
        offset = 0
        for array, target, direct in zip(host, targets, pinned_already, strict=True):
            if array is None or array.nbytes == 0:
                continue
            if direct:
                source = array.ctypes.data
            else:
                view = staged[offset : offset + array.nbytes]
                view[:] = array.view(np.uint8)
                source = view.ctypes.data
                offset += (array.nbytes + 255) // 256 * 256
            sources.append((source, target, array.itemsize))
        events = []
        rows = len(host[0]) if host and host[0] is not None else 0
        for first, end in bounds or [(0, rows)]:
            for source, target, width in sources:
                if end > first:
                    (target.data + first * width).copy_from_host_async(
                        source + first * width, (end - first) * width, self.copy_stream
                    )
            event = cp.cuda.Event(disable_timing=True)
            event.record(self.copy_stream)
            events.append(event)
        self.events[self.turn] = events[-1]
        # the host arrays (views of the caller's buffers among them) live until that copy is
        # known done: `_pinned` waits on this event before the turn comes round again
        self.sources[self.turn] = host
        self.turn ^= 1
        return targets, events

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
