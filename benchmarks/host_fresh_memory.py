"""The GPU output path's copy out of its pinned buffer (`host_loops.parallel_copy`) into
fresh memory, as every firing does, against the same copy into a target already touched
(docs/performance/gpu.md, "Tried, not kept: the output's window bounds filled on the host").

`python benchmarks/host_fresh_memory.py [megabytes]` (default 55: an s = 100 us firing's
packed rows). The source is pinned where CuPy and a GPU are there, ordinary memory elsewhere.
Median of 8 copies each: a fresh target kept (as `Query.run()` keeps its results), the same
with 4 threads and with 1 (do the page faults scale?), without numpy's huge-page hint (numpy
asks for transparent huge pages on arrays of 4 MiB and more), into a `mmap` with
`MAP_POPULATE` (the kernel faults the pages in within the call, timed with the copy), a fresh
target dropped, a reused target, and `np.zeros` plus a one-thread fill for scale.
"""

from __future__ import annotations

import mmap
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

from mangonel.runtime.gpu.host_loops import MAX_THREADS, copy_into, parallel_copy, tasks_for


def source(nbytes: int) -> np.ndarray:
    try:
        import cupy

        memory = cupy.cuda.alloc_pinned_memory(nbytes)
        array = np.frombuffer(memory, np.uint8, nbytes)
    except Exception:  # noqa: BLE001 - no CuPy or no GPU: ordinary memory
        array = np.empty(nbytes, np.uint8)
    array[:] = np.random.default_rng(1).integers(0, 255, nbytes, dtype=np.uint8)
    return array


def median_seconds(step: Callable[[], object], runs: int = 8) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def without_huge_page_hint(step: Callable[[], object]) -> Callable[[], object]:
    from numpy._core import multiarray

    def run() -> object:
        before = multiarray._set_madvise_hugepage(False)
        try:
            return step()
        finally:
            multiarray._set_madvise_hugepage(before)

    return run


def populated(nbytes: int) -> np.ndarray:
    """Anonymous memory whose pages the kernel faults in within the mmap call."""
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE
    return np.frombuffer(mmap.mmap(-1, nbytes, flags=flags), np.uint8)


def copied(data: np.ndarray, target: np.ndarray, tasks: int) -> np.ndarray:
    copy_into(data, target, tasks)
    return target


def main() -> None:
    nbytes = int(float(sys.argv[1]) * (1 << 20)) if len(sys.argv) > 1 else 55 << 20
    data = source(nbytes)
    parallel_copy(data)  # compiled and warm
    kept: list[np.ndarray] = []
    target = np.zeros_like(data)
    tasks = tasks_for(nbytes, MAX_THREADS)
    cases = {
        "fresh target, kept": lambda: kept.append(parallel_copy(data)),
        "fresh, kept, 4 threads": lambda: kept.append(parallel_copy(data, threads=4)),
        "fresh, kept, 1 thread": lambda: kept.append(parallel_copy(data, threads=1)),
        "fresh, kept, no huge pages": without_huge_page_hint(
            lambda: kept.append(parallel_copy(data))
        ),
        "MAP_POPULATE, kept": lambda: kept.append(copied(data, populated(nbytes), tasks)),
        "fresh target, dropped": lambda: parallel_copy(data),
        "reused target": lambda: copy_into(data, target, tasks),
        "np.zeros + one-thread fill": lambda: np.zeros(nbytes, np.uint8).fill(1),
    }
    for name, step in cases.items():
        seconds = median_seconds(step)
        print(f"{name:28s} {seconds * 1e3:7.2f} ms {nbytes / seconds / 1e9:6.1f} GB/s")


if __name__ == "__main__":
    main()
