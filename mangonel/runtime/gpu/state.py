"""Window state on the GPU: the pane store, the pane merge and the firing tree."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from mangonel.compiler import codegen
from mangonel.compiler.codegen import GeneratedModule
from mangonel.compiler.options import GpuOptions
from mangonel.compiler.physical import StateField
from mangonel.runtime.gpu import device, pinned
from mangonel.runtime.gpu.host_loops import parallel_copy
from mangonel.runtime.gpu.keys import GpuKeyMap
from mangonel.runtime.host.arrays import array_with_nulls
from mangonel.runtime.operators.kernels import neutral
from mangonel.runtime.operators.results import cells_with_rows, finalize, window_bounds

MAX_BLOCKS = 65_535  # blocks of a merge launch at most (`device.grid`): MG_MAX_BLOCKS
BLOCK_SLOTS = 8  # scratch cells per block (`state_finish_block`): MG_SLOTS

# the kept tree's levels (every part) stay under this or the state's own bytes (the tree at
# most doubles the state); beyond both a firing builds its own
KEPT_TREE_BYTES = 1 << 30


def _grown(nbytes: int) -> int:
    """A buffer size for `nbytes`: the next power of two (at least 64 KiB), so a stream of
    firings reallocates O(log) times."""
    size = 1 << 16
    while size < nbytes:
        size *= 2
    return size


class GpuPaneState:
    """Flat CuPy arrays per state part, `[key_capacity x pane_capacity]` row-major, column c is
    pane `origin + c` (the CPU layout, so snapshots are interchangeable)."""

    def __init__(
        self,
        fields: tuple[StateField, ...],
        module_of: Callable[[], tuple[GeneratedModule, Any]],
        options: GpuOptions,
        finalize_module_of: Callable[[tuple], tuple | None] = lambda plans: None,
    ) -> None:
        self.fields = fields
        self._module_of = module_of  # () -> (GeneratedModule, RawModule)
        # plans -> (GeneratedModule, RawModule, result C types) of the finalize kernel, or
        # None when an aggregate has no device finalize
        self._finalize_module_of = finalize_module_of
        self.options = options
        # the output path's buffers, reused across firings (grown by powers of two)
        self._packed: Any = None  # device: the packed results of one firing
        self._block_partials: Any = None  # `block_partials`
        # the tree kept across firings (`_kept_tree`): upper levels per part, their offsets,
        # its top level, and the columns merged since it was last brought up to date
        self._tree: dict[str, Any] | None = None
        self._tree_offsets: np.ndarray | None = None
        self._tree_top = 0
        self._dirty: tuple[int, int] | None = None
        # the columns lock-free merges may have left in a merge form since the last `settle`
        self._unsettled: tuple[int, int] | None = None
        self.parts = codegen.state_parts(fields)
        self.aux_words = codegen.aux_words(fields)
        self.key_capacity = 0
        self.pane_capacity = 0
        self.origin = 0
        cp = device.cupy()
        self.arrays = {p.member: cp.empty(0, p.numpy) for p in self.parts}
        # `aux_words` device-only words per cell (MOMENTS' shifted sum), zero at rest
        self.aux = cp.zeros(0, cp.float64)

    def _neutral(self, member: str) -> float | int:
        for field in self.fields:
            values = neutral(field)[1]
            for part in self.parts:
                if part.member == member:
                    if part.field == field.name:
                        return values[part.part]
        raise KeyError(member)

    def reshape(self, key_capacity: int, pane_capacity: int, origin: int) -> None:
        cp = device.cupy()
        self.settle()  # the cells kept are copied at rest (the new aux words are zero)
        keep_keys = min(self.key_capacity, key_capacity)
        for part in self.parts:
            old = self.arrays[part.member]
            array = cp.full((key_capacity, pane_capacity), self._neutral(part.member), part.numpy)
            if keep_keys and self.pane_capacity:
                old2 = old.reshape(self.key_capacity, self.pane_capacity)
                # pane q sits at column q - origin; copy the panes both layouts hold
                first = max(self.origin, origin)
                end = min(self.origin + self.pane_capacity, origin + pane_capacity)
                if end > first:
                    array[:keep_keys, first - origin : end - origin] = old2[
                        :keep_keys, first - self.origin : end - self.origin
                    ]
            self.arrays[part.member] = array.reshape(-1)
        self.aux = cp.zeros(key_capacity * pane_capacity * self.aux_words, cp.float64)
        self.key_capacity, self.pane_capacity, self.origin = key_capacity, pane_capacity, origin
        self._unsettled = None
        self._tree = None  # columns moved: the kept tree is rebuilt (`_kept_tree`)

    @property
    def block_partials(self):  # noqa: ANN201 - a CuPy array
        """The merge launches' per-block scratch (`state_finish_block`): a ticket word, then
        BLOCK_SLOTS cell ids and values per state part for each of up to MAX_BLOCKS blocks
        (8 MiB per part and the ids); zeroed once (each launch's last block resets the
        ticket)."""
        if self._block_partials is None:
            bytes_ = 8 + 8 * MAX_BLOCKS * BLOCK_SLOTS * (1 + len(self.parts))
            self._block_partials = device.cupy().zeros(bytes_, np.uint8)
        return self._block_partials

    @property
    def nbytes(self) -> int:
        """Device bytes of the state: the arrays and their aux words (at capacity), the kept
        tree's levels and the merge scratch when they exist."""
        extra = 0 if self._tree is None else sum(int(a.nbytes) for a in self._tree.values())
        if self._block_partials is not None:
            extra += int(self._block_partials.nbytes)
        return self._leaf_bytes + extra

    @property
    def _leaf_bytes(self) -> int:
        return sum(int(a.nbytes) for a in self.arrays.values()) + int(self.aux.nbytes)

    def struct_args(self, arrays: dict[str, object] | None = None) -> list:
        arrays = self.arrays if arrays is None else arrays
        return [arrays[p.member] for p in self.parts] + [self.aux]

    def settle(self) -> None:
        """Bring the cells merged since the last call back to the state kinds' parts (the
        `settle` kernel; MOMENTS: shifted sums -> n, mean, m2). Every reader of the arrays
        calls it first (the firing, snapshots, reshape, the sessions' and stage 1's
        combines); merges leave the cells as they are, so a stream of batches pays one settle
        launch per firing, not per batch. Nothing to do for kinds that merge in place."""
        unsettled, self._unsettled = self._unsettled, None
        if unsettled is None or not self.aux_words or not self.key_capacity:
            return
        first, end = unsettled
        if end <= first:
            return
        generated, module = self._module_of()
        threads = self.options.threads
        module.get_function(generated.names["settle"])(
            (device.grid(self.key_capacity * (end - first), threads),),
            (threads,),
            (
                *device.struct(self.struct_args()),
                np.int64(self.key_capacity),
                np.int64(self.pane_capacity),
                np.int64(first),
                np.int64(end),
            ),
        )

    def _unsettle(self, first: int, end: int) -> None:
        if self._unsettled is not None:
            first, end = min(first, self._unsettled[0]), max(end, self._unsettled[1])
        self._unsettled = (max(first, 0), min(end, self.pane_capacity))

    def merge(self, index, partials: dict[str, tuple]) -> None:
        cp = device.cupy()
        generated, module = self._module_of()
        rows = int(index.shape[0])
        if rows == 0:
            return
        values = [
            cp.ascontiguousarray(partials[p.field][p.part], dtype=p.numpy) for p in self.parts
        ]
        self._all_merged()  # the split path's panes are on the device: rebuild every node
        self._unsettle(0, self.pane_capacity)
        kernel = module.get_function(generated.names["merge"])
        threads = self.options.threads
        kernel(
            (device.grid(rows, threads),),
            (threads,),
            (
                cp.ascontiguousarray(index, dtype=cp.int64),
                *device.struct(values),
                *device.struct(self.struct_args()),
                np.int64(rows),
                # the split path has no cell count to judge "auto" by: the table when asked
                np.int32(self.options.block_table == "on"),
                self.block_partials,
            ),
        )

    def _matrix(self, member: str):
        return self.arrays[member].reshape(self.key_capacity, self.pane_capacity)

    def occupied(self, n_keys: int, first_pane: int, end_pane: int) -> np.ndarray:
        # the row count (the first part) is exact in every form: no settle
        first = max(first_pane - self.origin, 0)
        end = min(end_pane - self.origin, self.pane_capacity)
        result = np.zeros(max(end_pane - first_pane, 0), np.bool_)
        if end > first and n_keys:
            rows = self._matrix(self.parts[0].member)[:n_keys, first:end]
            hit = device.cupy().asnumpy((rows > 0).any(axis=0))
            result[first + self.origin - first_pane : end + self.origin - first_pane] = hit
        return result

    def windows(self, n_keys, runs, panes_per_slide, panes_per_window, windows_per_batch):
        """Field values of every (window, key) of the runs (device arrays, `_window_values`)."""
        out, _ = self._window_values(n_keys, runs, panes_per_slide, panes_per_window)
        return self._by_field(out)

    def cumulative_windows(self, n_keys, runs, panes_per_period):
        """CUMULATE windows as a prefix combine (`window_prefix`: a thread per (piece, key)
        walks the state's columns from its period's first pane; no tree): device arrays,
        window-major then key order. Runs are cut at period boundaries, so a long firing
        spreads over threads and no thread walks more than a period; the pieces' columns,
        skips, counts and output offsets cross in one copy."""
        cp = device.cupy()
        generated, module = self._module_of()
        self.settle()
        total = sum(count for _, count in runs)
        if total == 0 or n_keys == 0:
            return self._by_field(
                {
                    p.member: cp.full(total * max(n_keys, 1), self._neutral(p.member), p.numpy)
                    for p in self.parts
                }
            )
        columns, skips, counts, outs = [], [], [], []
        offset = 0
        for last, count in runs:
            periods = np.arange(
                last // panes_per_period, (last + count - 1) // panes_per_period + 1
            ).astype(np.int64)
            period_panes = periods * panes_per_period
            starts = np.maximum(period_panes, last)
            ends = np.minimum(period_panes + panes_per_period, last + count)
            columns.append(period_panes - self.origin)
            skips.append(starts - period_panes)
            counts.append(ends - starts)
            outs.append(offset + starts - last)
            offset += count
        pieces = sum(len(c) for c in columns)
        meta = cp.asarray(np.concatenate(columns + skips + counts + outs).astype(np.int64))
        # every (window, key) cell is written by the launch: no fill needed
        out = {p.member: cp.empty(total * n_keys, p.numpy) for p in self.parts}
        threads = self.options.threads
        module.get_function(generated.names["window_prefix"])(
            (device.grid(pieces * n_keys, threads),),
            (threads,),
            (
                *device.struct(self.struct_args()),
                np.int64(self.pane_capacity),
                meta,
                np.int64(pieces),
                np.int64(n_keys),
                np.int64(panes_per_period),
                *device.struct(self.struct_args(out)),
                np.int64(n_keys),
            ),
        )
        return self._by_field(out)

    def _window_values(self, n_keys, runs, panes_per_slide, panes_per_window):
        """(part member -> device array, windows): all keys' windows of all runs: the tree
        levels over the columns the runs touch (one launch per `options.tree_span` levels,
        every key at once, all levels in one allocation per part), then one launch computes
        every (window, key). The levels' pointers, strides, bases, widths and the windows'
        first columns cross to the device in one copy."""
        cp = device.cupy()
        generated, module = self._module_of()
        self.settle()
        first_columns = (
            np.concatenate(
                [
                    np.arange(count, dtype=np.int64) * panes_per_slide + (first - self.origin)
                    for first, count in runs
                ]
            )
            if runs
            else np.empty(0, np.int64)
        )
        total = len(first_columns)
        if total == 0 or n_keys == 0:
            out = {
                p.member: cp.full(total * max(n_keys, 1), self._neutral(p.member), p.numpy)
                for p in self.parts
            }
            return out, total
        low = int(first_columns.min())
        high = int(first_columns.max()) + panes_per_window  # exclusive
        top = 0
        while (2 << top) <= panes_per_window:
            top += 1
        kept = self._kept_tree(low, high, top)
        if kept is not None:
            leaves, strides, bases, widths, build = kept
            upper = self._tree
            offsets = self._tree_offsets
            tree_keys = self.key_capacity  # every slot: a later firing may read more keys
        else:
            leaves, strides, bases, widths, upper, offsets = self._firing_tree(
                n_keys, low, high, top
            )
            # a firing's own tree: build every node it holds
            build = [(base, base + width) for base, width in zip(bases, widths, strict=True)]
            tree_keys = n_keys
        pointers = [[array.data.ptr for array in leaves[:-1]]]
        for level in range(1, top + 1):
            pointers.append(
                [upper[p.member].data.ptr + 8 * int(offsets[level - 1]) for p in self.parts]
            )
        count = top + 1
        meta = cp.asarray(
            np.concatenate(
                (
                    np.array(pointers, np.uint64).reshape(-1).view(np.int64),
                    np.array(strides + bases + widths, np.int64),
                    np.array([first for first, _ in build] + [end for _, end in build], np.int64),
                    first_columns,
                )
            )
        )
        parts = len(self.parts)
        level_pointers = meta[: count * parts]
        level_stride = meta[count * parts : count * parts + count]
        level_base = meta[count * parts + count : count * parts + 2 * count]
        level_width = meta[count * parts + 2 * count : count * parts + 3 * count]
        build_first = meta[count * parts + 3 * count : count * parts + 4 * count]
        build_end = meta[count * parts + 4 * count : count * parts + 5 * count]
        first_column = meta[count * parts + 5 * count :]
        tree = module.get_function(generated.names["tree_levels"])
        span, threads = self.options.tree_span, self.options.threads
        for from_level in range(0, top, span):
            to_level = min(from_level + span, top)
            first, end = build[from_level + 1]
            if end <= first:
                continue  # nothing to rebuild (a kept tree no merge has touched)
            first_root = first >> (span - 1)
            last_root = (end - 1) >> (span - 1)
            roots = last_root - first_root + 1
            tree(
                (tree_keys * roots,),
                (self.options.tree_threads,),
                (
                    level_pointers,
                    level_stride,
                    level_base,
                    level_width,
                    build_first,
                    build_end,
                    np.int32(from_level),
                    np.int32(to_level),
                    np.int32(span),
                    np.int64(first_root),
                    np.int64(roots),
                ),
            )
        if kept is not None:
            self._dirty = None  # every node of the kept tree is current
        # every (window, key) cell is written by the compute launch: no fill needed
        out = {p.member: cp.empty(total * n_keys, p.numpy) for p in self.parts}
        compute = module.get_function(generated.names["window_compute"])
        compute(
            (device.grid(total * n_keys, threads),),
            (threads,),
            (
                level_pointers,
                level_stride,
                level_base,
                np.int32(count),
                first_column,
                np.int64(total),
                np.int64(n_keys),
                np.int64(panes_per_window),
                np.int64(0),
                *device.struct(self.struct_args(out)),
                np.int64(n_keys),
            ),
        )
        return out, total

    def _firing_tree(self, n_keys: int, low: int, high: int, top: int):
        """A tree of this firing alone over columns [low, high): (leaves, strides, bases,
        widths, upper level arrays, level offsets in them)."""
        cp = device.cupy()
        if low >= 0 and high <= self.pane_capacity:
            leaves = self.struct_args()
            strides, bases, widths = [self.pane_capacity], [0], [self.pane_capacity]
        else:
            # A window may start before `origin` (its first panes were never seen) or end past
            # the last column (panes not seen yet): the leaves of [low, high) are copied into
            # a neutral-padded block, so every read stays inside memory this firing owns.
            width = high - low
            first, end = max(low, 0), min(high, self.pane_capacity)
            padded = {}
            for part in self.parts:
                block = cp.full((n_keys, width), self._neutral(part.member), part.numpy)
                if end > first:
                    block[:, first - low : end - low] = self._matrix(part.member)[
                        :n_keys, first:end
                    ]
                padded[part.member] = block.reshape(-1)
            leaves = self.struct_args(padded)
            strides, bases, widths = [width], [low], [width]
        # level l keeps nodes [low >> l, high >> l): those the windows' decompositions read
        for level in range(1, top + 1):
            bases.append(low >> level)
            widths.append((high >> level) - (low >> level))
            strides.append(widths[-1])
        offsets = np.concatenate(([0], np.cumsum(widths[1:]))) * n_keys
        upper = {p.member: cp.empty(max(int(offsets[-1]), 1), p.numpy) for p in self.parts}
        return leaves, strides, bases, widths, upper, offsets

    def _kept_tree(self, low: int, high: int, top: int):
        """The tree kept across firings (SPRINGALD's B-PAT, updated in place): levels 1..top
        over every column of the state, every key slot, so a firing rebuilds only the nodes
        over the columns merged since the last one (`_dirty`; everything after a reshape or a
        split-path merge) instead of all nodes under its windows (w / p columns per key: the
        output-heavy shapes' cost). None when the windows leave the state's columns (they
        need the padded tree of `_firing_tree`) or the levels would pass both
        `KEPT_TREE_BYTES` and the state's own bytes.
        Otherwise (leaves, strides, bases, widths, build ranges per level)."""
        pc = self.pane_capacity
        if top == 0 or low < 0 or high > pc:
            return None
        widths = [pc] + [pc >> level for level in range(1, top + 1)]
        nodes = sum(widths[1:]) * self.key_capacity
        if nodes * 8 * len(self.parts) > max(KEPT_TREE_BYTES, self._leaf_bytes):
            return None
        if self._tree is None or self._tree_top != top:
            cp = device.cupy()
            self._tree = {p.member: cp.empty(max(nodes, 1), p.numpy) for p in self.parts}
            self._tree_offsets = np.concatenate(([0], np.cumsum(widths[1:]))) * self.key_capacity
            self._tree_top = top
            self._dirty = (0, pc)
        first, end = self._dirty if self._dirty is not None else (0, 0)
        build = [(0, 0)]
        for level in range(1, top + 1):
            if end > first:
                build.append((first >> level, min(((end - 1) >> level) + 1, widths[level])))
            else:
                build.append((0, 0))
        return self.struct_args(), list(widths), [0] * (top + 1), list(widths), build

    def mark_merged(self, first_pane: int, end_pane: int) -> None:
        """Panes [first_pane, end_pane) changed (a fused merge): the kept tree's nodes over
        them are rebuilt at the next firing."""
        first, end = first_pane - self.origin, end_pane - self.origin
        self._unsettle(first, end)
        if self._dirty is not None:
            first, end = min(first, self._dirty[0]), max(end, self._dirty[1])
        self._dirty = (max(first, 0), min(end, self.pane_capacity))

    def _all_merged(self) -> None:
        self._dirty = (0, self.pane_capacity)

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
        keys: GpuKeyMap,
        with_slots: bool = True,
    ):
        """The runs' results, finalized on the device with their window bounds and key
        columns (`_finalize_cells`); aggregates with no device finalize
        (`codegen.finalize_ctypes` is None) are finalized on the host from one copy of the
        cells' values, their keys decoded from the slots."""
        out, total = self._window_values(n_keys, runs, panes_per_slide, panes_per_window)
        found = self._finalize_module_of(plans) if total and n_keys else None
        if found is None:
            cp = device.cupy()
            values = {
                name: tuple(cp.asnumpy(part) for part in parts)
                for name, parts in self._by_field(out).items()
            }
            window_of_cell, slot_of_cell, chosen = cells_with_rows(
                values, self.fields[0].name, max(n_keys, 1), window_ids
            )
            starts, ends = window_bounds(window_of_cell, *bounds)
            return starts, ends, slot_of_cell, keys.decode(slot_of_cell), finalize(plans, chosen)
        return self._finalize_cells(
            found, out, total * n_keys, n_keys, plans, window_ids, bounds, keys, with_slots
        )

    def _finalize_cells(
        self,
        found,
        out: dict[str, Any],
        cells: int,
        n_keys: int,
        plans,
        window_ids,
        bounds,
        keys: GpuKeyMap,
        with_slots: bool = True,
    ):
        """The output path: which of `cells` (window-major, `n_keys` per window) hold rows
        (a running count on the device), then one generated kernel finalizes and packs them
        with their window bounds and their keys' words (`finalize.cu.j2`; window w of the
        cells is `window_ids[w]`, bounds (slide, size) in microseconds; the words read from
        the key map's device copy), one copy into a reused pinned buffer, one host copy out
        of it (the results outlive the next firing, which reuses the buffer), and Arrow
        arrays that are views of that copy: no per-row Python, no host gather of the keys,
        one device round trip for the row count. (window start, window end, key slot (None
        unless `with_slots`), key columns, one Arrow array per aggregate)."""
        cp = device.cupy()
        generated, module, ctypes = found
        rows_member = out[self.parts[0].member]
        position = cp.cumsum(rows_member > 0, dtype=cp.int64)
        rows = int(position[-1])
        count = len(plans)
        key_values = len(keys.types)
        null_word = keys.has_null_keys
        # 8-byte columns (slot, key words, start, end, results), then a NULL byte per result
        columns = int(with_slots) + key_values + int(null_word) + 2 + count
        nbytes = rows * (8 * columns + count)
        if rows == 0:
            data = np.empty(0, np.uint8)
        else:
            window_ids = np.asarray(window_ids, np.int64)
            consecutive = bool(window_ids[-1] - window_ids[0] == len(window_ids) - 1)
            # consecutive windows (a firing's usual range) need no upload of their ids
            ids = position if consecutive else cp.asarray(window_ids)
            if self._packed is None or self._packed.size < nbytes:
                self._packed = cp.empty(_grown(nbytes), cp.uint8)
            packed = self._packed
            threads = self.options.threads
            module.get_function(generated.names["window_finalize"])(
                (device.grid(cells, threads),),
                (threads,),
                (
                    *[out[p.member] for p in self.parts],
                    position,
                    np.int64(cells),
                    np.int64(n_keys),
                    np.int64(rows),
                    ids,
                    np.int32(consecutive),
                    np.int64(window_ids[0]),
                    np.int64(bounds[0]),
                    np.int64(bounds[1]),
                    np.int32(with_slots),
                    keys.slot_words_device,
                    np.int64(keys.words),
                    np.int32(key_values),
                    np.int32(null_word),
                    packed,
                ),
            )
            buffer = pinned.borrow(nbytes)
            staging = buffer.view[:nbytes]
            packed[:nbytes].get(out=staging)  # one device -> pinned copy (synchronous)
            data = parallel_copy(staging)  # out of the reused buffer, in parallel slices
            pinned.give_back(buffer)
        column_views = iter(
            data[8 * rows * i : 8 * rows * (i + 1)].view(np.int64) for i in range(columns)
        )
        slot_of_cell = next(column_views) if with_slots else None
        key_words = [next(column_views) for _ in range(key_values)]
        nulls_of_keys = next(column_views) if null_word else None
        starts, ends = next(column_views), next(column_views)
        nulls = data[8 * columns * rows :].view(np.bool_)
        results = []
        for k, (plan, ctype) in enumerate(zip(plans, ctypes, strict=True)):
            values = next(column_views)
            if ctype == "double":
                values = values.view(np.float64)
            array = array_with_nulls(values, nulls[k * rows : (k + 1) * rows])
            arrow = plan.result_type.info.arrow
            results.append(array if array.type == arrow else array.cast(arrow))
        key_columns = keys.columns_of_words(key_words, nulls_of_keys)
        return starts, ends, slot_of_cell, key_columns, results

    def _by_field(self, arrays: dict[str, object]) -> dict[str, tuple]:
        result: dict[str, list] = {}
        for part in self.parts:
            result.setdefault(part.field, []).append(arrays[part.member])
        return {name: tuple(values) for name, values in result.items()}

    def to_arrays(self, n_keys: int, first_pane: int, end_pane: int) -> dict[str, np.ndarray]:
        cp = device.cupy()
        self.settle()
        first, end = first_pane - self.origin, end_pane - self.origin
        return {
            f"{p.field}.{p.part}": cp.asnumpy(self._matrix(p.member)[:n_keys, first:end])
            for p in self.parts
        }

    def load_arrays(self, arrays: dict[str, np.ndarray], first_pane: int) -> None:
        cp = device.cupy()
        self.settle()  # no aux word of a cell written over may be left from earlier merges
        first = first_pane - self.origin
        self._all_merged()
        for p in self.parts:
            block = arrays[f"{p.field}.{p.part}"]
            self._matrix(p.member)[: block.shape[0], first : first + block.shape[1]] = cp.asarray(
                block
            )
        if self.parts:
            # cells from outside the device: made ready for lock-free merges (MOMENTS: a
            # mean of +0.0 would read as an unset shift)
            self._unsettle(first, first + arrays[f"{self.parts[0].field}.0"].shape[1])
            self.settle()


__all__ = ["GpuPaneState"]
