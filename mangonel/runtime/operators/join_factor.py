"""The factorised state of an aggregated join (`JoinAggregateExec.factorised`): joined pairs
are never formed.

The plan qualifies when the join is INNER, with no residual and no WHERE, grouped by join
key columns, and every aggregate reads one side only (`physical.factorised_reason`). The
pairs of a join key in a window are then every row of that key on the left in the window
times every row of it on the right, so per (window, key slot) each side keeps its row count
`n` and the partials of the fields reading that side (the state kinds' scatter), and a firing
combines them per (window, key):

- COUNT(*) = n_l * n_r;  COUNT(x_l) = c_l * n_r;  SUM(x_l) = s_l * n_r (int64 wraps, as the
  pair path's sum of n_r copies does; double: s_l * n_r);  MIN/MAX(x_l) = min_l / max_l;
  AVG is finalized from the SUM and COUNT fields as everywhere else;
- a (window, key) is emitted only when n_l * n_r > 0.

A row is credited to its windows `[first, last]` (the driver's, late windows already cut),
so the cost is linear in the input rows whatever the skew; a firing's cost is the number of
(window, key) cells it finalizes. Key slots map to groups once (the join key map decodes the
GROUP BY columns), and keys of one group are combined with the field kinds' scatter.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
from sqlglot import exp

from mangonel.catalog.types import SqlType
from mangonel.compiler import physical as ph
from mangonel.runtime.operators.join_kernels import JoinKernels
from mangonel.runtime.operators.results import finalize, window_result_batch


class FactorisedCells:
    """Per (window, join key slot): each side's row count and its fields' partials."""

    def __init__(
        self, node: ph.JoinAggregateExec, kernels: JoinKernels, key_map: Callable[[], object]
    ) -> None:
        self.node = node
        self.kernels = kernels
        self.key_map = key_map  # the join's key map (replaced on restore): decodes key slots
        join = node.join
        self.aliases = join.aliases
        self.column_types = {c.name: c.type for c in join.columns}
        # the side each field reads (None: COUNT(*), the joined rows)
        self.side_of: dict[str, int | None] = {}
        for f in node.fields:
            if f.argument is None:
                self.side_of[f.name] = None
            else:
                alias = next(iter(f.argument.find_all(exp.Column))).name.split(".", 1)[0]
                self.side_of[f.name] = join.aliases.index(alias)
        self.side_fields = [
            tuple(f for f in node.fields if self.side_of[f.name] == i) for i in (0, 1)
        ]
        # where each GROUP BY column is among the join key columns
        left = [k.name for k in join.left_keys]
        right = [k.name for k in join.right_keys]
        self.group_positions = [
            left.index(k.name) if k.name in left else right.index(k.name) for k in node.keys
        ]
        self.groups = kernels.new_key_map(tuple(k.type for k in node.keys))
        self.reset()

    # -- cells ----------------------------------------------------------------------------

    def reset(self, keep: np.ndarray | None = None) -> None:
        """New cells holding those of `keep` (a mask over the current cells), if given."""
        old_rows = None if keep is None else self.cells.slot_rows[: self.cells.n_slots][keep]
        old = None if keep is None else (self.counts, self.state)
        self.cells = self.kernels.new_key_map((SqlType.BIGINT, SqlType.BIGINT))
        capacity = max(64, 0 if old_rows is None else len(old_rows))
        self.counts = np.zeros((2, capacity), np.int64)
        self.state: dict[str, tuple[np.ndarray, ...]] = {}
        for f in self.node.fields:
            if self.side_of[f.name] is not None:
                dtype, neutrals = ph.neutral(f)
                self.state[f.name] = tuple(np.full(capacity, v, dtype) for v in neutrals)
        if old_rows is not None and len(old_rows):
            self.cells.map_rows(np.ascontiguousarray(old_rows.T))
            old_counts, old_state = old
            self.counts[:, : len(old_rows)] = old_counts[:, : len(keep)][:, keep]
            for name, parts in old_state.items():
                for target, source in zip(self.state[name], parts, strict=True):
                    target[: len(old_rows)] = source[: len(keep)][keep]

    def _grow(self) -> None:
        n = self.cells.n_slots
        if self.counts.shape[1] >= n:
            return
        capacity = max(n, 2 * self.counts.shape[1])
        counts = np.zeros((2, capacity), np.int64)
        counts[:, : self.counts.shape[1]] = self.counts
        self.counts = counts
        for f in self.node.fields:
            if f.name not in self.state:
                continue
            dtype, neutrals = ph.neutral(f)
            grown = []
            for part, v in zip(self.state[f.name], neutrals, strict=True):
                array = np.full(capacity, v, dtype)
                array[: len(part)] = part
                grown.append(array)
            self.state[f.name] = tuple(grown)

    # -- crediting ------------------------------------------------------------------------

    def credit(
        self,
        index: int,
        rows: pa.RecordBatch,
        slots: np.ndarray,
        first: np.ndarray,
        last: np.ndarray,
    ) -> None:
        """Rows of side `index` (key slots, -1: NULL key, matching nothing) contributing to
        windows [first, last] each."""
        has_key = slots >= 0
        if not has_key.all():
            rows = rows.filter(pa.array(has_key))
            slots, first, last = slots[has_key], first[has_key], last[has_key]
        n = len(slots)
        if not n:
            return
        fields = self.side_fields[index]
        partials = {}
        if fields:
            alias = self.aliases[index]
            columns = {f"{alias}.{name}": rows.column(name) for name in rows.schema.names}
            partials = self.kernels.partials(
                fields, self.column_types, columns, np.ones(n, np.bool_), n
            )
        if np.array_equal(first, last):
            entries, windows = None, first
        else:
            entries, windows = self.kernels.expand(
                first, last, int(first.min()), int(last.max()), ordered=False
            )
        keys = slots if entries is None else slots[entries]
        cell_rows = np.zeros((3, len(windows)), np.int64)
        cell_rows[0], cell_rows[1] = windows, keys
        cells = self.cells.map_rows(cell_rows)
        self._grow()
        np.add.at(self.counts[index], cells, 1)
        for f in fields:
            parts = partials[f.name]
            if entries is not None:
                parts = tuple(p[entries] for p in parts)
            self.kernels.scatter(f.kind)(*self.state[f.name], cells, *parts)

    # -- firing ---------------------------------------------------------------------------

    def max_window(self) -> int | None:
        n = self.cells.n_slots
        return int(self.cells.slot_rows[:n, 0].max()) if n else None

    def fire(self, lo: int, upto: int, schema: pa.Schema) -> tuple[pa.RecordBatch | None, int]:
        """The window results of windows up to `upto` in window order, then group (first
        seen); and how many (window, group) results there are."""
        n = self.cells.n_slots
        rows = self.cells.slot_rows[:n]
        due = rows[:, 0] <= upto
        if not due.any():
            return None, 0
        n_l, n_r = self.counts[0, :n], self.counts[1, :n]
        cells = np.flatnonzero(due & (n_l > 0) & (n_r > 0))
        windows, key_slots = rows[cells, 0], rows[cells, 1]
        n_l, n_r = n_l[cells], n_r[cells]
        values: dict[str, tuple[np.ndarray, ...]] = {}
        for f in self.node.fields:
            side = self.side_of[f.name]
            if side is None:  # COUNT(*): every pair of the key in the window
                values[f.name] = (n_l * n_r,)
                continue
            other = n_r if side == 0 else n_l
            parts = []
            for part in self.state[f.name]:
                part = part[cells]
                if f.kind.name in ("count", "sum"):
                    # int64 products wrap mod 2^64, as adding n copies does
                    part = part * other.astype(part.dtype)
                parts.append(part)
            values[f.name] = tuple(parts)
        self.reset(~due)
        if not len(cells):
            return None, 0
        groups = self._groups(key_slots)
        windows, groups, values = self._by_group(windows, groups, values)
        aggregates = finalize(self.node.aggregates, values)
        keys = self.groups.decode(groups)
        window = self.node.window
        start = windows * window.slide
        batch = window_result_batch(schema, keys, aggregates, start, start + window.size)
        return batch, len(windows)

    def _groups(self, key_slots: np.ndarray) -> np.ndarray:
        """The group slots of join key slots: their GROUP BY columns decoded from the join's
        key map, cast to the columns' types."""
        decoded = self.key_map().decode(key_slots)  # type: ignore[attr-defined]
        columns = [
            decoded[p].cast(k.type.info.arrow)
            for p, k in zip(self.group_positions, self.node.keys, strict=True)
        ]
        return self.groups.map_columns(columns, np.ones(len(key_slots), np.bool_))

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
        state = sum(p.nbytes for parts in self.state.values() for p in parts)
        return self.cells.nbytes + self.groups.nbytes + self.counts.nbytes + state

    def to_arrays(self) -> dict[str, np.ndarray]:
        n = self.cells.n_slots
        arrays = dict(self.groups.to_arrays("groups_"))
        arrays["cells"] = self.cells.slot_rows[:n].copy()
        arrays["counts"] = self.counts[:, :n].copy()
        for name, parts in self.state.items():
            for i, part in enumerate(parts):
                arrays[f"cell_{name}_{i}"] = part[:n].copy()
        return arrays

    def restore(self, arrays: dict[str, np.ndarray]) -> None:
        self.groups = self.kernels.key_map_from_arrays(self.groups.types, arrays, "groups_")
        cells = arrays["cells"]
        self.reset()
        self.cells.map_rows(np.ascontiguousarray(cells.T))
        self._grow()
        self.counts[:, : len(cells)] = arrays["counts"]
        for name, parts in self.state.items():
            for i, part in enumerate(parts):
                part[: len(cells)] = arrays[f"cell_{name}_{i}"]
