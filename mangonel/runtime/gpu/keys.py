"""Grouping keys -> dense slots on the GPU, through an open-addressing hash table."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mangonel.catalog.types import SqlType
from mangonel.compiler.options import GpuOptions
from mangonel.runtime.gpu import device
from mangonel.runtime.gpu.compile import CompileContext
from mangonel.runtime.gpu.host_loops import parallel_gather
from mangonel.runtime.host.arrays import array_with_nulls, to_values
from mangonel.runtime.host.keys import (
    StringDictionary,
    decode_key_rows,
    encode_key_rows,
    key_rows_from_arrays,
    key_rows_to_arrays,
    new_dictionaries,
)


class GpuKeyMap:
    """Key columns -> dense slots in first-seen order, through a GPU hash table.

    Each key is `len(types) + 1` int64 words: the values (STRING: host-dictionary ids, NULL:
    0) and a NULL mask. The host keeps the words of every slot to decode results."""

    def __init__(
        self,
        types: tuple[SqlType, ...],
        strings: StringDictionary,
        compiler: CompileContext,
        options: GpuOptions,
    ) -> None:
        cp = device.cupy()
        self.types = types
        self.words = len(types) + 1
        self.compiler = compiler
        self.options = options
        # STRING keys use the dictionary of the kernels' stager (`strings`, owned by the
        # `GpuKernels`): the ids the fused kernel reads from the staged column are then the
        # ids this table holds
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
        return self.compiler.key_module(self.words)

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
                if not column.null_count:  # the common case: one pass, no NULL mask bits
                    words[index] = values
                    continue
            words[index] = np.where(valid, values, 0)
            words[-1] |= (~valid).astype(np.int64) << index
        return words

    def map_columns(self, columns: list[pa.Array], include=None, words=None):
        """Slots of the rows' keys: their words encoded on the host and copied up, or, given
        `words` (the device words the lift built, `GpuKernels.lift_tuples(key_words=True)`,
        word-major), mapped where they are: no host pass over the key columns, no copy."""
        cp = device.cupy()
        if words is not None:
            rows = int(words.shape[0]) // self.words
            if rows == 0:
                return cp.empty(0, cp.int32)
            include_device = None if include is None else cp.ascontiguousarray(include, cp.uint8)
            return self.map_words(words, rows, include_device)
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
            threads = self.options.threads
            kernel(
                (device.grid(n, threads),),
                (threads,),
                (values, np.int64(n), remap_device, np.int32(old)),
            )
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
        threads = self.options.threads
        module.get_function(generated.names["map_keys"])(
            (device.grid(rows, threads),),
            (threads,),
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
        # one parallel gather per key word (numba, GIL released): an output-heavy firing
        # decodes millions of slots, and np.take of whole rows plus the NULL word's shifts
        # took 0.2 s of 0.53 s for 17 M result rows on the H100 host
        slots = np.asarray(slots, np.int64)
        nulls = parallel_gather(self.host_words[:, -1], slots) if self.has_null_keys else None
        values = [parallel_gather(self.host_words[:, i], slots) for i in range(len(self.types))]
        return self.columns_of_words(values, nulls)

    @property
    def has_null_keys(self) -> bool:
        """Whether a known key has a NULL column (its NULL-mask word is not 0)."""
        return bool(self.host_words[:, -1].any())

    def columns_of_words(
        self, values: list[np.ndarray], nulls: np.ndarray | None
    ) -> list[pa.Array]:
        """Key columns (declared Arrow types) of rows' key words: `values[i]` the rows' word
        of column i (int64, STRING: dictionary ids), `nulls` their NULL-mask words (None: no
        NULL). The words of a firing's rows come from `decode`'s gather, or straight from
        the device where the finalize kernel wrote them beside the results
        (`GpuPaneState.fire(keys=)`): then a BIGINT key column is a view, no host pass."""
        columns = []
        for index, sql_type in enumerate(self.types):
            is_null = ((nulls >> index) & 1).astype(bool) if nulls is not None else None
            words = values[index]
            if sql_type is SqlType.STRING:
                if is_null is None:
                    is_null = np.zeros(len(words), np.bool_)
                columns.append(self.dictionaries[index].decode(words.astype(np.int32), is_null))
            else:
                arrow = sql_type.info.arrow
                array = array_with_nulls(words.astype(sql_type.info.numpy, copy=False), is_null)
                columns.append(array.cast(arrow) if array.type != arrow else array)
        return columns

    def to_arrays(self, prefix: str) -> dict[str, np.ndarray]:
        """The CPU key table's snapshot format (`host.keys`), so either backend restores the
        other's: key rows re-encoded with one dictionary per STRING column, slots in order."""
        dictionaries = new_dictionaries(self.types)
        columns = self.decode(np.arange(self.n_slots))
        rows = encode_key_rows(columns, self.types, dictionaries, self.n_slots)
        return key_rows_to_arrays(np.ascontiguousarray(rows.T), dictionaries, prefix)

    @classmethod
    def from_arrays(
        cls,
        types: tuple[SqlType, ...],
        arrays: dict[str, np.ndarray],
        prefix: str,
        strings: StringDictionary,
        compiler: CompileContext,
        options: GpuOptions,
    ) -> GpuKeyMap:
        rows, dictionaries = key_rows_from_arrays(types, arrays, prefix)
        key_map = cls(types, strings, compiler, options)
        if len(rows):
            key_map.map_columns(
                decode_key_rows(rows, types, dictionaries), device.cupy().ones(len(rows), np.bool_)
            )
        return key_map


__all__ = ["GpuKeyMap"]
