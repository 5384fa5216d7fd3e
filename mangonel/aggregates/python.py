"""User window functions written in Python (`Session.register_window_function`).

A `WindowFunction` is a Python function of one NumPy array, the non-NULL values of one
window of one key, returning one number; registered `with_timestamps`, a function of two
arrays: the values and their tuples' event times (int64 microseconds since the epoch, the
i-th the time of the i-th value; equal values in event-time order). In SQL it is called like
an aggregate, `trimmed_mean(price)`; it is holistic: it reads the window's raw values (the
`values` state of `aggregates.holistic`, shared with MEDIAN & co. over the same argument),
evaluated by the holistic step with `Holistic("python")`.

What the function sees (docs/semantics.md, "Python window functions"): the window's non-NULL
values of the argument, sorted ascending in Spark's order (NaN largest, -0.0 read as 0.0),
as float64 for a floating argument and int64 for an integer one; never an empty array (a
window without a non-NULL value gives NULL without calling it). Sorted because a window's
values otherwise have no order independent of arrival: the result must not depend on how
the stream was batched or how late its tuples came.

The function itself is compiled by the backend (numba on the CPU, `runtime.cpu.python_window`;
numba's CUDA target on the GPU, `runtime.gpu.python_window`), which is why this module only
describes it: the aggregates layer imports no numba. What the CUDA check said of a function
is kept on it (`WindowFunction.cuda`) for the planner, which imports no runtime either.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mangonel.aggregates.functions import Aggregate, Holistic, register_aggregate
from mangonel.aggregates.holistic import VALUES_USE, finalize_selected
from mangonel.catalog.types import SqlType

# The result types a Python window function may declare: numbers (its value goes through
# the same finalize as MEDIAN's: NULL over a window without values).
RETURN_TYPES = (SqlType.DOUBLE, SqlType.FLOAT, SqlType.BIGINT, SqlType.INT)


@dataclass(frozen=True, eq=False)
class WindowFunction:
    """A registered Python window function: its SQL name (lower case; SQL names are
    case-insensitive), the Python function as given, and its declared result type.
    Compared by identity: two registrations are two functions, even of one name."""

    name: str
    function: Callable[..., Any]
    returns: SqlType
    with_timestamps: bool = False  # called as function(values, timestamps)
    # What numba's CUDA target said of the function per values dtype ("float64", "int64"):
    # None when it compiles as a device function, else numba's reason. Filled when a GPU
    # plan is made (`compiler.window_functions.check_calls`, the session's CUDA check) and
    # read by the planner (`compiler.holistic.holistic_cpu_reason`); a cache of a property
    # of the function, so mutable inside the frozen record.
    cuda: dict[str, str | None] = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        timed = ", with_timestamps" if self.with_timestamps else ""
        return f"WindowFunction({self.name} -> {self.returns}{timed})"


def values_dtype(argument_type: SqlType) -> np.dtype:
    """The dtype of the array a function gets for an argument of this type."""
    return np.dtype(np.float64 if argument_type.is_floating else np.int64)


def result_dtype(returns: SqlType) -> np.dtype:
    """The dtype the backends collect a function's results in, for its declared type."""
    return np.dtype(np.float64 if returns.is_floating else np.int64)


def return_type(name: str, returns: str | SqlType) -> SqlType:
    """The declared result type of function `name` (a SqlType or its SQL name), checked:
    raises ValueError naming the accepted types."""
    accepted = ", ".join(t.value for t in RETURN_TYPES)
    if isinstance(returns, SqlType):
        sql_type = returns
    elif isinstance(returns, str):
        spelled = returns.strip().upper()
        aliases = {"LONG": "BIGINT", "INTEGER": "INT", "REAL": "FLOAT", "FLOAT64": "DOUBLE"}
        try:
            sql_type = SqlType(aliases.get(spelled, spelled))
        except ValueError:
            raise ValueError(
                f"window function {name!r}: returns={returns!r} is not a type; one of {accepted}"
            ) from None
    else:
        raise ValueError(
            f"window function {name!r}: returns must be a type name ({accepted}), "
            f"got {type(returns).__name__}"
        )
    if sql_type not in RETURN_TYPES:
        raise ValueError(
            f"window function {name!r}: returns={sql_type.value} is not supported; "
            f"a Python window function returns one of {accepted}"
        )
    return sql_type


def _finalize_returned(xp, count, value, result_type):  # noqa: ANN001, ANN202
    """`finalize_selected` of the function's results, which the backends hold as int64 or
    float64: an INT result outside int32's range wraps to 32 bits, as BIGINT's wraps to 64
    in numba's conversion and as Spark's non-ANSI CAST(... AS INT) does (Arrow's checked cast
    raised ArrowInvalid out of the firing instead)."""
    data, null = finalize_selected(xp, count, value, result_type)
    if result_type is SqlType.INT:
        data = data.astype(xp.int32)
    return data, null


PYTHON = register_aggregate(
    Aggregate(
        key="PYTHON",
        display="PYTHON",  # EXPLAIN and errors print the registered name instead
        names=(),  # called by its registered name (the binder reads the session's functions)
        sqlglot_classes=(),
        # the call's type is the function's declared `returns` (the binder sets it); this
        # rule only says which arguments it takes
        result_type=lambda argument: (
            SqlType.DOUBLE if argument is not None and argument.is_numeric else None
        ),
        accepts="numeric",
        state=VALUES_USE,
        finalize=_finalize_returned,
        spark_name="python",
        holistic=Holistic("python"),
    )
)
