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
from llvmlite import ir

CACHE_BLOCK_ROWS = 1 << 14  # rows a slice narrows per step (128 KB of an int64 column)
MIN_TASK_ROWS = 1 << 15  # rows per slice at least: below it, a thread costs more than it copies
MAX_THREADS = 16
INT32_LOW = -(1 << 31)
INT32_HIGH = (1 << 31) - 1


def tasks_for(rows: int, threads: int) -> int:
    """Slices for `rows` rows over `threads` threads, each of at least MIN_TASK_ROWS."""
    return max(1, min(threads, rows // MIN_TASK_ROWS))


@numba.njit(parallel=True, nogil=True, cache=True)
def fill_slot(  # noqa: ANN201, PLR0913
    narrow_sources,  # noqa: ANN001
    narrow_count,  # noqa: ANN001
    copy_sources,  # noqa: ANN001
    widths,  # noqa: ANN001
    copy_count,  # noqa: ANN001
    slot,  # noqa: ANN001
    slot_words,  # noqa: ANN001
    regions,  # noqa: ANN001
    bases,  # noqa: ANN001
    first,  # noqa: ANN001
    end,  # noqa: ANN001
    tasks,  # noqa: ANN001
):
    """A chunk's whole copy pass in one parallel region: each of `tasks` slices of rows
    [first, end) writes, for the first `narrow_count` int64 sources, the low 32 bits of
    source[i] - bases[c] into the int32 words of its region and takes the slice's min and
    max; and copies the first `copy_count` sources' bytes (`widths[c]` a row) as they are.
    `slot` is the chunk's pinned slot (bytes), `slot_words` the same memory as int32 (made by
    the caller: a view made here is lost to the parallel region, numba 0.68), `regions[c]`
    the byte offset of source c's region in it (the narrow sources first, multiples of 8).
    Returns (lows, highs), one row per narrowed source, one column per slice.

    One region, not one per column: each region costs a wake-up of numba's thread team. On
    the H200 host (16 cores, 2026-11-27; timers in the public path, SUM over 1 or 1000 keys,
    1 M-row batches) the pass took 0.55-0.66 ms a batch against 0.61-0.73 ms in three
    regions; a micro-benchmark over distinct batches put one region (its columns interleaved
    per block) at 0.57-0.60 ms against 0.70-0.76 ms: ~69 GB/s of traffic, where the host's
    plain parallel copy reaches 74 GB/s, so the pass is near its memory bound. The sources
    are homogeneous tuples padded to at least one entry (numba indexes them at run time); a
    slice goes block by block so min and max read a block while it is still in the core's
    cache, and the loops vectorise."""
    rows = end - first
    lows = np.empty((narrow_count, tasks), np.int64)
    highs = np.empty((narrow_count, tasks), np.int64)
    for task in numba.prange(tasks):
        task_first = first + rows * task // tasks
        task_end = first + rows * (task + 1) // tasks
        for column in range(narrow_count):
            source = narrow_sources[column]
            word = regions[column] // 4 - first  # the word of row i is word + i
            base = bases[column]
            low = source[task_first]
            high = source[task_first]
            for block in range(task_first, task_end, CACHE_BLOCK_ROWS):
                stop = min(block + CACHE_BLOCK_ROWS, task_end)
                for i in range(block, stop):
                    slot_words[word + i] = np.int32(source[i] - base)
                for i in range(block, stop):
                    low = min(low, source[i])
                for i in range(block, stop):
                    high = max(high, source[i])
            lows[column, task] = low
            highs[column, task] = high
        for column in range(copy_count):
            width = widths[column]
            at = regions[narrow_count + column] - first * width  # row i's bytes at + i * width
            slot[at + task_first * width : at + task_end * width] = copy_sources[column][
                task_first * width : task_end * width
            ]
    return lows, highs


@numba.extending.intrinsic
def _call1(typingctx, address, a):  # noqa: ANN001, ANN202, ARG001
    """int32 f(a) for the C function at `address` (every argument a 64-bit integer or
    pointer, as the CUDA driver calls below take them)."""
    return _native_call(1)


@numba.extending.intrinsic
def _call2(typingctx, address, a, b):  # noqa: ANN001, ANN202, ARG001
    return _native_call(2)


@numba.extending.intrinsic
def _call3(typingctx, address, a, b, c):  # noqa: ANN001, ANN202, ARG001
    return _native_call(3)


@numba.extending.intrinsic
def _call4(typingctx, address, a, b, c, d):  # noqa: ANN001, ANN202, ARG001, PLR0913
    return _native_call(4)


def _native_call(arguments: int):  # noqa: ANN202
    """(signature, codegen) of a call through a function address: the address is an
    argument, not a constant, so the compiled loop caches across processes."""
    signature = numba.types.int32(*([numba.types.uint64] * (arguments + 1)))

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        word = ir.IntType(64)
        function = ir.FunctionType(ir.IntType(32), [word] * arguments)
        return builder.call(builder.inttoptr(args[0], function.as_pointer()), args[1:])

    return signature, codegen


# the device calls a staged batch makes (`DeviceCalls`, in this order): cuCtxSetCurrent,
# cuMemcpyHtoDAsync, cuEventRecord, cuEventSynchronize, cuStreamWaitEvent; all zero: none
# (host-only staging)
SET_CONTEXT, COPY, RECORD, SYNCHRONIZE, WAIT = range(5)


@numba.njit(nogil=True, cache=True)
def stage_chunks(  # noqa: ANN201, PLR0913, PLR0915
    narrow_sources,  # noqa: ANN001
    narrow_count,  # noqa: ANN001
    copy_sources,  # noqa: ANN001
    widths,  # noqa: ANN001
    copy_count,  # noqa: ANN001
    bounds,  # noqa: ANN001
    threads,  # noqa: ANN001
    buffer,  # noqa: ANN001
    buffer_address,  # noqa: ANN001
    slot_bytes,  # noqa: ANN001
    regions,  # noqa: ANN001
    calls,  # noqa: ANN001
    context,  # noqa: ANN001
    stream,  # noqa: ANN001
    after,  # noqa: ANN001
    destinations,  # noqa: ANN001
    events,  # noqa: ANN001
):
    """A batch's staging, chunk after chunk, in one call that holds no GIL (a copy worker
    runs it beside the driver's Python): chunk c (rows bounds[c]..bounds[c + 1]) is filled
    into slot c % slots of `buffer` (`fill_slot`; an offset column whose chunk does not fit
    int32 offsets from its first value is copied again at 8 bytes), then its host-to-device
    copies are queued on `stream` (source k's chunk to destinations[k] + its bytes per row on
    the device (8 for an offset column) * bounds[c]) and events[c] is recorded after them.
    The stream first waits for the event `after` (the compute stream's work from before the
    device arrays were allocated). A slot is reused only once the event of the chunk that
    used it has completed. With `calls` all zero nothing is called (a host-only pass: the
    bench, the tests).

    Returns (lows, highs, bases, narrow, status): per narrowed source and chunk, its min,
    max, base and whether it went as offsets; `status` the first nonzero CUresult (then
    staging stopped there)."""
    chunks = bounds.shape[0] - 1
    slots = buffer.shape[0] // slot_bytes
    lows = np.zeros((narrow_count, chunks), np.int64)
    highs = np.zeros((narrow_count, chunks), np.int64)
    bases = np.zeros((narrow_count, chunks), np.int64)
    narrow = np.zeros((narrow_count, chunks), np.uint8)
    device = calls[COPY] != 0
    if device:
        status = _call1(calls[SET_CONTEXT], context)
        if status == 0:
            status = _call3(calls[WAIT], stream, after, np.uint64(0))
        if status != 0:
            return lows, highs, bases, narrow, status
    for chunk in range(chunks):
        first = bounds[chunk]
        end = bounds[chunk + 1]
        rows = end - first
        if rows == 0:
            continue
        slot_index = chunk % slots
        if device and chunk >= slots:  # the slot's last copies must be done
            status = _call1(calls[SYNCHRONIZE], events[chunk - slots])
            if status != 0:
                return lows, highs, bases, narrow, status
        start = slot_index * slot_bytes
        slot = buffer[start : start + slot_bytes]
        chunk_bases = np.empty(max(narrow_count, 1), np.int64)
        for column in range(narrow_count):
            chunk_bases[column] = narrow_sources[column][first]
        tasks = max(1, min(threads, rows // MIN_TASK_ROWS))
        chunk_lows, chunk_highs = fill_slot(
            narrow_sources,
            narrow_count,
            copy_sources,
            widths,
            copy_count,
            slot,
            slot[: slot_bytes // 4 * 4].view(np.int32),
            regions,
            chunk_bases,
            first,
            end,
            tasks,
        )
        for column in range(narrow_count):
            low = chunk_lows[column].min()
            high = chunk_highs[column].max()
            base = chunk_bases[column]
            lows[column, chunk] = low
            highs[column, chunk] = high
            # the base lies within [low, high]: the chunk's range decides the fit. Unsigned
            # differences: both are in [0, 2^64), where int64's would wrap (a chunk holding
            # int64's minimum would seem to fit)
            below = np.uint64(base) - np.uint64(low)
            above = np.uint64(high) - np.uint64(base)
            fits = below <= np.uint64(-INT32_LOW) and above <= np.uint64(INT32_HIGH)
            region = regions[column]
            nbytes = 4 * rows
            if fits:
                narrow[column, chunk] = 1
                bases[column, chunk] = base
            else:  # rare: the chunk spans more than int32 offsets; again at 8 bytes
                wide = slot[region : region + 8 * rows].view(np.int64)
                wide[:] = narrow_sources[column][first:end]
                nbytes = 8 * rows
            if device:
                status = _call4(
                    calls[COPY],
                    destinations[column] + np.uint64(8 * first),
                    np.uint64(buffer_address + start + region),
                    np.uint64(nbytes),
                    stream,
                )
                if status != 0:
                    return lows, highs, bases, narrow, status
        if device:
            for column in range(copy_count):
                width = widths[column]
                status = _call4(
                    calls[COPY],
                    destinations[narrow_count + column] + np.uint64(width * first),
                    np.uint64(buffer_address + start + regions[narrow_count + column]),
                    np.uint64(width * rows),
                    stream,
                )
                if status != 0:
                    return lows, highs, bases, narrow, status
            status = _call2(calls[RECORD], events[chunk], stream)
            if status != 0:
                return lows, highs, bases, narrow, status
    return lows, highs, bases, narrow, np.int32(0)


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


def threads_may_overlap() -> bool:
    """Whether numba's threading layer runs parallel loops launched from two threads at
    once (False before any parallel loop has run: the layer is not chosen yet)."""
    try:
        return numba.threading_layer() in ("omp", "tbb")
    except ValueError:
        return False


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
    "fill_slot",
    "stage_chunks",
    "gather_into",
    "parallel_copy",
    "parallel_gather",
    "tasks_for",
    "threads_may_overlap",
]
