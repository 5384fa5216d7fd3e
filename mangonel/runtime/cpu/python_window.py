"""Python window functions (`aggregates.python`) compiled with numba for the CPU.

`compile_window_function` compiles the user's function (`numba.njit`, nopython) for the
argument's array type and checks what it returns against the declared type; the session
calls it at registration (float64 values) and at planning (the call's argument type), so a
function numba cannot compile is refused with its name and numba's reason before any data
flows.

`evaluate_python` runs it over windows: one compiled loop per function (numba specialises
the driver on the function, a first-class dispatcher argument) walks a batch of result rows,
copies each row's runs (its panes' sorted values, or a count window's run of tuples) into a
scratch buffer, sorts it unless it came from one sorted run, and calls the function once on
the window's values: no Python per window, one call per batch of windows.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
from numba.core.registry import CPUDispatcher

from mangonel.aggregates.python import WindowFunction
from mangonel.catalog.types import SqlType
from mangonel.errors import PlanError

_ARRAY_TYPES = {
    np.dtype(np.float64): numba.types.Array(numba.types.float64, 1, "C"),
    np.dtype(np.int64): numba.types.Array(numba.types.int64, 1, "C"),
}
_DISPATCHERS: dict[Callable[..., Any], CPUDispatcher] = {}
_LOCK = threading.Lock()


def values_dtype(argument_type: SqlType) -> np.dtype:
    """The dtype of the array a function gets for an argument of this type."""
    return np.dtype(np.float64 if argument_type.is_floating else np.int64)


def result_dtype(returns: SqlType) -> np.dtype:
    return np.dtype(np.float64 if returns.is_floating else np.int64)


def _dispatcher(function: Callable[..., Any]) -> CPUDispatcher:
    """The nopython dispatcher of a user function (the function itself when it already is
    one), made once per function."""
    with _LOCK:
        dispatcher = _DISPATCHERS.get(function)
        if dispatcher is None:
            if isinstance(function, CPUDispatcher):
                dispatcher = function
            else:
                dispatcher = numba.njit(function)
            _DISPATCHERS[function] = dispatcher
        return dispatcher


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
    arguments = (_ARRAY_TYPES[dtype],)
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
            hint="the function takes one NumPy array and returns one number, in numba's "
            "nopython subset (NumPy calls, loops, no Python objects; helpers it calls are "
            "numba.njit functions themselves)",
        )
    returned = dispatcher.overloads[arguments].signature.return_type
    integer = isinstance(returned, (numba.types.Integer, numba.types.Boolean))
    floating = isinstance(returned, numba.types.Float)
    if not (integer or floating) or (floating and not function.returns.is_floating):
        return PlanError(
            f"Python window function {function.name!r} returns {returned} for {dtype} "
            f"values, which does not fit returns={function.returns.value}",
            hint="declare returns='DOUBLE' for a floating result, or return an integer",
        )
    return None


@numba.njit
def _evaluate(fn, values, run_start, run_end, row_first, row_runs, sorted_runs, n, out):
    rows = row_first.shape[0]
    largest = 0
    for r in range(rows):
        total = 0
        for j in range(row_first[r], row_first[r] + row_runs[r]):
            total += run_end[j] - run_start[j]
        n[r] = total
        largest = max(largest, total)
    scratch = np.empty(largest, values.dtype)
    for r in range(rows):
        total = n[r]
        if total == 0:
            continue  # no non-NULL value: NULL, the function is not called
        filled = 0
        nonempty = 0
        for j in range(row_first[r], row_first[r] + row_runs[r]):
            if run_end[j] > run_start[j]:
                nonempty += 1
            for i in range(run_start[j], run_end[j]):
                scratch[filled] = values[i]
                filled += 1
        window = scratch[:total]
        if not (sorted_runs and nonempty == 1):
            window.sort()
        # a copy would cost as much again; the scratch is rewritten for the next row, so a
        # function that changes its argument in place changes nothing else
        out[r] = fn(window)


def evaluate_python(
    function: WindowFunction,
    values: np.ndarray,
    run_start: np.ndarray,
    run_end: np.ndarray,
    row_first: np.ndarray,
    row_runs: np.ndarray,
    sorted_runs: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """(n, result) per row: the function over each row's values (see the module
    docstring). `values` are the decoded values (float64 or int64), not order keys."""
    rows = len(row_first)
    n = np.zeros(rows, np.int64)
    out = np.zeros(rows, result_dtype(function.returns))
    if rows:
        _evaluate(
            _dispatcher(function.function),
            np.ascontiguousarray(values),
            np.ascontiguousarray(run_start, np.int64),
            np.ascontiguousarray(run_end, np.int64),
            np.ascontiguousarray(row_first, np.int64),
            np.ascontiguousarray(row_runs, np.int64),
            bool(sorted_runs),
            n,
            out,
        )
    return n, out
