"""The join operator: a backend-neutral driver of `WindowJoinExec` (joined rows) and of
`JoinAggregateExec` over it (aggregated joined rows), over `JoinKernels`.

It reads both inputs itself (`process(batch, input=0|1)`, input i is the plan's i-th side)
and implements docs/semantics.md, "Joins":

- Each arriving row gets the windows it contributes to, `[first, last]` (those with
  `window_end > W` on arrival; none left: late, counted per input), and its key slot in the
  join's key table (shared by both sides; -1 for a NULL key, which matches nothing).
- Eager, symmetric: the rows of a batch are joined at once with every stored row of the other
  side (`kernels.match`, hash or sort-merge as the plan says), so each pair is found exactly
  once, whatever the slide. A pair shares the windows `[max(first), min(last)]`: the windows
  covering both rows' panes that both contribute to. It is credited to each of them
  (`kernels.expand`) instead of being joined again per window: pane-pair crediting.
- Rows at firing (`rows=firing`, an inner windowed join on a backend with
  `kernels.join_windows`, the CPU; `ph.rows_at_arrival_reason` says when not): nothing is
  joined on arrival; each firing joins the stored rows of its windows, window by window
  (a row in each window [first, last] it contributed to), the residual checked on those
  pairs, and writes the output columns from them (join_output.py). No pair is kept.
- Rows at arrival (`rows=arrival`: outer joins, a static table): the pairs wait, with their
  window range, until their windows fire; each firing emits the joined rows of its windows
  in window order (`kernels.expand` over the pending pairs: count, scan, write), gathered
  from the stored rows.
- Device-resident rows (a backend's kernels offering `device_rows(node)`, the GPU's where
  `codegen_join.device_rows` applies): the backend joins each batch, keeps the pending pairs
  and gathers the fired rows' columns itself (`_join_device_rows`, `fire`); the driver still
  stores the rows it frees, snapshots and fires by.
- Aggregated: the pairs' aggregate arguments are evaluated once per pair and their partials
  combined into (window, group) cells right away (the state kinds' scatter; `JoinCells` in
  join_cells.py: every window of the pair, or, for counts and integer sums, two difference
  cells whatever the slide); a firing finalizes the cells of its windows. Joined rows are
  never materialised as output.
- Device-fused (a backend's kernels offering `device_cells(node)`, the GPU's where
  `codegen_join.device_fusion` applies): a batch is joined and aggregated in one kernel into
  cells the backend keeps (`_join_fused`); no pair comes back to the driver, which still
  stores the rows (payload, slots, window ranges) it frees, snapshots and fires by.
- Factorised (`JoinAggregateExec.factorised`, join_factor.py): no rows are stored and no
  pairs formed; each side's batches go to that side's window aggregation, judged late
  against the query's watermark, and a firing combines the two sides' fired (window, key)
  cells. Watermarks, firing and metrics are the driver's, as for every join.
- Outer joins keep a matched flag per (row, window) of a kept side; a firing adds the rows
  unmatched in its windows with the other side NULL.
- A static table (inputs under its name, all read before the first stream batch) covers
  every window; without a window each stream row is joined and emitted as its batch arrives.
- State is bounded by the watermark: rows whose last window has fired are freed (in arrival
  order, whole batches at a time), pending pairs and cells of fired windows dropped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from sqlglot import exp

from mangonel.catalog.types import SqlType
from mangonel.compiler import physical as ph
from mangonel.errors import DataError
from mangonel.runtime.host.arrays import to_mask, to_values
from mangonel.runtime.operators.base import as_record_batch
from mangonel.runtime.operators.conform import BatchConformer, event_time_range
from mangonel.runtime.operators.join_cells import JoinCells, groups_follow_join_keys
from mangonel.runtime.operators.join_factor import FactorisedJoin, standalone_step_kernels
from mangonel.runtime.operators.join_kernels import JoinKernels
from mangonel.runtime.operators.join_output import (
    gather,
    joined_at_firing,
    window_bounds,
    window_runs,
)
from mangonel.runtime.operators.join_sides import Grow, JoinSide, TableConformer
from mangonel.runtime.operators.join_snapshot import restore_join, snapshot_join
from mangonel.runtime.operators.join_stats import choose_algorithm
from mangonel.runtime.operators.late_rows import WINDOW_CLOSED, LateRows
from mangonel.runtime.operators.protocol import OperatorMetrics
from mangonel.runtime.operators.registry import StepKernels

# The window range of a static table's rows: every window.
ALL_FIRST = -(2**62)
ALL_LAST = 2**62


@dataclass(frozen=True)
class JoinMetrics(OperatorMetrics):
    """OperatorMetrics of a join query (tuples_in counts both streams; late_tuples_dropped
    their sum; a stream joined with itself counts once), with the late rows of each stream
    side by name (a self-join's two sides: the same name and count)."""

    late_by_input: tuple[tuple[str, int], ...] = ()
    # rows read from each input by name (late and NULL-time rows included, as tuples_in)
    tuples_by_input: tuple[tuple[str, int], ...] = ()
    # batches joined by each algorithm ("auto" chooses per batch from key statistics)
    batches_by_algorithm: tuple[tuple[str, int], ...] = ()
    # a join without aggregation: seconds spent building the fired rows (expansion, gather,
    # the copy back from the device, the Arrow arrays) and the bytes of those rows
    rows_output_seconds: float = 0.0
    rows_output_bytes: int = 0


class JoinOperator:
    """The driver of one join (see the module docstring). `node`: a WindowJoinExec, or the
    JoinAggregateExec above one; `kernels`: the backend's JoinKernels."""

    stateful = True

    def __init__(
        self,
        node: ph.WindowJoinExec | ph.JoinAggregateExec,
        kernels: JoinKernels,
        step_kernels: StepKernels | None = None,
    ) -> None:
        self.kernels = kernels
        self.aggregate = node if isinstance(node, ph.JoinAggregateExec) else None
        join = node.join if isinstance(node, ph.JoinAggregateExec) else node
        self.join = join
        self.window = join.window
        self.column_types = {c.name: c.type for c in join.columns}
        kind = join.kind
        self.sides = [self._side(join, i, (kind.keeps_left, kind.keeps_right)[i]) for i in (0, 1)]
        # a stream joined with itself: each batch arrives on both sides (the runner's
        # routes), judged against one watermark (the binder requires one delay), so both
        # find the same rows late: the stream's late rows and counts are the left side's
        self.self_join = not any(s.is_table for s in self.sides) and (
            self.sides[0].name.lower() == self.sides[1].name.lower()
        )
        self.counted = [s for s in self.sides if not s.is_table][: 1 if self.self_join else 2]
        # each stream's late rows (late_rows.py), kept only when the runner asks
        self.late_rows = [LateRows(side.name, tagged=True) for side in self.sides]
        self.late_sinks = tuple(self.late_rows[side.index] for side in self.counted)
        key_types = tuple(
            SqlType.STRING if k.type is SqlType.STRING else SqlType.BIGINT for k in join.left_keys
        )
        self.keys = kernels.new_key_map(key_types)
        self.fired = -(2**62)  # the last window fired
        # Driven from outside (inside Spark, `drive_watermark`): the query's watermark is
        # given through on_watermark instead of being derived from each stream's batches.
        self.external = False
        self.external_watermark: int | None = None
        self.batches_by_algorithm: dict[str, int] = {}
        self.windows_fired = 0
        self.rows_out = 0
        self.rows_output_seconds = 0.0
        self.rows_output_bytes = 0
        self.residual_columns = _columns_of(join.residual)
        self.factorised = False
        self.device_fused = False
        self.device_rows = None
        self.at_firing = False
        if self.aggregate is not None:
            self.credit_columns = _columns_of(
                join.where,
                *(f.argument for f in self.aggregate.fields),
                *(exp.column(k.name) for k in self.aggregate.keys),
            )
            self.schema = window_result_schema_of(self.aggregate)
            # factorised (the planner's choice): per-side counts and partials, no pairs
            self.factorised = self.aggregate.factorised is not None
            # device-fused (a backend's `device_cells`, where it fuses this aggregation):
            # the kernels join and aggregate each batch, the cells stay on the device
            device_cells = getattr(kernels, "device_cells", None)
            fused = None if self.factorised or device_cells is None else device_cells(node)
            self.device_fused = fused is not None
            if self.factorised:
                # the sides' window aggregations run on their placements' backends
                self.cells = FactorisedJoin(
                    self.aggregate, kernels, step_kernels or standalone_step_kernels()
                )
                for sink, window in zip(self.late_rows, self.cells.sides, strict=True):
                    # the side's window aggregation judges lateness: into the join's sink
                    window.late_rows = sink
                    window.late_sinks = (sink,)
            else:
                self.cells = fused or JoinCells(self.aggregate, kernels)
            self.group_columns = frozenset(k.name for k in self.aggregate.keys)
            # groups from the pairs' join key slots: gather only what WHERE and the
            # aggregates read
            self.groups_by_key = groups_follow_join_keys(self.aggregate)
            self.value_columns = _columns_of(
                join.where, *(f.argument for f in self.aggregate.fields)
            )
        else:
            row_columns = ph.join_row_columns(join)
            self.schema = pa.schema([pa.field(name, t.info.arrow) for name, t in row_columns])
            # the joined columns emitted (what the SELECT list reads), and what a firing
            # gathers for them and WHERE
            self.emitted = tuple(name for name, _ in row_columns if name in self.column_types)
            self.row_gather = frozenset(self.emitted) | _columns_of(join.where)
            self.pending = {name: Grow() for name in ("left", "right", "lo", "hi")}
            # device-resident rows (a backend's `device_rows`): pairs and output on the device
            device_rows = getattr(kernels, "device_rows", None)
            self.device_rows = None if device_rows is None else device_rows(join)
            # rows=firing (EXPLAIN; `ph.rows_at_arrival_reason`): no pair is found or kept
            # as rows arrive; each firing joins its windows' stored rows (join_output.py)
            self.at_firing = (
                self.device_rows is None
                and hasattr(kernels, "join_windows")
                and ph.rows_at_arrival_reason(join) is None
            )

    def _side(self, join: ph.WindowJoinExec, index: int, keeps: bool) -> JoinSide:
        scan = join.children[index]
        keys = join.left_keys if index == 0 else join.right_keys
        prefix = join.aliases[index] + "."
        is_table = isinstance(scan, ph.TableScanExec)
        window = join.window
        max_windows = 1 if window is None else -(-window.size // window.slide)
        side = JoinSide(
            index=index,
            alias=join.aliases[index],
            name=scan.table.name if is_table else scan.stream.name,
            is_table=is_table,
            scan=scan,
            keys=tuple(k.name[len(prefix) :] for k in keys),
            delay=join.watermark_delays[index] or 0,
            keeps_unmatched=keeps,
            max_windows=max_windows,
            seen=is_table,
        )
        if keeps and not is_table and window is not None:
            side.matched = Grow(np.uint8, max_windows)
        if is_table:
            side.conformer = TableConformer(scan)  # type: ignore[attr-defined]
        else:
            limits = event_time_range(window) if window is not None else (-(2**63), 2**63 - 1)
            side.conformer = BatchConformer(  # type: ignore[attr-defined]
                scan.columns, scan.stream.name, scan.stream.event_time, limits
            )
        return side

    # -- the watermark --------------------------------------------------------------------

    def drive_watermark(self) -> None:
        """Take the query's watermark from `on_watermark` only (a runner that sees part of
        the rows, as a Spark key bucket does, while the watermark is global): batches are
        joined against the last watermark given, and windows fire only in `on_watermark`."""
        self.external = True

    def watermark(self) -> int | None:
        """The query's: the minimum of the streams', None (minus infinity) until every
        stream has had a batch; driven from outside: the last one given."""
        if self.external:
            return self.external_watermark
        values = [s.watermark for s in self.sides if not s.is_table]
        if not all(s.seen for s in self.sides) or any(v is None for v in values):
            return None
        return min(values)  # type: ignore[type-var]

    def _last_closed(self, watermark: int | None) -> int:
        """The last window with window_end <= watermark."""
        if watermark is None or self.window is None:
            return -(2**62)
        return (watermark - self.window.size) // self.window.slide

    # -- input ----------------------------------------------------------------------------

    @property
    def prefetch_depth(self) -> int:
        """Arrivals the runner may name ahead (`prefetch`): the factorised join's sides' (two
        with the GPU's copy worker); one for the other forms, which ignore the hint."""
        return self.cells.prefetch_depth if self.factorised else 1

    def prefetch(self, batch: pa.RecordBatch, input: int = 0) -> None:
        """The hint that `batch` is an arrival to come, on input `input`: a factorised join
        stages it (`FactorisedJoin.prefetch`); the other forms keep no staged input."""
        side = self.sides[input]
        if self.factorised and not side.is_table:
            self.cells.prefetch(side.index, batch)

    def process(self, batch: pa.RecordBatch, input: int = 0) -> list[pa.RecordBatch]:
        side = self.sides[input]
        batch = as_record_batch(batch)
        if side.is_table:
            self._load_table(side, batch)
            return []
        if self.factorised:  # the side's window aggregation takes the rows: no pairs
            after = None if self.external else (lambda top: self._watermark_after(side, top))
            self.cells.add(side.index, batch, self.watermark(), after)
            self._count_factorised(side)
            side.seen = True
            return self._advance(side)
        conformed = self._conformed(side, batch)
        n = conformed.num_rows
        side.tuples_in += n
        ts, has_ts = to_values(conformed.column(side.scan.stream.event_time), np.int64)
        side.null_time += int(n - has_ts.sum())
        window = self.window
        if window is None:
            first = last = origin = np.zeros(n, np.int64)
            keep = has_ts
        else:
            watermark = self.watermark()
            # one pass: the kept rows' window ranges, compacted; the late count; max time;
            # written where the side stores them (`append` then copies nothing)
            room = tuple(g.reserve(n) for g in (side.first, side.last, side.origin))
            keep, first, last, origin, late, top = self.kernels.window_ranges(
                ts, has_ts, window.size, window.slide, self._last_closed(watermark), room
            )
            side.late += late
            sink = self.late_rows[side.index]
            if sink.keep:  # the batch as given: conformance keeps its rows and their order
                sink.arriving(batch)
                sink.judged(has_ts & ~keep, WINDOW_CLOSED, watermark)
                sink.done()
            if top is not None:
                side.max_ts = top if side.max_ts is None else max(side.max_ts, top)
        if window is None:
            first, last, origin = first[keep], last[keep], origin[keep]
        rows = conformed.filter(pa.array(keep)) if len(first) < n else conformed
        slots = self._slots(side, rows)
        out: list[pa.RecordBatch] = []
        if window is None:
            out = self._static_rows(side, rows, slots)
            side.seen = True
        else:
            if self.factorised:  # no rows kept, no pairs formed
                self.cells.credit(side.index, rows, slots, first, last)
            else:
                start = side.base + side.rows
                side.append(rows, slots, first, last, origin)
                if self.device_fused:
                    self._join_fused(side, slots)
                elif self.device_rows is not None:
                    self._join_device_rows(side, slots)
                elif not self.at_firing:  # at firing: the rows wait, stored, unjoined
                    self._join_new(side, start, slots, first, last)
            side.seen = True
            out = self._advance(side)
        return out

    def _advance(self, side: JoinSide) -> list[pa.RecordBatch]:
        """After a batch of `side`: its watermark, then fire what the query's lets close."""
        if self.external:
            return []
        if side.max_ts is not None:
            candidate = side.max_ts - side.delay
            if side.watermark is None or candidate > side.watermark:
                side.watermark = candidate
        return self._fire(self._last_closed(self.watermark()))

    def _watermark_after(self, side: JoinSide, max_ts: int | None) -> int | None:
        """The query's watermark once a batch of `side` with this max event time is in
        (what `_advance` will set), None while it stays minus infinity."""
        watermark = side.watermark
        top = side.max_ts
        if max_ts is not None and (top is None or max_ts > top):
            top = max_ts
        if top is not None and (watermark is None or top - side.delay > watermark):
            watermark = top - side.delay
        values = [watermark if s is side else s.watermark for s in self.sides if not s.is_table]
        if not all(s.seen or s is side for s in self.sides) or any(v is None for v in values):
            return None
        return min(values)  # type: ignore[type-var]

    def _count_factorised(self, side: JoinSide) -> None:
        """The input counters of a side kept by its window aggregation (factorised)."""
        window = self.cells.sides[side.index]
        side.tuples_in = window.tuples_in
        side.late = window.late
        side.null_time = window.null_event_time + window.out_of_range
        side.max_ts = window.max_event_time

    def _conformed(self, side: JoinSide, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The batch as the side stores it: the columns the query reads, declared types
        (event times out of range are made NULL, and dropped as NULL times are)."""
        conformer = side.conformer  # type: ignore[attr-defined]
        conformed, _ = conformer(batch)
        schema = conformer.schema
        arrays = []
        for f in schema:
            array = conformed.column(f.name)
            arrays.append(array if array.type == f.type else array.cast(f.type))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    def _load_table(self, side: JoinSide, batch: pa.RecordBatch) -> None:
        if any(not s.is_table and s.seen for s in self.sides):
            raise DataError(
                f"table {side.name!r} arrived after the first stream batch: a join reads the "
                "table as it is when the query starts (Query.run reads its batches first)"
            )
        rows = side.conformer(batch)  # type: ignore[attr-defined]
        n = rows.num_rows
        all_first = np.full(n, ALL_FIRST, np.int64)
        all_last = np.full(n, ALL_LAST, np.int64)
        side.append(rows, self._slots(side, rows), all_first, all_last, all_first)

    def _slots(self, side: JoinSide, rows: pa.RecordBatch) -> np.ndarray:
        columns = [rows.column(rows.schema.get_field_index(name)) for name in side.keys]
        columns = [
            c.cast(pa.int64()) if pa.types.is_integer(c.type) and c.type != pa.int64() else c
            for c in columns
        ]
        include = np.ones(rows.num_rows, np.bool_)
        for column in columns:
            if column.null_count:
                include &= ~np.asarray(column.is_null())
        return self.keys.map_columns(columns, include)

    # -- joining --------------------------------------------------------------------------

    def _join_new(self, side: JoinSide, start: int, slots, first, last) -> None:
        """Join the rows just stored on `side` (global ids from `start`) with the other
        side's stored rows; credit or keep the pairs."""
        other = self.sides[1 - side.index]
        count = len(slots)
        if not count or not other.rows:
            return
        algorithm = self._algorithm(side, other)
        self.batches_by_algorithm[algorithm] = self.batches_by_algorithm.get(algorithm, 0) + 1
        mine, theirs = self.kernels.match(
            algorithm,
            slots,
            first,
            last,
            other.slots.view,
            other.first.view,
            other.last.view,
        )
        if not len(mine):
            return
        # pairs that go straight to the pending ones are written where they will be kept
        straight = self.aggregate is None and self.join.residual is None
        room = tuple(self.pending[n].reserve(len(mine)) for n in self.pending) if straight else None
        left, right, lo, hi = self.kernels.pair_ranges(
            mine,
            theirs,
            first,
            last,
            other.first.view,
            other.last.view,
            (start, other.base, side.index == 0),
            room,
        )
        key_slots = slots[mine] if self.aggregate is not None else None
        if self.join.residual is not None:
            joined = self._gather(left, right, self.residual_columns)
            keep = to_mask(
                self.kernels.evaluate(self.join.residual, self.column_types, joined, len(left))
            )
            left, right, lo, hi = left[keep], right[keep], lo[keep], hi[keep]
            key_slots = None if key_slots is None else key_slots[keep]
        for index, ids in ((0, left), (1, right)):
            keeper = self.sides[index]
            if keeper.matched is not None and len(ids):
                local = ids - keeper.base
                self.kernels.mark_matched(keeper.matched.view, local, lo, hi, keeper.origin.view)
        self._credit(left, right, lo, hi, key_slots)

    def _join_fused(self, side: JoinSide, slots: np.ndarray) -> None:
        """Join and aggregate the rows just stored on `side` on the device (the backend's
        device-fused cells): no pair comes back."""
        other = self.sides[1 - side.index]
        if len(slots) and other.rows:
            algorithm = self._algorithm(side, other)
            self.batches_by_algorithm[algorithm] = self.batches_by_algorithm.get(algorithm, 0) + 1
        else:
            algorithm = self.join.algorithm
        self.cells.join(self.sides, side.index, len(slots), algorithm, self.keys.n_slots)

    def _join_device_rows(self, side: JoinSide, slots: np.ndarray) -> None:
        """Join the rows just stored on `side` on the device; the pairs stay there."""
        other = self.sides[1 - side.index]
        algorithm = self.join.algorithm
        if len(slots) and other.rows:
            algorithm = self._algorithm(side, other)
            self.batches_by_algorithm[algorithm] = self.batches_by_algorithm.get(algorithm, 0) + 1
        self.device_rows.join(self.sides, side.index, len(slots), algorithm, self.keys.n_slots)

    def _algorithm(self, side: JoinSide, other: JoinSide) -> str:
        """The plan's algorithm, or (join_algorithm "auto") the choice from the sampled key
        statistics of the batch just stored on `side` and the other side's stored batches
        (join_stats.py): sort-merge when the most frequent key holds over SKEWED_KEYS times
        an even share of them (skew: one hash bucket holds most pairs), else hash."""
        if not self.join.adaptive:
            return self.join.algorithm
        batch = (side.key_samples[-1], side.batch_rows[-1])
        chosen = choose_algorithm(batch, other.sampled_batches())
        return self.join.algorithm if chosen is None else chosen

    def _credit(self, left, right, lo, hi, key_slots=None) -> None:  # noqa: ANN001
        """Joined rows (global ids, -1: the NULL side) sharing windows [lo, hi];
        `key_slots`: their join key slot (matched pairs; None for outer rows)."""
        if not len(left):
            return
        if self.aggregate is None:
            for name, values in zip(self.pending, (left, right, lo, hi), strict=True):
                self.pending[name].extend(values)
            return
        by_key = self.groups_by_key and key_slots is not None
        names = self.value_columns if by_key else self.credit_columns
        joined = self._gather(left, right, names)
        keep = self._where(joined, len(left))
        if keep is not None:
            joined = {name: column.filter(pa.array(keep)) for name, column in joined.items()}
            lo, hi, left, right = lo[keep], hi[keep], left[keep], right[keep]
            if by_key:
                key_slots = key_slots[keep]
        if not len(lo):
            return
        groups = None
        if by_key:
            groups = self.cells.groups_by_key(
                key_slots, lambda at: self._gather(left[at], right[at], self.group_columns)
            )
        self.cells.credit(joined, lo, hi, groups)

    def _where(self, joined: dict[str, pa.Array], n: int) -> np.ndarray | None:
        if self.join.where is None:
            return None
        return to_mask(self.kernels.evaluate(self.join.where, self.column_types, joined, n))

    def _gather(
        self, left: np.ndarray, right: np.ndarray, names: frozenset[str] | None = None
    ) -> dict[str, pa.Array]:
        """The joined rows' columns (`alias.column`; `names`: only those) at global row
        ids, NULL where an id is -1."""
        return gather(self.sides, left - self.sides[0].base, right - self.sides[1].base, names)

    def _static_rows(self, side: JoinSide, rows: pa.RecordBatch, slots) -> list[pa.RecordBatch]:
        """A stream joined with a table, no window: join the batch and emit it now."""
        other = self.sides[1 - side.index]
        start = side.base + side.rows
        zeros = np.zeros(len(slots), np.int64)
        side.append(rows, slots, zeros, zeros, zeros)
        mine, theirs = self.kernels.match(
            self.join.algorithm,
            slots,
            zeros,
            zeros,
            other.slots.view,
            other.first.view,
            other.last.view,
        )
        mine_ids, theirs_ids = mine + start, theirs + other.base
        if self.join.residual is not None and len(mine):
            left, right = (mine_ids, theirs_ids) if side.index == 0 else (theirs_ids, mine_ids)
            joined = self._gather(left, right, self.residual_columns)
            keep = to_mask(
                self.kernels.evaluate(self.join.residual, self.column_types, joined, len(left))
            )
            mine_ids, theirs_ids = mine_ids[keep], theirs_ids[keep]
        if side.keeps_unmatched:
            matched = np.zeros(len(slots), np.bool_)
            matched[mine_ids - start] = True
            lonely = np.flatnonzero(~matched) + start
            mine_ids = np.concatenate([mine_ids, lonely])
            theirs_ids = np.concatenate([theirs_ids, np.full(len(lonely), -1, np.int64)])
        left, right = (mine_ids, theirs_ids) if side.index == 0 else (theirs_ids, mine_ids)
        out = self._row_batch(left - self.sides[0].base, right - self.sides[1].base, None)
        side.free_fired(ALL_LAST)  # nothing of a stream row is kept after its batch
        return out

    # -- firing ---------------------------------------------------------------------------

    def _fire(self, upto: int) -> list[pa.RecordBatch]:
        """Fire the windows after the last fired one up to `upto`, in window order."""
        if upto <= self.fired:
            return []
        lo = self.fired + 1
        self._unmatched(lo, upto)
        if self.aggregate is None:
            out = self._fire_rows(lo, upto)
        else:
            out = self._fire_cells(lo, upto)
        self.fired = upto
        for side in self.sides:
            if not side.is_table:
                side.free_fired(upto)
        return out

    def _unmatched(self, lo: int, hi: int) -> None:
        """Credit the rows of kept sides unmatched in windows lo..hi, other side NULL."""
        if self.device_fused:  # the matched flags and cells are the backend's
            self.cells.credit_unmatched(self.sides, lo, hi)
            return
        if self.device_rows is not None:  # the matched flags and pending pairs too
            self.device_rows.credit_unmatched(self.sides, lo, hi)
            return
        for side in self.sides:
            if side.matched is None or not side.rows:
                continue
            rows, windows = self.kernels.expand(side.first.view, side.last.view, lo, hi)
            if not len(rows):
                continue
            flags = side.matched.view[rows, windows - side.origin.view[rows]]
            lonely = flags == 0
            rows, windows = rows[lonely], windows[lonely]
            ids = rows + side.base
            none = np.full(len(ids), -1, np.int64)
            left, right = (ids, none) if side.index == 0 else (none, ids)
            self._credit(left, right, windows, windows)

    def _fire_rows(self, lo: int, hi: int) -> list[pa.RecordBatch]:
        started = time.perf_counter()
        out = self._fired_rows(lo, hi)
        self.rows_output_seconds += time.perf_counter() - started
        self.rows_output_bytes += sum(batch.nbytes for batch in out)
        return out

    def _fired_rows(self, lo: int, hi: int) -> list[pa.RecordBatch]:
        if self.device_rows is not None:
            out, windows = self.device_rows.fire(self.sides, lo, hi, self.schema)
            self.windows_fired += windows
            return out
        if self.at_firing:
            residual = None
            if self.join.residual is not None:
                residual = self._residual_keeps
            if all(side.rows for side in self.sides):  # firings joined (by key slot)
                self.batches_by_algorithm["hash"] = self.batches_by_algorithm.get("hash", 0) + 1
            left, right, runs = joined_at_firing(self.kernels, self.sides, lo, hi, residual)
            return self._row_batch(left, right, runs)
        pending = {name: grow.view for name, grow in self.pending.items()}
        entries, windows = self.kernels.expand(pending["lo"], pending["hi"], lo, hi)
        left = pending["left"][entries] - self.sides[0].base
        right = pending["right"][entries] - self.sides[1].base
        out = self._row_batch(left, right, window_runs(windows))
        alive = pending["hi"] > hi
        for _name, grow in self.pending.items():
            values = grow.view[alive].copy()
            grow.clear()
            grow.extend(values)
        return out

    def _residual_keeps(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """The mask of the pairs (local row ids) whose residual predicate is TRUE."""
        joined = gather(self.sides, left, right, self.residual_columns, outer=False)
        return to_mask(
            self.kernels.evaluate(self.join.residual, self.column_types, joined, len(left))
        )

    def _row_batch(self, left, right, runs) -> list[pa.RecordBatch]:  # noqa: ANN001
        """The output batch of joined rows at local row ids (negative: the NULL side) with
        their window runs (`join_output.window_runs`; None: no window), WHERE applied."""
        if not len(left):
            return []
        joined = gather(self.sides, left, right, self.row_gather, outer=not self.at_firing)
        arrays = [joined[name] for name in self.emitted]
        if runs is not None:
            self.windows_fired += len(runs[0])
            arrays += window_bounds(self.kernels, runs, self.window.size, self.window.slide)
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        keep = self._where(joined, len(left))
        if keep is not None:
            batch = batch.filter(pa.array(keep))
        return [batch] if batch.num_rows else []

    def _fire_cells(self, lo: int, upto: int) -> list[pa.RecordBatch]:
        batch, results = self.cells.fire(lo, upto, self.schema)
        self.windows_fired += results
        return [] if batch is None else [batch]

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        if not self.external:
            return []  # each stream's watermark comes from its own batches
        if self.external_watermark is None or watermark > self.external_watermark:
            self.external_watermark = watermark
        return self._fire(self._last_closed(self.external_watermark))

    def finish(self) -> list[pa.RecordBatch]:
        if self.window is None:
            return []
        ends = [s.last.view.max() for s in self.sides if not s.is_table and s.rows]
        if self.device_rows is not None and self.device_rows.max_window() is not None:
            ends.append(self.device_rows.max_window())
        elif self.aggregate is None and self.pending["hi"].size:
            ends.append(self.pending["hi"].view.max())
        if self.aggregate is not None and self.cells.max_window() is not None:
            ends.append(self.cells.max_window())
        return self._fire(int(max(ends))) if ends else []

    # -- metrics, snapshot ----------------------------------------------------------------

    def add_rows_out(self, rows: int) -> None:
        self.rows_out += rows

    def state_bytes(self) -> int:
        if self.factorised:  # no rows stored: both sides' window state and the combine's
            return self.cells.nbytes
        total = sum(side.nbytes() for side in self.sides) + self.keys.nbytes
        if self.device_rows is not None:
            total += self.device_rows.nbytes
        elif self.aggregate is None:
            total += sum(g.data.nbytes for g in self.pending.values())
        else:
            total += self.cells.nbytes
        return total

    def metrics(self) -> JoinMetrics:
        streams = [s for s in self.sides if not s.is_table]
        return JoinMetrics(
            tuples_in=sum(s.tuples_in for s in self.counted),
            late_tuples_dropped=sum(s.late for s in self.counted),
            null_event_time_dropped=sum(s.null_time for s in self.counted),
            windows_fired=self.windows_fired,
            rows_out=self.rows_out,
            state_bytes=self.state_bytes(),
            late_by_input=tuple((s.name, s.late) for s in streams),
            tuples_by_input=tuple((s.name, s.tuples_in) for s in streams),
            batches_by_algorithm=tuple(sorted(self.batches_by_algorithm.items())),
            rows_output_seconds=self.rows_output_seconds,
            rows_output_bytes=self.rows_output_bytes,
        )

    def snapshot(self) -> bytes:
        return snapshot_join(self)

    def restore(self, data: bytes) -> None:
        restore_join(self, data)


def _columns_of(*expressions: exp.Expression | None) -> frozenset[str]:
    """The joined-row columns the expressions read."""
    return frozenset(
        column.name
        for expression in expressions
        if expression is not None
        for column in expression.find_all(exp.Column)
    )


def window_result_schema_of(node: ph.JoinAggregateExec) -> pa.Schema:
    from mangonel.runtime.operators import project

    keys = [(k.name, k.type) for k in node.keys]
    return project.window_result_schema(keys, [a.result_type for a in node.aggregates])


def make_join_operator(kernels_factory):  # noqa: ANN001, ANN201 - a backend's JoinKernels class
    """The registry factory of WindowJoinExec / JoinAggregateExec for one backend."""

    def factory(node, input_schema, step_kernels):  # noqa: ANN001, ANN202
        return JoinOperator(node, kernels_factory(), step_kernels)

    return factory


__all__ = ["JoinMetrics", "JoinOperator", "make_join_operator"]
