"""Filter (HAVING) and Project (the SELECT list) over window results, on the host.

Both read the batches the window operator emits (`physical.window_result_columns`): key
columns under their own names, `__window_start` / `__window_end`, `__aggregate_<i>`. An
expression's Column is a key column, WindowBound a window bound, AggregateRef i the column
`__aggregate_<i>`. Evaluation is the host evaluator's (`runtime.cpu.evaluation`), as before
these were operators of their own; the GPU form of these operators replaces it on GPU plans.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mangonel.catalog.types import SqlType
from mangonel.compiler import physical as ph
from mangonel.runtime.cpu.evaluation import evaluate_expression, to_mask
from mangonel.runtime.operators.protocol import OperatorMetrics
from mangonel.runtime.operators.registry import StepKernels


class _WindowResultOperator:
    """What Filter and Project share: stateless, reading window-result columns."""

    stateful = False

    def __init__(self, node: ph.FilterExec | ph.ProjectExec, input_schema: pa.Schema) -> None:
        window = ph.find(node, ph.WindowAggregateExec)
        self.input_schema = input_schema
        self.column_types: dict[str, SqlType] = {k.name: k.type for k in window.keys}
        self.aggregate_types = [a.result_type for a in window.aggregates]
        # positions in the window-result batch (`window_result_columns`: keys, bounds, aggregates)
        self.key_count = len(window.keys)
        self.aggregate_count = len(window.aggregates)

    def _environment(self, batch: pa.RecordBatch) -> dict:
        """The evaluator's inputs over one batch, read once for every expression."""
        columns = batch.columns
        keys = self.key_count
        return {
            "columns": {name: columns[i] for i, name in enumerate(self.column_types)},
            "aggregates": columns[keys + 2 : keys + 2 + self.aggregate_count],
            "window_bounds": {"start": columns[keys], "end": columns[keys + 1]},
            "length": batch.num_rows,
        }

    def _evaluate(self, expression, environment: dict) -> pa.Array:  # noqa: ANN001
        return evaluate_expression(
            expression,
            self.column_types,
            environment["columns"],
            aggregates=environment["aggregates"],
            aggregate_types=self.aggregate_types,
            window_bounds=environment["window_bounds"],
            length=environment["length"],
        )

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        return []

    def finish(self) -> list[pa.RecordBatch]:
        return []

    def snapshot(self) -> bytes:
        return b""

    def restore(self, data: bytes) -> None:
        pass

    def metrics(self) -> OperatorMetrics | None:
        return None


class FilterOperator(_WindowResultOperator):
    """HAVING: the window-result rows where the predicate is TRUE (NULL drops the row)."""

    def __init__(self, node: ph.FilterExec, input_schema: pa.Schema, kernels: StepKernels) -> None:
        super().__init__(node, input_schema)
        self.predicate = node.predicate
        self.schema = input_schema

    def process(self, batch: pa.RecordBatch, input: int = 0) -> list[pa.RecordBatch]:
        if not batch.num_rows:
            return []
        keep = to_mask(self._evaluate(self.predicate, self._environment(batch)))
        if keep.all():
            return [batch]
        if not keep.any():
            return []
        return [batch.take(pa.array(np.nonzero(keep)[0], pa.int64()))]


class ProjectOperator(_WindowResultOperator):
    """The plan's output expressions over window results, typed as the plan says."""

    def __init__(self, node: ph.ProjectExec, input_schema: pa.Schema, kernels: StepKernels) -> None:
        super().__init__(node, input_schema)
        self.outputs = node.outputs
        self.schema = output_schema(node)

    def process(self, batch: pa.RecordBatch, input: int = 0) -> list[pa.RecordBatch]:
        arrays = []
        environment = self._environment(batch)
        for output, field in zip(self.outputs, self.schema, strict=True):
            array = self._evaluate(output.expression, environment)
            if isinstance(array, pa.ChunkedArray):
                array = array.combine_chunks()
            if array.type != field.type:
                array = array.cast(field.type)
            arrays.append(array)
        return [pa.RecordBatch.from_arrays(arrays, schema=self.schema)]


def output_schema(node: ph.ProjectExec) -> pa.Schema:
    """The Arrow schema of a plan's results."""
    return pa.schema([pa.field(o.name, o.type.info.arrow) for o in node.outputs])
