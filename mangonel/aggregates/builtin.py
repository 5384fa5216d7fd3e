"""The built-in state kinds and aggregate functions: adding an incremental aggregate means
adding its definitions here (and its tests); every backend reads them from the registry.

State kinds:

COUNT: lift 1 if the argument is not NULL (always, without argument); combine +.
SUM:   lift the argument (0 when NULL); combine +. BIGINT sums wrap around in two's
       complement (Spark's non-ANSI sum); DOUBLE sums (also AVG's, over any numeric
       argument: Spark averages in double) follow IEEE.
MIN/MAX: lift the argument (the neutral when NULL); combine min/max in Spark's order,
         where NaN is larger than every other value (+inf included) and equal to NaN.
         Neutrals are the true extremes of that order: the int64 range for integers and
         timestamps, and for floats NaN (the largest value) for MIN and -inf for MAX.
MOMENTS: (n, mean, m2) of the argument; combine with Chan et al.'s parallel update
         delta = mean_b - mean_a; n = n_a + n_b; mean = mean_a + delta * n_b / n;
         m2 = m2_a + m2_b + delta^2 * n_a * n_b / n  (numerically stable). A tuple whose
         value is infinite or NaN lifts m2 = NaN, so the variance of data containing one
         is NaN (Spark's CentralMomentAgg gets NaN from inf - inf in its update).
         On the GPU, a pane cell merges lock-free as shifted power sums and is settled
         back to (n, mean, m2) before anything reads it (`mg_moments_add` in
         kernels_templates/prelude.cu.j2 says why that is stable); a settled cell's mean of
         exactly zero is kept as -0.0 there (the shift's "unset" mark is +0.0).
BOOL_AND/BOOL_OR: a BOOLEAN argument kept as int64 0/1; lift the argument (the neutral when
         NULL: 1 for AND, 0 for OR); combine & or |.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from mangonel.aggregates.functions import (
    Aggregate,
    CudaFinalize,
    StateUse,
    null_when_empty,
    register_aggregate,
)
from mangonel.aggregates.state import (
    ArrowPartial,
    CudaFragments,
    LiftInput,
    StateKind,
    accumulator_dtype,
    register_state,
)
from mangonel.catalog.types import SqlType

_INT64_MIN = int(np.iinfo(np.int64).min)
_INT64_MAX = int(np.iinfo(np.int64).max)
_VALUE = ("value",)  # the one part of a single-array state kind


# ---------------------------------------------------------------------------------------
# Faces shared by several kinds


def _lift_value(inp: LiftInput, dtype: np.dtype, neutrals: tuple) -> tuple[np.ndarray, ...]:
    """The argument itself, the neutral where it is NULL (no pass when nothing is NULL)."""
    if inp.all_valid:
        return (inp.values.astype(dtype, copy=False),)
    return (np.where(inp.valid, inp.values.astype(dtype), neutrals[0]).astype(dtype),)


def _add(a, b):
    return (a + b,)


def _min(a, b):
    # Spark's order: NaN is larger than every other value (a != a only for NaN; always false
    # for integers)
    return (b if (b < a or a != a) else a,)


def _max(a, b):
    return (b if (b > a or b != b) else a,)


def _add_arrays(a, b):
    return (a + b,)


def _min_arrays(a, b):
    return (np.where((b < a) | (a != a), b, a),)


def _max_arrays(a, b):
    return (np.where((b > a) | (b != b), b, a),)


def _fill(value, dtype: np.dtype, neutral):
    """An Arrow aggregation's output as partial storage, NULL (no non-NULL input) -> neutral."""
    arrow_type = pa.from_numpy_dtype(dtype)
    if pa.types.is_timestamp(value.type):
        value = value.cast(pa.int64())
    return pc.fill_null(value.cast(arrow_type), pa.scalar(neutral, arrow_type))


def _arrow_simple(function: str) -> ArrowPartial:
    return ArrowPartial(
        requests=lambda source, column, accumulator: ({}, [(source, function)]),
        results=lambda columns, dtype, neutrals: [_fill(columns[0], dtype, neutrals[0])],
    )


# ---------------------------------------------------------------------------------------
# COUNT


def _lift_count(inp: LiftInput, dtype: np.dtype, neutrals: tuple) -> tuple[np.ndarray, ...]:
    return (inp.rows if inp.all_valid else (inp.valid & inp.contributes).astype(np.int64),)


COUNT = register_state(
    StateKind(
        name="count",
        doc="non-NULL count of the argument (rows without one)",
        parts=_VALUE,
        storage=lambda accumulator: np.dtype(np.int64),
        neutral=lambda dtype: (0,),
        lift=_lift_count,
        combine=_add_arrays,
        scalar_combine=_add,
        cuda=CudaFragments(
            lift=("{ok} ? 1LL : 0LL",),
            combine="a.{value} = a.{value} + b.{value};",
            atomic="if (s.{value} != 0) mg_atomic_add(&t.{value}[j], s.{value});",
        ),
        arrow=_arrow_simple("count"),
        invertible=True,
    )
)


# ---------------------------------------------------------------------------------------
# SUM


def _sum_requests(source: str, column, accumulator: SqlType):
    if accumulator is SqlType.DOUBLE and not pa.types.is_floating(column.type):
        # AVG sums in double (Spark's Average): convert every value before summing
        # (unchecked: int64 -> double rounds, and a checked cast refuses that)
        name = f"{source}.double"
        return {name: column.cast(pa.float64(), safe=False)}, [(name, "sum")]
    return {}, [(source, "sum")]  # Arrow's integer sum wraps, as Spark's


SUM = register_state(
    StateKind(
        name="sum",
        doc="sum of the argument (BIGINT wraps around; DOUBLE follows IEEE)",
        parts=_VALUE,
        storage=accumulator_dtype,
        neutral=lambda dtype: (0,),
        lift=_lift_value,
        combine=_add_arrays,
        scalar_combine=_add,
        cuda=CudaFragments(
            lift=("{ok} ? ({ctype}){a} : ({ctype})0",),
            combine="a.{value} = a.{value} + b.{value};",
            atomic="mg_atomic_add(&t.{value}[j], s.{value});",
        ),
        arrow=ArrowPartial(
            requests=_sum_requests,
            results=lambda columns, dtype, neutrals: [_fill(columns[0], dtype, neutrals[0])],
        ),
        invertible=True,
    )
)


# ---------------------------------------------------------------------------------------
# MIN, MAX


MIN = register_state(
    StateKind(
        name="min",
        doc="smallest argument in Spark's order (NaN largest)",
        parts=_VALUE,
        storage=accumulator_dtype,
        neutral=lambda dtype: (_INT64_MAX if dtype.kind == "i" else math.nan,),
        lift=_lift_value,
        combine=_min_arrays,
        scalar_combine=_min,
        cuda=CudaFragments(
            lift=("{ok} ? ({ctype}){a} : {neutral}",),
            combine="a.{value} = mg_min(a.{value}, b.{value});",
            atomic="mg_atomic_min(&t.{value}[j], s.{value});",
        ),
        arrow=_arrow_simple("min"),  # NaN only when every value is NaN, as in Spark's order
    )
)


def _max_requests(source: str, column, accumulator: SqlType):
    if not pa.types.is_floating(column.type):
        return {}, [(source, "max")]
    # Arrow's max skips NaN; in Spark's order NaN is the largest value
    name = f"{source}.nan"
    return {name: pc.is_nan(column)}, [(source, "max"), (name, "any")]


def _max_results(columns, dtype: np.dtype, neutrals: tuple):
    value = _fill(columns[0], dtype, neutrals[0])
    if len(columns) == 2:
        has_nan = pc.fill_null(columns[1], False)
        value = pc.if_else(has_nan, pa.scalar(float("nan")), value)
    return [value]


MAX = register_state(
    StateKind(
        name="max",
        doc="largest argument in Spark's order (NaN largest)",
        parts=_VALUE,
        storage=accumulator_dtype,
        neutral=lambda dtype: (_INT64_MIN if dtype.kind == "i" else -math.inf,),
        lift=_lift_value,
        combine=_max_arrays,
        scalar_combine=_max,
        cuda=CudaFragments(
            lift=("{ok} ? ({ctype}){a} : {neutral}",),
            combine="a.{value} = mg_max(a.{value}, b.{value});",
            atomic="mg_atomic_max(&t.{value}[j], s.{value});",
        ),
        arrow=ArrowPartial(requests=_max_requests, results=_max_results),
    )
)


# ---------------------------------------------------------------------------------------
# MOMENTS


def _moments_m2(values: np.ndarray) -> np.ndarray:
    """m2 of one tuple: 0, or NaN where the value is infinite or NaN, so that the variance of
    data containing one is NaN, as Spark's CentralMomentAgg gives (its update computes
    inf - inf); Chan's combine carries the NaN to every window holding the tuple."""
    if values.dtype.kind != "f":
        return np.zeros(values.shape[0], np.float64)
    return np.where(np.isfinite(values), 0.0, np.nan)


def _lift_moments(inp: LiftInput, dtype: np.dtype, neutrals: tuple) -> tuple[np.ndarray, ...]:
    return (
        inp.rows.astype(np.float64) if inp.all_valid else inp.valid.astype(np.float64),
        inp.values.astype(np.float64, copy=False)
        if inp.all_valid
        else np.where(inp.valid, inp.values, 0.0),
        _moments_m2(inp.values),
    )


def _chan(n_a, mean_a, m2_a, n_b, mean_b, m2_b):
    # Chan et al.'s parallel combine of (count, mean, sum of squared deviations)
    if n_b == 0.0:
        return n_a, mean_a, m2_a
    if n_a == 0.0:
        return n_b, mean_b, m2_b
    n = n_a + n_b
    delta = mean_b - mean_a
    return n, mean_a + delta * n_b / n, m2_a + m2_b + delta * delta * n_a * n_b / n


def _chan_arrays(n_a, mean_a, m2_a, n_b, mean_b, m2_b):
    n = n_a + n_b
    with np.errstate(divide="ignore", invalid="ignore"):
        delta = mean_b - mean_a
        mean = mean_a + delta * n_b / n
        m2 = m2_a + m2_b + delta * delta * n_a * n_b / n
    b_empty, a_empty = n_b == 0.0, n_a == 0.0
    return (
        np.where(b_empty, n_a, np.where(a_empty, n_b, n)),
        np.where(b_empty, mean_a, np.where(a_empty, mean_b, mean)),
        np.where(b_empty, m2_a, np.where(a_empty, m2_b, m2)),
    )


def _moments_results(columns, dtype: np.dtype, neutrals: tuple):
    n = columns[0].cast(pa.float64())
    mean = pc.fill_null(columns[1], 0.0)
    variance = pc.fill_null(columns[2], 0.0)
    return [n, mean, pc.multiply(variance, n)]


MOMENTS = register_state(
    StateKind(
        name="moments",
        doc="(n, mean, m2) of the argument, combined with Chan et al.'s update",
        parts=("n", "mean", "m2"),
        storage=lambda accumulator: np.dtype(np.float64),
        neutral=lambda dtype: (0.0, 0.0, 0.0),
        lift=_lift_moments,
        combine=_chan_arrays,
        scalar_combine=_chan,
        cuda=CudaFragments(
            # m2 of one tuple is NaN when its value is infinite or NaN (see _moments_m2)
            lift=(
                "{ok} ? 1.0 : 0.0",
                "{ok} ? (double){a} : 0.0",
                "({ok} && !isfinite((double){a})) ? "
                "__longlong_as_double(0x7ff8000000000000LL) : 0.0",
            ),
            combine="mg_chan(a.{n}, a.{mean}, a.{m2}, b.{n}, b.{mean}, b.{m2});",
            # lock-free: shifted power sums, the shift in the mean word and the shifted sum in
            # the aux word (`mg_moments_add`, `mg_moments_settle` in prelude.cu.j2)
            atomic=(
                "if (s.{n} != 0.0) mg_moments_add(&t.{n}[j], &t.{mean}[j], &t.{m2}[j], "
                "&{aux0}, s.{n}, s.{mean}, s.{m2});"
            ),
            aux=1,
            settle="mg_moments_settle(&t.{n}[j], &t.{mean}[j], &t.{m2}[j], &{aux0});",
            locked_atomic=(
                "if (s.{n} != 0.0) {{ mg_lock(&t.lock[j]); "
                "mg_chan_cell(&t.{n}[j], &t.{mean}[j], &t.{m2}[j], s.{n}, s.{mean}, s.{m2}); "
                "mg_unlock(&t.lock[j]); }}"
            ),
        ),
        arrow=ArrowPartial(
            requests=lambda source, column, accumulator: (
                {},
                [
                    (source, "count"),
                    (source, "mean"),
                    (source, "variance", pc.VarianceOptions(ddof=0)),
                ],
            ),
            results=_moments_results,
        ),
    )
)


# ---------------------------------------------------------------------------------------
# BOOL_AND, BOOL_OR


def _and(a, b):
    return (a & b,)  # scalars (numba) and numpy arrays alike


def _or(a, b):
    return (a | b,)


BOOL_AND = register_state(
    StateKind(
        name="bool_and",
        doc="whether every non-NULL argument is TRUE (int64 0/1)",
        parts=_VALUE,
        storage=lambda accumulator: np.dtype(np.int64),
        neutral=lambda dtype: (1,),
        lift=_lift_value,
        combine=_and,
        scalar_combine=_and,
        cuda=CudaFragments(
            lift=("{ok} ? ({ctype}){a} : {neutral}",),
            combine="a.{value} = a.{value} & b.{value};",
            # over 0/1, min is AND; a 1 changes nothing
            atomic="if (s.{value} == 0) mg_atomic_min(&t.{value}[j], s.{value});",
        ),
        arrow=_arrow_simple("all"),  # NULLs skipped; NULL (-> the neutral) when all NULL
    )
)
BOOL_OR = register_state(
    StateKind(
        name="bool_or",
        doc="whether some non-NULL argument is TRUE (int64 0/1)",
        parts=_VALUE,
        storage=lambda accumulator: np.dtype(np.int64),
        neutral=lambda dtype: (0,),
        lift=_lift_value,
        combine=_or,
        scalar_combine=_or,
        cuda=CudaFragments(
            lift=("{ok} ? ({ctype}){a} : {neutral}",),
            combine="a.{value} = a.{value} | b.{value};",
            atomic="if (s.{value} != 0) mg_atomic_max(&t.{value}[j], s.{value});",
        ),
        arrow=_arrow_simple("any"),
    )
)


# ---------------------------------------------------------------------------------------
# Aggregate functions


def _any_type(argument: SqlType | None) -> SqlType | None:
    return SqlType.BIGINT


def _numeric_same(argument: SqlType | None) -> SqlType | None:
    return argument if argument is not None and argument.is_numeric else None


def _orderable_same(argument: SqlType | None) -> SqlType | None:
    if argument is not None and (argument.is_numeric or argument is SqlType.TIMESTAMP):
        return argument
    return None


def _sum_type(argument: SqlType | None) -> SqlType | None:
    if argument is None or not argument.is_numeric:
        return None
    return SqlType.BIGINT if argument.is_integer else SqlType.DOUBLE


def _double(argument: SqlType | None) -> SqlType | None:
    return SqlType.DOUBLE if argument is not None and argument.is_numeric else None


def _boolean(argument: SqlType | None) -> SqlType | None:
    return SqlType.BOOLEAN if argument is SqlType.BOOLEAN else None


def _finalize_boolean(xp, count, value, result_type):
    """BOOL_AND/BOOL_OR: the 0/1 state (Arrow casts it to BOOLEAN); NULL over no non-NULL
    input."""
    return value[0], null_when_empty(xp, count)


_CUDA_BOOLEAN = CudaFinalize("{null} = {count} == 0; {out} = {v0};", "long long")


def _finalize_count(xp, count, value, result_type):
    return count, None


_CUDA_COUNT = CudaFinalize("{null} = false; {out} = {count};", "long long")


def _finalize_value(xp, count, value, result_type):
    """SUM, MIN, MAX: the value field; NULL when the non-NULL count is 0."""
    empty = null_when_empty(xp, count)
    data = value[0] if empty is None else xp.where(empty, 0, value[0])
    if result_type is SqlType.TIMESTAMP:
        data = data.astype(np.int64)
    return data, empty


_CUDA_VALUE = CudaFinalize("{null} = {count} == 0; {out} = {v0};")


def _finalize_avg(xp, count, value, result_type):
    empty = null_when_empty(xp, count)
    with np.errstate(divide="ignore", invalid="ignore"):
        data = value[0] / (count if empty is None else xp.where(empty, 1, count))
    return data.astype(np.float64), empty


_CUDA_AVG = CudaFinalize("{null} = {count} == 0; {out} = (double){v0} / (double){count};", "double")


def _variance(sample: bool, root: bool):
    """VAR_*/STDDEV_*: m2 / n or m2 / (n - 1), sqrt for STDDEV; NULL when n is 0 (and for the
    sample forms when n is 1, as in Spark)."""

    def finalize(xp, count, value, result_type):
        n, m2 = value[0], value[2]
        null = n < (2 if sample else 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            data = m2 / xp.where(null, 1.0, n - 1.0 if sample else n)
        data = xp.maximum(data, 0.0)  # rounding must not make a variance negative
        if root:
            data = xp.sqrt(data)
        return data, null

    return finalize


def _cuda_variance(sample: bool, root: bool) -> CudaFinalize:
    """`_variance` as C: NULL below 2 (sample) or 1 values; a negative rounding result is 0
    while NaN stays NaN (numpy's maximum keeps NaN; C's fmax would not)."""
    divisor = "{v0} - 1.0" if sample else "{v0}"
    value = "sqrt(d)" if root else "d"
    return CudaFinalize(
        f"{{null}} = {{v0}} < {2.0 if sample else 1.0}; "
        f"{{{{ double d = {{v2}} / ({divisor}); d = d < 0.0 ? 0.0 : d; {{out}} = {value}; }}}}",
        "double",
    )


_LOW_32 = 4294967295


def _spark_sum(argument: str, result_type: SqlType) -> str:
    if result_type is not SqlType.BIGINT:
        return f"sum({argument})"
    # Spark's sum of longs raises on overflow under ANSI; the sums of the high and the low
    # 32-bit halves cannot overflow (< 2^31 rows), and shifts recombine them modulo 2^64
    value = f"CAST({argument} AS BIGINT)"
    high = f"sum(shiftright({value}, 32))"
    low = f"sum({value} & {_LOW_32})"
    return f"(shiftleft({high} + shiftright({low}, 32), 32) | ({low} & {_LOW_32}))"


_DOUBLE_SUM = StateUse(SUM, lambda argument: SqlType.DOUBLE)
_MOMENTS = StateUse(MOMENTS, lambda argument: SqlType.DOUBLE)

register_aggregate(
    Aggregate(
        key="COUNT_STAR",
        display="COUNT(*)",
        names=(),
        sqlglot_classes=(),
        result_type=_any_type,
        accepts="no",
        state=None,
        finalize=_finalize_count,
        spark_name="count",
        spark=lambda argument, result_type: "count(1)",
        takes_argument=False,
        cuda_finalize=_CUDA_COUNT,
    )
)
register_aggregate(
    Aggregate(
        key="COUNT",
        display="COUNT",
        names=("COUNT",),
        sqlglot_classes=(exp.Count,),
        result_type=_any_type,
        accepts="any",
        state=None,
        finalize=_finalize_count,
        spark_name="count",
        cuda_finalize=_CUDA_COUNT,
    )
)
register_aggregate(
    Aggregate(
        key="SUM",
        display="SUM",
        names=("SUM",),
        sqlglot_classes=(exp.Sum,),
        result_type=_sum_type,
        accepts="numeric",
        state=StateUse(
            SUM, lambda argument: SqlType.BIGINT if argument.is_integer else SqlType.DOUBLE
        ),
        finalize=_finalize_value,
        spark_name="sum",
        spark=_spark_sum,
        cuda_finalize=_CUDA_VALUE,
    )
)
for _key, _kind, _class in (("MIN", MIN, exp.Min), ("MAX", MAX, exp.Max)):
    register_aggregate(
        Aggregate(
            key=_key,
            display=_key,
            names=(_key,),
            sqlglot_classes=(_class,),
            result_type=_orderable_same,
            accepts="numeric or TIMESTAMP",
            state=StateUse(_kind, lambda argument: argument),
            finalize=_finalize_value,
            spark_name=_key.lower(),
            cuda_finalize=_CUDA_VALUE,
        )
    )
register_aggregate(
    Aggregate(
        key="AVG",
        display="AVG",
        names=("AVG",),
        sqlglot_classes=(exp.Avg,),
        result_type=_double,
        accepts="numeric",
        # Spark's Average sums in double for every non-decimal argument, so AVG of BIGINT
        # values near 2^63 is their mean, not the mean of a wrapped sum.
        state=_DOUBLE_SUM,
        finalize=_finalize_avg,
        spark_name="avg",
        cuda_finalize=_CUDA_AVG,
    )
)
for _key, _names, _classes, _sample, _root in (
    ("VAR_POP", ("VAR_POP",), (exp.VariancePop,), False, False),
    ("VAR_SAMP", ("VAR_SAMP", "VARIANCE"), (exp.Variance,), True, False),
    ("STDDEV_POP", ("STDDEV_POP",), (exp.StddevPop,), False, True),
    # STDDEV is STDDEV_SAMP, as in Spark
    ("STDDEV_SAMP", ("STDDEV_SAMP", "STDDEV"), (exp.StddevSamp, exp.Stddev), True, True),
):
    register_aggregate(
        Aggregate(
            key=_key,
            display=_key,
            names=_names,
            sqlglot_classes=_classes,
            result_type=_double,
            accepts="numeric",
            state=_MOMENTS,
            finalize=_variance(_sample, _root),
            spark_name=_key.lower(),
            cuda_finalize=_cuda_variance(_sample, _root),
        )
    )
for _key, _kind, _class, _names, _parse_names in (
    ("BOOL_AND", BOOL_AND, exp.LogicalAnd, ("BOOL_AND", "EVERY"), ("EVERY",)),
    ("BOOL_OR", BOOL_OR, exp.LogicalOr, ("BOOL_OR", "ANY", "SOME"), ("ANY", "SOME")),
):
    register_aggregate(
        Aggregate(
            key=_key,
            display=_key,
            names=_names,
            sqlglot_classes=(_class,),
            result_type=_boolean,
            accepts="BOOLEAN",
            state=StateUse(_kind, lambda argument: SqlType.BOOLEAN),
            finalize=_finalize_boolean,
            spark_name=_key.lower(),
            cuda_finalize=_CUDA_BOOLEAN,
            parse_names=_parse_names,
        )
    )
