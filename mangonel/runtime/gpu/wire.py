"""The host half of staging: rows cut into chunks, and each chunk's columns copied into a
pinned buffer by a small persistent thread pool, 64-bit integer columns narrowed to int32
offsets in the same pass (`compiler.wire` says which columns; issue 12, items 2 and 4).

Pure numpy (no CuPy): the stager (`gpu.staging`) hands `fill_chunk` numpy views of its
pinned memory, and the tests hand it ordinary arrays. numpy's ufunc loops (subtract, copyto,
min/max reductions) release the GIL on large arrays, so the pool's threads copy in parallel
(checked on 2026-11-26: a pure-Python loop in one thread kept its full rate while another ran
`np.subtract(..., out=...)`, `min` and `max` over 32 M int64 rows).

One pass per column: an offset column is written as `value - base` (int32, wrapping: the low
32 bits of the value less those of the base) with `base` the chunk's first value, and each
thread takes the min and max of each block of its slice while the block is still in its core's
cache. The chunk is narrow when every offset fits int32 (min - base >= -2^31 and max - base
< 2^31; `base` lies within [min, max], so any chunk whose range is below 2^31 fits);
otherwise it is copied again at 8 bytes (rare: a chunk spanning more than 35 minutes of event
time, or keys more than 2^31 apart). The min and max also serve the event-time range check of
the input conformer, which then needs no pass of its own.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
# a thread's slice is at least this many rows: below it, waking a thread costs more than
# the copy it would do (and a 32 K-row slice of three columns fits a core's L2)
MIN_TASK_ROWS = 1 << 15
CACHE_BLOCK_ROWS = 1 << 16  # rows a thread copies per step (512 KB of an int64 column)
INT64_MAX_PLUS = 1 << 63  # above every int64: the empty minimum
INT64_MIN_LESS = -(1 << 63) - 1
MAX_THREADS = 16


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
    """A persistent pool of `threads` copy threads (`default_threads()` for 0), made once
    per stager and used for every chunk of its life."""

    def __init__(self, threads: int = 0) -> None:
        if threads < 0:
            raise ValueError(f"staging threads must be >= 0, not {threads}")
        self.threads = threads or default_threads()
        # the caller copies one slice itself: threads - 1 workers beside it
        self._executor = (
            ThreadPoolExecutor(self.threads - 1, thread_name_prefix="mangonel-stage")
            if self.threads > 1
            else None
        )

    def run(self, task, slices: Sequence[tuple[int, int]]) -> list:  # noqa: ANN001
        """task(first, end) for every slice, the first on the calling thread and the others
        on the pool's workers; results in slice order."""
        if self._executor is None or len(slices) <= 1:
            return [task(first, end) for first, end in slices]
        futures = [self._executor.submit(task, first, end) for first, end in slices[1:]]
        return [task(*slices[0]), *(future.result() for future in futures)]

    def slices(self, first: int, end: int) -> list[tuple[int, int]]:
        """[first, end) cut into one slice per thread, each of at least MIN_TASK_ROWS."""
        rows = end - first
        tasks = max(1, min(self.threads, rows // MIN_TASK_ROWS))
        return [(first + rows * t // tasks, first + rows * (t + 1) // tasks) for t in range(tasks)]

    def fill_chunk(self, sources: Sequence[ChunkSource], first: int, end: int) -> list[ChunkWire]:
        """Copy rows [first, end) of every source into its target, offset columns narrowed
        where the chunk's range allows (one pass; a second, wide one for a chunk that does
        not fit). Every source's target is written from its byte 0."""
        rows = end - first
        bases = [
            int(s.array[first]) if s.offset and rows else 0 for s in sources
        ]  # the chunk's first value: within [min, max], so the range decides the fit
        # the base's low 32 bits as a signed int32 (what the truncating copy subtracts)
        low_bases = [np.int32((b + (1 << 31)) % (1 << 32) - (1 << 31)) for b in bases]
        narrow_views = [s.target[: 4 * rows].view(np.int32) if s.offset else None for s in sources]
        wide_views = [s.target[: rows * s.array.itemsize].view(s.array.dtype) for s in sources]

        def narrow_task(lo: int, hi: int) -> list[tuple[int, int] | None]:
            lows = [INT64_MAX_PLUS] * len(sources)
            highs = [INT64_MIN_LESS] * len(sources)
            # blocks small enough that a block's source is still in the core's cache when
            # min and max read it again
            for block in range(lo, hi, CACHE_BLOCK_ROWS):
                stop = min(block + CACHE_BLOCK_ROWS, hi)
                for k, source in enumerate(sources):
                    part = source.array[block:stop]
                    if source.offset:
                        # (v - base) mod 2^32 as the low 32 bits of v less those of the base:
                        # two int32 loops (a truncating copy, an in-place subtract) run ~4x
                        # faster than one int64 subtract cast to int32 on the way out
                        view = narrow_views[k][block - first : stop - first]
                        np.copyto(view, part, casting="unsafe")
                        if low_bases[k]:
                            np.subtract(view, low_bases[k], out=view)
                        lows[k] = min(lows[k], int(part.min()))
                        highs[k] = max(highs[k], int(part.max()))
                    else:
                        np.copyto(wide_views[k][block - first : stop - first], part)
            return [
                (lows[k], highs[k]) if source.offset else None for k, source in enumerate(sources)
            ]

        slices = self.slices(first, end) if rows else []
        per_slice = self.run(narrow_task, slices)
        wires = []
        wide = []
        for k, source in enumerate(sources):
            if not source.offset:
                wires.append(ChunkWire(False, 0, rows * source.array.itemsize, None, None))
                continue
            if not rows:
                wires.append(ChunkWire(True, 0, 0, None, None))
                continue
            low = min(ranges[k][0] for ranges in per_slice)
            high = max(ranges[k][1] for ranges in per_slice)
            narrow = fits_offsets(low, high, bases[k])
            wires.append(
                ChunkWire(narrow, bases[k] if narrow else 0, rows * (4 if narrow else 8), low, high)
            )
            if not narrow:
                wide.append(k)
        if wide:

            def wide_task(lo: int, hi: int) -> None:
                for k in wide:
                    np.copyto(wide_views[k][lo - first : hi - first], sources[k].array[lo:hi])

            self.run(wide_task, slices)
        return wires

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False)


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
