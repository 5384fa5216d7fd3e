"""Physical plan: the window-aggregation operator with every parameter made explicit.

The plan is data: EXPLAIN prints these nodes, codegen renders kernels from them, and both
backends execute them. The pipeline of one window query is always the chain

    ProjectExec -> [FilterExec (HAVING)] -> WindowAggregateExec -> LiftExec -> StreamScanExec

Aggregates are decomposed into state fields with lift / combine / finalize (SPRINGALD's
pane partials): panes are gcd(range, slide) long, so every tuple of one pane belongs to the
same windows and a pane can be pre-aggregated before any window is known.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from sqlglot import exp

from mangonel.aggregates import COUNT, StateKind, require_fixed
from mangonel.catalog.catalog import Column, Stream
from mangonel.catalog.types import SqlType
from mangonel.compiler import logical as lg
from mangonel.compiler.logical import AggregateFunction, OutputColumn, WindowKind, WindowSpec

DEFAULT_WINDOWS_PER_BATCH = 100  # SPRINGALD's batch of windows per tree update


@dataclass(frozen=True)
class StateField:
    """One partial aggregate kept per (key, pane): one array per part of its kind (MOMENTS
    has three: n, mean, m2). The kind is the registered definition (`mangonel.aggregates`)."""

    name: str
    kind: StateKind
    argument: exp.Expression | None
    type: SqlType  # accumulator type (BIGINT counts, BIGINT/DOUBLE sums, arg type for MIN/MAX)


@dataclass(frozen=True)
class AggregatePlan:
    """How one aggregate call is finalized from state fields: its function's `finalize`
    (`mangonel.aggregates`) over the count field and the value field, if it has one."""

    function: AggregateFunction
    argument: exp.Expression | None
    count_field: str  # non-NULL count of the argument (rows for COUNT(*))
    value_field: str | None  # the field of the function's `state`; None for COUNT
    result_type: SqlType


@dataclass(frozen=True)
class StreamScanExec:
    stream: Stream
    columns: tuple[Column, ...]  # only what the query reads; the event-time column first


@dataclass(frozen=True)
class LiftExec:
    """Per tuple: filter, key slot, pane id, partial state. Fused into one pass (one kernel)."""

    child: StreamScanExec
    predicate: exp.Expression | None
    keys: tuple[Column, ...]
    fields: tuple[StateField, ...]  # fields[0] is always the row count of the window


@dataclass(frozen=True)
class WindowAggregateExec:
    """Pane-and-tree window aggregation (SPRINGALD sections III-V).

    pane_length: microseconds (time) or rows (count) = gcd(size, slide).
    panes_per_window = size / pane_length; panes_per_slide = slide / pane_length.
    windows_per_batch: windows computed per tree update (n_w).
    """

    child: LiftExec
    window: WindowSpec
    pane_length: int
    panes_per_window: int
    panes_per_slide: int
    windows_per_batch: int
    aggregates: tuple[AggregatePlan, ...]
    strategy: str
    backend: str
    backend_reason: str

    @property
    def keys(self) -> tuple[Column, ...]:
        return self.child.keys

    @property
    def fields(self) -> tuple[StateField, ...]:
        return self.child.fields


@dataclass(frozen=True)
class FilterExec:
    child: WindowAggregateExec
    predicate: exp.Expression


@dataclass(frozen=True)
class ProjectExec:
    child: FilterExec | WindowAggregateExec
    outputs: tuple[OutputColumn, ...]


PhysicalNode = ProjectExec | FilterExec | WindowAggregateExec | LiftExec | StreamScanExec


@dataclass(frozen=True)
class WindowPipeline:
    """The chain of one window query, unpacked for the operators."""

    scan: StreamScanExec
    lift: LiftExec
    window: WindowAggregateExec
    having: exp.Expression | None
    outputs: tuple[OutputColumn, ...]


def unpack(root: ProjectExec) -> WindowPipeline:
    having = None
    node = root.child
    if isinstance(node, FilterExec):
        having = node.predicate
        node = node.child
    return WindowPipeline(node.child.child, node.child, node, having, root.outputs)


def children(node: PhysicalNode) -> tuple[PhysicalNode, ...]:
    child = getattr(node, "child", None)
    return (child,) if child is not None else ()


# ---------------------------------------------------------------------------------------
# Planning: logical -> physical


def _unwrap(node: lg.LogicalNode):
    """The parts of the only logical shape wave 1 has: Project(Filter?(WindowAggregate(
    Filter?(StreamScan))))."""
    if not isinstance(node, lg.Project):
        raise TypeError(f"expected a Project at the root, got {type(node).__name__}")
    outputs = node.outputs
    node = node.child
    having = None
    if isinstance(node, lg.Filter):
        having, node = node.predicate, node.child
    if not isinstance(node, lg.WindowAggregate):
        raise TypeError(f"expected a WindowAggregate, got {type(node).__name__}")
    aggregate = node
    node = node.child
    where = None
    if isinstance(node, lg.Filter):
        where, node = node.predicate, node.child
    if not isinstance(node, lg.StreamScan):
        raise TypeError(f"expected a StreamScan, got {type(node).__name__}")
    return outputs, having, aggregate, where, node


def field_dtype(field: StateField) -> np.dtype:
    """The storage dtype of every array of a state field (its kind's rule)."""
    return field.kind.storage(field.type)


def is_integer_state(field: StateField) -> bool:
    """Whether a field's arrays are int64 (counts, integer sums and MIN/MAX of integers and
    timestamps) rather than float64."""
    return field_dtype(field) == np.dtype(np.int64)


def neutral(field: StateField) -> tuple[np.dtype, tuple[float | int, ...]]:
    """(storage dtype, neutral element per array) of a state field: the identity of its
    combine, never a marker (each kind's `neutral`). Every backend and the Spark partials
    start cells from these values. Fixed-width kinds only."""
    require_fixed(field.kind, "a backend's pane state")
    dtype = field_dtype(field)
    return dtype, field.kind.neutral(dtype)


class _FieldTable:
    """State fields shared between aggregates: SUM(x) and AVG(x) read one sum of x."""

    def __init__(self) -> None:
        self.fields: list[StateField] = [StateField("rows", COUNT, None, SqlType.BIGINT)]

    def get(self, kind: StateKind, argument: exp.Expression | None, type_: SqlType) -> str:
        for field in self.fields:
            if field.kind is kind and field.argument == argument and field.type is type_:
                return field.name
        name = f"{kind.name}_{len(self.fields)}"
        self.fields.append(StateField(name, kind, argument, type_))
        return name


def decompose(
    aggregates: tuple[lg.Aggregate, ...], argument_types: dict[int, SqlType]
) -> tuple[tuple[StateField, ...], tuple[AggregatePlan, ...]]:
    """Decompose aggregate calls into shared state fields and finalize rules: every call
    with an argument reads the non-NULL count of it, and the field of its function's
    `state` (kind and accumulator type from the registry).

    argument_types maps the position of each aggregate to the type of its argument.
    """
    table = _FieldTable()
    plans = []
    for position, aggregate in enumerate(aggregates):
        function, argument = aggregate.function, aggregate.argument
        definition = function.definition
        if not definition.takes_argument:
            plans.append(AggregatePlan(function, None, "rows", None, aggregate.result_type))
            continue
        argument_type = argument_types[position]
        count = table.get(COUNT, argument, SqlType.BIGINT)
        value: str | None = None
        if definition.state is not None:
            use = definition.state
            value = table.get(use.kind, argument, use.accumulator(argument_type))
        plans.append(AggregatePlan(function, argument, count, value, aggregate.result_type))
    return tuple(table.fields), tuple(plans)


def window_parameters(window: WindowSpec) -> tuple[int, int, int]:
    """(pane_length, panes_per_window, panes_per_slide) for a window."""
    pane_length = math.gcd(window.size, window.slide)
    return pane_length, window.size // pane_length, window.slide // pane_length


def plan(
    root: lg.LogicalNode,
    *,
    argument_types: dict[int, SqlType],
    backend: str,
    backend_reason: str,
    windows_per_batch: int | None = None,
    strategy: str | None = None,
) -> ProjectExec:
    """Turn the logical plan of a window query into its physical plan."""
    outputs, having, aggregate, where, scan = _unwrap(root)
    fields, aggregate_plans = decompose(aggregate.aggregates, argument_types)
    pane_length, panes_per_window, panes_per_slide = window_parameters(aggregate.window)
    scan_exec = StreamScanExec(scan.stream, scan.columns)
    lift = LiftExec(scan_exec, where, aggregate.keys, fields)
    if strategy is None:
        strategy = default_strategy(backend, aggregate.window)
    window_exec = WindowAggregateExec(
        child=lift,
        window=aggregate.window,
        pane_length=pane_length,
        panes_per_window=panes_per_window,
        panes_per_slide=panes_per_slide,
        windows_per_batch=windows_per_batch
        or default_windows_per_batch(panes_per_window, panes_per_slide),
        aggregates=aggregate_plans,
        strategy=strategy,
        backend=backend,
        backend_reason=backend_reason,
    )
    top: FilterExec | WindowAggregateExec = window_exec
    if having is not None:
        top = FilterExec(window_exec, having)
    return ProjectExec(top, outputs)


def default_windows_per_batch(panes_per_window: int, panes_per_slide: int) -> int:
    """Windows per tree update. A tree batch of n_w windows has n + (n_w - 1) * k leaves
    (n panes per window, k per slide), so building it costs about n / n_w + k leaves per
    window: at least n / k windows per batch keep that near 2k instead of growing with n
    (at s = 100 us, w = 1 s, 100 windows a batch spent ~100 leaf copies per window)."""
    return max(DEFAULT_WINDOWS_PER_BATCH, -(-panes_per_window // panes_per_slide))


def default_strategy(backend: str, window: WindowSpec) -> str:
    """The name of the pane pre-aggregation and window strategy a backend uses."""
    if window.kind is WindowKind.COUNT:
        return "count-panes+tree"
    if backend == "gpu":
        return "hash-preaggregate+tree"
    return "pane-preaggregate+tree"
