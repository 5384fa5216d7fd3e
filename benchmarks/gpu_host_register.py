"""What page-locking a user's own buffers costs (`cuMemHostRegister`), against the ways the
public GPU path could move them (docs/performance/gpu.md, "Tried, not built: registering the
user's Arrow buffers with the driver instead of the copy pass").

`python benchmarks/gpu_host_register.py [rows,...]` (default 1 M and 4 M rows). Per size, a
batch is three 8-byte columns of fresh memory (a new batch each time, as a user's are); each
line is the median of 6 timed runs after 2 warm-ups, as ms a batch, GB/s of the batch's bytes
and M rows/s. Needs CuPy and a GPU; the driver's calls go through libcuda directly.
"""

from __future__ import annotations

import ctypes
import statistics
import sys
import threading
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

RUNS, WARM_UPS, COLUMNS = 8, 2, 3


class Driver:
    """The three driver calls the probe makes, each checked."""

    def __init__(self) -> None:
        self.library = ctypes.CDLL("libcuda.so.1")
        self.library.cuMemHostRegister_v2.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_uint,
        ]
        self.library.cuMemHostUnregister.argtypes = [ctypes.c_void_p]
        self.library.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
        context = ctypes.c_void_p()
        self._check(self.library.cuCtxGetCurrent(ctypes.byref(context)), "cuCtxGetCurrent")
        self.context = context

    @staticmethod
    def _check(status: int, call: str) -> None:
        if status:
            raise RuntimeError(f"{call} failed: CUresult {status}")

    def register(self, array: np.ndarray) -> None:
        self._check(
            self.library.cuMemHostRegister_v2(array.ctypes.data, array.nbytes, 0), "register"
        )

    def unregister(self, array: np.ndarray) -> None:
        self._check(self.library.cuMemHostUnregister(array.ctypes.data), "unregister")

    def make_current(self) -> None:
        self._check(self.library.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")


def _median_seconds(step: Callable[[list[np.ndarray]], None], batch: Callable[[], list]) -> float:
    """Median of `step` over fresh batches (each made outside the clock)."""
    times = []
    for _ in range(RUNS):
        columns = batch()
        started = time.perf_counter()
        step(columns)
        times.append(time.perf_counter() - started)
    return statistics.median(times[WARM_UPS:])


def probe(rows: int) -> list[tuple[str, float]]:
    import cupy as cp

    cp.zeros(1).sum()  # CuPy's context, current in this thread: the driver calls use it
    driver = Driver()
    stream = cp.cuda.Stream(non_blocking=True)
    device = [cp.empty(rows, cp.float64) for _ in range(COLUMNS)]
    pinned = np.frombuffer(cp.cuda.alloc_pinned_memory(COLUMNS * rows * 8), np.float64)
    slots = [pinned[k * rows : (k + 1) * rows] for k in range(COLUMNS)]

    def fresh() -> list[np.ndarray]:
        return [np.random.default_rng(k).random(rows) for k in range(COLUMNS)]

    def copy_up(columns: list[np.ndarray]) -> None:
        for target, column in zip(device, columns, strict=True):
            target.data.copy_from_host_async(column.ctypes.data, column.nbytes, stream)
        stream.synchronize()

    def registered_copy(columns: list[np.ndarray]) -> None:
        for column in columns:
            driver.register(column)
        copy_up(columns)
        for column in columns:
            driver.unregister(column)

    def register_only(columns: list[np.ndarray]) -> None:
        for column in columns:
            driver.register(column)
        for column in columns:
            driver.unregister(column)

    def register_in_threads(columns: list[np.ndarray]) -> None:
        def one(column: np.ndarray) -> None:
            driver.make_current()
            driver.register(column)

        threads = [threading.Thread(target=one, args=(column,)) for column in columns]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for column in columns:
            driver.unregister(column)

    def through_pinned(columns: list[np.ndarray]) -> None:
        for slot, column in zip(slots, columns, strict=True):
            np.copyto(slot, column)
        copy_up(slots)

    def arrow_batch() -> list[np.ndarray]:
        # buffers pyarrow allocated itself (its default pool), as a Parquet reader's are
        arrays = [pc.multiply(pa.array(column), 1.0) for column in fresh()]
        return [np.frombuffer(array.buffers()[1], np.float64) for array in arrays]

    reused = fresh()
    return [
        ("pinned H2D alone (the bound)", _median_seconds(lambda _: copy_up(slots), fresh)),
        ("register + unregister", _median_seconds(register_only, fresh)),
        ("register + H2D + unregister", _median_seconds(registered_copy, fresh)),
        ("register from 3 threads (+ unregister)", _median_seconds(register_in_threads, fresh)),
        ("register + unregister, same buffers", _median_seconds(register_only, lambda: reused)),
        ("register + unregister, pyarrow's buffers", _median_seconds(register_only, arrow_batch)),
        ("H2D straight from pageable memory", _median_seconds(copy_up, fresh)),
        ("np.copyto into pinned + H2D", _median_seconds(through_pinned, fresh)),
    ]


def main() -> None:
    sizes = (
        [int(part) for part in sys.argv[1].split(",")] if len(sys.argv) > 1 else [1 << 20, 1 << 22]
    )
    for rows in sizes:
        nbytes = COLUMNS * rows * 8
        print(f"{rows:,} rows: {COLUMNS} columns, {nbytes / 1e6:.1f} MB a batch")
        for label, seconds in probe(rows):
            print(
                f"  {label:42s} {seconds * 1e3:8.3f} ms {nbytes / seconds / 1e9:7.2f} GB/s "
                f"{rows / seconds / 1e6:8.1f} M rows/s"
            )


if __name__ == "__main__":
    main()
