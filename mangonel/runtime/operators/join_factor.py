"""The factorised join aggregation (`JoinAggregateExec.factorised`): joined pairs are never
formed, and each side is a pane-and-tree window aggregation.

The plan qualifies when the join is INNER, with no residual and no WHERE, grouped by join
key columns, and every aggregate reads one side only (`compiler.factorised.factorised_reason`). The
pairs of a join key in a window are then every row of that key on the left in the window
times every row of it on the right, so each side is a window aggregation grouped by its
join key columns (`compiler.factorised.factorised_sides`: COUNT(*) as `rows`, and the fields of the
aggregates reading that side), run by the window operator on its placements' backend
(`TimeWindowOperator`: panes of gcd(w, s), the aggregation tree at firing; on the GPU its
fused lift/merge kernels). A row costs one pane update whatever w/s is.

The join drives both sides (`FactorisedSide`): rows are judged late against the JOIN's
watermark W at arrival (a pane is late when its last window ended at or before W: exactly
the rows with no window left, docs/semantics.md "Joins"), and no side fires on its own
watermark or early inside a batch's merge. When W advances, both sides fire the windows
ending at or before it, returning raw partials per (window, key slot) (`_compute`), and
`FactorisedJoin.fire` combines them per (window, key):

- an inner join of the two sides' fired cells on (window, join key), keys compared as the
  join compares them (integers as int64, NULL matching nothing);
- COUNT(*) = n_l * n_r;  COUNT(x_l) = c_l * n_r;  SUM(x_l) = s_l * n_r (int64 wraps, as the
  pair path's sum of n_r copies does; double: s_l * n_r);  MIN/MAX(x_l) = min_l / max_l;
- keys of one GROUP BY group (a GROUP BY of part of a composite join key) combined with the
  field kinds' scatter; AVG finalized from the SUM and COUNT fields as everywhere else.

Results are in window order; inside a window, in the combine's order (one side's key slot
order, `JoinKernels.combine_cells`; docs/semantics.md leaves it unspecified), except for a
GROUP BY of part of a composite join key, ordered by group (first fired first).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from mangonel.catalog.types import SqlType
from mangonel.compiler import physical as ph
from mangonel.compiler.factorised import factorised_sides
from mangonel.errors import DataError
from mangonel.runtime.host.arrays import fixed_width_array, fixed_width_values, take_rows
from mangonel.runtime.operators import registry
from mangonel.runtime.operators.base import OperatorBase
from mangonel.runtime.operators.join_kernels import (
    LEFT,
    LEFT_SCALED,
    RIGHT,
    RIGHT_SCALED,
    ROWS,
    JoinKernels,
)
from mangonel.runtime.operators.registry import StepKernels
from mangonel.runtime.operators.results import finalize, window_ids_of, window_result_batch
from mangonel.runtime.operators.window import TimeWindowOperator, _Segment

WatermarkAfter = Callable[[int | None], int | None]
Values = dict[str, tuple[np.ndarray, ...]]


# a fired chunk with rows in fewer than 1 in SPARSE_CHUNK of its (window, key slot) cells
# keeps only those (with their slots): a firing's memory follows its cells with rows, as the
# window operator's own results do, not its keys times its windows
SPARSE_CHUNK = 2


@dataclass(frozen=True)
class FiredChunk:
    """Cells of one tree call, window-major: window `windows[i]` holds the next `widths[i]`
    cells of every value array; dense (`slots` None): one per key slot 0..widths[i]-1 (a
    slot without rows there has a row count of 0), as the tree wrote them; sparse: the
    cells with rows only, `slots` their key slots (ascending within a window)."""

    windows: np.ndarray
    widths: np.ndarray
    slots: np.ndarray | None
    values: Values


@dataclass(frozen=True)
class FiredGrid:
    """A side's fired chunks as one grid: window entry i holds cells `starts[i]` to
    `starts[i] + widths[i]` of every value array; their key slots are their positions from
    `starts[i]` where `slot_starts[i]` is -1 (dense), else `slots[slot_starts[i]:]`."""

    windows: np.ndarray
    starts: np.ndarray
    widths: np.ndarray
    slot_starts: np.ndarray
    slots: np.ndarray
    values: Values

    def parts(self, rows: str) -> tuple[np.ndarray, ...]:
        """(windows, starts, widths, slot starts, slots, row counts): what
        `JoinKernels.combine_cells` reads."""
        windows, starts, widths = self.windows, self.starts, self.widths
        return windows, starts, widths, self.slot_starts, self.slots, self.values[rows][0]

    @staticmethod
    def of(chunks: list[FiredChunk], fields: tuple[ph.StateField, ...]) -> FiredGrid:
        widths = np.concatenate([c.widths for c in chunks])
        starts = np.zeros(len(widths), np.int64)
        starts[1:] = np.cumsum(widths)[:-1]
        slot_starts, slots, taken = [], [], 0
        for chunk in chunks:
            if chunk.slots is None:
                slot_starts.append(np.full(len(chunk.widths), -1, np.int64))
                continue
            at = np.zeros(len(chunk.widths), np.int64)
            at[1:] = np.cumsum(chunk.widths)[:-1]
            slot_starts.append(at + taken)
            slots.append(chunk.slots)
            taken += len(chunk.slots)
        if len(chunks) == 1:  # one tree call: its arrays as they are
            values = chunks[0].values
        else:
            values = {
                f.name: tuple(
                    np.concatenate([c.values[f.name][i] for c in chunks])
                    for i in range(len(f.kind.parts))
                )
                for f in fields
            }
        return FiredGrid(
            np.concatenate([c.windows for c in chunks]),
            starts,
            widths,
            np.concatenate(slot_starts),
            np.concatenate(slots) if slots else np.zeros(0, np.int64),
            values,
        )


def standalone_step_kernels() -> StepKernels:
    """Kernels for a join operator built outside an `OperatorTree`: one kernels object per
    backend, made when a step first asks for it."""
    made: dict[str, object] = {}

    def kernels_of(backend: str):  # noqa: ANN202
        if backend not in made:
            made[backend] = registry.new_kernels(backend)
        return made[backend]

    return StepKernels((), "cpu", kernels_of)


class FactorisedSide(TimeWindowOperator):
    """One side's window aggregation, driven by the join: lateness against the watermark
    the join sets, firing only when the join says, raw partials out instead of results."""

    def __init__(self, node: ph.WindowAggregateExec, kernels: StepKernels) -> None:
        super().__init__(node, kernels)
        self._fired: list[FiredChunk] = []  # waiting for the join's combine
        self._join_watermark_after: WatermarkAfter | None = None
        # the join's next arrival (either side), staged while this side's kernels run
        self.stage_next_arrival: Callable[[], None] | None = None

    def _stage_deferred(self) -> None:
        if self.stage_next_arrival is not None:
            self.stage_next_arrival()

    def add(
        self,
        batch: pa.RecordBatch,
        watermark: int | None,
        watermark_after: WatermarkAfter | None = None,
    ) -> None:
        """Lift and merge one batch, rows judged late against the join's `watermark`.
        `watermark_after(max event time of the batch)`: the join's watermark once this batch
        is in (None: unknown, as when driven from outside); a large batch's chunked merge
        fires the windows it closes between chunks, and their cells wait in `_fired` for the
        join's firing right after the batch, which reaches them on both sides."""
        if watermark is not None and (self.watermark is None or watermark > self.watermark):
            self.watermark = watermark
        conformed, out_of_range = self._input(batch)
        self._join_watermark_after = watermark_after
        self._arriving(batch)
        try:
            self._process(conformed)
        finally:
            self._join_watermark_after = None
            self.late_rows.done()
        self._count_out_of_range(out_of_range)
        self._processed(batch)

    def _watermark_after(self, max_event_time: int | None) -> int | None:
        # the join's watermark after the batch, never this side's own
        if self._join_watermark_after is None:
            return None
        return self._join_watermark_after(max_event_time)

    def fire_cells(self, upto: int) -> FiredGrid | None:
        """The raw partials of the (window, key slot) cells of the windows up to `upto` that
        the window operator computes (those with rows in a pane they cover), as one grid;
        None if there are none."""
        end = upto * self.spec.slide + self.spec.size  # the window's end: W at least this
        if self.watermark is None or end > self.watermark:
            self.watermark = end
        self._fire(final=False)
        fired, self._fired = self._fired, []  # a chunked merge's early cells come first
        return FiredGrid.of(fired, self.fields) if fired else None

    def _compute(self, segment: _Segment, runs: list[tuple[int, int]], n_keys: int):
        """The window operator's values of `runs` (every key slot, window-major), kept raw
        (not finalized) for the join: dense, empty cells included (the join's match skips
        them as it reads), unless most cells are empty (`SPARSE_CHUNK`)."""
        if not n_keys:
            return []
        values = self._window_values(segment, runs, n_keys)
        windows = window_ids_of(runs)
        rows = values[self.fields[0].name][0]
        filled = int(np.count_nonzero(rows))  # row counts: never negative
        if filled * SPARSE_CHUNK >= len(rows):
            widths = np.full(len(windows), n_keys, np.int64)
            self._fired.append(FiredChunk(windows, widths, None, values))
        elif filled:
            selected = np.flatnonzero(rows)
            number, slots = np.divmod(selected, n_keys)
            widths = np.bincount(number, minlength=len(windows))
            kept = {name: tuple(part[selected] for part in parts) for name, parts in values.items()}
            self._fired.append(FiredChunk(windows[widths > 0], widths[widths > 0], slots, kept))
        return []

    def max_window(self) -> int | None:
        return self.segments[-1].last // self.panes_per_slide if self.segments else None


class FactorisedJoin:
    """Both sides' window aggregations and the combine of their fired cells (see the module
    docstring). `kernels`: the join's (host) JoinKernels, for the combine's key maps and
    scatters; `step_kernels`: the tree's kernels, by backend, for the sides' placements."""

    def __init__(
        self, node: ph.JoinAggregateExec, kernels: JoinKernels, step_kernels: StepKernels
    ) -> None:
        self.node = node
        self.kernels = kernels
        join = node.join
        self.sides = tuple(
            FactorisedSide(
                side, StepKernels(side.placements, side.backend, step_kernels.kernels_of)
            )
            for side in factorised_sides(node)
        )
        # the side each join field reads (None: COUNT(*), the joined rows)
        self.side_of: dict[str, int | None] = {f.name: None for f in node.fields}
        for index, side in enumerate(self.sides):
            for f in side.fields[1:]:
                self.side_of[f.name] = index
        # keys compare as the join's key map does: integers as BIGINT, strings as strings
        self.key_types = tuple(
            SqlType.STRING if k.type is SqlType.STRING else SqlType.BIGINT for k in join.left_keys
        )
        # where each GROUP BY column is among the join key columns
        left = [k.name for k in join.left_keys]
        right = [k.name for k in join.right_keys]
        self.group_positions = [
            left.index(k.name) if k.name in left else right.index(k.name) for k in node.keys
        ]
        self.groups = kernels.new_key_map(tuple(k.type for k in node.keys))
        self._combine_ops()
        # GROUP BY every join key column: one group per join key, nothing to combine
        self.groups_are_keys = sorted(self.group_positions) == list(range(len(left)))
        # the next arrival (`prefetch`), staged while either side's kernels run
        self._next_arrival: tuple[int, pa.RecordBatch | None] = (0, None)
        for side in self.sides:
            side.stage_next_arrival = self._stage_next_arrival
        self._reset_key_ids()

    def _reset_key_ids(self) -> None:
        """The join key ids shared by both sides (`_key_ids`) and their groups: derived
        from the sides' key maps and `groups` when needed, so not part of a snapshot."""
        self.key_ids = self.kernels.new_key_map(self.key_types)
        self.ids_of_slot = [np.zeros(0, np.int64), np.zeros(0, np.int64)]
        self.group_of_id = np.zeros(0, np.int64)
        self._group_columns: list[pa.Array] = []  # every group's key columns, by slot
        self._identity = np.zeros(0, np.int64)  # `_group_slots`

    # -- input ----------------------------------------------------------------------------

    def add(
        self,
        index: int,
        batch: pa.RecordBatch,
        watermark: int | None,
        watermark_after: WatermarkAfter | None = None,
    ) -> None:
        self.sides[index].add(batch, watermark, watermark_after)

    @property
    def prefetch_depth(self) -> int:
        """Arrivals the runner may name ahead of the one processed: two where the sides'
        kernels stage in the background (the GPU's copy worker, shared by both sides), as a
        window aggregation's runner names them (`TimeWindowOperator.prefetch_depth`)."""
        return max(side.prefetch_depth for side in self.sides)

    def prefetch(self, index: int, batch: pa.RecordBatch) -> None:
        """`batch` is an arrival to come, for side `index`: it is conformed and staged (on
        the GPU: its host copy pass and upload). Where the side's kernels stage in the
        background it goes to the copy worker now, beside the whole of the current arrival's
        work (its merge, the join's firing); else it is staged while the current arrival's
        kernels run, on whichever side that arrival is (`FactorisedSide._stage_deferred`)."""
        side = self.sides[index]
        if side.stages_in_background:
            OperatorBase.prefetch(side, batch)
            return
        self._next_arrival = (index, batch)

    def _stage_next_arrival(self) -> None:
        index, batch = self._next_arrival
        self._next_arrival = (index, None)
        if batch is not None:
            OperatorBase.prefetch(self.sides[index], batch)

    def max_window(self) -> int | None:
        windows = [w for w in (s.max_window() for s in self.sides) if w is not None]
        return max(windows) if windows else None

    # -- firing ---------------------------------------------------------------------------

    def _combine_ops(self) -> None:
        """What each field part of a result is (`JoinKernels.combine_cells`' ops):
        COUNT(*) = n_l * n_r; a side's counts and sums times the other side's rows (int64
        products wrap mod 2^64, as adding n copies does; a double sum times n as a double);
        the rest (MIN, MAX) as the side holds them. `_values_read[side]`: the (field, part)
        of that side's values the ops read, by index."""
        self._values_read: tuple[list[tuple[str, int]], list[tuple[str, int]]] = ([], [])
        ops = []
        for f in self.node.fields:
            side = self.side_of[f.name]
            if side is None:  # COUNT(*): every pair of the key in the window
                ops.append((ROWS, 0))
                continue
            if f.kind.name in ("count", "sum"):
                name = (LEFT_SCALED, RIGHT_SCALED)[side]
            else:
                name = (LEFT, RIGHT)[side]
            for part in range(len(f.kind.parts)):
                ops.append((name, len(self._values_read[side])))
                self._values_read[side].append((f.name, part))
        self._ops = tuple(ops)

    def fire(self, lo: int, upto: int, schema: pa.Schema) -> tuple[pa.RecordBatch | None, int]:
        """The window results of windows up to `upto` in window order (inside a window, as
        the combine writes them); and how many (window, group) results there are. Both sides
        fire."""
        left, right = (side.fire_cells(upto) for side in self.sides)
        if left is None or right is None:
            return None, 0
        rows = self.node.fields[0].name
        grids = (left.parts(rows), self._slot_ids(0), right.parts(rows), self._slot_ids(1))
        self._assign_groups(grids)
        sides_values = tuple(
            tuple(grid.values[name][part] for name, part in read)
            for grid, read in zip((left, right), self._values_read, strict=True)
        )
        window = self.node.window
        columns = self._decoded_groups()
        # one GROUP BY column of fixed width (an integer join key): the kernel writes its
        # values; else the group slots, whose columns are taken after
        direct = None
        if self.groups_are_keys and len(columns) == 1:
            direct = fixed_width_values(columns[0])
        group_values = direct if direct is not None else self._group_slots()
        # the bounds, groups and field parts in one pass, into Arrow's pool (result columns)
        start, end, groups, parts = self.kernels.combine_cells(
            *grids,
            self.key_ids.n_slots,
            self.group_of_id,
            group_values,
            *sides_values,
            self._ops,
            window.size,
            window.slide,
        )
        if not len(start):
            return None, 0
        values: Values = {}
        at = 0
        for f in self.node.fields:
            values[f.name] = parts[at : at + len(f.kind.parts)]
            at += len(f.kind.parts)
        if not self.groups_are_keys:  # keys of one group combined
            windows, groups, values = self._by_group(start // window.slide, groups, values)
            start = windows * window.slide
            end = start + window.size
        aggregates = finalize(self.node.aggregates, values)
        if direct is not None:
            keys = [fixed_width_array(columns[0].type, groups)]
        else:
            keys = [take_rows(column, groups, False) for column in columns]
        batch = window_result_batch(schema, keys, aggregates, start, end)
        return batch, len(start)

    def _decoded_groups(self) -> list[pa.Array]:
        """The GROUP BY columns of every group slot: each group decoded once (kept, extended
        as groups appear); a firing takes them per result row (it repeats each group per
        window)."""
        known = len(self._group_columns[0]) if self._group_columns else 0
        if known < self.groups.n_slots:
            new = self.groups.decode(np.arange(known, self.groups.n_slots, dtype=np.int64))
            if self._group_columns:
                new = [
                    pa.concat_arrays([old, n])
                    for old, n in zip(self._group_columns, new, strict=True)
                ]
            self._group_columns = new
        return self._group_columns

    def _group_slots(self) -> np.ndarray:
        """0..n_groups - 1: the combine's group values when it writes group slots."""
        if len(self._identity) < self.groups.n_slots:
            size = max(self.groups.n_slots, 2 * len(self._identity))
            self._identity = np.arange(size, dtype=np.int64)
        return self._identity

    def _slot_ids(self, index: int) -> np.ndarray:
        """The join key id of every key slot of a side (shared by both sides: equal keys,
        equal ids; -1: a NULL key, matching nothing). A side's slots are mapped once, as they
        appear; the key columns are compared as the join compares them (integers as int64)."""
        known = self.ids_of_slot[index]
        side_keys = self.sides[index].keys
        if len(known) < side_keys.n_slots:
            new = np.arange(len(known), side_keys.n_slots, dtype=np.int64)
            columns = []
            ok = np.ones(len(new), np.bool_)
            for column in side_keys.decode(new):
                if pa.types.is_integer(column.type) and column.type != pa.int64():
                    column = column.cast(pa.int64())
                if column.null_count:
                    ok &= ~np.asarray(column.is_null())
                columns.append(column)
            ids = self.key_ids.map_columns(columns, ok)
            known = self.ids_of_slot[index] = np.concatenate([known, ids])
        return known

    def _assign_groups(self, grids: tuple) -> None:
        """Group slots for the key ids this firing matches that have none yet, in first-seen
        order (window, then left key slot): their GROUP BY columns, cast to the columns'
        types, mapped once per key id. The match is walked for them only when a left key
        without a group is also a right key."""
        n_ids = self.key_ids.n_slots
        if len(self.group_of_id) < n_ids:
            grown = np.full(n_ids, -1, np.int64)
            grown[: len(self.group_of_id)] = self.group_of_id
            self.group_of_id = grown
        left_ids, right_ids = grids[1], grids[3]
        on_right = np.zeros(n_ids, np.bool_)
        on_right[right_ids[right_ids >= 0]] = True
        left_ids = left_ids[left_ids >= 0]
        if not (on_right[left_ids] & (self.group_of_id[left_ids] < 0)).any():
            return
        new_ids = self.kernels.unseen_groups(*grids, n_ids, self.group_of_id)
        if not len(new_ids):
            return
        columns = [
            self.key_ids.decode(new_ids)[p].cast(k.type.info.arrow)
            for p, k in zip(self.group_positions, self.node.keys, strict=True)
        ]
        self.group_of_id[new_ids] = self.groups.map_columns(
            columns, np.ones(len(new_ids), np.bool_)
        )

    def _by_group(self, windows, groups, values):  # noqa: ANN001, ANN202
        """(window, group) results in window order, then group: the keys of one group (a
        GROUP BY of part of a composite join key) combined by their fields' kinds."""
        rows = np.zeros((3, len(windows)), np.int64)
        rows[0], rows[1] = windows, groups
        table = self.kernels.new_key_map((SqlType.BIGINT, SqlType.BIGINT))
        cells = table.map_rows(rows)
        m = table.n_slots
        combined = {}
        for f in self.node.fields:
            dtype, neutrals = ph.neutral(f)
            targets = tuple(np.full(m, v, dtype) for v in neutrals)
            self.kernels.scatter(f.kind)(*targets, cells, *values[f.name])
            combined[f.name] = targets
        out = table.slot_rows[:m]
        order = np.lexsort((out[:, 1], out[:, 0]))
        values = {name: tuple(p[order] for p in parts) for name, parts in combined.items()}
        return out[order, 0], out[order, 1], values

    # -- size, snapshot -------------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        ids = self.key_ids.nbytes + self.group_of_id.nbytes
        ids += sum(slots.nbytes for slots in self.ids_of_slot)
        return sum(side.state_bytes() for side in self.sides) + self.groups.nbytes + ids

    def to_arrays(self) -> dict[str, np.ndarray]:
        arrays = dict(self.groups.to_arrays("groups_"))
        for index, side in enumerate(self.sides):
            arrays[f"factorised_side{index}"] = np.frombuffer(side.snapshot(), np.uint8)
        return arrays

    def restore(self, arrays: dict[str, np.ndarray]) -> None:
        if "factorised_side0" not in arrays:
            raise DataError(
                "snapshot does not match this query: its factorised join state predates the "
                "side window aggregations (per-window cells); restart the query from its input"
            )
        self.groups = self.kernels.key_map_from_arrays(self.groups.types, arrays, "groups_")
        for index, side in enumerate(self.sides):
            side.restore(arrays[f"factorised_side{index}"].tobytes())
        self._reset_key_ids()
