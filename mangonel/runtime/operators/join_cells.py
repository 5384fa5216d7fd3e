"""The aggregation state of an aggregated join: one cell per (window, group), holding the
state fields of the joined rows credited to that window (`JoinCells`).

Two ways to credit a joined row that shares windows `[lo, hi]`:

- expanded: its partials are combined into the cell of every window lo..hi (`expand`);
- differences (sliding windows whose every field is a count or an integer sum: state kinds
  flagged invertible, with int64 storage, whose combine is addition mod 2^64): `+partials`
  into the cell of window lo and `-partials` into the cell of window hi + 1, and a firing runs
  a prefix sum over its windows (`prefix_windows`). A pair then costs two cell updates
  whatever the number of windows it shares: pane-pair crediting without a per-window cost.
  Floating sums keep the expanded way: `x + inf - inf` is NaN, and float addition does not
  undo exactly.

A joined row's group is mapped from its group columns, or, when every GROUP BY column is a
join key, from its join key slot through a slot -> group array (`groups_by_key`): the group
map then sees each key once, not every pair.

Before the kept cells see a credit call, its entries are combined into dense (window, group)
cells of that call (when few enough), so the key map of the cells sees cells, not pairs.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

from mangonel.catalog.types import SqlType
from mangonel.compiler import physical as ph
from mangonel.compiler.codegen_join import credits_by_difference
from mangonel.runtime.operators.join_kernels import JoinKernels
from mangonel.runtime.operators.results import finalize, window_result_batch

# (window, group) cells one credit call combines densely before the kept cells see them
LOCAL_CELLS = 1 << 22


def groups_follow_join_keys(node: ph.JoinAggregateExec) -> bool:
    """Whether every GROUP BY column is a join key column (of either side, integer or
    STRING): a joined row's group is then a function of its join key slot."""
    join = node.join
    names = {k.name for k in (*join.left_keys, *join.right_keys)}
    return bool(node.keys) and all(
        k.name in names and (k.type.is_integer or k.type is SqlType.STRING) for k in node.keys
    )


class JoinCells:
    def __init__(self, node: ph.JoinAggregateExec, kernels: JoinKernels) -> None:
        self.node = node
        self.kernels = kernels
        self.fields = node.fields
        self.differences = credits_by_difference(node)
        self.groups = kernels.new_key_map(tuple(k.type for k in node.keys))
        # groups_follow_join_keys: the group slot of each join key slot seen (-1: not yet)
        self.group_of_key = np.full(0, -1, np.int64)
        # differences: the running sum of every part (rows: parts, columns: groups) at the
        # last fired window
        n_parts = sum(len(f.kind.parts) for f in self.fields)
        self.running = np.zeros((n_parts, 64), np.int64)
        self.reset()

    # -- cells ----------------------------------------------------------------------------

    def reset(self, keep: np.ndarray | None = None) -> None:
        """New cells holding those of `keep` (a mask over the current cells), if given."""
        old_rows = None if keep is None else self.cells.slot_rows[: self.cells.n_slots][keep]
        old_state = None if keep is None else self.state
        self.cells = self.kernels.new_key_map((SqlType.BIGINT, SqlType.BIGINT))
        self.state: dict[str, tuple[np.ndarray, ...]] = {}
        capacity = max(64, 0 if old_rows is None else len(old_rows))
        for f in self.fields:
            dtype, neutrals = ph.neutral(f)
            self.state[f.name] = tuple(np.full(capacity, v, dtype) for v in neutrals)
        if old_rows is not None and len(old_rows):
            self.cells.map_rows(np.ascontiguousarray(old_rows.T))
            for name, parts in old_state.items():
                for target, source in zip(self.state[name], parts, strict=True):
                    target[: len(old_rows)] = source[: len(keep)][keep]

    def _grow(self) -> None:
        n = self.cells.n_slots
        for f in self.fields:
            parts = self.state[f.name]
            if len(parts[0]) >= n:
                continue
            dtype, neutrals = ph.neutral(f)
            capacity = max(n, 2 * len(parts[0]))
            grown = []
            for part, v in zip(parts, neutrals, strict=True):
                array = np.full(capacity, v, dtype)
                array[: len(part)] = part
                grown.append(array)
            self.state[f.name] = tuple(grown)

    # -- crediting ------------------------------------------------------------------------

    def groups_by_key(
        self, key_slots: np.ndarray, group_columns_at: Callable[[np.ndarray], dict]
    ) -> np.ndarray:
        """The group slots of joined rows whose groups follow their join key slots
        (`groups_follow_join_keys`): only the rows of join key slots not seen before go through
        the group map (`group_columns_at(rows)`: their group columns), in row order, so
        groups get the slots that mapping every row would give them."""
        if not len(key_slots):
            return np.empty(0, np.int64)
        need = int(key_slots.max()) + 1
        if len(self.group_of_key) < need:
            grown = np.full(max(need, 2 * len(self.group_of_key)), -1, np.int64)
            grown[: len(self.group_of_key)] = self.group_of_key
            self.group_of_key = grown
        groups = self.group_of_key[key_slots]
        unseen = np.flatnonzero(groups < 0)
        if len(unseen):
            columns = group_columns_at(unseen)
            mapped = self.groups.map_columns(
                [columns[k.name] for k in self.node.keys], np.ones(len(unseen), np.bool_)
            )
            self.group_of_key[key_slots[unseen]] = mapped  # equal slots, equal groups
            groups[unseen] = mapped
        return groups

    def credit(
        self,
        joined: dict[str, pa.Array],
        lo: np.ndarray,
        hi: np.ndarray,
        groups: np.ndarray | None = None,
    ) -> None:
        """Joined rows (their columns `joined`) sharing windows [lo, hi] each; `groups`: their
        group slots when known (`groups_by_key`), else mapped from the group columns."""
        n = len(lo)
        ones = np.ones(n, np.bool_)
        if groups is None:
            groups = self.groups.map_columns([joined[k.name] for k in self.node.keys], ones)
        column_types = {c.name: c.type for c in self.node.join.columns}
        partials = self.kernels.partials(self.fields, column_types, joined, ones, n)
        if self.differences:  # cells hold differences: every credit is +lo, -(hi + 1)
            windows = np.concatenate([lo, hi + 1])
            groups = np.concatenate([groups, groups])
            partials = {
                name: tuple(np.concatenate([p, -p]) for p in parts)
                for name, parts in partials.items()
            }
        elif np.array_equal(lo, hi):  # one window per joined row: nothing to spread
            windows = lo
        else:
            entries, windows = self.kernels.expand(
                lo, hi, int(lo.min()), int(hi.max()), ordered=False
            )
            groups = groups[entries]
            partials = {name: tuple(p[entries] for p in parts) for name, parts in partials.items()}
        windows, groups, partials = self._combine_locally(windows, groups, partials)
        rows = np.zeros((3, len(windows)), np.int64)
        rows[0], rows[1] = windows, groups
        cells = self.cells.map_rows(rows)
        self._grow()
        for f in self.fields:
            self.kernels.scatter(f.kind)(*self.state[f.name], cells, *partials[f.name])

    def _combine_locally(self, windows, groups, partials):  # noqa: ANN001, ANN202
        k_lo, k_hi = int(windows.min()), int(windows.max())
        n_groups = max(1, self.groups.n_slots)
        span = k_hi - k_lo + 1
        if span * n_groups > LOCAL_CELLS:
            return windows, groups, partials
        local = (windows - k_lo) * n_groups + groups
        local_state = {}
        touched = np.zeros(span * n_groups, np.bool_)
        for f in self.fields:
            dtype, neutrals = ph.neutral(f)
            targets = tuple(np.full(span * n_groups, v, dtype) for v in neutrals)
            self.kernels.scatter(f.kind)(*targets, local, *partials[f.name])
            local_state[f.name] = targets
        if self.differences:  # a cell of +1 and -1 rows may still move a sum
            for parts in local_state.values():
                for part in parts:
                    touched |= part != 0
        else:  # every joined row counts one in the first field
            touched = local_state[self.fields[0].name][0] > 0
        cells = np.flatnonzero(touched)
        partials = {name: tuple(p[cells] for p in parts) for name, parts in local_state.items()}
        return cells // n_groups + k_lo, cells % n_groups, partials

    # -- firing ---------------------------------------------------------------------------

    def max_window(self) -> int | None:
        n = self.cells.n_slots
        return int(self.cells.slot_rows[:n, 0].max()) if n else None

    def fire(self, lo: int, upto: int, schema: pa.Schema) -> tuple[pa.RecordBatch | None, int]:
        """The window results of windows lo..upto in window order, then group (first seen);
        and how many (window, group) results there are."""
        n = self.cells.n_slots
        rows = self.cells.slot_rows[:n]
        due = rows[:, 0] <= upto
        if not due.any() and not (self.differences and self.running.any()):
            return None, 0
        cells = np.flatnonzero(due)
        cells = cells[np.lexsort((rows[cells, 1], rows[cells, 0]))]  # window, then group
        if self.differences:
            windows, groups, values = self._prefix(rows, cells, lo, upto)
        else:
            windows, groups = rows[cells, 0], rows[cells, 1]
            values = {name: tuple(p[cells] for p in parts) for name, parts in self.state.items()}
        self.reset(~due)
        if not len(windows):
            return None, 0
        aggregates = finalize(self.node.aggregates, values)
        keys = self.groups.decode(groups)
        window = self.node.window
        start = windows * window.slide
        batch = window_result_batch(schema, keys, aggregates, start, start + window.size)
        return batch, len(windows)

    def _prefix(self, rows, cells, lo, upto):  # noqa: ANN001, ANN202
        n_groups = max(1, self.groups.n_slots)
        if self.running.shape[1] < n_groups:
            grown = np.zeros((self.running.shape[0], 2 * n_groups), np.int64)
            grown[:, : self.running.shape[1]] = self.running
            self.running = grown
        deltas = np.vstack([p[cells] for f in self.fields for p in self.state[f.name]])
        windows, groups, sums = self.kernels.prefix_windows(
            rows[cells, 0], rows[cells, 1], deltas, self.running, lo, upto
        )
        values, row = {}, 0
        for f in self.fields:
            count = len(f.kind.parts)
            values[f.name] = tuple(sums[row + i] for i in range(count))
            row += count
        return windows, groups, values

    # -- size, snapshot -------------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        state = sum(p.nbytes for parts in self.state.values() for p in parts)
        return self.cells.nbytes + self.groups.nbytes + state + self.running.nbytes

    def to_arrays(self) -> dict[str, np.ndarray]:
        arrays = dict(self.groups.to_arrays("groups_"))
        arrays["cells"] = self.cells.slot_rows[: self.cells.n_slots].copy()
        arrays["running"] = self.running.copy()
        for name, parts in self.state.items():
            for i, part in enumerate(parts):
                arrays[f"cell_{name}_{i}"] = part[: self.cells.n_slots].copy()
        return arrays

    def restore(self, arrays: dict[str, np.ndarray]) -> None:
        self.groups = self.kernels.key_map_from_arrays(self.groups.types, arrays, "groups_")
        self.group_of_key = np.full(0, -1, np.int64)  # rebuilt from the restored group map
        self.running = arrays["running"].copy()
        cells = arrays["cells"]
        self.reset()
        self.cells.map_rows(np.ascontiguousarray(cells.T))
        self._grow()
        for name, parts in self.state.items():
            for i, part in enumerate(parts):
                part[: len(cells)] = arrays[f"cell_{name}_{i}"]
