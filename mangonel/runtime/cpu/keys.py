"""Grouping keys -> dense slots, on the CPU.

Every key column is encoded as int64 codes (integers and timestamps as themselves, booleans as
0/1, floats by their bit pattern, strings through a host dictionary to int ids assigned in
first-seen order) plus one NULL bitmask column, so one row of a `[n, columns + 1]` int64 matrix
is one key. A numba open-addressing hash table maps those rows to dense slots 0, 1, 2, ... in
first-seen order; a NULL key is a key like any other (its own group, as in SQL GROUP BY).
"""

from __future__ import annotations

import numba
import numpy as np
import pyarrow as pa

from mangonel.catalog.types import SqlType
from mangonel.runtime.host.keys import (
    StringDictionary,
    decode_key_rows,
    encode_column,
    encode_key_rows,
    key_rows_from_arrays,
    key_rows_to_arrays,
    new_dictionaries,
)

_EMPTY = -1
_NO_DIRECT = np.zeros(0, np.int64)


@numba.njit(cache=True, inline="always")
def _mix(h: np.uint64, value: np.int64) -> np.uint64:
    # splitmix64 finaliser over the running hash: cheap and good enough for open addressing
    x = h ^ np.uint64(value)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@numba.njit(cache=True)
def _hash_key(rows: np.ndarray, i: int) -> np.uint64:
    """Hash of key i of a column-major `[width, n]` batch matrix."""
    h = np.uint64(0x9E3779B97F4A7C15)
    for c in range(rows.shape[0]):
        h = _mix(h, rows[c, i])
    return h


@numba.njit(cache=True)
def _hash_slot(slot_rows: np.ndarray, slot: int) -> np.uint64:
    """The same hash, of a stored key (row-major `[slots, width]`)."""
    h = np.uint64(0x9E3779B97F4A7C15)
    for c in range(slot_rows.shape[1]):
        h = _mix(h, slot_rows[slot, c])
    return h


@numba.njit(cache=True)
def _map_rows(rows, include, start, table, slot_rows, n_slots, out, direct, base):
    """Map keys rows[:, start:] to slots, inserting new keys; stop early when slot_rows is full.

    Returns (next key to map, number of slots). `include[i] == False` keys get slot -1.
    `direct` (one-column keys; empty otherwise): the slot of each non-NULL key code
    `base + i` met so far (-1: not yet): a hit costs one load from a small array; a miss takes
    the hash path and records the slot for the next rows.
    """
    mask = table.shape[0] - 1
    width = rows.shape[0]
    span = direct.shape[0]
    for i in range(start, rows.shape[1]):
        if not include[i]:
            out[i] = -1
            continue
        at = rows[0, i] - base
        cached = span > 0 and rows[1, i] == 0 and 0 <= at < span
        if cached and direct[at] >= 0:
            out[i] = direct[at]
            continue
        pos = np.int64(_hash_key(rows, i) & np.uint64(mask))
        while True:
            slot = table[pos]
            if slot == _EMPTY:
                if n_slots == slot_rows.shape[0]:
                    return i, n_slots
                table[pos] = n_slots
                for c in range(width):
                    slot_rows[n_slots, c] = rows[c, i]
                slot = n_slots
                n_slots += 1
                break
            same = True
            for c in range(width):
                if slot_rows[slot, c] != rows[c, i]:
                    same = False
                    break
            if same:
                break
            pos = (pos + 1) & mask
        out[i] = slot
        if cached:
            direct[at] = slot
    return rows.shape[1], n_slots


def _code_range(rows, include):
    """The lowest and highest code of the included non-NULL one-column keys (high < low:
    none): `_codes_range` over the key rows' code word, their NULL word beside it."""
    return _codes_range(rows[0], include, rows[1])


@numba.njit(cache=True)
def _lookup_rows(rows, include, table, slot_rows, out):
    """Slots of known keys, -1 for keys the table does not hold and where include is False
    (the fused pass: it never inserts, so new keys keep their first-seen numbering)."""
    mask = table.shape[0] - 1
    width = rows.shape[0]
    for i in range(rows.shape[1]):
        out[i] = -1
        if not include[i]:
            continue
        pos = np.int64(_hash_key(rows, i) & np.uint64(mask))
        while True:
            slot = table[pos]
            if slot == _EMPTY:
                break
            same = True
            for c in range(width):
                if slot_rows[slot, c] != rows[c, i]:
                    same = False
                    break
            if same:
                out[i] = slot
                break
            pos = (pos + 1) & mask


@numba.njit(cache=True)
def _codes_range(codes, include, nulls=None):
    """The lowest and highest included code (high < low: none); with `nulls`, only where
    nulls[i] == 0."""
    low, high = np.int64(1), np.int64(0)
    met = False
    for i in range(codes.shape[0]):
        if include[i] and (nulls is None or nulls[i] == 0):
            code = codes[i]
            if not met:
                low = high = code
                met = True
            elif code < low:
                low = code
            elif code > high:
                high = code
    return low, high


@numba.njit(cache=True)
def _lookup_codes(codes, include, table, slot_rows, out, direct, base):
    """`_lookup_rows` of one-column keys without NULLs given as their codes (the key row
    [code, 0]: the same hash and comparison, no key matrix), through `direct` (`_map_rows`'
    array: a key's slot where met, -1 not yet; empty: none) first; a key found by the hash
    path is recorded there for the next rows."""
    mask = table.shape[0] - 1
    span = direct.shape[0]
    for i in range(codes.shape[0]):
        out[i] = -1
        if not include[i]:
            continue
        code = codes[i]
        at = code - base
        cached = 0 <= at < span
        if cached and direct[at] >= 0:
            out[i] = direct[at]
            continue
        h = _mix(_mix(np.uint64(0x9E3779B97F4A7C15), code), np.int64(0))
        pos = np.int64(h & np.uint64(mask))
        while True:
            slot = table[pos]
            if slot == _EMPTY:
                break
            if slot_rows[slot, 0] == code and slot_rows[slot, 1] == 0:
                out[i] = slot
                if cached:
                    direct[at] = slot
                break
            pos = (pos + 1) & mask


@numba.njit(cache=True)
def _rehash(slot_rows, n_slots, table):
    mask = table.shape[0] - 1
    for slot in range(n_slots):
        pos = np.int64(_hash_slot(slot_rows, slot) & np.uint64(mask))
        while table[pos] != _EMPTY:
            pos = (pos + 1) & mask
        table[pos] = slot


@numba.njit(cache=True)
def first_rows(slots: np.ndarray, n_slots: int) -> np.ndarray:
    """The first row index of each slot (slots numbered in first-seen order)."""
    first = np.full(n_slots, -1, np.int64)
    for i in range(slots.shape[0]):
        slot = slots[i]
        if slot >= 0 and first[slot] == -1:
            first[slot] = i
    return first


# one-column keys whose codes span at most this many values get the direct array (8 MiB)
DIRECT_SPAN = 1 << 20


class KeyTable:
    """Key rows -> dense slots in first-seen order. `width` = number of key columns.

    One-column keys (integers, booleans, strings by dictionary id) whose codes fall in a
    range of at most DIRECT_SPAN values also keep `direct`, the slot of each code in that
    range: the hash probe costs 18-39 ns a row (measured on the VM and the H200 host,
    2026-11-26), most of a join batch's host time; a direct load is a few. It is derived
    from the table (rebuilt lazily, never snapshotted)."""

    def __init__(self, types: tuple[SqlType, ...]) -> None:
        self.types = types
        self.width = len(types) + 1  # + the NULL bitmask
        self.dictionaries: list[StringDictionary | None] = new_dictionaries(types)
        self.slot_rows = np.zeros((64, self.width), np.int64)
        self.table = np.full(128, _EMPTY, np.int64)
        self.n_slots = 0
        self.direct = np.zeros(0, np.int64)
        self.direct_base = 0

    @property
    def nbytes(self) -> int:
        """Bytes the table holds: key rows, hash table and direct array at capacity, string
        dictionaries."""
        strings = sum(d.nbytes for d in self.dictionaries if d is not None)
        return self.slot_rows.nbytes + self.table.nbytes + self.direct.nbytes + strings

    def _cover(self, rows: np.ndarray, include: np.ndarray) -> None:
        """Widen `direct` to the batch's non-NULL key codes where the union stays within
        DIRECT_SPAN (new places -1: filled as their keys are met)."""
        self._widen(*(int(x) for x in _code_range(rows, include)))

    def _widen(self, low: int, high: int) -> None:
        """`_cover` of the codes low .. high (high < low: none)."""
        if high < low:
            return
        if len(self.direct):
            low = min(low, self.direct_base)
            high = max(high, self.direct_base + len(self.direct) - 1)
            if low == self.direct_base and high - low + 1 == len(self.direct):
                return
        if high - low + 1 > DIRECT_SPAN:
            return
        direct = np.full(high - low + 1, -1, np.int64)
        if len(self.direct):
            at = self.direct_base - low
            direct[at : at + len(self.direct)] = self.direct
        self.direct, self.direct_base = direct, low

    def encode(self, columns: list[pa.Array], length: int) -> np.ndarray:
        """The column-major `[width, length]` int64 key matrix of a batch (no columns: one
        group). Column-major so each key column is one contiguous copy."""
        return encode_key_rows(columns, self.types, self.dictionaries, length)

    def map_rows(self, rows: np.ndarray, include: np.ndarray | None = None) -> np.ndarray:
        """Slots of the keys of a `[width, n]` matrix (-1 where include is False); new keys
        get new slots."""
        if include is None:
            include = np.ones(rows.shape[1], np.bool_)
        out = np.empty(rows.shape[1], np.int64)
        direct = self.width == 2 and rows.shape[1] > 0
        if direct:
            self._cover(rows, include)
            direct = len(self.direct) > 0
        start = 0
        while True:
            start, self.n_slots = _map_rows(
                rows,
                include,
                start,
                self.table,
                self.slot_rows,
                self.n_slots,
                out,
                self.direct if direct else _NO_DIRECT,
                self.direct_base,
            )
            if start >= rows.shape[1]:
                return out
            self._grow()

    def map_columns(
        self, columns: list[pa.Array], include: np.ndarray, words: None = None
    ) -> np.ndarray:
        """`map_rows` of the encoded columns (`words`: the CPU lift builds none)."""
        assert words is None, "the CPU lift builds no key words"
        return self.map_rows(self.encode(columns, len(include)), include)

    def lookup_columns(self, columns: list[pa.Array], include: np.ndarray) -> np.ndarray:
        """Slots of known keys, -1 for new keys and where include is False; inserts nothing
        (string values new to a dictionary do get ids: ids are not slots)."""
        out = np.empty(len(include), np.int64)
        if self.width == 2 and self.dictionaries[0] is None:
            # one non-string column without NULLs: its codes are its values (a view for
            # int64), read in place; the key matrix was a fresh 16 MB a 1 M-row batch,
            # faulted in page by page beside a holistic operator's panes
            codes, is_null = encode_column(columns[0], self.types[0])
            if is_null is None:
                codes = np.ascontiguousarray(codes)
                if len(codes):
                    self._widen(*(int(x) for x in _codes_range(codes, include)))
                table, rows = self.table, self.slot_rows
                _lookup_codes(codes, include, table, rows, out, self.direct, self.direct_base)
                return out
        _lookup_rows(self.encode(columns, len(include)), include, self.table, self.slot_rows, out)
        return out

    def _grow(self) -> None:
        slot_rows = np.zeros((2 * len(self.slot_rows), self.width), np.int64)
        slot_rows[: self.n_slots] = self.slot_rows[: self.n_slots]
        self.slot_rows = slot_rows
        self.table = np.full(2 * len(slot_rows), _EMPTY, np.int64)
        _rehash(self.slot_rows, self.n_slots, self.table)

    def decode(self, slots: np.ndarray) -> list[pa.Array]:
        """The key columns (Arrow, declared types) of the given slots."""
        # np.take along axis 0: 30x faster than fancy indexing of a 2-D array (17,000 slots)
        rows = np.take(self.slot_rows, np.asarray(slots, np.int64), axis=0)
        return decode_key_rows(rows, self.types, self.dictionaries)

    # -- snapshot (format: mangonel.runtime.host.keys) -------------------------------------

    def to_arrays(self, prefix: str) -> dict[str, np.ndarray]:
        return key_rows_to_arrays(self.slot_rows[: self.n_slots].copy(), self.dictionaries, prefix)

    @classmethod
    def from_arrays(
        cls, types: tuple[SqlType, ...], arrays: dict[str, np.ndarray], prefix: str
    ) -> KeyTable:
        table = cls(types)
        rows, table.dictionaries = key_rows_from_arrays(types, arrays, prefix)
        capacity = 64
        while capacity < len(rows):
            capacity *= 2
        table.slot_rows = np.zeros((capacity, table.width), np.int64)
        table.slot_rows[: len(rows)] = rows
        table.n_slots = len(rows)
        table.table = np.full(2 * capacity, _EMPTY, np.int64)
        _rehash(table.slot_rows, table.n_slots, table.table)
        return table
