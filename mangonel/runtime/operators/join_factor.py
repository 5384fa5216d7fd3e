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

Results are in window order, then group in first-fired order.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

from mangonel.catalog.types import SqlType
from mangonel.compiler import physical as ph
from mangonel.compiler.factorised import factorised_sides
from mangonel.errors import DataError
from mangonel.runtime.operators import registry
from mangonel.runtime.operators.base import OperatorBase
from mangonel.runtime.operators.join_kernels import JoinKernels
from mangonel.runtime.operators.registry import StepKernels
from mangonel.runtime.operators.results import finalize, window_result_batch
from mangonel.runtime.operators.window import TimeWindowOperator, _Segment

# a firing's (window, key id) cells are matched through a dense table up to this many cells
# (or 4x the cells), else through a sort
DENSE_MATCH_CELLS = 1 << 22

WatermarkAfter = Callable[[int | None], int | None]
Cells = tuple[np.ndarray, np.ndarray, dict[str, tuple[np.ndarray, ...]]]


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
        self._fired: list[Cells] = []  # cells fired, waiting for the join's combine
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
        self._conformed = [entry for entry in self._conformed if entry[0] is not batch]

    def _watermark_after(self, max_event_time: int | None) -> int | None:
        # the join's watermark after the batch, never this side's own
        if self._join_watermark_after is None:
            return None
        return self._join_watermark_after(max_event_time)

    def fire_cells(self, upto: int) -> Cells | None:
        """The raw partials of every (window, key slot) with rows in windows up to `upto`,
        window-major (then key slot); None if there are none."""
        end = upto * self.spec.slide + self.spec.size  # the window's end: W at least this
        if self.watermark is None or end > self.watermark:
            self.watermark = end
        self._fire(final=False)
        fired, self._fired = self._fired, []  # a chunked merge's early cells come first
        if not fired:
            return None
        windows = np.concatenate([f[0] for f in fired])
        slots = np.concatenate([f[1] for f in fired])
        values = {
            f.name: tuple(
                np.concatenate([cells[2][f.name][i] for cells in fired])
                for i in range(len(f.kind.parts))
            )
            for f in self.fields
        }
        return windows, slots, values

    def _compute(self, segment: _Segment, runs: list[tuple[int, int]], n_keys: int):
        """The window operator's cells of `runs`, kept raw (not finalized) for the join."""
        windows, slots, values = self._window_cells(segment, runs, n_keys)
        if len(windows):
            self._fired.append((windows, slots, values))
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

    # -- input ----------------------------------------------------------------------------

    def add(
        self,
        index: int,
        batch: pa.RecordBatch,
        watermark: int | None,
        watermark_after: WatermarkAfter | None = None,
    ) -> None:
        self.sides[index].add(batch, watermark, watermark_after)

    def prefetch(self, index: int, batch: pa.RecordBatch) -> None:
        """`batch` is the next arrival, for side `index`: it is conformed and staged (on the
        GPU: its host copy pass and upload) while the current arrival's kernels run, on
        whichever side that arrival is (`FactorisedSide._stage_deferred`)."""
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

    def fire(self, lo: int, upto: int, schema: pa.Schema) -> tuple[pa.RecordBatch | None, int]:
        """The window results of windows up to `upto` in window order, then group (first
        seen); and how many (window, group) results there are. Both sides fire."""
        left, right = (side.fire_cells(upto) for side in self.sides)
        if left is None or right is None:
            return None, 0
        left_ids, right_ids = self._key_ids(0, left[1]), self._key_ids(1, right[1])
        li, ri = self._match(left[0], left_ids, right[0], right_ids)
        if not len(li):
            return None, 0
        rows = self.node.fields[0].name
        n_l, n_r = left[2][rows][0][li], right[2][rows][0][ri]
        values: dict[str, tuple[np.ndarray, ...]] = {}
        for f in self.node.fields:
            side = self.side_of[f.name]
            if side is None:  # COUNT(*): every pair of the key in the window
                values[f.name] = (n_l * n_r,)
                continue
            cells, at_side, other = (left, li, n_r) if side == 0 else (right, ri, n_l)
            parts = []
            for part in cells[2][f.name]:
                part = part[at_side]
                if f.kind.name in ("count", "sum"):
                    # int64 products wrap mod 2^64, as adding n copies does
                    part = part * other.astype(part.dtype)
                parts.append(part)
            values[f.name] = tuple(parts)
        windows = left[0][li]
        groups = self._groups(left_ids[li])
        if self.groups_are_keys:  # (window, group) is unique: order it, nothing to combine
            # cells come window-major: one sort of (window, group) codes, when out of order
            codes = (windows - windows[0]) * self.groups.n_slots + groups
            if (np.diff(codes) < 0).any():
                order = _order_of_unique(codes)
                windows, groups = windows[order], groups[order]
                values = {name: tuple(p[order] for p in parts) for name, parts in values.items()}
        else:
            windows, groups, values = self._by_group(windows, groups, values)
        aggregates = finalize(self.node.aggregates, values)
        keys = self.groups.decode(groups)
        window = self.node.window
        start = windows * window.slide
        batch = window_result_batch(schema, keys, aggregates, start, start + window.size)
        return batch, len(windows)

    def _key_ids(self, index: int, slots: np.ndarray) -> np.ndarray:
        """The join key ids (shared by both sides: equal keys, equal ids; -1: a NULL key,
        matching nothing) of a side's key slots. A side's slots are mapped once, as they
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
        return known[slots]

    def _match(self, left_windows, left_ids, right_windows, right_ids):  # noqa: ANN001, ANN202
        """(left cell, right cell) of every (window, key id) both sides hold, in left cell
        order (window-major). A side's (window, key) is one cell at most."""
        first = int(min(left_windows.min(), right_windows.min()))
        span = int(max(left_windows.max(), right_windows.max())) - first + 1
        n_ids = self.key_ids.n_slots
        left_codes = (left_windows - first) * n_ids + left_ids
        right_codes = (right_windows - first) * n_ids + right_ids
        left_ok, right_ok = left_ids >= 0, right_ids >= 0
        found = np.full(len(left_codes), -1, np.int64)  # per left cell: its right cell
        if span * n_ids <= max(DENSE_MATCH_CELLS, 4 * (len(left_ids) + len(right_ids))):
            cell_of_code = np.full(span * n_ids, -1, np.int64)
            cell_of_code[right_codes[right_ok]] = np.flatnonzero(right_ok)
            found[left_ok] = cell_of_code[left_codes[left_ok]]
        else:  # a sparse firing (far apart windows): sort instead of a dense table
            order = np.flatnonzero(right_ok)
            order = order[np.argsort(right_codes[order])]
            if len(order):
                sorted_codes = right_codes[order]
                at = np.minimum(np.searchsorted(sorted_codes, left_codes), len(order) - 1)
                hit = left_ok & (sorted_codes[at] == left_codes)
                found[hit] = order[at[hit]]
        li = np.flatnonzero(found >= 0)
        return li, found[li]

    def _groups(self, ids: np.ndarray) -> np.ndarray:
        """The group slots (first-seen order) of join key ids: their GROUP BY columns, cast
        to the columns' types, mapped once per key id."""
        if len(self.group_of_id) < self.key_ids.n_slots:
            grown = np.full(self.key_ids.n_slots, -1, np.int64)
            grown[: len(self.group_of_id)] = self.group_of_id
            self.group_of_id = grown
        groups = self.group_of_id[ids]
        missing = groups < 0
        if missing.any():
            new_ids, first = np.unique(ids[missing], return_index=True)
            new_ids = new_ids[np.argsort(first)]  # first-seen order in this firing
            columns = [
                self.key_ids.decode(new_ids)[p].cast(k.type.info.arrow)
                for p, k in zip(self.group_positions, self.node.keys, strict=True)
            ]
            self.group_of_id[new_ids] = self.groups.map_columns(
                columns, np.ones(len(new_ids), np.bool_)
            )
            groups = self.group_of_id[ids]
        return groups

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


def _order_of_unique(codes: np.ndarray) -> np.ndarray:
    """The permutation sorting distinct non-negative codes: a scatter into a table of
    every code up to the largest when that is at most a few times their number (the cells
    of a firing are dense in (window, group)), else a sort."""
    size = int(codes.max()) + 1
    if size > max(DENSE_MATCH_CELLS, 4 * len(codes)):
        return np.argsort(codes)
    at = np.full(size, -1, np.int64)
    at[codes] = np.arange(len(codes), dtype=np.int64)
    return at[at >= 0]
