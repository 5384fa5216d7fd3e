"""The GPU stager's host copy pass beside another busy thread (docs/performance/gpu.md,
"Tried, not kept: the copy pass in fewer slices, ..."): does the pass straggle when one of
the host's cores, or its GIL, or numba's thread team is taken by someone else?

`python benchmarks/host_copy_contention.py [SLICES...]` times the stager's pass
(`CopyPool(slices).fill_chunk`, host only) over 8 chunks of 1 M rows of (ts, key, value), ts
and key narrowed, into one slot (pinned where CuPy is there, else ordinary memory), the
median and slowest of 6 passes after one, for each slice count (default 16 15 14 12 8 2 1, at
most the host's cores) alone and beside a thread that: runs numba code without the GIL
(`core`), spins in Python holding the GIL (`gil`), or loops a 16-slice parallel copy (`copy`,
as the output path's copy does beside the worker's pass). Runs on any machine.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable

import numba
import numpy as np

from mangonel.runtime.gpu.host_loops import parallel_copy
from mangonel.runtime.gpu.wire import ChunkSource, CopyPool
from mangonel.runtime.local.gpu_bench import staging_sources

CHUNK_ROWS, CHUNKS, PASSES = 1 << 20, 8, 7


@numba.njit(nogil=True)
def _burn(steps: int) -> float:
    value = 1.0
    for _ in range(steps):
        value = value * 1.0000001 + 1e-9
    return value


def _slot(nbytes: int) -> np.ndarray:
    try:
        from mangonel.runtime.gpu import device

        memory = device.cupy().cuda.alloc_pinned_memory(nbytes)
        return np.frombuffer(memory, np.uint8, nbytes)
    except ImportError:
        return np.zeros(nbytes, np.uint8)


def _busy(kind: str, stop: threading.Event) -> Callable[[], None] | None:
    """The other thread's work until `stop` (None for `none`)."""
    other = np.random.default_rng(1).random(4_000_000)

    def core() -> None:
        while not stop.is_set():
            _burn(2_000_000)

    def gil() -> None:
        count = 0
        while not stop.is_set():
            count += 1

    def copy() -> None:
        while not stop.is_set():
            parallel_copy(other)

    return {"none": None, "core": core, "gil": gil, "copy": copy}[kind]


def rates(slices: int, busy: str, sources: list[ChunkSource], slot: np.ndarray) -> tuple:
    """(median, slowest) G rows/s of the pass with `slices` slices beside `busy`."""
    pool = CopyPool(slices)
    stop = threading.Event()
    work = _busy(busy, stop)
    thread = None if work is None else threading.Thread(target=work)
    if thread is not None:
        thread.start()
    times = []
    try:
        for _ in range(PASSES):
            started = time.perf_counter()
            for first in range(0, CHUNK_ROWS * CHUNKS, CHUNK_ROWS):
                pool.fill_chunk(sources, slot, first, first + CHUNK_ROWS)
            times.append(time.perf_counter() - started)
    finally:
        stop.set()
        if thread is not None:
            thread.join()
    kept = sorted(times[1:])
    rows = CHUNK_ROWS * CHUNKS
    return rows / kept[len(kept) // 2] / 1e9, rows / kept[-1] / 1e9


def sources_and_slot() -> tuple[list[ChunkSource], np.ndarray]:
    """The staging bench's (ts, key, value) columns of CHUNKS chunks and a one-chunk slot."""
    sources, slot_bytes = staging_sources(CHUNK_ROWS, CHUNKS)
    return sources, _slot(slot_bytes)


def main() -> None:
    cores = os.cpu_count() or 1
    wanted = [int(a) for a in sys.argv[1:]] or [16, 15, 14, 12, 8, 2, 1]
    counts = sorted({min(n, cores) for n in wanted}, reverse=True)
    sources, slot = sources_and_slot()
    CopyPool(counts[0]).fill_chunk(sources, slot, 0, CHUNK_ROWS)  # compiles; picks the layer
    _burn(10)
    print(f"numba {numba.__version__}, layer {numba.threading_layer()}, {cores} cores")
    for busy in ("none", "core", "gil", "copy"):
        for count in counts:
            median, slowest = rates(count, busy, sources, slot)
            print(
                f"beside {busy:4}  {count:2} slices: {median:.2f} G rows/s (slowest {slowest:.2f})"
            )


if __name__ == "__main__":
    main()
