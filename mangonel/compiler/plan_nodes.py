"""The nodes of a physical plan and the helpers that walk them.

A plan is a tree of frozen dataclasses (`children`), each step carrying its `placements`
(backend and reason); EXPLAIN prints the nodes, codegen renders kernels from them, and the
runtime's operator registry maps each node to an operator. The planner that builds them is
`compiler/physical.py`, which re-exports everything here (`physical.WindowAggregateExec`...).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

from sqlglot import exp

from mangonel.aggregates import StateKind
from mangonel.aggregates.python import WindowFunction
from mangonel.catalog.catalog import Column, Stream, Table
from mangonel.catalog.types import ResultType, SqlType
from mangonel.compiler.holistic import (
    HolisticPlan,
)
from mangonel.compiler.logical import (
    AggregateFunction,
    JoinKind,
    OutputColumn,
    WindowKind,
    WindowSpec,
)

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
    result_type: ResultType
    fraction: float | None = None  # p of a percentile (holistic functions only)
    python: WindowFunction | None = None  # the user's function of a PYTHON call
    parameter: float | None = None  # rsd / accuracy of a sketch (APPROX_* functions only)
    # the ps of a percentile over an array of p (result ARRAY<...>, one element per p, all
    # selected from the window's one sort or sketch); None for a single p
    fractions: tuple[float, ...] | None = None
    # an approximate call the planner answers by its exact evaluation over raw values
    # (`Holistic.exact`; `compiler.holistic.percentile_paths`), not by its sketch
    exact: bool = False

    @property
    def evaluation(self) -> str | None:
        """How the holistic step evaluates the call (`Holistic.evaluation`, or its exact
        evaluation where the planner chose that); None for incremental aggregates."""
        holistic = self.function.definition.holistic
        if holistic is None:
            return None
        if self.exact:
            assert holistic.exact is not None
            return holistic.exact
        return holistic.evaluation

    @property
    def sketch(self) -> bool:
        """Whether the call keeps a mergeable sketch per pane (not answered exactly)."""
        holistic = self.function.definition.holistic
        return holistic is not None and holistic.sketch and not self.exact

    @property
    def percentages(self) -> float | tuple[float, ...] | None:
        """What a percentile selects: the ps of an ARRAY (a tuple: one result per p), else
        the one p (None for functions without one)."""
        return self.fractions if self.fractions is not None else self.fraction

    @property
    def call_name(self) -> str:
        """How EXPLAIN and errors name the function: a Python window function by the name
        it was registered under, every other by its SQL name."""
        return self.python.name if self.python is not None else self.function.value

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
    lift, session, finalize for session windows, whose gap is `window.size`; plus `holistic`
    when the node has holistic aggregates).
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
        if self.window.kind is WindowKind.SESSION:
            return "session-merge"
        if self.window.kind is WindowKind.COUNT:
            return "count-panes+tree"
        # CUMULATE: a period's windows share its first pane, a prefix combine (no tree)
        fire = "prefix" if self.window.kind is WindowKind.CUMULATE else "tree"
        if placement(self, "merge").backend == "gpu":
            return f"hash-preaggregate+{fire}"
        return f"pane-preaggregate+{fire}"


@dataclass(frozen=True)
class TableScanExec:
    """A static table, read once as it is when the query starts."""

    table: Table
    columns: tuple[Column, ...]  # only what the query reads, in schema order
    children: tuple[()] = ()


# A stored side is "skewed" when its most frequent key holds more than this many times an
# even share of its rows (top share x distinct keys): the runtime's per-batch choice.
SKEWED_KEYS = 8
AUTO_JOIN_ALGORITHM = (
    "no key statistics before the first batch: hash, built on the smaller side of each window;"
    " then per batch from the join's sampled key statistics: sort-merge while the most"
    f" frequent key holds over {SKEWED_KEYS}x an even share of the rows"
)
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
    emitted: a join without aggregation emits only these joined columns (those its SELECT
    list reads; None: every one of `columns`), see `join_row_columns`.
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
    emitted: tuple[str, ...] | None = None

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
    if node.emitted is not None:
        columns = [(name, t) for name, t in columns if name in node.emitted]
    if node.window is not None:
        columns += [(WINDOW_START, SqlType.TIMESTAMP), (WINDOW_END, SqlType.TIMESTAMP)]
    return tuple(columns)


# The most windows a row may belong to for a join to be joined at the firing: each firing
# visits every stored row of its windows, so a row costs one visit per window (a few ns
# each, whatever its matches), where pairs found at arrival cost once per row plus their
# (row, window) output. Measured on the CPU (200 k rows, 2026-11-26): at 4 windows a row,
# sparse keys (few pairs) 1.5x slower at firing and 1,000 keys 3.3x faster; at 10, 2.8x
# slower and 2.4x faster.
FIRING_WINDOWS_PER_ROW = 4


def rows_at_arrival_reason(node: WindowJoinExec) -> str | None:
    """Why a join without aggregation on the CPU finds its pairs as rows arrive and keeps
    them until their windows fire (`rows=arrival`), instead of joining each window's rows
    of both sides when it fires (`rows=firing`: no pair stored, each pair written once per
    window straight into the output); None: it joins at the firing."""
    if node.window is None:
        return "no window: each stream row is joined when its batch arrives"
    if node.static_side is not None:
        return "a static table side: its rows belong to every window, joined once per stream row"
    windows = -(-node.window.size // node.window.slide)
    if windows > FIRING_WINDOWS_PER_ROW:
        return (
            f"{windows} windows per row (over {FIRING_WINDOWS_PER_ROW}): joined at firing each"
            " stored row is visited once per window, found as rows arrive each pair once"
        )
    if node.kind is not JoinKind.INNER:
        return (
            f"a {node.kind.value.upper()} join flags each kept row matched per window where its"
            " pairs are found, as rows arrive"
        )
    return None


# ---------------------------------------------------------------------------------------
# Planning: logical -> physical
