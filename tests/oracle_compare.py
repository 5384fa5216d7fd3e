"""Comparing the engine's rows with the oracle's (tests/oracle.py): same rows in the same
order, floats within a relative tolerance and the oracle's absolute one, approximate answers
within their bound (`Approximate`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from oracle_aggregates import REL_TOL, Approximate


def _same_float(x: float, y: float, rel: float, tolerance: float) -> bool:
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    if math.isinf(x) or math.isinf(y):
        return x == y
    return math.isclose(x, y, rel_tol=rel, abs_tol=max(tolerance, rel))


def rows_close(
    actual: list[dict],
    expected: list[dict],
    rel: float = REL_TOL,
    tolerances: Sequence[dict] | None = None,
) -> bool:
    """Same rows in the same order; floats within a relative tolerance (and the absolute one
    the oracle gave for that cell, if any), NaN equal to NaN; the rest exact, same type."""
    return first_difference(actual, expected, rel, tolerances) is None


def first_difference(
    actual: list[dict],
    expected: list[dict],
    rel: float = REL_TOL,
    tolerances: Sequence[dict] | None = None,
) -> str | None:
    """None when `rows_close`, else a sentence saying where the rows first differ."""
    if len(actual) != len(expected):
        return f"{len(actual)} rows where {len(expected)} were expected"
    for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
        if a.keys() != e.keys():
            return f"row {index} has columns {list(a)} where {list(e)} were expected"
        for name in a:
            x, y = a[name], e[name]
            if isinstance(y, Approximate):
                if not y.accepts(x):
                    return f"row {index} column {name}: {x!r} where {y!r} was expected"
            elif isinstance(x, float) and isinstance(y, float):
                tolerance = tolerances[index].get(name, 0.0) if tolerances else 0.0
                if not _same_float(x, y, rel, tolerance):
                    return f"row {index} column {name}: {x!r} where {y!r} was expected"
            elif x != y or type(x) is not type(y):
                return f"row {index} column {name}: {x!r} where {y!r} was expected"
    return None
