"""The physical planner: a logical plan in, a tree of plan nodes (`plan_nodes.py`, all
re-exported here) out, every parameter explicit and every step placed (backend and reason).

A window query plans to Project <- [Filter (HAVING)] <- WindowAggregate <- Lift <- StreamScan;
a join query to Project <- [Filter] <- [JoinAggregate] <- WindowJoin <- two scans (`plan_join`;
a factorised JoinAggregate's sides are window aggregations, `compiler/factorised.py`).
Aggregates are decomposed into state fields with lift / combine / finalize (SPRINGALD's
pane partials): panes are gcd(range, slide) long, so every tuple of one pane belongs to the
same windows and a pane can be pre-aggregated before any window is known.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TypeVar

import numpy as np
from sqlglot import exp

from mangonel.aggregates import COUNT, StateKind, require_fixed
from mangonel.catalog.catalog import Column
from mangonel.catalog.types import SqlType
from mangonel.compiler import logical as lg
from mangonel.compiler.holistic import (
    COUNT_HOLISTIC_ON_CPU,
    JOIN_HOLISTIC,
    for_backend,
    holistic_cpu_reason,
    holistic_plan,
    percentile_paths,
)
from mangonel.compiler.logical import (
    WindowKind,
    WindowSpec,
)
from mangonel.compiler.options import TuningOptions
from mangonel.compiler.plan_nodes import (
    AGGREGATE_PREFIX,
    AUTO_JOIN_ALGORITHM,
    DEFAULT_WINDOWS_PER_BATCH,
    FIRING_WINDOWS_PER_ROW,
    JOIN_ALGORITHMS,
    SCAN_TYPES,
    SKEWED_KEYS,
    WINDOW_END,
    WINDOW_START,
    AggregatePlan,
    FilterExec,
    JoinAggregateExec,
    LiftExec,
    PhysicalNode,
    Placement,
    ProjectExec,
    StateField,
    StreamScanExec,
    TableScanExec,
    WindowAggregateExec,
    WindowJoinExec,
    aggregate_column,
    children,
    find,
    join_row_columns,
    placement,
    plan_backend,
    result_columns,
    rows_at_arrival_reason,
    walk,
    window_result_columns,
)
from mangonel.errors import PlanError

# The plan nodes and their helpers live in plan_nodes.py; callers read them from here too.
__all__ = [
    "AGGREGATE_PREFIX",
    "AUTO_JOIN_ALGORITHM",
    "AggregatePlan",
    "DEFAULT_WINDOWS_PER_BATCH",
    "FilterExec",
    "JOIN_ALGORITHMS",
    "JoinAggregateExec",
    "LiftExec",
    "PhysicalNode",
    "Placement",
    "ProjectExec",
    "SCAN_TYPES",
    "SKEWED_KEYS",
    "FIRING_WINDOWS_PER_ROW",
    "StateField",
    "StreamScanExec",
    "TableScanExec",
    "WINDOW_END",
    "WINDOW_START",
    "WindowAggregateExec",
    "WindowJoinExec",
    "aggregate_column",
    "children",
    "find",
    "join_row_columns",
    "rows_at_arrival_reason",
    "placement",
    "plan_backend",
    "result_columns",
    "walk",
    "window_result_columns",
]


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
            AggregatePlan(
                function,
                argument,
                count,
                value,
                aggregate.result_type,
                fraction,
                python=aggregate.python,
                parameter=aggregate.parameter,
                fractions=aggregate.fractions,
            )
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
    tuning: TuningOptions | None = None,
    approx_percentile: str | None = None,
) -> ProjectExec:
    """Turn the logical plan of a window query into its physical plan. `join_algorithm`
    ("hash", "sort-merge"; None or "auto": the planner's choice) and `gpu_join` (place the
    join on the GPU in GPU plans) and `join_factorised` (factorised aggregation where it
    applies, `factorised.factorised_reason`) apply to join queries; `tuning` to holistic
    aggregates (the online auto-tuner's mode and fixed knobs); `approx_percentile` ("auto",
    "exact", "sketch") to APPROX_PERCENTILE's path (`holistic.percentile_paths`)."""
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
    aggregate_plans, percentile_reasons = percentile_paths(
        aggregate.window, aggregate_plans, approx_percentile
    )
    pane_length, panes_per_window, panes_per_slide = window_parameters(aggregate.window)
    scan_exec = StreamScanExec(scan.stream, scan.columns)
    lift = LiftExec((scan_exec,), where, aggregate.keys, fields)
    holistic = holistic_plan(
        aggregate.window,
        fields,
        aggregate_plans,
        backend,
        panes_per_window,
        tuning,
        percentile_reasons,
    )
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
            aggregate.window,
            backend,
            backend_reason,
            holistic is not None,
            holistic_cpu_reason(aggregate_plans, fields),
            device_finalize(aggregate_plans),
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
        holistic = [a.call_name for a in aggregate_plans if a.holistic]
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
    else:  # joined rows: emit only the joined columns the SELECT list reads
        read = {c.name for o in root.outputs for c in o.expression.find_all(exp.Column)}
        emitted = tuple(c.name for c in join_exec.columns if c.name in read)
        # a batch needs a column to carry its row count (no window bounds without a window)
        emitted = emitted or (join_exec.columns[0].name,)
        top = join_exec = replace(join_exec, emitted=emitted)
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
SESSION_HOLISTIC_ON_CPU = (
    "session windows with holistic aggregates run on the cpu: each tuple's value follows its "
    "session through merges on the host, which has no GPU kernel yet"
)
FINALIZE_ON_CPU = "the window values are finalized on the host after their device-to-host copy"


def device_finalize(plans: tuple[AggregatePlan, ...]) -> bool:
    """Whether a GPU time window finalizes its fired cells on the device: every incremental
    aggregate has a `cuda_finalize` (holistic ones are finalized by the holistic step)."""
    return all(p.holistic or p.function.definition.cuda_finalize is not None for p in plans)


def window_placements(
    window: WindowSpec,
    backend: str,
    reason: str,
    holistic: bool = False,
    holistic_cpu: str | None = None,
    finalize_on_device: bool = False,
) -> tuple[Placement, ...]:
    """The steps of the window operator: lift, merge, tree, finalize (time windows); lift,
    tree, finalize (count windows: per-tuple partials, no pane merge); then `holistic` when
    the node has holistic aggregates: where the plan runs for time windows (the GPU's sort
    and selection kernels, `runtime.gpu.holistic`), on the CPU for count windows (a GPU
    plan's count window then runs every step there: its raw values are lifted with the
    per-tuple partials). `holistic_cpu`: why a GPU plan's holistic step runs on the CPU
    whatever the window (`holistic.holistic_cpu_reason`: Python window functions, sketches).
    `finalize_on_device` (`device_finalize`): a GPU time window's finalize runs on the GPU
    (the generated finalize kernel, `gpu.state.GpuPaneState.fire`); else on the host after
    the cells' copy (count and CUMULATE windows, factorised join sides, aggregates without
    one)."""
    if window.kind is WindowKind.SESSION:
        # a GPU plan lifts and forms each batch's sessions on the device (`gpu/sessions.py`)
        # and finalizes the fired ones on the host, where the open sessions are kept; with
        # holistic aggregates every step runs on the cpu (the values are re-tagged there, so
        # lifting them on the device would only add a copy)
        steps = ("lift", "session", "finalize", *(("holistic",) if holistic else ()))
        if backend != "gpu":
            return tuple(Placement(step, backend, reason) for step in steps)
        if holistic:
            return tuple(Placement(step, "cpu", SESSION_HOLISTIC_ON_CPU) for step in steps)
        return (
            Placement("lift", backend, reason),
            Placement("session", backend, reason),
            Placement("finalize", "cpu", FINALIZE_ON_CPU),
        )
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
        elif backend == "gpu" and step == "holistic" and holistic_cpu is not None:
            placements.append(Placement(step, "cpu", holistic_cpu))
        elif backend == "gpu" and step == "tree" and window.kind is WindowKind.COUNT:
            placements.append(Placement(step, "cpu", COUNT_TREE_ON_CPU))
        elif (
            backend == "gpu"
            and step == "finalize"
            and (window.kind is not WindowKind.TIME or not finalize_on_device)
        ):
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


NodeT = TypeVar("NodeT", bound=PhysicalNode)


def with_backend(root: NodeT, backend: str, reason: str, gpu_join: bool = True) -> NodeT:
    """The same plan (or subtree: Spark's stage 1 replans its window node alone) planned for
    another backend (placements decided again; `gpu_join`: a join's steps on the GPU, as
    `plan`'s option)."""
    factorised = any(
        isinstance(node, JoinAggregateExec) and node.factorised is not None for node in walk(root)
    )

    def rebuild(node: PhysicalNode) -> PhysicalNode:
        children = tuple(rebuild(child) for child in node.children)
        if isinstance(node, WindowAggregateExec):
            placements = window_placements(
                node.window,
                backend,
                reason,
                node.holistic is not None,
                holistic_cpu_reason(node.aggregates, node.fields),
                device_finalize(node.aggregates),
            )
            return replace(
                node,
                children=children,
                backend=backend,
                backend_reason=reason,
                placements=placements,
                holistic=for_backend(
                    node.holistic,
                    backend,
                    node.panes_per_window,
                    holistic_cpu_reason(node.aggregates, node.fields),
                ),
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
    assert type(rebuilt) is type(root)
    return rebuilt
