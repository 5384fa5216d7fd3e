"""Count windows (`CountWindowOperator`, ROWS n SLIDE m): a window needs its key's tuples in
event-time order, which is final only once the watermark passes them, so the operator keeps
per-tuple partials: pending tuples (ts >= W) on one side, and per key the final tuples that
unfired windows still need (ordered by (ts, arrival)). When W advances, pending tuples with
ts < W become final (sorted per key by (ts, arrival) and appended); window j of a key fires
when the key has j*m + n final tuples; its aggregate comes from the same tree, built over
tuples as leaves. Its `window_start` is the event time of its first tuple and `window_end`
the event time of its last tuple + 1 microsecond (exclusive, like time windows). Rows are
ordered by window number, then key first-seen order. At end of input all pending tuples
become final; windows with fewer than n tuples never fire.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mangonel.compiler import physical as ph
from mangonel.runtime.operators.base import (
    TupleWindowOperator,
    field_arrays,
    field_columns,
)
from mangonel.runtime.operators.holistic_evaluate import evaluate
from mangonel.runtime.operators.late_rows import BEHIND_WATERMARK
from mangonel.runtime.operators.registry import StepKernels
from mangonel.runtime.operators.results import finalize
from mangonel.runtime.operators.sketch_panes import run_answers
from mangonel.runtime.operators.snapshot import pack, unpack


class CountWindowOperator(TupleWindowOperator):
    """ROWS n SLIDE m windows per key over per-tuple partials (see the module docstring)."""

    kind = "count"

    def __init__(self, node: ph.WindowAggregateExec, kernels: StepKernels) -> None:
        # holistic aggregates (`holistic_kernels`) read their raw values (`values` fields: order
        # key and validity per tuple, kept like any partial) over each window's run of tuples
        super().__init__(node, kernels)
        # the per-key tree over host-side tuple segments: the backend its placement names
        self.tree_kernels = kernels("tree")
        self.size = self.spec.size
        self.slide = self.spec.slide
        self.arrivals = 0  # arrival sequence number of the next tuple (ties in event time)
        self.pending = self._empty()  # tuples not final yet (ts >= W)
        self.final = self._empty()  # final tuples unfired windows need, by (slot, position)
        self.final_count = np.zeros(0, np.int64)  # final tuples per key so far
        self.next_window = np.zeros(0, np.int64)  # next window number per key

    def _empty(self) -> dict[str, np.ndarray]:
        columns = {
            "slot": np.empty(0, np.int64),
            "ts": np.empty(0, np.int64),
            "seq": np.empty(0, np.int64),
            "pos": np.empty(0, np.int64),
        }
        columns.update(field_columns(self.fields))
        return columns

    def _merge(self, keys, event_time, include, partials) -> None:
        # late: behind the watermark, where the key's order is final
        event_time, rows, slots = self._accept(
            keys, event_time, include, lambda w, ts: ts < w, BEHIND_WATERMARK
        )
        added = {
            "slot": slots,
            "ts": event_time[rows],
            "seq": self.arrivals + np.arange(len(rows), dtype=np.int64),
            "pos": np.zeros(len(rows), np.int64),
            **self._taken(partials, self.fields, rows),
        }
        self.arrivals += len(rows)
        self.pending = {c: np.concatenate((self.pending[c], added[c])) for c in self.pending}

    def _fire(self, final: bool) -> list[pa.RecordBatch]:
        n_keys = self.keys.n_slots
        if len(self.final_count) < n_keys:
            grow = n_keys - len(self.final_count)
            self.final_count = np.concatenate((self.final_count, np.zeros(grow, np.int64)))
            self.next_window = np.concatenate((self.next_window, np.zeros(grow, np.int64)))
        if final:
            becoming = np.ones(len(self.pending["ts"]), np.bool_)
        elif self.watermark is None:
            return []
        else:
            becoming = self.pending["ts"] < self.watermark
        if becoming.any():
            new = {c: a[becoming] for c, a in self.pending.items()}
            self.pending = {c: a[~becoming] for c, a in self.pending.items()}
            order = np.lexsort((new["seq"], new["ts"], new["slot"]))
            new = {c: a[order] for c, a in new.items()}
            slots = new["slot"]
            group_start = np.searchsorted(slots, slots, side="left")
            new["pos"] = self.final_count[slots] + np.arange(len(slots)) - group_start
            np.add.at(self.final_count, slots, 1)
            merged = {c: np.concatenate((self.final[c], new[c])) for c in self.final}
            order = np.argsort(merged["slot"], kind="stable")
            self.final = {c: a[order] for c, a in merged.items()}
        return self._compute(n_keys)

    def _compute(self, n_keys: int) -> list[pa.RecordBatch]:
        n, m = self.size, self.slide
        last = np.where(self.final_count >= n, (self.final_count - n) // m, -1)
        counts = np.maximum(last - self.next_window + 1, 0)
        keys_firing = np.nonzero(counts)[0]
        if not len(keys_firing):
            return []
        slots = self.final["slot"]
        segment_start = np.searchsorted(slots, keys_firing, side="left")
        first_position = self.final["pos"][segment_start]
        base = segment_start + self.next_window[keys_firing] * m - first_position
        windows = counts[keys_firing]
        leaves = {
            name: tuple(self.final[f"{name}.{part}"] for part in range(parts))
            for name, parts in field_arrays(self.tree_fields)
        }
        values = self.tree_kernels.segment_windows(
            self.tree_fields, leaves, base, windows, m, n, self.window.windows_per_batch
        )
        slot_of_row = np.repeat(keys_firing, windows)
        row_in_task = np.arange(len(slot_of_row)) - np.repeat(np.cumsum(windows) - windows, windows)
        window_of_row = np.repeat(self.next_window[keys_firing], windows) + row_in_task
        first_leaf = np.repeat(base, windows) + row_in_task * m
        starts = self.final["ts"][first_leaf]
        ends = self.final["ts"][first_leaf + n - 1] + 1
        order = np.lexsort((slot_of_row, window_of_row))
        host = self.tree_kernels.to_host
        chosen = {
            name: tuple(host(part)[order] for part in parts) for name, parts in values.items()
        }
        aggregates = finalize(self.window.aggregates, chosen, self._holistic(first_leaf[order]))
        keys = self.keys.decode(slot_of_row[order])
        self.next_window[keys_firing] += windows
        keep = self.final["pos"] >= self.next_window[slots] * m
        self.final = {c: a[keep] for c, a in self.final.items()}
        return self._emit(keys, aggregates, starts[order], ends[order])

    def _holistic(self, first_leaf: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """(count, value) of each holistic aggregate for windows starting at `first_leaf`
        (positions in `self.final`; each spans `size` tuples): one run per window over the
        key's non-NULL values (`holistic_evaluate.evaluate`)."""
        if self.holistic_kernels is None:
            return {}
        fields = {f.name: f for f in self.fields}
        runs_of: dict[str, tuple] = {}
        results = {}
        for position, plan in enumerate(self.window.aggregates):
            if not plan.holistic:
                continue
            name = plan.value_field
            assert name is not None
            if name not in runs_of:
                valid = np.flatnonzero(self.final[f"{name}.1"])
                rows = len(first_leaf)
                runs_of[name] = (
                    self.final[f"{name}.0"][valid],
                    (
                        np.searchsorted(valid, first_leaf),
                        np.searchsorted(valid, first_leaf + self.size),
                        np.arange(rows, dtype=np.int64),
                        np.ones(rows, np.int64),
                    ),
                    self.final["ts"][valid],  # their event times (functions with_timestamps)
                )
            values, runs, times = runs_of[name]
            if plan.sketch:
                results[position] = run_answers(
                    self.holistic_kernels, plan, fields[name], values, runs[0], runs[1]
                )
                continue
            results[position] = evaluate(
                self.holistic_kernels, plan, fields[name], values, runs, False, times
            )
        return results

    def state_bytes(self) -> int:
        total = sum(a.nbytes for a in self.pending.values()) + sum(
            a.nbytes for a in self.final.values()
        )
        return total + self.final_count.nbytes + self.next_window.nbytes + self.keys.nbytes

    def snapshot(self) -> bytes:
        header = self._header()
        header["arrivals"] = self.arrivals
        arrays = self.keys.to_arrays("keys.")
        arrays.update({f"pending.{c}": a for c, a in self.pending.items()})
        arrays.update({f"final.{c}": a for c, a in self.final.items()})
        arrays["final_count"] = self.final_count
        arrays["next_window"] = self.next_window
        return pack(header, arrays)

    def restore(self, data: bytes) -> None:
        header, arrays = unpack(data)
        self._restore_header(header)
        self.arrivals = header["arrivals"]
        self.keys = self.kernels.key_map_from_arrays(self.key_types, arrays, "keys.")
        self.pending = {c: arrays[f"pending.{c}"] for c in self._empty()}
        self.final = {c: arrays[f"final.{c}"] for c in self._empty()}
        self.final_count = arrays["final_count"]
        self.next_window = arrays["next_window"]
