"""The kernels a join driver (`mangonel.runtime.operators.join`) calls: what every backend
implements for joins, as `kernels.WindowKernels` is for window aggregation.

Rows reach the kernels as numpy arrays per side: `slots` (the dense id of the row's key
tuple in the join's key table, shared by both sides; -1 for a key with a NULL, which never
matches) and the window range each row contributes to, `[first, last]` (window numbers k of
`[k*s, k*s + w)`; a static table's rows cover every window). Matching compares slots only:
the key table is the hash (equal keys, equal slot), so a "hash" join is a bucketed probe of
the slots and a "sort-merge" join a merge of both sides sorted by slot.

- `match(algorithm, ...)`: the pairs (i, j) with equal slots whose window ranges overlap, in
  two passes (count per probe row, exclusive scan, write): never one pair at a time into a
  growing list. Hash builds on the smaller side and probes with the other. The pairs come in
  any order (row order inside a window is unspecified): the GPU sorts its build side by
  (slot, first window) and searches a probe row's candidates there.
- `expand(first, last, lo, hi, ordered)`: one entry per (row, window k) for k in
  [max(first, lo), min(last, hi)], grouped by k (in any order with `ordered=False`, for
  crediting cells): the crediting of a pair (or an unmatched row) to each window it shares,
  in two passes too.
- `mark_matched(...)`: a row's per-window matched flags (outer joins) from its pairs.
- `scatter(kind)`: the kind's combine of many values into cells (aggregated joins), and
  `prefix_windows`: the firing of difference-credited cells (`join_cells.py`).
- `combine_cells(...)`, `unseen_groups(...)`: the factorised join's firing
  (`join_factor.py`): every (window, key id) with rows on both sides' fired grids, in
  (window, group) order, as result columns (window bounds, group, each field part: a
  product of one side's value and the other's rows, or a value as it is) in one pass; the
  matched key ids that have no group yet.
- `window_ranges(ts, has_ts, size, slide, closed, out=None)`: a batch's rows on arrival in
  one pass: (keep: a time and a window after `closed` left, the kept rows' first, last and
  origin windows, the late count, the largest time or None); `out`: three int64 arrays of
  the batch's length to write the ranges into (the stored rows' room: `Grow.reserve`).
- `pair_ranges(mine, theirs, first, last, their_first, their_last, (mine_base, theirs_base,
  mine_is_left), out=None)`: matched pairs' (left id, right id, lo, hi) in one pass: global
  ids and the windows both rows share; `out`: four int64 arrays to write them into (the
  pending pairs' room).
- Optional, `join_windows((slots, first, last) left, (...) right, lo, hi)`: an inner join
  without aggregation joined at the firing (`rows=firing`, the CPU's): the pairs of each
  window lo..hi among the stored rows (each row in its windows [first, last]), as (left
  rows, right rows, windows, pairs per window), window by window; a backend without it
  keeps the pairs found at arrival. `window_bounds(windows, rows, size, slide)`: both
  bound columns of runs of rows in one pass (else two NumPy repeats).
- Optional, `device_cells(node)`: cells of an aggregated join that the backend joins and
  aggregates itself (`join(sides, index, count, algorithm, n_slots)` per batch, then the
  `JoinCells` interface: fire, max_window, nbytes, to_arrays, restore), or None; the GPU's
  device-fused form (runtime/gpu/join_fused.py). The CPU has none.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

# what an output part of `JoinKernels.combine_cells` is, with the index of the value array
# it reads on its side (ROWS reads none)
ROWS = "rows"  # n_l * n_r: COUNT(*)
LEFT_SCALED = "left_scaled"  # a left value times the right side's rows (counts, sums)
RIGHT_SCALED = "right_scaled"
LEFT = "left"  # a left value as it is (MIN, MAX)
RIGHT = "right"
CombineOp = tuple[str, int]


class JoinKernels(Protocol):
    name: str

    def match(
        self,
        algorithm: str,
        slots_a: np.ndarray,
        first_a: np.ndarray,
        last_a: np.ndarray,
        slots_b: np.ndarray,
        first_b: np.ndarray,
        last_b: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(i, j): every pair slots_a[i] == slots_b[j] >= 0 whose window ranges overlap."""
        ...

    def expand(
        self, first: np.ndarray, last: np.ndarray, lo: int, hi: int, ordered: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        """(entry, k) for every entry and window k in [max(first, lo), min(last, hi)],
        ordered by k (then by entry); `ordered=False`: in any order (crediting cells needs
        no order, and skipping the sort by window is most of its cost)."""
        ...

    def mark_matched(
        self,
        matched: np.ndarray,
        rows: np.ndarray,
        first: np.ndarray,
        last: np.ndarray,
        origin: np.ndarray,
    ) -> None:
        """matched[rows[p], k - origin[rows[p]]] = 1 for k in [first[p], last[p]]."""
        ...

    def scatter(self, kind: Any) -> Any:  # noqa: ANN401 - the kind's compiled scatter
        """scatter(target_0.., index, values_0..): target[index[i]] (+)= values[i]."""
        ...

    def prefix_windows(
        self,
        cell_k: np.ndarray,
        cell_g: np.ndarray,
        deltas: np.ndarray,
        running: np.ndarray,
        lo: int,
        hi: int,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Difference-credited cells (sorted by window k; `deltas`: one int64 row per state
        part, part 0 the row count) -> (k, group, values per part) of every group with a
        positive running count in each window lo..hi; `running` (parts x groups) is left at
        window hi."""
        ...

    def combine_cells(
        self,
        left: tuple[np.ndarray, ...],
        left_ids: np.ndarray,
        right: tuple[np.ndarray, ...],
        right_ids: np.ndarray,
        n_ids: int,
        group_of_id: np.ndarray,
        group_values: np.ndarray,
        left_values: tuple[np.ndarray, ...],
        right_values: tuple[np.ndarray, ...],
        ops: tuple[CombineOp, ...],
        size: int,
        slide: int,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
        """The factorised join's combine. A side is a grid (`join_factor.FiredGrid.parts`):
        (windows, starts, widths, slot starts, slots, row counts): window entry i holds
        cells `starts[i]` on, `widths[i]` of them, their key slots their positions (slot
        start -1: dense) or `slots[slot_starts[i]:]` (sparse); `*_ids`: the join key id of
        each key slot (in [0, n_ids); -1 matches nothing); a side holds a (window, id) once
        at most. Every (window, key id) with rows on both sides (left cell lc, right cell
        rc) is one result: in window order; inside a window, in the key slot order of one
        side (the backend's choice: row order inside a window is unspecified). Returns (window
        start `k * slide`, window end `+ size`, group_values[group_of_id[id]] (in
        group_values' dtype: the group slots for an identity, or a group column's values,
        written in the same pass), one array per op): op
        (ROWS, _): rows_l[lc] * rows_r[rc]; (LEFT_SCALED, i): left_values[i][lc] *
        rows_r[rc] (a side's count or sum: int64 products wrap mod 2^64, a double stays a
        double); (RIGHT_SCALED, i): right_values[i][rc] * rows_l[lc]; (LEFT, i) / (RIGHT,
        i): the value as it is (MIN, MAX)."""
        ...

    def unseen_groups(
        self,
        left: tuple[np.ndarray, ...],
        left_ids: np.ndarray,
        right: tuple[np.ndarray, ...],
        right_ids: np.ndarray,
        n_ids: int,
        group_of_id: np.ndarray,
    ) -> np.ndarray:
        """The key ids `combine_cells` would match whose group is unknown (group_of_id < 0),
        each once, in first-met order (window, then left key slot)."""
        ...

    def pair_ranges(
        self,
        mine: np.ndarray,
        theirs: np.ndarray,
        first: np.ndarray,
        last: np.ndarray,
        their_first: np.ndarray,
        their_last: np.ndarray,
        bases: tuple[int, int, bool],
        out: tuple[np.ndarray, ...] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(left ids, right ids, lo, hi) of pairs (mine[k], theirs[k]): global ids (`bases`:
        each side's first id, and whether `mine` is the left side) and shared windows."""
        ...

    def window_ranges(
        self,
        ts: np.ndarray,
        has_ts: np.ndarray,
        size: int,
        slide: int,
        closed: int,
        out: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int | None]:
        """(keep per row, the kept rows' first, last and origin windows, late count, the
        largest time or None): a row is kept with a time and a window after `closed`."""
        ...

    def new_key_map(self, types: tuple) -> Any:  # noqa: ANN401
        """A key map (key columns or a key-row matrix -> dense slots), as the window
        kernels' `new_key_map`: the join's keys, its groups, its (window, group) cells."""
        ...

    def key_map_from_arrays(self, types: tuple, arrays: dict, prefix: str) -> Any:  # noqa: ANN401
        ...

    def evaluate(
        self, expression: Any, column_types: dict, columns: dict, length: int | None = None
    ) -> Any:  # noqa: ANN401
        """An expression over joined rows (`alias.column` columns): an Arrow array."""
        ...

    def partials(
        self, fields: tuple, column_types: dict, columns: dict, contributes: np.ndarray, length: int
    ) -> dict[str, tuple[np.ndarray, ...]]:
        """The per-row partial state of every field over joined rows (the window lift's)."""
        ...
