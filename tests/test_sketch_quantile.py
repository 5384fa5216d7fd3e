"""Greenwald-Khanna quantile summaries (APPROX_PERCENTILE's sketch,
runtime/cpu/sketch_quantile.py): exact answers while nothing is compressed, rank error
<= _bound(eps, n) across distributions, accuracies, per-cell builds and merges of many summaries,
p = 0 and 1, duplicates, NaN and infinities in Spark's order, snapshots. Equality with
Spark's percentile_approx is in tests/spark/test_spark_sketches.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mangonel.aggregates import Layout, sketches, state_kind
from mangonel.errors import PlanError
from mangonel.runtime.cpu import sketch_quantile as gk

PERCENTAGES = (0.0, 1e-5, 0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 1.0)


def _one(values: np.ndarray, eps: float) -> gk.QuantileSketches:
    return gk.build(np.zeros(len(values), np.int64), 1, np.asarray(values, float), None, eps)


def _rank_errors(data: np.ndarray, answers: np.ndarray, percentages) -> list[float]:
    """For each answer, the distance from the requested rank ceil(p n) (at least 1) to the
    ranks the answer occupies in the data ([#below + 1, #below-or-equal]), NaN largest."""
    ordered = np.sort(data)  # NaN last, as in the sketch
    n = ordered.shape[0]
    errors = []
    for p, x in zip(percentages, answers, strict=True):
        target = max(math.ceil(p * n), 1)
        if math.isnan(x):
            first = int(np.searchsorted(ordered, np.inf, side="right")) + 1
            last = n
        else:
            first = int(np.searchsorted(ordered, x, side="left")) + 1
            last = int(np.searchsorted(ordered, x, side="right"))
        assert first <= last, f"answer {x} is not one of the values"
        errors.append(
            0 if first <= target <= last else min(abs(target - first), abs(target - last))
        )
    return errors


def _bound(eps: float, n: int) -> int:
    """The rank error Spark's GK summary guarantees: eps * n rounded to the nearest rank. Its
    invariant is g + delta <= 1 + floor(2 eps n) (a fresh sample has g = 1 on top of delta =
    floor(2 eps i)), and a query answers within max(g + delta) // 2 ranks."""
    return math.floor(eps * n + 0.5)


def _distributions(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "uniform": rng.random(n),
        "normal": rng.normal(size=n),
        "lognormal": rng.lognormal(0, 3, n),
        "few distinct (ties)": rng.integers(0, 7, n).astype(float),
        "zipf": np.minimum(rng.zipf(1.3, n), 10**9).astype(float),
        "ascending": np.arange(n, dtype=float),
        "descending": np.arange(n, 0, -1, dtype=float),
        "constant": np.full(n, 4.5),
    }


def test_parameters_are_checked_as_spark_checks_them():
    assert sketches.quantile_relative_error(10000) == 1e-4
    for bad in (0, -5, 2**31, 1.5, True):
        with pytest.raises(PlanError, match="accuracy"):
            sketches.quantile_relative_error(bad)
    assert sketches.check_percentages(0.5) == (0.5,)
    for bad in (-0.1, 1.01, math.nan, (), "0.5"):
        with pytest.raises(PlanError, match="percentage"):
            sketches.check_percentages(bad)
    assert state_kind("GK_QUANTILE").layout is Layout.VARIABLE


def test_small_sets_are_exact_percentile_disc():
    # while floor(2 eps n) = 0 nothing compresses: the answer is sorted[ceil(p n) - 1]
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 10, 999, 4999):
        data = rng.normal(size=n)
        got = gk.query(_one(data, 1e-4), PERCENTAGES)[0]
        ordered = np.sort(data)
        expected = [ordered[max(math.ceil(p * n) - 1, 0)] for p in PERCENTAGES]
        assert got.tolist() == expected, n


@pytest.mark.parametrize("eps", [1e-2, 1e-3, 1e-4])
def test_rank_error_within_eps_n_across_distributions(eps):
    rng = np.random.default_rng(int(1 / eps))
    n = 200_000
    for name, data in _distributions(n, rng).items():
        sketch = _one(data, eps)
        errors = _rank_errors(data, gk.query(sketch, PERCENTAGES)[0], PERCENTAGES)
        assert max(errors) <= _bound(eps, n), (name, errors)
        # and it is a sketch: far fewer samples than values once compression pays
        if eps >= 1e-3 and name not in ("constant", "few distinct (ties)"):
            assert sketch.values.shape[0] < n / 10, name


@pytest.mark.parametrize("eps", [1e-2, 1e-3])
def test_merging_many_pane_summaries_keeps_the_bound(eps):
    # a window of 100 panes of 3000 values each, merged in order, in reverse and as a tree
    rng = np.random.default_rng(7)
    panes, per_pane = 100, 3000
    for name, data in _distributions(panes * per_pane, rng).items():
        pane = rng.integers(0, panes, data.shape[0])
        summaries = gk.build(pane, panes, data, None, eps)
        assert summaries.counts.sum() == data.shape[0]
        orders = [np.arange(panes), np.arange(panes)[::-1], rng.permutation(panes)]
        for order in orders:
            window = gk.merge_groups(summaries, order, np.array([0, panes]))
            errors = _rank_errors(data, gk.query(window, PERCENTAGES)[0], PERCENTAGES)
            assert max(errors) <= _bound(eps, data.shape[0]), (name, errors)
        tens = gk.merge_groups(summaries, np.arange(panes), np.arange(0, panes + 1, 10))
        tree = gk.merge_groups(tens, np.arange(10), np.array([0, 10]))
        errors = _rank_errors(data, gk.query(tree, PERCENTAGES)[0], PERCENTAGES)
        assert max(errors) <= _bound(eps, data.shape[0]), (name, "tree", errors)


def test_sliding_windows_over_panes_and_a_pane_grown_by_batches():
    rng = np.random.default_rng(11)
    eps, panes = 1e-3, 20
    pane = rng.integers(0, panes, 400_000)
    data = rng.lognormal(size=pane.shape[0])
    summaries = gk.build(pane, panes, data, None, eps)
    size = 5
    members = np.concatenate([np.arange(s, s + size) for s in range(panes - size + 1)])
    offsets = np.arange(0, members.shape[0] + 1, size)
    windows = gk.merge_groups(summaries, members, offsets)
    answers = gk.query(windows, PERCENTAGES)
    for s in range(panes - size + 1):
        inside = data[(pane >= s) & (pane < s + size)]
        assert max(_rank_errors(inside, answers[s], PERCENTAGES)) <= _bound(eps, inside.shape[0])
    # a pane that receives three batches: its summary is merged with each batch's
    batches = np.array_split(data, 3)
    pane_summary = _one(batches[0], eps)
    for batch in batches[1:]:
        both = gk.concat(pane_summary, _one(batch, eps))
        pane_summary = gk.merge_groups(both, np.array([0, 1]), np.array([0, 2]))
    assert pane_summary.counts.tolist() == [data.shape[0]]
    errors = _rank_errors(data, gk.query(pane_summary, PERCENTAGES)[0], PERCENTAGES)
    assert max(errors) <= _bound(eps, data.shape[0])


def test_exact_merges_commute_and_associate_and_empty_is_neutral():
    # while nothing compresses a merge is the sorted union, whatever the order or grouping
    rng = np.random.default_rng(12)
    pane = rng.integers(0, 6, 600)
    data = rng.integers(0, 50, 600).astype(float)
    summaries = gk.build(pane, 7, data, None, 1e-4)  # cell 6 stays empty
    assert summaries.counts[6] == 0
    whole = _one(data, 1e-4).samples(0)
    for order in (np.arange(7), np.arange(7)[::-1], rng.permutation(7)):
        assert gk.merge_groups(summaries, order, np.array([0, 7])).samples(0) == whole
    left = gk.merge_groups(summaries, np.array([0, 1, 2, 3, 4, 5]), np.array([0, 2, 4, 6]))
    regrouped = gk.merge_groups(left, np.array([2, 0, 1]), np.array([0, 3]))
    assert regrouped.samples(0) == whole
    alone = gk.merge_groups(summaries, np.array([6, 3, 6]), np.array([0, 3]))
    assert alone.samples(0) == summaries.samples(3)


def test_approximate_merges_commute_within_the_bound():
    # once compression starts, merge orders give different samples but every order answers
    # within eps * n
    rng = np.random.default_rng(13)
    eps = 1e-2
    data = rng.normal(size=50_000)
    summaries = gk.build(rng.integers(0, 3, data.shape[0]), 3, data, None, eps)
    for order in ([0, 1, 2], [2, 1, 0], [1, 2, 0]):
        window = gk.merge_groups(summaries, np.array(order), np.array([0, 3]))
        errors = _rank_errors(data, gk.query(window, PERCENTAGES)[0], PERCENTAGES)
        assert max(errors) <= _bound(eps, data.shape[0])


def test_nulls_skipped_and_empty_cells_answer_null():
    values = np.array([5.0, 1.0, 9.0, 3.0])
    valid = np.array([True, False, True, False])
    summaries = gk.build(np.array([0, 0, 0, 2]), 3, values, valid, 1e-4)
    assert summaries.counts.tolist() == [2, 0, 0]
    answers = gk.query(summaries, (0.0, 0.5, 1.0))
    assert answers[0].tolist() == [5.0, 5.0, 9.0]
    assert np.isnan(answers[1:]).all()


def test_nan_and_infinities_sort_as_in_spark():
    # Spark orders NaN above +inf: percentile_approx([1, NaN, 2, inf, 3], [0, .5, .8, 1])
    # = [1, 3, inf, NaN] (pyspark 4)
    got = gk.query(_one(np.array([1.0, math.nan, 2.0, math.inf, 3.0]), 1e-4), (0, 0.5, 0.8, 1))
    assert got[0].tolist()[:3] == [1.0, 3.0, math.inf] and math.isnan(got[0][3])
    got = gk.query(_one(np.array([1.0, -math.inf, 2.0, math.inf, 3.0]), 1e-4), (0, 0.5, 0.8, 1))
    assert got[0].tolist() == [-math.inf, 2.0, 3.0, math.inf]
    # NaN stays last through merges of compressed summaries too
    rng = np.random.default_rng(14)
    data = np.concatenate([rng.normal(size=30_000), np.full(3000, math.nan), [math.inf] * 10])
    rng.shuffle(data)
    summaries = gk.build(rng.integers(0, 4, data.shape[0]), 4, data, None, 1e-3)
    window = gk.merge_groups(summaries, np.arange(4), np.array([0, 4]))
    numbers = window.values[~np.isnan(window.values)]
    assert np.all(numbers[:-1] <= numbers[1:])
    assert np.isnan(window.values[-1]) and not np.isnan(window.values[0])
    answers = gk.query(window, PERCENTAGES)[0]
    assert max(_rank_errors(data, answers, PERCENTAGES)) <= _bound(1e-3, data.shape[0])


def test_snapshot_round_trip_and_concat_checks():
    rng = np.random.default_rng(15)
    summaries = gk.build(rng.integers(0, 9, 40_000), 9, rng.normal(size=40_000), None, 1e-3)
    restored = gk.QuantileSketches.from_bytes(summaries.to_bytes())
    assert restored.eps == summaries.eps
    for name in ("counts", "offsets", "values", "g", "delta"):
        assert np.array_equal(getattr(restored, name), getattr(summaries, name))
    assert np.array_equal(gk.query(restored, PERCENTAGES), gk.query(summaries, PERCENTAGES))
    with pytest.raises(ValueError, match="trailing"):
        gk.QuantileSketches.from_bytes(summaries.to_bytes() + b"\0")
    with pytest.raises(ValueError, match="shorter"):
        gk.QuantileSketches.from_bytes(summaries.to_bytes()[:-8])
    damaged = bytearray(summaries.to_bytes())
    damaged[24 + 8 * 9 + 8 + 6] = 0x7F  # offsets[1] far past the samples
    with pytest.raises(ValueError, match="offsets"):
        gk.QuantileSketches.from_bytes(bytes(damaged))
    with pytest.raises(ValueError, match="relative errors"):
        gk.concat(summaries, _one(np.ones(3), 1e-2))
    with pytest.raises(ValueError, match="cell ids"):
        gk.build(np.array([0, 3]), 3, np.ones(2), None, 1e-3)
    with pytest.raises(ValueError, match="members"):
        gk.merge_groups(summaries, np.array([0, 9]), np.array([0, 2]))
    with pytest.raises(ValueError, match="offsets"):
        gk.merge_groups(summaries, np.array([0, 1]), np.array([1, 2]))
    with pytest.raises(ValueError, match="relative error"):
        gk.build(np.array([0]), 1, np.ones(1), None, 0.0)


@pytest.mark.parametrize("eps", [1e-4, 1e-2, 0.3])
def test_the_two_run_merge_equals_the_merge_tree(eps):
    """Two summaries merge by `_merge_two` (a pane's summary with a batch's, a window's
    prefix with its suffix); it must place and weigh every sample as the general merge tree
    does: ties (the second run first), NaN, runs wholly before or after the other, empty."""
    rng = np.random.default_rng(int(1 / eps))
    for trial in range(40):
        sizes = rng.integers(0, 300, 2)
        values = rng.integers(-20, 20, int(sizes.sum())).astype(np.float64)
        if trial % 4 == 0:
            values[::5] = np.nan
        if trial % 4 == 1:
            values[sizes[0] :] += 100.0  # the second run wholly after the first
        cells = np.repeat(np.arange(2), sizes)
        s = gk.build(cells, 2, values, None, eps)
        los, his = s.offsets[:2].copy(), s.offsets[1:].copy()
        weights = np.floor(2.0 * eps * s.counts).astype(np.int64)
        total = int(his[-1])
        tree = [np.empty(total, t) for t in (np.float64, np.int64, np.int64)]
        two = [np.empty(total, t) for t in (np.float64, np.int64, np.int64)]
        end = gk._merge_runs(s.values, s.g, s.delta, los, his, weights, *tree, 0)
        end_two = gk._merge_two(
            s.values,
            s.g,
            s.delta,
            los[0],
            his[0],
            weights[0],
            los[1],
            his[1],
            weights[1],
            *two,
            0,
        )
        assert end == end_two == total
        assert np.array_equal(tree[0], two[0], equal_nan=True)
        assert np.array_equal(tree[1], two[1]) and np.array_equal(tree[2], two[2])
