"""The CPU evaluator of Filter and Project: the host's Arrow evaluator over window results.

Each expression goes through `evaluation.evaluate_expression` with the batch's key columns,
window bounds and aggregates, exactly as the window operator's emit evaluated HAVING and the
outputs before they became operators (bare references come back without a copy).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
from sqlglot import exp

from mangonel.runtime.cpu.evaluation import evaluate_expression
from mangonel.runtime.host.arrays import to_mask
from mangonel.runtime.operators.project import WindowResultLayout


class _CpuExpressions:
    def __init__(self, expressions: Sequence[exp.Expression], layout: WindowResultLayout):
        self._expressions = tuple(expressions)
        self._layout = layout
        self._column_types = layout.column_types
        self._aggregate_types = list(layout.aggregate_types)

    def _evaluate(self, batch: pa.RecordBatch) -> list[pa.Array]:
        columns, aggregates, bounds = self._layout.split(batch)
        return [
            evaluate_expression(
                expression,
                self._column_types,
                columns,
                aggregates=aggregates,
                aggregate_types=self._aggregate_types,
                window_bounds=bounds,
                length=batch.num_rows,
            )
            for expression in self._expressions
        ]


class CpuOutputs(_CpuExpressions):
    def evaluate(self, batch: pa.RecordBatch) -> list[pa.Array]:
        return self._evaluate(batch)


class CpuPredicate(_CpuExpressions):
    def __init__(self, predicate: exp.Expression, layout: WindowResultLayout) -> None:
        super().__init__((predicate,), layout)

    def select(self, batch: pa.RecordBatch) -> np.ndarray:
        return to_mask(self._evaluate(batch)[0])


class CpuProjectEvaluator:
    """`runtime.operators.project.ProjectEvaluator` on the host."""

    backend = "cpu"

    def bind_outputs(
        self, expressions: Sequence[exp.Expression], layout: WindowResultLayout
    ) -> CpuOutputs:
        return CpuOutputs(expressions, layout)

    def bind_predicate(self, predicate: exp.Expression, layout: WindowResultLayout) -> CpuPredicate:
        return CpuPredicate(predicate, layout)
