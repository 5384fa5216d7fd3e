"""Key columns as int64 words on the host: string dictionaries, the per-column codes, and the
snapshot format of a key table. The CPU key table (`runtime.cpu.keys.KeyTable`) keys with
these; it and the GPU key map (`runtime.gpu.keys.GpuKeyMap`, whose STRING ids come from one
dictionary shared with its stager) both write and read snapshots with them, so either backend
restores the other's.

A key row is `len(types) + 1` int64 words: one code per key column (STRING: the id in that
column's dictionary; floating types: the float64 bits; others: the value as int64; NULL: 0)
and a NULL bitmask (bit i: column i is NULL).
"""

from __future__ import annotations

import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mangonel.catalog.types import SqlType
from mangonel.runtime.host.arrays import array_with_nulls


class StringDictionary:
    """Host dictionary string -> int id (first-seen order); ids travel instead of strings."""

    def __init__(self, values: list[str] | None = None) -> None:
        self.values: list[str] = list(values or [])
        self.ids: dict[str, int] = {v: i for i, v in enumerate(self.values)}
        # each string and its id object (ints above 256 are objects of their own)
        self._string_bytes = sum(sys.getsizeof(v) + sys.getsizeof(i) for v, i in self.ids.items())

    @property
    def nbytes(self) -> int:
        """Bytes of the strings, their ids and the list and dict that hold them."""
        return self._string_bytes + sys.getsizeof(self.values) + sys.getsizeof(self.ids)

    def encode(self, column: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """(ids, is_null) of a string or dictionary column; one Python step per distinct value."""
        if not pa.types.is_dictionary(column.type):
            column = pc.dictionary_encode(column)
        dictionary = column.dictionary.to_pylist()
        lookup = np.empty(len(dictionary), np.int64)
        for position, value in enumerate(dictionary):
            found = self.ids.get(value)
            if found is None:
                found = len(self.values)
                self.ids[value] = found
                self.values.append(value)
                self._string_bytes += sys.getsizeof(value) + sys.getsizeof(found)
            lookup[position] = found
        indices = column.indices
        is_null = _null_mask(indices)
        local = np.asarray(indices.fill_null(0)).astype(np.int64, copy=False)
        ids = lookup[local] if len(lookup) else np.zeros(len(local), np.int64)
        return np.where(is_null, 0, ids), is_null

    def decode(self, ids: np.ndarray, is_null: np.ndarray) -> pa.Array:
        values = pa.array(self.values, pa.string())
        positions = np.where(is_null, 0, ids)  # typed below: inferring costs ~0.3 us a row
        taken = (
            values.take(pa.array(positions, type=pa.from_numpy_dtype(positions.dtype)))
            if len(self.values)
            else None
        )
        if taken is None:
            return pa.nulls(len(ids), pa.string())
        return pc.if_else(pa.array(is_null, pa.bool_()), pa.scalar(None, pa.string()), taken)


def _null_mask(column: pa.Array) -> np.ndarray:
    if column.null_count == 0:
        return np.zeros(len(column), np.bool_)
    return np.asarray(column.is_null())


def encode_column(column: pa.Array, sql_type: SqlType) -> tuple[np.ndarray, np.ndarray | None]:
    """(int64 codes, is_null or None when no NULLs) of a non-string key column."""
    is_null = _null_mask(column) if column.null_count else None
    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.timestamp("us", tz=column.type.tz)).cast(pa.int64())
    elif pa.types.is_boolean(column.type):
        column = column.cast(pa.int8())
    filled = np.asarray(column.fill_null(0) if column.null_count else column)
    if filled.dtype.kind == "f":
        codes = filled.astype(np.float64).view(np.int64)
    else:
        codes = filled.astype(np.int64, copy=False)
    if is_null is None:
        return codes, None
    return np.where(is_null, 0, codes), is_null


def decode_column(codes: np.ndarray, is_null: np.ndarray, sql_type: SqlType) -> pa.Array:
    """The Arrow column of `sql_type` whose key codes are `codes`."""
    arrow_type = sql_type.info.arrow
    if sql_type.is_floating:
        values = array_with_nulls(codes.view(np.float64), is_null)
    else:
        values = array_with_nulls(codes.astype(np.int64, copy=False), is_null)
    return values.cast(arrow_type)


def encode_key_rows(
    columns: list[pa.Array],
    types: tuple[SqlType, ...],
    dictionaries: list[StringDictionary | None],
    length: int,
) -> np.ndarray:
    """The column-major `[len(types) + 1, length]` int64 key matrix of a batch (no columns:
    one group). Column-major so each key column is one contiguous copy. STRING columns add
    their new values to their dictionary."""
    rows = np.empty((len(types) + 1, length), np.int64)
    nulls = rows[-1]
    nulls[:] = 0
    for position, (column, sql_type) in enumerate(zip(columns, types, strict=True)):
        dictionary = dictionaries[position]
        if dictionary is not None:
            codes, is_null = dictionary.encode(column)
        else:
            codes, is_null = encode_column(column, sql_type)
        rows[position] = codes
        if is_null is not None:
            nulls |= is_null.astype(np.int64) << position
    return rows


def decode_key_rows(
    rows: np.ndarray, types: tuple[SqlType, ...], dictionaries: list[StringDictionary | None]
) -> list[pa.Array]:
    """The key columns (Arrow, declared types) of row-major key rows `[n, len(types) + 1]`."""
    columns = []
    for position, sql_type in enumerate(types):
        is_null = ((rows[:, -1] >> position) & 1).astype(np.bool_)
        dictionary = dictionaries[position]
        if dictionary is not None:
            columns.append(dictionary.decode(rows[:, position], is_null))
        else:
            columns.append(decode_column(rows[:, position], is_null, sql_type))
    return columns


def new_dictionaries(types: tuple[SqlType, ...]) -> list[StringDictionary | None]:
    """One empty dictionary per STRING key column (None for the others)."""
    return [StringDictionary() if t is SqlType.STRING else None for t in types]


def key_rows_to_arrays(
    rows: np.ndarray, dictionaries: list[StringDictionary | None], prefix: str
) -> dict[str, np.ndarray]:
    """The snapshot arrays of a key table: its row-major key rows, each dictionary's strings."""
    arrays = {f"{prefix}rows": rows}
    for position, dictionary in enumerate(dictionaries):
        if dictionary is not None:
            data, offsets = _pack_strings(dictionary.values)
            arrays[f"{prefix}dict{position}_data"] = data
            arrays[f"{prefix}dict{position}_offsets"] = offsets
    return arrays


def key_rows_from_arrays(
    types: tuple[SqlType, ...], arrays: dict[str, np.ndarray], prefix: str
) -> tuple[np.ndarray, list[StringDictionary | None]]:
    """(row-major key rows, dictionaries) of `key_rows_to_arrays`'s snapshot arrays."""
    dictionaries: list[StringDictionary | None] = []
    for position, sql_type in enumerate(types):
        if sql_type is SqlType.STRING:
            values = _unpack_strings(
                arrays[f"{prefix}dict{position}_data"], arrays[f"{prefix}dict{position}_offsets"]
            )
            dictionaries.append(StringDictionary(values))
        else:
            dictionaries.append(None)
    return arrays[f"{prefix}rows"], dictionaries


def _pack_strings(values: list[str]) -> tuple[np.ndarray, np.ndarray]:
    encoded = [v.encode("utf-8") for v in values]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    offsets[1:] = np.cumsum([len(e) for e in encoded]) if encoded else []
    return np.frombuffer(b"".join(encoded), np.uint8).copy(), offsets


def _unpack_strings(data: np.ndarray, offsets: np.ndarray) -> list[str]:
    raw = data.tobytes()
    return [raw[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(len(offsets) - 1)]
