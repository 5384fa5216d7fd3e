"""Holistic aggregates: functions of a window's whole multiset of values, not of combinable
partials. Defined here once; every table elsewhere (binder names, typing, planning, the CPU
evaluation, EXPLAIN) is derived from these definitions.

State kind:

VALUES: the raw non-NULL values of the argument (`Layout.VARIABLE`: a pane or a count window
        keeps as many as it holds). Per tuple it lifts two int64 parts: `value`, the argument
        as an order key (`order_keys`), and `valid` (0 where the argument is NULL). Order
        keys sort as Spark orders the values: integers as themselves; doubles by their bits
        made monotone, with -0.0 read as 0.0 and every NaN as one NaN, the largest value
        (Spark normalises both before grouping, distinct and sorting).

Functions (NULLs skipped; a window without a non-NULL value gives NULL, 0 for COUNT DISTINCT):

MEDIAN(x) = PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY x).
PERCENTILE_CONT(p) WITHIN GROUP (ORDER BY x), PERCENTILE(x, p): Spark's interpolation over
        the n sorted values: position = p * (n - 1), lower = floor, higher = ceil; the value at
        lower if they are equal, else v[lower] + (position - lower) * (v[higher] - v[lower])
        (Spark 4's order of operations). DOUBLE.
PERCENTILE_DISC(p) WITHIN GROUP (ORDER BY x): v[max(ceil(p * n) - 1, 0)], the argument's type.
COUNT(DISTINCT x): the number of distinct non-NULL values (BIGINT).
"""

from __future__ import annotations

import numpy as np
from sqlglot import exp

from mangonel.aggregates.functions import Aggregate, Holistic, StateUse, register_aggregate
from mangonel.aggregates.state import (
    CudaFragments,
    Layout,
    LiftInput,
    StateKind,
    register_state,
)
from mangonel.catalog.types import SqlType

_FLIP = np.int64(0x7FFFFFFFFFFFFFFF)
_NAN_BITS = np.int64(0x7FF8000000000000)


def order_keys(values: np.ndarray) -> np.ndarray:
    """int64 keys that sort as Spark orders `values` (see the module docstring); integers
    are their own keys."""
    if values.dtype.kind != "f":
        return values.astype(np.int64, copy=False)
    doubles = np.asarray(values, np.float64) + 0.0  # -0.0 + 0.0 is 0.0; a new array
    bits = doubles.view(np.int64)  # rewritten in place
    if not len(bits):
        return bits
    # the tests below are reductions (no mask array to allocate) before any masked work: a
    # maximum is NaN where any value is
    if np.isnan(doubles.max()):
        bits[np.isnan(doubles)] = _NAN_BITS
    # negative doubles: larger magnitude, smaller key; the sign word (all ones or zeros)
    # masks the flip, with no boolean index (a gather and a scatter: 4x the passes here)
    if bits.min() < 0:
        flip = bits >> 63
        flip &= _FLIP
        bits ^= flip
    return bits


def from_order_keys(keys: np.ndarray, floating: bool) -> np.ndarray:
    """The values of order keys: float64 when the argument is floating, else int64."""
    keys = np.asarray(keys, np.int64)
    if not floating:
        return keys
    bits = np.where(keys < 0, keys ^ _FLIP, keys)
    return bits.view(np.float64)


def _lift_values(inp: LiftInput, dtype: np.dtype, neutrals: tuple) -> tuple[np.ndarray, ...]:
    keys = order_keys(inp.values)
    if inp.all_valid:  # valid where contributing (the rest is never kept): no new array
        return keys, inp.rows
    return np.where(inp.valid, keys, 0), inp.valid.astype(np.int64)


VALUES = register_state(
    StateKind(
        name="values",
        doc="the raw non-NULL values of the argument, as order keys (holistic functions)",
        parts=("value", "valid"),
        storage=lambda accumulator: np.dtype(np.int64),
        neutral=lambda dtype: (0, 0),
        lift=_lift_values,  # per tuple; a pane's or window's state is its values' multiset
        combine=None,
        scalar_combine=None,
        # the GPU lifts values per tuple (`codegen.render_lift_kernels`); they are kept and
        # sorted, never combined into a cell, so there is no combine or atomic merge
        cuda=CudaFragments(
            lift=("{ok} ? mg_order_key({a}) : 0LL", "{ok} ? 1LL : 0LL"),
            combine="/* values are kept, not combined */",
            atomic="/* values are kept, not merged */",
        ),
        arrow=None,
        algebraic=False,
        holistic=True,
        layout=Layout.VARIABLE,
    )
)


def _numeric_double(argument: SqlType | None) -> SqlType | None:
    return SqlType.DOUBLE if argument is not None and argument.is_numeric else None


def _numeric_same(argument: SqlType | None) -> SqlType | None:
    return argument if argument is not None and argument.is_numeric else None


def _bigint(argument: SqlType | None) -> SqlType | None:
    return SqlType.BIGINT if argument is not None and argument.is_numeric else None


def finalize_selected(xp, count, value, result_type):
    """The value the holistic evaluation selected; NULL over no non-NULL value."""
    empty = count == 0
    if not bool(empty.any()):
        return value[0], None
    return xp.where(empty, 0, value[0]), empty


def _finalize_distinct(xp, count, value, result_type):
    return value[0], None  # 0 for a window without a non-NULL value


VALUES_USE = StateUse(VALUES, lambda argument: argument)  # decoded by the argument's type

register_aggregate(
    Aggregate(
        key="MEDIAN",
        display="MEDIAN",
        names=("MEDIAN",),
        sqlglot_classes=(exp.Median,),
        result_type=_numeric_double,
        accepts="numeric",
        state=VALUES_USE,
        finalize=finalize_selected,
        spark_name="median",
        holistic=Holistic("percentile_cont", 0.5),
    )
)
register_aggregate(
    Aggregate(
        key="PERCENTILE_CONT",
        display="PERCENTILE_CONT",
        names=("PERCENTILE_CONT",),
        sqlglot_classes=(exp.PercentileCont,),
        result_type=_numeric_double,
        accepts="numeric",
        state=VALUES_USE,
        finalize=finalize_selected,
        spark_name="percentile_cont",
        holistic=Holistic("percentile_cont"),
    )
)
register_aggregate(
    Aggregate(
        key="PERCENTILE",
        display="PERCENTILE",
        names=("PERCENTILE",),
        sqlglot_classes=(exp.Quantile,),
        result_type=_numeric_double,
        accepts="numeric",
        state=VALUES_USE,
        finalize=finalize_selected,
        spark_name="percentile",
        parse_names=("PERCENTILE",),  # sqlglot's default dialect reads it as a plain call
        holistic=Holistic("percentile_cont"),
    )
)
register_aggregate(
    Aggregate(
        key="PERCENTILE_DISC",
        display="PERCENTILE_DISC",
        names=("PERCENTILE_DISC",),
        sqlglot_classes=(exp.PercentileDisc,),
        result_type=_numeric_same,
        accepts="numeric",
        state=VALUES_USE,
        finalize=finalize_selected,
        spark_name="percentile_disc",
        holistic=Holistic("percentile_disc"),
    )
)
register_aggregate(
    Aggregate(
        key="COUNT_DISTINCT",
        display="COUNT(DISTINCT)",
        names=(),  # COUNT(DISTINCT x): the binder reads COUNT's call with a DISTINCT argument
        sqlglot_classes=(),
        result_type=_bigint,
        accepts="numeric",
        state=VALUES_USE,
        finalize=_finalize_distinct,
        spark_name="count",
        spark=lambda argument, result_type: f"count(DISTINCT {argument})",
        holistic=Holistic("count_distinct"),
    )
)
