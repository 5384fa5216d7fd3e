"""Finalize of a window firing: the cells that hold rows and the aggregate results from their
state-field values (host side, Arrow; the GPU finalizes on the device instead,
`gpu.state.GpuPaneState.fire`), and the window-result batch the window operator emits
(`physical.window_result_columns`)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mangonel.catalog.types import ArrayType
from mangonel.compiler import physical as ph
from mangonel.compiler.physical import AggregatePlan
from mangonel.runtime.host.arrays import array_with_nulls
from mangonel.runtime.operators import project


def finalize(
    plans: tuple[AggregatePlan, ...],
    values: dict[str, tuple[np.ndarray, ...]],
    holistic: dict[int, tuple[np.ndarray, np.ndarray]] | None = None,
) -> list[pa.Array]:
    """The aggregate results (Arrow, plan result types) from selected field values: each
    function's own `finalize` (`mangonel.aggregates`) on numpy, then Arrow. A holistic
    aggregate at position i reads `holistic[i]`: (non-NULL count, selected value) per cell,
    from the holistic evaluation (`operators.holistic`)."""
    results = []
    for position, plan in enumerate(plans):
        if plan.holistic:
            assert holistic is not None, "holistic aggregates need the holistic evaluation"
            count, selected = holistic[position]
            if isinstance(plan.result_type, ArrayType):
                results.append(_percentile_array(plan, count, selected))
                continue
            data, null = plan.function.definition.finalize(np, count, (selected,), plan.result_type)
            results.append(array_with_nulls(data, null).cast(plan.result_type.info.arrow))
            continue
        count = values[plan.count_field][0]
        value = values[plan.value_field] if plan.value_field is not None else None
        data, null = plan.function.definition.finalize(np, count, value, plan.result_type)
        results.append(array_with_nulls(data, null).cast(plan.result_type.info.arrow))
    return results


def _percentile_array(plan: AggregatePlan, count: np.ndarray, selected: np.ndarray) -> pa.Array:
    """A percentile over an ARRAY of p: per cell a list of one value per p (`selected`
    [cells, ps]), each finalized as the single-p function finalizes it; the whole list NULL
    where the cell has no non-NULL value (Spark's: NULL, not a list of NULLs)."""
    assert isinstance(plan.result_type, ArrayType)
    element = plan.result_type.element
    assert plan.fractions is not None
    cells, ps = len(count), len(plan.fractions)
    selected = np.asarray(selected).reshape(cells, ps)  # a firing of no rows may come flat
    empty = count == 0
    # every element of a cell shares its count; an empty cell's elements are hidden
    selected = np.where(empty[:, None], 0, selected) if empty.any() else selected
    data, _ = plan.function.definition.finalize(
        np, np.repeat(np.where(empty, 1, count), ps), (selected.reshape(-1),), element
    )
    values = pa.array(np.ascontiguousarray(data)).cast(element.info.arrow)
    offsets = pa.array(np.arange(cells + 1, dtype=np.int32) * ps)
    lists = pa.ListArray.from_arrays(
        offsets, values, type=plan.result_type.info.arrow, mask=pa.array(empty)
    )
    return lists


def cells_with_rows(
    values: dict[str, tuple[np.ndarray, ...]],
    rows_field: str,
    n_keys: int,
    window_ids: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, dict[str, tuple[np.ndarray, ...]]]:
    """The (window, key) cells of a firing that hold rows (the row count of `rows_field`,
    part 0, > 0), from host field values of `len(window_ids) * n_keys` cells, window-major:
    (window of cell, key slot of cell, the fields' values there)."""
    has_rows = values[rows_field][0] > 0
    everything = bool(has_rows.all())  # dense keys: no selection copy
    if everything:  # cells are window-major: no integer division per cell
        window_of_cell = np.repeat(window_ids, n_keys)
        slot_of_cell = np.tile(np.arange(n_keys, dtype=np.int64), len(window_ids))
        return window_of_cell, slot_of_cell, values
    selected = np.flatnonzero(has_rows)
    window_number, slot_of_cell = np.divmod(selected, n_keys)
    chosen = {name: tuple(part[selected] for part in parts) for name, parts in values.items()}
    return window_ids[window_number], slot_of_cell, chosen


def window_ids_of(runs: list[tuple[int, int]]) -> np.ndarray:
    """The window numbers of runs [(first window, count)], in order."""
    if not runs:
        return np.empty(0, np.int64)
    return np.concatenate([np.arange(f, f + c, dtype=np.int64) for f, c in runs])


def window_bounds(window_ids: np.ndarray, slide: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) in microseconds of RANGE size SLIDE slide windows by id: [id*s, id*s + w)."""
    starts = window_ids * slide
    return starts, starts + size


_TIMESTAMP_UTC = pa.timestamp("us", tz="UTC")


def _timestamps(micros: np.ndarray) -> pa.Array:
    # a view of the int64 buffer as timestamps (an Arrow cast copies and checks every value)
    micros = np.ascontiguousarray(micros, np.int64)
    return pa.Array.from_buffers(_TIMESTAMP_UTC, len(micros), [None, pa.py_buffer(micros)])


def window_result_schema(node: ph.WindowAggregateExec) -> pa.Schema:
    """The Arrow schema of the window operator's result batches."""
    keys = [(k.name, k.type) for k in node.keys]
    return project.window_result_schema(keys, [a.result_type for a in node.aggregates])


def window_result_batch(
    schema: pa.Schema,
    keys: list[pa.Array],
    aggregates: list[pa.Array],
    window_start: np.ndarray,
    window_end: np.ndarray,
) -> pa.RecordBatch:
    """One row per fired (window, key): keys, bounds, aggregate results (no copy)."""
    arrays = [*keys, _timestamps(window_start), _timestamps(window_end), *aggregates]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
