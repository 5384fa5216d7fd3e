"""The backend-neutral driver of the window-aggregation operator (DESIGN section 3).

Time windows (`TimeWindowOperator`), SPRINGALD's two stages:

- pane level: every batch is lifted (filter, project, event time, per-tuple partial state),
  each tuple gets its pane `floor(ts / p)`, p = gcd(range, slide), and its key slot; lateness
  is decided per pane against the watermark from before the batch (a pane is late when its
  last window `floor(q*p / s)*s + w` ended at or before W); the partials of the remaining
  tuples are combined straight into the flat `[keys x panes]` state arrays (the pending
  panes). A pane stays updatable while any window that needs it is unfired, so "closed" panes
  and pending ones share those arrays; columns below the oldest unfired window are dropped
  when the arrays are next reshaped, so state stays proportional to the live panes. A batch
  whose dense block would be far larger than the batch (many keys over a long stretch of
  event time) is merged in pane-ordered chunks, and the windows the batch's watermark will
  fire that end before the next chunk fire in between (`_merge`): state stays at about
  keys x (chunk + window) panes, and results are those of the unchunked merge.
- window level: after the batch, W = max(W, max_ts - delay) (every row with an event time
  counts, also those WHERE drops), and every window with end <= W fires in window order: the
  runs of consecutive windows that hold data (empty stretches are skipped without work) go to
  the batched pane aggregation tree of `kernels.PaneState.windows`, `windows_per_batch`
  windows per tree build. A (window, key) emits a row only if one tuple of the key
  contributed (the first state field counts rows). Rows are ordered by window, then key in
  first-seen order (the order keys first contributed a tuple).

Split form (Spark): `preaggregate(batch)` is stateless and returns a `pa.RecordBatch` of pane
partials (original key values, `__pane`, state fields; one row per (key, pane) of the batch,
with the batch's max event time and NULL-event-time count in the schema metadata);
`merge(partials)` decides lateness per pane and combines them; `advance_watermark(W)` fires.
`process(batch)` is the fused standalone form of lift + merge + watermark update + fire (it
skips the intermediate partial rows: tuples combine straight into the state): it calls the
kernels' `lift_merge` with the newest segment as target, and merges the rows the backend could
not place there (new keys, panes elsewhere; on the CPU every row) through the split path.

Input: every batch first passes `conform.BatchConformer` (declared types, lossless widening
only, NOT NULL; DataError otherwise) before any backend work. Event times outside
`event_time_range` (a window bound would not fit int64) become NULL there and are counted
apart (`event_time_out_of_range_dropped`; they do not move the watermark).

Other decisions: tuples with a NULL event time are dropped and counted
(`null_event_time_dropped`, whatever WHERE says); `late_tuples_dropped` counts late tuples
that passed WHERE (a tuple WHERE removes is not "dropped as late"); `windows_fired` counts
(window, key) results before HAVING, `rows_out` the rows after it (counted by the
`tree.OperatorTree` that pushes the results through Filter and Project).

Output: window results (`physical.window_result_columns`: keys, `__window_start`,
`__window_end`, `__aggregate_<i>`), one row per fired (window, key) in the order above;
HAVING and the SELECT list are the Filter and Project operators above it (`project`).

The shared part of both operators (input, watermark, metrics, partials, snapshot header)
is `base.OperatorBase`; count windows are `count_window.CountWindowOperator`; finalize and
the window-result batch are `results`; the snapshot codec is `snapshot`; the registry's
factory is `make_window_operator`, and `kernels` (a `registry.StepKernels`) gives each step
the kernels of the backend its placement names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from mangonel.compiler import physical as ph
from mangonel.compiler.holistic import incremental_part
from mangonel.compiler.logical import WindowKind
from mangonel.errors import PlanError
from mangonel.runtime.operators.base import PANE_META, OperatorBase, field_arrays
from mangonel.runtime.operators.count_window import CountWindowOperator
from mangonel.runtime.operators.holistic import HolisticTimeWindows
from mangonel.runtime.operators.kernels import Array, FusedMerge, PaneTarget, Staging
from mangonel.runtime.operators.late_rows import WINDOW_CLOSED
from mangonel.runtime.operators.registry import StepKernels
from mangonel.runtime.operators.results import cells_with_rows, finalize, window_ids_of
from mangonel.runtime.operators.session_window import SessionWindowOperator
from mangonel.runtime.operators.snapshot import pack, unpack

MAX_RESULT_CELLS = 1 << 22  # (window, key) cells per tree call: bounds memory of one firing
DIRECT_WINDOWS = 64  # firings of at most this many windows skip the occupancy scan
# one segment's state arrays (every field, at the capacity `_reserve` allocates) stay under
# this: a batch whose dense `[keys x panes]` block would not is split at window-wide gaps
# (`_clusters`) and merged in pane-ordered chunks with firing between them (`_merge`)
MAX_SEGMENT_BYTES = 256 << 20
MIN_CAPACITY = 16  # panes and keys: the smallest state arrays `_reserve` allocates
MIN_SPLIT_GAP = 16  # panes: a segment holds at least 16 columns, smaller gaps save nothing
FIRST_HEAD_ROWS = 1 << 16  # rows of a run's first batch that make its segment and keys


# At most this many consecutive batches share one firing when the runner holds the input in
# memory (`LocalQuery._combine_firings`): results wait at most this many batches.
COMBINED_FIRING_BATCHES = 8
# Batches named ahead of the one processed where the kernels stage in the background: with
# one, the GPU's copy worker idled 0.2-0.4 ms a 1 M-row batch while the driver fired; with two
# it has the batch after next queued (docs/performance/gpu.md: +6 % at 1 M rows, H100).
BACKGROUND_PREFETCH_DEPTH = 2


def _capacity(start: int, need: int) -> int:
    """`start` doubled until it holds `need` (array capacities grow by powers of two)."""
    capacity = start
    while capacity < need:
        capacity *= 2
    return capacity


@dataclass
class _Segment:
    """A dense block of the pane state: data panes [first, last]. Two segments are at least
    one window apart (a window never reads two), so sparse streams (gaps, far outliers) keep
    state proportional to the panes that hold data."""

    state: Any  # kernels.PaneState
    first: int
    last: int


class TimeWindowOperator(OperatorBase):
    """RANGE w SLIDE s windows over panes of p = gcd(w, s) (see the module docstring)."""

    kind = "time"

    def __init__(self, node: ph.WindowAggregateExec, kernels: StepKernels) -> None:
        super().__init__(node, kernels)
        for step in ("merge", "tree"):
            # the pane state lives with the lift's kernels: merge and tree run where it is
            if kernels.backend_of(step) != kernels.backend_of("lift"):
                raise PlanError(
                    f"time windows run lift, merge and tree on one backend; the plan places "
                    f"lift on {kernels.backend_of('lift')} and {step} on "
                    f"{kernels.backend_of(step)}"
                )
        self.pane_length = self.window.pane_length
        self.panes_per_window = self.window.panes_per_window
        self.panes_per_slide = self.window.panes_per_slide
        # CUMULATE: window g ends at pane g + 1 and starts at its period's first pane (below)
        self.cumulate = self.spec.kind is WindowKind.CUMULATE
        self.segments: list[_Segment] = []  # ordered by pane, at least a window apart
        self.next_window: int | None = None  # the oldest window that has not fired
        self._deferred: pa.RecordBatch | None = None  # the next batch, staged during this one
        # the batches `prefetch` named, in order, until each is processed (`_firing_can_wait`
        # reads the first: the next batch)
        self._next_batches: list[pa.RecordBatch] = []
        # how many batches' firings may combine into one (`_after_batch`; the runner raises
        # it for input already in memory) and how many have waited since the last firing
        self.batches_per_firing = 1
        self._batches_waiting = 0
        # bytes of one (key, pane) cell over every field's arrays (8-byte parts)
        self.cell_bytes = sum(8 * parts for _, parts in field_arrays(self.fields))
        # a list while a holistic driver around this operator reads the rows of the batch
        # being processed (`HolisticTimeWindows.shares_rows`): per `_process_rows` call,
        # (pane id, included: contributing and not late, key slot or -1) per row, as this
        # operator decided them, on its kernels' backend
        self.shared_rows: list[tuple[Array, Array, Array]] | None = None
        # a list while a holistic driver around this operator completes its results: per
        # result batch emitted, (the batch, the key slot of each of its rows), so the driver
        # keys the rows from these slots instead of mapping the decoded key columns again
        self.result_slots: list[tuple[pa.RecordBatch, np.ndarray]] | None = None

    @property
    def shares_rows(self) -> bool:
        """Whether `shared_rows` can be kept: where the kernels hand the fused pass's row
        decisions back (`FusedMerge.shared`: host arrays on the CPU, device arrays on the
        GPU)."""
        return bool(getattr(self.kernels, "shares_fused_rows", False))

    # -- pane level -----------------------------------------------------------------------

    def _stage_input(self, batch: pa.RecordBatch) -> Staging | None:
        """The kernels start copying the batch now (`prefetch`; the GPU's copy pass measures
        the event time's min and max, which the range check then reuses)."""
        return self.kernels.prefetch(self.lift_node, self.window, batch)

    @property
    def prefetch_depth(self) -> int:
        """Batches the runner may name ahead of the one processed: two where the kernels
        stage in the background (the GPU's copy worker then always has the next batch but
        one queued, so its pass goes on while the driver fires), else one."""
        return BACKGROUND_PREFETCH_DEPTH if self.stages_in_background else 1

    @property
    def stages_in_background(self) -> bool:
        """Whether the kernels stage a named batch in another thread (the GPU's copy worker)."""
        return bool(getattr(self.kernels, "stages_in_background", False))

    def prefetch(self, batch: pa.RecordBatch) -> None:
        """The hint that `batch` comes after those named before it. Where the kernels stage in
        the background (the GPU's copy worker) it is staged now, beside the whole of the
        current batch's work; else the hint is kept and acted on while the current batch's
        fused pass runs (`_stage_deferred`), so the host copy pass overlaps the device's work
        on it. A batch processed with no pass before it is conformed and staged by
        `process`, as without a hint."""
        if self.finished:
            return
        # the last `prefetch_depth` named: bounded whatever the caller names
        self._next_batches = [*self._next_batches, batch][-self.prefetch_depth :]
        if self.stages_in_background:
            super().prefetch(batch)
        else:
            self._deferred = batch

    def process(self, batch: pa.RecordBatch | pa.Table, input: int = 0) -> list[pa.RecordBatch]:
        named = [i for i, named in enumerate(self._next_batches) if named is batch]
        if named:  # those named before it were never processed: no longer next
            del self._next_batches[: named[0] + 1]
        # results come first, as the batch's early ones (so an error in the batch keeps them)
        self._early = [*self._early, *self.fire_waiting_before(batch)]
        return super().process(batch, input)

    def fire_waiting_before(self, batch: pa.RecordBatch | pa.Table) -> list[pa.RecordBatch]:
        """The windows whose firing waited (`_firing_can_wait`) fire now, before `batch` is
        merged, if it holds an event time before the end of the last of them (its rows could
        land in panes they read, docs/semantics.md); they are what the batch before would
        have fired. The batch's event times come from its staging (measured by the copy
        pass), so the decision is taken here, once they are at hand, not when the batch
        before ends (on the GPU that would wait for the copy worker there)."""
        if not self._batches_waiting or self.watermark is None:
            return []
        last_due = self._last_window_ending_by(self.watermark)
        if self.next_window is not None and last_due < self.next_window:
            return []  # nothing is due
        conformed, earliest = self._earliest_event_time(batch)
        if not conformed:
            return []  # its `process` raises; the windows wait for a batch that merges
        if earliest is None or earliest >= self._end_pane_of_window(last_due) * self.pane_length:
            return []
        self._batches_waiting = 0
        return self.advance_watermark(self.watermark)

    def _after_batch(self, watermark: int) -> list[pa.RecordBatch]:
        """The watermark rises after every batch; the windows it makes due fire now, or wait
        for the next batch's firing when `_firing_can_wait` (one firing then serves several
        batches: on the GPU each firing costs launches and two device round trips, about
        0.8 ms, whatever it emits)."""
        if self._firing_can_wait(watermark):
            self._raise_watermark(watermark)
            self._batches_waiting += 1
            return []
        self._batches_waiting = 0
        return self.advance_watermark(watermark)

    def _firing_can_wait(self, watermark: int) -> bool:
        """Whether the windows due at `watermark` may fire with the next batch's instead: the
        next batch is in hand (`prefetch`, so results wait for no source) and at most
        `batches_per_firing` batches share one firing, so results wait a bounded time; and
        the next batch holds no event time before the end of the last of them, so none of
        its rows lands in a pane they read (a row is merged only into panes of windows still
        open, docs/semantics.md). Where the next batch is still being staged (the GPU's copy
        worker measures its event times), the firing waits and its `process` decides
        (`fire_waiting_before`) rather than this batch waiting for the worker. A next batch whose
        columns could not be conformed (its `process` raises) lets nothing wait: what is due
        comes out before its error."""
        if self._batches_waiting + 1 >= self.batches_per_firing or not self._next_batches:
            return False
        if self.watermark is not None:
            watermark = max(watermark, self.watermark)
        last_due = self._last_window_ending_by(watermark)
        if self.next_window is not None and last_due < self.next_window:
            return False  # nothing is due: firing costs nothing
        next_batch = self._next_batches[0]
        admitted = self._admitted(next_batch)
        if admitted is None:
            return False
        if not admitted.ready:  # still staging: decided by its `process` (`fire_waiting_before`)
            return True
        conformed, earliest = self._earliest_event_time(next_batch)
        if not conformed:
            return False
        return earliest is None or earliest >= self._end_pane_of_window(last_due) * self.pane_length

    def _stage_deferred(self) -> None:
        """Conform and stage the batch `prefetch` named (once; errors wait for its
        `process`)."""
        batch, self._deferred = self._deferred, None
        if batch is not None:
            super().prefetch(batch)

    def _process(self, batch: pa.RecordBatch) -> None:
        """The first batch of a run has no segment and no known key, so the fused pass would
        leave every row of it to the split path (lifted again, host round trips of every row:
        73 ms of a 4 M-row batch on the H100, 2026-11-26). Its head takes the split path
        alone, which makes the segment and the slots of the keys it holds; the rest then
        takes the fused pass (rows of keys first seen there still go the split way, after
        it, so first-seen key order is kept). Nothing is late before the first watermark,
        so no late row is judged against a slice, and the watermark moves after the whole
        batch as before."""
        if not self.segments and self.watermark is None and batch.num_rows > 2 * FIRST_HEAD_ROWS:
            # the head fires nothing early: rows of its windows may still be in the rest
            self._process_rows(batch.slice(0, FIRST_HEAD_ROWS), fire_early=False)
            self._process_rows(batch.slice(FIRST_HEAD_ROWS))
            return
        self._process_rows(batch)

    def _process_rows(self, batch: pa.RecordBatch, fire_early: bool = True) -> None:
        """The fused entry: the backend merges what it can place in one pass (known keys,
        panes inside the newest segment); the rest (new keys, other panes) takes the split
        path, so segments and first-seen key order stay the driver's decisions."""
        target, segment = self._fused_target()
        fused = self.kernels.lift_merge(
            self.lift_node,
            self.window,
            batch,
            self.keys,
            target,
            self.watermark,
            self._stage_deferred,
            share_rows=self.shared_rows is not None,
        )
        self.tuples_in += fused.rows
        self.null_event_time += fused.null_event_time
        self.late += fused.late
        if fused.late and fused.late_rows is not None:
            self._judged_late(fused.late_rows, WINDOW_CLOSED)
        if fused.first_pane is not None and segment is not None:
            segment.first = min(segment.first, fused.first_pane)
            segment.last = max(segment.last, fused.last_pane)
            self._reserve(segment)  # its windows must stay readable: last + pw columns
        merged = None
        if fused.rest is not None:
            panes = self.kernels.pane_ids(fused.rest, self.pane_length)
            include, slots = self._merge(
                fused.rest.keys,
                panes,
                fused.rest_include,
                fused.rest.partials,
                self._watermark_after(fused.max_event_time) if fire_early else None,
            )
            merged = (panes, include, slots)
        if self.shared_rows is not None:
            self.shared_rows.append(_rows_decided(fused, merged))
        self._observe(fused.max_event_time)

    def _fused_target(self) -> tuple[PaneTarget | None, _Segment | None]:
        """The newest segment's columns, less those within a window of the segment before it
        (a pane there belongs to that segment or bridges the two: the split path decides)."""
        if not self.segments:
            return None, None
        segment = self.segments[-1]
        state = segment.state
        first, end = state.origin, state.origin + state.pane_capacity
        if len(self.segments) > 1:
            first = max(first, self.segments[-2].last + self.panes_per_window)
        if end <= first:
            return None, None
        known = min(self.keys.n_slots, state.key_capacity)
        return PaneTarget(state, first, end, known), segment

    def preaggregate(self, batch: pa.RecordBatch | pa.Table) -> pa.RecordBatch:
        """Stage 1 (stateless): one row of partial state per (key, pane) of the batch."""
        conformed, out_of_range = self._lift_input(batch)
        lifted = self.kernels.lift_tuples(self.lift_node, conformed)
        lifted.null_event_time -= out_of_range  # counted apart (metadata of the partials)
        panes = self.kernels.pane_ids(lifted, self.pane_length)
        local_keys = self.kernels.new_key_map(self.key_types)
        slots = local_keys.map_columns(lifted.keys, lifted.contributes)
        preaggregate = self.step_kernels("preaggregate")
        if preaggregate is not self.kernels:  # placed apart (Spark's planner): move the rows
            host = self.kernels.to_host
            slots, panes = host(slots).astype(np.int64, copy=False), host(panes)
            lifted.partials = {
                name: tuple(preaggregate.from_host(host(part)) for part in parts)
                for name, parts in lifted.partials.items()
            }
        rows, pane_of_row, partials = preaggregate.preaggregate(
            slots, panes, lifted.partials, self.fields
        )
        return self._partial_batch(lifted, rows, PANE_META, pane_of_row, partials, out_of_range)

    def merge(self, partials: pa.RecordBatch) -> None:
        """Stage 2: combine pane partials from `preaggregate` (of any process) into the state."""
        keys, panes, values = self._read_partials(partials, PANE_META)
        include = self.kernels.from_host(np.ones(partials.num_rows, np.bool_))
        self._merge(keys, panes, include, values)

    def _merge(self, keys, panes, include, partials, fire_until: int | None = None):  # noqa: ANN001, ANN201
        """Lateness (against the watermark from before the batch), key slots (first-seen
        order over the whole batch), then the partials into their segments. Returns the
        rows merged (`include` less the late ones) and their key slots (-1: not merged).

        With `fire_until` (the watermark after this batch, known in `process`), a batch whose
        dense block (keys x panes it spans) would be far larger than the batch (one batch of
        many keys over a long stretch of event time) is merged in pane-ordered chunks, and
        the windows that end before the next chunk's first pane and at or before
        `fire_until` fire between chunks (into `self._early`): no later chunk touches them,
        so results equal the unchunked merge, but state stays at keys x (chunk + window)
        panes instead of keys x the batch's span."""
        kernels = self.kernels
        if self.watermark is not None:
            slide, size = self.spec.outer_shape  # CUMULATE: its period's end
            late = kernels.late_tuples(
                panes, include, self.pane_length, slide, size, self.watermark
            )
            rows = partials[self.fields[0].name][0]
            self.late += int(kernels.to_host((rows * late).sum()))
            # standalone, the rows are the arriving batch's tuples (the sink keeps them);
            # merging Spark's partials, no batch arrived and nothing is kept
            self._judged_late(late, WINDOW_CLOSED)
            include = include & ~late
        slots = self.keys.map_columns(keys, include)
        included = kernels.to_host(include)
        if not included.any():
            return include, slots
        live_rows = np.flatnonzero(included)
        host_panes = kernels.to_host(panes)[live_rows]
        chunk = self._chunk_panes(host_panes, fire_until)
        if chunk is None:
            self._merge_rows(slots, panes, host_panes, partials)
            return include, slots
        order = np.argsort(host_panes, kind="stable")
        sorted_panes = host_panes[order]
        start = 0
        while start < len(order):
            end = int(np.searchsorted(sorted_panes, sorted_panes[start] + chunk, side="left"))
            chosen = np.sort(order[start:end])  # batch order inside the chunk: same sums
            taken = kernels.from_host(live_rows[chosen])
            self._merge_rows(
                slots[taken],
                panes[taken],
                host_panes[chosen],
                {name: tuple(part[taken] for part in parts) for name, parts in partials.items()},
            )
            if end < len(order):
                # windows ending at or before the next chunk's first pane are complete
                boundary = int(sorted_panes[end]) * self.pane_length
                self._early += self.advance_watermark(min(fire_until, boundary))
            start = end
        return include, slots

    def _chunk_panes(self, host_panes: np.ndarray, fire_until: int | None) -> int | None:
        """Panes per chunk of a batch's merge, or None to merge it at once: the common case,
        where the batch spans at most one chunk, or no window holding its data can fire
        before its end.

        A chunk is the most panes whose segment (at the capacity `_reserve` allocates: the
        2 windows of margin, twice the span, whole powers of two) stays under
        MAX_SEGMENT_BYTES for the known keys, but at least a window (and 8 slides) of panes,
        so each firing between chunks computes several windows per tree build."""
        if fire_until is None or (self.watermark is not None and fire_until <= self.watermark):
            return None
        pw, ps = self.panes_per_window, self.panes_per_slide
        key_capacity = _capacity(MIN_CAPACITY, self.keys.n_slots)
        pane_budget = MAX_SEGMENT_BYTES // (key_capacity * self.cell_bytes)
        pane_capacity = 1 << max(pane_budget.bit_length() - 1, 0)  # a power of two that fits
        chunk = max(pw, 8 * ps, pane_capacity // 2 - (2 * pw - 1))
        first = int(host_panes.min())
        span = int(host_panes.max()) - first + 1
        if span <= chunk:
            return None
        if fire_until <= first * self.pane_length:
            return None  # no window of this batch's panes fires before its end
        return chunk

    def _merge_rows(self, slots, panes, host_panes: np.ndarray, partials) -> None:
        """Partials of rows with slots (-1: skip) into the segments of their panes;
        `host_panes` are the panes of the rows with a slot."""
        kernels = self.kernels
        touched = [self._segment_for(first, last) for first, last in self._clusters(host_panes)]
        for segment in {id(s): s for s in touched}.values():
            segment_slots = slots
            if len(self.segments) > 1:
                inside = (panes >= segment.first) & (panes <= segment.last)
                segment_slots = (slots + 1) * inside - 1  # -1 outside (numpy and CuPy alike)
            index = kernels.flat_index(segment_slots, panes, segment.state)
            segment.state.merge(index, partials)

    def _clusters(self, panes: np.ndarray) -> list[tuple[int, int]]:
        """The pane ranges of one batch's data, split where a window-wide gap separates them
        (only when one dense block would be large: the common case costs no sort)."""
        first, last = int(panes.min()), int(panes.max())
        if self._segment_bytes(last - first + 1) <= MAX_SEGMENT_BYTES:
            return [(first, last)]
        distinct = np.unique(panes)
        gap = max(self.panes_per_window, MIN_SPLIT_GAP)
        breaks = np.nonzero(np.diff(distinct) >= gap)[0]
        starts = distinct[np.concatenate(([0], breaks + 1))]
        ends = distinct[np.concatenate((breaks, [len(distinct) - 1]))]
        return list(zip(starts.tolist(), ends.tolist(), strict=True))

    def _segment_for(self, first: int, last: int) -> _Segment:
        """The segment that holds panes [first, last], merging segments it bridges."""
        pw = self.panes_per_window
        near = [s for s in self.segments if s.first - last < pw and first - s.last < pw]
        if len(near) == 1:
            segment = near[0]
            segment.first, segment.last = min(segment.first, first), max(segment.last, last)
            self._reserve(segment)
            return segment
        merged = _Segment(
            self.kernels.new_pane_state(self.fields),
            min([first] + [s.first for s in near]),
            max([last] + [s.last for s in near]),
        )
        self._reserve(merged)
        for old in near:
            live = self._live_first_pane(old)
            if live <= old.last:
                old_arrays = old.state.to_arrays(self._segment_keys(old), live, old.last + 1)
                merged.state.load_arrays(old_arrays, live)
        self.segments = sorted(
            [s for s in self.segments if all(s is not n for n in near)] + [merged],
            key=lambda s: s.first,
        )
        return merged

    def _segment_bytes(self, data_panes: int) -> int:
        """What `_reserve` allocates for a new segment of `data_panes` panes of data and the
        known keys (every field's arrays)."""
        margins = 2 * self.panes_per_window - 1  # see `_reserve`
        pane_capacity = _capacity(MIN_CAPACITY, 2 * (data_panes + margins))
        key_capacity = _capacity(MIN_CAPACITY, self.keys.n_slots)
        return pane_capacity * key_capacity * self.cell_bytes

    def _segment_keys(self, segment: _Segment) -> int:
        """How many key slots a segment's arrays hold. The key map is shared by every segment,
        but only the segments a batch touches are reserved for new keys: slots past a segment's
        key capacity have never been merged into it, and reading them would read past its
        arrays (the cause of issue 8's garbage windows)."""
        return min(self.keys.n_slots, segment.state.key_capacity)

    def _live_first_pane(self, segment: _Segment) -> int:
        if self.next_window is not None:
            return max(self._first_pane_of_window(self.next_window), segment.first)
        return segment.first

    # -- window geometry: window ids, in pane units --------------------------------------
    # RANGE w SLIDE s: window g covers panes [g*ps, g*ps + pw). CUMULATE (pane = step,
    # pw = max/step panes, ps = 1): window g covers [(g // pw) * pw, g + 1), the windows of
    # one period share their first pane and grow by a pane; ids grow with the window's end
    # in both, so "every window with end <= W fires in window order" is one rule. Each
    # function takes a pane/window number or a NumPy array of them.

    def _first_pane_of_window(self, window):  # noqa: ANN001, ANN202 - int or array
        if self.cumulate:
            return window // self.panes_per_window * self.panes_per_window
        return window * self.panes_per_slide

    def _end_pane_of_window(self, window):  # noqa: ANN001, ANN202
        if self.cumulate:
            return window + 1
        return window * self.panes_per_slide + self.panes_per_window

    def _first_window_of_pane(self, pane):  # noqa: ANN001, ANN202
        if self.cumulate:
            return pane  # the window ending right after it
        # ceil((q - pw + 1) / ps)
        return -((self.panes_per_window - 1 - pane) // self.panes_per_slide)

    def _last_window_of_pane(self, pane):  # noqa: ANN001, ANN202
        if self.cumulate:
            return pane // self.panes_per_window * self.panes_per_window + self.panes_per_window - 1
        return pane // self.panes_per_slide

    def _last_window_ending_by(self, watermark: int) -> int:
        if self.cumulate:
            return watermark // self.pane_length - 1
        return (watermark - self.spec.size) // self.spec.slide

    def _window_bounds(self, window: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(start, end) in microseconds of window ids."""
        starts = self._first_pane_of_window(window) * self.pane_length
        return starts, self._end_pane_of_window(window) * self.pane_length

    def _reserve(self, segment: _Segment) -> None:
        """Make a segment's arrays cover every key and the panes its windows read."""
        state = segment.state
        pw = self.panes_per_window
        # the first window holding a pane starts up to pw - 1 panes before it, and the last
        # one ends pw - 1 panes after it
        start_pane = self._live_first_pane(segment) - (pw - 1)
        end_pane = segment.last + pw
        need_keys = self.keys.n_slots
        fits = (
            state.pane_capacity > 0
            and state.origin <= start_pane
            and end_pane <= state.origin + state.pane_capacity
            and need_keys <= state.key_capacity
        )
        if fits:
            return
        # twice the span: a growing segment is reshaped O(log) times, and a linear state
        # moves its panes down once per span of panes it advances; a ring (`state.ring`:
        # the CPU's) advances in place, so the span itself does
        slack = 1 if getattr(state, "ring", False) else 2
        panes = _capacity(max(MIN_CAPACITY, state.pane_capacity), slack * (end_pane - start_pane))
        key_capacity = _capacity(max(MIN_CAPACITY, state.key_capacity), need_keys)
        state.reshape(key_capacity, panes, start_pane)

    # -- window level ---------------------------------------------------------------------

    def _fire(self, final: bool) -> list[pa.RecordBatch]:
        if final:
            if not self.segments:
                return []
            last_window = self._last_window_of_pane(self.segments[-1].last)
        elif self.watermark is None:
            return []
        else:
            last_window = self._last_window_ending_by(self.watermark)
        out: list[pa.RecordBatch] = []
        previous = self.next_window
        if previous is None or last_window >= previous:
            # every window ending at or before W has fired, also the empty ones
            self.next_window = last_window + 1
        for segment in self.segments:
            # windows before the first one holding the segment's oldest pane are empty
            first_window = self._first_window_of_pane(segment.first)
            if previous is not None:
                first_window = max(first_window, previous)
            last = min(last_window, self._last_window_of_pane(segment.last))
            out += self._fire_segment(segment, first_window, last)
        # a segment whose every window has fired is dropped
        self.segments = [
            s for s in self.segments if self._last_window_of_pane(s.last) >= self.next_window
        ]
        return out

    def _fire_segment(self, segment: _Segment, first_window: int, last_window: int):
        if last_window < first_window:
            return []
        n_keys = self._segment_keys(segment)
        span = last_window - first_window + 1
        if span <= DIRECT_WINDOWS and span * max(n_keys, 1) <= MAX_RESULT_CELLS:
            # a few windows (a firing after one batch): compute them all in one go; the cells
            # of windows without data are dropped like any empty (window, key). The occupancy
            # scan below (a reduction and a device round trip) pays only for long ranges.
            return self._compute(segment, [(first_window, span)], n_keys) if n_keys else []
        first_pane = self._first_pane_of_window(first_window)
        end_pane = min(self._end_pane_of_window(last_window), segment.last + 1)
        occupied = segment.state.occupied(n_keys, first_pane, end_pane)
        panes = np.nonzero(occupied)[0].astype(np.int64) + first_pane
        if not len(panes):
            return []
        starts = np.maximum(self._first_window_of_pane(panes), first_window)
        ends = np.minimum(self._last_window_of_pane(panes), last_window)
        breaks = np.nonzero(starts[1:] > ends[:-1] + 1)[0] + 1
        run_first = starts[np.concatenate(([0], breaks))]
        run_last = ends[np.concatenate((breaks - 1, [len(ends) - 1]))]
        out = []
        limit = max(1, MAX_RESULT_CELLS // max(n_keys, 1))
        pending: list[tuple[int, int]] = []
        pending_windows = 0
        for first, last in zip(run_first.tolist(), run_last.tolist(), strict=True):
            while first <= last:
                count = min(last - first + 1, limit - pending_windows)
                pending.append((first, count))
                pending_windows += count
                first += count
                if pending_windows >= limit:
                    out += self._compute(segment, pending, n_keys)
                    pending, pending_windows = [], 0
        if pending:
            out += self._compute(segment, pending, n_keys)
        return out

    def _compute(self, segment: _Segment, runs: list[tuple[int, int]], n_keys: int):
        """The result rows of the windows of `runs` (first window, count): the state
        finalizes them (`PaneState.fire`: the GPU on the device, one copy to the host);
        CUMULATE windows' cells come from the state's prefix combine and are finalized on the
        host."""
        if self.cumulate:
            window_of_cell, slot_of_cell, chosen = self._window_cells(segment, runs, n_keys)
            keys = self.keys.decode(slot_of_cell)
            starts, ends = self._window_bounds(window_of_cell)
            emitted = self._emit(keys, finalize(self.window.aggregates, chosen), starts, ends)
            return self._with_slots(emitted, slot_of_cell)
        ps = self.panes_per_slide
        starts, ends, slot_of_cell, keys, aggregates = segment.state.fire(
            n_keys,
            [(first * ps, count) for first, count in runs],
            ps,
            self.panes_per_window,
            self.window.windows_per_batch,
            window_ids_of(runs),
            self.window.aggregates,
            (ps * self.pane_length, self.panes_per_window * self.pane_length),
            self.keys,
            # the slots only where a holistic driver reads them: each is a fresh host write
            with_slots=self.result_slots is not None,
        )
        emitted = self._emit(keys, aggregates, starts, ends)
        return self._with_slots(emitted, slot_of_cell)

    def _with_slots(
        self, emitted: list[pa.RecordBatch], slot_of_cell: np.ndarray | None
    ) -> list[pa.RecordBatch]:
        """`emitted` (at most one result batch), its rows' key slots recorded where a
        holistic driver reads them (`result_slots`)."""
        if self.result_slots is not None and emitted:
            self.result_slots.append((emitted[0], np.asarray(slot_of_cell, np.int64)))
        return emitted

    def _window_cells(self, segment: _Segment, runs: list[tuple[int, int]], n_keys: int):
        """The tree over `runs` (first window, count): (window, key slot) of every cell
        with rows, window-major, and the fields' partials there (host arrays, raw: the
        factorised join combines them before finalizing)."""
        on_host = self._window_values(segment, runs, n_keys)
        return cells_with_rows(on_host, self.fields[0].name, n_keys, window_ids_of(runs))

    def _window_values(
        self, segment: _Segment, runs: list[tuple[int, int]], n_keys: int
    ) -> dict[str, tuple]:
        """Every field's parts over `runs` (first window, count) for every key slot,
        window-major, empty cells included, as host arrays (raw, not finalized)."""
        if self.cumulate:
            return self._cumulate_values(segment, runs, n_keys)
        ps = self.panes_per_slide
        values = segment.state.windows(
            n_keys,
            [(first * ps, count) for first, count in runs],
            ps,
            self.panes_per_window,
            self.window.windows_per_batch,
        )
        host = self.kernels.to_host
        # every array crosses once (the row counts are also a field's values)
        return {name: tuple(host(part) for part in parts) for name, parts in values.items()}

    def _cumulate_values(self, segment: _Segment, runs: list[tuple[int, int]], n_keys: int):
        """The values of CUMULATE windows `runs` (first window, count), window-major on the
        host. Window g's last pane is g and the windows of a period share its first pane, so
        the state computes them as a prefix combine (each window the one before it combined
        with one more pane): a firing costs a combine per pane, not a tree per pane count."""
        values = segment.state.cumulative_windows(n_keys, runs, self.panes_per_window)
        host = self.kernels.to_host
        # every array crosses once (the row counts are also a field's values)
        return {name: tuple(host(part) for part in parts) for name, parts in values.items()}

    # -- state ----------------------------------------------------------------------------

    def state_bytes(self) -> int:
        """Bytes allocated for the state: every segment's arrays at capacity, the key map."""
        return sum(s.state.nbytes for s in self.segments) + self.keys.nbytes

    def snapshot(self) -> bytes:
        header = self._header()
        arrays = self.keys.to_arrays("keys.")
        segments = []
        for number, segment in enumerate(self.segments):
            live = self._live_first_pane(segment)
            segments.append([segment.first, segment.last, live])
            if live <= segment.last:
                state = segment.state.to_arrays(self._segment_keys(segment), live, segment.last + 1)
                arrays.update({f"segment{number}.{name}": a for name, a in state.items()})
        header.update(next_window=self.next_window, segments=segments)
        return pack(header, arrays)

    def restore(self, data: bytes) -> None:
        header, arrays = unpack(data)
        self._restore_header(header)
        self.keys = self.kernels.key_map_from_arrays(self.key_types, arrays, "keys.")
        self.next_window = header["next_window"]
        self.segments = []
        for number, (first, last, live) in enumerate(header["segments"]):
            segment = _Segment(self.kernels.new_pane_state(self.fields), first, last)
            self._reserve(segment)
            prefix = f"segment{number}."
            state = {
                name[len(prefix) :]: array
                for name, array in arrays.items()
                if name.startswith(prefix)
            }
            if state:
                segment.state.load_arrays(state, live)
            self.segments.append(segment)


WindowOperator = (
    TimeWindowOperator | CountWindowOperator | HolisticTimeWindows | SessionWindowOperator
)


def make_window_operator(
    node: ph.WindowAggregateExec, input_schema: pa.Schema | None, kernels: StepKernels
) -> WindowOperator:
    """The registry's factory of `WindowAggregateExec` (every backend: the driver is
    backend-neutral, `kernels` are the backend's)."""
    if node.window.kind is WindowKind.SESSION:
        return SessionWindowOperator(node, kernels)  # holistic aggregates refused at planning
    if node.window.kind is WindowKind.COUNT:
        return CountWindowOperator(node, kernels)  # keeps holistic values per tuple itself
    if node.holistic is not None:
        # holistic aggregates beside the pane-and-tree path of the incremental ones
        return HolisticTimeWindows(
            node, TimeWindowOperator(incremental_part(node), kernels), kernels
        )
    return TimeWindowOperator(node, kernels)


def _rows_decided(
    fused: FusedMerge, merged: tuple[Array, Array, Array] | None
) -> tuple[Array, Array, Array]:
    """(pane id, merged, key slot or -1) per row of one `_process_rows` call: the fused
    pass's decisions (`fused.shared`) with those of the split path (`merged`: its panes,
    rows and slots) over the rows the fused pass left to it. Host or device arrays (`where`
    dispatches on them)."""
    if fused.shared is None:  # nothing placed: the split path decided every row
        assert merged is not None
        return merged
    panes, include, slots = fused.shared
    if merged is None:
        return panes, include, slots
    _, rest_include, rest_slots = merged
    return panes, include | rest_include, np.where(rest_include, rest_slots, slots)
