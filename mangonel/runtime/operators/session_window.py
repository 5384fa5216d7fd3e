"""Session windows (`SessionWindowOperator`, `[SESSION GAP g]`, Spark's `session_window`).

Per key, each row opens the interval `[ts, ts + g)`; intervals of one key that overlap merge
into one session `[first ts, last ts + g)`, so a row arriving out of order can bridge two
sessions into one. The operator keeps the open sessions only: per session its key slot,
start, end and the combined partial state of every field (the same per-tuple partials the
time windows lift, combined with each state kind's own combine). A batch:

1. lift (the `session` step's kernels), drop late rows: a row is late when its own interval
   has ended at the watermark before the batch (`ts + g <= W`), Spark's rule (its late filter
   reads each row's own `session_window.end`, before any merge);
2. the new intervals and the open sessions of the keys they touch, sorted by (slot, start),
   are merged in one pass (`kernels.assign_sessions`), and each merged session's partial is
   the combine of its parts (`kernels.combine_sessions`);
3. after the watermark moves, every session with `end <= W` fires once (final: its state is
   freed; a later row of the key that overlaps it in time opens a new session, as in Spark,
   whose state no longer holds the emitted one). Rows come ordered by session start, then
   key first-seen order. At end of input every open session fires.

Semantics: docs/semantics.md, "Session windows". Holistic aggregates are refused at planning
(`compiler/session.py`); inside Spark the query runs as Spark's native `session_window`
aggregation (`runtime/spark/planner.py`), so the split form's `preaggregate`/`merge` are not
implemented here.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mangonel.compiler import physical as ph
from mangonel.compiler.physical import field_dtype
from mangonel.runtime.operators.base import OperatorBase, field_arrays
from mangonel.runtime.operators.conform import INT64_MIN
from mangonel.runtime.operators.registry import StepKernels
from mangonel.runtime.operators.results import finalize
from mangonel.runtime.operators.snapshot import pack, unpack


class SessionWindowOperator(OperatorBase):
    """Session windows per key over open sessions' partial states (module docstring)."""

    kind = "session"

    def __init__(self, node: ph.WindowAggregateExec, kernels: StepKernels) -> None:
        super().__init__(node, kernels)
        # the merge of intervals into sessions: the backend its placement names (the CPU's
        # numba kernels; GPU plans place it there, `physical.SESSION_ON_CPU`)
        self.session_kernels = kernels("session")
        self.gap = self.spec.size
        self.open = self._empty()  # open sessions: slot, start, end, field parts

    def _empty(self) -> dict[str, np.ndarray]:
        columns = {
            "slot": np.empty(0, np.int64),
            "start": np.empty(0, np.int64),
            "end": np.empty(0, np.int64),
        }
        for field in self.fields:
            dtype = field_dtype(field)
            for part in range(len(field.kind.parts)):
                columns[f"{field.name}.{part}"] = np.empty(0, dtype)
        return columns

    @property
    def open_sessions(self) -> int:
        return len(self.open["slot"])

    def _process(self, batch: pa.RecordBatch) -> None:
        lifted = self.kernels.lift_tuples(self.lift_node, batch)
        self.tuples_in += lifted.rows
        self.null_event_time += lifted.null_event_time
        self._merge(lifted.keys, lifted.event_time, lifted.contributes, lifted.partials)
        self._observe(lifted.max_event_time)

    def _merge(self, keys, event_time, include, partials) -> None:
        host = self.kernels.to_host
        event_time = host(event_time)
        include = host(include).copy()
        if self.watermark is not None:
            # late: the row's own interval ended at W (ts + gap <= W); the bound is computed
            # in Python integers, as W - gap may pass int64's lower end
            bound = self.watermark - self.gap
            if bound >= INT64_MIN:
                late = include & (event_time <= bound)
                self.late += int(late.sum())
                include &= ~late
        rows = np.nonzero(include)[0]
        if not len(rows):
            return
        slots = host(self.keys.map_columns(keys, self.kernels.from_host(include)))[rows]
        starts = event_time[rows]
        added = {"slot": slots, "start": starts, "end": starts + self.gap}
        for name, parts in field_arrays(self.fields):
            for part in range(parts):
                added[f"{name}.{part}"] = host(partials[name][part])[rows]
        # only the open sessions of keys this batch touches can merge
        n_slots = self.keys.n_slots
        touched_slots = np.zeros(n_slots, np.bool_)
        touched_slots[slots] = True
        touched = touched_slots[self.open["slot"]]
        kept = {c: a[~touched] for c, a in self.open.items()}
        candidates = {c: np.concatenate((a[touched], added[c])) for c, a in self.open.items()}
        numbers, first, ends = self.session_kernels.assign_sessions(
            candidates["slot"], candidates["start"], candidates["end"], n_slots
        )
        merged_partials = self.session_kernels.combine_sessions(
            self.fields,
            numbers,
            len(ends),
            {
                name: tuple(candidates[f"{name}.{part}"] for part in range(parts))
                for name, parts in field_arrays(self.fields)
            },
        )
        merged = {
            "slot": candidates["slot"][first],
            "start": candidates["start"][first],  # a session's first row has its least start
            "end": ends,
        }
        for name, parts in field_arrays(self.fields):
            for part in range(parts):
                merged[f"{name}.{part}"] = merged_partials[name][part]
        self.open = {c: np.concatenate((kept[c], merged[c])) for c in self.open}

    def _fire(self, final: bool) -> list[pa.RecordBatch]:
        if final:
            firing = np.ones(self.open_sessions, np.bool_)
        elif self.watermark is None:
            return []
        else:
            firing = self.open["end"] <= self.watermark
        if not firing.any():
            return []
        fired = {c: a[firing] for c, a in self.open.items()}
        self.open = {c: a[~firing] for c, a in self.open.items()}  # final: state freed
        order = np.lexsort((fired["slot"], fired["start"]))
        fired = {c: a[order] for c, a in fired.items()}
        values = {
            name: tuple(fired[f"{name}.{part}"] for part in range(parts))
            for name, parts in field_arrays(self.fields)
        }
        aggregates = finalize(self.window.aggregates, values)
        keys = self.keys.decode(fired["slot"])
        return self._emit(keys, aggregates, fired["start"], fired["end"])

    def state_bytes(self) -> int:
        return sum(a.nbytes for a in self.open.values()) + self.keys.nbytes

    def snapshot(self) -> bytes:
        arrays = self.keys.to_arrays("keys.")
        arrays.update({f"open.{c}": a for c, a in self.open.items()})
        return pack(self._header(), arrays)

    def restore(self, data: bytes) -> None:
        header, arrays = unpack(data)
        self._restore_header(header)
        self.keys = self.kernels.key_map_from_arrays(self.key_types, arrays, "keys.")
        self.open = {c: arrays[f"open.{c}"] for c in self._empty()}
