"""Aggregates and their state kinds, one definition each (`builtin`), read by every layer
above: the binder and typing (names, result types), the planner (state fields), codegen
(CUDA fragments), the CPU backend (lift, numba combine), finalize and the Spark glue.

Layer: above `catalog` and `errors`, below `compiler`; imports no compiler or runtime module.
To add an incremental aggregate, add its `StateKind` (if no existing one fits) and its
`Aggregate` to `builtin.py`; holistic ones (whole-window functions) live in `holistic.py`.
The approximate aggregates' sketches (HyperLogLog++, GK quantile summaries) are defined in
`sketches.py`.
"""

from __future__ import annotations

from mangonel.aggregates import builtin as builtin  # registers the built-in definitions
from mangonel.aggregates import holistic as holistic  # MEDIAN, PERCENTILE_*, COUNT DISTINCT
from mangonel.aggregates import python as python  # user window functions written in Python
from mangonel.aggregates import sketches as sketches  # declares the sketch state kinds
from mangonel.aggregates.functions import (
    Aggregate,
    Holistic,
    StateUse,
    aggregate,
    aggregates,
    null_when_empty,
    register_aggregate,
)
from mangonel.aggregates.state import (
    ArrowPartial,
    CudaFragments,
    Layout,
    LiftInput,
    StateKind,
    accumulator_dtype,
    register_state,
    require_fixed,
    state_kind,
    state_kinds,
)

COUNT = builtin.COUNT  # the state kind every aggregate with an argument reads (its count)

__all__ = [
    "COUNT",
    "Aggregate",
    "ArrowPartial",
    "CudaFragments",
    "Holistic",
    "Layout",
    "LiftInput",
    "StateKind",
    "StateUse",
    "accumulator_dtype",
    "aggregate",
    "aggregates",
    "null_when_empty",
    "register_aggregate",
    "register_state",
    "require_fixed",
    "state_kind",
    "state_kinds",
]
