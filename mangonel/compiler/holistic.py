"""Planning of holistic window functions (MEDIAN, PERCENTILE_*, COUNT DISTINCT): the strategy
the window operator evaluates them with, where that step runs, and the incremental part of a
window node (what the pane-and-tree path computes beside them).

A window aggregation with holistic aggregates is still one `WindowAggregateExec`: its Lift
lifts `values` fields (the raw argument values, `aggregates.holistic.VALUES`) beside the
incremental fields, its `holistic` names the strategy, and its placements hold one more step,
`holistic`. The incremental fields and aggregates run where they would without the holistic
ones (`incremental_part`); the holistic step runs on the CPU in every plan for now.

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

# Why the holistic step of a GPU plan runs on the CPU (EXPLAIN prints it after "because").
HOLISTIC_ON_CPU = "no GPU kernels for holistic functions yet"
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


@dataclass(frozen=True)
class HolisticPlan:
    """How a window node evaluates its holistic aggregates (see the module docstring)."""

    strategy: str  # "sorted-panes" or "tuple-runs"
    fields: tuple[str, ...]  # the `values` state fields the holistic aggregates read


def holistic_plan(
    window: WindowSpec, fields: Sequence[StateField], aggregates: Sequence[AggregatePlan]
) -> HolisticPlan | None:
    """The strategy for a window's holistic aggregates; None when it has none."""
    if not any(a.holistic for a in aggregates):
        return None
    names = tuple(f.name for f in fields if f.kind.holistic)
    strategy = "tuple-runs" if window.kind is WindowKind.COUNT else "sorted-panes"
    return HolisticPlan(strategy, names)


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
