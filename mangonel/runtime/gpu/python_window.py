"""Python window functions (`aggregates.python`) on the GPU, through numba's CUDA target.

`cuda_problem` is the planning check (the session hands it to the statements layer as the
CUDA check of GPU plans): the user's function compiled to PTX as a CUDA device function for
the call's values (`numba.cuda.compile_ptx`, which needs no GPU), None when it compiles and
returns a number, else numba's reason. The planner keeps the holistic step on the CPU with
that reason in EXPLAIN (`compiler.holistic.holistic_cpu_reason`); nothing falls back at run
time.

`evaluate_python` runs the function over a result chunk's windows on the device, the twin of
`runtime.cpu.python_window.evaluate_python` over the same runs (each row's runs: its panes'
sorted values of its key, on the device since `GpuHolistic.sort_pane`):

1. per row its value count n (a prefix sum over the run lengths) and its offset into one
   flat buffer (their exclusive scan), with CuPy;
2. `_gather_merge` (numba, a block per window): copies the row's runs into its slice of the
   buffer, merges the sorted runs pairwise (ping-ponging with a second buffer: O(n log runs),
   as the CPU does; each merge cut along its merge path among the block's threads) and
   decodes the order keys into the values' bits (float64 or int64);
3. the function's kernel (numba, a thread per window, made once per function and dtype;
   its blocks sized by `function_threads` so that a firing of few windows still reaches
   every multiprocessor):
   `out[r] = function(values[offset[r] : offset[r] + n[r]])` where n[r] > 0, the slice a
   contiguous array of the window's sorted non-NULL values, as on the CPU (a function
   `with_timestamps` also gets the same slice of their event times, moved with the values
   by the merge: equal values stay in event-time order).

A chunk whose windows hold more than MAX_VALUES values in all is cut into launches of at
most that many (at least one window each): the two buffers stay bounded. CuPy arrays reach
the numba kernels through `__cuda_array_interface__` (no copy), launched on CuPy's current
stream. `xp` is CuPy on the device; with NUMBA_ENABLE_CUDASIM=1 and `xp` numpy the same code
runs on the host (tests/test_python_window_cuda.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

# numba 0.68's CUDA target still types `numpy.row_stack`, which NumPy 2.5 removed (it was an
# alias of `vstack`): without it every compile fails with an AttributeError (seen on the GPU
# machine: numba 0.68.0, NumPy 2.5.2). Give NumPy back the alias it documented, only when
# missing, before numba's CUDA target loads.
if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack

from numba import cuda  # noqa: E402

from mangonel.aggregates.python import WindowFunction, result_dtype, values_dtype
from mangonel.catalog.types import SqlType

THREADS_PER_BLOCK = 128
MAX_BLOCKS = 1 << 16  # grid-stride beyond
# values of the windows of one launch pair (x 16 bytes: the buffer and its merge twin)
MAX_VALUES = 1 << 26
# The check compiles for this compute capability (no GPU needed): the oldest the CUDA 12 and
# 13 toolkits' NVVM both accept. Whether the function compiles does not depend on it.
CHECK_CAPABILITY = (7, 5)

_VALUES_SIGNATURES = {"float64": "float64[::1]", "int64": "int64[::1]"}
_LOCK = threading.Lock()
_PROBLEMS: dict[tuple[Callable[..., Any], str, SqlType, bool], str | None] = {}
_KERNELS: dict[tuple[Callable[..., Any], str, bool], Any] = {}
_MULTIPROCESSORS: dict[int, int] = {}


def function_threads(windows: int, multiprocessors: int) -> int:
    """Threads per block of the function's kernel (a thread per window): at most
    THREADS_PER_BLOCK, fewer when the windows would not fill a block on every multiprocessor.
    Why: the function runs serially over its window's values, so a firing of 1000 tumbling
    windows at 128 a block ran on 8 of an H100's or H200's 132 multiprocessors; 8 a block
    spreads them over 125 (tumbling trimmed_mean 4-9 % faster end to end,
    docs/performance/holistic-gpu.md)."""
    return max(1, min(THREADS_PER_BLOCK, -(-windows // max(1, multiprocessors))))


def _python_function(function: Callable[..., Any]) -> Callable[..., Any]:
    """The plain Python function behind a numba dispatcher (`numba.njit`'s), else itself:
    the CUDA target compiles the Python source."""
    return getattr(function, "py_func", function)


def cuda_problem(function: WindowFunction, argument_type: SqlType) -> str | None:
    """None when `function` compiles with numba's CUDA target as a device function of an
    array of `argument_type` values and returns a number fitting its declared type; else
    numba's reason in one line. Checked once per function, dtype, declared type and form
    (with timestamps or not)."""
    dtype = values_dtype(argument_type).name
    key = (function.function, dtype, function.returns, function.with_timestamps)
    with _LOCK:
        if key in _PROBLEMS:
            return _PROBLEMS[key]
    problem = _compile_problem(function, dtype)
    with _LOCK:
        _PROBLEMS[key] = problem
    return problem


def _compile_problem(function: WindowFunction, dtype: str) -> str | None:
    try:
        arguments = [_VALUES_SIGNATURES[dtype]] + (
            ["int64[::1]"] if function.with_timestamps else []
        )
        _, returned = cuda.compile_ptx(
            _python_function(function.function),
            "(" + ", ".join(arguments) + ",)",
            device=True,
            cc=CHECK_CAPABILITY,
        )
    except Exception as error:  # numba's errors are many classes; all mean "cannot compile"
        reason = " ".join(str(error).split())
        if len(reason) > 400:
            reason = reason[:397] + "..."
        return f"{type(error).__name__}: {reason}"
    # numba's scalar types print as their names: float32/64, (u)int8..64, bool
    spelled = str(returned)
    floating = spelled.startswith("float")
    if not (floating or spelled.startswith(("int", "uint", "bool"))):
        return f"it returns {spelled} for {dtype} values, not a number"
    if floating and not function.returns.is_floating:
        declared = function.returns.value
        return f"it returns {spelled} for {dtype} values, which does not fit returns={declared}"
    return None


@cuda.jit
def _gather_merge(
    keys,
    times,
    run_start,
    run_end,
    row_first,
    row_runs,
    offsets,
    n,
    bounds,
    floating,
    timed,
    merged,
    other,
    merged_times,
    other_times,
):
    """A block per row: the row's runs of `keys` copied to `merged[offsets[r]:][:n[r]]`,
    merged there (pairwise and stable, ping-ponging with the same slice of `other`; `bounds`
    holds max-runs + 1 entries per row) and decoded from order keys into the values' bits.
    `timed`: the values' event times move with them (`times` -> `merged_times`).

    Every step is spread over the block's threads: a thread per window (the first form)
    left a tumbling window's 10^4 values to one thread, and with one window per key the
    launch had too few threads to hide the memory's latency (4.8 ms a firing of 1000
    windows on an H200). The copy and the decoding stride over the values; each pairwise
    merge is cut along its merge path, a thread per equal share of the output."""
    thread = cuda.threadIdx.x
    threads = cuda.blockDim.x
    width = bounds.shape[0] // row_first.shape[0]
    flip = np.int64(0x7FFFFFFFFFFFFFFF)
    for r in range(cuda.blockIdx.x, row_first.shape[0], cuda.gridDim.x):
        total = n[r]
        if total == 0:
            continue  # the whole block skips the row: no barrier is left waiting
        base = offsets[r]
        at = r * width
        # the non-empty runs one after another; `bounds` lists where each ends
        filled = base
        count = 0
        if thread == 0:
            bounds[at] = base
        for j in range(row_first[r], row_first[r] + row_runs[r]):
            start = run_start[j]
            length = run_end[j] - start
            if length == 0:
                continue
            for t in range(thread, length, threads):
                merged[filled + t] = keys[start + t]
                if timed:
                    merged_times[filled + t] = times[start + t]
            filled += length
            count += 1
            if thread == 0:
                bounds[at + count] = filled
        cuda.syncthreads()
        in_other = False  # where the merged runs are now
        while count > 1:
            done = 0
            for first in range(0, count, 2):
                lo = bounds[at + first]
                mid = bounds[at + first + 1]
                hi = mid if first + 1 == count else bounds[at + first + 2]
                # every thread has read this pair's bounds before the first is rewritten
                # (later pairs read entries past it)
                cuda.syncthreads()
                if thread == 0:
                    bounds[at + done] = lo
                done += 1
                source = other if in_other else merged
                target = merged if in_other else other
                source_times = other_times if in_other else merged_times
                target_times = merged_times if in_other else other_times
                # this thread's share of the stable merge of source[lo:mid] and
                # source[mid:hi] into target[lo:hi] (mid == hi: a run without a partner,
                # copied): the outputs [lo + first, lo + last) of an equal cut, whose
                # start on the merge path (how many of the first `first` outputs come from
                # the left run) a binary search finds. The left run's value wins ties, so
                # equal values keep the panes' order (their event times' order).
                first = (hi - lo) * thread // threads
                last = (hi - lo) * (thread + 1) // threads
                # (no `max`/`min`: numba's CUDA target types those through an overload it
                # compiles for the current device, so the kernel's PTX would need a GPU)
                low = first - (hi - mid) if first > hi - mid else 0
                high = first if first < mid - lo else mid - lo
                while low < high:
                    middle = (low + high) // 2
                    # left[middle] comes out before right[first - 1 - middle]: more than
                    # `middle` of the first `first` outputs are the left run's
                    if source[lo + middle] <= source[mid + first - 1 - middle]:
                        low = middle + 1
                    else:
                        high = middle
                i = lo + low
                j = mid + first - low
                for k in range(lo + first, lo + last):
                    take = j if i >= mid or (j < hi and source[j] < source[i]) else i
                    target[k] = source[take]
                    if timed:
                        target_times[k] = source_times[take]
                    if take == j:
                        j += 1
                    else:
                        i += 1
            end = bounds[at + count]
            cuda.syncthreads()
            if thread == 0:
                bounds[at + done] = end
            cuda.syncthreads()  # the pass's values and bounds, before the next reads them
            count = done
            in_other = not in_other
        # sorted by order key: Spark's order of the values (NaN largest, -0.0 as 0.0);
        # decoded into `merged`, which the function's kernel reads as the values' dtype
        for i in range(base + thread, base + total, threads):
            key = other[i] if in_other else merged[i]
            merged[i] = (key ^ flip) if floating and key < 0 else key
            if timed and in_other:
                merged_times[i] = other_times[i]


def _function_kernel(function: WindowFunction, dtype: str) -> Any:  # noqa: ANN401
    """The kernel calling the user's function (as a CUDA device function) once per window,
    on its values (and their timestamps for a function `with_timestamps`): made once per
    function and dtype; numba compiles it at its first launch."""
    key = (function.function, dtype, function.with_timestamps)
    with _LOCK:
        kernel = _KERNELS.get(key)
        if kernel is not None:
            return kernel
    device_function = cuda.jit(device=True)(_python_function(function.function))

    if function.with_timestamps:

        @cuda.jit
        def call_per_window(values, times, offsets, n, out):
            start = cuda.grid(1)
            stride = cuda.gridsize(1)
            for r in range(start, n.shape[0], stride):
                if n[r] > 0:  # a window without non-NULL values is NULL: not called
                    at = offsets[r]
                    out[r] = device_function(values[at : at + n[r]], times[at : at + n[r]])

    else:

        @cuda.jit
        def call_per_window(values, times, offsets, n, out):
            start = cuda.grid(1)
            stride = cuda.gridsize(1)
            for r in range(start, n.shape[0], stride):
                if n[r] > 0:
                    out[r] = device_function(values[offsets[r] : offsets[r] + n[r]])

    with _LOCK:
        return _KERNELS.setdefault(key, call_per_window)


def evaluate_python(
    xp: Any,  # noqa: ANN401 - cupy (numpy under numba's CUDA simulator in tests)
    function: WindowFunction,
    keys: Any,  # noqa: ANN401 - device arrays (host ones are copied up)
    run_start: Any,  # noqa: ANN401
    run_end: Any,  # noqa: ANN401
    row_first: Any,  # noqa: ANN401
    row_runs: Any,  # noqa: ANN401
    floating: bool,
    times: Any = None,  # noqa: ANN401
) -> tuple[np.ndarray, np.ndarray]:
    """(n, result) per row on the host, as `runtime.cpu.python_window.evaluate_python` with
    sorted runs (see the module docstring). `keys` are order keys of float64 values when
    `floating`, else the int64 values themselves; `times` their event times, required by a
    function `with_timestamps`."""
    timed = function.with_timestamps
    if timed and times is None:
        raise ValueError(f"window function {function.name!r} needs the values' timestamps")
    keys, run_start, run_end, row_first, row_runs = (
        xp.ascontiguousarray(xp.asarray(a, dtype=xp.int64))
        for a in (keys, run_start, run_end, row_first, row_runs)
    )
    times = xp.ascontiguousarray(xp.asarray(times if timed else np.zeros(1), dtype=xp.int64))
    rows = int(row_first.shape[0])
    out_dtype = result_dtype(function.returns)
    if not rows:
        return np.zeros(0, np.int64), np.zeros(0, out_dtype)
    # n per row: sums of its run lengths (a row's runs are consecutive entries)
    ends = xp.concatenate((xp.zeros(1, xp.int64), xp.cumsum(run_end - run_start)))
    n = ends[row_first + row_runs] - ends[row_first]
    host_n = _host(n)
    widest = int(_host(row_runs.max())) + 1
    out = np.zeros(rows, out_dtype)
    kernel = _function_kernel(function, "float64" if floating else "int64")
    stream = _stream(xp)
    for lo, hi in _launches(host_n):
        chunk_n = n[lo:hi]
        chunk_offsets = xp.asarray(np.concatenate(([0], np.cumsum(host_n[lo : hi - 1]))))
        total = int(host_n[lo:hi].sum())
        if total == 0:
            continue  # no window of these has a value: all NULL, the function not called
        merged = xp.empty(total, xp.int64)
        other = xp.empty(total, xp.int64)
        # the times' buffers (one element each when the function reads none)
        merged_times = xp.empty(total if timed else 1, xp.int64)
        other_times = xp.empty(total if timed else 1, xp.int64)
        bounds = xp.empty((hi - lo) * widest, xp.int64)
        _gather_merge[min(MAX_BLOCKS, hi - lo), THREADS_PER_BLOCK, stream](
            keys,
            times,
            run_start,
            run_end,
            xp.ascontiguousarray(row_first[lo:hi]),
            xp.ascontiguousarray(row_runs[lo:hi]),
            chunk_offsets,
            chunk_n,
            bounds,
            bool(floating),
            bool(timed),
            merged,
            other,
            merged_times,
            other_times,
        )
        values = merged.view(xp.float64) if floating else merged
        chunk_out = xp.zeros(hi - lo, out_dtype)
        threads = function_threads(hi - lo, _multiprocessors(xp))
        blocks = min(MAX_BLOCKS, -(-(hi - lo) // threads))
        kernel[blocks, threads, stream](values, merged_times, chunk_offsets, chunk_n, chunk_out)
        out[lo:hi] = _host(chunk_out)
    return host_n, out


def _launches(n: np.ndarray) -> list[tuple[int, int]]:
    """Row ranges [lo, hi) of at most MAX_VALUES values each (a larger window alone)."""
    cumulative = np.cumsum(n)
    ranges = []
    lo = 0
    while lo < len(n):
        before = int(cumulative[lo - 1]) if lo else 0
        hi = int(np.searchsorted(cumulative, before + MAX_VALUES, side="right"))
        hi = max(hi, lo + 1)
        ranges.append((lo, hi))
        lo = hi
    return ranges


def _multiprocessors(xp: Any) -> int:  # noqa: ANN401
    """The current device's multiprocessor count (1 under the simulator, with numpy)."""
    device_type = getattr(getattr(xp, "cuda", None), "Device", None)
    if device_type is None:
        return 1
    device = device_type()
    count = _MULTIPROCESSORS.get(device.id)
    if count is None:
        count = _MULTIPROCESSORS[device.id] = int(device.attributes["MultiProcessorCount"])
    return count


def _stream(xp: Any) -> Any:  # noqa: ANN401
    """CuPy's current stream for numba's launches (the simulator's default with numpy)."""
    current = getattr(getattr(xp, "cuda", None), "get_current_stream", None)
    if current is None:
        return 0
    pointer = current().ptr
    return cuda.external_stream(pointer) if pointer else cuda.default_stream()


def _host(array: Any) -> np.ndarray:  # noqa: ANN401
    """A host copy of a device array (numpy arrays as they are)."""
    getter = getattr(array, "get", None)
    return np.asarray(getter() if getter is not None else array)
