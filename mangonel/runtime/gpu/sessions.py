"""GPU kernels of session windows: the device twins of `runtime.cpu.sessions`, behind the same
three calls of the driver (`runtime.operators.session_window`):

- `batch_sessions`: a batch's rows (intervals `[ts, ts + gap)` of key slots, in any order)
  into sessions. No sort where the batch's bucket table fits (`session.cu.j2`: a dense
  [slots x gap-long buckets] table of each cell's least and largest event time, filled with
  atomics, heads found per cell, numbered by one scan): a row's bucket decides its session
  whatever order rows arrive in, so in-order and out-of-order batches take the same three
  launches. Where the table would hold more than `TABLE_CELLS_PER_ROW` cells per row (a gap
  much shorter than the batch's span of event times, over many keys), the rows are sorted by
  (slot, ts) on the device and a session starts where a row starts at or past the row
  before's end (the same scan).
- `assign_sessions`: intervals of any length (the batch's sessions beside the open sessions
  of the keys it touches, which one batch session can join into one), sorted by (slot,
  start) on the device. The driver's two sets are each disjoint within a key, so whether an
  interval starts a session depends only on the last interval of the other set before it:
  every interval is decided at once, with no walk along a key (a global session's
  thousands of sessions cost no serial pass). Without that promise, one thread walks each
  slot's intervals.
- `combine_sessions`: each session's partial state, the combine of its parts' partials: the
  query's state merge kernel (`merge.cu.j2`, warp- and block-combined like the pane merge)
  into one cell per session, from the fields' neutral elements.

Sessions are numbered in (slot, start) order, as on the CPU. `xp` is CuPy on the device; the
tests pass numpy-like stand-ins and host-compiled modules (tests/cuda_host.py), so the same
code runs without a GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from mangonel.compiler import codegen
from mangonel.compiler.physical import StateField
from mangonel.runtime.gpu.sorting import lexsort_order

# The bucket table's cells per row at most (else the sorted form): the table is filled,
# scanned and read once, so a few cells per row cost about what a sort of the rows would.
TABLE_CELLS_PER_ROW = 4
TABLE_MIN_CELLS = 1 << 16  # a small batch may always take the table
THREADS = 256
MAX_BLOCKS = 65_535
INT64_MIN = int(np.iinfo(np.int64).min)
INT64_MAX = int(np.iinfo(np.int64).max)


def _grid(items: int) -> int:
    return max(1, min((items + THREADS - 1) // THREADS, MAX_BLOCKS))


class GpuSessions:
    """The session kernels over array module `xp`, compiling with `module_of` (a
    `CompileContext.module`); `pane_state_of(fields)` gives a pane state of the fields (its
    merge kernel combines sessions' partials)."""

    def __init__(
        self,
        xp: Any,  # noqa: ANN401 - cupy (or a host stand-in in tests)
        module_of: Callable[[codegen.GeneratedModule], Any],
        pane_state_of: Callable[[tuple[StateField, ...]], Any],
    ) -> None:
        self.xp = xp
        self.module_of = module_of
        self.pane_state_of = pane_state_of
        self._functions: dict[str, Any] | None = None
        self.table_batches = 0  # batches grouped by the bucket table (no sort)
        self.sorted_batches = 0  # batches sorted by (slot, ts)

    def _launch(self, role: str, items: int, *arguments: Any) -> None:  # noqa: ANN401
        if self._functions is None:
            generated = codegen.render_session_kernels()
            module = self.module_of(generated)
            self._functions = {r: module.get_function(n) for r, n in generated.names.items()}
        self._functions[role]((_grid(items),), (THREADS,), arguments)

    def _int64(self, array: Any) -> Any:  # noqa: ANN401
        xp = self.xp
        return xp.ascontiguousarray(xp.asarray(array), dtype=xp.int64)

    def _empty(self, count: int) -> Any:  # noqa: ANN401
        return self.xp.empty(count, self.xp.int64)

    def batch_sessions(
        self,
        slots: Any,  # noqa: ANN401 - device (or host) arrays, one entry per row
        starts: Any,  # noqa: ANN401
        gap: int,
        n_slots: int,
    ) -> tuple[Any, Any, Any, Any]:
        """Rows `[starts, starts + gap)` of key slots (below n_slots) merged into sessions:
        (session number of each row, each session's slot, start and end; device arrays)."""
        rows = int(starts.shape[0])
        slots, starts = self._int64(slots), self._int64(starts)
        if rows == 0:
            return tuple(self._empty(0) for _ in range(4))  # type: ignore[return-value]
        first_bucket = int(starts.min()) // gap  # Python integers: no overflow
        buckets = int(starts.max()) // gap - first_bucket + 1
        if n_slots * buckets <= max(TABLE_CELLS_PER_ROW * rows, TABLE_MIN_CELLS):
            self.table_batches += 1
            return self._by_table(slots, starts, gap, n_slots, first_bucket, buckets)
        self.sorted_batches += 1
        return self._by_sort(slots, starts, gap)

    def _by_table(self, slots, starts, gap, n_slots, first_bucket, buckets):  # noqa: ANN001, ANN202
        xp = self.xp
        rows, cells = int(starts.shape[0]), n_slots * buckets
        cell = self._empty(rows)
        low = xp.full(cells, INT64_MAX, xp.int64)
        high = xp.full(cells, INT64_MIN, xp.int64)
        self._launch(
            "session_cells",
            rows,
            slots,
            starts,
            np.int64(rows),
            np.int64(gap),
            np.int64(first_bucket),
            np.int64(buckets),
            cell,
            low,
            high,
        )
        head = self._empty(cells)
        self._launch(
            "session_heads",
            cells,
            low,
            high,
            np.int64(cells),
            np.int64(buckets),
            np.int64(gap),
            head,
        )
        number = xp.ascontiguousarray(xp.cumsum(head))  # session number + 1 of each cell
        count = int(number[-1])
        slot, start, end = self._empty(count), self._empty(count), self._empty(count)
        self._launch(
            "session_bounds",
            cells,
            low,
            high,
            head,
            number,
            np.int64(cells),
            np.int64(buckets),
            np.int64(gap),
            slot,
            start,
            end,
        )
        return number[cell] - 1, slot, start, end

    def _by_sort(self, slots, starts, gap):  # noqa: ANN001, ANN202
        xp = self.xp
        rows = int(starts.shape[0])
        order = lexsort_order(xp, (starts, slots))  # the last key is the primary one
        sorted_slots = xp.ascontiguousarray(slots[order])
        sorted_starts = xp.ascontiguousarray(starts[order])
        head = self._empty(rows)
        self._launch(
            "session_breaks", rows, sorted_slots, sorted_starts, np.int64(rows), np.int64(gap), head
        )
        number = xp.cumsum(head)
        numbers = self._empty(rows)
        numbers[order] = number - 1
        heads = xp.flatnonzero(head)
        lasts = xp.concatenate((heads[1:] - 1, xp.asarray([rows - 1], dtype=xp.int64)))
        return numbers, sorted_slots[heads], sorted_starts[heads], sorted_starts[lasts] + gap

    def assign_sessions(
        self,
        slots: Any,  # noqa: ANN401 - device or host arrays
        starts: Any,  # noqa: ANN401
        ends: Any,  # noqa: ANN401
        n_slots: int,
        disjoint_first: int | None = None,
    ) -> tuple[Any, Any, Any]:
        """Intervals `[starts, ends)` of key slots merged into sessions: (session number of
        each interval, the index of each session's first interval (least start), each
        session's end; device arrays), as `runtime.cpu.sessions.assign_sessions`.
        `disjoint_first`: the caller promises that the first that many intervals are
        disjoint within each slot, and so are the rest (open sessions, then a batch's):
        then every interval is decided at once (`_two_sets`), else a thread walks each
        slot's intervals."""
        count = int(starts.shape[0])
        slots, starts, ends = self._int64(slots), self._int64(starts), self._int64(ends)
        if count == 0:
            return self._empty(0), self._empty(0), self._empty(0)
        if disjoint_first is not None and 0 < disjoint_first < count:
            return self._two_sets(slots, starts, ends, disjoint_first)
        return self._walk(slots, starts, ends)

    def _two_sets(self, slots, starts, ends, split):  # noqa: ANN001, ANN202
        xp = self.xp
        count = int(starts.shape[0])
        order = lexsort_order(xp, (starts, slots))  # stable: set A first among equals
        sorted_slots = xp.ascontiguousarray(slots[order])
        sorted_starts = xp.ascontiguousarray(starts[order])
        sorted_ends = xp.ascontiguousarray(ends[order])
        in_b = order >= split
        b_count = self._int64(xp.cumsum(in_b, dtype=xp.int64))
        a_count = self._int64(xp.arange(1, count + 1, dtype=xp.int64) - b_count)
        a_pos, b_pos = self._int64(xp.flatnonzero(~in_b)), self._int64(xp.flatnonzero(in_b))
        head = self._empty(count)
        self._launch(
            "session_two_sets",
            count,
            sorted_slots,
            sorted_starts,
            sorted_ends,
            xp.ascontiguousarray(in_b, dtype=xp.uint8),
            a_pos,
            b_pos,
            a_count,
            b_count,
            np.int64(count),
            head,
        )
        number = xp.cumsum(head)
        numbers = self._empty(count)
        numbers[order] = number - 1
        heads = self._int64(xp.flatnonzero(head))
        lasts = self._int64(
            xp.concatenate((heads[1:] - 1, xp.asarray([count - 1], dtype=xp.int64)))
        )
        sessions = int(heads.shape[0])
        session_end = self._empty(sessions)
        self._launch(
            "session_two_set_ends",
            sessions,
            sorted_ends,
            a_pos,
            b_pos,
            a_count,
            b_count,
            heads,
            lasts,
            np.int64(sessions),
            session_end,
        )
        return numbers, order[heads], session_end

    def _walk(self, slots, starts, ends):  # noqa: ANN001, ANN202
        xp = self.xp
        count = int(starts.shape[0])
        order = lexsort_order(xp, (starts, slots))
        sorted_slots = slots[order]
        sorted_starts = xp.ascontiguousarray(starts[order])
        sorted_ends = xp.ascontiguousarray(ends[order])
        changes = xp.flatnonzero(sorted_slots[1:] != sorted_slots[:-1]) + 1
        run_first = xp.ascontiguousarray(
            xp.concatenate(
                (
                    xp.zeros(1, xp.int64),
                    changes.astype(xp.int64),
                    xp.asarray([count], dtype=xp.int64),
                )
            )
        )
        runs = int(run_first.shape[0]) - 1
        head, reach = self._empty(count), self._empty(count)
        self._launch(
            "session_walk", runs, sorted_starts, sorted_ends, run_first, np.int64(runs), head, reach
        )
        number = xp.cumsum(head)
        numbers = self._empty(count)
        numbers[order] = number - 1
        heads = xp.flatnonzero(head)
        lasts = xp.concatenate((heads[1:] - 1, xp.asarray([count - 1], dtype=xp.int64)))
        return numbers, order[heads], reach[lasts]

    def combine_sessions(
        self,
        fields: tuple[StateField, ...],
        numbers: Any,  # noqa: ANN401
        count: int,
        partials: dict[str, tuple[Any, ...]],
    ) -> dict[str, tuple[Any, ...]]:
        """Per session, the combine of its rows' partial states (row i into session
        `numbers[i]`), from the fields' neutral elements: the state merge kernel into a
        `count` x 1 pane state."""
        state = self.pane_state_of(fields)
        state.reshape(0, 0, 0)  # drop the last call's cells: a fresh, neutral state
        state.reshape(count, 1, 0)
        if count:
            # the merge with open sessions hands host arrays (the open sessions live there)
            on_device = {
                name: tuple(self.xp.asarray(part) for part in parts)
                for name, parts in partials.items()
            }
            state.merge(self._int64(numbers), on_device)
            state.settle()  # lock-free merges (MOMENTS) back to the kinds' parts
        out: dict[str, tuple[Any, ...]] = {}
        for part in state.parts:
            out[part.field] = (*out.get(part.field, ()), state.arrays[part.member])
        return {field.name: out.get(field.name, ()) for field in fields}
