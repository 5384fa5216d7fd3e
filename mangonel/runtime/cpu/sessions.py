"""numba kernels of session windows (`runtime/operators/session_window.py`): which rows of a
key merge into one session, and the partial state of each merged session.

Rows here are intervals `[start, end)` of one key slot: a new row `[ts, ts + gap)` or an
open session kept from earlier batches. In (slot, start) order, a row opens a new session
when its slot changes or its start is past the largest end seen so far in the current
session (intervals that touch at a point, `end == start`, merge: Spark's `session_window`
rule, checked against Spark 4.3: rows at 0 s and 1 s with a 1 s gap are one session).
Partial states are then combined per session in the rows' own order (a scatter by session
number): no column but slot and start is sorted.
"""

from __future__ import annotations

import numba
import numpy as np

from mangonel.compiler.physical import StateField
from mangonel.runtime.cpu.generated import kind_kernels
from mangonel.runtime.operators.kernels import neutral

# Insertion-sort moves per row allowed before the general sort takes over (a row late by
# m rows of its key costs m moves).
MOVES_PER_ROW = 16


@numba.njit(cache=True)
def _by_slot(slots, n_slots):
    """A stable counting sort by slot: the permutation that orders `slots` (dense, below
    n_slots), keeping the order rows had within a slot."""
    starts = np.zeros(n_slots + 1, np.int64)
    for i in range(slots.shape[0]):
        starts[slots[i] + 1] += 1
    for slot in range(n_slots):
        starts[slot + 1] += starts[slot]
    order = np.empty(slots.shape[0], np.int64)
    for i in range(slots.shape[0]):
        order[starts[slots[i]]] = i
        starts[slots[i]] += 1
    return order


@numba.njit(cache=True)
def _sort_runs_by_start(order, slots, starts, budget):
    """Insertion-sort each slot's run of `order` (grouped by slot) by start, in place; False
    (order then unspecified) once more than `budget` moves were needed: streams in nearly
    event-time order take few moves per row, others go to a general sort."""
    moves = 0
    n = order.shape[0]
    for position in range(1, n):
        row = order[position]
        slot, start = slots[row], starts[row]
        j = position - 1
        while j >= 0 and slots[order[j]] == slot and starts[order[j]] > start:
            order[j + 1] = order[j]
            j -= 1
            moves += 1
        order[j + 1] = row
        if moves > budget:
            return False
    return True


@numba.njit(cache=True)
def _session_numbers(order, slots, starts, ends):
    """Walk rows in `order` ((slot, start) order): session number of each row (by input
    position), the input position of each session's first row, each session's end."""
    n = order.shape[0]
    numbers = np.empty(n, np.int64)
    first = np.empty(n, np.int64)
    session_ends = np.empty(n, np.int64)
    count = 0
    current_end = 0
    previous_slot = -1
    for position in range(n):
        i = order[position]
        if position == 0 or slots[i] != previous_slot or starts[i] > current_end:
            first[count] = i
            session_ends[count] = ends[i]
            count += 1
            current_end = ends[i]
        elif ends[i] > current_end:
            current_end = ends[i]
            session_ends[count - 1] = ends[i]
        previous_slot = slots[i]
        numbers[i] = count - 1
    return numbers, first[:count], session_ends[:count]


def assign_sessions(
    slots: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    n_slots: int,
    disjoint_first: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge the intervals [starts, ends) of each slot (rows in any order): the session
    number of each row (sessions numbered in (slot, start) order), the row index of each
    session's first row (its slot and start) and each session's end. The order comes from a
    stable counting sort by slot, O(rows + slots), then an insertion sort of each slot's run
    by start, which costs a few moves per row when event times are nearly in order (most
    streams); past `MOVES_PER_ROW` moves per row, numpy's sort by start, then by slot.
    `disjoint_first` (the GPU's shortcut: two sets each disjoint per slot) changes nothing
    here: the walk handles any intervals."""
    slots = np.ascontiguousarray(slots, np.int64)
    starts = np.ascontiguousarray(starts, np.int64)
    order = _by_slot(slots, n_slots)
    if not _sort_runs_by_start(order, slots, starts, MOVES_PER_ROW * len(order)):
        by_start = np.argsort(starts, kind="stable")
        order = by_start[_by_slot(slots[by_start], n_slots)]
    return _session_numbers(order, slots, starts, np.ascontiguousarray(ends, np.int64))


def batch_sessions(
    slots: np.ndarray, starts: np.ndarray, gap: int, n_slots: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A batch's rows `[starts, starts + gap)` merged into sessions: (the session number of
    each row, each session's slot, start and end), sessions in (slot, start) order."""
    starts = np.ascontiguousarray(starts, np.int64)
    numbers, first, ends = assign_sessions(slots, starts, starts + gap, n_slots)
    return numbers, np.asarray(slots, np.int64)[first], starts[first], ends


def combine_sessions(
    fields: tuple[StateField, ...],
    numbers: np.ndarray,
    count: int,
    partials: dict[str, tuple[np.ndarray, ...]],
) -> dict[str, tuple[np.ndarray, ...]]:
    """Per session, the combine of its rows' partial states (each kind's numba scatter, in
    row order: session `numbers[i]` takes row i), from the field's neutral element."""
    out: dict[str, tuple[np.ndarray, ...]] = {}
    for field in fields:
        dtype, neutrals = neutral(field)
        target = tuple(np.full(count, value, dtype) for value in neutrals)
        parts = tuple(np.ascontiguousarray(p, dtype) for p in partials[field.name])
        kind_kernels(field.kind).scatter(*target, numbers, *parts)
        out[field.name] = target
    return out
