"""`OperatorTree`: the operators of one physical plan, built bottom-up through the registry,
driven through the operator protocol (it is an operator itself: runners drive the tree).

Each batch enters at a leaf (input i is the i-th leaf, in plan order) and its results flow
leaf -> root: the window operator's window results pass Filter (HAVING) and Project. The
tree's snapshot is its stateful operators' snapshots (one stateful operator: its bytes as they
are, so the window operator's snapshot format is the query's); its metrics are those of the
first leaf's operator, which keeps the query's counters, with `rows_out` counted at the root.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from mangonel.compiler import physical as ph
from mangonel.compiler.options import GpuOptions
from mangonel.errors import DataError
from mangonel.runtime.operators import registry
from mangonel.runtime.operators.kernels import WindowKernels
from mangonel.runtime.operators.late_rows import LateRows
from mangonel.runtime.operators.protocol import Operator, OperatorMetrics
from mangonel.runtime.operators.snapshot import SNAPSHOT_FORMAT, SNAPSHOT_VERSION, pack, unpack

Op = TypeVar("Op")

TREE_OPERATOR = "tree"  # the snapshot header's `operator` of a tree of several stateful ones


class OperatorTree:
    """The operators of `root` (see the module docstring). `extra_placements` place steps the
    plan does not hold (Spark's stage-1 pre-aggregation, from its planner); `gpu_options`
    tune the GPU kernels (None: the defaults); `kernels`: the kernels objects by backend to
    use and add to (the trees a Spark worker builds for one query share them: compiled
    modules, pinned buffers and device scratch are made once per process, not per call),
    None for the tree's own."""

    stateful = True

    def __init__(
        self,
        root: ph.PhysicalNode,
        extra_placements: tuple[ph.Placement, ...] = (),
        *,
        gpu_options: GpuOptions | None = None,
        kernels: dict[str, WindowKernels] | None = None,
    ) -> None:
        self._kernels: dict[str, WindowKernels] = {} if kernels is None else kernels
        self.extra_placements = extra_placements
        self.gpu_options = gpu_options
        self.operators: list[Operator] = []  # bottom-up: children before their parent
        self.nodes: list[ph.PhysicalNode] = []
        self.parents: list[tuple[int, int] | None] = []  # (parent index, its input number)
        self.leaves: list[int] = []  # the operator that reads input i
        self.leaf_inputs: list[int] = []  # which of its inputs input i is (a join reads two)
        top = self._build(root)
        self.root = top
        self.schema: pa.Schema = self.operators[top].schema
        self.rows_out_at = self.operators[self.leaves[0]]

    # -- building -------------------------------------------------------------------------

    def kernels_of(self, backend: str) -> WindowKernels:
        """One kernels object per backend for the whole tree (device memory, compiled code)."""
        kernels = self._kernels.get(backend)
        if kernels is None:
            kernels = self._kernels[backend] = registry.new_kernels(backend, self.gpu_options)
        return kernels

    def _build(self, node: ph.PhysicalNode) -> int:
        backend = registry.node_backend(node)
        entry = registry.registration(type(node), backend)
        inputs: list[int] = []
        if not entry.reads_stream:
            inputs = [self._build(child) for child in node.children]
        schema = self.operators[inputs[0]].schema if len(inputs) == 1 else None
        placements = getattr(node, "placements", ()) + self.extra_placements
        kernels = registry.StepKernels(placements, backend, self.kernels_of)
        operator = entry.factory(node, schema, kernels)
        index = len(self.operators)
        self.operators.append(operator)
        self.nodes.append(node)
        self.parents.append(None)
        for number, child in enumerate(inputs):
            self.parents[child] = (index, number)
        if entry.reads_stream:
            scans = [n for n in ph.walk(node) if isinstance(n, ph.SCAN_TYPES)]
            for number in range(len(scans)):
                self.leaves.append(index)
                self.leaf_inputs.append(number)
        return index

    def leaf(self, input: int = 0) -> Any:  # noqa: ANN401 - the leaf's own type
        """The operator reading input `input` (the window operator: its split form)."""
        return self.operators[self.leaves[input]]

    def find(self, operator_type: type[Op]) -> Op:
        """The first operator of a type (leaf side first); LookupError if none."""
        for operator in self.operators:
            if isinstance(operator, operator_type):
                return operator
        raise LookupError(f"the tree has no {operator_type.__name__}")

    # -- the operator protocol ------------------------------------------------------------

    def process(self, batch: pa.RecordBatch, input: int = 0) -> list[pa.RecordBatch]:
        leaf = self.leaves[input]
        number = self.leaf_inputs[input]
        operator = self.operators[leaf]
        return self._up(
            leaf, operator.process(batch, number) if number else operator.process(batch)
        )

    @property
    def prefetch_depth(self) -> int:
        """The first leaf operator's (1 where it takes no hint)."""
        return getattr(self.operators[self.leaves[0]], "prefetch_depth", 1)

    def prefetch(self, batch: pa.RecordBatch, input: int = 0) -> None:
        """The leaf operator's hint that `batch` comes next (a no-op where it has none)."""
        prefetch = getattr(self.operators[self.leaves[input]], "prefetch", None)
        if prefetch is not None:
            number = self.leaf_inputs[input]
            prefetch(batch, number) if number else prefetch(batch)

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        return self._every(lambda operator: operator.on_watermark(watermark))

    def finish(self) -> list[pa.RecordBatch]:
        return self._every(lambda operator: operator.finish())

    def _every(self, call: Callable[[Operator], list[pa.RecordBatch]]) -> list[pa.RecordBatch]:
        out: list[pa.RecordBatch] = []
        for index, operator in enumerate(self.operators):  # children before their parent
            out += self._up(index, call(operator))
        return out

    def _up(self, index: int, batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
        """`batches` emitted by operator `index`, through every operator above it."""
        parent = self.parents[index]
        while parent is not None and batches:
            index, number = parent
            operator = self.operators[index]
            batches = [out for batch in batches for out in operator.process(batch, number)]
            parent = self.parents[index]
        if parent is not None:
            return []
        batches = [batch for batch in batches if batch.num_rows]
        if batches:
            self.rows_out_at.add_rows_out(sum(batch.num_rows for batch in batches))
        return batches

    # -- late rows (late_rows.py) ---------------------------------------------------------

    def late_sinks(self) -> list[LateRows]:
        """Every operator's late-row sinks, leaf side first (a join's: one per stream)."""
        return [sink for op in self.operators for sink in getattr(op, "late_sinks", ())]

    def keep_late_rows(self) -> None:
        """From now on, keep the rows judged late (until `take_late_rows` drains them)."""
        for sink in self.late_sinks():
            sink.keep = True

    def take_late_rows(self, stream: str | None = None) -> list[pa.RecordBatch]:
        """The late rows kept so far (of `stream` only, case-insensitive, when given), and
        forget them."""
        taken: list[pa.RecordBatch] = []
        for sink in self.late_sinks():
            if stream is None or sink.stream.lower() == stream.lower():
                taken += sink.take()
        return taken

    def metrics(self) -> OperatorMetrics:
        metrics = self.rows_out_at.metrics()
        assert metrics is not None
        return metrics

    def snapshot(self) -> bytes:
        parts = [operator.snapshot() for operator in self.operators if operator.stateful]
        if len(parts) == 1:
            return parts[0]
        header = {"format": SNAPSHOT_FORMAT, "version": SNAPSHOT_VERSION}
        header.update(operator=TREE_OPERATOR, parts=len(parts))
        return pack(header, {f"part{i}": np.frombuffer(p, np.uint8) for i, p in enumerate(parts)})

    def restore(self, data: bytes) -> None:
        stateful = [operator for operator in self.operators if operator.stateful]
        if len(stateful) == 1:
            stateful[0].restore(data)
            return
        header, arrays = unpack(data)
        if header.get("operator") != TREE_OPERATOR or header.get("parts") != len(stateful):
            raise DataError(
                f"snapshot does not match this query: {header.get('parts')} stateful "
                f"operators saved, the plan has {len(stateful)}"
            )
        for number, operator in enumerate(stateful):
            operator.restore(arrays[f"part{number}"].tobytes())
