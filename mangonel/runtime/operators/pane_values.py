"""The split (Spark) form's wire format of a holistic `values` field: per partial row, one
(key, pane), the pane's non-NULL values of that key as their order keys
(`aggregates.holistic.order_keys`), packed little-endian int64 into one BINARY cell.

Binary, not an Arrow list: Spark hands stage 2 pandas frames, where a BINARY cell is one
`bytes` object (joined in one call) and a list cell a NumPy array per row. A row whose values
are all NULL holds an empty cell. The order keys need no type beside them: the field's
argument type (the plan's) decodes them, as it does the panes' values standalone.

`pack` and `unpack` are the format; `align` gives stage 1's per-(key, pane) rows their values
when the incremental partials and the values were grouped apart (the operator's own
`preaggregate`). A field a Python window function reads `with_timestamps` ships its values'
event times too, packed alike in a second column (`times_column`), in the values' order.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mangonel.errors import DataError

# Arrow BINARY offsets are int32: one partial batch holds at most this many value bytes.
MAX_BATCH_BYTES = (1 << 31) - 1


def pack(counts: np.ndarray, values: np.ndarray) -> pa.BinaryArray:
    """One BINARY cell per row: `counts[i]` order keys of `values` (rows' values in row
    order, concatenated)."""
    counts = np.asarray(counts, np.int64)
    offsets = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts * 8, out=offsets[1:])
    if offsets[-1] > MAX_BATCH_BYTES:
        raise DataError(
            f"one partition's micro-batch holds {offsets[-1] // 8} values of a holistic "
            "function, more than one Arrow BINARY column takes (2 GiB)",
            hint="read fewer rows per micro-batch (maxFilesPerTrigger, maxOffsetsPerTrigger) "
            "or spread them over more partitions",
        )
    data = np.ascontiguousarray(values, dtype="<i8")
    return pa.Array.from_buffers(
        pa.binary(),
        len(counts),
        [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data.tobytes())],
    )


def unpack(column: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(order keys per row, the rows' order keys concatenated) of a packed column; a NULL
    cell holds none."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    column = column.cast(pa.binary())
    rows = len(column)
    if not rows:
        return np.zeros(0, np.int64), np.empty(0, np.int64)
    _, offsets_buffer, data_buffer = column.buffers()
    offsets = np.frombuffer(offsets_buffer, np.int32)[column.offset : column.offset + rows + 1]
    offsets = offsets.astype(np.int64)
    lengths = np.diff(offsets)
    if column.null_count:
        lengths = np.where(np.asarray(column.is_valid()), lengths, 0)
    if np.any(lengths % 8):
        raise DataError("a holistic values cell is not a whole number of int64 order keys")
    if data_buffer is None or not lengths.any():
        return np.zeros(rows, np.int64), np.empty(0, np.int64)
    data = np.frombuffer(data_buffer, np.uint8)
    if column.null_count:
        # gather the valid cells' bytes (a NULL cell may still span some)
        starts = np.repeat(offsets[:-1], lengths)
        within = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        data = data[starts + within]
    else:  # the cells are consecutive
        data = data[offsets[0] : offsets[-1]]
    return lengths // 8, data.view("<i8").astype(np.int64)


def times_column(name: str) -> str:
    """The packed column of a timed `values` field's event times (a Python window function
    `with_timestamps` reads them): per row as many int64 microseconds as `name`'s cell holds
    values, in the same order."""
    return f"{name}.time"


def align(
    row_slots: np.ndarray,
    row_panes: np.ndarray,
    value_slots: np.ndarray,
    value_panes: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(count per row, the values' order) for partial rows that are distinct (key slot,
    pane) pairs, given values by their (slot, pane): `values[order]` lists each row's values
    in row order (every pair of a value has a row: values come from contributing tuples)."""
    rows = len(row_slots)
    if not len(value_slots):
        return np.zeros(rows, np.int64), np.empty(0, np.int64)
    pairs = np.concatenate(
        [np.stack([row_slots, row_panes], axis=1), np.stack([value_slots, value_panes], axis=1)]
    ).astype(np.int64)
    _, inverse = np.unique(pairs, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    row_of_pair = np.full(int(inverse.max()) + 1, -1, np.int64)
    row_of_pair[inverse[:rows]] = np.arange(rows, dtype=np.int64)
    value_rows = row_of_pair[inverse[rows:]]
    if np.any(value_rows < 0):
        raise DataError("holistic values of a (key, pane) without a partial row")
    order = np.argsort(value_rows, kind="stable")
    return np.bincount(value_rows, minlength=rows).astype(np.int64), order
