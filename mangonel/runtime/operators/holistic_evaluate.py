"""The evaluation of the exact holistic functions over runs of order keys (MEDIAN,
PERCENTILE_*, COUNT DISTINCT, Python window functions), shared by the time-window driver
(`holistic.HolisticTimeWindows`), count windows (`count_window.py`) and session windows
(`session_window.py`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from mangonel.aggregates.holistic import from_order_keys
from mangonel.compiler.physical import AggregatePlan, StateField


def evaluate(
    kernels: Any,  # noqa: ANN401 - the backend's kernels (`holistic_select`)
    plan: AggregatePlan,
    value_field: StateField,
    values: np.ndarray,
    runs: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    sorted_runs: bool,
    times: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(non-NULL count, value) per result row of one holistic aggregate over its rows'
    runs `(run_start, run_end, row_first, row_runs)` into `values` (order keys); `times`:
    the values' event times (a Python function `with_timestamps` reads them). A percentile
    over an ARRAY of p (`plan.fractions`) gives value[rows, len(ps)], every p from one
    selection call over the same runs."""
    return evaluate_later(kernels, plan, value_field, values, runs, sorted_runs, times)()


def evaluate_later(
    kernels: Any,  # noqa: ANN401 - the backend's kernels (`holistic_select_later`)
    plan: AggregatePlan,
    value_field: StateField,
    values: np.ndarray,
    runs: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    sorted_runs: bool,
    times: np.ndarray | None = None,
) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
    """`evaluate` with the selection launched now and its results read when the returned
    function is called (on the GPU the wait for the device is there: a firing launches
    all its chunks first). A Python window function is evaluated now."""
    evaluation = plan.evaluation  # an APPROX_PERCENTILE answered exactly: percentile_disc
    assert evaluation is not None
    if plan.python is not None:  # the user's function over the sorted, decoded values
        floating = value_field.type.is_floating
        found = kernels.python_window(plan.python, values, *runs, sorted_runs, floating, times)
        return lambda: found
    # an ARRAY of p: every p selected in the one call over the same runs (lower and higher
    # [rows, len(ps)]); a single p: [rows]
    fraction = plan.percentages
    fraction = 0.0 if fraction is None else fraction
    if evaluation == "percentile_cont" and getattr(kernels, "finishes_percentile_cont", False):
        # the GPU interpolates in the selection kernel, `percentile_values`' operations in
        # its order: the firing reads one value a row and runs no host pass over them
        floating = value_field.type.is_floating
        return kernels.holistic_select_later(
            values, *runs, evaluation, fraction, sorted_runs, floating=floating
        )
    read = kernels.holistic_select_later(values, *runs, evaluation, fraction, sorted_runs)
    return lambda: percentile_values(plan, value_field, *read())


def percentile_values(
    plan: AggregatePlan,
    value_field: StateField,
    n: np.ndarray,
    lower: np.ndarray,
    higher: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(n, value) of a holistic aggregate from the selection's n and order keys at the lower
    and higher positions (`holistic_select`'s, or the sliding percentiles'): COUNT DISTINCT's
    count, PERCENTILE_DISC's value, PERCENTILE_CONT's interpolation."""
    evaluation = plan.evaluation
    if evaluation == "count_distinct":
        return n, lower
    fraction = plan.percentages
    fraction = 0.0 if fraction is None else fraction
    floating = value_field.type.is_floating
    low = from_order_keys(lower, floating)
    if evaluation == "percentile_disc":
        return n, low
    # Spark's interpolation (4.x): position p * (n - 1) between its floor and ceiling, as
    # v[lower] + (position - lower) * (v[higher] - v[lower]) (checked bit for bit against
    # Spark 4.3's percentile; the form (higher - position) * v[lower] + (position - lower) *
    # v[higher] differed in the last bit and at the extremes: +/-1.7e308 gave 0.0, not inf)
    high = from_order_keys(higher, floating).astype(np.float64)
    low = low.astype(np.float64)
    ps = np.asarray(fraction, np.float64)
    count = (np.maximum(n, 1) - 1).astype(np.float64)
    position = ps * (count[:, None] if ps.ndim else count)
    below = np.floor(position)
    above = np.ceil(position)
    with np.errstate(invalid="ignore"):
        mixed = low + (position - below) * (high - low)
    return n, np.where(above == below, low, mixed)
