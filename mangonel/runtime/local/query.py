"""Standalone driver: Arrow batches in, window results out (tests, benchmarks, device runs)."""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from mangonel.catalog.sources.files import table_files
from mangonel.compiler import physical as ph
from mangonel.compiler.options import GpuOptions
from mangonel.compiler.physical import ProjectExec
from mangonel.errors import DataError
from mangonel.runtime.operators.base import OperatorBase, as_record_batch
from mangonel.runtime.operators.holistic import HolisticTimeWindows
from mangonel.runtime.operators.late_rows import late_schema, late_table
from mangonel.runtime.operators.protocol import OperatorMetrics
from mangonel.runtime.operators.tree import OperatorTree
from mangonel.runtime.operators.tuner import TunerMetrics
from mangonel.runtime.operators.window import (
    COMBINED_FIRING_BATCHES,
    TimeWindowOperator,
    WindowOperator,
)

RESULT = "result"  # `stream_with_late_rows`: a batch of window results
LATE = "late"  # and a batch of late rows


class LocalQuery:
    """Runs the physical plan of one window query over batches, in this process.

    Every input batch is one micro-batch: the watermark moves only after it. `stream` yields
    results as windows fire (end of input fires the rest); `run` collects them in a table.
    `snapshot()`/`restore()` save and load the operator state between two batches. The plan's
    operators form `self.operator` (an `OperatorTree`, driven through the operator protocol).
    `gpu_options` tunes the GPU kernels of a GPU plan (None: the defaults).

    Late rows as data (docs/semantics.md, "Late rows as data"): with `keep_late_rows`, every
    row judged late is kept, with its reason and the watermark it was judged against, until
    `late_rows()` takes them; `stream(..., late_rows=True)` keeps them and yields them as they
    are judged. Without either nothing is kept (counting is the same).
    """

    def __init__(
        self,
        plan: ProjectExec,
        *,
        gpu_options: GpuOptions | None = None,
        keep_late_rows: bool = False,
    ) -> None:
        self.plan = plan
        self.operator = OperatorTree(plan, gpu_options=gpu_options)
        self.keeps_late_rows = False
        if keep_late_rows:
            self.keep_late_rows()
        self.schema = self.operator.schema
        # a join reads named inputs: input i is the plan's i-th scan (stream or table)
        scans = [n for n in ph.walk(plan) if isinstance(n, ph.SCAN_TYPES)]
        self.is_join = any(isinstance(n, ph.WindowJoinExec) for n in ph.walk(plan))
        # name -> its inputs: two where a stream is joined with itself (each of its batches
        # arrives on both sides); `inputs` names each name's first
        self.routes: dict[str, tuple[int, ...]] = {}
        for i, scan in enumerate(scans):
            name = _scan_name(scan).lower()
            self.routes[name] = (*self.routes.get(name, ()), i)
        self.inputs = {name: numbers[0] for name, numbers in self.routes.items()}
        self.tables = {i for i, scan in enumerate(scans) if isinstance(scan, ph.TableScanExec)}
        # tables declared with files (`WITH (source = ..., path = ...)`), by input number
        self.table_sources = {
            i: scan.table
            for i, scan in enumerate(scans)
            if isinstance(scan, ph.TableScanExec) and scan.table.options
        }

    def keep_late_rows(self) -> None:
        """Keep every row judged late from now on, until `late_rows()` takes them."""
        self.operator.keep_late_rows()
        self.keeps_late_rows = True

    def late_rows(self, stream: str | None = None) -> pa.Table:
        """The late rows kept so far, as one table, and forget them (so memory holds only the
        late rows not yet taken). Columns: those of the batch each row came in (as given),
        `late_reason`, `late_watermark` and, for a join, `late_stream`; order: judgement order
        (a join: stream by stream, arrival order in each). `stream`: that stream's rows only."""
        if not self.keeps_late_rows:
            raise RuntimeError(
                "late rows are not kept for this run: Query.run() keeps them, and "
                "Query.stream(batches, late_rows=True) yields them as they are judged"
            )
        if stream is not None and stream.lower() not in self.inputs:
            raise DataError(
                f"{stream!r} is not an input of this query; its inputs: "
                + ", ".join(sorted(self.inputs))
            )
        return late_table(self.operator.take_late_rows(stream), self._late_schema(stream))

    def _late_schema(self, stream: str | None) -> pa.Schema:
        """An empty result's schema: the declared columns of the query's (first) stream."""
        scans = [n for n in ph.walk(self.plan) if isinstance(n, ph.StreamScanExec)]
        chosen = [s for s in scans if stream is None or s.stream.name.lower() == stream.lower()]
        schema = chosen[0].stream.schema.to_arrow() if chosen else pa.schema([])
        return late_schema(schema, stream=self.is_join)

    @property
    def window_operator(self) -> WindowOperator:
        """The window operator of the tree (its state, conformance and split form)."""
        try:
            return self.operator.find(OperatorBase)  # type: ignore[return-value]
        except LookupError:  # time windows with holistic aggregates: the wrapper is the operator
            return self.operator.find(HolisticTimeWindows)

    def stream_with_late_rows(
        self, batches: Iterable[pa.RecordBatch | pa.Table] | Any, lookahead: bool | None = None
    ) -> Iterator[tuple[str, pa.RecordBatch]]:
        """`stream`, with the late rows in it: after each input batch, `("late", batch)` for
        its late rows, then `("result", batch)` for the results it fires (end of input:
        results only). Nothing is kept: each late row is yielded once, right after its batch."""
        self.keep_late_rows()
        for results in self._steps(batches, lookahead):
            for late in self.operator.take_late_rows():
                yield LATE, late
            for result in results:
                yield RESULT, result

    def stream(
        self, batches: Iterable[pa.RecordBatch | pa.Table], lookahead: bool | None = None
    ) -> Iterator[pa.RecordBatch]:
        """Results as windows fire, batch after batch, then the rest at end of input.

        With `lookahead`, batch k + 1 (and k + 2 where the operator's `prefetch_depth` is two:
        the GPU's copy worker) is handed to the operator's `prefetch` before batch k is
        processed and fired, so (on the GPU) its host-to-device copy overlaps that work. It
        reads those batches before yielding batch k's results, so it is on by default only
        when `batches` is a sequence (every batch already in memory: no result waits on the
        source); pass True to read ahead of a live iterator as well.
        """
        for results in self._steps(batches, lookahead):
            yield from results

    def _steps(
        self, batches: Iterable[pa.RecordBatch | pa.Table] | Any, lookahead: bool | None
    ) -> Iterator[list[pa.RecordBatch]]:
        """The results of each input batch (then of end of input), one list per step."""
        batches = _batch_sequence(batches)
        if self.is_join:
            yield from self._arrivals(batches)
            return
        in_memory = isinstance(batches, Sequence)
        if lookahead is None:
            lookahead = in_memory
        self._combine_firings(lookahead and in_memory)
        if not lookahead:
            for batch in batches:
                yield self.operator.process(batch)
            yield self.operator.finish()
            return
        depth = getattr(self.operator, "prefetch_depth", 1)  # batches named ahead
        pending: deque[pa.RecordBatch] = deque()
        for batch in batches:
            batch = as_record_batch(batch)  # one object for prefetch and process
            self.operator.prefetch(batch)
            pending.append(batch)
            if len(pending) > depth:
                yield self.operator.process(pending.popleft())
        while pending:
            yield self.operator.process(pending.popleft())
        yield self.operator.finish()

    def _combine_firings(self, allowed: bool) -> None:
        """Over batches already in memory, the windows due after consecutive batches may fire
        together (`TimeWindowOperator._after_batch`: same rows, same order, fewer firings);
        over a live source each batch's results come before the next batch is waited for."""
        for operator in self.operator.operators:
            if isinstance(operator, TimeWindowOperator | HolisticTimeWindows):
                operator.batches_per_firing = COMBINED_FIRING_BATCHES if allowed else 1

    def _arrivals(self, inputs: Any) -> Iterator[list[pa.RecordBatch]]:  # noqa: ANN401
        """A join query's arrivals: `(name, batch)` pairs in arrival order, or a mapping
        name -> batches taken round-robin; every batch of a static table first."""
        if isinstance(inputs, Mapping):
            queues = [(name, list(batches)) for name, batches in inputs.items()]
            arrivals = [
                (name, queue[i])
                for i in range(max((len(q) for _, q in queues), default=0))
                for name, queue in queues
                if i < len(queue)
            ]
        else:
            arrivals = list(inputs)
        numbered = []
        for arrival in arrivals:
            if not (isinstance(arrival, tuple) and len(arrival) == 2):
                raise DataError(
                    "a join query reads (name, batch) pairs in arrival order, or a dict "
                    "name -> batches: query.run([('clicks', batch), ('views', batch), ...])"
                )
            name, batch = arrival
            batch = as_record_batch(batch)  # one object: prefetch, process
            numbered += [(number, batch) for number in self._route(name)]
        given = {number for number, _ in numbered}
        for number, table in self.table_sources.items():
            if number not in given:  # its batches not among the inputs: its files
                files = table_files(table.schema, dict(table.options))
                numbered[:0] = [(number, batch) for batch in files]
        for number, batch in numbered:  # the table as it is when the query starts
            if number in self.tables:
                yield self.operator.process(batch, number)
        streamed = [(number, batch) for number, batch in numbered if number not in self.tables]
        # every arrival is in memory: each is named (from the first, as `stream` names
        # batches) `prefetch_depth` ahead of its processing
        depth = getattr(self.operator, "prefetch_depth", 1)
        named = -1  # the last arrival named
        for position, (number, batch) in enumerate(streamed):
            while named < min(position + depth, len(streamed) - 1):
                named += 1
                self.operator.prefetch(streamed[named][1], streamed[named][0])
            yield self.operator.process(batch, number)
        yield self.operator.finish()

    def process(
        self, batch: pa.RecordBatch | pa.Table, input: int | str = 0
    ) -> list[pa.RecordBatch]:
        """One batch without ending the input (for callers that drive batches themselves);
        `input`: which input of a join, by number (`self.inputs` maps names to numbers) or by
        name (a stream joined with itself: both its sides)."""
        if isinstance(input, int):
            return self.operator.process(batch, input)
        batch = as_record_batch(batch)
        return [
            out for number in self._route(input) for out in self.operator.process(batch, number)
        ]

    def _route(self, name: object) -> tuple[int, ...]:
        """The inputs a batch of the input `name` arrives on."""
        numbers = self.routes.get(str(name).lower())
        if numbers is None:
            raise DataError(
                f"{name!r} is not an input of this query; its inputs: "
                + ", ".join(sorted(self.routes))
            )
        return numbers

    def finish(self) -> list[pa.RecordBatch]:
        return self.operator.finish()

    def run(self, batches: Iterable[pa.RecordBatch | pa.Table]) -> pa.Table:
        return pa.Table.from_batches(list(self.stream(batches)), schema=self.schema)

    def snapshot(self) -> bytes:
        return self.operator.snapshot()

    def restore(self, data: bytes) -> None:
        self.operator.restore(data)

    @property
    def metrics(self) -> OperatorMetrics:
        """Counters so far (see `mangonel.runtime.operators.window` for definitions:
        windows_fired counts (window, key) results before HAVING; rows_out rows after it)."""
        return self.operator.metrics()

    def analyze(self) -> list[dict[str, Any]]:
        """Each operator's runtime metrics so far, root first (EXPLAIN ANALYZE): its plan
        node's name and its metrics as a dict (the window operator's with its `tuning`, the
        auto-tuner's state); operators without metrics are left out."""
        found = []
        for node, operator in reversed(
            list(zip(self.operator.nodes, self.operator.operators, strict=True))
        ):
            metrics = operator.metrics()
            if metrics is None:
                continue
            found.append({"operator": _operator_name(node), "metrics": dataclasses.asdict(metrics)})
        return found


def analyze_text(operators: list[dict[str, Any]]) -> str:
    """`LocalQuery.analyze` as text: one line of counters per operator, the tuner's state
    and every configuration it tried under the window operator."""
    lines = ["Analyze (latest run):"]
    for entry in operators:
        metrics = dict(entry["metrics"])
        tuning = metrics.pop("tuning", None)
        counters = " ".join(f"{k}={v}" for k, v in metrics.items())
        lines.append(f"  {entry['operator']}: {counters}")
        if tuning is not None:
            shown = TunerMetrics(**{**tuning, "tried": tuple(map(tuple, tuning["tried"]))})
            lines.append("    " + shown.describe())
            lines += ["    " + line for line in shown.tried_lines()]
    return "\n".join(lines)


def _operator_name(node: ph.PhysicalNode) -> str:
    """EXPLAIN's name of a plan node: `WindowAggregate` for `WindowAggregateExec`."""
    name = type(node).__name__
    return name[: -len("Exec")] if name.endswith("Exec") else name


def _batch_sequence(batches: Any) -> Any:  # noqa: ANN401
    """The batches a run reads: one Table or RecordBatch given alone is one batch (iterated,
    it would give its columns); what holds no batches is named."""
    if isinstance(batches, pa.Table | pa.RecordBatch):
        return [batches]
    if type(batches).__name__ == "DataFrame":  # pandas (or Spark): not Arrow
        raise DataError(
            "run() and stream() read Arrow batches, not a DataFrame: pass "
            "[pa.Table.from_pandas(df)] (inside Spark, register the streaming DataFrame)"
        )
    if batches is None or isinstance(batches, str | bytes) or not isinstance(batches, Iterable):
        raise DataError(
            "run() and stream() read a sequence (or iterator) of pyarrow RecordBatches or "
            f"Tables, got {type(batches).__name__}"
        )
    return batches


def _scan_name(scan: ph.StreamScanExec | ph.TableScanExec) -> str:
    return scan.table.name if isinstance(scan, ph.TableScanExec) else scan.stream.name
