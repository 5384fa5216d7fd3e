"""The GPU implementation of `WindowKernels` (CuPy + kernels rendered by compiler.codegen).

Driven by the same backend-neutral driver as the CPU (`runtime.operators.window`). What runs
on the device: the fused lift (filter + projection + event time + per-row partial state, one
generated kernel), key slots through a GPU open-addressing hash table (STRING keys first go
through a host dictionary to int ids), the pane merge into the flat `[keys x panes]` store
(warp-combined atomics, no sort), and every fired window of every key in one tree launch per
level plus one compute launch. Columns travel host -> device through pinned staging buffers on
a copy stream, only those the query reads, STRING as int32 ids and BOOLEAN as one byte.

Run on the host (documented fallbacks, small data): stage 1 of the split Spark form
(`preaggregate`) and the count-window tree (`segment_windows`), which reuse the CPU kernels.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mangonel.catalog.types import SqlType
from mangonel.compiler import codegen
from mangonel.compiler import physical as ph
from mangonel.compiler.physical import LiftExec, StateField, WindowAggregateExec
from mangonel.runtime.cpu import backend as cpu
from mangonel.runtime.cpu.evaluation import array_with_nulls, to_values
from mangonel.runtime.cpu.keys import StringDictionary
from mangonel.runtime.gpu import device
from mangonel.runtime.operators.kernels import FusedMerge, LiftedTuples, PaneTarget, neutral

_THREADS = 256
_STATUS_WORDS = 6
# the block table is used when the last pass's cells fill at most this share of its buckets
_BLOCK_TABLE_LOAD = 0.5
_CHUNK_ROWS = 1 << 18  # rows per fused launch: 6 MiB of (ts, key, value) per copy chunk
# tree levels built per launch: a block builds one subtree of 2^(span-1) nodes of its lowest
# level, halving per level (13 levels of a 10,000-pane window: two launches instead of 13)
_TREE_SPAN = 8
_TREE_THREADS = 1 << (_TREE_SPAN - 1)
_INT64_MIN = int(np.iinfo(np.int64).min)
_U64 = (1 << 64) - 1


def _grid(n: int) -> int:
    return max(1, min((n + _THREADS - 1) // _THREADS, 65_535))


def _fused_grid(n: int) -> int:
    # four rows per thread: the status totals cost one set of atomics per block
    return max(1, min((n + 4 * _THREADS - 1) // (4 * _THREADS), 65_535))


def _unbias(value: int) -> int:
    """The signed value the fused kernel stored as x ^ 2^63 (unsigned order = signed order)."""
    value ^= 1 << 63
    return value - (1 << 64) if value >= 1 << 63 else value


class GpuPaneState:
    """Flat CuPy arrays per state part, `[key_capacity x pane_capacity]` row-major, column c is
    pane `origin + c` (the CPU layout, so snapshots are interchangeable)."""

    def __init__(self, fields: tuple[StateField, ...], module_of) -> None:
        self.fields = fields
        self._module_of = module_of  # () -> (GeneratedKernels, RawModule)
        self.parts = codegen.state_parts(fields)
        self.key_capacity = 0
        self.pane_capacity = 0
        self.origin = 0
        cp = device.cupy()
        self.arrays = {p.member: cp.empty(0, p.numpy) for p in self.parts}
        self.lock = cp.zeros(0, cp.int32)

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
        shift = origin - self.origin
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
        del shift
        self.lock = cp.zeros(key_capacity * pane_capacity, cp.int32)
        self.key_capacity, self.pane_capacity, self.origin = key_capacity, pane_capacity, origin

    @property
    def nbytes(self) -> int:
        """Device bytes of the state arrays and their locks (at capacity)."""
        return sum(int(a.nbytes) for a in self.arrays.values()) + int(self.lock.nbytes)

    def struct_args(self, arrays: dict[str, object] | None = None) -> list:
        arrays = self.arrays if arrays is None else arrays
        return [arrays[p.member] for p in self.parts] + [self.lock]

    def merge(self, index, partials: dict[str, tuple]) -> None:
        cp = device.cupy()
        generated, module = self._module_of()
        rows = int(index.shape[0])
        if rows == 0:
            return
        values = [
            cp.ascontiguousarray(partials[p.field][p.part], dtype=p.numpy) for p in self.parts
        ]
        kernel = module.get_function(generated.names["merge"])
        kernel(
            (_grid(rows),),
            (_THREADS,),
            (
                cp.ascontiguousarray(index, dtype=cp.int64),
                *device.struct(values),
                *device.struct(self.struct_args()),
                np.int64(rows),
            ),
        )

    def _matrix(self, member: str):
        return self.arrays[member].reshape(self.key_capacity, self.pane_capacity)

    def occupied(self, n_keys: int, first_pane: int, end_pane: int) -> np.ndarray:
        first = max(first_pane - self.origin, 0)
        end = min(end_pane - self.origin, self.pane_capacity)
        result = np.zeros(max(end_pane - first_pane, 0), np.bool_)
        if end > first and n_keys:
            rows = self._matrix(self.parts[0].member)[:n_keys, first:end]
            hit = device.cupy().asnumpy((rows > 0).any(axis=0))
            result[first + self.origin - first_pane : end + self.origin - first_pane] = hit
        return result

    def windows(self, n_keys, runs, panes_per_slide, panes_per_window, windows_per_batch):
        """All keys' windows of all runs: the tree levels over the columns the runs touch (one
        launch per `_TREE_SPAN` levels, every key at once, all levels in one allocation per
        part), then one launch computes every (window, key). The levels' pointers, strides,
        bases, widths and the windows' first columns cross to the device in one copy."""
        cp = device.cupy()
        generated, module = self._module_of()
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
            return self._by_field(out)
        low = int(first_columns.min())
        high = int(first_columns.max()) + panes_per_window  # exclusive
        top = 0
        while (2 << top) <= panes_per_window:
            top += 1
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
                    first_columns,
                )
            )
        )
        parts = len(self.parts)
        level_pointers = meta[: count * parts]
        level_stride = meta[count * parts : count * parts + count]
        level_base = meta[count * parts + count : count * parts + 2 * count]
        level_width = meta[count * parts + 2 * count : count * parts + 3 * count]
        first_column = meta[count * parts + 3 * count :]
        tree = module.get_function(generated.names["tree_levels"])
        for from_level in range(0, top, _TREE_SPAN):
            to_level = min(from_level + _TREE_SPAN, top)
            first_root = bases[from_level + 1] >> (_TREE_SPAN - 1)
            last_root = (bases[from_level + 1] + widths[from_level + 1] - 1) >> (_TREE_SPAN - 1)
            roots = last_root - first_root + 1
            tree(
                (n_keys * roots,),
                (_TREE_THREADS,),
                (
                    level_pointers,
                    level_stride,
                    level_base,
                    level_width,
                    np.int32(from_level),
                    np.int32(to_level),
                    np.int32(_TREE_SPAN),
                    np.int64(first_root),
                    np.int64(roots),
                ),
            )
        # every (window, key) cell is written by the compute launch: no fill needed
        out = {p.member: cp.empty(total * n_keys, p.numpy) for p in self.parts}
        compute = module.get_function(generated.names["window_compute"])
        compute(
            (_grid(total * n_keys),),
            (_THREADS,),
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
        return self._by_field(out)

    def _by_field(self, arrays: dict[str, object]) -> dict[str, tuple]:
        result: dict[str, list] = {}
        for part in self.parts:
            result.setdefault(part.field, []).append(arrays[part.member])
        return {name: tuple(values) for name, values in result.items()}

    def to_arrays(self, n_keys: int, first_pane: int, end_pane: int) -> dict[str, np.ndarray]:
        cp = device.cupy()
        first, end = first_pane - self.origin, end_pane - self.origin
        return {
            f"{p.field}.{p.part}": cp.asnumpy(self._matrix(p.member)[:n_keys, first:end])
            for p in self.parts
        }

    def load_arrays(self, arrays: dict[str, np.ndarray], first_pane: int) -> None:
        cp = device.cupy()
        first = first_pane - self.origin
        for p in self.parts:
            block = arrays[f"{p.field}.{p.part}"]
            self._matrix(p.member)[: block.shape[0], first : first + block.shape[1]] = cp.asarray(
                block
            )


class GpuKeyMap:
    """Key columns -> dense slots in first-seen order, through a GPU hash table.

    Each key is `len(types) + 1` int64 words: the values (STRING: host-dictionary ids, NULL:
    0) and a NULL mask. The host keeps the words of every slot to decode results."""

    def __init__(self, types: tuple[SqlType, ...], strings: StringDictionary | None = None) -> None:
        cp = device.cupy()
        self.types = types
        self.words = len(types) + 1
        # STRING keys use the stager's dictionary when given: the ids the fused kernel reads
        # from the staged column are then the ids this table holds
        strings = strings if strings is not None else StringDictionary()
        self.dictionaries = [strings if t is SqlType.STRING else None for t in types]
        # the fused kernel builds key words from the staged columns: every type but floats
        # (whose host encoding here is a cast) gives the same word on the device
        self.device_keys = all(not t.is_floating for t in types)
        self.n_slots = 0
        self.capacity = 1024
        self.table_words = cp.zeros(self.capacity * self.words, cp.int64)
        self.table_slots = cp.full(self.capacity, -1, cp.int32)
        self.slot_capacity = 512
        self.slot_words_device = cp.zeros(self.slot_capacity * self.words, cp.int64)
        self.first_row = cp.full(self.slot_capacity, np.iinfo(np.int64).max, cp.int64)
        self.counter = cp.zeros(1, cp.int32)
        self.overflow = cp.zeros(1, cp.int32)
        self.host_words = np.zeros((0, self.words), np.int64)

    @property
    def nbytes(self) -> int:
        """Device bytes of the hash table and slot arrays, plus the host key words and
        string dictionaries."""
        device_arrays = (
            self.table_words,
            self.table_slots,
            self.slot_words_device,
            self.first_row,
            self.counter,
            self.overflow,
        )
        strings = sum(d.nbytes for d in {id(d): d for d in self.dictionaries if d}.values())
        return sum(int(a.nbytes) for a in device_arrays) + self.host_words.nbytes + strings

    def _module(self):
        return device.key_module(self.words)

    def encode(self, columns: list[pa.Array]) -> np.ndarray:
        """(words, rows) int64 host matrix of the key columns (values, then the NULL mask)."""
        length = len(columns[0]) if columns else 0
        words = np.zeros((self.words, length), np.int64)
        for index, (column, sql_type) in enumerate(zip(columns, self.types, strict=True)):
            if isinstance(column, pa.ChunkedArray):
                column = column.combine_chunks()
            if sql_type is SqlType.STRING:
                codes, is_null = self.dictionaries[index].encode(column)
                values, valid = np.asarray(codes, np.int64), ~is_null
            else:
                values, valid = to_values(column, np.dtype(np.int64))
            words[index] = np.where(valid, values, 0)
            words[-1] |= (~valid).astype(np.int64) << index
        return words

    def map_columns(self, columns: list[pa.Array], include=None):
        cp = device.cupy()
        words = self.encode(columns)
        if not columns and include is not None:  # no GROUP BY: one key, the NULL-mask word
            words = np.zeros((self.words, int(include.shape[0])), np.int64)
        rows = words.shape[1]
        if rows == 0:
            return cp.empty(0, cp.int32)
        include_device = None if include is None else cp.ascontiguousarray(include, cp.uint8)
        return self.map_words(cp.asarray(words.reshape(-1)), rows, include_device)

    def map_words(self, words_device, rows: int, include_device):
        """Slots of rows whose key words (word-major, `words x rows`) are on the device."""
        # at most `rows` new keys: keep the table at most half full and room for every slot
        while self.capacity < 2 * (self.n_slots + rows):
            self._grow_table()
        while self.slot_capacity < self.n_slots + rows:
            self._grow_slots()
        slots = self._launch_map_keys(words_device, rows, include_device, self.n_slots)
        count = int(self.counter.get()[0])
        if count > self.n_slots:
            self._renumber(count, slots)
        return slots

    def _renumber(self, count: int, slots) -> None:
        """Give the slots this batch created first-seen order (deterministic output order)."""
        cp = device.cupy()
        generated, module = self._module()
        old = self.n_slots
        first = cp.asnumpy(self.first_row[old:count])
        order = np.argsort(first, kind="stable")  # order[new position] = old slot - old
        remap = np.empty(count - old, np.int32)
        remap[order] = np.arange(old, count, dtype=np.int32)
        remap_device = cp.asarray(remap)
        kernel = module.get_function(generated.names["renumber"])
        for values in (slots, self.table_slots):
            n = int(values.shape[0])
            kernel((_grid(n),), (_THREADS,), (values, np.int64(n), remap_device, np.int32(old)))
        words = cp.asnumpy(self.slot_words_device[old * self.words : count * self.words]).reshape(
            count - old, self.words
        )[order]
        self.slot_words_device[old * self.words : count * self.words] = cp.asarray(words.ravel())
        self.first_row[old:count] = np.iinfo(np.int64).max
        self.host_words = np.concatenate([self.host_words, words])
        self.n_slots = count

    def _launch_map_keys(self, words_device, rows: int, include_device, first_slot: int):
        """One launch of the key table's insert/lookup kernel over `rows` keys; new keys get
        slots from `first_slot` on. Returns the device array of slots."""
        cp = device.cupy()
        generated, module = self._module()
        slots = cp.empty(rows, cp.int32)
        module.get_function(generated.names["map_keys"])(
            (_grid(rows),),
            (_THREADS,),
            (
                words_device,
                np.int64(rows),
                include_device,
                self.table_words,
                self.table_slots,
                np.int64(self.capacity),
                self.counter,
                self.slot_words_device,
                self.first_row,
                np.int64(self.slot_capacity),
                np.int32(first_slot),
                slots,
                self.overflow,
            ),
        )
        return slots

    def _grow_table(self) -> None:
        cp = device.cupy()
        self.capacity *= 4
        self.table_words = cp.zeros(self.capacity * self.words, cp.int64)
        self.table_slots = cp.full(self.capacity, -1, cp.int32)
        self.counter[...] = 0
        # re-insert every known key: they get their slots back in the same order
        if self.n_slots:
            n = self.n_slots
            known = self.n_slots
            self.n_slots = 0
            words = cp.asarray(np.ascontiguousarray(self.host_words[:known].T).reshape(-1))
            host_words = self.host_words
            self.host_words = np.zeros((0, self.words), np.int64)
            # every slot is new to the fresh table: first_row must start empty for all of them
            self.first_row[:n] = np.iinfo(np.int64).max
            slots = self._launch_map_keys(words, n, None, 0)
            self._renumber(int(self.counter.get()[0]), slots)
            assert np.array_equal(self.host_words, host_words)

    def _grow_slots(self) -> None:
        cp = device.cupy()
        capacity = self.slot_capacity * 4
        words = cp.zeros(capacity * self.words, cp.int64)
        words[: self.slot_capacity * self.words] = self.slot_words_device
        first = cp.full(capacity, np.iinfo(np.int64).max, cp.int64)
        first[: self.slot_capacity] = self.first_row
        self.slot_words_device, self.first_row, self.slot_capacity = words, first, capacity

    def decode(self, slots: np.ndarray) -> list[pa.Array]:
        # np.take along axis 0: 30x faster than fancy indexing of a 2-D array (17,000 slots)
        rows = np.take(self.host_words, np.asarray(slots, np.int64), axis=0)
        columns = []
        for index, sql_type in enumerate(self.types):
            is_null = ((rows[:, -1] >> index) & 1).astype(bool)
            values = rows[:, index]
            if sql_type is SqlType.STRING:
                columns.append(self.dictionaries[index].decode(values.astype(np.int32), is_null))
            else:
                arrow = sql_type.info.arrow
                array = array_with_nulls(values.astype(sql_type.info.numpy), is_null)
                columns.append(array.cast(arrow) if array.type != arrow else array)
        return columns

    def to_arrays(self, prefix: str) -> dict[str, np.ndarray]:
        """The CPU KeyTable's snapshot format, so either backend restores the other's."""
        from mangonel.runtime.cpu.keys import KeyTable

        return self._as_key_table(KeyTable).to_arrays(prefix)

    def _as_key_table(self, key_table_class):
        table = key_table_class(self.types)
        columns = self.decode(np.arange(self.n_slots))
        if self.n_slots:
            table.map_columns(columns, np.ones(self.n_slots, np.bool_))
        return table

    @classmethod
    def from_arrays(cls, types, arrays, prefix, strings=None) -> GpuKeyMap:
        from mangonel.runtime.cpu.keys import KeyTable

        table = KeyTable.from_arrays(types, arrays, prefix)
        key_map = cls(types, strings)
        if table.n_slots:
            key_map.map_columns(
                table.decode(np.arange(table.n_slots)), device.cupy().ones(table.n_slots, np.bool_)
            )
        return key_map


class GpuKernels:
    """CuPy kernels rendered per query; the driver is `runtime.operators.window`."""

    name = "gpu"

    def __init__(self) -> None:
        self._generated: dict[int, tuple] = {}
        self._fields_module: dict[tuple, tuple] = {}
        self.stager = device.Stager()
        cp = device.cupy()
        # the fused pass's status words and their pinned host mirror: one copy, one sync
        self._status = cp.zeros(_STATUS_WORDS, cp.uint64)
        self._status_host = cp.cuda.alloc_pinned_memory(8 * _STATUS_WORDS)
        self._status_view = np.frombuffer(self._status_host, np.uint64, _STATUS_WORDS)
        # batches whose copies `prefetch` started: (batch, lift, device inputs, chunk events,
        # chunk bounds); the driver's lookahead keeps at most two (batch k and k + 1)
        self._prefetched: list[tuple] = []
        # (key, pane) cells the last fused pass merged into (known keys x its pane span): the
        # next pass uses the shared-memory block table when they would fit it
        self._last_cells: int | None = None
        self.block_table_passes = 0  # fused passes that used the block table (tests read it)

    # -- compile --------------------------------------------------------------------------

    def module_for(self, lift: LiftExec, window: WindowAggregateExec | None = None):
        """The module of one query; `window` bakes pane/slide/size into the fused kernel (any
        module of the same lift serves the other kernels, so one without it is reused)."""
        found = self._generated.get(id(lift))
        if found is None or found[0] is not lift or (window is not None and found[1] is not window):
            generated = codegen.render_kernels(lift, window)
            found = (lift, window, generated, codegen.load_module(generated))
            self._generated[id(lift)] = found
            self._fields_module[lift.fields] = (generated, found[3])
        return found[2], found[3]

    def _module_for_fields(self, fields: tuple[StateField, ...]):
        found = self._fields_module.get(fields)
        if found is None:
            found = device.fields_module(fields)
            self._fields_module[fields] = found
        return found

    # -- WindowKernels --------------------------------------------------------------------

    def lift_tuples(self, lift: LiftExec, batch: pa.RecordBatch) -> LiftedTuples:
        cp = device.cupy()
        generated, module = self.module_for(lift)
        length = batch.num_rows
        columns = cpu.batch_columns(batch)
        inputs = self.stager.stage(
            [cpu._column(columns, c.name) for c in generated.columns], generated.columns
        )
        event_time = cp.empty(length, cp.int64)
        has_event_time = cp.empty(length, cp.uint8)
        contributes = cp.empty(length, cp.uint8)
        partials = {p.member: cp.empty(length, p.numpy) for p in generated.parts}
        literal_ids = self.stager.literal_ids(generated.string_literals)
        if length:
            module.get_function(generated.names["lift"])(
                (_grid(length),),
                (_THREADS,),
                (
                    *inputs,
                    event_time,
                    has_event_time,
                    contributes,
                    *[partials[p.member] for p in generated.parts],
                    literal_ids,
                    np.int64(length),
                ),
            )
        has_time = has_event_time.astype(cp.bool_)
        with_time = int(has_time.sum())
        max_event_time = (
            int(cp.where(has_time, event_time, np.iinfo(np.int64).min).max()) if with_time else None
        )
        by_field: dict[str, list] = {}
        for part in generated.parts:
            by_field.setdefault(part.field, []).append(partials[part.member])
        keys = [cpu._column(columns, key.name) for key in lift.keys]
        keys = [k.combine_chunks() if isinstance(k, pa.ChunkedArray) else k for k in keys]
        return LiftedTuples(
            length,
            event_time,
            has_time,
            contributes.astype(cp.bool_),
            keys,
            {name: tuple(v) for name, v in by_field.items()},
            max_event_time,
            length - with_time,
        )

    def pane_ids(self, lifted: LiftedTuples, pane_length: int):
        cp = device.cupy()
        return cp.where(lifted.has_event_time, lifted.event_time // pane_length, 0)

    def late_tuples(self, panes, include, pane_length, slide, size, watermark):
        last_window_end = (panes * pane_length) // slide * slide + size
        return include & (last_window_end <= watermark)

    def new_key_map(self, types: tuple[SqlType, ...]) -> GpuKeyMap:
        return GpuKeyMap(types, self.stager.strings)

    def key_map_from_arrays(self, types, arrays, prefix) -> GpuKeyMap:
        return GpuKeyMap.from_arrays(types, arrays, prefix, self.stager.strings)

    @staticmethod
    def _chunk_bounds(rows: int) -> list[tuple[int, int]]:
        chunks = -(-rows // _CHUNK_ROWS)
        return [(rows * c // chunks, rows * (c + 1) // chunks) for c in range(chunks)]

    def _stage_fused(self, generated, batch: pa.RecordBatch):
        """Copies of the fused kernel's columns, chunk after chunk, on the copy stream."""
        columns = cpu.batch_columns(batch)
        bounds = self._chunk_bounds(batch.num_rows)
        inputs, copied = self.stager.stage_chunks(
            [cpu._column(columns, c.name) for c in generated.columns], generated.columns, bounds
        )
        return inputs, copied, bounds

    def prefetch(self, lift: LiftExec, window: WindowAggregateExec, batch: pa.RecordBatch) -> None:
        """Queue the host-to-device copies of the next batch's columns now (copy stream), so
        they run while the current batch is merged and its windows fire; `lift_merge` of the
        same batch object then waits only for those copies' events. Count windows and empty
        batches take no fused pass, so nothing is copied for them."""
        if window.window.kind is ph.WindowKind.COUNT or batch.num_rows == 0:
            return
        generated, _ = self.module_for(lift, window)
        staged = self._stage_fused(generated, batch)
        self._prefetched = [*self._prefetched[-1:], (batch, lift, *staged)]

    def _take_prefetched(self, lift: LiftExec, batch: pa.RecordBatch):
        for index, entry in enumerate(self._prefetched):
            if entry[0] is batch and entry[1] is lift:
                # entries before it were never processed (stale): drop them with it
                del self._prefetched[: index + 1]
                return entry[2:]
        return None

    def lift_merge(
        self,
        lift: LiftExec,
        window: WindowAggregateExec,
        batch: pa.RecordBatch,
        keys,
        target: PaneTarget | None,
        watermark: int | None,
    ) -> FusedMerge:
        """One batch in one launch per 2^18 rows: staged columns -> fused lift + key probe +
        pane + lateness + block-combined merge into the target segment (the copy of chunk
        c + 1 overlaps the launch of chunk c); one pinned read of the status (late, NULL
        times, max event time, merged pane range, rows left) and one sync.

        Rows it leaves (a key the table does not hold yet, a pane outside the target; in a
        steady stream only the first batch and new keys) are lifted again by `lift_tuples`
        and returned as the rest for the driver's split path."""
        rows = batch.num_rows
        staged = self._take_prefetched(lift, batch)
        usable = (
            target is not None
            and isinstance(keys, GpuKeyMap)
            and keys.device_keys
            and window.window.kind is not ph.WindowKind.COUNT
            and rows > 0
        )
        if not usable:
            lifted = self.lift_tuples(lift, batch)
            return FusedMerge.unplaced(lifted)
        cp = device.cupy()
        generated, module = self.module_for(lift, window)
        inputs, copied, bounds = staged or self._stage_fused(generated, batch)
        chunks = len(bounds)
        stream = cp.cuda.get_current_stream()
        status = self._status
        cp.cuda.runtime.memsetAsync(status.data.ptr, 0, 8 * _STATUS_WORDS, stream.ptr)
        decided = cp.empty(rows, cp.uint8)
        state = target.state
        fused = module.get_function(generated.names["fused"])
        literal_ids = self.stager.literal_ids(generated.string_literals)
        # few cells (few keys, out of order): rows combine per block in shared memory first;
        # many cells would overflow the table and only add work
        use_block_table = np.int32(
            self._last_cells is not None
            and 0 < self._last_cells <= generated.block_cells * _BLOCK_TABLE_LOAD
        )
        self.block_table_passes += int(use_block_table)
        # one launch per chunk, each after its chunk's copy: chunk c merges while chunk c + 1
        # crosses PCIe
        for (first, end), event in zip(bounds, copied, strict=True):
            stream.wait_event(event)
            chunk = (
                inputs
                if chunks == 1
                else [None if array is None else array[first:end] for array in inputs]
            )
            fused(
                (_fused_grid(end - first),),
                (_THREADS,),
                (
                    *chunk,
                    keys.table_words,
                    keys.table_slots,
                    np.int64(keys.capacity),
                    np.int32(target.known_keys),
                    *state.struct_args(),
                    literal_ids,
                    np.int64(end - first),
                    np.int64(state.pane_capacity),
                    np.int64(state.origin),
                    np.int64(target.first_pane),
                    np.int64(target.end_pane),
                    np.int64(_INT64_MIN if watermark is None else watermark),
                    use_block_table,
                    decided[first:end],
                    status,
                ),
            )
        status.data.copy_to_host_async(self._status_host.ptr, 8 * _STATUS_WORDS, stream)
        stream.synchronize()
        late, nulls, max_ts, low, high, undecided = (int(v) for v in self._status_view)
        max_event_time = _unbias(max_ts) if nulls < rows else None
        first_pane = _unbias(~low & _U64) if high else None
        last_pane = _unbias(high) if high else None
        self._last_cells = (
            None if first_pane is None else target.known_keys * (last_pane - first_pane + 1)
        )
        if not undecided:
            return FusedMerge(rows, late, nulls, max_event_time, first_pane, last_pane, None, None)
        lifted = self.lift_tuples(lift, batch)
        rest_include = lifted.contributes & (decided == 0)
        return FusedMerge(
            rows, late, nulls, max_event_time, first_pane, last_pane, lifted, rest_include
        )

    def new_pane_state(self, fields: tuple[StateField, ...]) -> GpuPaneState:
        return GpuPaneState(fields, lambda: self._module_for_fields(fields))

    def flat_index(self, slots, panes, state: GpuPaneState):
        cp = device.cupy()
        slots64 = slots.astype(cp.int64)
        return cp.where(slots64 >= 0, slots64 * state.pane_capacity + (panes - state.origin), -1)

    def preaggregate(self, slots, panes, partials, fields):
        # stage 1 of the split (Spark) form runs on the host: its output crosses processes
        host = {name: tuple(self.to_host(v) for v in values) for name, values in partials.items()}
        return cpu.CpuKernels().preaggregate(
            self.to_host(slots).astype(np.int64), self.to_host(panes), host, fields
        )

    def segment_windows(
        self, fields, leaves, base, windows, panes_per_slide, panes_per_window, windows_per_batch
    ):
        # count windows: the per-key tuple segments are small and irregular; the CPU tree
        # answers them (documented fallback), results moved back to the device
        host = {name: tuple(self.to_host(v) for v in values) for name, values in leaves.items()}
        result = cpu.CpuKernels().segment_windows(
            fields, host, base, windows, panes_per_slide, panes_per_window, windows_per_batch
        )
        return {name: tuple(self.from_host(v) for v in values) for name, values in result.items()}

    def to_host(self, array) -> np.ndarray:
        cp = device.cupy()
        if isinstance(array, cp.ndarray):
            return cp.asnumpy(array)
        return np.asarray(array)

    def from_host(self, array: np.ndarray):
        return device.cupy().asarray(array)


__all__ = ["GpuKernels", "GpuKeyMap", "GpuPaneState"]
