"""Filter (HAVING) and Project (the output list): stateless operators over window results.

The window operator emits "window result" batches, one row per fired (window, key): the key
columns under their own names, then `__window_start` and `__window_end` (timestamp[us, UTC]),
then `__aggregate_0 .. __aggregate_{n-1}` (the aggregates' result types). Plan expressions
read them as exp.Column(key name), WindowBound("start" / "end") and AggregateRef(i);
`WindowResultLayout` is that mapping, read once from the input schema.

`FilterOperator` keeps the rows where its predicate is TRUE (NULL is not TRUE);
`ProjectOperator` evaluates the output expressions and types them as the plan says. Both
evaluate through an evaluator of their step's backend (`ProjectEvaluator`: the host's Arrow
evaluator in runtime/cpu/project.py, one generated CUDA kernel in runtime/gpu/project.py),
bound once to the expressions and the layout, so a batch costs no re-derivation. This module
imports no backend.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pyarrow as pa
from sqlglot import exp

from mangonel.catalog.types import ResultType, SqlType, result_type_from_arrow
from mangonel.compiler import physical as ph
from mangonel.compiler.logical import OutputColumn
from mangonel.compiler.nodes import WindowStruct
from mangonel.compiler.physical import AGGREGATE_PREFIX, WINDOW_END, WINDOW_START, aggregate_column
from mangonel.compiler.typing import TypeEnv, unwrap_parens
from mangonel.runtime.operators.registry import Registration, StepKernels


def window_result_schema(
    keys: Sequence[tuple[str, SqlType]], aggregate_types: Sequence[ResultType]
) -> pa.Schema:
    """The schema of the window operator's result batches (`physical.result_columns`)."""
    columns = ph.result_columns(keys, aggregate_types)
    return pa.schema([pa.field(name, sql_type.info.arrow) for name, sql_type in columns])


@dataclass(frozen=True)
class WindowResultLayout:
    """Where each reference of a plan expression lives in a window-result batch."""

    key_names: tuple[str, ...]
    key_types: tuple[SqlType, ...]
    aggregate_types: tuple[ResultType, ...]
    key_positions: tuple[int, ...]
    # (start, end); None for a join without a window, whose rows have no bounds
    bound_positions: tuple[int, int] | None
    aggregate_positions: tuple[int, ...]

    @classmethod
    def from_schema(cls, schema: pa.Schema) -> WindowResultLayout:
        names = list(schema.names)
        aggregates = sum(1 for name in names if name.startswith(AGGREGATE_PREFIX))
        bounds = (
            (names.index(WINDOW_START), names.index(WINDOW_END)) if WINDOW_START in names else None
        )
        aggregate_positions = tuple(names.index(aggregate_column(i)) for i in range(aggregates))
        reserved = {*(bounds or ()), *aggregate_positions}
        key_positions = tuple(i for i in range(len(names)) if i not in reserved)
        types = [result_type_from_arrow(field.type) for field in schema]
        if None in types:
            raise TypeError(f"window result schema has a column of no SQL type: {schema}")
        return cls(
            key_names=tuple(names[i] for i in key_positions),
            key_types=tuple(types[i] for i in key_positions),
            aggregate_types=tuple(types[i] for i in aggregate_positions),
            key_positions=key_positions,
            bound_positions=bounds,
            aggregate_positions=aggregate_positions,
        )

    @property
    def column_types(self) -> dict[str, SqlType]:
        return dict(zip(self.key_names, self.key_types, strict=True))

    @property
    def env(self) -> TypeEnv:
        """The types plan expressions over this batch are typed with."""
        return TypeEnv(columns=self.column_types, aggregates=self.aggregate_types)

    def position(self, reference: tuple[str, str | int]) -> int:
        """The batch column of ("column", name), ("window_bound", "start"/"end") or
        ("aggregate", number) (`compiler.codegen_project.references`)."""
        kind, key = reference
        if kind == "column":
            return self.key_positions[self.key_names.index(key)]
        if kind == "window_bound":
            assert self.bound_positions is not None  # the binder allows bounds with a window
            return self.bound_positions[0 if key == "start" else 1]
        return self.aggregate_positions[key]

    def split(
        self, batch: pa.RecordBatch
    ) -> tuple[dict[str, pa.Array], list[pa.Array], dict[str, pa.Array]]:
        """(key columns by name, aggregates by number, bounds by "start"/"end") of a batch."""
        names, positions = self.key_names, self.key_positions
        columns = {n: batch.column(i) for n, i in zip(names, positions, strict=True)}
        aggregates = [batch.column(i) for i in self.aggregate_positions]
        if self.bound_positions is None:
            return columns, aggregates, {}
        start, end = self.bound_positions
        return columns, aggregates, {"start": batch.column(start), "end": batch.column(end)}


class BoundOutputs(Protocol):
    def evaluate(self, batch: pa.RecordBatch) -> list[pa.Array]:
        """One array per expression, in the expression's own type (bare references as the
        batch holds them)."""
        ...


class BoundPredicate(Protocol):
    def select(self, batch: pa.RecordBatch) -> np.ndarray:
        """A boolean mask: True where the predicate is TRUE (NULL and FALSE drop the row)."""
        ...


class ProjectEvaluator(Protocol):
    """What a backend supplies to run Filter and Project (runtime/cpu/project.py,
    runtime/gpu/project.py). Binding does the per-query work (typing, rendering, compiling)
    once; the bound object then runs batch after batch."""

    backend: str  # "cpu" or "gpu"

    def bind_outputs(
        self, expressions: Sequence[exp.Expression], layout: WindowResultLayout
    ) -> BoundOutputs: ...

    def bind_predicate(
        self, predicate: exp.Expression, layout: WindowResultLayout
    ) -> BoundPredicate: ...


@dataclass(frozen=True)
class RowMetrics:
    """Rows into and out of a stateless operator."""

    rows_in: int
    rows_out: int


class _Stateless:
    """The operator protocol's stateless half: no watermark reaction, nothing buffered, an
    empty snapshot."""

    schema: pa.Schema
    stateful = False

    def __init__(self) -> None:
        self.rows_in = 0
        self.rows_out = 0

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        return []

    def finish(self) -> list[pa.RecordBatch]:
        return []

    def snapshot(self) -> bytes:
        return b""

    def restore(self, data: bytes) -> None:
        if data:
            raise ValueError(f"{type(self).__name__} keeps no state; got a snapshot of it")

    def metrics(self) -> RowMetrics:
        return RowMetrics(self.rows_in, self.rows_out)

    @staticmethod
    def _only_input(input: int) -> None:
        if input != 0:
            raise ValueError(f"one input only; got input {input}")


class FilterOperator(_Stateless):
    """HAVING: the rows of window results where `predicate` is TRUE, schema unchanged."""

    def __init__(
        self, predicate: exp.Expression, input_schema: pa.Schema, evaluator: ProjectEvaluator
    ) -> None:
        super().__init__()
        self.schema = input_schema
        self.backend = evaluator.backend
        self._predicate = evaluator.bind_predicate(
            predicate, WindowResultLayout.from_schema(input_schema)
        )

    def process(self, batch: pa.RecordBatch, input: int = 0) -> list[pa.RecordBatch]:
        self._only_input(input)
        rows = batch.num_rows
        self.rows_in += rows
        if not rows:
            return []
        keep = self._predicate.select(batch)
        kept = int(np.count_nonzero(keep))
        if not kept:
            return []
        if kept < rows:
            batch = batch.filter(pa.array(keep, pa.bool_()))
        self.rows_out += kept
        return [batch]


class ProjectOperator(_Stateless):
    """The output list: each output's expression over window results, typed as the plan's
    `OutputColumn` says."""

    def __init__(
        self,
        outputs: Sequence[OutputColumn],
        input_schema: pa.Schema,
        evaluator: ProjectEvaluator,
    ) -> None:
        super().__init__()
        self.schema = output_schema(outputs)
        self.backend = evaluator.backend
        layout = WindowResultLayout.from_schema(input_schema)
        # Spark's `window` struct is built here from the bounds, on the host whatever the
        # backend (it is the bounds' two buffers, no computation); the rest is evaluated
        self._structs = [
            number
            for number, output in enumerate(outputs)
            if isinstance(unwrap_parens(output.expression), WindowStruct)
        ]
        self._bounds = layout.bound_positions
        self._outputs = evaluator.bind_outputs(
            [o.expression for n, o in enumerate(outputs) if n not in self._structs], layout
        )

    def process(self, batch: pa.RecordBatch, input: int = 0) -> list[pa.RecordBatch]:
        self._only_input(input)
        rows = batch.num_rows
        self.rows_in += rows
        if not rows:
            return []
        evaluated = iter(self._outputs.evaluate(batch))
        arrays = []
        for number, field in enumerate(self.schema):
            if number in self._structs:
                arrays.append(self._window_struct(batch, field.type))
                continue
            array = next(evaluated)
            if isinstance(array, pa.ChunkedArray):
                array = array.combine_chunks()
            if array.type != field.type:
                array = array.cast(field.type)
            arrays.append(array)
        self.rows_out += rows
        return [pa.RecordBatch.from_arrays(arrays, schema=self.schema)]

    def _window_struct(self, batch: pa.RecordBatch, struct_type: pa.DataType) -> pa.Array:
        """STRUCT<start, end> of each row's window bounds (never NULL)."""
        assert self._bounds is not None  # the binder allows the struct with a window only
        start, end = (batch.column(i) for i in self._bounds)
        return pa.StructArray.from_arrays([start, end], fields=list(struct_type))


def output_schema(outputs: Sequence[OutputColumn]) -> pa.Schema:
    """The schema of a Project's batches: each output's name and plan type."""
    return pa.schema([pa.field(o.name, o.type.info.arrow) for o in outputs])


def registrations(new_evaluator: Callable[[], ProjectEvaluator]) -> dict[type, Registration]:
    """The Filter and Project entries of a backend's `OPERATORS`: the operators of this
    module over that backend's evaluator (one per operator: a bound evaluator keeps its
    compiled kernel and staging)."""

    def filter_operator(node: ph.FilterExec, schema: pa.Schema, kernels: StepKernels):
        return FilterOperator(node.predicate, schema, new_evaluator())

    def project_operator(node: ph.ProjectExec, schema: pa.Schema, kernels: StepKernels):
        return ProjectOperator(node.outputs, schema, new_evaluator())

    return {
        ph.FilterExec: Registration(filter_operator),
        ph.ProjectExec: Registration(project_operator),
    }
