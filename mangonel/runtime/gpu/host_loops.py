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
def narrow_into(source, target, base, tasks):  # noqa: ANN001, ANN202
    """target[i] = the low 32 bits of source[i] - base (int32, wrapping), and the min and max
    of `source`, in `tasks` slices run by numba's thread pool (the GIL released throughout).
    Each slice goes block by block, so min and max read a block while it is still in the
    core's cache; the three loops vectorise."""
    rows = source.shape[0]
    lows = np.empty(tasks, np.int64)
    highs = np.empty(tasks, np.int64)
    for task in numba.prange(tasks):
        first = rows * task // tasks
        end = rows * (task + 1) // tasks
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
        lows[task] = low
        highs[task] = high
    return lows.min(), highs.max()


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
    "gather_into",
    "narrow_into",
    "parallel_copy",
    "parallel_gather",
    "tasks_for",
]
