"""The sketches against Spark itself (batch, local Spark): approx_count_distinct equal to
Spark's wherever the estimate rule is Spark's (linear counting, E >= 5 m) and within one
half a standard deviation in the band where Spark subtracts its table bias; percentile_approx
equal to Spark's for a summary built in one partition (the same GK samples), within the
rank bound when Spark merges partials of several partitions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pyspark.sql import functions as F

from mangonel.aggregates import sketches
from mangonel.catalog.types import SqlType
from mangonel.runtime.cpu import sketch_hll as hll
from mangonel.runtime.cpu import sketch_quantile as gk

pytestmark = pytest.mark.spark


def _hll_rule(registers: np.ndarray, p: int) -> str:
    """Which branch of the estimate a register set takes: 'spark' where it is Spark's
    formula, 'band' where Spark would subtract its table bias."""
    m = 1 << p
    e = sketches.hll_alpha_m2(p) / np.sum(2.0 ** -registers.astype(float))
    zeros = int((registers == 0).sum())
    if zeros and (m * math.log(m / zeros) <= sketches.hll_threshold(p) or e <= 2.5 * m):
        return "spark"
    return "band" if e < 5 * m else "spark"


@pytest.mark.parametrize(
    ("sql_type", "rsd"), [("bigint", 0.05), ("int", 0.05), ("double", 0.02), ("string", 0.05)]
)
def test_approx_count_distinct_equals_spark(spark, sql_type, rsd):
    p = sketches.hll_precision(rsd)
    m = 1 << p
    rng = np.random.default_rng(21)
    # groups whose cardinalities sweep linear counting, the bias band and beyond
    cardinalities = [0, 1, 3, 40, 300, m, 2 * m, 3 * m, 4 * m, 6 * m, 20 * m]
    groups, values = [], []
    for g, n in enumerate(cardinalities):
        distinct = rng.integers(-(2**31), 2**31, n)
        drawn = distinct[rng.integers(0, n, 2 * n)] if n else distinct
        column = np.concatenate([distinct, drawn])
        groups.append(np.full(column.shape[0], g))
        values.append(column)
    group = np.concatenate(groups)
    value = np.concatenate(values)
    python = {
        "bigint": value.tolist(),
        "int": value.tolist(),
        "double": (value / 7.0).tolist(),
        "string": [f"s{v}" for v in value.tolist()],
    }[sql_type]
    frame = spark.createDataFrame(
        list(zip(group.tolist(), python, strict=True)), f"g int, v {sql_type}"
    ).repartition(3)
    expected = dict(frame.groupBy("g").agg(F.approx_count_distinct("v", rsd).alias("c")).collect())
    if sql_type == "string":
        encoded = [s.encode() for s in python]
        offsets = np.cumsum([0] + [len(b) for b in encoded])
        hashes = hll.hash_strings(offsets, np.frombuffer(b"".join(encoded), np.uint8))
        registers = hll.build(group, len(cardinalities), hashes, None, None, p)
    else:
        argument = {"bigint": SqlType.BIGINT, "int": SqlType.INT, "double": SqlType.DOUBLE}
        column = np.asarray(python, dtype=float if sql_type == "double" else np.int64)
        registers = hll.build(group, len(cardinalities), column, None, argument[sql_type], p)
    got = hll.estimate(registers, p)
    rules = [_hll_rule(registers[g], p) for g in range(len(cardinalities))]
    assert rules.count("band") >= 2 and rules.count("spark") >= 8  # both branches are checked
    for g, n in enumerate(cardinalities):
        spark_count = expected.get(g, 0)
        if rules[g] == "spark":
            assert got[g] == spark_count, (g, n, got[g], spark_count)
        else:
            # the two bias corrections differ by < 0.15 standard deviations on these groups
            assert abs(got[g] - spark_count) <= 0.5 * sketches.hll_true_rsd(p) * n, (g, n)


def _spark_percentiles(spark, data, percentages, accuracy, partitions, sql_type="double"):
    frame = spark.createDataFrame([(x,) for x in data], f"v {sql_type}")
    frame = frame.coalesce(1) if partitions == 1 else frame.repartition(partitions)
    row = frame.agg(F.percentile_approx("v", list(percentages), accuracy).alias("r")).collect()
    return row[0].r


PERCENTAGES = (0.0, 0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 1.0)


@pytest.mark.parametrize("accuracy", [100, 1000, 10000])
def test_percentile_approx_equals_spark_in_one_partition(spark, accuracy):
    rng = np.random.default_rng(accuracy)
    eps = sketches.quantile_relative_error(accuracy)
    for data in (
        rng.normal(size=20_000),
        rng.integers(0, 30, 20_000).astype(float),  # ties
        np.concatenate([rng.lognormal(size=5000), [math.inf, -math.inf, math.nan]]),
    ):
        expected = _spark_percentiles(spark, data.tolist(), PERCENTAGES, accuracy, 1)
        summary = gk.build(np.zeros(data.shape[0], np.int64), 1, data, None, eps)
        got = gk.query(summary, PERCENTAGES)[0].tolist()
        assert [str(x) for x in got] == [str(float(x)) for x in expected]


def test_percentile_approx_of_an_int_column_is_an_int(spark):
    data = [5, 1, 3, 3, 9, 2]
    expected = _spark_percentiles(spark, data, (0.0, 0.25, 0.5, 0.75, 1.0), 10000, 1, "int")
    summary = gk.build(np.zeros(6, np.int64), 1, np.array(data), None, 1e-4)
    got = gk.query(summary, (0.0, 0.25, 0.5, 0.75, 1.0))[0].astype(np.int64).tolist()
    assert got == expected == [1, 2, 3, 5, 9]


def test_percentile_approx_merged_across_partitions_within_the_bound(spark):
    rng = np.random.default_rng(31)
    accuracy, n = 500, 120_000
    eps = 1.0 / accuracy
    data = rng.normal(size=n)
    expected = _spark_percentiles(spark, data.tolist(), PERCENTAGES, accuracy, 6)
    parts = rng.integers(0, 6, n)
    window = gk.merge_groups(gk.build(parts, 6, data, None, eps), np.arange(6), np.array([0, 6]))
    got = gk.query(window, PERCENTAGES)[0]
    ordered = np.sort(data)
    bound = math.floor(eps * n + 0.5)
    for p, mine, theirs in zip(PERCENTAGES, got, expected, strict=True):
        target = max(math.ceil(p * n), 1)
        for answer in (mine, theirs):
            rank = int(np.searchsorted(ordered, answer)) + 1
            assert abs(rank - target) <= bound, (p, answer)
