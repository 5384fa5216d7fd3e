"""The CPU implementation of `WindowKernels` (numpy + numba)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mangonel.aggregates import Layout, LiftInput
from mangonel.catalog.types import SqlType
from mangonel.compiler.holistic import HolisticPlan
from mangonel.compiler.physical import LiftExec, StateField, field_dtype
from mangonel.runtime.cpu import aggregate as agg
from mangonel.runtime.cpu import (
    holistic,
    holistic_sliding,
    python_window,
    sessions,
    sketch_windows,
)
from mangonel.runtime.cpu.evaluation import evaluate_expression
from mangonel.runtime.cpu.generated import kind_kernels
from mangonel.runtime.cpu.keys import KeyTable, first_rows
from mangonel.runtime.host.arrays import batch_columns, pool_array, to_mask, to_values
from mangonel.runtime.host.arrays import column as _column
from mangonel.runtime.operators.kernels import FusedMerge, LiftedTuples, neutral
from mangonel.runtime.operators.results import cells_with_rows, finalize, window_bounds


class CpuPaneState:
    """A ring of pane rows: flat numpy arrays per state field part, `[pane_capacity x
    key_capacity]` row-major, pane p at row `(p - base) & (pane_capacity - 1)` (the capacity
    a power of two). Pane-major keeps one batch's random key accesses inside the few rows of
    its panes. A ring because a sliding segment's covered panes move on with every batch:
    moving the origin forward moves nothing, where a linear layout copied every live pane
    down and cleared the rest of its capacity on each move. The rows of the panes it leaves
    become those of panes entering, stale until cleared: every pane from `fresh_end` on is
    (`_freshen`), and a merge clears the rows it is about to scatter into first, so they
    are in cache when it does (a separate clearing pass when the origin moved found them
    cold, and the scatter after it again). Leaves of one key are strided by
    key_capacity for the tree; a tree run that would wrap around the ring's end first turns
    the ring linear (`_unwrapped`; the sliding runs' kernels read the ring itself)."""

    # the driver sizes a ring to the panes its windows read, with no slack for moves
    ring = True

    def __init__(self, fields: tuple[StateField, ...]) -> None:
        self.fields = fields
        self.key_capacity = 0
        self.pane_capacity = 0
        self.origin = 0
        self.base = 0  # the pane at row 0
        self.fresh_end = 0  # panes in [origin, fresh_end) have their rows; later ones stale
        # the sliding runs' last window (its first pane), whose int64 sums per key are kept
        # in `_carry` by (field, part) for the next firing's first window: None when unknown
        # or stale (a merge into its panes, arrays loaded)
        self._carry_first: int | None = None
        self._carry_panes = 0
        self._carry_keys = 0
        self._carry: dict[tuple[str, int], np.ndarray] = {}
        self.arrays: dict[str, tuple[np.ndarray, ...]] = {
            f.name: tuple(np.empty(0, neutral(f)[0]) for _ in neutral(f)[1]) for f in fields
        }

    @property
    def ring_mask(self) -> int:
        return self.pane_capacity - 1

    def reshape(self, key_capacity: int, pane_capacity: int, origin: int) -> None:
        pane_capacity = 1 << max(pane_capacity - 1, 0).bit_length()  # a power of two
        if (key_capacity, pane_capacity) == (self.key_capacity, self.pane_capacity):
            if origin >= self.origin:  # the same shape, moved on: the ring in place
                self._advance(origin)
                return
        keep_keys = min(self.key_capacity, key_capacity)
        # panes both hold: their rows in the old ring and in the new (base = origin)
        first = max(origin, self.origin)
        end = min(origin + pane_capacity, self.origin + self.pane_capacity, self.fresh_end)
        panes = np.arange(first, end, dtype=np.int64)
        old_rows = (panes - self.base) & self.ring_mask
        for field in self.fields:
            dtype, neutrals = neutral(field)
            new = []
            for old, value in zip(self.arrays[field.name], neutrals, strict=True):
                # from Arrow's pool, as the firing's columns: a query started after another
                # (or a run after a run) reuses the pages the last one's state freed, where
                # NumPy's large arrays come back from the OS page by page (4,000 faults for
                # the sliding join bench's 16 MB of state)
                array = pool_array(pane_capacity * key_capacity, dtype)
                array = array.reshape(pane_capacity, key_capacity)
                array.fill(value)
                if keep_keys and len(panes):
                    old2 = old.reshape(self.pane_capacity, self.key_capacity)
                    array[panes - origin, :keep_keys] = old2[old_rows, :keep_keys]
                new.append(array.reshape(-1))
            self.arrays[field.name] = tuple(new)
        self.key_capacity, self.pane_capacity, self.origin = key_capacity, pane_capacity, origin
        self.base = origin
        self.fresh_end = origin + pane_capacity  # all neutral or copied

    def _advance(self, origin: int) -> None:
        """Cover [origin, origin + pane_capacity) in place: the rows of the panes left
        behind become those of panes entering, which are past `fresh_end` (stale)."""
        self.origin = origin
        self.fresh_end = max(self.fresh_end, origin)

    def _freshen(self, end_pane: int, partials: dict | None = None, index=None) -> None:  # noqa: ANN001
        """Clear the stale rows of the panes up to `end_pane`, so every pane before it reads
        as what was merged there (neutral where nothing was). With `partials`, each field's
        scatter (`index`) follows the clearing of its own rows, while they are in cache."""
        end = min(end_pane, self.origin + self.pane_capacity)
        first, last = self.fresh_end - self.base, end - self.base
        for field in self.fields:
            _, neutrals = neutral(field)
            if last > first:
                for array, value in zip(self.arrays[field.name], neutrals, strict=True):
                    value = array.dtype.type(value)
                    agg.fill_rows(array, self.key_capacity, self.ring_mask, first, last, value)
            if partials is not None:
                scatter = kind_kernels(field.kind).scatter
                scatter(*self.arrays[field.name], index, *partials[field.name])
        self.fresh_end = max(self.fresh_end, end)

    def _unwrapped(self, first_pane: int, end_pane: int) -> int:
        """The row of `first_pane`, with the rows of [first_pane, end_pane) made contiguous:
        where they wrap around the ring's end, the ring is turned linear (row 0 = origin)
        first. Only the tree's tasks need it (gapped hopping and CUMULATE windows, once a
        lap); the sliding runs' kernels read the ring as it is."""
        row = (first_pane - self.base) & self.ring_mask
        if row + (end_pane - first_pane) <= self.pane_capacity:
            return row
        shift = (self.origin - self.base) & self.ring_mask
        for field in self.fields:
            self.arrays[field.name] = tuple(
                np.roll(
                    array.reshape(self.pane_capacity, self.key_capacity), -shift, axis=0
                ).reshape(-1)
                for array in self.arrays[field.name]
            )
        self.base = self.origin
        return first_pane - self.base

    @property
    def nbytes(self) -> int:
        """Bytes the state arrays hold (at capacity, not just the used cells), with the
        sliding sums carried to the next firing."""
        carried = sum(acc.nbytes for acc in self._carry.values())
        return carried + sum(array.nbytes for parts in self.arrays.values() for array in parts)

    def merge(
        self,
        index: np.ndarray,
        partials: dict[str, tuple[np.ndarray, ...]],
        pane_range: tuple[int, int] | None = None,
    ) -> None:
        """Scatter partial i into flat cell index[i] (skip -1). `pane_range`: the lowest and
        highest pane merged, where the caller knows them (the fused pass); else read from
        the cells."""
        if pane_range is None:
            origin_row = (self.origin - self.base) & self.ring_mask
            low, high = agg.ring_offsets(index, self.key_capacity, self.ring_mask, origin_row)
            if low < 0:
                return  # no cell
            pane_range = (self.origin + low, self.origin + high)
        if self._carry_first is not None:
            # rows in the carried window's panes (out of order, not late) make its sums stale
            if pane_range[0] < self._carry_first + self._carry_panes:
                self._carry_first = None
        # the stale rows the scatter reaches are cleared right before it, field by field
        self._freshen(pane_range[1] + 1, partials, index)

    def _matrix(self, name: str, part: int = 0) -> np.ndarray:
        return self.arrays[name][part].reshape(self.pane_capacity, self.key_capacity)

    def _rows(self, first_pane: int, end_pane: int) -> np.ndarray:
        return (np.arange(first_pane, end_pane, dtype=np.int64) - self.base) & self.ring_mask

    def _check_runs(self, first_pane: int, end_pane: int) -> None:
        if first_pane < self.origin or end_pane > self.origin + self.pane_capacity:
            raise AssertionError("window run outside the pane state (driver bug)")

    def occupied(self, n_keys: int, first_pane: int, end_pane: int) -> np.ndarray:
        first = max(first_pane, self.origin)
        end = min(end_pane, self.origin + self.pane_capacity, self.fresh_end)  # stale: empty
        result = np.zeros(max(end_pane - first_pane, 0), np.bool_)
        if end > first:
            rows = self.arrays[self.fields[0].name][0]
            hit = agg.occupied_panes(
                rows, self.key_capacity, self.ring_mask, n_keys, first - self.base, end - self.base
            )
            result[first - first_pane : end - first_pane] = hit
        return result

    def windows(self, n_keys, runs, panes_per_slide, panes_per_window, windows_per_batch):
        if panes_per_window > panes_per_slide:
            return self._sliding_windows(
                n_keys, runs, panes_per_slide, panes_per_window, windows_per_batch
            )
        total = sum(count for _, count in runs)
        task_base, task_windows, task_out = [], [], []
        offset = 0
        keys = np.arange(n_keys, dtype=np.int64)
        lo = min((first for first, _ in runs), default=self.origin)
        hi = max(
            (first + panes_per_window + (count - 1) * panes_per_slide for first, count in runs),
            default=lo,
        )
        self._check_runs(lo, hi)
        self._freshen(hi)
        row = self._unwrapped(lo, hi)  # the tree reads the runs' rows as contiguous ones
        for first_pane, count in runs:
            column = row + first_pane - lo
            task_base.append(column * self.key_capacity + keys)
            task_windows.append(np.full(n_keys, count, np.int64))
            task_out.append(offset * n_keys + keys)
            offset += count
        base = np.concatenate(task_base) if runs else np.empty(0, np.int64)
        windows = np.concatenate(task_windows) if runs else np.empty(0, np.int64)
        out_at = np.concatenate(task_out) if runs else np.empty(0, np.int64)
        stride = np.full(len(base), n_keys, np.int64)
        return _run_trees(
            self.fields,
            self.arrays,
            self.key_capacity,
            base,
            windows,
            out_at,
            stride,
            total * n_keys,
            panes_per_slide,
            panes_per_window,
            windows_per_batch,
        )

    def _sliding_windows(self, n_keys, runs, panes_per_slide, panes_per_window, windows_per_batch):
        """Overlapping windows, run by run over every key (`aggregate.py`: the `*_runs`
        kernels): differences for int64 sums, block prefixes and suffixes for the rest. Every
        output cell is written, so the outputs start uninitialised."""
        firsts = np.array([first for first, _ in runs], np.int64)
        counts = np.array([count for _, count in runs], np.int64)
        if len(runs):
            reach = firsts + panes_per_window + (counts - 1) * panes_per_slide
            self._check_runs(int(firsts.min()), int(reach.max()))
            self._freshen(int(reach.max()))
        size = int(counts.sum()) * n_keys
        # the kernels take each run's column from `base` and wrap it around the ring
        columns = firsts - self.base
        shape = (
            self.key_capacity,
            self.ring_mask,
            n_keys,
            columns,
            counts,
            panes_per_slide,
            panes_per_window,
        )
        # the first run's first window steps from the last one of the firing before
        carried = (
            len(runs) > 0
            and self._carry_first is not None
            and int(firsts[0]) == self._carry_first + panes_per_slide
            and self._carry_panes == panes_per_window
            and n_keys >= self._carry_keys
        )
        results: dict[str, tuple[np.ndarray, ...]] = {}
        for field in self.fields:
            dtype, neutrals = neutral(field)
            # Arrow's pool keeps the pages a firing frees for the next one's values (NumPy's
            # large arrays come back from the OS page by page each firing)
            outs = tuple(pool_array(size, dtype) for _ in neutrals)
            if _adds_int64(field, dtype, neutrals):
                for part, (leaves, out) in enumerate(
                    zip(self.arrays[field.name], outs, strict=True)
                ):
                    acc = self._carry_sums((field.name, part), n_keys, carried)
                    agg.sliding_sums_runs(leaves, *shape, acc, carried, out)
            else:
                kind_kernels(field.kind).block_runs(
                    *self.arrays[field.name],
                    *(dtype.type(value) for value in neutrals),
                    *shape,
                    windows_per_batch,
                    *outs,
                )
            results[field.name] = outs
        if len(runs):
            self._carry_first = int(firsts[-1]) + (int(counts[-1]) - 1) * panes_per_slide
            self._carry_panes, self._carry_keys = panes_per_window, n_keys
        return results

    def _carry_sums(self, name: tuple[str, int], n_keys: int, carried: bool) -> np.ndarray:
        """The per-key sums `sliding_sums_runs` starts from and leaves its last window in:
        the carried ones (key slots new since then hold 0: no row of theirs is in the
        carried window's panes, or the carry would be stale) or fresh cells."""
        acc = self._carry.get(name)
        if acc is None or len(acc) < n_keys:
            grown = np.zeros(max(n_keys, 2 * len(acc) if acc is not None else 0), np.int64)
            if acc is not None and carried:
                grown[: self._carry_keys] = acc[: self._carry_keys]
            self._carry[name] = acc = grown
        if carried and n_keys > self._carry_keys:
            acc[self._carry_keys : n_keys] = 0
        return acc

    def cumulative_windows(self, n_keys, runs, panes_per_period):
        """CUMULATE windows as a prefix combine: one task per (run, key) walks its panes from
        the period's first on, each window the one before combined with one more pane."""
        total = sum(count for _, count in runs)
        task_base, task_skip, task_windows, task_out = [], [], [], []
        offset = 0
        keys = np.arange(n_keys, dtype=np.int64)
        lo = min((last // panes_per_period * panes_per_period for last, _ in runs), default=0)
        hi = max((last + count for last, count in runs), default=lo)
        if runs:
            self._check_runs(lo, hi)
            self._freshen(hi)
        row = self._unwrapped(lo, hi) if runs else 0  # read as contiguous rows
        for last_pane, count in runs:
            period_pane = last_pane // panes_per_period * panes_per_period
            column = row + period_pane - lo
            task_base.append(column * self.key_capacity + keys)
            task_skip.append(np.full(n_keys, last_pane - period_pane, np.int64))
            task_windows.append(np.full(n_keys, count, np.int64))
            task_out.append(offset * n_keys + keys)
            offset += count
        empty = np.empty(0, np.int64)
        base = np.concatenate(task_base) if runs else empty
        results: dict[str, tuple[np.ndarray, ...]] = {}
        for field in self.fields:
            dtype, neutrals = neutral(field)
            outs = tuple(np.full(total * n_keys, value, dtype) for value in neutrals)
            kind_kernels(field.kind).prefix_windows(
                *self.arrays[field.name],
                *(dtype.type(value) for value in neutrals),
                self.key_capacity,
                base,
                np.concatenate(task_skip) if runs else empty,
                np.concatenate(task_windows) if runs else empty,
                np.concatenate(task_out) if runs else empty,
                np.full(len(base), n_keys, np.int64),
                panes_per_period,
                *outs,
            )
            results[field.name] = outs
        return results

    def fire(
        self,
        n_keys,
        runs,
        panes_per_slide,
        panes_per_window,
        windows_per_batch,
        window_ids,
        plans,
        bounds,
        keys,
        with_slots=True,
    ):
        """The results of the runs' cells that hold rows: the tree, then finalize on the host
        (the state is already there); the keys decoded from the slots (which are returned
        whether or not `with_slots` asks)."""
        values = self.windows(n_keys, runs, panes_per_slide, panes_per_window, windows_per_batch)
        window_of_cell, slot_of_cell, chosen = cells_with_rows(
            values, self.fields[0].name, n_keys, window_ids
        )
        starts, ends = window_bounds(window_of_cell, *bounds)
        return starts, ends, slot_of_cell, keys.decode(slot_of_cell), finalize(plans, chosen)

    def to_arrays(self, n_keys: int, first_pane: int, end_pane: int) -> dict[str, np.ndarray]:
        """`[n_keys, panes]` blocks (the snapshot layout every backend writes)."""
        arrays = {}
        self._freshen(end_pane)
        rows = self._rows(first_pane, end_pane)
        for field in self.fields:
            for part in range(len(self.arrays[field.name])):
                matrix = self._matrix(field.name, part)
                arrays[f"{field.name}.{part}"] = np.ascontiguousarray(matrix[rows, :n_keys].T)
        return arrays

    def load_arrays(self, arrays: dict[str, np.ndarray], first_pane: int) -> None:
        self._carry_first = None
        panes = max((block.shape[1] for block in arrays.values()), default=0)
        self._freshen(first_pane + panes)
        for field in self.fields:
            for part in range(len(self.arrays[field.name])):
                block = arrays[f"{field.name}.{part}"]
                matrix = self._matrix(field.name, part)
                matrix[self._rows(first_pane, first_pane + block.shape[1]), : block.shape[0]] = (
                    block.T
                )


def _run_trees(
    fields,
    leaves,
    leaf_stride,
    base,
    windows,
    out_at,
    stride,
    size,
    panes_per_slide,
    panes_per_window,
    windows_per_batch,
):
    results: dict[str, tuple[np.ndarray, ...]] = {}
    for field in fields:
        source = leaves[field.name]
        dtype, neutrals = neutral(field)
        outs = tuple(np.full(size, value, dtype) for value in neutrals)
        if panes_per_window > panes_per_slide and _adds_int64(field, dtype, neutrals):
            # sliding windows of counts and integer sums: differences, not the tree
            for leaves_part, out in zip(source, outs, strict=True):
                agg.sliding_sums(
                    leaves_part,
                    leaf_stride,
                    base,
                    windows,
                    out_at,
                    stride,
                    panes_per_slide,
                    panes_per_window,
                    out,
                )
            results[field.name] = outs
            continue
        kernels = kind_kernels(field.kind)
        # overlapping windows: block suffixes and prefixes (3 combines a window at w/s = 100
        # where the tree takes about 12); tumbling ones keep the tree's association
        sliding = panes_per_window > panes_per_slide
        (kernels.block_windows if sliding else kernels.tree_windows)(
            *source,
            *(dtype.type(value) for value in neutrals),
            leaf_stride,
            base,
            windows,
            out_at,
            stride,
            panes_per_slide,
            panes_per_window,
            windows_per_batch,
            *outs,
        )
        results[field.name] = outs
    return results


def _adds_int64(field: StateField, dtype: np.dtype, neutrals: tuple) -> bool:
    """Whether every part of the field is an int64 combined by addition mod 2^64 from 0
    (the invertible kinds with int64 storage, as the join's difference crediting assumes),
    so a sliding window is the one before plus the panes entering minus those leaving."""
    return field.kind.invertible and dtype == np.dtype(np.int64) and not any(neutrals)


def tree_over_segments(
    fields, leaves, base, windows, panes_per_slide, panes_per_window, windows_per_batch
):
    """Windows over per-task contiguous leaves (count windows): outputs task after task."""
    out_at = np.zeros(len(base), np.int64)
    if len(windows):
        out_at[1:] = np.cumsum(windows)[:-1]
    stride = np.ones(len(base), np.int64)
    return _run_trees(
        fields,
        leaves,
        1,
        base,
        windows,
        out_at,
        stride,
        int(windows.sum()),
        panes_per_slide,
        panes_per_window,
        windows_per_batch,
    )


def _argument_values(
    field: StateField,
    column_types: dict[str, SqlType],
    columns: dict[str, pa.Array],
    length: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(values: float64 for a floating argument, else int64, 0 where NULL; is_valid) of a
    field's argument over a batch's columns."""
    assert field.argument is not None
    argument = evaluate_expression(field.argument, column_types, columns, length=length)
    floating = pa.types.is_floating(argument.type)
    return to_values(argument, np.dtype(np.float64 if floating else np.int64))


def argument_values(
    fields: tuple[StateField, ...], column_types: dict[str, SqlType], batch: pa.RecordBatch
) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    """Each field's argument as (values, as `tuple_partials` reads them; is_valid, None where
    no value is NULL), fields of one argument sharing its arrays: no event time, WHERE or
    state-kind lift (`CpuKernels.lift_arguments`)."""
    columns = batch_columns(batch)
    evaluated: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}
    out = {}
    for field in fields:
        if field.argument is None:
            raise ValueError(f"{field.name} has no argument to lift")
        key = id(field.argument)
        if key not in evaluated:
            values, valid = _argument_values(field, column_types, columns, batch.num_rows)
            evaluated[key] = (values, None if valid.all() else valid)
        out[field.name] = evaluated[key]
    return out


def tuple_partials(
    fields: tuple[StateField, ...],
    column_types: dict[str, SqlType],
    columns: dict[str, pa.Array],
    contributes: np.ndarray,
    length: int,
) -> dict[str, tuple[np.ndarray, ...]]:
    """The per-tuple partial state of every field: neutral where the argument is NULL. Rows
    that do not contribute get slot -1 and are never merged, so their partials are whatever
    is cheapest (no masking pass when an argument has no NULLs). `column_types`: the types
    of the columns the arguments read (a stream's, or a join's joined row)."""
    evaluated: dict[int, tuple[np.ndarray, np.ndarray, bool]] = {}
    partials: dict[str, tuple[np.ndarray, ...]] = {}
    rows = contributes.astype(np.int64)
    for field in fields:
        if field.argument is None:
            partials[field.name] = (rows,)
            continue
        key = id(field.argument)
        if key not in evaluated:
            values, valid = _argument_values(field, column_types, columns, length)
            evaluated[key] = (values, valid, bool(valid.all()))
        values, valid, all_valid = evaluated[key]
        if field.kind.layout is Layout.VARIABLE:  # raw values (holistic): no combine neutral
            dtype, neutrals = field_dtype(field), field.kind.neutral(field_dtype(field))
        else:
            dtype, neutrals = neutral(field)
        lifted = LiftInput(values, valid, all_valid, rows, contributes)
        partials[field.name] = field.kind.lift(lifted, dtype, neutrals)
    return partials


class CpuKernels:
    """numpy + numba kernels (the reference backend and the fallback)."""

    name = "cpu"
    # `lift_merge` hands its per-row decisions back (`FusedMerge.shared`): host arrays
    shares_fused_rows = True
    # the exact holistic selection wants a firing's rows key by key (`HolisticTimeWindows`):
    # a key's consecutive windows share all runs but one, read from cache, not memory
    key_major_rows = True

    def lift_tuples(
        self,
        lift: LiftExec,
        batch: pa.RecordBatch,
        key_words: bool = False,
        extremes: bool = True,
    ) -> LiftedTuples:
        """The per-row lift (`key_words` asks nothing here: the CPU key map encodes the key
        columns itself, on the host where they are; the extremes cost a pass, always made)."""
        length = batch.num_rows
        columns = batch_columns(batch)
        scan = lift.scan
        event_time_name = scan.stream.event_time
        event_time, has_event_time = to_values(_column(columns, event_time_name), np.int64)
        column_types = {c.name: c.type for c in scan.columns}
        contributes = has_event_time.copy()
        if lift.predicate is not None and length:
            predicate = evaluate_expression(lift.predicate, column_types, columns, length=length)
            contributes &= to_mask(predicate)
        partials = tuple_partials(lift.fields, column_types, columns, contributes, length)
        keys = [_column(columns, key.name) for key in lift.keys]
        keys = [k.combine_chunks() if isinstance(k, pa.ChunkedArray) else k for k in keys]
        with_time = int(has_event_time.sum())
        if with_time == length:  # every row timed: no masked copy of the column to scan
            max_event_time = int(event_time.max()) if length else None
        else:
            max_event_time = int(event_time[has_event_time].max()) if with_time else None
        return LiftedTuples(
            length,
            event_time,
            has_event_time,
            contributes,
            keys,
            partials,
            max_event_time,
            length - with_time,
        )

    def lift_arguments(
        self, lift: LiftExec, batch: pa.RecordBatch
    ) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
        """The arguments of `lift`'s fields only (`argument_values`), as raw values, not
        lifted into their state kinds: for a driver that takes each row's pane, lateness,
        WHERE and key slot from the wrapped operator's decisions (`HolisticTimeWindows.
        _keep_decided`, CPU only) and keeps a sketch-only field's values as they are."""
        column_types = {c.name: c.type for c in lift.scan.columns}
        return argument_values(lift.fields, column_types, batch)

    def pane_ids(self, lifted: LiftedTuples, pane_length: int) -> np.ndarray:
        return agg.pane_ids(lifted.event_time, lifted.has_event_time, pane_length)

    def late_tuples(self, panes, include, pane_length, slide, size, watermark):
        last_window_end = (panes * pane_length) // slide * slide + size
        return include & (last_window_end <= watermark)

    def new_key_map(self, types: tuple[SqlType, ...]) -> KeyTable:
        return KeyTable(types)

    def key_map_from_arrays(self, types, arrays, prefix) -> KeyTable:
        return KeyTable.from_arrays(types, arrays, prefix)

    def new_pane_state(self, fields: tuple[StateField, ...]) -> CpuPaneState:
        return CpuPaneState(fields)

    def flat_index(self, slots: np.ndarray, panes: np.ndarray, state: CpuPaneState):
        return agg.flat_index(slots, panes, state.base, state.ring_mask, state.key_capacity)

    def preaggregate(self, slots, panes, partials, fields):
        index, first, count = self._number_pairs(slots, panes)
        out: dict[str, tuple[np.ndarray, ...]] = {}
        for field in fields:
            dtype, neutrals = neutral(field)
            target = tuple(np.full(count, value, dtype) for value in neutrals)
            kind_kernels(field.kind).scatter(*target, index, *partials[field.name])
            out[field.name] = target
        return first, panes[first], out

    @staticmethod
    def _number_pairs(slots, panes):
        """(number per row, first row per number, count) of the (key slot, pane) pairs in
        first-seen order. Where slots x panes is dense enough (a batch's panes span a short
        range: every stage-1 partition of a stream), a direct table numbers them without
        hashing (`dense_pairs`; 2-3x faster for 1 M rows); else a hash table of pairs."""
        included = slots >= 0
        if included.any():
            low, high = int(panes[included].min()), int(panes[included].max())
            span = high - low + 1
            if (int(slots.max()) + 1) * span <= 4 * len(slots) + 4096:
                return agg.dense_pairs(slots, panes, low, span)
        pairs = KeyTable((SqlType.BIGINT, SqlType.BIGINT))
        rows = np.zeros((3, len(slots)), np.int64)
        rows[0] = slots
        rows[1] = panes
        index = pairs.map_rows(rows, included)
        count = pairs.n_slots
        return index, first_rows(index, count), count

    def segment_windows(
        self, fields, leaves, base, windows, panes_per_slide, panes_per_window, windows_per_batch
    ):
        return tree_over_segments(
            fields, leaves, base, windows, panes_per_slide, panes_per_window, windows_per_batch
        )

    # session windows (`operators.session_window`; numba in `cpu/sessions.py`)
    batch_sessions = staticmethod(sessions.batch_sessions)
    assign_sessions = staticmethod(sessions.assign_sessions)
    combine_sessions = staticmethod(sessions.combine_sessions)

    def prefetch(self, lift, window, batch) -> None:
        """Nothing to move: the batch's columns are already in host memory (and no event-time
        extremes: the conformer measures them)."""
        return None

    def lift_merge(
        self, lift, window, batch, keys, target, watermark, while_running=None, share_rows=False
    ) -> FusedMerge:
        """The fused pass on the CPU: lift, then merge the rows with a known key and a pane in
        the target straight into it (one lookup, one numba scatter per field); rows with new
        keys or other panes go back to the driver as the rest. Nothing runs beside it here:
        `while_running` is called first. `FusedMerge.shared` is filled whatever `share_rows`
        says: the arrays exist anyway."""
        if while_running is not None:
            while_running()
        lifted = self.lift_tuples(lift, batch)
        contributes = lifted.contributes
        if target is None or not lifted.rows or not isinstance(keys, KeyTable):
            return FusedMerge.unplaced(lifted)
        spec = window.window
        panes = self.pane_ids(lifted, window.pane_length)
        include = contributes
        late_count = 0
        late = None
        if watermark is not None:
            slide, size = spec.outer_shape
            late = self.late_tuples(panes, contributes, window.pane_length, slide, size, watermark)
            late_count = int(late.sum())
            include = contributes & ~late
        inside = include & (panes >= target.first_pane) & (panes < target.end_pane)
        slots = keys.lookup_columns(lifted.keys, inside)
        # slots of keys past the target's -1, and the placed rows' panes, in place (a
        # masked copy and a gather of 8 MB a 1 M-row batch were fresh pages to fault)
        count, low, high = agg.place_rows(slots, panes, target.known_keys)
        placed = slots >= 0
        first_pane = last_pane = None
        if count:
            first_pane, last_pane = int(low), int(high)
            index = self.flat_index(slots, panes, target.state)
            target.state.merge(index, lifted.partials, (first_pane, last_pane))
        rest_include = include & ~placed
        rest = lifted if rest_include.any() else None
        return FusedMerge(
            lifted.rows,
            late_count,
            lifted.null_event_time,
            lifted.max_event_time,
            first_pane,
            last_pane,
            rest,
            rest_include if rest is not None else None,
            late if late_count else None,
            (panes, include, slots),
        )

    def holistic_for(self, plan: HolisticPlan) -> CpuKernels:
        """The holistic step's kernels: these (numba, `runtime.cpu.holistic`)."""
        return self

    def concatenate(self, pieces: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(pieces) if pieces else np.empty(0, np.int64)

    def holistic_select_later(
        self, values, run_start, run_end, row_first, row_runs, evaluation, fraction, sorted_runs
    ):
        # the host selects now: there is no device to overlap with
        found = holistic.holistic_select(
            values, run_start, run_end, row_first, row_runs, evaluation, fraction, sorted_runs
        )
        return lambda: found

    def python_window(
        self,
        function,
        keys,
        run_start,
        run_end,
        row_first,
        row_runs,
        sorted_runs,
        floating,
        times=None,
    ):
        return python_window.evaluate_python(
            function, keys, run_start, run_end, row_first, row_runs, sorted_runs, floating, times
        )

    def window_runs(
        self, flat_offsets, offset_first, offset_last, base, slots, first_index, panes_per_row
    ):
        return holistic.window_runs(
            flat_offsets, offset_first, offset_last, base, slots, first_index, panes_per_row
        )

    def sort_pane(self, slots, keys, n_slots, presorted=False):
        # a counting sort by slot is O(n) whether or not the chunk came sorted
        return holistic.sort_pane(slots, keys, n_slots)

    def split_panes(
        self, panes, slots, values, keep, times=None, by_value=True, pane_range=None, n_slots=None
    ):
        # the CPU's chunks are never sorted (`by_value` changes nothing), it reads no device
        # (`pane_range`, the GPU's hint, saves nothing here) and its pane sort is a
        # counting sort whatever offsets a split could find (`n_slots` is not used)
        return holistic.split_panes(panes, slots, values, keep, times)

    def sort_pane_timed(self, slots, keys, times, n_slots):
        return holistic.sort_pane_timed(slots, keys, times, n_slots)

    def sort_panes(self, panes, n_slots, timed):
        return holistic.sort_panes(panes, n_slots, timed)

    # exact percentiles over sliding windows by per-key bands stepped pane by pane
    # (`runtime/operators/holistic_sliding.py`; the GPU has none: it selects over sorted runs)
    sliding_percentiles = holistic_sliding

    # the approximate functions' sketches: build, cell_range, merge, empty, answer,
    # to_bytes, from_bytes (`runtime/cpu/sketch_windows.py`)
    sketches = sketch_windows

    def to_host(self, array) -> np.ndarray:
        return np.asarray(array)

    def from_host(self, array: np.ndarray) -> np.ndarray:
        return array
