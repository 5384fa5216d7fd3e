"""The output rows of a join without aggregation (the driver is join.py): the joined
columns gathered from both sides' stored rows, the window bounds as runs of equal windows,
and the pairs of the windows that fire, joined then (`rows=firing`, `joined_at_firing`).

Row ids here are local: a row's position among its side's stored rows (`JoinSide.base` is
the global id of the first); a negative id stands for the NULL side of an outer row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

from mangonel.runtime.host.arrays import take_rows
from mangonel.runtime.operators.join_sides import JoinSide


def gather(
    sides: Sequence[JoinSide],
    left: np.ndarray,
    right: np.ndarray,
    names: frozenset[str] | None = None,
    outer: bool = True,
) -> dict[str, pa.Array]:
    """The joined rows' columns (`alias.column`; `names`: only those) at local row ids,
    NULL where an id is negative (`outer=False`: the caller knows none is: inner pairs)."""
    columns: dict[str, pa.Array] = {}
    for side, ids in zip(sides, (left, right), strict=True):
        schema = side.conformer.schema  # type: ignore[attr-defined]
        wanted = [n for n in schema.names if names is None or f"{side.alias}.{n}" in names]
        if not wanted:
            continue
        table = side.table(schema)
        # outer rows: checked once per side, not per column
        missing = outer and len(ids) > 0 and int(ids.min()) < 0
        for name in wanted:
            columns[f"{side.alias}.{name}"] = take_rows(table.column(name), ids, missing)
    return columns


def window_runs(windows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(window, rows) of each run of equal windows in `windows` (sorted by window)."""
    if not len(windows):
        empty = np.empty(0, np.int64)
        return empty, empty
    starts = np.flatnonzero(np.concatenate([[True], windows[1:] != windows[:-1]]))
    return windows[starts], np.diff(np.append(starts, len(windows)))


def window_bounds(
    kernels,  # noqa: ANN001 - the backend's JoinKernels
    runs: tuple[np.ndarray, np.ndarray],
    size: int,
    slide: int,
) -> tuple[pa.Array, pa.Array]:
    """The window_start and window_end columns of rows in window runs: the kernels'
    `window_bounds` (both in one pass) where they have it, else two NumPy repeats."""
    windows, rows = runs
    fill = getattr(kernels, "window_bounds", None)
    if fill is not None:
        start, end = fill(windows, rows, size, slide)
    else:
        start = np.repeat(windows * slide, rows)
        end = start + size
    return _timestamps(start), _timestamps(end)


def joined_at_firing(
    kernels,  # noqa: ANN001 - the backend's JoinKernels, with join_windows
    sides: Sequence[JoinSide],
    lo: int,
    hi: int,
    residual: Callable[[np.ndarray, np.ndarray], np.ndarray] | None,
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """The pairs of windows lo..hi among the stored rows of both sides (each row in the
    windows [first, last] it contributed to), window by window: (left ids, right ids,
    window runs). `residual(left, right)`: the mask of pairs the residual predicate keeps."""
    left, right = sides
    empty = np.empty(0, np.int64)
    if not left.rows or not right.rows:
        return empty, empty, (empty, empty)
    left_ids, right_ids, windows, rows = kernels.join_windows(
        (left.slots.view, left.first.view, left.last.view),
        (right.slots.view, right.first.view, right.last.view),
        lo,
        hi,
    )
    if residual is not None and len(left_ids):
        keep = residual(left_ids, right_ids)
        run_of_pair = np.repeat(np.arange(len(windows)), rows)
        rows = np.bincount(run_of_pair[keep], minlength=len(windows))
        left_ids, right_ids = left_ids[keep], right_ids[keep]
        windows, rows = windows[rows > 0], rows[rows > 0]
    return left_ids, right_ids, (windows, rows)


def _timestamps(micros: np.ndarray) -> pa.Array:
    values = np.ascontiguousarray(micros, np.int64)
    return pa.Array.from_buffers(
        pa.timestamp("us", tz="UTC"), len(values), [None, pa.py_buffer(values)]
    )


__all__ = ["gather", "joined_at_firing", "window_bounds", "window_runs"]
