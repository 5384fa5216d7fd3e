"""Backend-neutral kernel code over a window's runs of values, compiled by each backend:
plain Python functions that import nothing, which the CPU compiles with `numba.njit` and the
GPU with `numba.cuda.jit(device=True)` (runtime/cpu/python_window.py and
runtime/gpu/python_window.py), so the logic is written once and neither backend imports the
other. Only what both targets type: scalars and 1-d arrays indexed by integers."""

from __future__ import annotations

from typing import Any


def gather_runs(
    keys: Any,  # noqa: ANN401 - numba arrays (host or device)
    times: Any,  # noqa: ANN401
    run_start: Any,  # noqa: ANN401
    run_end: Any,  # noqa: ANN401
    first_run: int,
    runs: int,
    timed: bool,
    out: Any,  # noqa: ANN401
    out_times: Any,  # noqa: ANN401
    bounds: Any,  # noqa: ANN401
    at: int,
    base: int,
) -> int:
    """Copies a window's runs [first_run, first_run + runs) (run j: keys[run_start[j] :
    run_end[j]]) one after another into `out` from index `base` on (their event times into
    `out_times` when `timed`), skipping empty runs; `bounds[at]` = base and `bounds[at + c]`
    = where the c-th non-empty run ends. Returns how many runs were not empty."""
    filled = base
    count = 0
    bounds[at] = base
    for j in range(first_run, first_run + runs):
        if run_end[j] == run_start[j]:
            continue
        for i in range(run_start[j], run_end[j]):
            out[filled] = keys[i]
            if timed:
                out_times[filled] = times[i]
            filled += 1
        count += 1
        bounds[at + count] = filled
    return count
