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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np
from sqlglot import exp

from mangonel.aggregates import COUNT, StateKind, require_fixed
from mangonel.catalog.catalog import Column, Stream, Table
from mangonel.catalog.types import SqlType
from mangonel.compiler import logical as lg
from mangonel.compiler.holistic import (
    COUNT_HOLISTIC_ON_CPU,
    HOLISTIC_ON_CPU,
    JOIN_HOLISTIC,
    HolisticPlan,
    holistic_plan,
)
from mangonel.compiler.logical import (
    AggregateFunction,
    JoinKind,
    OutputColumn,
    WindowKind,
    WindowSpec,
)
from mangonel.errors import PlanError

N = TypeVar("N")

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
    fraction: float | None = None  # p of a percentile (holistic functions only)

    @property
    def holistic(self) -> bool:
        """Whether the window's whole multiset of values decides it (MEDIAN, PERCENTILE_*,
        COUNT DISTINCT): evaluated by the holistic step, not finalized from partials."""
        return self.function.definition.is_holistic


@dataclass(frozen=True)
class Placement:
    """Where one step of an operator runs and why, decided at planning time. EXPLAIN prints
    every step placed off the plan's backend (`! <step> runs on cpu because <reason>`) and
    the operators obey it: a step placed on the CPU gets the CPU kernels on a GPU plan."""

    step: str  # lift, merge, tree, finalize, filter, project
    backend: str  # "cpu" or "gpu"
    reason: str


@dataclass(frozen=True)
class StreamScanExec:
    stream: Stream
    columns: tuple[Column, ...]  # only what the query reads; the event-time column first
    children: tuple[()] = ()


@dataclass(frozen=True)
class LiftExec:
    """Per tuple: filter, key slot, pane id, partial state. Fused into one pass (one kernel)."""

    children: tuple[StreamScanExec]
    predicate: exp.Expression | None
    keys: tuple[Column, ...]
    fields: tuple[StateField, ...]  # fields[0] is always the row count of the window

    @property
    def scan(self) -> StreamScanExec:
        return self.children[0]


@dataclass(frozen=True)
class WindowAggregateExec:
    """Pane-and-tree window aggregation (SPRINGALD sections III-V).

    pane_length: microseconds (time) or rows (count) = gcd(size, slide).
    panes_per_window = size / pane_length; panes_per_slide = slide / pane_length.
    windows_per_batch: windows computed per tree update (n_w).
    backend/backend_reason: the plan's backend (`compiler.backend.choose_backend`);
    placements: where each step runs (lift, merge, tree, finalize for time windows; lift,
    tree, finalize for count windows, which keep per-tuple partials and merge no panes;
    plus `holistic` when the node has holistic aggregates).
    holistic: the strategy of its holistic aggregates (MEDIAN, PERCENTILE_*, COUNT DISTINCT;
    `compiler.holistic`), None when it has none.
    The operator fuses its Lift and StreamScan children: it reads the stream's batches.
    """

    children: tuple[LiftExec]
    window: WindowSpec
    pane_length: int
    panes_per_window: int
    panes_per_slide: int
    windows_per_batch: int
    aggregates: tuple[AggregatePlan, ...]
    backend: str
    backend_reason: str
    placements: tuple[Placement, ...]
    holistic: HolisticPlan | None = None

    @property
    def lift(self) -> LiftExec:
        return self.children[0]

    @property
    def keys(self) -> tuple[Column, ...]:
        return self.lift.keys

    @property
    def fields(self) -> tuple[StateField, ...]:
        return self.lift.fields

    @property
    def strategy(self) -> str:
        """The pane pre-aggregation and window strategy, named from the placements."""
        if self.window.kind is WindowKind.COUNT:
            return "count-panes+tree"
        if placement(self, "merge").backend == "gpu":
            return "hash-preaggregate+tree"
        return "pane-preaggregate+tree"


@dataclass(frozen=True)
class TableScanExec:
    """A static table, read once as it is when the query starts."""

    table: Table
    columns: tuple[Column, ...]  # only what the query reads, in schema order
    children: tuple[()] = ()


JOIN_ALGORITHMS = ("hash", "sort-merge")
SCAN_TYPES = (StreamScanExec, TableScanExec)  # the inputs a query reads


@dataclass(frozen=True)
class WindowJoinExec:
    """The join of two inputs per window (docs/semantics.md, "Joins").

    children: (left, right) scans; a TableScanExec side is a static table (no window needed).
    aliases: the qualifiers of each side. watermark_delays: per side, the stream's delay (the
    clause's WATERMARK, else the declared one; None for a table): each stream keeps its own
    watermark and the query's is their minimum.
    window: the join's window (None: stream-static without a window clause); pane_length =
    gcd(size, slide). `pane_pairs`: sliding windows are joined once per pair of panes and
    each pair credited to every window covering both panes (not re-joined per window).
    algorithm: "hash" (build on the smaller side, probe with the other) or "sort-merge"
    (skewed keys), chosen for `algorithm_reason`.
    where: WHERE over the joined rows, after the join (outer rows included).
    columns: the joined row, `alias.column` of what each side's scan reads, left first.
    placements: the `join` step (GPU plans: on the CPU until GPU join kernels exist).
    """

    children: tuple[StreamScanExec, StreamScanExec | TableScanExec]
    aliases: tuple[str, str]
    kind: JoinKind
    window: WindowSpec | None
    pane_length: int
    panes_per_window: int
    panes_per_slide: int
    left_keys: tuple[Column, ...]
    right_keys: tuple[Column, ...]
    residual: exp.Expression | None
    where: exp.Expression | None
    columns: tuple[Column, ...]
    watermark_delays: tuple[int | None, int | None]
    algorithm: str
    algorithm_reason: str
    backend: str
    backend_reason: str
    placements: tuple[Placement, ...]

    @property
    def pane_pairs(self) -> bool:
        return self.window is not None and self.window.slide != self.window.size

    @property
    def adaptive(self) -> bool:
        """Whether the runtime chooses the algorithm per batch from its key statistics
        (join_algorithm "auto"); `algorithm` is then the choice before the first batch."""
        return self.algorithm_reason == AUTO_JOIN_ALGORITHM

    @property
    def static_side(self) -> int | None:
        """The index of the static table side, if one side is a table."""
        for index, child in enumerate(self.children):
            if isinstance(child, TableScanExec):
                return index
        return None


@dataclass(frozen=True)
class JoinAggregateExec:
    """Aggregation over the joined rows of each window, per group, fused into the join:
    matches are aggregated where they are found (state fields of the aggregate registry's
    state kinds), never materialised. Emits window results (`window_result_columns`), as
    the window operator does, so HAVING and the SELECT list read them the same way."""

    children: tuple[WindowJoinExec]
    keys: tuple[Column, ...]
    fields: tuple[StateField, ...]  # fields[0] is always the count of joined rows
    aggregates: tuple[AggregatePlan, ...]
    placements: tuple[Placement, ...]
    # why the aggregation is factorised (`factorised.factorised_reason`), None: per joined pair
    factorised: str | None = None

    @property
    def join(self) -> WindowJoinExec:
        return self.children[0]

    @property
    def window(self) -> WindowSpec:
        window = self.join.window
        assert window is not None  # the binder refuses aggregates without a window
        return window


@dataclass(frozen=True)
class FilterExec:
    """HAVING over the window results (`window_result_columns`)."""

    children: tuple[WindowAggregateExec | JoinAggregateExec]
    predicate: exp.Expression
    placements: tuple[Placement, ...]


@dataclass(frozen=True)
class ProjectExec:
    """The SELECT list over the window results (`window_result_columns`), after HAVING."""

    children: tuple[FilterExec | WindowAggregateExec | JoinAggregateExec | WindowJoinExec]
    outputs: tuple[OutputColumn, ...]
    placements: tuple[Placement, ...]


PhysicalNode = (
    ProjectExec
    | FilterExec
    | WindowAggregateExec
    | LiftExec
    | StreamScanExec
    | JoinAggregateExec
    | WindowJoinExec
    | TableScanExec
)


def children(node: PhysicalNode) -> tuple[PhysicalNode, ...]:
    return node.children


def walk(root: PhysicalNode) -> Iterator[PhysicalNode]:
    """Every node of the plan, root first (depth first, children in order)."""
    yield root
    for child in root.children:
        yield from walk(child)


def find(root: PhysicalNode, node_type: type[N]) -> N:
    """The one node of `node_type` in the plan (the first, root first); LookupError if none."""
    for node in walk(root):
        if isinstance(node, node_type):
            return node
    raise LookupError(f"the plan has no {node_type.__name__}")


def placement(node: PhysicalNode, step: str) -> Placement:
    for candidate in getattr(node, "placements", ()):
        if candidate.step == step:
            return candidate
    raise LookupError(f"{type(node).__name__} has no step {step!r}")


def plan_backend(root: PhysicalNode) -> str:
    """The plan's backend (`choose_backend`'s choice), read from its window or join
    operator."""
    for node in walk(root):
        if isinstance(node, (WindowAggregateExec, WindowJoinExec)):
            return node.backend
    raise LookupError("the plan has no window or join operator")


# Column names of the window operator's output ("window results"): key columns under their own
# names, then these two bounds, then one column per aggregate.
WINDOW_START = "__window_start"
WINDOW_END = "__window_end"
AGGREGATE_PREFIX = "__aggregate_"


def aggregate_column(number: int) -> str:
    """The window-result column of aggregate number `number` (AggregateRef(number))."""
    return f"{AGGREGATE_PREFIX}{number}"


def result_columns(
    keys: Sequence[tuple[str, SqlType]], aggregate_types: Sequence[SqlType]
) -> tuple[tuple[str, SqlType], ...]:
    """Window-result columns: keys (declared types), `__window_start`, `__window_end`
    (TIMESTAMP, UTC), `__aggregate_0..n-1` (the aggregates' result types)."""
    columns = list(keys)
    columns += [(WINDOW_START, SqlType.TIMESTAMP), (WINDOW_END, SqlType.TIMESTAMP)]
    columns += [(aggregate_column(i), sql_type) for i, sql_type in enumerate(aggregate_types)]
    return tuple(columns)


def window_result_columns(
    node: WindowAggregateExec | JoinAggregateExec,
) -> tuple[tuple[str, SqlType], ...]:
    """The columns of the batches the window operator emits, one row per fired (window, key)
    before HAVING (`result_columns`). Filter and Project read these."""
    return result_columns(
        [(k.name, k.type) for k in node.keys], [a.result_type for a in node.aggregates]
    )


def join_row_columns(node: WindowJoinExec) -> tuple[tuple[str, SqlType], ...]:
    """The columns of the batches a (non-aggregating) join emits, one row per joined pair
    (or kept unmatched row) and window: the joined row's columns, then `__window_start`,
    `__window_end` (absent without a window). The SELECT list reads these."""
    columns = [(c.name, c.type) for c in node.columns]
    if node.window is not None:
        columns += [(WINDOW_START, SqlType.TIMESTAMP), (WINDOW_END, SqlType.TIMESTAMP)]
    return tuple(columns)


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
        fraction = aggregate.fraction
        if definition.holistic is not None and definition.holistic.fraction is not None:
            fraction = definition.holistic.fraction  # MEDIAN
        plans.append(
            AggregatePlan(function, argument, count, value, aggregate.result_type, fraction)
        )
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
    join_algorithm: str | None = None,
    gpu_join: bool = True,
    join_factorised: bool = True,
) -> ProjectExec:
    """Turn the logical plan of a window query into its physical plan. `join_algorithm`
    ("hash", "sort-merge"; None or "auto": the planner's choice) and `gpu_join` (place the
    join on the GPU in GPU plans) and `join_factorised` (factorised aggregation where it
    applies, `factorised.factorised_reason`) apply to join queries."""
    if _is_join(root):
        return plan_join(
            root,
            argument_types=argument_types,
            backend=backend,
            backend_reason=backend_reason,
            join_algorithm=join_algorithm,
            gpu_join=gpu_join,
            factorise=join_factorised,
        )
    outputs, having, aggregate, where, scan = _unwrap(root)
    fields, aggregate_plans = decompose(aggregate.aggregates, argument_types)
    pane_length, panes_per_window, panes_per_slide = window_parameters(aggregate.window)
    scan_exec = StreamScanExec(scan.stream, scan.columns)
    lift = LiftExec((scan_exec,), where, aggregate.keys, fields)
    holistic = holistic_plan(aggregate.window, fields, aggregate_plans)
    window_exec = WindowAggregateExec(
        children=(lift,),
        window=aggregate.window,
        pane_length=pane_length,
        panes_per_window=panes_per_window,
        panes_per_slide=panes_per_slide,
        windows_per_batch=windows_per_batch
        or default_windows_per_batch(panes_per_window, panes_per_slide),
        aggregates=aggregate_plans,
        backend=backend,
        backend_reason=backend_reason,
        placements=window_placements(
            aggregate.window, backend, backend_reason, holistic is not None
        ),
        holistic=holistic,
    )
    top: FilterExec | WindowAggregateExec = window_exec
    if having is not None:
        top = FilterExec(
            (window_exec,),
            having,
            (expression_placement("filter", backend, backend_reason, (having,), window_exec),),
        )
    expressions = tuple(o.expression for o in outputs)
    return ProjectExec(
        (top,),
        outputs,
        (expression_placement("project", backend, backend_reason, expressions, window_exec),),
    )


def _is_join(node: lg.LogicalNode) -> bool:
    while not isinstance(node, (lg.StreamScan, lg.TableScan, lg.WindowJoin)):
        node = node.child
    return isinstance(node, lg.WindowJoin)


# Why a join step of a GPU plan runs on the CPU (EXPLAIN prints these after "because").
# GPU plans place the join on the GPU (runtime/gpu/join.py, verified on a device) unless the
# `gpu_join=False` option keeps it on the CPU.
JOIN_ON_CPU = "the gpu_join=False option keeps the join on the cpu"
JOIN_OUTPUT_ON_CPU = "its input comes from the join, on the cpu (gpu_join=False)"
# Factorised join aggregation: each side is a window aggregation, placed as any window
# aggregation (`factorised.factorised_sides`); the combine of the two sides' fired (window,
# key) cells (an inner join of cells, products, the GROUP BY) runs on the host.
JOIN_FACTORISED_COMBINE_ON_CPU = (
    "the factorised combine inner-joins the two side aggregations' fired (window, key) cells "
    "on the host"
)
# With gpu_join: what stays on the host, because fired cells are finalized there (copied back
# from the device where the aggregation is device-fused, EXPLAIN's fused=device) and
# the GPU Filter/Project evaluator is bound to window-aggregate results only.
JOIN_FINALIZE_ON_CPU = "the fired windows' (window, group) cells are finalized on the host"
JOIN_OUTPUT_ON_HOST = "its input is the join's result, on the host"
# A stored side is "skewed" when its most frequent key holds more than this many times an
# even share of its rows (top share x distinct keys): the runtime's per-batch choice.
SKEWED_KEYS = 8
AUTO_JOIN_ALGORITHM = (
    "no key statistics before the first batch: hash, built on the smaller side of each window;"
    " then per batch from the join's running key statistics: sort-merge while the most"
    f" frequent key holds over {SKEWED_KEYS}x an even share of the rows"
)


STATIC_JOIN_ALGORITHM = "the static table is the build side, hashed once when the query starts"


def choose_join_algorithm(option: str | None, static: bool = False) -> tuple[str, str]:
    """(algorithm, reason): the option's when given, else "auto": hash before the first
    batch, then chosen per batch by the join operator from the key statistics it keeps
    (distinct keys and the most frequent key's share of the stored rows; streams declare
    none), see `WindowJoinExec.adaptive` and `SKEWED_KEYS`. `static`: one side is a static
    table, the build side of a hash join."""
    if option is None or option == "auto":
        return "hash", STATIC_JOIN_ALGORITHM if static else AUTO_JOIN_ALGORITHM
    if option not in JOIN_ALGORITHMS:
        raise ValueError(
            f"unknown join algorithm {option!r}; choose auto, " + " or ".join(JOIN_ALGORITHMS)
        )
    return option, f"join_algorithm={option} option"


def join_placement(
    step: str, backend: str, reason: str, gpu_join: bool = True, factorised: bool = False
) -> Placement:
    """Join steps (and Filter/Project over a join's output) in GPU plans: with `gpu_join`
    (the default) matching, crediting and the fused aggregation ("join", "aggregate") run on
    the GPU, finalize and Filter/Project over the join on the CPU; `gpu_join=False` runs the
    join's steps on the CPU. A `factorised` aggregated join combines the fired cells of its
    two side aggregations on the host (the sides themselves are window aggregations, placed
    by `window_placements`: `factorised.factorised_sides`)."""
    if backend != "gpu":
        return Placement(step, backend, reason)
    if factorised:
        if step in ("join", "aggregate", "finalize"):
            return Placement(step, "cpu", JOIN_FACTORISED_COMBINE_ON_CPU)
        return Placement(step, "cpu", JOIN_OUTPUT_ON_HOST)
    if gpu_join:
        if step in ("join", "aggregate"):
            return Placement(step, "gpu", reason)
        if step == "finalize":
            return Placement(step, "cpu", JOIN_FINALIZE_ON_CPU)
        return Placement(step, "cpu", JOIN_OUTPUT_ON_HOST)
    if step in ("join", "aggregate", "finalize"):
        return Placement(step, "cpu", JOIN_ON_CPU)
    return Placement(step, "cpu", JOIN_OUTPUT_ON_CPU)


def plan_join(
    root: lg.LogicalNode,
    *,
    argument_types: dict[int, SqlType],
    backend: str,
    backend_reason: str,
    join_algorithm: str | None = None,
    gpu_join: bool = True,
    factorise: bool = True,
) -> ProjectExec:
    """The physical plan of a join query: Project <- [Filter (HAVING)] <- JoinAggregate
    <- WindowJoin (aggregated), or Project <- WindowJoin (rows); WHERE goes into the join."""
    if not isinstance(root, lg.Project):
        raise TypeError(f"expected a Project at the root, got {type(root).__name__}")
    node = root.child
    having = None
    aggregate = None
    if isinstance(node, lg.Filter) and isinstance(node.child, lg.WindowAggregate):
        having, node = node.predicate, node.child
    if isinstance(node, lg.WindowAggregate):
        aggregate, node = node, node.child
    where = None
    if isinstance(node, lg.Filter):
        where, node = node.predicate, node.child
    if not isinstance(node, lg.WindowJoin):
        raise TypeError(f"expected a WindowJoin, got {type(node).__name__}")
    join = node
    scans = tuple(
        StreamScanExec(side.scan.stream, side.scan.columns)
        if isinstance(side.scan, lg.StreamScan)
        else TableScanExec(side.scan.table, side.scan.columns)
        for side in (join.left, join.right)
    )
    if join.window is not None:
        pane_length, panes_per_window, panes_per_slide = window_parameters(join.window)
    else:
        pane_length, panes_per_window, panes_per_slide = 0, 0, 0
    algorithm, algorithm_reason = choose_join_algorithm(
        join_algorithm, static=any(isinstance(scan, TableScanExec) for scan in scans)
    )
    join_exec = WindowJoinExec(
        children=scans,  # type: ignore[arg-type]
        aliases=(join.left.alias, join.right.alias),
        kind=join.kind,
        window=join.window,
        pane_length=pane_length,
        panes_per_window=panes_per_window,
        panes_per_slide=panes_per_slide,
        left_keys=join.left_keys,
        right_keys=join.right_keys,
        residual=join.residual,
        where=where,
        # the joined row holds what the query reads of each side
        columns=tuple(
            Column(lg.joined_name(side.alias, c.name), c.type, True)
            for side, scan in zip((join.left, join.right), scans, strict=True)
            for c in scan.columns
        ),
        watermark_delays=(join.left.watermark_delay_us, join.right.watermark_delay_us),
        algorithm=algorithm,
        algorithm_reason=algorithm_reason,
        backend=backend,
        backend_reason=backend_reason,
        placements=(),
    )
    factorised = None
    if aggregate is not None:
        fields, aggregate_plans = decompose(aggregate.aggregates, argument_types)
        holistic = [a.function.value for a in aggregate_plans if a.holistic]
        if holistic:
            raise PlanError(f"{JOIN_HOLISTIC} ({', '.join(holistic)})")
        if factorise:
            # the factorised planner reads this module's nodes: looked up when a plan is made
            from mangonel.compiler.factorised import factorised_reason

            factorised = factorised_reason(join_exec, aggregate.keys, fields, aggregate_plans)

    def place(step: str) -> Placement:
        return join_placement(step, backend, backend_reason, gpu_join, factorised is not None)

    join_exec = replace(join_exec, placements=(place("join"),))
    top: FilterExec | JoinAggregateExec | WindowJoinExec = join_exec
    if aggregate is not None:
        top = JoinAggregateExec(
            children=(join_exec,),
            keys=aggregate.keys,
            fields=fields,
            aggregates=aggregate_plans,
            placements=tuple(place(step) for step in ("aggregate", "finalize")),
            factorised=factorised,
        )
        if having is not None:
            top = FilterExec((top,), having, (place("filter"),))
    return ProjectExec((top,), root.outputs, (place("project"),))  # type: ignore[arg-type]


def default_windows_per_batch(panes_per_window: int, panes_per_slide: int) -> int:
    """Windows per tree update. A tree batch of n_w windows has n + (n_w - 1) * k leaves
    (n panes per window, k per slide), so building it costs about n / n_w + k leaves per
    window: at least n / k windows per batch keep that near 2k instead of growing with n
    (at s = 100 us, w = 1 s, 100 windows a batch spent ~100 leaf copies per window)."""
    return max(DEFAULT_WINDOWS_PER_BATCH, -(-panes_per_window // panes_per_slide))


# -- placement: which backend runs each step, and why ------------------------------------

# Why a step of a GPU plan runs on the CPU (EXPLAIN prints these after "because").
COUNT_TREE_ON_CPU = "count windows' per-key tuple segments have no GPU tree kernel"
FINALIZE_ON_CPU = "the window values are finalized on the host after their device-to-host copy"


def window_placements(
    window: WindowSpec, backend: str, reason: str, holistic: bool = False
) -> tuple[Placement, ...]:
    """The steps of the window operator: lift, merge, tree, finalize (time windows); lift,
    tree, finalize (count windows: per-tuple partials, no pane merge); then `holistic` when
    the node has holistic aggregates: on the CPU in every plan (a GPU plan's count window
    then runs every step there: its raw values are lifted with the per-tuple partials)."""
    if window.kind is WindowKind.COUNT:
        steps = ("lift", "tree", "finalize")
    else:
        steps = ("lift", "merge", "tree", "finalize")
    if holistic:
        steps = (*steps, "holistic")
    placements = []
    for step in steps:
        if backend == "gpu" and holistic and window.kind is WindowKind.COUNT:
            placements.append(Placement(step, "cpu", COUNT_HOLISTIC_ON_CPU))
        elif backend == "gpu" and step == "holistic":
            placements.append(Placement(step, "cpu", HOLISTIC_ON_CPU))
        elif backend == "gpu" and step == "tree" and window.kind is WindowKind.COUNT:
            placements.append(Placement(step, "cpu", COUNT_TREE_ON_CPU))
        elif backend == "gpu" and step == "finalize":
            placements.append(Placement(step, "cpu", FINALIZE_ON_CPU))
        else:
            placements.append(Placement(step, backend, reason))
    return tuple(placements)


def expression_placement(
    step: str,
    backend: str,
    reason: str,
    expressions: tuple[exp.Expression, ...],
    window: WindowAggregateExec,
) -> Placement:
    """The placement of a Filter or Project step over the window results of `window`: on a
    GPU plan, the GPU unless the generated project kernel cannot evaluate an expression
    (`codegen_project.gpu_unsupported_reason`, e.g. a STRING comparison)."""
    if backend == "gpu":
        # codegen imports this module: the renderer is looked up when a plan is made
        from mangonel.compiler.codegen_project import gpu_unsupported_reason
        from mangonel.compiler.typing import TypeEnv

        env = TypeEnv(
            columns={k.name: k.type for k in window.keys},
            aggregates=tuple(a.result_type for a in window.aggregates),
        )
        unsupported = gpu_unsupported_reason(expressions, env)
        if unsupported is not None:
            return Placement(step, "cpu", unsupported)
    return Placement(step, backend, reason)


def _over_join(node: PhysicalNode) -> bool:
    return any(isinstance(n, WindowJoinExec) for n in walk(node))


def with_backend(
    root: ProjectExec, backend: str, reason: str, gpu_join: bool = True
) -> ProjectExec:
    """The same plan planned for another backend (placements decided again; `gpu_join`:
    a join's steps on the GPU, as `plan`'s option)."""
    factorised = any(
        isinstance(node, JoinAggregateExec) and node.factorised is not None for node in walk(root)
    )

    def rebuild(node: PhysicalNode) -> PhysicalNode:
        children = tuple(rebuild(child) for child in node.children)
        if isinstance(node, WindowAggregateExec):
            placements = window_placements(node.window, backend, reason, node.holistic is not None)
            return replace(
                node,
                children=children,
                backend=backend,
                backend_reason=reason,
                placements=placements,
            )
        if isinstance(node, WindowJoinExec):
            return replace(
                node,
                children=children,
                backend=backend,
                backend_reason=reason,
                placements=(join_placement("join", backend, reason, gpu_join, factorised),),
            )
        if isinstance(node, JoinAggregateExec):
            steps = tuple(
                join_placement(p.step, backend, reason, gpu_join, factorised)
                for p in node.placements
            )
            return replace(node, children=children, placements=steps)
        if isinstance(node, (FilterExec, ProjectExec)) and _over_join(children[0]):
            steps = tuple(
                join_placement(p.step, backend, reason, gpu_join, factorised)
                for p in node.placements
            )
            return replace(node, children=children, placements=steps)
        if isinstance(node, FilterExec):
            window = find(children[0], WindowAggregateExec)
            step = expression_placement("filter", backend, reason, (node.predicate,), window)
            return replace(node, children=children, placements=(step,))
        if isinstance(node, ProjectExec):
            expressions = tuple(o.expression for o in node.outputs)
            window = find(children[0], WindowAggregateExec)
            step = expression_placement("project", backend, reason, expressions, window)
            return replace(node, children=children, placements=(step,))
        return replace(node, children=children) if children else node

    rebuilt = rebuild(root)
    assert isinstance(rebuilt, ProjectExec)
    return rebuilt
