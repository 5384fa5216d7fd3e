"""Session windows (`SessionWindowOperator`, `[SESSION GAP g]`, Spark's `session_window`).

Per key, each row opens the interval `[ts, ts + g)`; intervals of one key that overlap merge
into one session `[first ts, last ts + g)`, so a row arriving out of order can bridge two
sessions into one. The operator keeps the open sessions only: per session its key slot,
start, end and the combined partial state of every field (the same per-tuple partials the
time windows lift, combined with each state kind's own combine). A batch:

1. lift (the `session` step's kernels), drop late rows: a row is late when its own interval
   has ended at the watermark before the batch (`ts + g <= W`), Spark's rule (its late filter
   reads each row's own `session_window.end`, before any merge);
2. the batch's rows form sessions of their own where they were lifted
   (`kernels.batch_sessions`: the CPU's numba walk in (slot, ts) order; on the GPU a bucket
   table without a sort, or a device sort where the table would be large), each with the
   combine of its rows' partials (`kernels.combine_sessions`); only those sessions reach the
   host. Then they and the open sessions of the keys they touch, sorted by (slot, start), are
   merged (`kernels.assign_sessions`: one batch session can join two open ones), each merged
   session's partial the combine of its parts;
3. after the watermark moves, every session with `end <= W` fires once (final: its state is
   freed; a later row of the key that overlaps it in time opens a new session, as in Spark,
   whose state no longer holds the emitted one). Rows come ordered by session start, then
   key first-seen order. At end of input every open session fires.

Holistic aggregates (MEDIAN, PERCENTILE_*, COUNT(DISTINCT), the approximate ones, Python
window functions; strategy `session-runs`) keep their raw values per tuple (`values` fields:
order key and validity, as count windows do) tagged with their open session's id; a merge
re-tags the values of the sessions it merged, and a firing evaluates each fired session's
run of values (`holistic_evaluate.evaluate`, `sketch_panes.run_answers`) and frees them.

Semantics: docs/semantics.md, "Session windows". Inside Spark the query runs as Spark's
native `session_window` aggregation (`runtime/spark/planner.py`), except with `late_rows=`:
Spark's aggregation drops late rows unseen, so the split form runs instead, the per-tuple
`preaggregate`/`merge` of `TupleWindowOperator` (stage 1 ships each tuple, stage 2 merges
them here and judges lateness with this operator's rule against the previous micro-batch's
watermark, which is Spark's).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mangonel.compiler import physical as ph
from mangonel.runtime.operators.base import TupleWindowOperator, field_arrays, field_columns
from mangonel.runtime.operators.conform import INT64_MIN
from mangonel.runtime.operators.holistic_evaluate import evaluate
from mangonel.runtime.operators.late_rows import WINDOW_CLOSED
from mangonel.runtime.operators.registry import StepKernels
from mangonel.runtime.operators.results import finalize
from mangonel.runtime.operators.sketch_panes import run_answers
from mangonel.runtime.operators.snapshot import pack, unpack


class SessionWindowOperator(TupleWindowOperator):
    """Session windows per key over open sessions' partial states (module docstring)."""

    kind = "session"

    def __init__(self, node: ph.WindowAggregateExec, kernels: StepKernels) -> None:
        super().__init__(node, kernels)
        # the merge of intervals into sessions: the backend its placement names (the lift's:
        # GPU plans place both on the GPU unless holistic aggregates keep every step on the
        # CPU, `physical.SESSION_HOLISTIC_ON_CPU`)
        self.session_kernels = kernels("session")
        self.value_fields = tuple(f for f in self.fields if f.kind.holistic)
        self.gap = self.spec.size
        self.next_id = 0  # id of the next session formed (holistic values are tagged with it)
        self.open = self._empty()  # open sessions: id, slot, start, end, incremental parts
        self.values = self._empty_values()  # holistic fields' values: session id, parts

    def _empty(self) -> dict[str, np.ndarray]:
        columns = {
            "id": np.empty(0, np.int64),
            "slot": np.empty(0, np.int64),
            "start": np.empty(0, np.int64),
            "end": np.empty(0, np.int64),
        }
        columns.update(field_columns(self.tree_fields))
        return columns

    def _empty_values(self) -> dict[str, np.ndarray]:
        return {"session": np.empty(0, np.int64), **field_columns(self.value_fields)}

    @property
    def open_sessions(self) -> int:
        return len(self.open["slot"])

    def _late(self, watermark: int, event_time: np.ndarray) -> np.ndarray | None:
        """Rows whose own interval ended at W (ts + gap <= W); the bound is computed in
        Python integers, as W - gap may pass int64's lower end (no row is late then)."""
        bound = watermark - self.gap
        return event_time <= bound if bound >= INT64_MIN else None

    def _merge(self, keys, event_time, include, partials) -> None:
        # the lifted arrays are the session step's backend's (lift and session are placed
        # together): device arrays on the GPU until the batch's sessions are formed
        sessions = self.session_kernels
        host = sessions.to_host
        include = include.copy()
        if self.watermark is not None:
            late = self._late(self.watermark, event_time)
            if late is not None:
                late &= include
                self.late += int(late.sum())
                self._judged_late(late, WINDOW_CLOSED)  # standalone rows (late_rows.py)
                include &= ~late
        rows = include.nonzero()[0]
        if not len(rows):
            return
        slots = self.keys.map_columns(keys, include)[rows]
        n_slots = self.keys.n_slots
        # 1. the batch's rows into sessions of their own, where the rows are (on the GPU
        # without a sort, `gpu/sessions.py`); only the sessions come to the host
        numbers, slot, start, end = sessions.batch_sessions(
            slots, event_time[rows], self.gap, n_slots
        )
        batch_partials = sessions.combine_sessions(
            self.tree_fields,
            numbers,
            len(end),
            {
                name: tuple(p[rows] for p in partials[name])
                for name, _ in field_arrays(self.tree_fields)
            },
        )
        added = {
            "id": np.full(len(end), -1, np.int64),
            "slot": host(slot),
            "start": host(start),
            "end": host(end),
        }
        for name, parts in field_arrays(self.tree_fields):
            for part in range(parts):
                added[f"{name}.{part}"] = host(batch_partials[name][part])
        # 2. with the open sessions of the keys the batch touches: only those can merge, and
        # one batch session can join two of them
        touched_slots = np.zeros(n_slots, np.bool_)
        touched_slots[added["slot"]] = True
        touched = touched_slots[self.open["slot"]]
        touched_count = int(touched.sum())
        kept = {c: a[~touched] for c, a in self.open.items()}
        candidates = {c: np.concatenate((a[touched], added[c])) for c, a in self.open.items()}
        if touched_count:
            merged_numbers, first, ends = (
                host(a)
                for a in sessions.assign_sessions(
                    candidates["slot"],
                    candidates["start"],
                    candidates["end"],
                    n_slots,
                    # open sessions never overlap, nor do a batch's: two disjoint sets
                    disjoint_first=touched_count,
                )
            )
            merged_partials = sessions.combine_sessions(
                self.tree_fields,
                merged_numbers,
                len(ends),
                {
                    name: tuple(candidates[f"{name}.{part}"] for part in range(parts))
                    for name, parts in field_arrays(self.tree_fields)
                },
            )
        else:  # no open session of these keys: the batch's sessions are the merged ones
            merged_numbers = first = np.arange(len(added["end"]), dtype=np.int64)
            ends = added["end"]
            merged_partials = {
                name: tuple(added[f"{name}.{part}"] for part in range(parts))
                for name, parts in field_arrays(self.tree_fields)
            }
        ids = self.next_id + np.arange(len(ends), dtype=np.int64)
        self.next_id += len(ends)
        merged = {
            "id": ids,
            "slot": candidates["slot"][first],
            "start": candidates["start"][first],  # a session's first row has its least start
            "end": ends,
        }
        for name, parts in field_arrays(self.tree_fields):
            for part in range(parts):
                merged[f"{name}.{part}"] = host(merged_partials[name][part])
        self.open = {c: np.concatenate((kept[c], merged[c])) for c in self.open}
        if self.value_fields:
            self._retag(candidates["id"][:touched_count], ids[merged_numbers[:touched_count]])
            # a row's session: its batch session's merged one
            row_sessions = ids[merged_numbers[touched_count + host(numbers)]]
            new_values = {"session": row_sessions}
            new_values.update(self._taken(partials, self.value_fields, host(rows)))
            self.values = {c: np.concatenate((a, new_values[c])) for c, a in self.values.items()}

    def _retag(self, old_ids: np.ndarray, new_ids: np.ndarray) -> None:
        """Values of the sessions `old_ids` now belong to the sessions `new_ids` (a merge)."""
        found, where = _lookup(old_ids, self.values["session"])
        sessions = self.values["session"].copy()  # restored arrays may be read-only views
        sessions[found] = new_ids[where]
        self.values["session"] = sessions

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
            for name, parts in field_arrays(self.tree_fields)
        }
        aggregates = finalize(self.window.aggregates, values, self._holistic(fired["id"]))
        keys = self.keys.decode(fired["slot"])
        return self._emit(keys, aggregates, fired["start"], fired["end"])

    def _holistic(self, fired_ids: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """(count, value) of each holistic aggregate for the fired sessions (result rows in
        `fired_ids` order): each session's non-NULL values are one run; then freed."""
        if self.holistic_kernels is None:
            return {}
        rows = len(fired_ids)
        found, row_of = _lookup(fired_ids, self.values["session"])
        chosen = np.flatnonzero(found)
        fields = {f.name: f for f in self.fields}
        runs_of: dict[str, tuple] = {}
        results = {}
        for position, plan in enumerate(self.window.aggregates):
            if not plan.holistic:
                continue
            name = plan.value_field
            assert name is not None
            if name not in runs_of:
                valid = self.values[f"{name}.1"][chosen].astype(np.bool_)
                owner = row_of[valid]
                order = np.argsort(owner, kind="stable")  # arrival order within a session
                counts = np.bincount(owner, minlength=rows).astype(np.int64)
                ends = np.cumsum(counts)
                runs_of[name] = (
                    self.values[f"{name}.0"][chosen][valid][order],
                    (
                        ends - counts,
                        ends,
                        np.arange(rows, dtype=np.int64),
                        np.ones(rows, np.int64),
                    ),
                )
            values, runs = runs_of[name]
            if plan.sketch:
                results[position] = run_answers(
                    self.holistic_kernels, plan, fields[name], values, runs[0], runs[1]
                )
                continue
            results[position] = evaluate(
                self.holistic_kernels, plan, fields[name], values, runs, False
            )
        self.values = {c: a[~found] for c, a in self.values.items()}  # final: freed
        return results

    def state_bytes(self) -> int:
        held = sum(a.nbytes for a in self.open.values())
        return held + sum(a.nbytes for a in self.values.values()) + self.keys.nbytes

    def snapshot(self) -> bytes:
        header = self._header()
        header["next_session_id"] = self.next_id
        arrays = self.keys.to_arrays("keys.")
        arrays.update({f"open.{c}": a for c, a in self.open.items()})
        arrays.update({f"values.{c}": a for c, a in self.values.items()})
        return pack(header, arrays)

    def restore(self, data: bytes) -> None:
        header, arrays = unpack(data)
        self._restore_header(header)
        self.next_id = header["next_session_id"]
        self.keys = self.kernels.key_map_from_arrays(self.key_types, arrays, "keys.")
        self.open = {c: arrays[f"open.{c}"] for c in self._empty()}
        self.values = {c: arrays[f"values.{c}"] for c in self._empty_values()}


def _lookup(keys: np.ndarray, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each of `items`: whether it is one of `keys` (distinct), and where: its index in
    `keys` for the found ones (in item order)."""
    if not len(keys):
        return np.zeros(len(items), np.bool_), np.empty(0, np.int64)
    sorter = np.argsort(keys)
    position = np.minimum(np.searchsorted(keys, items, sorter=sorter), len(keys) - 1)
    found = keys[sorter[position]] == items
    return found, sorter[position[found]]
