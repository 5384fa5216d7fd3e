"""HyperLogLog++ (APPROX_COUNT_DISTINCT's sketch, runtime/cpu/sketch_hll.py): Spark's hash
bit for bit, the precision rule, statistical error bounds over many seeds and cardinalities
1..1e6, per-cell builds, merges and snapshots. Equality with Spark's approx_count_distinct
itself is in tests/spark/test_spark_sketches.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mangonel.aggregates import Layout, sketches, state_kind
from mangonel.catalog.types import SqlType
from mangonel.errors import PlanError
from mangonel.runtime.cpu import sketch_hll as hll

# Spark 4's xxhash64(v) (seed 42) for these values, taken from pyspark (F.xxhash64); the same
# hash is what its HyperLogLogPlusPlus feeds the registers.
SPARK_XXHASH64 = {
    SqlType.BIGINT: (
        [0, 1, -1, 2**62, -(2**63), 123456789012],
        [
            -5252525462095825812,
            -7001672635703045582,
            3858142552250413010,
            8973626371093010265,
            -8619748838626508300,
            3056854389786727671,
        ],
    ),
    SqlType.INT: (
        [0, 1, -1, 2**31 - 1, -(2**31)],
        [
            3614696996920510707,
            -6698625589789238999,
            2017008487422258757,
            1508894993788531228,
            2073849959933241805,
        ],
    ),
    SqlType.DOUBLE: (
        [0.0, -0.0, 1.5, math.nan, math.inf, -3.25e100],
        [
            -5252525462095825812,
            -5252525462095825812,
            7738255526519901366,
            -3127944061524951246,
            5810986238603807492,
            -8993662018957006184,
        ],
    ),
    SqlType.FLOAT: (
        [0.0, -0.0, 1.5, math.nan, -math.inf],
        [
            3614696996920510707,
            3614696996920510707,
            6163473420726370430,
            2692338816207849720,
            -7580553461823983095,
        ],
    ),
    SqlType.BOOLEAN: ([1, 0], [-6698625589789238999, 3614696996920510707]),
}
SPARK_STRINGS = (
    ["", "a", "héllo wörld", "x" * 31, "y" * 32, "z" * 33, "0123456789" * 7 + "é"],
    [
        -7444071767201028348,
        -8582455328737087284,
        7620070002295215535,
        -1716462135722163746,
        5202031258905353636,
        -8411362631970189001,
        -1188045630034086285,
    ],
)


def _string_column(strings: list[str]) -> tuple[np.ndarray, np.ndarray]:
    encoded = [s.encode() for s in strings]
    offsets = np.cumsum([0] + [len(b) for b in encoded])
    return offsets, np.frombuffer(b"".join(encoded), np.uint8)


@pytest.mark.parametrize("argument", list(SPARK_XXHASH64), ids=str)
def test_hash_is_sparks_xxhash64(argument):
    values, expected = SPARK_XXHASH64[argument]
    dtype = np.float32 if argument is SqlType.FLOAT else None
    got = hll.hash_values(np.array(values, dtype=dtype), argument).view(np.int64)
    assert got.tolist() == expected


def test_string_hash_is_sparks_xxhash64_over_utf8():
    # lengths 0..71 cover the 1-, 4-, 8-byte tails and the 32-byte stripes
    strings, expected = SPARK_STRINGS
    assert hll.hash_strings(*_string_column(strings)).view(np.int64).tolist() == expected


def test_precision_follows_sparks_formula_and_rejects_bad_rsd():
    assert sketches.hll_precision(0.05) == 9  # Spark's default: 512 registers
    assert sketches.hll_precision(0.01) == 14
    assert sketches.hll_precision(0.39) == 4
    for bad in (0.4, 0.0, -0.1, math.nan, math.inf, "0.05", True):
        with pytest.raises(PlanError, match="rsd"):
            sketches.hll_precision(bad)
    with pytest.raises(PlanError, match="p = 18"):
        sketches.hll_precision(0.0001)


def test_state_kind_is_declared_variable_and_refused_by_backends():
    kind = state_kind("HLL")
    assert kind.layout is Layout.VARIABLE and kind.algebraic
    from mangonel.aggregates import require_fixed

    with pytest.raises(PlanError, match="variable-size"):
        require_fixed(kind, "the CPU backend")


def _estimate_of(values: np.ndarray, argument: SqlType, p: int) -> int:
    registers = hll.build(np.zeros(values.shape[0], np.int64), 1, values, None, argument, p)
    return int(hll.estimate(registers, p)[0])


def test_tiny_sets_are_counted_exactly():
    # linear counting rounds to the exact count while no two values share a register
    for n in range(0, 9):
        assert _estimate_of(np.arange(n) * 7919 + 3, SqlType.BIGINT, 9) == n


@pytest.mark.parametrize("rsd", [0.05, 0.02])
def test_relative_error_within_three_rsd_over_seeds_and_cardinalities(rsd):
    p = sketches.hll_precision(rsd)
    cardinalities = [1, 2, 10, 100, 500, 1000, 2000, 5000, 10_000, 100_000, 1_000_000]
    errors = []
    for n in cardinalities:
        for seed in range(8 if n < 1_000_000 else 3):
            rng = np.random.default_rng(seed * 1000 + n)
            distinct = rng.integers(-(2**62), 2**62, n)  # collisions ~ n^2 / 2^63: none
            values = distinct[rng.integers(0, n, 2 * n)]  # duplicates must not count
            values = np.concatenate([distinct, values])
            got = _estimate_of(values, SqlType.BIGINT, p)
            error = (got - n) / n
            assert abs(error) <= 3 * rsd, (n, seed, got)
            if n >= 1000:
                errors.append(error)
    # over many draws the error has the sketch's standard deviation (1.04 / sqrt(m)), not
    # merely the 3-sigma bound: an unmixed hash or a wrong estimator shows up here
    assert np.sqrt(np.mean(np.square(errors))) <= 1.3 * sketches.hll_true_rsd(p)
    assert abs(np.mean(errors)) <= sketches.hll_true_rsd(p)


def test_no_bias_where_spark_subtracts_its_table_bias():
    # between linear counting and E = 5 m Spark corrects E with the HLL++ tables; the raw E
    # overestimates there by ~3 standard deviations near n = 2.5 m (p = 14), Ertl's estimator
    # that replaces the tables must not
    p = 14
    m = 1 << p
    rsd = sketches.hll_true_rsd(p)
    for factor in (2.5, 3.0, 4.0):
        n = int(factor * m)
        errors = []
        for seed in range(16):
            values = np.random.default_rng(seed * 31 + n).integers(-(2**62), 2**62, n)
            errors.append((_estimate_of(values, SqlType.BIGINT, p) - n) / n)
        assert abs(np.mean(errors)) <= rsd / 2, (factor, np.mean(errors))
        assert max(abs(e) for e in errors) <= 3 * rsd


def test_doubles_and_strings_count_their_distinct_values():
    rng = np.random.default_rng(5)
    doubles = rng.normal(size=20_000)
    # -0.0 and 0.0 are one value, every NaN is one value (Spark's normalisation)
    with_zeros = np.concatenate([doubles, [0.0, -0.0, math.nan, -math.nan]])
    got = _estimate_of(with_zeros, SqlType.DOUBLE, 12)
    assert abs(got - 20_002) <= 3 * sketches.hll_true_rsd(12) * 20_002
    assert _estimate_of(np.array([0.0, -0.0, math.nan, math.nan]), SqlType.DOUBLE, 9) == 2
    offsets, data = _string_column([f"user-{i % 3000}" for i in range(9000)])
    hashes = hll.hash_strings(offsets, data)
    registers = hll.build(np.zeros(9000, np.int64), 1, hashes, None, None, 9)
    assert abs(hll.estimate(registers, 9)[0] - 3000) <= 3 * 0.05 * 3000


def test_cells_are_built_independently_in_one_pass_and_nulls_skipped():
    rng = np.random.default_rng(2)
    n, cells = 200_000, 50
    cell = rng.integers(0, cells, n)
    values = rng.integers(0, 10**12, n)
    valid = rng.random(n) > 0.1
    registers = hll.build(cell, cells, values, valid, SqlType.BIGINT, 9)
    for c in (0, 17, 49):
        alone = hll.build(np.zeros(0, np.int64), 1, np.zeros(0, np.int64), None, SqlType.BIGINT, 9)
        hll.update(
            alone,
            np.zeros(int((cell == c).sum()), np.int64),
            values[cell == c],
            valid[cell == c],
            SqlType.BIGINT,
            9,
        )
        assert np.array_equal(registers[c], alone[0])
    # a cell that saw only NULLs is empty: estimate 0 (COUNT DISTINCT of nothing)
    empty = hll.build(np.zeros(3, np.int64), 2, np.arange(3), np.zeros(3, bool), SqlType.INT, 9)
    assert hll.estimate(empty, 9).tolist() == [0, 0]


def test_merge_is_the_sketch_of_the_union_in_any_order_and_grouping():
    rng = np.random.default_rng(3)
    n, panes = 100_000, 12
    pane = rng.integers(0, panes, n)
    values = rng.integers(0, 40_000, n)
    per_pane = hll.build(pane, panes, values, None, SqlType.BIGINT, 10)
    whole = hll.build(np.zeros(n, np.int64), 1, values, None, SqlType.BIGINT, 10)
    order = rng.permutation(panes)
    merged = hll.merge_groups(per_pane, order, np.array([0, panes]))
    assert np.array_equal(merged[0], whole[0])
    # ((a b) c) == (a (b c)): merge pairs first, then the pairs
    pairs = hll.merge_groups(per_pane, np.arange(panes), np.arange(0, panes + 1, 2))
    regrouped = hll.merge_groups(pairs, np.arange(panes // 2)[::-1], np.array([0, panes // 2]))
    assert np.array_equal(regrouped[0], whole[0])
    # sliding windows of 4 panes, as a window operator would ask for them, and an empty one
    members = np.concatenate([np.arange(s, s + 4) for s in range(panes - 3)])
    offsets = np.concatenate([np.arange(0, members.shape[0] + 1, 4), [members.shape[0]]])
    windows = hll.merge_groups(per_pane, members, offsets)
    for s in range(panes - 3):
        inside = np.isin(pane, np.arange(s, s + 4))
        expected = hll.build(
            np.zeros(inside.sum(), np.int64), 1, values[inside], None, SqlType.BIGINT, 10
        )
        assert np.array_equal(windows[s], expected[0])
    assert hll.estimate(windows[-1:], 10).tolist() == [0]


def test_snapshot_round_trip():
    rng = np.random.default_rng(4)
    registers = hll.build(
        rng.integers(0, 7, 5000), 7, rng.normal(size=5000), None, SqlType.DOUBLE, 11
    )
    restored, p = hll.from_bytes(hll.to_bytes(registers, 11))
    assert p == 11 and np.array_equal(restored, registers)
    with pytest.raises(ValueError, match="multiple"):
        hll.from_bytes(hll.to_bytes(registers, 11)[:-1])


def test_bad_arguments_are_refused_clearly():
    with pytest.raises(TypeError, match="hash_strings"):
        hll.hash_values(np.arange(3), SqlType.STRING)
    with pytest.raises(ValueError, match="p = 9"):
        hll.estimate(hll.new_registers(2, 10), 9)
    # numba checks no bounds: ids outside the arrays are refused before any kernel runs
    with pytest.raises(ValueError, match="cell ids"):
        hll.build(np.array([0, 2]), 2, np.arange(2), None, SqlType.BIGINT, 9)
    with pytest.raises(ValueError, match="cell ids and validities"):
        hll.build(np.array([0]), 2, np.arange(2), None, SqlType.BIGINT, 9)
    with pytest.raises(ValueError, match="uint8"):
        hll.update(hll.new_registers(2, 9), np.array([0]), np.arange(1), None, SqlType.BIGINT, 10)
    registers = hll.new_registers(3, 9)
    with pytest.raises(ValueError, match="members"):
        hll.merge_groups(registers, np.array([0, 3]), np.array([0, 2]))
    with pytest.raises(ValueError, match="offsets"):
        hll.merge_groups(registers, np.array([0, 1]), np.array([0, 3]))
    with pytest.raises(ValueError, match="precision"):
        hll.from_bytes(bytes([30]) + bytes(8))
