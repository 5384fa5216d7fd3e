"""The host half of staging: rows cut into chunks, and each chunk's columns copied into a
pinned buffer by numba loops run in parallel slices, 64-bit integer columns narrowed to int32
offsets in the same pass (`compiler.wire` says which columns; issue 12, items 2 and 4).

numpy and numba, no CuPy: the stager (`gpu.staging`) hands `CopyPool.stage_later` numpy
views of its pinned memory and the device's addresses (`DeviceCalls`), and the tests and the
bench hand `fill_chunk` ordinary arrays. The copy worker (`CopyWorker`) runs a batch's whole
pass in its own thread, the GIL released, beside the driver's Python. The loops are numba's
(parallel, the GIL released): numpy ufuncs on a thread pool, the first form, reached a
quarter of their rate on the H100 host (measured 2026-11-26, see `CopyPool`).

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
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mangonel.runtime.gpu.host_loops import (
    INT32_HIGH,
    INT32_LOW,
    MAX_THREADS,
    MIN_TASK_ROWS,
    stage_chunks,
    tasks_for,
    threads_may_overlap,
)

INT32_MIN = INT32_LOW
INT32_MAX = INT32_HIGH
# stage_chunks takes homogeneous tuples of at least one array: these pad an empty group
_NO_INT64 = np.zeros(0, np.int64)
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


def default_threads() -> int:
    """One copy thread per core, at most 16 (the copy is memory bound well before)."""
    return max(1, min(MAX_THREADS, os.cpu_count() or 1))


@dataclass(frozen=True)
class ChunkSource:
    """One host array of a batch's columns and where its chunks go: `region`, the byte
    offset of its region in a chunk's slot of pinned memory (8 bytes a row for an offset
    column, its itemsize otherwise; a multiple of 8); `offset`: write int32 offsets from the
    chunk's first value when they fit (the array must be int64)."""

    array: np.ndarray
    region: int
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


@dataclass(frozen=True)
class DeviceCalls:
    """Where a staged batch's device work goes (`host_loops.stage_chunks` calls these C
    functions, holding no GIL): the addresses of cuCtxSetCurrent, cuMemcpyHtoDAsync,
    cuEventRecord, cuEventSynchronize and cuStreamWaitEvent (or stand-ins of the same
    signatures), the context made current in the calling thread, the stream, the event the
    stream waits for first, each source's device address and each chunk's event. `None`
    for a host-only pass."""

    functions: tuple[int, int, int, int, int]
    context: int
    stream: int
    after: int
    destinations: tuple[int, ...]
    events: tuple[int, ...]


class DeviceCallError(RuntimeError):
    """A CUDA driver call of the staging pass failed (its CUresult is in the message)."""


_NO_CALLS = np.zeros(5, np.uint64)
_NO_ADDRESSES = np.zeros(1, np.uint64)


def source_groups(sources: Sequence[ChunkSource]) -> tuple[list[int], list[int]]:
    """The sources' indices as the copy pass takes them: the offset ones, then the others."""
    narrowed = [k for k, s in enumerate(sources) if s.offset]
    return narrowed, [k for k, s in enumerate(sources) if not s.offset]


class CopyPool:
    """The host copy pass with `threads` threads (`default_threads()` for 0): each chunk's
    columns are copied (and narrowed) by numba loops run in parallel slices on numba's
    thread pool, the GIL released (`host_loops.stage_chunks`). Measured on the H100 host
    (16 cores, 2026-11-26, three 8-byte columns, two narrowed, 1 M-row chunks): 1.63 G
    rows/s at 16 threads, against 0.37 G for the numpy ufuncs on a ThreadPoolExecutor it
    replaced (their hand-off alone cost ~240 us a chunk, and each thread took the GIL between
    its ufunc calls)."""

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

    def fill_chunk(
        self, sources: Sequence[ChunkSource], slot: np.ndarray, first: int, end: int
    ) -> list[ChunkWire]:
        """Copy rows [first, end) of every source into its region of `slot`, offset columns
        narrowed where the chunk's range allows (a host-only pass: no device call)."""
        return self.stage_later(sources, slot, len(slot), [first, end], None, None).result()[0]

    def stage_later(
        self,
        sources: Sequence[ChunkSource],
        buffer: np.ndarray,
        slot_bytes: int,
        bounds: Sequence[int],
        calls: DeviceCalls | None,
        worker: CopyWorker | None,
    ) -> Pending:
        """Every chunk of a batch (rows bounds[c]..bounds[c + 1]) through slot c % slots of
        `buffer` (slots of `slot_bytes`), with its device copies and event where `calls`
        says (`host_loops.stage_chunks`: one call, no GIL held), run by `worker`'s thread
        while the caller goes on (None: now, in this thread). The Pending's `result()` gives
        per chunk each source's wire, in the sources' order. The arguments are made here, so
        the worker's thread needs the GIL only to enter and leave the loop."""
        narrowed, copied = source_groups(sources)
        arrays = [_read_only(s.array) for s in sources]
        widths = [s.array.itemsize for s in sources]
        order = narrowed + copied
        arguments = (
            tuple(arrays[k] for k in narrowed) or (_read_only(_NO_INT64),),
            len(narrowed),
            tuple(arrays[k].view(np.uint8) for k in copied) or (_read_only(_NO_BYTES),),
            np.array([widths[k] for k in copied] or [0], np.int64),
            len(copied),
            np.asarray(bounds, np.int64),
            self.threads,
            buffer,
            buffer.ctypes.data,
            slot_bytes,
            np.array([sources[k].region for k in order] or [0], np.int64),
            _NO_CALLS if calls is None else np.array(calls.functions, np.uint64),
            np.uint64(0 if calls is None else calls.context),
            np.uint64(0 if calls is None else calls.stream),
            np.uint64(0 if calls is None else calls.after),
            _NO_ADDRESSES
            if calls is None
            else np.array([calls.destinations[k] for k in order], np.uint64),
            _NO_ADDRESSES if calls is None else np.array(calls.events or (0,), np.uint64),
        )

        def wires(loop_result: tuple) -> list[list[ChunkWire]]:
            return _chunk_wires(loop_result, narrowed, copied, widths, bounds, len(sources))

        if worker is None:
            return Pending.done(stage_chunks(*arguments), wires)
        return worker.submit(stage_chunks, arguments, wires)

    def close(self) -> None:
        """Nothing to release: numba's thread pool belongs to the process."""


def _chunk_wires(
    loop_result: tuple,
    narrowed: list[int],
    copied: list[int],
    widths: list[int],
    bounds: Sequence[int],
    sources: int,
) -> list[list[ChunkWire]]:
    """Per chunk, each source's wire from `stage_chunks`' result (DeviceCallError where a
    driver call failed)."""
    lows, highs, bases, narrow, status = loop_result
    if status:
        raise DeviceCallError(f"staging a batch to the device failed: CUresult {int(status)}")
    chunks = []
    for chunk, (first, end) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        rows = end - first
        wires: list[ChunkWire] = [ChunkWire(False, 0, 0, None, None)] * sources
        for column, k in enumerate(narrowed):
            if not rows:
                wires[k] = ChunkWire(True, 0, 0, None, None)
                continue
            fits = bool(narrow[column, chunk])
            wires[k] = ChunkWire(
                fits,
                int(bases[column, chunk]),
                rows * (4 if fits else 8),
                int(lows[column, chunk]),
                int(highs[column, chunk]),
            )
        for k in copied:
            wires[k] = ChunkWire(False, 0, rows * widths[k], None, None)
        chunks.append(wires)
    return chunks


class Pending:
    """The result of work handed to a `CopyWorker` (or done at once): `result()` waits for
    it and raises what the work raised."""

    def __init__(self) -> None:
        self._finished = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None
        self._finish: Callable[[Any], Any] | None = None

    @classmethod
    def done(cls, value: Any, finish: Callable[[Any], Any] | None = None) -> Pending:  # noqa: ANN401
        """Work done already; `finish` of `value` still runs in `result()`."""
        pending = cls()
        pending._value = value
        pending._finish = finish
        pending._finished.set()
        return pending

    @property
    def ready(self) -> bool:
        return self._finished.is_set()

    def result(self) -> Any:  # noqa: ANN401
        self._finished.wait()  # blocks without the GIL: the worker's thread takes it to finish
        if self._error is not None:
            raise self._error
        if self._finish is not None:  # the work's own epilogue, in the caller's thread
            finish, self._finish = self._finish, None
            try:
                self._value = finish(self._value)
            except BaseException as error:
                self._error = error
                raise
        return self._value


class CopyWorker:
    """One thread that runs staging loops (numba, compiled `nogil`) beside the caller's
    Python: the driver's work on batch k (its launches, firing and results, ~0.7 ms of Python
    a 1 M-row batch on the H200 host) then overlaps the copy pass of batch k + 1 (~0.75 ms),
    which in the caller's thread came before it (issue 12). Only the loop runs in this
    thread; its arguments are made and its result read in the caller's.

    The GIL is handed over at blocking calls only: `submit` to an idle worker waits until
    the thread has taken the job (so the thread need not wait for the caller's 5 ms switch
    interval to start), and the loop's thread gives the GIL back as it enters the loop;
    `Pending.result` blocks, so the thread takes the GIL to leave the loop (and, with the
    GIL in hand, goes on with the next job queued). Jobs run one at a time, in order. A
    forked child makes its own (`shared_worker`)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._idle = False  # waiting for a job (set by the worker's thread under the GIL)
        self._thread = threading.Thread(target=self._run, name="mangonel-copy", daemon=True)
        self._thread.start()

    def submit(
        self, loop: Callable[..., Any], arguments: tuple, finish: Callable[[Any], Any]
    ) -> Pending:
        """Run loop(*arguments) in the worker's thread; `finish` of its result runs in the
        thread that calls `result()`."""
        pending = Pending()
        pending._finish = finish
        taken = threading.Event()
        idle = self._idle
        self._jobs.put((loop, arguments, pending, taken))
        if idle:  # busy: it takes the job when it is done, its GIL still in hand
            taken.wait()
        return pending

    def _run(self) -> None:
        while True:
            self._idle = True
            loop, arguments, pending, taken = self._jobs.get()
            self._idle = False
            taken.set()
            try:
                pending._value = loop(*arguments)
            except BaseException as error:  # noqa: BLE001 - handed to the caller's result()
                pending._error = error
            pending._finished.set()


_WORKERS: dict[int, CopyWorker] = {}
_WORKER_LOCK = threading.Lock()


def shared_worker() -> CopyWorker | None:
    """The process's copy worker, made on first use; None where numba's thread pool cannot
    take parallel loops from two threads at once (its `workqueue` layer aborts the process
    on that; `omp` and `tbb` take them). Call after a parallel loop has run (numba picks the
    layer then)."""
    if not threads_may_overlap():
        return None
    with _WORKER_LOCK:
        worker = _WORKERS.get(os.getpid())
        if worker is None:
            worker = _WORKERS[os.getpid()] = CopyWorker()
    return worker


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
    "CopyWorker",
    "DeviceCallError",
    "DeviceCalls",
    "Pending",
    "chunk_bounds",
    "default_threads",
    "read_chunk",
    "shared_pool",
    "shared_worker",
]
