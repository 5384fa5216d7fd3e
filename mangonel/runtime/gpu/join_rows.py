"""Device-resident rows of a join without aggregation (issue 10, materialised output):
`DeviceJoinRows`, what `GpuJoinKernels.device_rows` hands the join driver where
`codegen_join.device_rows` applies (EXPLAIN: `rows=device`).

- Both sides' stored rows are mirrored on the device (`join_fused.DeviceRows`: key slot,
  window range, the joined columns emitted or read by a predicate with their validity, and
  for a kept side of an outer join its matched flags), appended as batches arrive and
  trimmed as the driver frees fired rows.
- A new batch is matched on the device against the other side's stored rows (the module's
  hash or sort-merge kernels, two passes), a residual or WHERE filters the pairs there (the
  `rows_check` kernel), and the pairs wait on the device (left id, right id, and the window
  range [lo, hi] both rows share) until their windows fire. Outer joins mark the kept rows
  of each match (after the residual) matched in the windows it shares, and at a firing add
  each kept row unmatched in a fired window (WHERE applied, the other side NULL: -1) to the
  pending pairs, after the pairs, as the host form does.
- A firing expands the pending pairs to (pair, window) entries in window order (expand
  count, exclusive scan, write; then ordered by window, pair), gathers every output column
  but STRING ones on the device, and copies only those columns back, each straight into a
  pinned host block (`lease`: a buffer of the process's pinned pool, `gpu.pinned`) that the
  result's Arrow arrays are built over without a copy or per-row Python. A block returns to
  the pool when the last array over it is released, so a consumer that drops (or copies) its
  batches lets the next firings, and the next runs, reuse the pinned memory.
  A STRING column is gathered on the host instead (the device keeps no dictionary for
  joined rows): the entries' row numbers of its side come back (8 bytes a row) and Arrow
  takes the strings from the driver's stored rows, which the mirrors follow row for row.

The pending pairs' snapshot is the host form's (`pending_left`, `pending_right`,
`pending_lo`, `pending_hi`; the matched flags go to the driver's rows first): a snapshot
restores on either form.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from mangonel.catalog.types import SqlType
from mangonel.compiler import physical as ph
from mangonel.compiler.codegen_join import DeviceRowsPlan
from mangonel.runtime.gpu import device, pinned
from mangonel.runtime.gpu.join_fused import DeviceRows, _numpy_dtype

PENDING = ("left", "right", "lo", "hi")
_ALIGN = 64  # bytes: each column's segment of a pinned block starts aligned
_MIN_BLOCK = 1 << 20


def cp_contiguous(array: Any) -> Any:  # noqa: ANN401
    return device.cupy().ascontiguousarray(array)


class PinnedLease:
    """A buffer of the process's pinned pool (`gpu.pinned`) lent to Arrow buffers (their
    `base`): when the last buffer over it is released, it goes back to the pool."""

    def __init__(self, buffer: pinned.PinnedBuffer) -> None:
        self.pinned = buffer
        self.host = buffer.view
        self.nbytes = buffer.nbytes
        self.address = self.host.ctypes.data

    def buffer(self, offset: int, nbytes: int) -> pa.Buffer:
        """An Arrow buffer over [offset, offset + nbytes) of the block, keeping it lent."""
        return pa.foreign_buffer(self.address + offset, nbytes, base=self)

    def __del__(self) -> None:
        pinned.give_back(self.pinned)  # its copies were synchronous: nothing in flight


def lease(nbytes: int) -> PinnedLease:
    """A pinned block of at least `nbytes` from the process's pool, asked for in powers of two
    from 1 MiB so that firings of varying size reuse the blocks."""
    return PinnedLease(pinned.borrow(max(_MIN_BLOCK, 1 << max(nbytes - 1, 1).bit_length())))


class DevicePairs:
    """The pending pairs on the device: int64 columns `PENDING`, grown by doubling."""

    def __init__(self) -> None:
        self.size = 0
        self.arrays: dict[str, Any] = {}

    def view(self, name: str) -> Any:  # noqa: ANN401
        return self.arrays[name][: self.size]

    def extend(self, columns: dict[str, Any]) -> None:  # noqa: ANN401
        cp = device.cupy()
        new = len(columns["lo"])
        need = self.size + new
        capacity = len(self.arrays["lo"]) if self.arrays else 0
        if need > capacity or not self.arrays:
            capacity = max(need, 2 * capacity, 1024)
            grown = {name: cp.zeros(capacity, cp.int64) for name in PENDING}
            for name in PENDING if self.size else ():
                grown[name][: self.size] = self.arrays[name][: self.size]
            self.arrays = grown
        for name in PENDING:
            self.arrays[name][self.size : need] = columns[name]
        self.size = need

    def keep(self, alive: Any) -> None:  # noqa: ANN401
        """Keep the pairs where `alive` (a device mask over the pending pairs)."""
        kept = {name: self.view(name)[alive] for name in PENDING}
        self.size = 0
        self.extend(kept)

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self.arrays.values())


class DeviceJoinRows:
    """The pairs and stored rows of a join without aggregation on the device (see the
    module docstring): `join` per batch, `fire` per firing, and what the driver snapshots."""

    def __init__(
        self,
        node: ph.WindowJoinExec,
        plan: DeviceRowsPlan,
        kernels: Any,  # noqa: ANN401 - the GpuJoinKernels of this join
    ) -> None:
        self.node = node
        self.plan = plan
        self.kernels = kernels
        self.rows = self._mirrors()
        self.pairs = DevicePairs()
        self.pairs_found = 0  # pairs kept (after the residual and WHERE), for tests
        self.rows_out = 0

    def _mirrors(self) -> list[DeviceRows]:
        return [DeviceRows(i, self.plan.columns, kept=i in self.plan.kept) for i in (0, 1)]

    def _columns(self) -> list[Any]:  # noqa: ANN401
        """Every mirrored column's values and validity, the check kernels' arguments."""
        columns = []
        for column in self.plan.columns:
            rows = self.rows[column.side]
            columns += [rows.view(f"v:{column.name}"), rows.view(f"m:{column.name}")]
        return columns

    def _sync(self, sides: list) -> None:
        for side in sides:
            self.rows[side.index].sync(side, None, self.kernels, 0)

    # -- joining --------------------------------------------------------------------------

    def join(self, sides: list, index: int, count: int, algorithm: str, n_slots: int) -> None:
        """The last `count` rows stored on `sides[index]` against the other side's stored
        rows: their pairs (residual and WHERE applied) kept on the device."""
        self._sync(sides)
        batch, stored = self.rows[index], self.rows[1 - index]
        if not count or not stored.size:
            return
        cp = device.cupy()
        start = batch.size - count
        mine = tuple(batch.view(name, start) for name in ("slots", "first", "last"))
        theirs = tuple(stored.view(name) for name in ("slots", "first", "last"))
        i, j = self.kernels.match_device(algorithm, mine, theirs, n_slots)
        if not len(i):
            return
        lo = cp.maximum(mine[1][i], theirs[1][j])
        hi = cp.minimum(mine[2][i], theirs[2][j])
        local = (i + start, j) if index == 0 else (j, i + start)  # (left, right) in the mirrors
        local = tuple(cp.ascontiguousarray(x) for x in local)
        if self.plan.check is not None:
            matched = cp.zeros(len(i), cp.uint8)
            keep = cp.zeros(len(i), cp.uint8)
            arguments = (*local, np.int64(len(i)), *self._columns(), matched, keep)
            self.kernels._launch("rows_check", len(i), *arguments)
            self._mark(local, lo, hi, matched.astype(cp.bool_))
            kept = keep.astype(cp.bool_)
            local = (local[0][kept], local[1][kept])
            lo, hi = lo[kept], hi[kept]
        else:
            self._mark(local, lo, hi, None)
        self.pairs_found += len(lo)
        self.pairs.extend(
            {
                "left": local[0] + self.rows[0].base,
                "right": local[1] + self.rows[1].base,
                "lo": lo,
                "hi": hi,
            }
        )

    def _mark(self, local: tuple, lo: Any, hi: Any, matched: Any) -> None:  # noqa: ANN401
        """Outer joins: the kept sides' rows of the matches (`matched`: a mask over the
        pairs; None: all) flagged matched in every window the pair shares."""
        for side in self.plan.kept:
            rows = self.rows[side]
            at, first, last = local[side], lo, hi
            if matched is not None:
                at, first, last = at[matched], first[matched], last[matched]
            if not len(at):
                continue
            arguments = (rows.view("matched"), np.int64(rows.width), cp_contiguous(at))
            arguments += (cp_contiguous(first), cp_contiguous(last), rows.view("origin"))
            self.kernels._launch("mark", len(at), *arguments, np.int64(len(at)))

    def credit_unmatched(self, sides: list, lo: int, hi: int) -> None:
        """Outer joins, at a firing of windows lo..hi: each kept side's rows unmatched in a
        window of them (WHERE applied, the other side NULL) join the pending pairs as
        (row, -1) or (-1, row) for that window, after the pairs (the host form's order)."""
        if not self.plan.kept:
            return
        cp = device.cupy()
        self._sync(sides)
        for side in self.plan.kept:
            rows = self.rows[side]
            if not rows.size:
                continue
            at, windows = self.kernels._expand_device(rows.view("first"), rows.view("last"), lo, hi)
            if not len(at):
                continue
            flags = rows.view("matched")[at, windows - rows.view("origin")[at]]
            lonely = flags == 0
            at, windows = at[lonely], windows[lonely]
            role = f"rows_lonely_{side}"
            if len(at) and role in self.kernels._functions:
                keep = cp.zeros(len(at), cp.uint8)
                arguments = (cp_contiguous(at), np.int64(len(at)), *self._columns(), keep)
                self.kernels._launch(role, len(at), *arguments)
                kept = keep.astype(cp.bool_)
                at, windows = at[kept], windows[kept]
            if not len(at):
                continue
            ids = at + rows.base
            none = cp.full(len(at), -1, cp.int64)
            left, right = (ids, none) if side == 0 else (none, ids)
            self.pairs.extend({"left": left, "right": right, "lo": windows, "hi": windows})

    def flags_to_host(self, sides: list) -> None:
        """The kept sides' matched flags, set on the device, into the driver's rows (before
        a snapshot takes them)."""
        self._sync(sides)
        for side in sides:
            self.rows[side.index].matched_to_host(side)

    # -- firing ---------------------------------------------------------------------------

    def max_window(self) -> int | None:
        return int(self.pairs.view("hi").max()) if self.pairs.size else None

    def fire(
        self, sides: list, lo: int, hi: int, schema: pa.Schema
    ) -> tuple[list[pa.RecordBatch], int]:
        """The joined rows of windows lo..hi in window order (then pair order), and how many
        windows had rows; the fired pairs dropped."""
        if not self.pairs.size or hi < lo:
            return [], 0
        cp = device.cupy()
        self._sync(sides)
        entries, windows = self.kernels._expand_device(
            self.pairs.view("lo"), self.pairs.view("hi"), lo, hi
        )
        out: list[pa.RecordBatch] = []
        fired = 0
        if len(entries):
            # per side: the rows' places in its mirror, and where it is NULL (outer rows)
            at, missing = [], []
            for side, name in enumerate(("left", "right")):
                ids = self.pairs.view(name)[entries]
                none = ids < 0 if self.plan.kept else None  # outer rows: -1 ids
                local = ids - self.rows[side].base
                at.append(local if none is None else cp.where(none, 0, local))
                missing.append(none)
            host = self._gather_host_columns(sides, at, missing, len(entries))
            columns = []
            for output, position in zip(self.plan.outputs, self.plan.emitted, strict=True):
                if position is None:  # a STRING column, gathered on the host
                    columns.append(host[output.joined])
                    continue
                column = self.plan.columns[position]
                rows = self.rows[column.side]
                if not rows.size:  # a side with no stored rows: only outer rows, NULL here
                    values = cp.zeros(len(entries), _numpy_dtype(column.type))
                    valid = cp.zeros(len(entries), cp.uint8)
                    columns.append((column.type, values, valid))
                    continue
                values = rows.view(f"v:{column.name}")[at[column.side]]
                valid = rows.view(f"m:{column.name}")[at[column.side]]
                if missing[column.side] is not None:  # the other side of an outer row: NULL
                    values = cp.where(missing[column.side], 0, values).astype(values.dtype)
                    valid = cp.where(missing[column.side], 0, valid).astype(cp.uint8)
                columns.append((column.type, values, valid))
            window = self.node.window
            start = windows * window.slide
            for bound in (start, start + window.size):
                columns.append((SqlType.TIMESTAMP, bound, None))
            out.append(self._to_arrow(schema, len(entries), columns))
            self.rows_out += len(entries)
            fired = int(cp.count_nonzero(windows[1:] != windows[:-1])) + 1
        self.pairs.keep(self.pairs.view("hi") > hi)
        return out, fired

    def _gather_host_columns(
        self, sides: list, at: list, missing: list, n: int
    ) -> dict[str, pa.Array]:
        """The STRING columns emitted (`plan.host_columns`) of the fired entries, taken from
        the driver's stored rows (`sides`, which the mirrors follow: a mirror's row i is the
        side's stored row i) at the entries' row numbers, copied back from the device for the
        sides that emit one; NULL where the side is missing (an outer row)."""
        wanted = self.plan.host_columns
        gathered: dict[str, pa.Array] = {}
        for side in sorted({c.side for c in wanted}):
            stored = sides[side].table(sides[side].conformer.schema)
            if not self.rows[side].size:  # no stored rows: only outer rows, NULL here
                for column in (c for c in wanted if c.side == side):
                    gathered[column.joined] = pa.nulls(n, stored.schema.field(column.name).type)
                continue
            arrays = [at[side]] if missing[side] is None else [at[side], missing[side]]
            host = pinned.download(arrays)
            mask = None if missing[side] is None else host[1].astype(np.bool_, copy=False)
            indices = pa.array(host[0], pa.int64(), mask=mask)
            for column in (c for c in wanted if c.side == side):
                taken = stored.column(column.name).take(indices)
                gathered[column.joined] = taken.combine_chunks()
        return gathered

    def _to_arrow(self, schema: pa.Schema, n: int, columns: list) -> pa.RecordBatch:
        """The gathered columns ((type, device values, device validity or None) each) copied
        into one pinned block and wrapped as Arrow arrays over it; a column gathered on the
        host (an Arrow array) is taken as it is."""
        cp = device.cupy()
        segments = []  # per column: (data, bitmap or None, nulls), or an Arrow array
        for column in columns:
            if isinstance(column, pa.Array):
                segments.append(column)
                continue
            sql_type, values, valid = column
            nulls = 0 if valid is None else n - int(cp.count_nonzero(valid))
            bitmap = cp.packbits(valid, bitorder="little") if nulls else None
            if sql_type is SqlType.BOOLEAN:  # Arrow's booleans are bits
                values = cp.packbits(values, bitorder="little")
            segments.append((cp.ascontiguousarray(values), bitmap, nulls))
        total = sum(
            device.round_up(int(d.nbytes), _ALIGN)
            + (0 if b is None else device.round_up(int(b.nbytes), _ALIGN))
            for d, b, _ in (s for s in segments if not isinstance(s, pa.Array))
        )
        block = lease(total)
        offset = 0

        def copy(array: Any) -> pa.Buffer:  # noqa: ANN401
            nonlocal offset
            nbytes = int(array.nbytes)
            array.get(out=block.host[offset : offset + nbytes].view(array.dtype))
            buffer = block.buffer(offset, nbytes)
            offset += device.round_up(nbytes, _ALIGN)
            return buffer

        arrays = []
        for field, segment in zip(schema, segments, strict=True):
            if isinstance(segment, pa.Array):
                arrays.append(segment.cast(field.type))
                continue
            data, bitmap, nulls = segment
            buffers = [None if bitmap is None else copy(bitmap), copy(data)]
            arrays.append(pa.Array.from_buffers(field.type, n, buffers, null_count=nulls))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    # -- size, snapshot -------------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        return self.pairs.nbytes + sum(r.nbytes for r in self.rows)

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The pending pairs as the host form keeps them (`pending_<name>`)."""
        if not self.pairs.size:
            return {f"pending_{name}": np.zeros(0, np.int64) for name in PENDING}
        views = [self.pairs.view(name) for name in PENDING]
        host = pinned.download(views)
        return {f"pending_{name}": values for name, values in zip(PENDING, host, strict=True)}

    def restore(self, arrays: dict[str, np.ndarray]) -> None:
        cp = device.cupy()
        self.rows = self._mirrors()
        self.pairs = DevicePairs()
        self.pairs.extend(
            {
                name: cp.asarray(np.ascontiguousarray(arrays[f"pending_{name}"], np.int64))
                for name in PENDING
            }
        )


__all__ = ["DeviceJoinRows", "DevicePairs", "PinnedLease", "lease"]
