"""The CPU implementation of `WindowKernels` (numpy + numba)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mangonel.aggregates import Layout, LiftInput
from mangonel.catalog.types import SqlType
from mangonel.compiler.holistic import HolisticPlan
from mangonel.compiler.physical import LiftExec, StateField, field_dtype
from mangonel.runtime.cpu import aggregate as agg
from mangonel.runtime.cpu import holistic, python_window, sessions, sketch_windows
from mangonel.runtime.cpu.evaluation import evaluate_expression
from mangonel.runtime.cpu.generated import kind_kernels
from mangonel.runtime.cpu.keys import KeyTable, first_rows
from mangonel.runtime.host.arrays import batch_columns, to_mask, to_values
from mangonel.runtime.host.arrays import column as _column
from mangonel.runtime.operators.kernels import FusedMerge, LiftedTuples, neutral
from mangonel.runtime.operators.results import cells_with_rows, finalize, window_bounds


class CpuPaneState:
    """Flat numpy arrays per state field, `[pane_capacity x key_capacity]` row-major: the
    tuples of one batch mostly hit a few panes, so pane-major keeps the pre-aggregation's
    random key accesses inside a few cache-resident rows. Leaves of one key are strided by
    key_capacity for the tree."""

    def __init__(self, fields: tuple[StateField, ...]) -> None:
        self.fields = fields
        self.key_capacity = 0
        self.pane_capacity = 0
        self.origin = 0
        self.arrays: dict[str, tuple[np.ndarray, ...]] = {
            f.name: tuple(np.empty(0, neutral(f)[0]) for _ in neutral(f)[1]) for f in fields
        }

    def reshape(self, key_capacity: int, pane_capacity: int, origin: int) -> None:
        keep_keys = min(self.key_capacity, key_capacity)
        # panes both layouts hold
        first = max(origin, self.origin)
        end = min(origin + pane_capacity, self.origin + self.pane_capacity)
        if (key_capacity, pane_capacity) == (self.key_capacity, self.pane_capacity):
            if origin >= self.origin:  # the same shape, moved on: in place
                self._move_origin(origin, first, end)
                return
        for field in self.fields:
            dtype, neutrals = neutral(field)
            new = []
            for old, value in zip(self.arrays[field.name], neutrals, strict=True):
                array = np.full((pane_capacity, key_capacity), value, dtype)
                if keep_keys and end > first:
                    old2 = old.reshape(self.pane_capacity, self.key_capacity)
                    array[first - origin : end - origin, :keep_keys] = old2[
                        first - self.origin : end - self.origin, :keep_keys
                    ]
                new.append(array.reshape(-1))
            self.arrays[field.name] = tuple(new)
        self.key_capacity, self.pane_capacity, self.origin = key_capacity, pane_capacity, origin

    def _move_origin(self, origin: int, first: int, end: int) -> None:
        """Move the origin forward in the arrays already there (a sliding segment's state
        moves on every few batches: fresh arrays would cost their page faults each time,
        twice the live span): the panes kept shift down, the panes past them become
        neutral."""
        cells = self.key_capacity
        kept = max(end - first, 0) * cells
        start = (first - self.origin) * cells
        for field in self.fields:
            _, neutrals = neutral(field)
            for array, value in zip(self.arrays[field.name], neutrals, strict=True):
                agg.shift_down(array, start, kept, array.dtype.type(value))
        self.origin = origin

    @property
    def nbytes(self) -> int:
        """Bytes the state arrays hold (at capacity, not just the used cells)."""
        return sum(array.nbytes for parts in self.arrays.values() for array in parts)

    def merge(self, index: np.ndarray, partials: dict[str, tuple[np.ndarray, ...]]) -> None:
        for field in self.fields:
            kind_kernels(field.kind).scatter(*self.arrays[field.name], index, *partials[field.name])

    def _matrix(self, name: str, part: int = 0) -> np.ndarray:
        return self.arrays[name][part].reshape(self.pane_capacity, self.key_capacity)

    def occupied(self, n_keys: int, first_pane: int, end_pane: int) -> np.ndarray:
        first = max(first_pane - self.origin, 0)
        end = min(end_pane - self.origin, self.pane_capacity)
        result = np.zeros(max(end_pane - first_pane, 0), np.bool_)
        if end > first:
            rows = self._matrix(self.fields[0].name)
            hit = agg.occupied_panes(rows, n_keys, first, end)
            result[first + self.origin - first_pane : end + self.origin - first_pane] = hit
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
        for first_pane, count in runs:
            column = first_pane - self.origin
            if column < 0 or column + panes_per_window + (count - 1) * panes_per_slide > (
                self.pane_capacity
            ):
                raise AssertionError("window run outside the pane state (driver bug)")
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
        columns = np.array([first - self.origin for first, _ in runs], np.int64)
        counts = np.array([count for _, count in runs], np.int64)
        reach = columns + panes_per_window + (counts - 1) * panes_per_slide
        if len(runs) and (columns.min() < 0 or reach.max() > self.pane_capacity):
            raise AssertionError("window run outside the pane state (driver bug)")
        size = int(counts.sum()) * n_keys
        shape = (self.key_capacity, n_keys, columns, counts, panes_per_slide, panes_per_window)
        results: dict[str, tuple[np.ndarray, ...]] = {}
        for field in self.fields:
            dtype, neutrals = neutral(field)
            outs = tuple(np.empty(size, dtype) for _ in neutrals)
            if _adds_int64(field, dtype, neutrals):
                for leaves, out in zip(self.arrays[field.name], outs, strict=True):
                    agg.sliding_sums_runs(leaves, *shape, out)
            else:
                kind_kernels(field.kind).block_runs(
                    *self.arrays[field.name],
                    *(dtype.type(value) for value in neutrals),
                    *shape,
                    windows_per_batch,
                    *outs,
                )
            results[field.name] = outs
        return results

    def cumulative_windows(self, n_keys, runs, panes_per_period):
        """CUMULATE windows as a prefix combine: one task per (run, key) walks its panes from
        the period's first on, each window the one before combined with one more pane."""
        total = sum(count for _, count in runs)
        task_base, task_skip, task_windows, task_out = [], [], [], []
        offset = 0
        keys = np.arange(n_keys, dtype=np.int64)
        for last_pane, count in runs:
            period_pane = last_pane // panes_per_period * panes_per_period
            column = period_pane - self.origin
            if column < 0 or last_pane + count - self.origin > self.pane_capacity:
                raise AssertionError("window run outside the pane state (driver bug)")
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
    ):
        """The results of the runs' cells that hold rows: the tree, then finalize on the host
        (the state is already there)."""
        values = self.windows(n_keys, runs, panes_per_slide, panes_per_window, windows_per_batch)
        window_of_cell, slot_of_cell, chosen = cells_with_rows(
            values, self.fields[0].name, n_keys, window_ids
        )
        starts, ends = window_bounds(window_of_cell, *bounds)
        return starts, ends, slot_of_cell, finalize(plans, chosen)

    def to_arrays(self, n_keys: int, first_pane: int, end_pane: int) -> dict[str, np.ndarray]:
        """`[n_keys, panes]` blocks (the snapshot layout every backend writes)."""
        arrays = {}
        first, end = first_pane - self.origin, end_pane - self.origin
        for field in self.fields:
            for part in range(len(self.arrays[field.name])):
                matrix = self._matrix(field.name, part)
                arrays[f"{field.name}.{part}"] = np.ascontiguousarray(matrix[first:end, :n_keys].T)
        return arrays

    def load_arrays(self, arrays: dict[str, np.ndarray], first_pane: int) -> None:
        first = first_pane - self.origin
        for field in self.fields:
            for part in range(len(self.arrays[field.name])):
                block = arrays[f"{field.name}.{part}"]
                matrix = self._matrix(field.name, part)
                matrix[first : first + block.shape[1], : block.shape[0]] = block.T


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
        self, lift: LiftExec, batch: pa.RecordBatch, key_words: bool = False
    ) -> LiftedTuples:
        """The per-row lift (`key_words` asks nothing here: the CPU key map encodes the key
        columns itself, on the host where they are)."""
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
        return agg.flat_index(slots, panes, state.origin, state.key_capacity)

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
        self, lift, window, batch, keys, target, watermark, while_running=None
    ) -> FusedMerge:
        """The fused pass on the CPU: lift, then merge the rows with a known key and a pane in
        the target straight into it (one lookup, one numba scatter per field); rows with new
        keys or other panes go back to the driver as the rest. Nothing runs beside it here:
        `while_running` is called first."""
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
        placed = (slots >= 0) & (slots < target.known_keys)
        slots = np.where(placed, slots, -1)
        first_pane = last_pane = None
        if placed.any():
            target.state.merge(self.flat_index(slots, panes, target.state), lifted.partials)
            merged = panes[placed]
            first_pane, last_pane = int(merged.min()), int(merged.max())
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

    def holistic_select(
        self, values, run_start, run_end, row_first, row_runs, evaluation, fraction, sorted_runs
    ):
        return holistic.holistic_select(
            values, run_start, run_end, row_first, row_runs, evaluation, fraction, sorted_runs
        )

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

    def split_panes(self, panes, slots, values, keep, times=None, by_value=True, pane_range=None):
        # the CPU's chunks are never sorted (`by_value` changes nothing) and it reads no
        # device (`pane_range`, the GPU's hint, saves nothing here)
        return holistic.split_panes(panes, slots, values, keep, times)

    def sort_pane_timed(self, slots, keys, times, n_slots):
        return holistic.sort_pane_timed(slots, keys, times, n_slots)

    # the approximate functions' sketches: build, cell_range, merge, empty, answer,
    # to_bytes, from_bytes (`runtime/cpu/sketch_windows.py`)
    sketches = sketch_windows

    def to_host(self, array) -> np.ndarray:
        return np.asarray(array)

    def from_host(self, array: np.ndarray) -> np.ndarray:
        return array
