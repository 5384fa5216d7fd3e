"""What a join keeps of each input (`JoinSide`: the stored rows, their key slots and window
ranges, outer-join matched flags), the growable arrays it keeps them in, a static table's
conformer, and the Arrow IPC form of stored batches in snapshots. The driver is join.py."""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from mangonel.compiler import physical as ph
from mangonel.runtime.operators.conform import BatchConformer
from mangonel.runtime.operators.join_stats import key_sample


class Grow:
    """An int64 (or uint8 2-D) array appended to at the back and freed from the front, in
    place: the live rows are data[start:end]. Freeing moves nothing; an append that finds no
    room moves the live rows to the front, or into a new array of twice what they need, so
    each row is moved O(1) times on average (freeing used to move every live row)."""

    def __init__(self, dtype: type = np.int64, width: int = 0) -> None:
        shape = (64, width) if width else (64,)
        self.data = np.zeros(shape, dtype)
        self.start = 0
        self.end = 0

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def view(self) -> np.ndarray:
        return self.data[self.start : self.end]

    def reserve(self, count: int) -> np.ndarray:
        """Room for `count` more rows: the array they would be appended at, for a kernel to
        write in place; `extend` with (a prefix of) it then copies nothing."""
        if self.end + count > len(self.data):
            live = self.size
            if 2 * (live + count) > len(self.data):
                capacity = max(2 * (live + count), len(self.data))
                moved = np.empty((capacity, *self.data.shape[1:]), self.data.dtype)
            else:  # room at the front: at least half the array was freed since it last moved
                moved = self.data
            moved[:live] = self.data[self.start : self.end]
            self.data, self.start, self.end = moved, 0, live
        return self.data[self.end : self.end + count]

    def extend(self, values: np.ndarray) -> None:
        count = len(values)
        tail = self.reserve(count)
        if not (count and _same_memory(values, tail)):  # written in place by a kernel
            tail[...] = values
        self.end += count

    def drop_front(self, count: int) -> None:
        self.start += min(count, self.size)

    def clear(self) -> None:
        self.start = self.end = 0


def _same_memory(values: np.ndarray, tail: np.ndarray) -> bool:
    return (
        isinstance(values, np.ndarray)
        and values.dtype == tail.dtype
        and values.shape == tail.shape
        and values.strides == tail.strides
        and values.ctypes.data == tail.ctypes.data
    )


@dataclass
class JoinSide:
    """One input's stored rows: payload batches (the columns the query reads) and per row its
    key slot, window range, first possible window (`origin`, for the matched flags)."""

    index: int
    alias: str
    name: str
    is_table: bool
    scan: ph.StreamScanExec | ph.TableScanExec
    keys: tuple[str, ...]
    delay: int
    keeps_unmatched: bool
    max_windows: int
    batches: list[pa.RecordBatch] = field(default_factory=list)
    batch_rows: list[int] = field(default_factory=list)
    # per stored batch, a sample of its key slots (join_stats.py: join_algorithm "auto")
    key_samples: list[np.ndarray] = field(default_factory=list)
    base: int = 0  # global id of the first stored row
    slots: Grow = field(default_factory=Grow)
    first: Grow = field(default_factory=Grow)
    last: Grow = field(default_factory=Grow)
    origin: Grow = field(default_factory=Grow)
    matched: Grow | None = None
    watermark: int | None = None
    max_ts: int | None = None
    seen: bool = False
    tuples_in: int = 0
    late: int = 0
    null_time: int = 0
    _table: pa.Table | None = None

    @property
    def rows(self) -> int:
        return self.slots.size

    def table(self, schema: pa.Schema) -> pa.Table:
        if self._table is None:
            self._table = pa.Table.from_batches(self.batches, schema=schema)
        return self._table

    def append(self, batch: pa.RecordBatch, slots, first, last, origin) -> None:
        self.batches.append(batch)
        self.batch_rows.append(batch.num_rows)
        self.key_samples.append(key_sample(slots))
        self._table = None
        self.slots.extend(slots)
        self.first.extend(first)
        self.last.extend(last)
        self.origin.extend(origin)
        if self.matched is not None:
            self.matched.extend(np.zeros((len(slots), self.max_windows), np.uint8))

    def free_fired(self, fired: int) -> None:
        """Drop the leading batches whose rows' windows have all fired (window <= fired)."""
        drop_batches = drop_rows = 0
        last = self.last.view
        for rows in self.batch_rows:
            if rows and last[drop_rows : drop_rows + rows].max() > fired:
                break
            drop_batches += 1
            drop_rows += rows
        if not drop_batches:
            return
        del self.batches[:drop_batches], self.batch_rows[:drop_batches]
        del self.key_samples[:drop_batches]
        self._table = None
        for grow in (self.slots, self.first, self.last, self.origin, self.matched):
            if grow is not None:
                grow.drop_front(drop_rows)
        self.base += drop_rows

    def sampled_batches(self) -> list[tuple[np.ndarray, int]]:
        """(key sample, rows) of each stored batch, oldest first (join_stats.py)."""
        return list(zip(self.key_samples, self.batch_rows, strict=True))

    def resample(self) -> None:
        """The key samples from the stored slots (after a restore: snapshots keep none)."""
        ends = np.cumsum([0, *self.batch_rows])
        slots = self.slots.view
        self.key_samples = [
            key_sample(slots[a:b]) for a, b in zip(ends[:-1], ends[1:], strict=True)
        ]

    def nbytes(self) -> int:
        arrays = (self.slots, self.first, self.last, self.origin, self.matched)
        total = sum(g.data.nbytes for g in arrays if g is not None)
        return total + sum(b.nbytes for b in self.batches)


class TableConformer(BatchConformer):
    """A static table's batches conformed as a stream's are (`conform`: the declared types,
    lossless widening only, NOT NULL checked, a DataError naming the column otherwise), the
    columns the query reads only; a table has no event time."""

    def __init__(self, scan: ph.TableScanExec) -> None:
        super().__init__(scan.columns, scan.table.name, None, (0, 0), kind="table")

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:  # type: ignore[override]
        """The batch as the side stores it: the read columns only, in the declared types."""
        conformed = self.conform_types(batch)
        columns = [conformed.column(f.name) for f in self.schema]
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


def to_ipc(batches: list[pa.RecordBatch], schema: pa.Schema) -> np.ndarray:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return np.frombuffer(sink.getvalue(), np.uint8)


def from_ipc(data: np.ndarray) -> list[pa.RecordBatch]:
    return list(pa.ipc.open_stream(pa.py_buffer(data.tobytes())))
