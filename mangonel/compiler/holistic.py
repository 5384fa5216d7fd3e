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
  a window is a contiguous run of them, and its result a selection over a copy of the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from mangonel.compiler.logical import WindowKind, WindowSpec

if TYPE_CHECKING:  # physical imports this module
    from mangonel.compiler.physical import AggregatePlan, StateField, WindowAggregateExec

# Count windows keep raw values with their per-tuple partials, lifted on the CPU only.
COUNT_HOLISTIC_ON_CPU = (
    "count windows keep holistic functions' raw values with the per-tuple partials, "
    "which have no GPU lift yet"
)
SPARK_HOLISTIC = "holistic functions inside Spark: not yet"
SPARK_PYTHON = "Python window functions inside Spark: not yet (the standalone Session runs them)"


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

    strategy: str  # "sorted-panes" or "tuple-runs"
    fields: tuple[str, ...]  # the `values` state fields the holistic aggregates read
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
    strategy = "tuple-runs" if window.kind is WindowKind.COUNT else "sorted-panes"
    return for_backend(HolisticPlan(strategy, names), backend, panes_per_window)


def for_backend(
    plan: HolisticPlan | None, backend: str, panes_per_window: int
) -> HolisticPlan | None:
    """The holistic plan for a backend: the GPU kernel's form and batch where the step runs
    on the GPU (`sorted-panes`), none elsewhere (count windows keep it on the CPU)."""
    if plan is None:
        return None
    if backend != "gpu" or plan.strategy != "sorted-panes":
        return replace(plan, gpu_form=None, windows_per_launch=None)
    form = gpu_form(panes_per_window)
    return replace(plan, gpu_form=form, windows_per_launch=windows_per_launch(panes_per_window))


def windows_per_launch(panes_per_window: int) -> int:
    """Result rows evaluated together (one selection launch on the GPU): MAX_RUNS runs."""
    return max(1, MAX_RUNS // panes_per_window)


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
