"""Argument checks shared by the sketch kernels (`sketch_hll`, `sketch_quantile`): numba does
not check bounds, so a cell id or group member out of range must be refused here, before a
kernel writes or reads outside its arrays."""

from __future__ import annotations

import numpy as np


def batch_rows(
    cells: np.ndarray, values: np.ndarray, valid: np.ndarray | None, n_cells: int
) -> tuple[np.ndarray, np.ndarray]:
    """(cells as int64, valid as bool) of a batch, checked: one cell id and one validity per
    value, every id in [0, n_cells). valid None means every row counts."""
    cells = np.ascontiguousarray(cells, np.int64)
    n = values.shape[0]
    valid = np.ones(n, np.bool_) if valid is None else np.ascontiguousarray(valid, np.bool_)
    if cells.shape != (n,) or valid.shape != (n,):
        raise ValueError(
            f"{n} values need {n} cell ids and validities, got {cells.shape} and {valid.shape}"
        )
    if n and (cells.min() < 0 or cells.max() >= n_cells):
        raise ValueError(f"cell ids must lie in [0, {n_cells})")
    return cells, valid


def groups(members: np.ndarray, offsets: np.ndarray, n_cells: int) -> tuple[np.ndarray, np.ndarray]:
    """(members, offsets) as int64, checked: group g is members[offsets[g]:offsets[g + 1]],
    offsets start at 0, never decrease and end at len(members); members lie in [0, n_cells)."""
    members = np.ascontiguousarray(members, np.int64)
    offsets = np.ascontiguousarray(offsets, np.int64)
    if (
        offsets.ndim != 1
        or offsets.shape[0] == 0
        or offsets[0] != 0
        or offsets[-1] != members.shape[0]
        or np.any(np.diff(offsets) < 0)
    ):
        raise ValueError("group offsets must rise from 0 to the number of members")
    if members.shape[0] and (members.min() < 0 or members.max() >= n_cells):
        raise ValueError(f"group members must be cells in [0, {n_cells})")
    return members, offsets
