"""The host half of staging: rows cut into chunks, and each chunk's columns copied into a
pinned buffer by numba loops run in parallel slices, 64-bit integer columns narrowed to int32
offsets in the same pass (`compiler.wire` says which columns; issue 12, items 2 and 4).

numpy and numba, no CuPy: the stager (`gpu.staging`) hands `fill_chunk` numpy views of its
pinned memory, and the tests hand it ordinary arrays. The loops are numba's (parallel, the
GIL released): numpy ufuncs on a thread pool, the first form, reached a quarter of their rate
on the H100 host (measured 2026-11-26, see `CopyPool`).

One pass per column: an offset column is written as `value - base` (int32, wrapping: the low
32 bits of the value less those of the base) with `base` the chunk's first value, and each
slice takes the min and max of each block of its slice while the block is still in its core's
cache. The chunk is narrow when every offset fits int32 (min - base >= -2^31 and max - base
< 2^31; `base` lies within [min, max], so any chunk whose range is below 2^31 fits);
otherwise it is copied again at 8 bytes (rare: a chunk spanning more than 35 minutes of event
time, or keys more than 2^31 apart). The min and max also serve the event-time range check of
the input conformer, which then needs no pass of its own.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mangonel.runtime.gpu.host_loops import (
    MAX_THREADS,
    MIN_TASK_ROWS,
    copy_into,
    fill_into,
    tasks_for,
)

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
# fill_into takes homogeneous tuples of at least one array: these pad an empty group
_NO_INT64 = np.zeros(0, np.int64)
_NO_INT32 = np.zeros(0, np.int32)
_NO_BYTES = np.zeros(0, np.uint8)


def _read_only(array: np.ndarray) -> np.ndarray:
    """A read-only view: numba types a tuple of arrays as homogeneous only when their
    flags agree, and the user's Arrow buffers are read-only, so every source is passed so."""
    view = array.view()
    view.flags.writeable = False
    return view


def chunk_bounds(rows: int, chunk_rows: int) -> list[tuple[int, int]]:
    """[(first, end)] of `rows` cut into the fewest chunks of at most `chunk_rows`, of equal
    size to a row (a 4 M-row batch at 1 M: four chunks; 1.5 M: two of 750 K)."""
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be positive, not {chunk_rows}")
    if rows <= 0:
        return [(0, 0)]
    chunks = -(-rows // chunk_rows)
    return [(rows * c // chunks, rows * (c + 1) // chunks) for c in range(chunks)]


def fits_offsets(low: int, high: int, base: int) -> bool:
    """Do the values in [low, high] fit int32 offsets from `base`?"""
    return low - base >= INT32_MIN and high - base <= INT32_MAX


def default_threads() -> int:
    """One copy thread per core, at most 16 (the copy is memory bound well before)."""
    return max(1, min(MAX_THREADS, os.cpu_count() or 1))


@dataclass(frozen=True)
class ChunkSource:
    """One host array of a chunk's columns and where it goes: `target` is a uint8 view of
    the chunk's region of the pinned buffer (8 bytes a row for an offset column, its
    itemsize otherwise); `offset`: write int32 offsets from the chunk's first value when
    they fit (the array must be int64)."""

    array: np.ndarray
    target: np.ndarray
    offset: bool


@dataclass(frozen=True)
class ChunkWire:
    """How one source of a chunk went on the wire: `narrow` (int32 offsets from `base`),
    the bytes written, and, for offset columns, the min and max value of the chunk."""

    narrow: bool
    base: int
    nbytes: int
    low: int | None
    high: int | None


class CopyPool:
    """The host copy pass with `threads` threads (`default_threads()` for 0): each chunk's
    columns are copied (and narrowed) by numba kernels whose loops run in parallel slices on
    numba's thread pool, the GIL released. Measured on the H100 host (16 cores, 2026-11-26,
    three 8-byte columns, two narrowed, 1 M-row chunks): 1.63 G rows/s at 16 threads, against
    0.37 G for the numpy ufuncs on a ThreadPoolExecutor it replaced (their hand-off alone cost
    ~240 us a chunk, and each thread took the GIL between its ufunc calls)."""

    def __init__(self, threads: int = 0) -> None:
        if threads < 0:
            raise ValueError(f"staging threads must be >= 0, not {threads}")
        self.threads = threads or default_threads()

    def tasks(self, rows: int) -> int:
        """Slices for a chunk of `rows`: one per thread, each of at least MIN_TASK_ROWS."""
        return tasks_for(rows, self.threads)

    def slices(self, first: int, end: int) -> list[tuple[int, int]]:
        """[first, end) cut as the kernels cut it: `tasks` slices of equal size to a row."""
        rows = end - first
        tasks = self.tasks(rows)
        return [(first + rows * t // tasks, first + rows * (t + 1) // tasks) for t in range(tasks)]

    def fill_chunk(self, sources: Sequence[ChunkSource], first: int, end: int) -> list[ChunkWire]:
        """Copy rows [first, end) of every source into its target, offset columns narrowed
        where the chunk's range allows: one parallel pass over all columns (`fill_into`), and
        a second, wide copy for an offset column whose chunk does not fit. Every source's
        target is written from its byte 0."""
        rows = end - first
        if not rows:
            return [ChunkWire(s.offset, 0, 0, None, None) for s in sources]
        tasks = self.tasks(rows)
        narrowed = [s for s in sources if s.offset]
        copied = [s for s in sources if not s.offset]
        narrow_parts = tuple(_read_only(s.array[first:end]) for s in narrowed)
        # the chunk's first value as base: within [min, max], so the range decides the fit
        bases = np.array([int(part[0]) for part in narrow_parts] or [0], np.int64)
        lows, highs = fill_into(
            narrow_parts or (_read_only(_NO_INT64),),
            tuple(s.target[: 4 * rows].view(np.int32) for s in narrowed) or (_NO_INT32,),
            bases,
            len(narrowed),
            tuple(_read_only(s.array[first:end].view(np.uint8)) for s in copied)
            or (_read_only(_NO_BYTES),),
            tuple(s.target[: rows * s.array.itemsize] for s in copied) or (_NO_BYTES,),
            np.array([s.array.itemsize for s in copied] or [0], np.int64),
            len(copied),
            rows,
            tasks,
        )
        wires = []
        narrow_index = 0
        for source in sources:
            if not source.offset:
                wires.append(ChunkWire(False, 0, rows * source.array.itemsize, None, None))
                continue
            column = narrow_index
            narrow_index += 1
            low, high = int(lows[column].min()), int(highs[column].max())
            base = int(bases[column])
            narrow = fits_offsets(low, high, base)
            if not narrow:  # rare: the chunk spans more than int32 offsets can; again at 8 bytes
                wide_view = source.target[: rows * 8].view(source.array.dtype)
                copy_into(source.array[first:end], wide_view, tasks)
            wires.append(
                ChunkWire(narrow, base if narrow else 0, rows * (4 if narrow else 8), low, high)
            )
        return wires

    def close(self) -> None:
        """Nothing to release: numba's thread pool belongs to the process."""


_SHARED: dict[tuple[int, int], CopyPool] = {}


def shared_pool(threads: int = 0) -> CopyPool:
    """The process's copy pool of that many threads (0: one per core, at most 16), made on
    first use: every stager shares it, so a query run again starts no threads. Stagers of one
    thread use it in turn; the pool's executor also takes tasks from several threads. Keyed
    by process id too: a forked child has none of its parent's threads, so it makes its own."""
    key = (os.getpid(), threads)
    pool = _SHARED.get(key)
    if pool is None:
        pool = _SHARED[key] = CopyPool(threads)
    return pool


def read_chunk(wire: ChunkWire, data: np.ndarray, rows: int) -> np.ndarray:
    """The int64 values of an offset column's chunk as the kernels read them (base + offset,
    or the wide values): the host twin of the generated read, for tests and checks."""
    if wire.narrow:
        return data[: 4 * rows].view(np.int32).astype(np.int64) + wire.base
    return data[: 8 * rows].view(np.int64).copy()


__all__ = [
    "MIN_TASK_ROWS",
    "INT32_MAX",
    "INT32_MIN",
    "ChunkSource",
    "ChunkWire",
    "CopyPool",
    "chunk_bounds",
    "default_threads",
    "fits_offsets",
    "read_chunk",
    "shared_pool",
]
