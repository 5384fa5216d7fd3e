"""The GPU backend's host-side loops: numba functions compiled for parallel slices on numba's
thread pool, the GIL released (staging's copy and narrowing, the output path's copy out of a
pinned buffer and its key gather). numpy ufuncs on a Python thread pool reached a quarter of
their rate on the H100 host (16 cores, measured 2026-11-26: 0.37 against 1.63 G rows/s for
staging three 8-byte columns): the pool's hand-off (~240 us a chunk) and the GIL between
calls. This is the one module outside runtime/cpu that imports numba (tests/test_layers.py).
"""

from __future__ import annotations

import numba
import numpy as np

CACHE_BLOCK_ROWS = 1 << 14  # rows a slice narrows per step (128 KB of an int64 column)
MIN_TASK_ROWS = 1 << 15  # rows per slice at least: below it, a thread costs more than it copies
MAX_THREADS = 16


def tasks_for(rows: int, threads: int) -> int:
    """Slices for `rows` rows over `threads` threads, each of at least MIN_TASK_ROWS."""
    return max(1, min(threads, rows // MIN_TASK_ROWS))


@numba.njit(parallel=True, nogil=True, cache=True)
def fill_into(  # noqa: ANN201, PLR0913
    narrow_sources,  # noqa: ANN001
    narrow_targets,  # noqa: ANN001
    bases,  # noqa: ANN001
    narrow_count,  # noqa: ANN001
    copy_sources,  # noqa: ANN001
    copy_targets,  # noqa: ANN001
    widths,  # noqa: ANN001
    copy_count,  # noqa: ANN001
    rows,  # noqa: ANN001
    tasks,  # noqa: ANN001
):
    """A chunk's whole copy pass in one parallel region: each of `tasks` slices of the
    `rows` rows writes, for the first `narrow_count` int64 sources, the low 32 bits of
    source[i] - bases[c] into its int32 target and takes the slice's min and max; and copies
    the first `copy_count` sources' bytes (`widths[c]` a row) as they are. Returns (lows,
    highs), one row per narrowed source, one column per slice.

    One region, not one per column: each region costs a wake-up of numba's thread team. On
    the H200 host (16 cores, 2026-11-27; timers in the public path, SUM over 1 or 1000 keys,
    1 M-row batches) the pass took 0.55-0.66 ms a batch against 0.61-0.73 ms in three
    regions; a micro-benchmark over distinct batches put one region (its columns interleaved
    per block) at 0.57-0.60 ms against 0.70-0.76 ms: ~69 GB/s of traffic, where the host's
    plain parallel copy reaches 74 GB/s, so the pass is near its memory bound. The sources
    and targets are homogeneous tuples padded to at least one entry (numba indexes them at
    run time); a slice goes block by block so min and max read a block while it is still in
    the core's cache, and the loops vectorise."""
    lows = np.empty((narrow_count, tasks), np.int64)
    highs = np.empty((narrow_count, tasks), np.int64)
    for task in numba.prange(tasks):
        first = rows * task // tasks
        end = rows * (task + 1) // tasks
        for column in range(narrow_count):
            source = narrow_sources[column]
            target = narrow_targets[column]
            base = bases[column]
            low = source[first]
            high = source[first]
            for block in range(first, end, CACHE_BLOCK_ROWS):
                stop = min(block + CACHE_BLOCK_ROWS, end)
                for i in range(block, stop):
                    target[i] = np.int32(source[i] - base)
                for i in range(block, stop):
                    low = min(low, source[i])
                for i in range(block, stop):
                    high = max(high, source[i])
            lows[column, task] = low
            highs[column, task] = high
        for column in range(copy_count):
            width = widths[column]
            copy_targets[column][first * width : end * width] = copy_sources[column][
                first * width : end * width
            ]
    return lows, highs


@numba.njit(parallel=True, nogil=True, cache=True)
def copy_into(source, target, tasks):  # noqa: ANN001, ANN202
    """target[:] = source in `tasks` slices run by numba's thread pool."""
    rows = source.shape[0]
    for task in numba.prange(tasks):
        first = rows * task // tasks
        end = rows * (task + 1) // tasks
        target[first:end] = source[first:end]


@numba.njit(parallel=True, nogil=True, cache=True)
def gather_into(source, rows, target, tasks):  # noqa: ANN001, ANN202
    """target[i] = source[rows[i]] in `tasks` slices (a strided `source` is read as it is)."""
    count = rows.shape[0]
    for task in numba.prange(tasks):
        first = count * task // tasks
        end = count * (task + 1) // tasks
        for i in range(first, end):
            target[i] = source[rows[i]]


def parallel_copy(source: np.ndarray, threads: int = MAX_THREADS) -> np.ndarray:
    """A new array equal to `source` (1-D), copied in parallel slices."""
    target = np.empty_like(source)
    if len(source):
        copy_into(source, target, tasks_for(len(source), threads))
    return target


def parallel_gather(source: np.ndarray, rows: np.ndarray, threads: int = MAX_THREADS) -> np.ndarray:
    """source[rows] (1-D `source`, int64 `rows` within it), gathered in parallel slices."""
    target = np.empty(len(rows), source.dtype)
    if len(rows):
        gather_into(source, rows, target, tasks_for(len(rows), threads))
    return target


__all__ = [
    "CACHE_BLOCK_ROWS",
    "copy_into",
    "fill_into",
    "gather_into",
    "parallel_copy",
    "parallel_gather",
    "tasks_for",
]
