"""Device plumbing: lazy CuPy, pinned staging of Arrow columns, module caches.

Arrow batch -> pinned host staging -> asynchronous host-to-device copies on a copy stream,
double-buffered: two pinned buffers alternate, so the host fills one while the other's copy
is in flight, and the compute stream waits on the copy's event only. Only the columns a query
reads travel, in the narrowest device type of the SQL type (STRING: int32 dictionary ids,
BOOLEAN: one byte); a validity byte array travels only for columns that hold NULLs.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pyarrow as pa

from mangonel.catalog.types import SqlType
from mangonel.compiler import codegen
from mangonel.runtime.cpu.evaluation import to_values
from mangonel.runtime.cpu.keys import StringDictionary


def cupy() -> Any:
    """CuPy, imported on first use (nothing outside runtime/gpu imports it)."""
    import cupy as cp

    return cp


def struct(values: list) -> list:
    """Kernel arguments of a generated struct: its members, in order (CuPy passes pointers)."""
    return list(values)


@functools.lru_cache(maxsize=64)
def key_module(words: int):
    generated = codegen.render_key_kernels(words)
    return generated, codegen.load_module(generated)


def fields_module(fields):
    generated = codegen.render_state_kernels(fields)
    return generated, codegen.load_module(generated)


class Stager:
    """Pinned double buffers and a copy stream for the columns of one operator."""

    def __init__(self) -> None:
        cp = cupy()
        self.copy_stream = cp.cuda.Stream(non_blocking=True)
        self.buffers: list[Any] = [None, None]
        self.sizes = [0, 0]
        self.turn = 0
        self.events: list[Any] = [None, None]
        # one dictionary for every STRING column: string literals and column-to-column
        # comparisons need the same id for the same text everywhere
        self.strings = StringDictionary()
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
            if column.type is SqlType.STRING:
                codes, is_null = self.strings.encode(array)
                values, valid = np.asarray(codes, np.int32), ~is_null
            else:
                dtype = np.dtype(np.uint8) if column.type is SqlType.BOOLEAN else \
                    column.type.info.numpy
                values, valid = to_values(array, dtype)
            host.append(np.ascontiguousarray(values))
            host.append(None if bool(valid.all()) else valid.astype(np.uint8))
        return host

    def stage(self, arrays: list[pa.Array], columns) -> list:
        """Device arrays (values, validity or None per column) of the batch's columns.

        Stream discipline: the device arrays are allocated on the compute (current) stream, so
        CuPy's stream-aware pool hands this stream a block only once its earlier users are
        enqueued there; the copy stream first waits for everything enqueued on the compute
        stream (the block's last reader included), then copies; the compute stream waits for
        the copies. No block is ever written by one stream while another may still read it.
        """
        cp = cupy()
        compute = cp.cuda.get_current_stream()
        host = self.host_columns(arrays, columns)
        total = sum(a.nbytes + 256 for a in host if a is not None)
        pinned = self._pinned(total)
        staged = np.frombuffer(pinned, np.uint8, total)
        targets = [None if array is None else cp.empty(array.shape, array.dtype)
                   for array in host]
        ready = cp.cuda.Event(disable_timing=True)
        ready.record(compute)
        self.copy_stream.wait_event(ready)
        offset = 0
        for array, target in zip(host, targets, strict=True):
            if array is None:
                continue
            view = staged[offset:offset + array.nbytes]
            view[:] = array.view(np.uint8)
            target.data.copy_from_host_async(view.ctypes.data, array.nbytes, self.copy_stream)
            offset += (array.nbytes + 255) // 256 * 256
        event = cp.cuda.Event(disable_timing=True)
        event.record(self.copy_stream)
        self.events[self.turn] = event
        self.turn ^= 1
        compute.wait_event(event)
        return targets

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
