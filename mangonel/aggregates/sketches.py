"""Mergeable sketches of the approximate aggregates: their parameters, constants and state
kinds, defined once (docs/sketches.md). The kernels that build, merge and read them live
in the backends (`runtime/cpu/sketch_hll.py`, `runtime/cpu/sketch_quantile.py`).

APPROX_COUNT_DISTINCT(x [, rsd]) -- HyperLogLog++ as Spark computes it
(HyperLogLogPlusPlusHelper): p = ceil(2 * log2(1.106 / rsd)) index bits, m = 2^p registers
of 6 bits (kept as one uint8 each), a value's 64-bit hash is XXH64 with seed 42 over the
bytes Spark hashes for its type, its top p bits pick the register and the register keeps the
maximum of (leading zeros of the remaining bits) + 1; merge is the element-wise maximum.
Estimate: raw E = alpha_m * m^2 / sum(2^-M[j]); with V > 0 empty registers, linear counting
H = m * ln(m / V) when H <= THRESHOLDS[p] or E <= 2.5 m (Spark's rule, bit for bit), else E
where E >= 5 m (Spark's too). In between Spark subtracts an empirical bias from E
(k-nearest-neighbour interpolation in the HLL++ paper's appendix tables); this version does
not carry those tables and uses Ertl's improved raw estimator there instead (O. Ertl, "New
cardinality estimation algorithms for HyperLogLog sketches", arXiv:1702.01284, 2017: no
tables, nearly unbiased), so in that band only the estimate may differ from Spark's, by the
two corrections' difference (under 0.15 standard deviations 1.04 / sqrt(m) in
tests/spark/test_spark_sketches.py; the uncorrected E there overestimates by up to 3 standard
deviations near 2.5 m).

APPROX_PERCENTILE(x, p [, accuracy]) -- Spark's Greenwald-Khanna summary (QuantileSummaries)
with relative error eps = 1 / accuracy: a sorted list of (value, g, delta) samples where g is
the rank gap to the previous sample and delta the rank uncertainty, so the rank of a returned
value is within eps * n of the requested rank ceil(p * n), rounded to the nearest rank (the
invariant is g + delta <= 1 + floor(2 eps n) and a query answers within max(g + delta) // 2;
p <= eps answers the minimum, p >= 1 - eps the maximum). A sketch built from a set of values
in one go holds them sorted with delta = floor(2 * eps * i) (0 for the first and the last)
and is then compressed with threshold 2 * eps * n; two sketches merge like Spark's `merge`
(interleaved samples take the other side's floor(2 * eps * n) as extra delta, then compress).
Values are doubles (the argument cast, Spark's PercentileDigest); NaN sorts above +inf.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from sqlglot import exp

from mangonel.aggregates.functions import Aggregate, Holistic, StateUse, register_aggregate
from mangonel.aggregates.holistic import VALUES
from mangonel.aggregates.state import Layout, StateKind, register_state
from mangonel.catalog.types import SqlType
from mangonel.errors import PlanError

# ---------------------------------------------------------------------------------------
# HyperLogLog++

HLL_SEED = 42  # Spark's seed for XXH64 in HyperLogLogPlusPlus (and its xxhash64 function)
HLL_DEFAULT_RSD = 0.05
HLL_MIN_PRECISION = 4  # Spark: "HLL++ requires at least 4 bits for addressing"
# Registers per cell grow as 2^p: 2^18 bytes per (key, pane) cell is the most this version
# keeps (rsd ~ 0.2 %); Spark accepts larger p but then skips its bias correction too.
HLL_MAX_PRECISION = 18

# Linear counting thresholds for p = 4..18 (index p - 4), from the appendix of Heule,
# Nunkesser and Hall, "HyperLogLog in Practice: Algorithmic Engineering of a State of the Art
# Cardinality Estimation Algorithm" (EDBT 2013), with the values Spark's
# HyperLogLogPlusPlusHelper lists (so that linear counting switches where Spark's does).
HLL_THRESHOLDS = (
    10.0,
    20.0,
    40.0,
    80.0,
    220.0,
    400.0,
    900.0,
    1800.0,
    3100.0,
    6500.0,
    15500.0,
    20000.0,
    50000.0,
    120000.0,
    350000.0,
)


def hll_precision(rsd: float) -> int:
    """Index bits p for a requested relative standard deviation (Spark's formula), checked."""
    if not isinstance(rsd, (int, float)) or isinstance(rsd, bool) or not math.isfinite(rsd):
        raise PlanError(f"APPROX_COUNT_DISTINCT: rsd must be a finite number, got {rsd!r}")
    if rsd <= 0:
        raise PlanError(f"APPROX_COUNT_DISTINCT: rsd must be positive, got {rsd}")
    p = math.ceil(2.0 * math.log(1.106 / rsd) / math.log(2.0))
    if p < HLL_MIN_PRECISION:
        raise PlanError(
            f"APPROX_COUNT_DISTINCT: rsd {rsd} is too large: HLL++ requires at least 4 bits "
            "for addressing; use a lower error, at most 39%"
        )
    if p > HLL_MAX_PRECISION:
        raise PlanError(
            f"APPROX_COUNT_DISTINCT: rsd {rsd} needs 2^{p} registers per cell; the smallest "
            f"rsd this version keeps is {_smallest_rsd():.5f} (p = 18)"
        )
    return p


def _smallest_rsd() -> float:
    """The smallest rsd (5 decimals, rounded up) whose p is HLL_MAX_PRECISION."""
    return math.ceil(1.106 / 2 ** (HLL_MAX_PRECISION / 2) * 1e5) / 1e5


def hll_registers(p: int) -> int:
    return 1 << p


def hll_alpha_m2(p: int) -> float:
    """alpha_m * m^2 of the raw estimate (Flajolet et al. 2007, Spark's constants)."""
    m = float(1 << p)
    alpha = {4: 0.673, 5: 0.697, 6: 0.709}.get(p, 0.7213 / (1.0 + 1.079 / m))
    return alpha * m * m


def hll_true_rsd(p: int) -> float:
    """The relative standard deviation p registers give: 1.04 / sqrt(m)."""
    return 1.04 / math.sqrt(1 << p)


def hll_threshold(p: int) -> float:
    return HLL_THRESHOLDS[p - HLL_MIN_PRECISION]


def hll_bins(p: int) -> int:
    """Bins of a register histogram: register values 0 .. 65 - p (q = 64 - p, plus 2)."""
    return 64 - p + 2


HLL_ESTIMATE_CHUNK = 4096  # cells per vectorised pass of `hll_estimate`


def hll_estimate(histograms: np.ndarray, p: int) -> np.ndarray:
    """APPROX_COUNT_DISTINCT of register sets given their register histograms
    (int [cells, >= hll_bins(p)]: C_k = registers holding k), int64. Every backend's kernels
    count the histograms (integers, exact) and call this one function, so the estimates are
    bit-identical across backends; the rule is the module docstring's (Spark's, with Ertl's
    estimator in Spark's bias band). Vectorised over cells, each cell's sums taken in the
    same sequential order."""
    histograms = np.asarray(histograms)
    bins = hll_bins(p)
    if histograms.ndim != 2 or histograms.shape[1] < bins:
        raise ValueError(f"HLL histograms must be [cells, >= {bins}], got {histograms.shape}")
    if histograms.shape[0] > HLL_ESTIMATE_CHUNK:  # cache-sized pieces: ~60 passes each
        return np.concatenate(
            [
                hll_estimate(histograms[at : at + HLL_ESTIMATE_CHUNK], p)
                for at in range(0, histograms.shape[0], HLL_ESTIMATE_CHUNK)
            ]
        )
    # bins x cells: each bin's counts contiguous
    counts = np.ascontiguousarray(histograms[:, :bins].T, dtype=np.float64)
    z_inverse = np.zeros(counts.shape[1])
    held = np.flatnonzero(counts.any(axis=1))
    for k in range(int(held[-1]) + 1 if len(held) else 0):
        # k ascending: one summation order everywhere (the bins above the highest
        # register held add zeros, which change no sum)
        z_inverse += counts[k] * 2.0**-k
    return hll_estimate_of_sums(z_inverse, counts[0], p, lambda band: counts[:, band])


def hll_estimate_of_sums(
    z_inverse: np.ndarray,
    zeros: np.ndarray,
    p: int,
    band_counts: Callable[[np.ndarray], np.ndarray],
    exact: np.ndarray | None = None,
) -> np.ndarray:
    """`hll_estimate` from each cell's sum_k C_k 2^-k (summed with k ascending from 0.0, every
    term exact: `hll_estimate`'s order, which a device kernel reproduces bit for bit) and its
    count of zero registers C_0; `band_counts(mask)`: the histograms (float64, bins x cells)
    of the cells in Ertl's band, the one case that reads more than the two sums. `exact`
    (optional, per cell): its sum is exact and no register passes 53 - p (the CPU's integer
    sums, `sketch_hll.merged_estimates`); such a cell in the band needs no histogram: Ertl's
    loop over C_q .. C_1 then sums sum_k>=1 C_k 2^-k with every step exact (C_q+1 = 0, so it
    starts at 0.0, and each partial sum is a multiple of 2^-(53 - p) below 2^p: 53 bits),
    which is z_inverse - C_0, exactly."""
    zeros = np.asarray(zeros, np.float64)
    m = float(hll_registers(p))
    q = 64 - p
    with np.errstate(divide="ignore"):
        estimate = hll_alpha_m2(p) / z_inverse  # the raw estimate E
    band = estimate < 5.0 * m
    # linear counting, m log(m / C_0), only where a register is zero (C_0 >= 1): the cells
    # of a window of many values have none, and the logarithm is most of this function's
    # time on a firing's tens of thousands of cells
    with_zeros = np.flatnonzero(zeros > 0)
    if len(with_zeros):
        linear = m * np.log(m / zeros[with_zeros])
        use_linear = (linear <= hll_threshold(p)) | (estimate[with_zeros] <= 2.5 * m)
        estimate[with_zeros[use_linear]] = linear[use_linear]
        band[with_zeros[use_linear]] = False
    if band.any():
        summed = band & exact if exact is not None else np.zeros_like(band)
        ertl_z = z_inverse[summed] - zeros[summed]  # Ertl's z before C_0's term, exactly
        estimate[summed] = _improved_tail(ertl_z, zeros[summed], m)
        counted = band & ~summed
        if counted.any():
            estimate[counted] = _improved_estimate(band_counts(counted), m, q)
    return np.floor(estimate + 0.5).astype(np.int64)  # Java's Math.round


def _sigma(x: np.ndarray) -> np.ndarray:
    """Ertl's sigma(x) = x + sum_k>=1 x^(2^k) 2^(k-1), summed until no element changes (inf
    at x = 1)."""
    out = np.full(x.shape, np.inf)
    live = x < 1.0
    x = x[live]
    z = x.copy()
    y = 1.0
    while True:
        x = x * x
        previous = z
        z = z + x * y
        y += y
        if np.array_equal(z, previous):
            break
    out[live] = z
    return out


def _tau(x: np.ndarray) -> np.ndarray:
    """Ertl's tau(x) = (1 - x - sum_k>=1 (1 - x^(2^-k))^2 2^-k) / 3 (0 at x = 0 and 1)."""
    out = np.zeros(x.shape)
    live = (x > 0.0) & (x < 1.0)
    x = x[live]
    z = 1.0 - x
    y = 1.0
    while True:
        x = np.sqrt(x)
        previous = z
        y *= 0.5
        z = z - (1.0 - x) ** 2 * y
        if np.array_equal(z, previous):
            break
    out[live] = z / 3.0
    return out


def _improved_estimate(counts: np.ndarray, m: float, q: int) -> np.ndarray:
    """Ertl's improved raw estimator (O. Ertl, "New cardinality estimation algorithms for
    HyperLogLog sketches", arXiv:1702.01284, 2017, Algorithm 6) from the histograms
    C_0..C_{q+1} (bins x cells): nearly unbiased across the whole range, with no tables."""
    z = m * _tau(1.0 - counts[q + 1] / m)
    for k in range(q, 0, -1):
        z = 0.5 * (z + counts[k])
    return _improved_tail(z, counts[0], m)


def _improved_tail(z: np.ndarray, zeros: np.ndarray, m: float) -> np.ndarray:
    """Ertl's estimate from z after the loop over C_q+1 .. C_1, and C_0."""
    z = z + m * _sigma(zeros / m)
    return m * m / (2.0 * math.log(2.0)) / z


def hll_to_bytes(registers: np.ndarray, p: int) -> bytes:
    """Snapshot of register sets (every backend's): one byte p, then the uint8 registers
    row-major."""
    return bytes([p]) + np.ascontiguousarray(registers, np.uint8).tobytes()


def hll_from_bytes(blob: bytes) -> tuple[np.ndarray, int]:
    """(registers [cells, 2^p] uint8, p) of a snapshot, checked."""
    p = blob[0]
    if not HLL_MIN_PRECISION <= p <= HLL_MAX_PRECISION:
        raise ValueError(f"HLL snapshot names precision {p}, outside [4, 18]")
    m = hll_registers(p)
    body = np.frombuffer(blob, np.uint8, offset=1)
    if body.shape[0] % m:
        raise ValueError(f"HLL snapshot of {body.shape[0]} register bytes is not a multiple of {m}")
    return body.reshape(-1, m).copy(), p


def hll_hash_width(argument: SqlType) -> int:
    """Bytes Spark's XXH64 hashes for a value of `argument`: 4 (hashInt) for INT, FLOAT
    (its float bits) and BOOLEAN (0/1), else 8 (hashLong; DOUBLE by its bits); STRING hashes
    its UTF-8 bytes (0 here)."""
    if argument is SqlType.STRING:
        return 0
    if argument in (SqlType.INT, SqlType.FLOAT, SqlType.BOOLEAN):
        return 4
    return 8


# ---------------------------------------------------------------------------------------
# Greenwald-Khanna quantile summary

QUANTILE_DEFAULT_ACCURACY = 10000  # Spark's ApproximatePercentile.DEFAULT_PERCENTILE_ACCURACY
QUANTILE_MAX_ACCURACY = 2**31 - 1  # Spark: accuracy must be at most Int.MaxValue


def quantile_relative_error(accuracy: int) -> float:
    """eps = 1 / accuracy, checked as Spark checks APPROX_PERCENTILE's accuracy."""
    if not isinstance(accuracy, (int, np.integer)) or isinstance(accuracy, bool):
        raise PlanError(f"APPROX_PERCENTILE: accuracy must be an integer literal, got {accuracy!r}")
    if not 0 < accuracy <= QUANTILE_MAX_ACCURACY:
        raise PlanError(
            f"APPROX_PERCENTILE: accuracy must be in [1, {QUANTILE_MAX_ACCURACY}], got {accuracy}"
        )
    return 1.0 / float(accuracy)


def check_percentages(percentages: float | tuple[float, ...]) -> tuple[float, ...]:
    """The requested percentages as a tuple, each a number in [0, 1] (a PlanError else)."""
    values = percentages if isinstance(percentages, (tuple, list)) else (percentages,)
    if not values:
        raise PlanError("APPROX_PERCENTILE: the percentage array must not be empty")
    for p in values:
        if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0.0 <= p <= 1.0:
            raise PlanError(f"APPROX_PERCENTILE: percentage must be in [0, 1], got {p!r}")
    return tuple(float(p) for p in values)


# ---------------------------------------------------------------------------------------
# State kinds (declared, not yet planned: every backend refuses VARIABLE kinds through
# `require_fixed` until the holistic path wires them in)


def _sketch_kind(name: str, doc: str, dtype: type) -> StateKind:
    """A sketch's state kind: variable-size cells of `dtype`, merged by the sketch's own
    kernels (runtime/cpu/sketch_*.py), so no fixed parts, neutral or per-part faces."""
    return register_state(
        StateKind(
            name=name,
            doc=doc,
            parts=(),
            storage=lambda _accumulator: np.dtype(dtype),
            neutral=lambda _dtype: (),
            lift=None,
            combine=None,
            scalar_combine=None,
            cuda=None,
            arrow=None,
            algebraic=True,
            layout=Layout.VARIABLE,
        )
    )


HLL = _sketch_kind(
    "HLL",
    "HyperLogLog++ registers: 2^p uint8 per cell, p from the call's rsd; merge = element-wise "
    "max (runtime/cpu/sketch_hll.py). Fixed-size for a given p, but p is a parameter of the "
    "call, so the kind declares no fixed parts.",
    np.uint8,
)

GK_QUANTILE = _sketch_kind(
    "GK_QUANTILE",
    "Greenwald-Khanna summary per cell: (count, samples of (value, g, delta)), a variable "
    "number of samples; merge = Spark's QuantileSummaries.merge "
    "(runtime/cpu/sketch_quantile.py).",
    np.float64,
)


# ---------------------------------------------------------------------------------------
# The SQL functions. Both lift the argument's values through the holistic VALUES kind (order
# key and validity per tuple, decoded back to the value); the window operator folds them
# into one sketch per (key, pane) at once and keeps no raw value (docs/sketches.md). The
# call's parameter (rsd, accuracy) travels on the aggregate (`AggregatePlan.parameter`).


def _approx_percentile_type(argument: SqlType | None) -> SqlType | None:
    return argument if argument is not None and argument.is_numeric else None


def _bigint(argument: SqlType | None) -> SqlType | None:
    return SqlType.BIGINT if argument is not None and argument.is_numeric else None


def _finalize_approx_percentile(xp, count, value, result_type):  # noqa: ANN001, ANN202
    """The sketch's answer, a double; an integer argument's answer is the double cast back
    as Spark's PercentileDigest does (`toLong`: Java's cast, which saturates, so BIGINT
    values beyond 2^53 come back rounded through the double); NULL over no non-NULL value."""
    answer = value[0]
    empty = count == 0
    if result_type.is_integer:
        answer = xp.where(empty, 0.0, answer)
        top = answer >= 2.0**63  # 2^63 - 1 rounds up to 2^63 as a double
        answer = xp.where(top, 0.0, answer).astype(xp.int64)
        answer = xp.where(top, xp.int64(2**63 - 1), answer)
    if not bool(empty.any()):
        return answer, None
    return xp.where(empty, 0, answer), empty


def _finalize_approx_count_distinct(xp, count, value, result_type):  # noqa: ANN001, ANN202
    return value[0], None  # 0 for a window without a non-NULL value (Spark's too)


_VALUES = StateUse(VALUES, lambda argument: argument)
register_aggregate(
    Aggregate(
        key="APPROX_COUNT_DISTINCT",
        display="APPROX_COUNT_DISTINCT",
        names=("APPROX_COUNT_DISTINCT",),
        sqlglot_classes=(exp.ApproxDistinct,),
        result_type=_bigint,
        accepts="numeric",
        state=_VALUES,
        finalize=_finalize_approx_count_distinct,
        spark_name="approx_count_distinct",
        holistic=Holistic("approx_count_distinct"),
    )
)
register_aggregate(
    Aggregate(
        key="APPROX_PERCENTILE",
        display="APPROX_PERCENTILE",
        names=("APPROX_PERCENTILE", "PERCENTILE_APPROX"),
        sqlglot_classes=(exp.ApproxQuantile,),
        result_type=_approx_percentile_type,
        accepts="numeric",
        state=_VALUES,
        finalize=_finalize_approx_percentile,
        spark_name="percentile_approx",
        # sqlglot's default dialect reads both names as anonymous calls
        parse_names=("APPROX_PERCENTILE", "PERCENTILE_APPROX"),
        # rank error 0 meets any accuracy: the planner may select exactly over raw values
        holistic=Holistic("approx_percentile", exact="percentile_disc"),
    )
)
