"""Arrow <-> NumPy conversions on the host, shared by the drivers and every backend."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa


def batch_columns(batch: pa.RecordBatch) -> dict[str, pa.Array]:
    """Columns by name; also by lower-case name (columns resolve case-insensitively)."""
    columns: dict[str, pa.Array] = {}
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        columns[name] = column
        columns.setdefault(name.lower(), column)
    return columns


def column(columns: dict[str, pa.Array], name: str) -> pa.Array:
    """The column `name` of `batch_columns`'s mapping; a DataError naming it when absent."""
    found = columns.get(name, columns.get(name.lower()))
    if found is None:
        from mangonel.errors import DataError

        raise DataError(f"input batch has no column {name!r} (has: {sorted(columns)})")
    return found


def to_values(array: pa.Array, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """(values as dtype with NULLs as 0, is_valid) of an Arrow array."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_timestamp(array.type):
        array = array.cast(pa.timestamp("us", tz=array.type.tz)).cast(pa.int64())
    elif pa.types.is_boolean(array.type):
        array = array.cast(pa.int8())
    elif not (pa.types.is_integer(array.type) or pa.types.is_floating(array.type)):
        # a STRING (or other non-numeric) argument: only COUNT takes one, and it reads the
        # validity alone, so the values are 0
        return np.zeros(len(array), dtype), np.asarray(array.is_valid())
    if array.null_count:
        valid = np.asarray(array.is_valid())
        array = array.fill_null(0)
    else:
        valid = np.ones(len(array), np.bool_)
    return np.asarray(array).astype(dtype, copy=False), valid


def to_mask(array: pa.Array) -> np.ndarray:
    """True where a boolean predicate is TRUE (NULL counts as FALSE, as in WHERE/HAVING)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if isinstance(array, pa.Scalar):
        raise TypeError("predicate evaluated to a scalar; pass length")
    if array.null_count:
        array = array.fill_null(False)
    return np.asarray(array, dtype=np.bool_)


def array_with_nulls(values: np.ndarray, is_null: np.ndarray | None = None) -> pa.Array:
    """An Arrow array of a numpy array with NULLs where is_null (values there are kept but
    hidden). Builds the validity bitmap with numpy: `pa.array(values, mask=...)` walks the
    mask in Python-speed steps (about 1 us per element), which dominated result output."""
    values = np.ascontiguousarray(values)
    if is_null is None or not is_null.any():
        # the type given: without it pyarrow 26 spends about 0.3 us per int64 element
        # inferring one (5.6 ms for 17,000 result keys)
        return pa.array(values, type=pa.from_numpy_dtype(values.dtype))
    validity = np.packbits(~np.asarray(is_null, np.bool_), bitorder="little")
    return pa.Array.from_buffers(
        pa.from_numpy_dtype(values.dtype),
        len(values),
        [pa.py_buffer(validity), pa.py_buffer(values)],
        null_count=int(is_null.sum()),
    )


__all__ = ["array_with_nulls", "batch_columns", "column", "pane_rows", "to_mask", "to_values"]


def pool_array(length: int, dtype: np.dtype | type) -> np.ndarray:
    """An uninitialised, writable NumPy array over a buffer of Arrow's memory pool, for
    output columns that Arrow arrays then wrap. The pool keeps freed pages for the next
    firing's output, where NumPy's large allocations come back from the OS page by page
    each time: 2.5-3x less time to fill a firing's columns on the project's VM."""
    dtype = np.dtype(dtype)
    buffer = pa.allocate_buffer(max(length * dtype.itemsize, 1))
    return np.frombuffer(buffer, dtype, count=length)


def _fixed_width(type_: pa.DataType) -> int | None:
    """The byte width of a fixed-width value type whose values can be moved as raw bytes
    (integers, floats, temporal types), None for the others (booleans are bits; strings,
    decimals and nested types go through Arrow's take)."""
    if (
        pa.types.is_integer(type_) or pa.types.is_floating(type_) or pa.types.is_temporal(type_)
    ) and type_.bit_width in (8, 16, 32, 64):
        return type_.bit_width // 8
    return None


def _raw_values(array: pa.Array, width: int) -> np.ndarray:
    return np.frombuffer(
        array.buffers()[1], np.dtype(f"u{width}"), count=array.offset + len(array)
    )[array.offset :]


def fixed_width_values(array: pa.Array) -> np.ndarray | None:
    """The values of a fixed-width array without NULLs as unsigned integers of its width (a
    view, no copy: what a kernel can gather as raw bytes and `fixed_width_array` wraps
    back), or None for other arrays."""
    width = _fixed_width(array.type)
    if width is None or array.null_count or not len(array) or array.buffers()[1] is None:
        return None
    return _raw_values(array, width)


def fixed_width_array(type_: pa.DataType, values: np.ndarray) -> pa.Array:
    """An Arrow array of `type_` over raw values of its width (`fixed_width_values`'
    dtype), without NULLs and without a copy."""
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values)])


def take_rows(
    array: pa.Array | pa.ChunkedArray, rows: np.ndarray, may_be_missing: bool = True
) -> pa.Array:
    """array[rows] as one Arrow array, NULL where a row number is negative
    (`may_be_missing=False`: the caller knows none is, and the check is skipped). Fixed-width
    values are gathered by NumPy into a buffer the result wraps (no copy after the gather;
    Arrow's take on a chunked array resolves every index's chunk); other types by Arrow."""
    if isinstance(array, pa.ChunkedArray):
        array = array.chunk(0) if array.num_chunks == 1 else array.combine_chunks()
    rows = np.asarray(rows, np.int64)
    has_missing = may_be_missing and len(rows) > 0 and int(rows.min()) < 0
    missing = rows < 0 if has_missing else None
    width = _fixed_width(array.type)
    if width is None or not len(array) or array.buffers()[1] is None:
        index = pa.array(rows, mask=missing) if has_missing else pa.array(rows)
        return array.take(index)
    index = np.where(missing, 0, rows) if has_missing else rows
    values = _raw_values(array, width)
    # mode "clip": with `out`, the default "raise" gathers into a temporary and copies;
    # the row numbers are stored rows by construction (negative ones were replaced above)
    taken = values.take(index, out=pool_array(len(index), values.dtype), mode="clip")
    validity = None
    nulls = 0
    if array.null_count or has_missing:
        valid = (
            np.asarray(array.is_valid()).take(index)
            if array.null_count
            else np.ones(len(rows), np.bool_)
        )
        if has_missing:
            valid &= ~missing
        nulls = len(rows) - int(np.count_nonzero(valid))
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(
        array.type, len(rows), [validity, pa.py_buffer(taken)], null_count=nulls
    )


def _joined(pieces: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(pieces) if pieces else np.empty(0, np.int64)


def pane_rows(
    sorted_part: tuple[Any, Any, Any] | None,
    chunks: list[tuple[Any, Any, Any]],
    timed: bool,
    concatenate: Callable[[list[Any]], Any] = _joined,
    to_host: Callable[[Any], np.ndarray] = np.asarray,
) -> tuple[Any, Any, Any]:
    """A held pane's (slots, values, event times), each in one array: its sorted part
    (values, per-slot offsets, times) first, its slots repeated from the offsets (read on the
    host through `to_host`), then its chunks (slots, values, times). `concatenate` joins the
    pieces where the holistic kernels keep them (a backend's `concatenate`: host or device
    arrays); the times are empty unless `timed`, and then every piece must have them."""
    slots, values, times = [], [], []
    if sorted_part is not None:
        part_values, offsets, part_times = sorted_part
        counts = np.diff(to_host(offsets))
        slots.append(np.repeat(np.arange(len(counts), dtype=np.int64), counts))
        values.append(part_values)
        times.append(part_times)
    for chunk_slots, chunk_values, chunk_times in chunks:
        slots.append(chunk_slots)
        values.append(chunk_values)
        times.append(chunk_times)
    if timed and any(piece is None for piece in times):
        raise AssertionError("a timed pane holds values without their event times")
    return concatenate(slots), concatenate(values), concatenate(times if timed else [])
