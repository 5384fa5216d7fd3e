"""Aggregate functions: what a SQL aggregate call means, defined once per function.

An `Aggregate` (registered with `register_aggregate`; the built-in ones live in
`aggregates.builtin`) says:

- its SQL names (`names`; aliases included, e.g. VARIANCE for VAR_SAMP) and the sqlglot
  expression classes the parser builds for them (`sqlglot_classes`); `parse_names` are the
  names sqlglot itself does not build one of those classes for (EVERY, ANY, SOME), which the
  mangonel parser maps to `sqlglot_classes[0]`;
- typing: `result_type(argument_type)` (Spark's rules; None: the argument type is refused,
  and `accepts` says what it takes, for the error);
- its state: every aggregate with an argument reads the non-NULL count of the argument (a
  COUNT state field, shared); `state` adds one more field (kind + accumulator type rule),
  None for COUNT;
- `finalize(xp, count, value, result_type) -> (values, null mask or None)`: the result from
  the selected cells, array-generic (`xp` is numpy, or CuPy on a device); `cuda_finalize`
  is the same rule as C (`CudaFinalize`) for the GPU's generated finalize kernel;
- `holistic` (MEDIAN, PERCENTILE_*, COUNT DISTINCT, `aggregates.holistic`): the function
  reads the raw values of its window (a `Layout.VARIABLE` state kind) and `finalize` gets,
  per result cell, the value its `Holistic` evaluation selected, not a combined partial;
- `spark(argument_sql, result_type) -> str`: the Spark SQL call of the aggregate (the native
  plan and the generated SQL use it; `spark_name` is Spark's function name).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mangonel.aggregates.state import StateKind
from mangonel.catalog.types import SqlType

Array = Any  # numpy.ndarray or cupy.ndarray
Finalize = Callable[[Any, Array, "tuple[Array, ...] | None", SqlType], "tuple[Array, Array | None]"]


@dataclass(frozen=True)
class Holistic:
    """How a holistic aggregate reads the sorted non-NULL values of its window.

    evaluation: "percentile_cont" (linear interpolation at p * (n - 1)), "percentile_disc"
    (sorted[max(ceil(p * n) - 1, 0)]), "count_distinct", "python" (a user's Python window
    function over the sorted values, `aggregates.python`), or one of the sketches
    (`aggregates.sketches`): "approx_count_distinct" (HLL++ registers per pane),
    "approx_percentile" (a GK summary per pane). fraction: p when the function fixes it
    (MEDIAN: 0.5); None when the call gives it (PERCENTILE_CONT(p), PERCENTILE(x, p),
    APPROX_PERCENTILE(x, p)) or it has none (the distinct counts, Python functions).
    exact: for a sketch, the exact evaluation over the raw values whose answer meets the
    sketch's error bound with no error (APPROX_PERCENTILE: "percentile_disc", which is also
    Spark's answer wherever its summary keeps every value); the planner may answer the call
    with it instead (`compiler.holistic.percentile_paths`). None: the sketch only."""

    evaluation: str
    fraction: float | None = None
    exact: str | None = None

    @property
    def takes_fraction(self) -> bool:
        takes = self.evaluation.startswith("percentile") or self.evaluation == "approx_percentile"
        return takes and self.fraction is None

    @property
    def sketch(self) -> bool:
        """Whether the function keeps a mergeable sketch per pane, not the raw values."""
        return self.evaluation.startswith("approx_")


@dataclass(frozen=True)
class CudaFinalize:
    """An aggregate's `finalize` as C statements for one result cell, formatted with `{out}`
    (the result, of C type `ctype`; None: the value field's storage type), `{null}` (bool:
    the result is NULL), `{count}` (the count field, long long) and `{v0}`, `{v1}`, ... (the
    value field's parts). The value of a NULL result is never read."""

    code: str
    ctype: str | None = None


@dataclass(frozen=True)
class StateUse:
    """One state field an aggregate reads besides its count: the kind, and the accumulator
    type from the argument type (SUM of INT accumulates in BIGINT)."""

    kind: StateKind
    accumulator: Callable[[SqlType], SqlType]


@dataclass(frozen=True, eq=False)
class Aggregate:
    """One aggregate function (see the module docstring). `key` names the member of the
    derived `logical.AggregateFunction` enum; `display` is its value (how EXPLAIN and
    errors spell the function)."""

    key: str
    display: str
    names: tuple[str, ...]
    sqlglot_classes: tuple[type, ...]
    result_type: Callable[[SqlType | None], SqlType | None]
    accepts: str
    state: StateUse | None
    finalize: Finalize
    spark_name: str
    spark: Callable[[str, SqlType], str] | None = None
    parse_names: tuple[str, ...] = ()
    takes_argument: bool = True  # False only for COUNT(*)
    # holistic functions (MEDIAN, percentiles, COUNT DISTINCT): how the window's values are
    # evaluated (`aggregates.holistic`); None for every incremental aggregate
    holistic: Holistic | None = None
    # the device finalize (every incremental built-in has one; None: finalized on the host)
    cuda_finalize: CudaFinalize | None = None

    @property
    def is_holistic(self) -> bool:
        return self.holistic is not None

    def spark_sql(self, argument_sql: str, result_type: SqlType) -> str:
        """Spark SQL of one call over an argument already rendered as Spark SQL."""
        if self.spark is not None:
            return self.spark(argument_sql, result_type)
        return f"{self.spark_name}({argument_sql})"

    def __repr__(self) -> str:
        return f"Aggregate({self.key})"

    def __reduce__(self) -> tuple:
        return aggregate, (self.key,)  # the registered object in the unpickling process


_AGGREGATES: dict[str, Aggregate] = {}


def register_aggregate(aggregate: Aggregate) -> Aggregate:
    if aggregate.key in _AGGREGATES:
        raise ValueError(f"aggregate {aggregate.key!r} is already registered")
    _AGGREGATES[aggregate.key] = aggregate
    return aggregate


def aggregate(key: str) -> Aggregate:
    return _AGGREGATES[key]


def aggregates() -> tuple[Aggregate, ...]:
    return tuple(_AGGREGATES.values())


def null_when_empty(xp: Any, count: Array) -> Array | None:
    """The NULL mask of an aggregate that is NULL over no non-NULL input, or None when no
    result is NULL (the common case: no masking passes)."""
    # one counting pass, no mask built, in the common case of no empty cell
    if int(xp.count_nonzero(count)) == count.size:
        return None
    return count == 0
