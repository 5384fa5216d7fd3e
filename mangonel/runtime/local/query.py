"""Standalone driver: Arrow batches in, window results out (tests, benchmarks, device runs)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from mangonel.compiler import physical as ph
from mangonel.compiler.options import GpuOptions
from mangonel.compiler.physical import ProjectExec
from mangonel.errors import DataError
from mangonel.runtime.operators.base import OperatorBase, as_record_batch
from mangonel.runtime.operators.holistic import HolisticTimeWindows
from mangonel.runtime.operators.protocol import OperatorMetrics
from mangonel.runtime.operators.tree import OperatorTree
from mangonel.runtime.operators.tuner import TunerMetrics
from mangonel.runtime.operators.window import WindowOperator


class LocalQuery:
    """Runs the physical plan of one window query over batches, in this process.

    Every input batch is one micro-batch: the watermark moves only after it. `stream` yields
    results as windows fire (end of input fires the rest); `run` collects them in a table.
    `snapshot()`/`restore()` save and load the operator state between two batches. The plan's
    operators form `self.operator` (an `OperatorTree`, driven through the operator protocol).
    `gpu_options` tunes the GPU kernels of a GPU plan (None: the defaults).
    """

    def __init__(self, plan: ProjectExec, *, gpu_options: GpuOptions | None = None) -> None:
        self.plan = plan
        self.operator = OperatorTree(plan, gpu_options=gpu_options)
        self.schema = self.operator.schema
        # a join reads named inputs: input i is the plan's i-th scan (stream or table)
        scans = [n for n in ph.walk(plan) if isinstance(n, ph.SCAN_TYPES)]
        self.is_join = any(isinstance(n, ph.WindowJoinExec) for n in ph.walk(plan))
        self.inputs = {_scan_name(scan).lower(): i for i, scan in enumerate(scans)}
        self.tables = {i for i, scan in enumerate(scans) if isinstance(scan, ph.TableScanExec)}

    @property
    def window_operator(self) -> WindowOperator:
        """The window operator of the tree (its state, conformance and split form)."""
        try:
            return self.operator.find(OperatorBase)  # type: ignore[return-value]
        except LookupError:  # time windows with holistic aggregates: the wrapper is the operator
            return self.operator.find(HolisticTimeWindows)

    def stream(
        self, batches: Iterable[pa.RecordBatch | pa.Table], lookahead: bool | None = None
    ) -> Iterator[pa.RecordBatch]:
        """Results as windows fire, batch after batch, then the rest at end of input.

        With `lookahead`, batch k + 1 is handed to the operator's `prefetch` before batch k is
        processed and fired, so (on the GPU) its host-to-device copy overlaps that work. It
        reads the next batch before yielding batch k's results, so it is on by default only
        when `batches` is a sequence (every batch already in memory: no result waits on the
        source); pass True to read one batch ahead of a live iterator as well.
        """
        if self.is_join:
            yield from self._arrivals(batches)
            return
        if lookahead is None:
            lookahead = isinstance(batches, Sequence)
        if not lookahead:
            for batch in batches:
                yield from self.operator.process(batch)
            yield from self.operator.finish()
            return
        pending: pa.RecordBatch | None = None
        for batch in batches:
            batch = as_record_batch(batch)  # one object for prefetch and process
            self.operator.prefetch(batch)
            if pending is not None:
                yield from self.operator.process(pending)
            pending = batch
        if pending is not None:
            yield from self.operator.process(pending)
        yield from self.operator.finish()

    def _arrivals(self, inputs: Any) -> Iterator[pa.RecordBatch]:  # noqa: ANN401
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
            number = self.inputs.get(str(name).lower())
            if number is None:
                raise DataError(
                    f"{name!r} is not an input of this query; its inputs: "
                    + ", ".join(sorted(self.inputs))
                )
            numbered.append((number, batch))
        for number, batch in numbered:  # the table as it is when the query starts
            if number in self.tables:
                yield from self.operator.process(as_record_batch(batch), number)
        for number, batch in numbered:
            if number not in self.tables:
                yield from self.operator.process(as_record_batch(batch), number)
        yield from self.operator.finish()

    def process(self, batch: pa.RecordBatch | pa.Table, input: int = 0) -> list[pa.RecordBatch]:
        """One batch without ending the input (for callers that drive batches themselves);
        `input`: which input of a join (`self.inputs` maps names to numbers)."""
        return self.operator.process(batch, input)

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


def _scan_name(scan: ph.StreamScanExec | ph.TableScanExec) -> str:
    return scan.table.name if isinstance(scan, ph.TableScanExec) else scan.stream.name
