"""The sketches of APPROX_COUNT_DISTINCT and APPROX_PERCENTILE as the window operators use
them (`runtime/operators/sketch_panes.py`): a set of sketches, one per cell (a key of a pane,
or a count window), built from a batch's order keys, sliced per pane, merged in groups (a
pane's sketches with a new batch's, a window from its panes) and answered.

A set is either `HllSketches` (p and uint8 registers [cells, 2^p], `sketch_hll`) or
`sketch_quantile.QuantileSketches` (GK summaries); both say how many cells they hold.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from mangonel.aggregates.holistic import from_order_keys, order_keys
from mangonel.aggregates.sketches import hll_precision, quantile_relative_error
from mangonel.catalog.types import SqlType
from mangonel.runtime.cpu import sketch_hll, sketch_quantile
from mangonel.runtime.cpu.holistic import kept_pane_range
from mangonel.runtime.cpu.sketch_quantile import QuantileSketches

HLL = "approx_count_distinct"
GK = "approx_percentile"


@dataclass(frozen=True)
class HllSketches:
    """HyperLogLog++ register sets of `cells` cells at precision p."""

    p: int
    registers: np.ndarray  # uint8 [cells, 2^p]

    @property
    def cells(self) -> int:
        return self.registers.shape[0]

    @property
    def nbytes(self) -> int:
        return self.registers.nbytes


Sketches = HllSketches | QuantileSketches


def _p(parameter: float) -> int:
    return hll_precision(parameter)


def _eps(parameter: float) -> float:
    return quantile_relative_error(int(parameter))


# the sketches these kernels keep (the GPU's `GpuSketches.evaluations`: HLL only)
evaluations = (HLL, GK)


def pane_cells(slots: np.ndarray, presorted: bool) -> tuple[np.ndarray, np.ndarray]:
    """(a pane's distinct key slots, ascending; each row's cell: its slot's rank among them)
    by a presence map over the slots (linear, where np.unique would sort the pane's rows;
    `presorted` changes nothing here)."""
    slots = np.asarray(slots, np.int64)
    if not len(slots):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    seen = np.zeros(int(slots.max()) + 1, np.bool_)
    seen[slots] = True
    rank = np.cumsum(seen) - 1
    return np.flatnonzero(seen), rank[slots]


@numba.njit(cache=True)
def _presence(panes, slots, keep, low, span, width, seen):
    """Mark each kept row's (pane - low, slot) in `seen`; False (and stop) at a kept row
    whose pane lies outside low .. low + span - 1 or whose slot passes `width`."""
    for i in range(panes.shape[0]):
        if keep[i]:
            q = panes[i] - low
            if q < 0 or q >= span or slots[i] < 0 or slots[i] >= width:
                return False
            seen[q * width + slots[i]] = True
    return True


@numba.njit(cache=True)
def _row_cells(panes, slots, keep, low, width, cell_of, out):
    for i in range(panes.shape[0]):
        out[i] = cell_of[(panes[i] - low) * width + slots[i]] if keep[i] else 0


def batch_cells(
    panes: np.ndarray,
    slots: np.ndarray,
    keep: np.ndarray,
    n_slots: int,
    max_cells: int,
    pane_range: tuple[int, int] | None = None,
) -> tuple[list[int], list[np.ndarray], np.ndarray, int] | None:
    """The cells of a batch's kept rows without grouping the rows by pane first: (the panes
    they hit, ascending; per pane its distinct key slots, ascending; per row its cell (0
    where not kept); the number of cells), cells numbered in (pane, slot) order, so a
    pane's cells are consecutive (`SketchPanes.add_rows`). A presence table over (pane,
    slot) numbers them: None where that table would be much larger than the batch (panes
    spread over a long range) or the cells pass `max_cells`; the caller then groups the
    rows by pane (`split_panes`) and numbers each pane's cells (`pane_cells`).
    `pane_range`: (first, last) pane of the kept rows where the caller knows them (the
    batch's event-time extremes), which saves a pass; checked while the table is filled."""
    panes = np.ascontiguousarray(panes, np.int64)
    slots = np.ascontiguousarray(slots, np.int64)
    keep = np.ascontiguousarray(keep, np.bool_)
    limit = 4 * len(panes) + 4096
    seen = None
    if pane_range is not None and (pane_range[1] - pane_range[0] + 1) * n_slots <= limit:
        low, span = pane_range[0], pane_range[1] - pane_range[0] + 1
        seen = np.zeros(span * n_slots, np.bool_)
        if not _presence(panes, slots, keep, low, span, n_slots, seen):
            seen = None  # a kept row outside the range given: measured below
    if seen is None:
        low, high, count = kept_pane_range(panes, keep)
        if not count:
            return [], [], np.zeros(len(panes), np.int64), 0
        span = high - low + 1
        if span * n_slots > limit:
            return None
        seen = np.zeros(span * n_slots, np.bool_)
        if not _presence(panes, slots, keep, low, span, n_slots, seen):
            raise ValueError(f"key slots must lie in [0, {n_slots})")
    table = seen.reshape(span, n_slots)
    per_pane = table.sum(axis=1)
    n_cells = int(per_pane.sum())
    if not n_cells:
        return [], [], np.zeros(len(panes), np.int64), 0
    if n_cells > max_cells:
        return None
    cell_of = np.cumsum(seen) - 1
    cells = np.empty(len(panes), np.int64)
    _row_cells(panes, slots, keep, low, n_slots, cell_of, cells)
    hit = np.flatnonzero(per_pane)
    return (hit + low).tolist(), [np.flatnonzero(table[q]) for q in hit], cells, n_cells


def _hll_values(keys: np.ndarray, argument: SqlType, raw: bool) -> tuple[np.ndarray, bool]:
    """(what the HLL kernels hash for order keys `keys`, whether that is the keys
    themselves): a DOUBLE's order keys are hashed as they are (decoded in the hash loop: no
    decoding pass), other types' values decoded. `raw`: `keys` are the argument's values
    (float64 for a floating argument, else int64), hashed as they are (a float's bits
    normalised in the hash loop)."""
    if raw:
        return keys, False
    if argument is SqlType.DOUBLE:
        return keys, True
    return from_order_keys(keys, argument.is_floating), False


def _quantile_values(keys: np.ndarray, argument: SqlType, raw: bool) -> np.ndarray:
    """The float64 values a GK summary is built from: order keys decoded, or raw values
    normalised as order keys normalise them (-0.0 as 0.0, one NaN) by a round trip."""
    if raw:
        keys = order_keys(keys)
    return from_order_keys(keys, argument.is_floating).astype(np.float64)


def batch_sketches(
    evaluation: str,
    panes: np.ndarray,
    slots: np.ndarray,
    keys: np.ndarray,
    keep: np.ndarray,
    n_slots: int,
    argument: SqlType,
    parameter: float,
    max_bytes: int,
    pane_range: tuple[int, int] | None = None,
    raw: bool = False,
) -> tuple[list[int], list[np.ndarray], list[Sketches]] | None:
    """A batch's kept rows straight into per-pane sketches, HLL only: (the panes they hit,
    ascending; per pane its distinct key slots, ascending; per pane its sketches, cell i of
    key slot i of its slots). The registers are raised in a table over every (pane, key
    slot) of the batch's pane range (`sketch_hll.build_table`), so no pass numbers the
    cells first; a pane every key reaches keeps its rows of the table as they are (a view),
    others a copy of the rows of their keys. None (the caller numbers cells with
    `batch_cells`) for GK summaries and where the table passes `max_bytes` or holds more
    cells than the batch has rows (most of it would be zeros to allocate and drop). `raw`:
    `keys` are the argument's values, not order keys (`_hll_values`)."""
    if evaluation != HLL or n_slots <= 0:  # no key met yet: batch_cells checks the rows
        return None
    p = _p(parameter)
    m = 1 << p
    rows = len(panes)

    def fits(low: int, high: int) -> bool:
        cells = (high - low + 1) * n_slots
        return cells <= rows and cells * m <= max_bytes

    values, hashes_keys = _hll_values(keys, argument, raw)
    table = None
    if pane_range is not None and fits(*pane_range):
        table = sketch_hll.build_table(
            panes, slots, values, keep, pane_range, n_slots, argument, p, hashes_keys
        )
    if table is None:  # no range given, or a kept row outside it: the kept rows' range
        low, high, count = kept_pane_range(
            np.ascontiguousarray(panes, np.int64), np.ascontiguousarray(keep, np.bool_)
        )
        if not count:
            return [], [], []
        if not fits(low, high):
            return None
        pane_range = (low, high)
        table = sketch_hll.build_table(
            panes, slots, values, keep, pane_range, n_slots, argument, p, hashes_keys
        )
        if table is None:
            raise ValueError(f"key slots must lie in [0, {n_slots})")
    registers, seen = table
    present = seen.reshape(-1, n_slots)
    per_pane = present.sum(axis=1)
    pane_ids, pane_slots, parts = [], [], []
    for q in np.flatnonzero(per_pane).tolist():
        pane_ids.append(pane_range[0] + q)
        rows_of_pane = registers[q * n_slots : (q + 1) * n_slots]
        if per_pane[q] == n_slots:
            pane_slots.append(np.arange(n_slots, dtype=np.int64))
            parts.append(HllSketches(p, rows_of_pane))
        else:
            chosen = np.flatnonzero(present[q])
            pane_slots.append(chosen)
            parts.append(HllSketches(p, rows_of_pane[chosen]))
    return pane_ids, pane_slots, parts


def panes_cells(pieces: list[np.ndarray], presorted: bool) -> list[tuple[np.ndarray, np.ndarray]]:
    """`pane_cells` of each pane's chunk (the GPU's reads them back at once)."""
    return [pane_cells(piece, presorted) for piece in pieces]


def concatenate(pieces: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(pieces) if pieces else np.empty(0, np.int64)


def build(
    evaluation: str,
    cells: np.ndarray,
    n_cells: int,
    keys: np.ndarray,
    argument: SqlType,
    parameter: float,
    valid: np.ndarray | None = None,
    raw: bool = False,
) -> Sketches:
    """One sketch per cell 0..n_cells-1 of the non-NULL values whose order keys are `keys`
    (`aggregates.holistic.order_keys`), row i into cell cells[i]; `valid`: the rows that
    count (None: every row; `batch_cells` numbers a whole batch's rows, kept or not).
    `raw`: `keys` are the argument's values themselves (float64 for a floating argument,
    else int64), as the CPU's holistic driver keeps a field only sketches read."""
    if evaluation == HLL:
        p = _p(parameter)
        values, hashes_keys = _hll_values(keys, argument, raw)
        return HllSketches(
            p, sketch_hll.build(cells, n_cells, values, valid, argument, p, hashes_keys)
        )
    values = _quantile_values(keys, argument, raw)
    return sketch_quantile.build(cells, n_cells, values, valid, _eps(parameter))


def cell_range(sketches: Sketches, start: int, stop: int) -> Sketches:
    """Cells start..stop-1 of a set, as a set of their own (copied)."""
    if isinstance(sketches, HllSketches):
        return HllSketches(sketches.p, sketches.registers[start:stop].copy())
    s = sketches
    lo, hi = int(s.offsets[start]), int(s.offsets[stop])
    return QuantileSketches(
        s.eps,
        s.counts[start:stop].copy(),
        s.offsets[start : stop + 1] - lo,
        s.values[lo:hi].copy(),
        s.g[lo:hi].copy(),
        s.delta[lo:hi].copy(),
    )


def merge(sets: list[Sketches], members: np.ndarray, offsets: np.ndarray) -> Sketches:
    """Group g = the merge of cells members[offsets[g]:offsets[g + 1]] of the sets taken as
    one (the cells of set i follow those of set i - 1)."""
    if isinstance(sets[0], HllSketches):
        p = sets[0].p
        if len(sets) == 2:  # a pane's sets with a batch's, a block set with a pane's
            first, second = sets[0].registers, sets[1].registers
            return HllSketches(p, sketch_hll.merge_pair(first, second, members, offsets))
        registers = np.concatenate([s.registers for s in sets]) if len(sets) > 1 else None
        registers = sets[0].registers if registers is None else registers
        return HllSketches(p, sketch_hll.merge_groups(registers, members, offsets))
    joined = sketch_quantile.concat(*sets) if len(sets) > 1 else sets[0]
    return sketch_quantile.merge_groups(joined, members, offsets)


def merge_aligned(first: Sketches, second: Sketches) -> Sketches:
    """Cell i = the merge of cell i of `first` and of `second` (two sets of the same keys, in
    the same order: a dense pane's sketches and a batch's): HLL registers by one maximum, no
    member lists."""
    if first.cells != second.cells:
        raise ValueError(f"aligned sets need as many cells: {first.cells}, {second.cells}")
    if isinstance(first, HllSketches):
        return HllSketches(first.p, np.maximum(first.registers, second.registers))
    return merge([first, second], *aligned_members(first.cells))


def aligned_members(cells: int) -> tuple[np.ndarray, np.ndarray]:
    """`merge`'s (members, offsets) pairing cell i of two joined sets of `cells` cells."""
    members = np.empty(2 * cells, np.int64)
    members[0::2] = np.arange(cells)
    members[1::2] = cells + np.arange(cells)
    return members, np.arange(0, 2 * cells + 1, 2, dtype=np.int64)


def merge_answer(
    sets: list[Sketches],
    members: np.ndarray,
    offsets: np.ndarray,
    fraction: float | tuple[float, ...] | None,
) -> tuple[np.ndarray, np.ndarray]:
    """`answer(merge(sets, members, offsets), fraction)`: HLL estimates straight from the
    groups' maxima (`sketch_hll.merged_estimates`: no concatenated sets, no merged
    registers); GK summaries merged, then queried."""
    if isinstance(sets[0], HllSketches):
        p = sets[0].p
        estimate = sketch_hll.merged_estimates([s.registers for s in sets], members, offsets, p)
        return estimate, estimate
    return answer(merge(sets, members, offsets), fraction)


def empty(evaluation: str, parameter: float) -> Sketches:
    """A set of no cells."""
    if evaluation == HLL:
        p = _p(parameter)
        return HllSketches(p, sketch_hll.new_registers(0, p))
    return sketch_quantile.build(
        np.empty(0, np.int64), 0, np.empty(0, np.float64), None, _eps(parameter)
    )


def answer(
    sketches: Sketches, fraction: float | tuple[float, ...] | None
) -> tuple[np.ndarray, np.ndarray]:
    """(non-NULL count, result) per cell: the distinct-count estimate (int64; its count is the
    estimate too, 0 only for an empty cell), or the percentile as a double (NaN where the
    count is 0: NULL); `fraction` a tuple (an ARRAY of p): [cells, len(fraction)], every p
    queried from the cell's one merged sketch."""
    if isinstance(sketches, HllSketches):
        estimate = sketch_hll.estimate(sketches.registers, sketches.p)
        return estimate, estimate
    ps = len(fraction) if isinstance(fraction, tuple) else 1
    if not sketches.cells:
        empty = np.empty((0, ps), np.float64)
        return np.empty(0, np.int64), empty if isinstance(fraction, tuple) else empty[:, 0]
    p = 0.0 if fraction is None else fraction  # as the exact percentiles read a plan without p
    answers = sketch_quantile.query(sketches, p)
    return sketches.counts.copy(), answers if isinstance(fraction, tuple) else answers[:, 0]


def to_bytes(sketches: Sketches) -> bytes:
    if isinstance(sketches, HllSketches):
        return sketch_hll.to_bytes(sketches.registers, sketches.p)
    return sketches.to_bytes()


def from_bytes(evaluation: str, blob: bytes) -> Sketches:
    if evaluation == HLL:
        registers, p = sketch_hll.from_bytes(blob)
        return HllSketches(p, registers)
    return QuantileSketches.from_bytes(blob)
