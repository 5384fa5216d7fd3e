"""Device-fused join + aggregate (issue 10 item 3): `DeviceJoinCells`, the cells of an aggregated
join that `compiler.codegen_join.device_fusion` fuses on the GPU.

Both sides' stored rows are mirrored on the device (`DeviceRows`: key slot, window range, the
columns the kernel reads, and for the group side each row's group slot), appended as batches
arrive and trimmed as the driver frees fired rows, so a batch uploads its own rows once and
nothing else. A new batch of one side is the build side (hash: its rows bucketed by key slot;
sort-merge: its rows sorted by slot); every stored row of the other side probes it in the
fused kernel, which evaluates the residual, WHERE and aggregate arguments over the pair and
combines the lifted state into the (window, group) cells of every window the pair shares. No
pair is materialised.

Outer joins: a kept side's mirror also holds its matched flags (set by the fused kernel where
a match passes the residual) and each row's group slot when unmatched; `credit_unmatched`
credits those rows at a firing, and `flags_to_host` gives the flags to the driver before a
snapshot.

The cells are a dense block per state part, [window - base x group slot], on the device, grown
(front or back, more groups) before a launch needs it. Firing copies the fired windows' rows
of the block to the host through a buffer borrowed from the process's pinned pool
(`gpu.pinned`), drops them from the block, and finalizes on the host (as the probe form's
`JoinCells.fire`): the results of a window come in group-slot order, the order groups were
first seen among the group side's rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from mangonel.catalog.types import SqlType
from mangonel.compiler import physical as ph
from mangonel.compiler.codegen_join import (
    FUSED_KERNEL_ROLES,
    DeviceFusion,
    FusedColumn,
    credits_by_difference,
)
from mangonel.errors import DataError
from mangonel.runtime.gpu import device, pinned
from mangonel.runtime.host.arrays import to_values
from mangonel.runtime.operators.results import finalize, window_result_batch

# The most cells (windows x groups) the block may hold: a side whose rows span more open
# windows than this times the groups stops with a clear error instead of exhausting memory.
MAX_BLOCK_CELLS = 1 << 28


def _numpy_dtype(sql_type: SqlType) -> np.dtype:
    return np.dtype(np.uint8) if sql_type is SqlType.BOOLEAN else np.dtype(sql_type.info.numpy)


class DeviceRows:
    """One side's stored rows on the device, from global row id `base` on (`sync` follows the
    driver's `JoinSide`: it drops the rows freed there and appends the rows stored since)."""

    def __init__(
        self,
        index: int,
        columns: tuple[FusedColumn, ...],
        group_columns: tuple[tuple[str, SqlType], ...] | None = None,
        kept: bool = False,
        lonely_group_columns: tuple[tuple[str | None, SqlType], ...] | None = None,
    ) -> None:
        self.index = index
        self.columns = tuple(c for c in columns if c.side == index)
        self.group_columns = group_columns
        # outer joins, a kept side: its matched flags (rows x windows, from `origin`) and,
        # aggregated (`lonely_group_columns` given), the group slot of each row when
        # unmatched (the other side's GROUP BY columns NULL)
        self.kept = kept
        self.lonely_group_columns = lonely_group_columns
        self.width = 0
        self.base = 0
        self.size = 0
        self.capacity = 0
        self.arrays: dict[str, Any] = {}
        # the fused hash join's chains: per key slot the newest row's global id (-1: none);
        # each row's `next` the row before it on its chain
        self.heads: Any = None

    @classmethod
    def of_fusion(cls, fusion: DeviceFusion, index: int) -> DeviceRows:
        """One side's mirror for the device-fused aggregation."""
        return cls(
            index,
            fusion.columns,
            fusion.group_columns if fusion.group_side == index else None,
            index in fusion.kept,
            fusion.lonely_group_columns[index],
        )

    def _grow_heads(self, n_slots: int) -> None:
        cp = device.cupy()
        size = 0 if self.heads is None else len(self.heads)
        if self.heads is not None and n_slots <= size:
            return
        heads = cp.full(max(n_slots, 2 * size, 1024), -1, cp.int64)
        if size:
            heads[:size] = self.heads
        self.heads = heads

    def _dtypes(self) -> dict[str, np.dtype]:
        dtypes = {name: np.dtype(np.int64) for name in ("slots", "first", "last", "next")}
        if self.group_columns is not None:
            dtypes["groups"] = np.dtype(np.int64)
        if self.kept:
            dtypes["origin"] = np.dtype(np.int64)
            dtypes["matched"] = np.dtype(np.uint8)  # (rows, width)
        if self.kept and self.lonely_group_columns is not None:
            dtypes["lonely"] = np.dtype(np.int64)
        for column in self.columns:
            dtypes[f"v:{column.name}"] = _numpy_dtype(column.type)
            dtypes[f"m:{column.name}"] = np.dtype(np.uint8)
        return dtypes

    def sync(self, side: Any, groups: Any, kernels: Any, n_slots: int) -> None:  # noqa: ANN401
        """Mirror `side` (the driver's JoinSide): drop the rows freed since, append those stored
        since (their group slots mapped through `groups` on the group side) and, where the
        module has the fused hash join, push them on their key slots' chains."""
        cp = device.cupy()
        if side.base < self.base or side.base > self.base + self.size:
            self.base, self.size = side.base, 0  # restored, or everything freed: start over
            self.heads = None  # chains of freed rows end at them anyway; start clean
        drop = side.base - self.base
        if drop:
            for name, array in self.arrays.items():
                self.arrays[name][: self.size - drop] = array[drop : self.size].copy()
            self.size -= drop
            self.base = side.base
        new = side.rows - self.size
        if new <= 0:
            return
        host: dict[str, np.ndarray] = {
            "slots": side.slots.view[-new:],
            "first": side.first.view[-new:],
            "last": side.last.view[-new:],
        }
        rows = side.table(side.conformer.schema).slice(side.rows - new, new)
        if self.group_columns is not None:
            columns = [
                rows.column(name).combine_chunks().cast(sql_type.info.arrow)
                for name, sql_type in self.group_columns
            ]
            host["groups"] = np.asarray(groups.map_columns(columns, np.ones(new, np.bool_)))
        if self.kept:
            self.width = side.matched.view.shape[1]
            host["origin"] = side.origin.view[-new:]
            host["matched"] = side.matched.view[-new:]
        if self.kept and self.lonely_group_columns is not None:
            columns = [
                pa.nulls(new, sql_type.info.arrow)
                if name is None
                else rows.column(name).combine_chunks().cast(sql_type.info.arrow)
                for name, sql_type in self.lonely_group_columns
            ]
            host["lonely"] = np.asarray(groups.map_columns(columns, np.ones(new, np.bool_)))
        for column in self.columns:
            values, valid = to_values(rows.column(column.name), _numpy_dtype(column.type))
            host[f"v:{column.name}"], host[f"m:{column.name}"] = values, valid.view(np.uint8)
        need = self.size + new
        if need > self.capacity:
            capacity = max(need, 2 * self.capacity, 1024)
            grown = {}
            for name, dtype in self._dtypes().items():
                shape = (capacity, self.width) if name == "matched" else capacity
                array = cp.zeros(shape, dtype)
                if name in self.arrays and self.size:
                    array[: self.size] = self.arrays[name][: self.size]
                grown[name] = array
            self.arrays, self.capacity = grown, capacity
        for name, values in host.items():
            self.arrays[name][self.size : need] = cp.asarray(
                np.ascontiguousarray(values, self.arrays[name].dtype)
            )
        if "chain_insert" in kernels._functions:
            self._grow_heads(n_slots)
            arguments = (self.arrays["slots"][self.size : need], np.int64(new))
            arguments += (np.int64(self.base + self.size), self.heads)
            arguments += (self.arrays["next"][self.size : need], np.int64(len(self.heads)))
            kernels._launch("chain_insert", new, *arguments)
        self.size = need

    def matched_to_host(self, side: Any) -> None:  # noqa: ANN401 - a join driver's side
        """A kept side's matched flags, set on the device, into the driver's rows."""
        if self.kept and self.size:
            side.matched.view[...] = pinned.download_one(self.view("matched"))

    def view(self, name: str, start: int = 0) -> Any:  # noqa: ANN401
        """The rows from `start` of one array (a contiguous device view)."""
        return self.arrays[name][start : self.size]

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self.arrays.values())


class DeviceJoinCells:
    """The (window, group) cells of a device-fused aggregated join: the `JoinCells` interface
    the join driver fires, snapshots and sizes, plus `join` (a new batch against the other
    side's stored rows, aggregated in the fused kernel)."""

    def __init__(
        self,
        node: ph.JoinAggregateExec,
        fusion: DeviceFusion,
        kernels: Any,  # noqa: ANN401 - the GpuJoinKernels launching the fused kernel
    ) -> None:
        self.node = node
        self.fusion = fusion
        self.kernels = kernels
        self.fields = node.fields
        self.groups = kernels.new_key_map(tuple(k.type for k in node.keys))
        # (dtype, neutral) per state part, in field order (the kernel's t_ arguments)
        self.parts = [
            (dtype, value)
            for f in node.fields
            for dtype, value in [(ph.neutral(f)[0], v) for v in ph.neutral(f)[1]]
        ]
        self.rows = [DeviceRows.of_fusion(fusion, 0), DeviceRows.of_fusion(fusion, 1)]
        self.n_slots = 0  # the join's key slots at the last join (the chains' heads)
        # differences (`credits_by_difference`): the block holds +/- credits, a firing's
        # prefix sum over windows continues from each part's running sums per group
        self.differences = credits_by_difference(node)
        self.running = np.zeros((len(self.parts), 0), np.int64)
        self.block: list[Any] = []
        self.lock: Any = None
        self.base = 0  # the window of the block's row 0
        self.windows = 0  # rows in use
        self.group_capacity = 0

    # -- the block ------------------------------------------------------------------------

    def _ensure(self, lo: int, hi: int, n_groups: int) -> None:
        """Grow the block to hold windows lo..hi (and those it holds) and n_groups groups."""
        base = lo if not self.windows else min(self.base, lo)
        end = hi if not self.windows else max(self.base + self.windows - 1, hi)
        windows = end - base + 1
        capacity = len(self.block[0]) if self.block else 0
        if (
            self.block
            and base == self.base
            and windows <= capacity
            and n_groups <= self.group_capacity
        ):
            self.windows = windows
            return
        rows = max(windows, 2 * capacity if windows > capacity else capacity, 4)
        groups = max(n_groups, 2 * self.group_capacity if n_groups > self.group_capacity else 0)
        groups = max(groups, self.group_capacity, 1)
        if rows * groups > MAX_BLOCK_CELLS:
            raise DataError(
                f"the device-fused join's cells would span {windows} open windows x {n_groups} "
                f"groups (over {MAX_BLOCK_CELLS} cells): the event times of the stored rows are "
                "too far apart; run with gpu_join=False"
            )
        cp = device.cupy()
        shift = self.base - base if self.windows else 0
        block = []
        for (dtype, neutral), old in zip(
            self.parts, self.block or [None] * len(self.parts), strict=True
        ):
            array = cp.full((rows, groups), neutral, dtype)
            if old is not None and self.windows:
                array[shift : shift + self.windows, : self.group_capacity] = old[: self.windows]
            block.append(array)
        self.block = block
        self.lock = cp.zeros(rows * groups, cp.int32)
        self.base, self.windows, self.group_capacity = base, windows, groups

    # -- joining --------------------------------------------------------------------------

    def _sync(self, sides: list) -> None:
        for side in sides:
            self.rows[side.index].sync(side, self.groups, self.kernels, self.n_slots)

    def join(self, sides: list, index: int, count: int, algorithm: str, n_slots: int) -> None:
        """The last `count` rows stored on `sides[index]` against the other side's stored
        rows, aggregated into the cells (the fused kernel of `algorithm`); outer joins: the
        kept sides' rows marked matched in the windows of their matches."""
        self.n_slots = n_slots
        self._sync(sides)
        batch, stored = self.rows[index], self.rows[1 - index]
        if not count or not stored.size:
            return
        cp = device.cupy()
        start = batch.size - count
        lo = int(sides[index].first.view[-count:].min())
        hi = int(sides[index].last.view[-count:].max())
        after = 1 if self.differences else 0  # differences: -credits after the last window
        self._ensure(lo, hi + after, max(self.groups.n_slots, 1))
        if algorithm == "hash":  # the batch's rows walk the stored rows' chains
            probe, at, build, build_at = batch, start, stored, 0
            stored._grow_heads(n_slots)
            table = (stored.heads, stored.view("next"), np.int64(len(stored.heads)))
            table += (np.int64(stored.base),)
        else:  # the stored rows find their runs in the batch sorted by slot
            probe, at, build, build_at = stored, 0, batch, start
            b_slots = batch.view("slots", start)
            order = self.kernels._sorted_rows(b_slots)
            sorted_slots = cp.ascontiguousarray(b_slots[order])
            table = (order, sorted_slots, np.int64(len(order)))
        columns = []
        for column in self.fusion.columns:
            rows, offset = (batch, start) if column.side == index else (stored, 0)
            columns += [
                rows.view(f"v:{column.name}", offset),
                rows.view(f"m:{column.name}", offset),
            ]
        group_rows = batch if self.fusion.group_side == index else stored
        groups = group_rows.view("groups", start if group_rows is batch else 0)
        marks = []
        for side in self.fusion.kept:
            rows, offset = (batch, start) if side == index else (stored, 0)
            marks += [rows.view("matched", offset), rows.view("origin", offset)]
            marks.append(np.int64(rows.width))
        rows = probe.size - at
        arguments = (
            probe.view("slots", at),
            probe.view("first", at),
            probe.view("last", at),
            np.int64(rows),
            build.view("first", build_at),
            build.view("last", build_at),
            *table,
            np.int32(1 if probe.index == 0 else 0),
            *columns,
            groups,
            *marks,
            *self.block,
            self.lock,
            np.int64(self.base),
            np.int64(self.windows),
            np.int64(self.group_capacity),
        )
        self.kernels._launch(FUSED_KERNEL_ROLES[algorithm], rows, *arguments)
        self.kernels.fused_launches += 1

    def credit_unmatched(self, sides: list, lo: int, hi: int) -> None:
        """Outer joins, at a firing of windows lo..hi: every kept side's rows unmatched in
        them credited to their own cells (the other side NULL), on the device."""
        self._sync(sides)
        for side in self.fusion.kept:
            rows = self.rows[side]
            if not rows.size:
                continue
            # the block grows only to the windows these rows cover (a first firing's lo is
            # the start of time)
            lo_rows = max(lo, int(sides[side].first.view.min()))
            hi_rows = min(hi, int(sides[side].last.view.max()))
            if lo_rows > hi_rows:
                continue
            after = 1 if self.differences else 0
            self._ensure(lo_rows, hi_rows + after, max(self.groups.n_slots, 1))
            columns = []
            for column in self.fusion.columns:
                if column.side == side:
                    columns += [rows.view(f"v:{column.name}"), rows.view(f"m:{column.name}")]
            arguments = (
                rows.view("first"),
                rows.view("last"),
                rows.view("origin"),
                rows.view("matched"),
                np.int64(rows.width),
                np.int64(rows.size),
                np.int64(lo),
                np.int64(hi),
                *columns,
                rows.view("lonely"),
                *self.block,
                self.lock,
                np.int64(self.base),
                np.int64(self.windows),
                np.int64(self.group_capacity),
            )
            self.kernels._launch(f"fused_lonely_{side}", rows.size, *arguments)
            self.kernels.fused_launches += 1

    def flags_to_host(self, sides: list) -> None:
        """The kept sides' matched flags, set on the device, into the driver's rows (before
        a snapshot takes them)."""
        self._sync(sides)
        for side in sides:
            self.rows[side.index].matched_to_host(side)

    # -- firing ---------------------------------------------------------------------------

    def max_window(self) -> int | None:
        return self.base + self.windows - 1 if self.windows else None

    def fire(self, lo: int, upto: int, schema: pa.Schema) -> tuple[pa.RecordBatch | None, int]:
        """The window results of windows up to `upto` (window order, then group slot), the
        fired rows of the block copied back and dropped from it."""
        if not self.windows or upto < self.base:
            return None, 0
        n = min(upto - self.base + 1, self.windows)
        n_groups = max(self.groups.n_slots, 1)
        host = pinned.download([part[:n, :n_groups] for part in self.block])
        first_window = self.base
        self._drop(n)
        if self.differences:  # each window's cells: the running sums after its row
            if self.running.shape[1] < n_groups:
                grown = np.zeros(
                    (len(self.parts), max(n_groups, 2 * self.running.shape[1])), np.int64
                )
                grown[:, : self.running.shape[1]] = self.running
                self.running = grown
            for i, part in enumerate(host):
                part[...] = np.cumsum(part, axis=0) + self.running[i, :n_groups]
                self.running[i, :n_groups] = part[-1]
        windows, groups = np.nonzero(host[0] > 0)  # fields[0] counts the joined rows
        if not len(windows):
            return None, 0
        values, at = {}, 0
        for f in self.fields:
            count = len(f.kind.parts)
            values[f.name] = tuple(host[at + i][windows, groups] for i in range(count))
            at += count
        windows = windows.astype(np.int64) + first_window
        aggregates = finalize(self.node.aggregates, values)
        keys = self.groups.decode(groups.astype(np.int64))
        window = self.node.window
        start = windows * window.slide
        batch = window_result_batch(schema, keys, aggregates, start, start + window.size)
        return batch, len(windows)

    def _drop(self, n: int) -> None:
        """Drop the block's first n windows (fired)."""
        left = self.windows - n
        for (_, neutral), part in zip(self.parts, self.block, strict=True):
            if left:
                part[:left] = part[n : self.windows].copy()
            part[left : self.windows] = neutral
        self.base += n
        self.windows = left

    # -- size, snapshot -------------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        block = sum(int(p.nbytes) for p in self.block) + (
            0 if self.lock is None else self.lock.nbytes
        )
        rows = sum(r.nbytes for r in self.rows)
        return int(block) + rows + self.groups.nbytes + self.running.nbytes

    def to_arrays(self) -> dict[str, np.ndarray]:
        arrays = dict(self.groups.to_arrays("groups_"))
        arrays["fused_window_base"] = np.array([self.base, self.windows], np.int64)
        arrays["fused_running"] = self.running.copy()
        n_groups = max(self.groups.n_slots, 1)
        if self.windows:
            host = pinned.download([part[: self.windows, :n_groups] for part in self.block])
            for i, part in enumerate(host):
                arrays[f"fused_part_{i}"] = part
        return arrays

    def restore(self, arrays: dict[str, np.ndarray]) -> None:
        if "fused_window_base" not in arrays:
            raise DataError(
                "snapshot does not match this query: its join cells were kept on the host "
                "(restore it with the backend that took it)"
            )
        self.groups = self.kernels.key_map_from_arrays(self.groups.types, arrays, "groups_")
        self.rows = [DeviceRows.of_fusion(self.fusion, i) for i in (0, 1)]
        self.block, self.lock, self.windows, self.group_capacity = [], None, 0, 0
        self.running = arrays["fused_running"].copy()
        base, windows = (int(v) for v in arrays["fused_window_base"])
        if not windows:
            return
        n_groups = max(self.groups.n_slots, 1)
        self._ensure(base, base + windows - 1, n_groups)
        cp = device.cupy()
        for i, part in enumerate(self.block):
            saved = arrays[f"fused_part_{i}"]
            part[: saved.shape[0], : saved.shape[1]] = cp.asarray(saved)


__all__ = ["MAX_BLOCK_CELLS", "DeviceJoinCells", "DeviceRows"]
