"""The GPU join kernels: `runtime.operators.join_kernels.JoinKernels` on the device.

The kernels come from `compiler.codegen_join` (one module per query: its algorithm, crediting,
marking, and the scatter kernels of its aggregation), compiled through the shared
`CompileContext`. Every device step is written in two passes where it produces a variable
number of results (count per item, exclusive scan with CuPy between the launches, write at
the scanned offset), and its results come back through buffers borrowed from the process's
pinned pool (`gpu.pinned.download`).

Two forms of an aggregated join (EXPLAIN's `fused=`):

- `fused=device` (`codegen_join.device_fusion` applies: the group known per row of one
  side, every predicate and aggregate argument rendered in CUDA; outer joins too):
  `device_cells` hands the driver `join_fused.DeviceJoinCells`, whose fused kernel
  aggregates every match into (window, group) cells kept on the device, both sides' rows
  mirrored there; no pair is materialised, and firing copies back only the fired windows'
  cells.
- `fused=probe` (the rest): the kernels below find pairs and expand their windows on the
  device; the driver keeps the stored rows, pending pairs and (window, group) cells on the
  host, so each call uploads what it reads.

A join without aggregation (EXPLAIN's `rows=` on its WindowJoin): `rows=device`
(`codegen_join.device_rows` applies: windowed, predicates rendered in CUDA reading no STRING
column; outer joins included) hands the driver `join_rows.DeviceJoinRows`, which keeps both
sides' rows and the pending pairs on the device and copies back only the fired windows'
output columns (STRING ones are taken on the host at the fired pairs' rows);
`rows=host` keeps the pending pairs on the host as the probe form does.

The host faces of the protocol (key maps, the evaluation of residual/WHERE/aggregate arguments
over joined Arrow columns, their partials, the factorised join's cell match) are `host`'s:
another backend's JoinKernels the GPU operator factory passes in (the CPU's; this package may
not import it). The probe form's
kernels passed `pytest -m gpu` on an H100 (docs/performance/joins-gpu.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mangonel.aggregates.state import StateKind
from mangonel.compiler import physical as ph
from mangonel.compiler.codegen_join import (
    DeviceFusion,
    DeviceRowsPlan,
    device_fusion,
    device_rows,
    render_node_join_kernels,
    scatter_role,
)
from mangonel.compiler.options import GpuOptions
from mangonel.runtime.gpu import device, pinned
from mangonel.runtime.gpu.compile import shared_context
from mangonel.runtime.gpu.join_fused import DeviceJoinCells
from mangonel.runtime.gpu.join_rows import DeviceJoinRows
from mangonel.runtime.gpu.sorting import lexsort_order
from mangonel.runtime.operators.join_kernels import JoinKernels


class GpuJoinKernels:
    """JoinKernels of one join node on the GPU (see the module docstring)."""

    name = "gpu"

    def __init__(
        self,
        node: ph.WindowJoinExec | ph.JoinAggregateExec,
        host: JoinKernels,
        options: GpuOptions | None = None,
    ) -> None:
        self.options = options or GpuOptions()
        self.host = host
        self.generated = render_node_join_kernels(node)
        module = shared_context(self.options.module_cache_size).module(self.generated)
        self._functions = {
            role: module.get_function(name) for role, name in self.generated.names.items()
        }
        self.launches = 0
        self.fused_launches = 0  # of the fused probe + aggregate kernel
        self.rows_form: DeviceJoinRows | None = None  # what `device_rows` handed out

    # -- plumbing -------------------------------------------------------------------------

    def _launch(self, role: str, items: int, *arguments: Any) -> None:
        threads = self.options.threads
        self._functions[role]((device.grid(items, threads),), (threads,), arguments)
        self.launches += 1

    @staticmethod
    def _up(array: np.ndarray, dtype: Any = np.int64) -> Any:  # noqa: ANN401
        return device.cupy().asarray(np.ascontiguousarray(array, dtype))

    @staticmethod
    def _down(array: Any) -> np.ndarray:  # noqa: ANN401
        """A device array on the host through a buffer of the process's pinned pool."""
        return pinned.download_one(array)

    @staticmethod
    def _offsets(counts: Any) -> tuple[Any, int]:  # noqa: ANN401
        """The exclusive scan of per-item counts, and their total."""
        cp = device.cupy()
        scan = cp.cumsum(counts)
        total = int(scan[-1]) if len(scan) else 0
        return scan - counts, total

    def _two_pass(self, role: str, n: int, head: tuple) -> tuple[Any, Any]:  # noqa: ANN401
        """Variable-size output of `n` items in two launches: `<role>_count` writes each
        item's count, an exclusive scan gives its start, `<role>_write` fills the two int64
        output arrays there (device arrays; never per-row atomics into host memory)."""
        cp = device.cupy()
        counts = cp.zeros(n, cp.int64)
        self._launch(f"{role}_count", n, *head, counts)
        starts, total = self._offsets(counts)
        first_out = cp.empty(total, cp.int64)
        second_out = cp.empty(total, cp.int64)
        if total:
            self._launch(f"{role}_write", n, *head, starts, first_out, second_out)
        return first_out, second_out

    @staticmethod
    def _sorted_rows(slots: Any) -> Any:  # noqa: ANN401
        """Rows with a key, ordered by (slot, row)."""
        cp = device.cupy()
        rows = cp.flatnonzero(slots >= 0)
        # a stable radix sort by slot: the rows, ascending, stay so within a slot
        return rows[cp.argsort(slots[rows])]

    @staticmethod
    def _window_sorted_rows(slots: Any, first: Any, last: Any) -> tuple[Any, Any, int]:  # noqa: ANN401
        """The build side of a match: its rows with a key ordered by (slot, first window),
        their first windows in that order, and the widest `last - first` of its rows (-1
        where ranges are too wide to bound a search: a static table's rows span every
        window). The probe kernels narrow a slot's run to the rows whose first window can
        overlap their own range by binary search (`mg_candidates`)."""
        cp = device.cupy()
        rows = cp.flatnonzero(slots >= 0)
        if not len(rows):
            return rows, cp.zeros(0, cp.int64), -1
        keyed, firsts = slots[rows], first[rows]
        # one copy back for the four extremes
        low, high, top, span = (
            int(x)
            for x in cp.stack([firsts.min(), firsts.max(), keyed.max(), (last - first).max()]).get()
        )
        width = high - low + 1
        if low > -(2**61) and high < 2**61 and (top + 1) * width < 2**62:
            # one radix sort of unique-enough int64 keys, not one per key
            order = cp.argsort(keyed * width + (firsts - low))
        else:
            order = lexsort_order(cp, (firsts, keyed))
        rows = rows[order]
        bounded = low > -(2**61) and 0 <= span < 2**40
        return rows, cp.ascontiguousarray(first[rows]), span if bounded else -1

    # -- matching -------------------------------------------------------------------------

    def match(self, algorithm, slots_a, first_a, last_a, slots_b, first_b, last_b):
        empty = np.empty(0, np.int64)
        if not len(slots_a) or not len(slots_b):
            return empty, empty
        n_slots = max(int(slots_a.max()), int(slots_b.max()), 0) + 1
        a = tuple(self._up(x) for x in (slots_a, first_a, last_a))
        b = tuple(self._up(x) for x in (slots_b, first_b, last_b))
        i, j = self.match_device(algorithm, a, b, n_slots)
        return self._down(i), self._down(j)

    def match_device(
        self, algorithm: str, a: tuple[Any, Any, Any], b: tuple[Any, Any, Any], n_slots: int
    ) -> tuple[Any, Any]:  # noqa: ANN401
        """`match` over device arrays ((slots, first, last) of each side; every slot below
        `n_slots`), the pairs (i, j) left on the device: hash builds on the smaller side and
        probes with the other."""
        cp = device.cupy()
        if not len(a[0]) or not len(b[0]):
            return cp.zeros(0, cp.int64), cp.zeros(0, cp.int64)
        if algorithm == "sort-merge":
            return self._merge_device(*a, *b)
        if len(a[0]) <= len(b[0]):
            return self._hash_device(*a, *b, max(n_slots, 1))
        j, i = self._hash_device(*b, *a, max(n_slots, 1))
        return i, j

    def _hash_device(self, bs, bf, bl, ps, pf, pl, n_slots: int):  # noqa: ANN001, ANN202
        """(build row, probe row) pairs on the device: bucket the build side by slot, probe."""
        cp = device.cupy()
        bucket = cp.zeros(n_slots, cp.int64)
        self._launch("bucket_count", len(bs), bs, np.int64(len(bs)), bucket)
        offsets = cp.zeros(n_slots + 1, cp.int64)
        offsets[1:] = cp.cumsum(bucket)
        order, sorted_first, span = self._window_sorted_rows(bs, bf, bl)
        head = (ps, pf, pl, np.int64(len(ps)), bf, bl, offsets, order, np.int64(n_slots))
        head += (sorted_first, np.int64(span))
        return self._two_pass("probe", len(ps), head)

    def _merge_device(self, sa, fa, la, sb, fb, lb):  # noqa: ANN001, ANN202
        """(a row, b row) pairs on the device: both sides sorted by slot, merged."""
        cp = device.cupy()
        order_a = self._sorted_rows(sa)
        order_b, sorted_first, span = self._window_sorted_rows(sb, fb, lb)
        sorted_b = cp.ascontiguousarray(sb[order_b])
        head = (order_a, np.int64(len(order_a)), sa, fa, la)
        head += (order_b, sorted_b, np.int64(len(order_b)), fb, lb, sorted_first, np.int64(span))
        return self._two_pass("merge", len(order_a), head)

    # -- crediting ------------------------------------------------------------------------

    def _expand_device(self, first: Any, last: Any, lo: int, hi: int) -> tuple[Any, Any]:  # noqa: ANN401
        """(entry, k) on the device, ordered by window k, then entry."""
        cp = device.cupy()
        n = len(first)
        head = (first, last, np.int64(n), np.int64(lo), np.int64(hi))
        entries, windows = self._two_pass("expand", n, head)
        if not len(entries):
            return entries, windows
        low, high = int(windows.min()), int(windows.max())
        if (high - low + 1) * n < 2**62:
            # one sort of unique int64 keys (window offset, entry): a single radix sort,
            # not a stable sort per key with gathers between them
            keys = cp.sort((windows - low) * n + entries)
            return keys % n, keys // n + low
        order = lexsort_order(cp, (entries, windows))
        return entries[order], windows[order]

    def expand(self, first, last, lo, hi, ordered=True):
        # the device expansion always comes out ordered by window, which `ordered=False`
        # (any order) accepts as well
        if hi < lo or not len(first):
            empty = np.empty(0, np.int64)
            return empty, empty
        entries, windows = self._expand_device(self._up(first), self._up(last), lo, hi)
        return self._down(entries), self._down(windows)

    def mark_matched(self, matched, rows, first, last, origin) -> None:
        if not len(rows):
            return
        flags = self._up(matched, np.uint8)
        arguments = (flags, np.int64(matched.shape[1]), self._up(rows), self._up(first))
        arguments += (self._up(last), self._up(origin), np.int64(len(rows)))
        self._launch("mark", len(rows), *arguments)
        matched[...] = self._down(flags)

    # -- join + aggregate -----------------------------------------------------------------

    def scatter(self, kind: StateKind) -> Any:  # noqa: ANN401
        """The kind's scatter on the device: `(target_0.., index, values_0..)`, the targets
        updated in place (the driver keeps the cells on the host)."""
        parts = len(kind.parts)

        def scatter(*arguments: np.ndarray) -> None:
            targets, index, values = arguments[:parts], arguments[parts], arguments[parts + 1 :]
            if not len(index):
                return
            dtype = targets[0].dtype
            ctype = "long long" if dtype == np.dtype(np.int64) else "double"
            device_targets = [self._up(t, dtype) for t in targets]
            lock = device.cupy().zeros(len(targets[0]), device.cupy().int32)
            device_values = [self._up(v, dtype) for v in values]
            self._launch(
                scatter_role(kind, ctype),
                len(index),
                *device_targets,
                lock,
                self._up(index),
                *device_values,
                np.int64(len(index)),
            )
            for target, device_target in zip(targets, device_targets, strict=True):
                target[...] = self._down(device_target)

        return scatter

    def prefix_windows(self, cell_k, cell_g, deltas, running, lo, hi):
        """Difference-credited cells fired on the device: per group, the running sums after
        each of its cells hold until its next cell; the runs with a positive count are
        expanded to their windows (the expand kernels) and ordered by (window, group)."""
        cp = device.cupy()
        n_parts = running.shape[0]
        keep = np.asarray(cell_k) <= hi
        ks, gs = self._up(np.asarray(cell_k)[keep]), self._up(np.asarray(cell_g)[keep])
        ds = self._up(np.asarray(deltas)[:, keep])
        start = self._up(running)
        n_groups = running.shape[1]
        n = len(ks)
        if n:
            order = lexsort_order(cp, (ks, gs))  # by group, then window
            ks, gs, ds = ks[order], gs[order], ds[:, order]
            new_group = cp.ones(n, cp.bool_)
            new_group[1:] = gs[1:] != gs[:-1]
            sums = cp.cumsum(ds, axis=1)
            group_start = cp.flatnonzero(new_group)
            before = sums[:, group_start] - ds[:, group_start]  # sums before each group
            run = cp.cumsum(new_group.astype(cp.int64)) - 1
            after = start[:, gs] + sums - before[:, run]  # running values after each cell
            last_of_key = cp.ones(n, cp.bool_)
            last_of_key[:-1] = (ks[1:] != ks[:-1]) | (gs[1:] != gs[:-1])
            next_k = cp.full(n, hi + 1, cp.int64)
            next_k[:-1] = cp.where(gs[1:] == gs[:-1], ks[1:], hi + 1)
            # the last cell of each (window, group) holds from its window to the next one
            seg_g, seg_first, seg_last = gs[last_of_key], ks[last_of_key], next_k[last_of_key] - 1
            seg_values = after[:, last_of_key]
            first_k = cp.full(n_groups, hi + 1, cp.int64)
            first_k[gs[group_start]] = ks[group_start]
            last_of_group = cp.ones(n, cp.bool_)
            last_of_group[:-1] = new_group[1:]
            final = start.copy()
            final[:, gs[last_of_group]] = after[:, last_of_group]
        else:
            seg_g = seg_first = seg_last = cp.zeros(0, cp.int64)
            seg_values = cp.zeros((n_parts, 0), cp.int64)
            first_k = cp.full(n_groups, hi + 1, cp.int64)
            final = start
        # before its first cell, each group holds its running values from window lo
        groups = cp.arange(n_groups, dtype=cp.int64)
        seg_g = cp.concatenate([groups, seg_g])
        seg_first = cp.concatenate([cp.full(n_groups, lo, cp.int64), seg_first])
        seg_last = cp.concatenate([first_k - 1, seg_last])
        seg_values = cp.concatenate([start, seg_values], axis=1)
        live = cp.flatnonzero(seg_values[0] > 0)
        entries, windows = self._expand_device(
            cp.ascontiguousarray(seg_first[live]), cp.ascontiguousarray(seg_last[live]), lo, hi
        )
        entries = live[entries]
        if len(entries):
            order = lexsort_order(cp, (seg_g[entries], windows))  # by window, then group
            entries, windows = entries[order], windows[order]
        running[...] = self._down(final)
        values = cp.ascontiguousarray(seg_values[:, entries])
        return self._down(windows), self._down(seg_g[entries]), self._down(values)

    # -- device-fused join + aggregate ----------------------------------------------------

    def device_cells(self, node: ph.JoinAggregateExec) -> Any:  # noqa: ANN401
        """The device-fused cells of an aggregated join (`join_fused.DeviceJoinCells`) where
        `device_fusion` applies to it (this module then holds the fused kernel), else None:
        the driver keeps the probe form."""
        fusion = device_fusion(node)
        fused = any(role.startswith("fused_") for role in self._functions)
        if not isinstance(fusion, DeviceFusion) or not fused:
            return None
        return DeviceJoinCells(node, fusion, self)

    def device_rows(self, node: ph.WindowJoinExec) -> Any:  # noqa: ANN401
        """The device-resident rows of a join without aggregation (`join_rows.DeviceJoinRows`)
        where `codegen_join.device_rows` applies to it, else None: the driver keeps the pairs
        on the host."""
        plan = device_rows(node)
        if not isinstance(plan, DeviceRowsPlan):
            return None
        self.rows_form = DeviceJoinRows(node, plan, self)
        return self.rows_form

    # -- host faces -----------------------------------------------------------------------

    def combine_cells(self, left, left_ids, right, right_ids, n_ids, group_of_id, *rest):
        return self.host.combine_cells(left, left_ids, right, right_ids, n_ids, group_of_id, *rest)

    def unseen_groups(self, left, left_ids, right, right_ids, n_ids, group_of_id):
        return self.host.unseen_groups(left, left_ids, right, right_ids, n_ids, group_of_id)

    def pair_ranges(self, mine, theirs, first, last, their_first, their_last, bases, out=None):
        # the host form's pairs (fused=probe, rows=host): their ids and ranges on the host
        return self.host.pair_ranges(mine, theirs, first, last, their_first, their_last, bases, out)

    def window_ranges(self, ts, has_ts, size, slide, closed, out=None):
        # a batch's times are on the host as it arrives: one host pass, before any upload
        return self.host.window_ranges(ts, has_ts, size, slide, closed, out)

    def new_key_map(self, types):
        return self.host.new_key_map(types)

    def key_map_from_arrays(self, types, arrays, prefix):
        return self.host.key_map_from_arrays(types, arrays, prefix)

    def evaluate(self, expression, column_types, columns, length=None):
        return self.host.evaluate(expression, column_types, columns, length)

    def partials(self, fields, column_types, columns, contributes, length):
        return self.host.partials(fields, column_types, columns, contributes, length)


__all__ = ["GpuJoinKernels"]
