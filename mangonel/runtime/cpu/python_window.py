"""Python window functions (`aggregates.python`) compiled with numba for the CPU.

`compile_window_function` compiles the user's function (`numba.njit`, nopython) for the
argument's array type and checks what it returns against the declared type; the session
calls it at registration (float64 values) and at planning (the call's argument type), so a
function numba cannot compile is refused with its name and numba's reason before any data
flows.

`evaluate_python` runs it over windows: one compiled loop (`_evaluate`) walks a batch of
result rows, copies each row's runs (its panes' sorted values, or a count window's run of
tuples) into a scratch buffer, merges the sorted runs pairwise (a count window's one run, in
event-time order, is sorted stably), and calls the function once on the window's values (and,
for a function `with_timestamps`, their event times, moved with them): no Python per window,
one call per batch of windows. The loop takes the function as a first-class function value of a
fixed signature (`_FunctionKey`: the values' and the result's dtype), so it is compiled
once per signature and kept in numba's on-disk cache, not once per user function in every
process: a fresh process (a test worker, a Spark Python worker, a user's first query) paid
5.5 s before its first window and 0.9 s for each further function (this VM, 2026-12-06);
now the user's function and a small wrapper fixing its signature are all that compile.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
from numba.core.registry import CPUDispatcher

from mangonel.aggregates.python import WindowFunction, result_dtype, values_dtype
from mangonel.catalog.types import SqlType
from mangonel.errors import FunctionError, PlanError

_ARRAY_TYPES = {
    np.dtype(np.float64): numba.types.Array(numba.types.float64, 1, "C"),
    np.dtype(np.int64): numba.types.Array(numba.types.int64, 1, "C"),
}
_DISPATCHERS: dict[Callable[..., Any], CPUDispatcher] = {}
_INT64_ARRAY = _ARRAY_TYPES[np.dtype(np.int64)]
_TIMES_TYPE = _INT64_ARRAY  # a function's event times (microseconds)
_LOCK = threading.Lock()


def _dispatcher(function: Callable[..., Any]) -> CPUDispatcher:
    """The nopython dispatcher of a user function (the function itself when it already is
    one), made once per function."""
    with _LOCK:
        dispatcher = _DISPATCHERS.get(function)
        if dispatcher is None:
            if isinstance(function, CPUDispatcher):
                dispatcher = function  # compiled by the user: their options, as they are
            else:
                # bounds checked: the values are a view of a scratch buffer, so an index past
                # the window's last value would read another window's (or beyond the buffer)
                # instead of raising IndexError
                dispatcher = numba.njit(function, boundscheck=True)
            _DISPATCHERS[function] = dispatcher
        return dispatcher


_FunctionKey = tuple[np.dtype, np.dtype]  # (the values' dtype, the result's dtype)
_WRAPPERS: dict[tuple[CPUDispatcher, bool, _FunctionKey], CPUDispatcher] = {}


def _function_type(key: _FunctionKey) -> numba.types.FunctionType:
    """What `_evaluate` calls: result(values, timestamps), both arrays C-contiguous."""
    values, result = key
    scalar = _ARRAY_TYPES[result].dtype
    return numba.types.FunctionType(scalar(_ARRAY_TYPES[values], _TIMES_TYPE))


def _caller(function: WindowFunction, key: _FunctionKey) -> CPUDispatcher:
    """The function as `_evaluate` calls it: compiled for exactly `_function_type(key)`, its
    result cast to the result dtype and, unless it is `with_timestamps`, the timestamps
    dropped (one wrapper per function and key)."""
    dispatcher = _dispatcher(function.function)
    timed = function.with_timestamps
    with _LOCK:
        caller = _WRAPPERS.get((dispatcher, timed, key))
    if caller is None:
        signature = _function_type(key).signature
        if timed:

            def call(values, times):  # noqa: ANN001, ANN202
                return dispatcher(values, times)

        else:

            def call(values, times):  # noqa: ANN001, ANN202, ARG001
                return dispatcher(values)

        compiled = numba.njit(signature)(call)
        with _LOCK:
            caller = _WRAPPERS.setdefault((dispatcher, timed, key), compiled)
    return caller


def compile_window_function(function: WindowFunction, argument_type: SqlType | None) -> None:
    """Compile `function` for an array of `argument_type` values; raise PlanError naming
    the function and numba's reason when it does not compile, or when its result does not
    fit the declared type (a float where an integer type is declared). `argument_type`
    None (registration, the argument unknown yet): it must compile for float64 or for int64
    values; the error is float64's when neither does."""
    if argument_type is not None:
        problem = _compile_problem(function, values_dtype(argument_type))
        if problem is not None:
            raise problem
        return
    problems = [_compile_problem(function, np.dtype(d)) for d in (np.float64, np.int64)]
    if all(problems):
        raise problems[0]  # type: ignore[misc]


def _compile_problem(function: WindowFunction, dtype: np.dtype) -> PlanError | None:
    arguments = (_ARRAY_TYPES[dtype],) + ((_TIMES_TYPE,) if function.with_timestamps else ())
    try:
        dispatcher = _dispatcher(function.function)
        dispatcher.compile(arguments)
    except Exception as error:  # numba's errors are many classes; all mean "cannot compile"
        reason = " ".join(str(error).split())
        if len(reason) > 600:
            reason = reason[:597] + "..."
        return PlanError(
            f"Python window function {function.name!r} does not compile with numba for "
            f"{dtype} values: {reason}",
            hint="the function takes one NumPy array (and an int64 array of timestamps when "
            "registered with_timestamps=True) and returns one number, in numba's "
            "nopython subset (NumPy calls, loops, no Python objects; helpers it calls are "
            "numba.njit functions themselves)",
        )
    returned = dispatcher.overloads[arguments].signature.return_type
    integer = isinstance(returned, (numba.types.Integer, numba.types.Boolean))
    floating = isinstance(returned, numba.types.Float)
    if isinstance(returned, numba.types.NoneType):
        return PlanError(
            f"Python window function {function.name!r} returns nothing for {dtype} values: "
            "every path of it raises or ends without a return",
            hint="return one number; a function that raises for some windows only stops "
            "the query with FunctionError when it does",
        )
    if not (integer or floating) or (floating and not function.returns.is_floating):
        return PlanError(
            f"Python window function {function.name!r} returns {returned} for {dtype} "
            f"values, which does not fit returns={function.returns.value}",
            hint="declare returns='DOUBLE' for a floating result, or return an integer",
        )
    return None


@numba.njit(cache=True)
def _merge_runs(window, other, times, other_times, bounds, count, timed):
    """Sort `window` made of `count` ascending runs (`bounds[i]:bounds[i + 1]`) by merging
    neighbouring runs pairwise, ping-ponging with `other`: O(n log runs) with sequential
    reads, instead of a sort of the whole window (O(n log n)). Stable: of equal values the
    left run's come first (runs are in pane order, so ties stay in event-time order).
    `timed`: `times` (the values' event times) move with them, through `other_times`.
    Returns the sorted buffers (values, times)."""
    source, target = window, other
    source_times, target_times = times, other_times
    while count > 1:
        merged = 0
        for first in range(0, count, 2):
            lo = bounds[first]
            if first + 1 == count:  # an odd run out: copied as it is
                hi = bounds[first + 1]
                target[lo:hi] = source[lo:hi]
                if timed:
                    target_times[lo:hi] = source_times[lo:hi]
                bounds[merged] = lo
                merged += 1
                continue
            mid, hi = bounds[first + 1], bounds[first + 2]
            i, j = lo, mid
            for k in range(lo, hi):
                if i >= mid or (j < hi and source[j] < source[i]):
                    target[k] = source[j]
                    if timed:
                        target_times[k] = source_times[j]
                    j += 1
                else:
                    target[k] = source[i]
                    if timed:
                        target_times[k] = source_times[i]
                    i += 1
            bounds[merged] = lo
            merged += 1
        bounds[merged] = bounds[count]
        count = merged
        source, target = target, source
        source_times, target_times = target_times, source_times
    return source, source_times


@numba.njit(inline="always", cache=True)
def _gather_runs(keys, times, run_start, run_end, first_run, runs, timed, out, out_times, bounds):
    """Copies a window's runs [first_run, first_run + runs) (run j: keys[run_start[j] :
    run_end[j]]) one after another into `out` (their event times into `out_times` when
    `timed`), skipping empty runs; `bounds[0]` = 0 and `bounds[c]` = where the c-th
    non-empty run ends. Returns how many runs were not empty. (The GPU's copy spreads the
    same over a block's threads: `runtime.gpu.python_window._gather_merge`.)"""
    filled = 0
    count = 0
    bounds[0] = 0
    for j in range(first_run, first_run + runs):
        if run_end[j] == run_start[j]:
            continue
        for i in range(run_start[j], run_end[j]):
            out[filled] = keys[i]
            if timed:
                out_times[filled] = times[i]
            filled += 1
        count += 1
        bounds[count] = filled
    return count


@numba.njit(cache=True)
def _totals(run_start, run_end, row_first, row_runs, n):
    """Fill n (values per row); return the largest."""
    largest = 0
    for r in range(row_first.shape[0]):
        total = 0
        for j in range(row_first[r], row_first[r] + row_runs[r]):
            total += run_end[j] - run_start[j]
        n[r] = total
        largest = max(largest, total)
    return largest


def _evaluate_rows(
    fn,
    keys,
    times,
    run_start,
    run_end,
    row_first,
    row_runs,
    sorted_runs,
    floating,
    timed,
    n,
    bits,
    view,
    window_times,
    out,
):
    largest = bits.shape[0]
    scratch = np.empty(largest, np.int64)
    other = np.empty(largest, np.int64)
    scratch_times = np.empty(largest if timed else 0, np.int64)
    other_times = np.empty(largest if timed else 0, np.int64)
    bounds = np.empty(np.max(row_runs) + 1, np.int64)
    flip = np.int64(0x7FFFFFFFFFFFFFFF)
    for r in range(row_first.shape[0]):
        total = n[r]
        if total == 0:
            continue  # no non-NULL value: NULL, the function is not called
        nonempty = _gather_runs(
            keys,
            times,
            run_start,
            run_end,
            row_first[r],
            row_runs[r],
            timed,
            scratch,
            scratch_times,
            bounds,
        )
        # sorted by order key: Spark's order of the values (NaN largest, -0.0 as 0.0); of
        # equal values the earlier event time first
        window = scratch[:total]
        stamps = scratch_times[:total]
        if sorted_runs and nonempty > 1:
            merged, merged_times = _merge_runs(
                scratch, other, scratch_times, other_times, bounds, nonempty, timed
            )
            window = merged[:total]
            stamps = merged_times[:total]
        elif not sorted_runs:  # a count window's run is in event-time order: stable sort
            order = np.argsort(window, kind="mergesort")
            window = window[order]
            if timed:
                stamps = stamps[order]
        # decoded into `bits`, which `view` reads as the argument's dtype (the times into
        # `window_times`); rewritten for the next row, so a function changing its arguments
        # in place changes nothing else
        for i in range(total):
            key = window[i]
            bits[i] = (key ^ flip) if floating and key < 0 else key
            if timed:
                window_times[i] = stamps[i]
        out[r] = fn(view[:total], window_times[:total])


_DRIVERS: dict[_FunctionKey, CPUDispatcher] = {}


def _evaluate(key: _FunctionKey) -> CPUDispatcher:
    """`_evaluate_rows` compiled for the functions of `key` (eagerly, from numba's cache
    where it is there): an explicit signature, so a function passed to it is converted to
    the first-class function type, not specialised on."""
    with _LOCK:
        driver = _DRIVERS.get(key)
        if driver is None:
            values, result = key
            flag = numba.types.boolean
            signature = numba.types.void(
                _function_type(key),
                *(_INT64_ARRAY,) * 6,  # keys, times, run_start, run_end, row_first, row_runs
                flag,  # sorted_runs
                flag,  # floating
                flag,  # timed
                _INT64_ARRAY,  # n
                _INT64_ARRAY,  # bits
                _ARRAY_TYPES[values],  # view
                _TIMES_TYPE,  # window_times
                _ARRAY_TYPES[result],  # out
            )
            driver = numba.njit(signature, cache=True)(_evaluate_rows)
            _DRIVERS[key] = driver
        return driver


def evaluate_python(
    function: WindowFunction,
    keys: np.ndarray,
    run_start: np.ndarray,
    run_end: np.ndarray,
    row_first: np.ndarray,
    row_runs: np.ndarray,
    sorted_runs: bool,
    floating: bool,
    times: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(n, result) per row: the function over each row's values (see the module
    docstring). `keys` are order keys (`aggregates.holistic.order_keys`) of float64 values
    when `floating`, else the int64 values themselves; `times` the values' event times
    (microseconds), required by a function `with_timestamps`."""
    rows = len(row_first)
    n = np.zeros(rows, np.int64)
    out = np.zeros(rows, result_dtype(function.returns))
    if not rows:
        return n, out
    timed = function.with_timestamps
    if timed and times is None:
        raise ValueError(f"window function {function.name!r} needs the values' timestamps")
    run_start = np.ascontiguousarray(run_start, np.int64)
    run_end = np.ascontiguousarray(run_end, np.int64)
    row_first = np.ascontiguousarray(row_first, np.int64)
    row_runs = np.ascontiguousarray(row_runs, np.int64)
    largest = _totals(run_start, run_end, row_first, row_runs, n)
    bits = np.empty(largest, np.int64)
    key = (np.dtype(np.float64 if floating else np.int64), out.dtype)
    caller = _caller(function, key)
    try:
        _evaluate(key)(
            caller,
            np.ascontiguousarray(keys, np.int64),
            np.ascontiguousarray(times if timed else np.zeros(0), np.int64),
            run_start,
            run_end,
            row_first,
            row_runs,
            bool(sorted_runs),
            bool(floating),
            bool(timed),
            n,
            bits,
            bits.view(np.float64) if floating else bits,
            np.empty(largest if timed else 0, np.int64),
            out,
        )
    except Exception as error:  # what the user's function raised, inside the compiled loop
        raise FunctionError(
            f"Python window function {function.name!r} raised {type(error).__name__}: "
            f"{error} (on a window of at most {largest} values); the query stops"
        ) from error
    return n, out
