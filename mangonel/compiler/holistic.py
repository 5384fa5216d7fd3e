"""Planning of holistic window functions (MEDIAN, PERCENTILE_*, COUNT DISTINCT): the strategy
the window operator evaluates them with, where that step runs, and the incremental part of a
window node (what the pane-and-tree path computes beside them).

A window aggregation with holistic aggregates is still one `WindowAggregateExec`: its Lift
lifts `values` fields (the raw argument values, `aggregates.holistic.VALUES`) beside the
incremental fields, its `holistic` names the strategy, and its placements hold one more step,
`holistic`. The incremental fields and aggregates run where they would without the holistic
ones (`incremental_part`). The holistic step of a GPU plan runs on the GPU for time windows:
the panes' values are lifted and kept on the host (the `values` state has no CUDA lift), each
pane is sorted once on the device, and a rendered selection kernel evaluates a result chunk's
windows in one launch (`gpu_form`, `windows_per_launch`); a Python window function is
called by a thread per window as a numba CUDA device function (`PYTHON_GPU_FORM`) where the
session's CUDA check found that it compiles (`python_cuda_problem`), else the step runs on
the CPU with numba's reason. Count windows keep it on the CPU.

Strategies (EXPLAIN: `holistic=<strategy>`):

- `sorted-panes` (time windows): per (key, pane) the pane's values, sorted once when a window
  first needs the pane; a window's result is a selection over the sorted runs of its panes
  (one run for tumbling windows: an index into it).
- `tuple-runs` (count windows): the key's final tuples in event-time order are kept anyway;
  a window is a contiguous run of them, and its result a selection over a copy of the run
  (the approximate functions build the window's sketch from the run in one pass).
- `session-runs` (session windows): each tuple's value is kept tagged with its open
  session (re-tagged when sessions merge); a fired session's values are one run, evaluated
  as count windows' runs are.
- `sketch-panes` (time windows, the approximate functions: APPROX_COUNT_DISTINCT,
  APPROX_PERCENTILE): per (key, pane) one sketch (HLL++ registers, a GK summary), never the
  raw values; a batch's rows are folded into their panes' sketches on arrival, and each
  firing window merges the sketches of its panes (all windows of a firing in one merge call;
  HLL windows of 3+ panes read two blocked prefix/suffix sets instead of their k panes:
  `runtime/operators/sketch_panes.py`). HLL sketches run on the GPU in GPU plans; a node with
  a GK summary keeps the step on the CPU (`SKETCHES_ON_CPU`). A query with both kinds prints
  `sorted-panes+sketch-panes`.

`sketch_parameters` names each sketch's parameters for EXPLAIN (`HLL(p=9)`,
`GK(accuracy=10000)`).

APPROX_PERCENTILE has two paths (`percentile_paths`, the one place they are chosen, per call;
EXPLAIN `approx_percentile=[...]` with the reason): its GK sketch, or exact, PERCENTILE_DISC's
selection over the raw values (`AggregatePlan.exact`; rank error 0, so within any accuracy's
bound) on the raw-value strategy of the window kind, on the GPU where the node's other calls
allow. The session's `approx_percentile` option forces one; "auto" is the rule at
EXACT_FROM_ACCURACY.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from mangonel.aggregates import sketches
from mangonel.aggregates.python import WindowFunction, values_dtype
from mangonel.catalog.types import SqlType
from mangonel.compiler.logical import WindowKind, WindowSpec
from mangonel.compiler.options import HOLISTIC_GPU_FORMS, TuningOptions
from mangonel.errors import PlanError

if TYPE_CHECKING:  # physical imports this module
    from mangonel.compiler.physical import AggregatePlan, StateField, WindowAggregateExec

# Count windows keep raw values with their per-tuple partials, lifted on the CPU only.
COUNT_HOLISTIC_ON_CPU = (
    "count windows keep holistic functions' raw values with the per-tuple partials, "
    "which have no GPU lift yet"
)


# APPROX_COUNT_DISTINCT's HLL registers are updated, merged and counted on the GPU
# (runtime/gpu/sketches.py); APPROX_PERCENTILE's GK summary is built by a sort and a greedy
# sequential COMPRESS and merged by a k-way merge per (window, key) with a second COMPRESS:
# no device form yet, so a node with one runs its holistic step (every holistic aggregate of
# the node, HLL included) on the CPU.
SKETCHES_ON_CPU = (
    "APPROX_PERCENTILE's GK summaries have no GPU kernels (sequential COMPRESS and "
    "variable-size merges); the node's holistic step stays with them"
)


def holistic_cpu_reason(
    aggregates: Sequence[AggregatePlan], fields: Sequence[StateField] = ()
) -> str | None:
    """Why a GPU plan's holistic step runs on the CPU whatever its window (a Python window
    function that does not compile for CUDA, a sketch); None when the GPU's kernels can run
    it. `fields`: the node's state fields (a Python function's values dtype is its field's)."""
    types = {f.name: f.type for f in fields}
    python = []
    for aggregate in aggregates:
        if aggregate.python is None:
            continue
        value_type = types.get(aggregate.value_field or "")
        problem = python_cuda_problem(aggregate.python, value_type)
        if problem is not None:
            python.append(f"the function {aggregate.python.name} {problem}")
    if python:
        return "; ".join(python)
    # an APPROX_PERCENTILE answered exactly selects like PERCENTILE_DISC, on either backend
    if any(a.evaluation == "approx_percentile" for a in aggregates):
        return SKETCHES_ON_CPU
    return None


def python_cuda_problem(function: WindowFunction, value_type: SqlType | None) -> str | None:
    """What keeps a Python window function off the GPU for values of `value_type`: numba's
    CUDA reason recorded when the GPU plan was made (`WindowFunction.cuda`), or that no check
    ran (a plan re-placed without the session's CUDA check); None when it compiles."""
    if value_type is None:
        return "was not checked for CUDA (its argument's type is unknown)"
    dtype = values_dtype(value_type).name
    if dtype not in function.cuda:
        return (
            f"was not checked for CUDA for {dtype} values "
            "(the plan was made without the session's CUDA check)"
        )
    reason = function.cuda[dtype]
    return None if reason is None else f"does not compile for CUDA: {reason}"


JOIN_HOLISTIC = "holistic functions over joins: not yet"


# Runs (result rows x panes per window) per evaluation of a result chunk: the rows of one
# selection launch (x 16 bytes of run bounds on the device or the host).
MAX_RUNS = 1 << 22
# Windows of fewer panes than WARP_PANES get a thread each on the GPU (a tumbling window reads
# its one sorted run in place); larger ones a warp, whose lanes split the window's runs; from
# BLOCK_PANES panes a block (128 threads: a warp's lanes would each search 8 runs or more).
WARP_PANES = 8
BLOCK_PANES = 256


def gpu_form(panes_per_window: int) -> str:
    """The GPU selection kernel's form for windows of that many panes."""
    if panes_per_window < WARP_PANES:
        return "thread-per-window"
    return "warp-per-window" if panes_per_window < BLOCK_PANES else "block-per-window"


def gpu_forms_to_try(panes_per_window: int, planned: str | None = None) -> tuple[str, ...]:
    """The GPU selection forms the online tuner may try for windows of that many panes, in
    `HOLISTIC_GPU_FORMS` order: the `planned` one (by default `gpu_form`'s) and any other
    whose band of panes lies within a factor of two of the window's. Farther off, a form is
    several times slower (windows of 100 panes: a thread per window 5.5x the warp's cost, a
    block 6x; H100 and H200, 2026-12-06, docs/performance/holistic-gpu.md), and every step the tuner
    tries it on costs the stream a whole firing at that cost."""
    bands = {
        "thread-per-window": panes_per_window < 2 * WARP_PANES,
        "warp-per-window": WARP_PANES // 2 <= panes_per_window < 2 * BLOCK_PANES,
        "block-per-window": panes_per_window >= BLOCK_PANES // 2,
    }
    planned = planned or gpu_form(panes_per_window)
    return tuple(form for form in HOLISTIC_GPU_FORMS if bands[form] or form == planned)


@dataclass(frozen=True)
class HolisticPlan:
    """How a window node evaluates its holistic aggregates (see the module docstring)."""

    strategy: str  # "sorted-panes", "sketch-panes" (both joined by "+"), "tuple-runs",
    # "session-runs"
    fields: tuple[str, ...]  # the `values` state fields the holistic aggregates read
    sketches: tuple[str, ...] = ()  # per approximate aggregate: its sketch and parameters
    # the GPU selection kernel's form (`gpu_form`: a thread, warp or block per window) and the
    # most windows one launch evaluates (GASSER's B_w); None where the step runs on the CPU
    gpu_form: str | None = None
    windows_per_launch: int | None = None
    # the online auto-tuner (`runtime.operators.tuner`, `options.TuningOptions`): "online"
    # tunes the firing's windows per launch (and the GPU form) from measured cost, starting
    # at the values above; "off" keeps them. `fixed` holds the knobs the user pinned, by name
    # (`windows_per_launch`, `gpu_form`), with their values: those are never tuned.
    tuning: str = "online"
    fixed: tuple[tuple[str, int | str], ...] = ()
    # the Python window functions it calls: on the GPU each is a numba CUDA device function
    # called by a thread per window over the window's merged runs (`PYTHON_GPU_FORM`)
    python: tuple[str, ...] = ()
    # per APPROX_PERCENTILE call (its position among the node's aggregates): why it is
    # answered exactly or by its sketch (`percentile_paths`; EXPLAIN's approx_percentile=)
    percentile_reasons: tuple[tuple[int, str], ...] = ()

    def describe(self) -> str:
        """EXPLAIN's text: the strategy, on the GPU its kernel form and batch (and how it
        calls Python functions), a fixed batch on the CPU, and the tuning when it is not the
        default (online, nothing pinned)."""
        parts = []
        if self.gpu_form is not None:
            parts += [self.gpu_form, f"{self.windows_per_launch} windows/launch"]
            if self.python:
                parts.append(f"python {PYTHON_GPU_FORM}")
        elif self.windows_per_launch is not None:
            parts.append(f"{self.windows_per_launch} windows/chunk")
        if self.tuning == "off":
            parts.append("tuning=off")
        elif self.fixed:
            parts.append("fixed=" + "+".join(name for name, _ in self.fixed))
        return f"{self.strategy}({', '.join(parts)})" if parts else self.strategy

    def tunes(self) -> bool:
        """Whether the firing's knobs are tuned online (raw values of time windows only:
        count windows and sketches alone have no selection to tune)."""
        return self.tuning == "online" and "sorted-panes" in self.strategy.split("+")


# How the GPU evaluates a Python window function (runtime/gpu/python_window.py): a thread
# per window merges its panes' sorted runs, then calls the user's device function on them.
PYTHON_GPU_FORM = "thread-per-window"


def holistic_plan(
    window: WindowSpec,
    fields: Sequence[StateField],
    aggregates: Sequence[AggregatePlan],
    backend: str = "cpu",
    panes_per_window: int = 1,
    tuning: TuningOptions | None = None,
    percentile_reasons: tuple[tuple[int, str], ...] = (),
) -> HolisticPlan | None:
    """The strategy for a window's holistic aggregates; None when it has none. On the GPU
    (time windows) also the selection kernel's form and windows per launch; `tuning` the
    auto-tuner's mode and the knobs the user fixed; `percentile_reasons` why each
    APPROX_PERCENTILE call takes its path (`percentile_paths`, which chose it)."""
    if not any(a.holistic for a in aggregates):
        return None
    if window.kind is WindowKind.CUMULATE:
        # the holistic drivers keep values per pane for sliding windows' geometry
        raise PlanError(
            "holistic, approximate and Python window functions ("
            + ", ".join(a.call_name for a in aggregates if a.holistic)
            + ") do not run over CUMULATE windows yet; use the incremental aggregates "
            "(COUNT, SUM, MIN, MAX, AVG, VAR_*, STDDEV_*, BOOL_*)"
        )
    names = tuple(f.name for f in fields if f.kind.holistic)
    holistic = [a for a in aggregates if a.holistic]
    approximate = [a for a in holistic if a.sketch]
    if window.kind is WindowKind.COUNT:
        strategy = "tuple-runs"
    elif window.kind is WindowKind.SESSION:
        strategy = "session-runs"
    else:
        parts = ["sorted-panes"] if len(approximate) < len(holistic) else []
        strategy = "+".join(parts + (["sketch-panes"] if approximate else []))
    tuning = tuning or TuningOptions()
    fixed: list[tuple[str, int | str]] = []
    if tuning.windows_per_launch is not None:
        fixed.append(("windows_per_launch", tuning.windows_per_launch))
    if tuning.gpu_form is not None:
        fixed.append(("gpu_form", tuning.gpu_form))
    python = tuple(a.python.name for a in holistic if a.python is not None)
    plan = HolisticPlan(
        strategy,
        names,
        tuple(sketch_parameters(a) for a in approximate),
        tuning=tuning.mode,
        fixed=tuple(fixed),
        python=python,
        percentile_reasons=percentile_reasons,
    )
    return for_backend(plan, backend, panes_per_window, holistic_cpu_reason(aggregates, fields))


# APPROX_PERCENTILE's two paths (`percentile_paths`), chosen per call by the session's
# `approx_percentile` option: "auto" (the rule below), "exact" or "sketch" (forced).
APPROX_PERCENTILE_PATHS = ("auto", "exact", "sketch")
# "auto" answers exactly from this accuracy up. A pane's GK summary keeps every value (24
# bytes a sample against 8 for a raw value) until its key holds about 1.5 x accuracy values
# in the pane (Spark's COMPRESS merges nothing below 2 eps n = 3), and a window's answer then
# merges its panes' summaries: ~all of its values, the slow way. The exact path sorts each
# pane once and selects (PERCENTILE_DISC: rank error 0). Measured (docs/performance/sketches.md,
# "APPROX_PERCENTILE by exact selection"): from this accuracy exact was 3.4-27x faster in
# every shape; at 100 the sketch won (1.7x faster, 1/14 of the state) where a key held 100x
# the accuracy in a pane. Below it the sketch keeps its memory bound (raw values grow with
# the rate, which the planner does not know).
EXACT_FROM_ACCURACY = 1000


def check_percentile_path(option: str | None) -> str:
    """The `approx_percentile` option ("auto" for None), checked."""
    option = "auto" if option is None else option
    if option not in APPROX_PERCENTILE_PATHS:
        raise PlanError(
            f"unknown approx_percentile path {option!r}",
            hint="choose "
            + ", ".join(repr(p) for p in APPROX_PERCENTILE_PATHS)
            + " ('auto': exact selection from accuracy "
            + f"{EXACT_FROM_ACCURACY}, the GK sketch below it)",
        )
    return option


def percentile_paths(
    window: WindowSpec, aggregates: Sequence[AggregatePlan], option: str | None = None
) -> tuple[tuple[AggregatePlan, ...], tuple[tuple[int, str], ...]]:
    """Each APPROX_PERCENTILE call answered exactly (`AggregatePlan.exact`: PERCENTILE_DISC
    over the raw values, rank error 0) or by its GK sketch, and why, by position: the
    `approx_percentile` option's path when forced, else exact where the raw values are kept
    anyway (count and session windows keep every tuple's value; an exact aggregate over the
    same argument keeps its panes' values) or the accuracy is EXACT_FROM_ACCURACY or more,
    the sketch otherwise. The one place the choice is made; EXPLAIN prints the reasons."""
    option = check_percentile_path(option)
    choosable = [
        i
        for i, a in enumerate(aggregates)
        if a.holistic and a.function.definition.holistic.exact is not None
    ]
    if not choosable:
        return tuple(aggregates), ()
    reasons: dict[int, tuple[bool, str]] = {}
    for position in choosable:
        accuracy = int(sketch_parameter(aggregates[position]))
        if option != "auto":
            reasons[position] = (option == "exact", f"the approx_percentile='{option}' option")
        elif window.kind in (WindowKind.COUNT, WindowKind.SESSION):
            kind = "count" if window.kind is WindowKind.COUNT else "session"
            reasons[position] = (
                True,
                f"{kind} windows keep every tuple's value anyway: selecting over the "
                "window's run reads them, a sketch would be built from them",
            )
        elif accuracy >= EXACT_FROM_ACCURACY:
            reasons[position] = (
                True,
                f"accuracy {accuracy} >= {EXACT_FROM_ACCURACY}: a pane's summary keeps all of "
                f"a key's values up to ~{accuracy * 3 // 2}, so raw values cost no more "
                "and select faster than summaries merge",
            )
        else:
            reasons[position] = (
                False,
                f"accuracy {accuracy} < {EXACT_FROM_ACCURACY}: the summary bounds a pane's "
                "memory where raw values grow with the rate",
            )
    if option == "auto":
        # the raw values of an argument some call keeps anyway serve its sketched calls too
        keeping: dict[str | None, str] = {}  # argument field -> a call keeping its values
        for position, a in enumerate(aggregates):
            if position in reasons:
                keeps = reasons[position][0]
            else:  # MEDIAN, PERCENTILE_*, COUNT(DISTINCT), Python functions: raw values
                keeps = a.holistic and not a.function.definition.holistic.sketch
            if keeps:
                keeping.setdefault(a.value_field, a.call_name)
        for position in choosable:
            field = aggregates[position].value_field
            if not reasons[position][0] and field in keeping:
                reasons[position] = (
                    True,
                    f"the raw values of its argument are kept anyway for {keeping[field]}",
                )
    chosen = [
        replace(a, exact=reasons[i][0]) if i in reasons else a for i, a in enumerate(aggregates)
    ]
    return tuple(chosen), tuple((i, reasons[i][1]) for i in choosable)


def for_backend(
    plan: HolisticPlan | None, backend: str, panes_per_window: int, cpu_reason: str | None = None
) -> HolisticPlan | None:
    """The holistic plan for a backend: the GPU selection kernel's form and batch where the
    step runs on the GPU over raw values (`sorted-panes`, also beside HLL sketches), none
    elsewhere (count windows, sketches alone, and the steps `holistic_cpu_reason` keeps on
    the CPU)."""
    if plan is None:
        return None
    fixed = dict(plan.fixed)
    chunk = fixed.get("windows_per_launch")
    if plan.strategy == "tuple-runs":  # count windows: one run per window, no chunks
        chunk = None
    selects = "sorted-panes" in plan.strategy.split("+")  # raw values beside any sketches
    if backend != "gpu" or not selects or cpu_reason is not None:
        return replace(plan, gpu_form=None, windows_per_launch=chunk)
    form = str(fixed.get("gpu_form", gpu_form(panes_per_window)))
    launch = windows_per_launch(panes_per_window) if chunk is None else int(chunk)
    return replace(plan, gpu_form=form, windows_per_launch=launch)


def windows_per_launch(panes_per_window: int) -> int:
    """Result rows evaluated together (one selection launch on the GPU): MAX_RUNS runs."""
    return max(1, MAX_RUNS // panes_per_window)


def sketch_parameters(aggregate: AggregatePlan) -> str:
    """`HLL(p=9)` or `GK(accuracy=10000)`: an approximate aggregate's sketch for EXPLAIN."""
    if aggregate.function.definition.holistic.evaluation == "approx_count_distinct":
        return f"HLL(p={hll_precision(aggregate)})"
    return f"GK(accuracy={quantile_accuracy(aggregate)})"


def sketch_parameter(aggregate: AggregatePlan) -> float:
    """The rsd of an APPROX_COUNT_DISTINCT call, the accuracy of an APPROX_PERCENTILE call:
    the call's, else the default (a plan built without the binder may leave it unset)."""
    if aggregate.parameter is not None:
        return aggregate.parameter
    if aggregate.function.definition.holistic.evaluation == "approx_count_distinct":
        return sketches.HLL_DEFAULT_RSD
    return float(sketches.QUANTILE_DEFAULT_ACCURACY)


def hll_precision(aggregate: AggregatePlan) -> int:
    """Index bits p of an APPROX_COUNT_DISTINCT call (from its rsd)."""
    return sketches.hll_precision(sketch_parameter(aggregate))


def quantile_accuracy(aggregate: AggregatePlan) -> int:
    """The accuracy of an APPROX_PERCENTILE call (eps = 1 / accuracy)."""
    return int(sketch_parameter(aggregate))


def incremental_part(node: WindowAggregateExec) -> WindowAggregateExec:
    """The window node without its holistic fields, aggregates and step: what the
    pane-and-tree path (and its GPU kernels) computes. The node itself when it has none.
    Aggregates keep their relative order; `holistic_positions` maps them back."""
    if node.holistic is None:
        return node
    lift = node.lift
    lift = replace(lift, fields=tuple(f for f in lift.fields if not f.kind.holistic))
    return replace(
        node,
        children=(lift,),
        aggregates=tuple(a for a in node.aggregates if not a.holistic),
        placements=tuple(p for p in node.placements if p.step != "holistic"),
        holistic=None,
    )


def holistic_positions(node: WindowAggregateExec) -> tuple[list[int], list[int]]:
    """(positions of the incremental aggregates, positions of the holistic ones) in the
    node's aggregate list."""
    incremental = [i for i, a in enumerate(node.aggregates) if not a.holistic]
    holistic = [i for i, a in enumerate(node.aggregates) if a.holistic]
    return incremental, holistic


def timed_fields(node: WindowAggregateExec) -> set[str]:
    """The `values` fields whose values' event times are kept too: those a Python window
    function registered `with_timestamps` reads."""
    return {
        plan.value_field
        for plan in node.aggregates
        if plan.python is not None and plan.python.with_timestamps
    }
