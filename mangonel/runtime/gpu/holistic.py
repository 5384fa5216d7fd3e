"""GPU kernels of the holistic window functions (MEDIAN, PERCENTILE_*, COUNT DISTINCT): the
device twins of `runtime.cpu.holistic`, behind the same three calls of the driver
(`runtime.operators.holistic`):

- `sort_pane`: a pane's values sorted by (key slot, value) once, on the device (a stable
  radix argsort per key, `gpu.sorting`), per-slot offsets by a search over the sorted slots.
  The sorted values and the offsets stay on the device; every window covering the pane
  reads them there (shared across overlapping windows): no copy to the host, no wait for the
  device per pane.
- `split_panes`: a batch's kept values grouped by pane, each pane's chunk sorted by (key
  slot, value); with the pane range and slots known, a counting sort by (pane, slot) group
  and a block sort per group (`_split_in_groups`, `kernels_templates/holistic_runs.cu.j2`).
- `window_runs`: the runs of a firing's rows (one per covered pane), built on the device
  from the panes' device offsets; the host hands only the span's per-pane bases (a scan over
  the panes' lengths, which the host knows from their shapes) and the rows' slots.
- `holistic_select_later`: the rendered selection kernel (`kernels_templates/holistic.cu.j2`,
  `codegen.render_holistic_kernels`): all the rows of a result chunk in one launch (GASSER's
  windows per launch), a thread, a warp or a block per window (the plan's
  `HolisticPlan.gpu_form`); PERCENTILE_CONT interpolated there too.
- `python_window`: a Python window function over the same runs (`gpu.python_window`: the
  runs merged per window into one device buffer, the user's function compiled by numba's
  CUDA target and called once per window).

`xp` is CuPy on the device; the tests pass numpy-like stand-ins and a host-compiled module
(tests/cuda_host.py), so the same code runs without a GPU.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from mangonel.aggregates.python import WindowFunction
from mangonel.compiler import codegen
from mangonel.compiler.codegen import GeneratedModule
from mangonel.runtime.gpu import python_window
from mangonel.runtime.gpu.sorting import lexsort_order, narrow_keys

THREADS_PER_BLOCK = 128
MAX_BLOCKS = 1 << 16  # grid-stride beyond: a launch covers any number of windows
# `split_panes` with the batch's pane range known on the host searches every pane of the range
# for its bounds (one device read of range + 2 words); a wider range (outliers, clipped event
# times) takes the general path, which reads the cuts it finds
MAX_RANGE_PANES = 1 << 14
# (pane, key slot) groups the grouped split searches the bounds of at most (8 bytes each)
MAX_GROUPS = 1 << 22


class GpuHolistic:
    """The holistic kernels over array module `xp`, compiling with `module_of` (a
    `CompileContext.module`); `form` is the plan's selection form."""

    def __init__(
        self,
        xp: Any,  # noqa: ANN401 - cupy (or a host stand-in in tests)
        module_of: Callable[[GeneratedModule], Any],
        form: str = "warp-per-window",
    ) -> None:
        self.xp = xp
        self.module_of = module_of
        self.form = form
        self._functions: dict[tuple[str, str], Any] = {}
        # `holistic_runs.cu.j2`'s kernels (`window_runs`', the grouped split's), compiled at
        # the first use of any
        self._runs_functions: dict[str, Any] | None = None
        # per-slot offsets the in-range split found for its chunks, by the chunk's values
        # array (`id`, with a weak reference that drops the entry when the chunk dies):
        # `sort_pane(presorted=True)` of such a chunk searches nothing
        self._split_offsets: dict[int, tuple[weakref.ref, Any]] = {}
        self.launches = 0  # selection launches so far (one per aggregate and result chunk)
        # `holistic_select_later(floating=)`: the kernel interpolates PERCENTILE_CONT itself
        self.finishes_percentile_cont = True

    def _select_function(self, evaluation: str, form: str) -> Any:  # noqa: ANN401
        found = self._functions.get((evaluation, form))
        if found is None:
            generated = codegen.render_holistic_kernels(evaluation, form)
            module = self.module_of(generated)
            found = self._functions[(evaluation, form)] = module.get_function(
                generated.names["select"]
            )
        return found

    def sort_pane(
        self,
        slots: Any,  # noqa: ANN401 - host or device arrays
        keys: Any,  # noqa: ANN401
        n_slots: int,
        presorted: bool = False,
    ) -> tuple[Any, Any]:
        """(values sorted by (slot, value), offsets of each slot: `offsets[s]:offsets[s + 1]`,
        n_slots + 1 entries), both on the device. `presorted`: the values already are (one
        chunk of `split_panes`): only the offsets are searched."""
        xp = self.xp
        if not len(keys):
            return xp.zeros(0, xp.int64), xp.zeros(n_slots + 1, xp.int64)
        if presorted:
            remembered = self._split_offsets.pop(id(keys), None)
            if remembered is not None and remembered[0]() is keys:
                # the split's offsets: as many as the slots known then (a later slot reads
                # the pane's end, `window_runs`' rule: it has no value here)
                return keys, remembered[1]
        device_keys = xp.ascontiguousarray(xp.asarray(keys), dtype=xp.int64)
        if presorted:
            device_slots = xp.ascontiguousarray(xp.asarray(slots), dtype=xp.int64)
        else:
            device_slots = narrow_keys(xp.asarray(slots), n_slots)
            order = lexsort_order(xp, (device_keys, device_slots))  # last key is primary
            device_keys = xp.ascontiguousarray(device_keys[order])
            device_slots = device_slots[order]
        wanted = xp.arange(n_slots + 1, dtype=device_slots.dtype)
        offsets = xp.searchsorted(device_slots, wanted)
        return device_keys, offsets.astype(xp.int64, copy=False)

    def split_panes(
        self,
        panes: Any,  # noqa: ANN401 - device arrays of the lifted batch
        slots: Any,  # noqa: ANN401
        values: Any,  # noqa: ANN401
        keep: Any,  # noqa: ANN401
        times: Any = None,  # noqa: ANN401
        by_value: bool = True,
        pane_range: tuple[int, int] | None = None,
        n_slots: int | None = None,
    ) -> tuple[list[int], list[tuple[Any, Any, Any]], bool]:
        """The kept rows' (slot, order key, event time or None) grouped by pane on the
        device: (pane ids, one chunk per pane, True: each chunk sorted by
        (slot, value[, time])). One sort of the batch's kept rows; a pane whose values came in
        one batch is then never sorted again (`sort_pane(..., presorted=True)`). `times`: the
        rows' event times, kept where a Python function `with_timestamps` reads the field.
        `by_value` False: sorted by slot only (a field only sketches read: their cells are
        the runs of equal slots, the values' order does not matter). `pane_range`: (first,
        last) pane of every kept row where the host knows it: the bounds of every pane come
        in one device read (else: the kept rows' count, then their cuts and pane ids).
        `n_slots`: the key slots known (every row's is below), where the in-range path is
        to find each chunk's per-slot offsets too, for its `sort_pane`, in one search. A batch
        whose rows lie in one pane (`pane_range` of one pane, `by_value`) is kept as it came:
        one chunk, not sorted, False (`_split_one_pane`)."""
        if pane_range is not None and 0 <= pane_range[1] - pane_range[0] < MAX_RANGE_PANES:
            found = self._split_in_range(
                panes, slots, values, keep, times, by_value, pane_range, n_slots
            )
            if found is not None:
                return found
        xp = self.xp
        rows = xp.flatnonzero(xp.asarray(keep))
        count = int(rows.shape[0])
        if not count:
            return [], [], True
        row_panes = xp.asarray(panes, dtype=xp.int64)[rows]
        row_slots = xp.asarray(slots)[rows].astype(xp.int64)
        row_values = xp.asarray(values, dtype=xp.int64)[rows]
        row_times = None if times is None else xp.asarray(times, dtype=xp.int64)[rows]
        order = _split_order(xp, row_panes, row_slots, row_values, row_times, by_value)
        row_panes = row_panes[order]
        row_slots = row_slots[order]
        row_values = row_values[order]
        if row_times is not None:
            row_times = row_times[order]
        cuts = _host(xp.flatnonzero(row_panes[1:] != row_panes[:-1]) + 1).tolist()
        starts = [0, *cuts]
        ends = [*cuts, count]
        pane_ids = _host(row_panes[xp.asarray(starts, dtype=xp.int64)]).tolist()
        chunks = [
            (row_slots[a:b], row_values[a:b], None if row_times is None else row_times[a:b])
            for a, b in zip(starts, ends, strict=True)
        ]
        return pane_ids, chunks, True

    def _split_in_range(
        self,
        panes: Any,  # noqa: ANN401
        slots: Any,  # noqa: ANN401
        values: Any,  # noqa: ANN401
        keep: Any,  # noqa: ANN401
        times: Any,  # noqa: ANN401
        by_value: bool,
        pane_range: tuple[int, int],
        n_slots: int | None = None,
    ) -> tuple[list[int], list[tuple[Any, Any, Any]], bool] | None:
        """`split_panes` over panes known to lie in `pane_range`: every row is sorted, those
        not kept after the kept ones (their pane made one past the range: no compaction,
        whose row count would cost a device read), and the bounds of each pane of the range
        plus the kept rows' count come in one read. None where that count shows a kept row
        outside the range (the hint was wrong: the caller takes the general path)."""
        xp = self.xp
        low, high = pane_range
        count = int(panes.shape[0])  # the array's shape: known on the host
        if not count:
            return [], [], True
        if low == high and by_value:
            return self._split_one_pane(panes, slots, values, keep, times, low)
        if by_value and times is None and n_slots and (high - low + 1) * n_slots <= MAX_GROUPS:
            found = self._split_in_groups(panes, slots, values, keep, pane_range, n_slots)
            if found is not False:
                return found
        kept = xp.asarray(keep).astype(xp.bool_, copy=False)
        row_panes = xp.where(kept, xp.asarray(panes, dtype=xp.int64), high + 1)
        row_slots = xp.asarray(slots).astype(xp.int64)
        row_values = xp.asarray(values, dtype=xp.int64)
        row_times = None if times is None else xp.asarray(times, dtype=xp.int64)
        order = _split_order(xp, row_panes, row_slots, row_values, row_times, by_value, pane_range)
        row_panes = row_panes[order]
        bounds = xp.searchsorted(row_panes, xp.arange(low, high + 2, dtype=xp.int64))
        read = _host(xp.concatenate((bounds, kept.sum(dtype=xp.int64).reshape(1))))
        bounds, kept_count = read[:-1], int(read[-1])
        if int(bounds[-1] - bounds[0]) != kept_count:
            return None
        if not kept_count:
            return [], [], True
        row_slots = row_slots[order]
        row_values = row_values[order]
        if row_times is not None:
            row_times = row_times[order]
        filled = np.flatnonzero(np.diff(bounds))
        offsets = None
        if by_value and n_slots is not None and len(filled) * (n_slots + 1) <= kept_count:
            offsets = self._pane_offsets(row_panes, row_slots, low, filled, n_slots)
        pane_ids, chunks = [], []
        for number, index in enumerate(filled.tolist()):
            a, b = int(bounds[index]), int(bounds[index + 1])
            pane_ids.append(low + index)
            chunk_values = row_values[a:b]
            chunks.append(
                (row_slots[a:b], chunk_values, None if row_times is None else row_times[a:b])
            )
            if offsets is not None:
                self._remember_offsets(chunk_values, offsets[number] - a)
        return pane_ids, chunks, True

    def _split_in_groups(
        self,
        panes: Any,  # noqa: ANN401
        slots: Any,  # noqa: ANN401
        values: Any,  # noqa: ANN401
        keep: Any,  # noqa: ANN401
        pane_range: tuple[int, int],
        n_slots: int,
    ) -> tuple[list[int], list[tuple[Any, Any, Any]], bool] | None | bool:
        """`_split_in_range` (by value, no event times) as a counting sort by (pane, key
        slot) group and a block sort of each group's values (`holistic_runs.cu.j2`: four
        launches and a scan, where the radix sorts and array operations took ~75 CuPy calls).
        The group bounds are every chunk's per-slot offsets (`sort_pane(presorted=True)`
        searches nothing). One device read: the panes' bounds, the largest group and the kept
        rows the range misses. None: a kept row outside the range or of no known slot (the
        general path answers); False: a group too large for a block (a hot key: the caller's
        radix sort of the values answers)."""
        xp = self.xp
        low, high = pane_range
        panes_in_range = high - low + 1
        groups = panes_in_range * n_slots
        rows = int(panes.shape[0])
        slots = xp.asarray(slots)
        if slots.dtype != xp.int32:  # slots are below n_slots, itself below 2**31
            slots = slots.astype(xp.int32)
        # counts (groups + 1), cursors (groups), then bounds (panes + 1), largest, misplaced
        work = xp.zeros(2 * groups + panes_in_range + 4, xp.uint64)
        counts, cursors = work[: groups + 1], work[groups + 1 : 2 * groups + 1]
        summary = work[2 * groups + 1 :]
        group = xp.empty(rows, xp.int32)
        grid = (min(MAX_BLOCKS, -(-rows // THREADS_PER_BLOCK)),)
        self._runs_function("count_groups")(
            grid,
            (THREADS_PER_BLOCK,),
            (
                xp.asarray(panes, dtype=xp.int64),
                slots,
                xp.asarray(keep).astype(xp.bool_, copy=False),
                np.int64(rows),
                np.int64(low),
                np.int64(high),
                np.int64(n_slots),
                group,
                counts,
                summary[panes_in_range + 2 :],
            ),
        )
        offsets = xp.cumsum(counts.view(xp.int64))
        relative = xp.empty((panes_in_range, n_slots + 1), xp.int64)
        entries = panes_in_range * (n_slots + 1)
        self._runs_function("group_bounds")(
            (min(MAX_BLOCKS, -(-entries // THREADS_PER_BLOCK)),),
            (THREADS_PER_BLOCK,),
            (
                offsets,
                np.int64(panes_in_range),
                np.int64(n_slots),
                relative,
                summary[: panes_in_range + 1].view(xp.int64),
                summary[panes_in_range + 1 :],
            ),
        )
        read = _host(summary).view(np.int64)
        bounds, largest, misplaced = read[: panes_in_range + 1], int(read[-2]), int(read[-1])
        if misplaced:
            return None
        kept_count = int(bounds[-1])
        if not kept_count:
            return [], [], True
        if largest > codegen.GROUP_SORT_VALUES:
            return False
        group_values = xp.empty(kept_count, xp.int64)
        group_slots = xp.empty(kept_count, xp.int64)
        self._runs_function("scatter_groups")(
            grid,
            (THREADS_PER_BLOCK,),
            (
                group,
                xp.ascontiguousarray(xp.asarray(values, dtype=xp.int64)),
                slots,
                np.int64(rows),
                offsets,
                cursors,
                group_values,
                group_slots,
            ),
        )
        self._runs_function("sort_groups")(
            (min(MAX_BLOCKS, groups),),
            (THREADS_PER_BLOCK,),
            (group_values, offsets, np.int64(groups)),
        )
        pane_ids, chunks = [], []
        for index in np.flatnonzero(np.diff(bounds)).tolist():
            a, b = int(bounds[index]), int(bounds[index + 1])
            pane_ids.append(low + index)
            chunk_values = group_values[a:b]
            chunks.append((group_slots[a:b], chunk_values, None))
            self._remember_offsets(chunk_values, relative[index])
        return pane_ids, chunks, True

    def _split_one_pane(
        self,
        panes: Any,  # noqa: ANN401
        slots: Any,  # noqa: ANN401
        values: Any,  # noqa: ANN401
        keep: Any,  # noqa: ANN401
        times: Any,  # noqa: ANN401
        pane: int,
    ) -> tuple[list[int], list[tuple[Any, Any, Any]], bool] | None:
        """`_split_in_range` of a batch whose rows lie in one pane: its kept rows as they
        came, one chunk, not sorted (presorted False). Such a pane is longer than a batch
        (tumbling windows, long slides), so it gets several chunks, and `sort_pane` sorts
        them together when a window first reads it whether or not each came sorted: a sort
        per batch would be work done twice. One device read (the kept rows' count and how
        many lie in the pane; a compaction's count only where a row is not kept). None where
        a kept row lies outside the pane (the caller takes the general path)."""
        xp = self.xp
        kept = xp.asarray(keep).astype(xp.bool_, copy=False)
        inside = kept & (xp.asarray(panes) == pane)
        counts = _host(xp.stack((kept.sum(dtype=xp.int64), inside.sum(dtype=xp.int64))))
        kept_count, inside_count = int(counts[0]), int(counts[1])
        if inside_count != kept_count:
            return None
        if not kept_count:
            return [], [], True
        # `astype` copies: the chunk owns its slots (the key map's arrays are its own)
        row_slots = xp.asarray(slots).astype(xp.int64)
        row_values = xp.asarray(values, dtype=xp.int64)
        row_times = None if times is None else xp.asarray(times, dtype=xp.int64)
        if kept_count < int(kept.shape[0]):
            rows = xp.flatnonzero(kept)
            row_slots, row_values = row_slots[rows], row_values[rows]
            row_times = None if row_times is None else row_times[rows]
        return [pane], [(row_slots, row_values, row_times)], False

    def _pane_offsets(
        self,
        row_panes: Any,  # noqa: ANN401 - the sorted rows' panes (device)
        row_slots: Any,  # noqa: ANN401 - their slots, sorted within each pane
        low: int,
        filled: np.ndarray,
        n_slots: int,
    ) -> Any:  # noqa: ANN401
        """[len(filled), n_slots + 1]: for pane low + filled[i], the sorted row where each
        slot's rows start (and one past its last), in one search over the sorted rows'
        (pane, slot) packed into one key, as `_split_order` sorted them."""
        xp = self.xp
        packed = (row_panes - low) * (1 << 32) + row_slots
        wanted = (
            xp.asarray(filled.astype(np.int64) * (1 << 32))[:, None]
            + xp.arange(n_slots + 1, dtype=xp.int64)[None, :]
        )
        return xp.searchsorted(packed, wanted.reshape(-1)).reshape(len(filled), n_slots + 1)

    def _remember_offsets(self, values: Any, offsets: Any) -> None:  # noqa: ANN401
        """Keep `offsets` for `sort_pane(values, presorted=True)`; the entry goes with the
        chunk (a pane given more rows is sorted anew and never asks)."""
        key = id(values)
        table = self._split_offsets
        reference = weakref.ref(values, lambda _, key=key: table.pop(key, None))
        table[key] = (reference, offsets)

    def sort_pane_timed(
        self, slots: np.ndarray, keys: np.ndarray, times: np.ndarray, n_slots: int
    ) -> tuple[Any, Any, Any]:
        """`sort_pane` of values with their event times (sorted by (slot, value, time)):
        (values, times, offsets), on the device."""
        xp = self.xp
        if not len(keys):
            empty = xp.zeros(0, xp.int64)
            return empty, empty, xp.zeros(n_slots + 1, xp.int64)
        device_slots = xp.ascontiguousarray(xp.asarray(slots), dtype=xp.int64)
        device_keys = xp.ascontiguousarray(xp.asarray(keys), dtype=xp.int64)
        device_times = xp.ascontiguousarray(xp.asarray(times), dtype=xp.int64)
        device_slots = narrow_keys(device_slots, n_slots)
        order = lexsort_order(xp, (device_times, device_keys, device_slots))
        wanted = xp.arange(n_slots + 1, dtype=device_slots.dtype)
        bounds = xp.searchsorted(device_slots[order], wanted)
        return (
            xp.ascontiguousarray(device_keys[order]),
            xp.ascontiguousarray(device_times[order]),
            bounds.astype(xp.int64, copy=False),
        )

    def sort_panes(
        self,
        panes: list[tuple[tuple[Any, Any, Any] | None, list[tuple[Any, Any, Any]]]],
        n_slots: int,
        timed: bool,
    ) -> list[tuple[Any, Any, Any]]:
        """Each pane's values sorted by (slot, value[, time]) with per-slot offsets: (values,
        offsets, times or None) per pane, on the device, as `sort_pane` / `sort_pane_timed`
        give, in one sort of every pane's rows. A pane is (its sorted part as (values,
        offsets, times) or None, its chunks as (slots, values, times)); the sorted part's
        values need be grouped by slot only. The rows are concatenated once with their
        pane's number (a search of the panes' starts, which the host knows from the arrays'
        shapes), (pane, slot) packed into one narrow key, one stable sort by (pane, slot,
        value[, time]), one search for every pane's offsets; each pane's results are views
        of the sorted arrays (no device read; they live as long as any of those panes)."""
        xp = self.xp
        pieces = [_pane_pieces(xp, sorted_part, chunks) for sorted_part, chunks in panes]
        lengths = [sum(int(values.shape[0]) for _, values, _ in rows) for rows in pieces]
        starts = np.concatenate(([0], np.cumsum(lengths, dtype=np.int64)))
        total, count = int(starts[-1]), len(panes)
        if not total:
            return [
                (
                    xp.zeros(0, xp.int64),
                    xp.zeros(n_slots + 1, xp.int64),
                    xp.zeros(0, xp.int64) if timed else None,
                )
                for _ in panes
            ]
        flat = [row for rows in pieces for row in rows]
        device_starts = xp.asarray(starts)
        # (pane, slot) as pane * n_slots + slot, built in place (a span's sort may hold tens
        # of millions of rows: few temporaries of their size)
        rows = xp.arange(total, dtype=xp.int64)
        packed = xp.searchsorted(device_starts[1:], rows, side="right")
        del rows
        packed *= n_slots
        packed += self.concatenate([row_slots for row_slots, _, _ in flat])
        packed = narrow_keys(packed, count * n_slots)
        values = xp.ascontiguousarray(self.concatenate([v for _, v, _ in flat]), dtype=xp.int64)
        times = None
        if timed:
            times = xp.ascontiguousarray(self.concatenate([t for _, _, t in flat]), dtype=xp.int64)
            order = lexsort_order(xp, (times, values, packed))  # the last key is the primary
            times = xp.ascontiguousarray(times[order])
        else:
            order = lexsort_order(xp, (values, packed))
        values = xp.ascontiguousarray(values[order])
        # pane i's offsets: where its slots 0..n_slots start in the sorted rows, less its start
        wanted = (
            xp.arange(count, dtype=xp.int64)[:, None] * n_slots
            + xp.arange(n_slots + 1, dtype=xp.int64)[None, :]
        )
        bounds = xp.searchsorted(packed[order], wanted.reshape(-1).astype(packed.dtype))
        offsets = bounds.reshape(count, n_slots + 1).astype(xp.int64, copy=False)
        offsets -= device_starts[:-1, None]
        return [
            (
                values[a:b],
                offsets[i],
                None if times is None else times[a:b],
            )
            for i, (a, b) in enumerate(zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True))
        ]

    def to_host(self, array: Any) -> np.ndarray:  # noqa: ANN401
        return _host(array)

    def concatenate(self, pieces: list[Any]) -> Any:  # noqa: ANN401
        """One flat device array of the panes' sorted values."""
        xp = self.xp
        if not pieces:
            return xp.zeros(0, xp.int64)
        # host pieces (slots of a sorted pane, restored chunks) go up; device ones as they are
        # (`asarray` of a device array still costs tens of microseconds a call)
        return xp.concatenate([xp.asarray(p) if isinstance(p, np.ndarray) else p for p in pieces])

    def window_runs(
        self,
        flat_offsets: Any,  # noqa: ANN401 - the span's panes' offsets, one device array
        offset_first: np.ndarray,
        offset_last: np.ndarray,
        base: np.ndarray,
        slots: np.ndarray,
        first_index: np.ndarray,
        panes_per_row: int,
    ) -> tuple[Any, Any, Any, Any]:
        """`runtime.cpu.holistic.window_runs` on the device: row r's run i reads span pane
        p = first_index[r] + i, its slot s = slots[r]: `base[p] + offsets_p[min(s, last)] ..
        base[p] + offsets_p[min(s + 1, last)]` (empty where last = offset_last[p] < 0: no
        pane). The host's arrays (span- and row-sized) go up in one host-to-device copy, not
        five (each a transfer call of tens of microseconds); the offsets never come down; one
        launch of `holistic_runs.cu.j2` writes the four results into one allocation."""
        xp = self.xp
        rows = len(slots)
        if not rows:
            empty = xp.zeros(0, xp.int64)
            return empty, empty, empty, empty
        span = len(base)
        host = np.concatenate(
            [np.asarray(a, np.int64) for a in (offset_first, offset_last, base, slots)]
            + [np.asarray(first_index, np.int64)]
        )
        device = xp.asarray(host)
        runs = rows * panes_per_row
        # run_start, run_end, row_first and row_runs in one allocation
        out = xp.empty(2 * runs + 2 * rows, xp.int64)
        flat = xp.ascontiguousarray(xp.asarray(flat_offsets, dtype=xp.int64))
        blocks = min(MAX_BLOCKS, -(-runs // THREADS_PER_BLOCK))
        self._runs_function("runs")(
            (blocks,),
            (THREADS_PER_BLOCK,),
            (
                flat,
                np.int64(flat.shape[0]),
                device[: 3 * span],
                np.int64(span),
                device[3 * span : 3 * span + rows],
                device[3 * span + rows :],
                np.int64(rows),
                np.int64(panes_per_row),
                out[:runs],
                out[runs : 2 * runs],
                out[2 * runs : 2 * runs + rows],
                out[2 * runs + rows :],
            ),
        )
        return (
            out[:runs],
            out[runs : 2 * runs],
            out[2 * runs : 2 * runs + rows],
            out[2 * runs + rows :],
        )

    def _runs_function(self, role: str) -> Any:  # noqa: ANN401
        """A kernel of `holistic_runs.cu.j2` by role ("runs"; "count_groups",
        "group_bounds", "scatter_groups", "sort_groups"), the module compiled at the first
        call."""
        if self._runs_functions is None:
            generated = codegen.render_holistic_runs_kernel()
            module = self.module_of(generated)
            self._runs_functions = {
                role: module.get_function(name) for role, name in generated.names.items()
            }
        return self._runs_functions[role]

    def holistic_select_later(
        self,
        values: Any,  # noqa: ANN401 - device arrays (or host ones: copied up)
        run_start: Any,  # noqa: ANN401
        run_end: Any,  # noqa: ANN401
        row_first: Any,  # noqa: ANN401
        row_runs: Any,  # noqa: ANN401
        evaluation: str,
        fraction: float | tuple[float, ...],
        sorted_runs: bool,
        floating: bool | None = None,
    ) -> Callable[[], tuple[np.ndarray, ...]]:
        """Launch the selection now (one launch of the selection kernel); the returned
        function reads its (n, lower, higher) per row on the host, the results of
        `runtime.cpu.holistic.holistic_select` (the wait for the device is there). A firing
        launches every chunk's selection before it reads any, so the host builds the next
        chunk's runs while the device selects over this one's. Runs must be sorted (the
        device path only reads sorted panes). `fraction` a tuple (an ARRAY of p): the one
        launch selects every p of a window in turn over the same runs, lower and higher
        [rows, len(fraction)]. `floating` (PERCENTILE_CONT only; whether the argument is
        floating): the kernel also interpolates, and the function reads (n, value), the
        results of `holistic_evaluate.percentile_values`, bit for bit."""
        if not sorted_runs:
            raise ValueError("the GPU holistic kernels read sorted runs only")
        xp = self.xp
        arrays = [
            xp.ascontiguousarray(xp.asarray(a, dtype=xp.int64))
            for a in (values, run_start, run_end, row_first, row_runs)
        ]
        fractions = np.atleast_1d(np.asarray(fraction, np.float64))
        rows = int(arrays[3].shape[0])
        width = len(fractions)
        finish = floating is not None and evaluation == "percentile_cont"
        # n, lower and higher (and the values) in one device buffer: the results cross in one
        # copy (one wait for the device per launch, not three)
        results = xp.zeros(rows * (1 + (3 if finish else 2) * width), dtype=xp.int64)
        values_out = results[rows * (1 + 2 * width) :].view(xp.float64) if finish else None
        if rows:
            lanes = codegen.HOLISTIC_FORM_LANES[self.form]
            blocks = min(MAX_BLOCKS, -(-rows * lanes // THREADS_PER_BLOCK))
            function = self._select_function(evaluation, self.form)
            function(
                (blocks,),
                (THREADS_PER_BLOCK,),
                (
                    *arrays,
                    np.int64(rows),
                    xp.asarray(fractions),
                    np.int64(len(fractions)),
                    results[:rows],
                    results[rows : rows * (1 + width)].reshape(rows, width),
                    results[rows * (1 + width) : rows * (1 + 2 * width)].reshape(rows, width),
                    values_out,
                    np.int32(bool(floating)),
                ),
            )
            self.launches += 1

        def read() -> tuple[np.ndarray, ...]:
            host = _host(results)
            n_host = host[:rows]
            if finish:
                found = host[rows * (1 + 2 * width) :].view(np.float64).reshape(rows, width)
                return n_host, found if isinstance(fraction, tuple) else found[:, 0].copy()
            lower_host = host[rows : rows * (1 + width)].reshape(rows, width)
            higher_host = host[rows * (1 + width) : rows * (1 + 2 * width)].reshape(rows, width)
            if isinstance(fraction, tuple):
                return n_host, lower_host, higher_host
            return n_host, lower_host[:, 0].copy(), higher_host[:, 0].copy()

        return read

    def python_window(
        self,
        function: WindowFunction,
        keys: Any,  # noqa: ANN401 - device arrays (or host ones: copied up)
        run_start: Any,  # noqa: ANN401
        run_end: Any,  # noqa: ANN401
        row_first: Any,  # noqa: ANN401
        row_runs: Any,  # noqa: ANN401
        sorted_runs: bool,
        floating: bool,
        times: Any = None,  # noqa: ANN401 - the values' event times (device or host)
    ) -> tuple[np.ndarray, np.ndarray]:
        """(n, result) per row on the host: `runtime.cpu.python_window.evaluate_python`'s
        results from the device (sorted runs only, as the selection)."""
        if not sorted_runs:
            raise ValueError("the GPU holistic kernels read sorted runs only")
        self.launches += 1
        return python_window.evaluate_python(
            self.xp, function, keys, run_start, run_end, row_first, row_runs, floating, times
        )


def _split_order(xp, panes, slots, values, times, by_value: bool, pane_range=None):  # noqa: ANN001, ANN202
    """The order that sorts a batch's rows by (pane, slot[, value][, event time]) (`by_value`
    False: the values' order within a (pane, slot) does not matter, so they are no key).
    `pane_range`: (low, high) of the panes to split, fewer than 2**30: (pane, slot) is then
    one key, `(pane - low) * 2**32 + slot` (slots are below 2**31), one radix sort fewer;
    panes outside the range are clipped to one past either end (they sort before or after
    it, in no order among themselves, which the caller's bounds search allows)."""
    if pane_range is None:
        sort_keys = (values, slots, panes) if by_value else (slots, panes)
    else:
        low, high = pane_range
        packed = xp.clip(panes - low, -1, high - low + 1) * (1 << 32) + slots
        sort_keys = (values, packed) if by_value else (packed,)
    if times is not None:
        sort_keys = (times, *sort_keys)
    return lexsort_order(xp, sort_keys)


def _pane_pieces(xp, sorted_part, chunks) -> list[tuple[Any, Any, Any]]:  # noqa: ANN001
    """A pane's rows as (slots, values, times) pieces for `sort_panes`: its sorted part's
    slots found on the device from its offsets (slot s holds rows offsets[s]..offsets[s+1]:
    a row's slot is the last s whose offset is at or below it), then its chunks."""
    if sorted_part is None:
        return list(chunks)
    values, offsets, times = sorted_part
    rows = xp.arange(int(values.shape[0]), dtype=xp.int64)
    slots = xp.searchsorted(offsets, rows, side="right") - 1  # device offsets (a sort's)
    return [(slots, values, times), *chunks]


def _host(array: Any) -> np.ndarray:  # noqa: ANN401
    """A host copy of a device array (numpy arrays as they are)."""
    getter = getattr(array, "get", None)
    return np.asarray(getter() if getter is not None else array)
