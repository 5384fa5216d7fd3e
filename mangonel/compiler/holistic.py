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
windows in one launch (`gpu_form`, `windows_per_launch`); count windows keep it on the CPU.

Strategies (EXPLAIN: `holistic=<strategy>`):

- `sorted-panes` (time windows): per (key, pane) the pane's values, sorted once when a window
  first needs the pane; a window's result is a selection over the sorted runs of its panes
  (one run for tumbling windows: an index into it).
- `tuple-runs` (count windows): the key's final tuples in event-time order are kept anyway;
  a window is a contiguous run of them, and its result a selection over a copy of the run
  (the approximate functions build the window's sketch from the run in one pass).
- `sketch-panes` (time windows, the approximate functions: APPROX_COUNT_DISTINCT,
  APPROX_PERCENTILE): per (key, pane) one sketch (HLL++ registers, a GK summary), never the
  raw values; a batch's rows are folded into their panes' sketches on arrival, and each
  firing window merges the sketches of its panes (all windows of a firing in one merge call,
  no tree: a window of k panes costs k register maxima / one k-way GK merge). A query with
  both kinds prints `sorted-panes+sketch-panes`.

`sketch_parameters` names each sketch's parameters for EXPLAIN (`HLL(p=9)`,
`GK(accuracy=10000)`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from mangonel.aggregates import sketches
from mangonel.compiler.logical import WindowKind, WindowSpec

if TYPE_CHECKING:  # physical imports this module
    from mangonel.compiler.physical import AggregatePlan, StateField, WindowAggregateExec

# Count windows keep raw values with their per-tuple partials, lifted on the CPU only.
COUNT_HOLISTIC_ON_CPU = (
    "count windows keep holistic functions' raw values with the per-tuple partials, "
    "which have no GPU lift yet"
)


# The approximate functions' sketches are built and merged by numba kernels only.
SKETCHES_ON_CPU = "approximate aggregates' sketches (HLL++, GK) have no GPU kernels yet"


def holistic_cpu_reason(aggregates: Sequence[AggregatePlan]) -> str | None:
    """Why a GPU plan's holistic step runs on the CPU whatever its window (a Python window
    function, a sketch); None when the GPU's sort and selection kernels can run it."""
    python = [a.python.name for a in aggregates if a.python is not None]
    if python:
        return python_on_cpu(python)
    if any(a.holistic and a.function.definition.holistic.sketch for a in aggregates):
        return SKETCHES_ON_CPU
    return None


def python_on_cpu(names: Sequence[str]) -> str:
    """Why a GPU plan's holistic step with Python window functions runs on the CPU."""
    listed = ", ".join(names)
    return (
        f"Python window function {listed}: compiled with numba for the CPU only "
        "(no GPU evaluation kernel for Python window functions yet)"
    )


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


@dataclass(frozen=True)
class HolisticPlan:
    """How a window node evaluates its holistic aggregates (see the module docstring)."""

    strategy: str  # "sorted-panes", "sketch-panes", both joined by "+", or "tuple-runs"
    fields: tuple[str, ...]  # the `values` state fields the holistic aggregates read
    sketches: tuple[str, ...] = ()  # per approximate aggregate: its sketch and parameters
    # the GPU selection kernel's form (`gpu_form`: a thread, warp or block per window) and the
    # most windows one launch evaluates (GASSER's B_w); None where the step runs on the CPU
    gpu_form: str | None = None
    windows_per_launch: int | None = None

    def describe(self) -> str:
        """EXPLAIN's text: the strategy, and on the GPU its kernel form and batch."""
        if self.gpu_form is None:
            return self.strategy
        return f"{self.strategy}({self.gpu_form}, {self.windows_per_launch} windows/launch)"


def holistic_plan(
    window: WindowSpec,
    fields: Sequence[StateField],
    aggregates: Sequence[AggregatePlan],
    backend: str = "cpu",
    panes_per_window: int = 1,
) -> HolisticPlan | None:
    """The strategy for a window's holistic aggregates; None when it has none. On the GPU
    (time windows) also the selection kernel's form and windows per launch."""
    if not any(a.holistic for a in aggregates):
        return None
    names = tuple(f.name for f in fields if f.kind.holistic)
    holistic = [a for a in aggregates if a.holistic]
    approximate = [a for a in holistic if a.function.definition.holistic.sketch]
    if window.kind is WindowKind.COUNT:
        strategy = "tuple-runs"
    else:
        parts = ["sorted-panes"] if len(approximate) < len(holistic) else []
        strategy = "+".join(parts + (["sketch-panes"] if approximate else []))
    plan = HolisticPlan(strategy, names, tuple(sketch_parameters(a) for a in approximate))
    return for_backend(plan, backend, panes_per_window, holistic_cpu_reason(aggregates))


def for_backend(
    plan: HolisticPlan | None, backend: str, panes_per_window: int, cpu_reason: str | None = None
) -> HolisticPlan | None:
    """The holistic plan for a backend: the GPU kernel's form and batch where the step runs
    on the GPU (`sorted-panes`), none elsewhere (count windows, and the steps
    `holistic_cpu_reason` keeps on the CPU)."""
    if plan is None:
        return None
    if backend != "gpu" or plan.strategy != "sorted-panes" or cpu_reason is not None:
        return replace(plan, gpu_form=None, windows_per_launch=None)
    form = gpu_form(panes_per_window)
    return replace(plan, gpu_form=form, windows_per_launch=windows_per_launch(panes_per_window))


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
