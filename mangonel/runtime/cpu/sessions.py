"""numba kernels of session windows (`runtime/operators/session_window.py`): which rows of a
key merge into one session, and the partial state of each merged session.

Rows here are intervals `[start, end)` of one key slot: a new row `[ts, ts + gap)` or an
open session kept from earlier batches. Sorted by (slot, start), a row opens a new session
when its slot changes or its start is at or past the largest end seen so far in the current
session (intervals that touch at a point, `end == start`, do not merge: Spark's rule, since
`[a, b)` and `[b, c)` share no instant). One pass, no sort of its own.
"""

from __future__ import annotations

import numba
import numpy as np

from mangonel.compiler.physical import StateField
from mangonel.runtime.cpu.generated import kind_kernels
from mangonel.runtime.operators.kernels import neutral


@numba.njit(cache=True)
def session_numbers(slots, starts, ends):
    """Session number of each row (rows sorted by (slot, start)), the session's end (the
    largest end of its rows), and the number of sessions."""
    n = slots.shape[0]
    numbers = np.empty(n, np.int64)
    session_ends = np.empty(n, np.int64)
    count = 0
    current_end = 0
    for i in range(n):
        if i == 0 or slots[i] != slots[i - 1] or starts[i] >= current_end:
            session_ends[count] = ends[i]
            count += 1
            current_end = ends[i]
        elif ends[i] > current_end:
            current_end = ends[i]
            session_ends[count - 1] = ends[i]
        numbers[i] = count - 1
    return numbers, session_ends[:count], count


def assign_sessions(
    slots: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Session number of each row (rows sorted by (slot, start)) and each session's end."""
    numbers, session_ends, _ = session_numbers(
        np.ascontiguousarray(slots, np.int64),
        np.ascontiguousarray(starts, np.int64),
        np.ascontiguousarray(ends, np.int64),
    )
    return numbers, session_ends


def combine_sessions(
    fields: tuple[StateField, ...],
    numbers: np.ndarray,
    count: int,
    partials: dict[str, tuple[np.ndarray, ...]],
) -> dict[str, tuple[np.ndarray, ...]]:
    """Per session, the combine of its rows' partial states (each kind's numba scatter, in
    row order), from the field's neutral element."""
    out: dict[str, tuple[np.ndarray, ...]] = {}
    for field in fields:
        dtype, neutrals = neutral(field)
        target = tuple(np.full(count, value, dtype) for value in neutrals)
        parts = tuple(np.ascontiguousarray(p, dtype) for p in partials[field.name])
        kind_kernels(field.kind).scatter(*target, numbers, *parts)
        out[field.name] = target
    return out
