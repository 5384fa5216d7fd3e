"""The CPU's percentile selection over sorted runs in a band narrowed by sampling
(`holistic._band_pair` over `_narrow`, rows of at least `BAND_FROM` values): the values at
both positions equal those of the sorted values, with ties, few runs and many, p = 0 and 1,
arrays of p, and rows whose samples miss the band (runs of disjoint ranges: the ranges as
they stand are selected over)."""

from __future__ import annotations

import numpy as np
import pytest

from mangonel.runtime.cpu import holistic


def _rows(seed: int, rows: int, spread: int, disjoint: bool = False):  # noqa: ANN202
    """Rows of 1 .. 120 sorted runs of 0 .. 150 values each (a pane's run of one key), runs
    of ties where `spread` is small; `disjoint`: each run's values in a range of its own, so
    one sample per run estimates nothing about the others."""
    rng = np.random.default_rng(seed)
    pieces, starts, ends, firsts, counts = [], [], [], [], []
    at = 0
    for row in range(rows):
        runs = int(rng.integers(1, 121) if row % 4 else rng.integers(1, 4))
        firsts.append(len(starts))
        counts.append(runs)
        for run in range(runs):
            length = int(rng.integers(0, 151))
            values = rng.integers(-spread, spread + 1, length)
            if disjoint:
                values = values + run * 4 * spread
            pieces.append(np.sort(values))
            starts.append(at)
            at += length
            ends.append(at)
    values = np.concatenate(pieces).astype(np.int64)
    return (
        values,
        np.array(starts, np.int64),
        np.array(ends, np.int64),
        np.array(firsts, np.int64),
        np.array(counts, np.int64),
    )


def expected_percentiles(window: np.ndarray, evaluation: str, fractions) -> tuple[list, list]:  # noqa: ANN001
    """The values at the lower and higher positions of each p over `window` sorted (Spark's
    positions; 0 and 0 over no value)."""
    window = np.sort(window)
    lows, highs = [], []
    for p in fractions:
        if not len(window):
            lows.append(0)
            highs.append(0)
            continue
        if evaluation == "percentile_cont":
            position = p * (len(window) - 1)
            low, high = int(np.floor(position)), int(np.ceil(position))
        else:
            low = high = max(int(np.ceil(p * len(window))) - 1, 0)
        lows.append(window[low])
        highs.append(window[high])
    return lows, highs


def _expected(values, starts, ends, firsts, counts, evaluation, fractions):  # noqa: ANN001, ANN202
    """(n, lower, higher) of each row from its values sorted (Spark's positions)."""
    n, lower, higher = [], [], []
    for first, runs in zip(firsts, counts, strict=True):
        window = np.concatenate([values[starts[j] : ends[j]] for j in range(first, first + runs)])
        n.append(len(window))
        lows, highs = expected_percentiles(window, evaluation, fractions)
        lower.append(lows)
        higher.append(highs)
    return np.array(n), np.array(lower, np.int64), np.array(higher, np.int64)


@pytest.mark.parametrize("evaluation", ["percentile_cont", "percentile_disc"])
@pytest.mark.parametrize(("spread", "disjoint"), [(10**9, False), (3, False), (1000, True)])
def test_band_selection_gives_the_sorted_values_positions(evaluation, spread, disjoint):
    runs = _rows(11 + spread % 7, 60, spread, disjoint)
    fractions = (0.0, 0.001, 0.25, 0.5, 0.9, 0.999, 1.0)
    assert (runs[2] - runs[1]).max() > 0
    totals = [
        int(sum(runs[2][j] - runs[1][j] for j in range(f, f + c)))
        for f, c in zip(runs[3], runs[4], strict=True)
    ]
    assert max(totals) >= 4 * holistic.BAND_FROM  # the band's rows, and smaller ones
    assert min(totals) < holistic.BAND_FROM
    got = holistic.holistic_select(*runs, evaluation, fractions, True)
    want = _expected(*runs, evaluation, fractions)
    for got_part, want_part in zip(got, want, strict=True):
        assert np.array_equal(got_part, want_part)
    single = holistic.holistic_select(*runs, evaluation, 0.5, True)  # one p
    assert np.array_equal(single[1], want[1][:, 3]) and np.array_equal(single[2], want[2][:, 3])


def test_a_band_that_misses_falls_back_to_the_whole_copy():
    """Two runs of disjoint ranges: each sample lies in its own run's range, so the band
    between them holds positions of neither side's edge; the answers are still exact."""
    low_run = np.arange(0, 1000, dtype=np.int64)
    high_run = np.arange(5000, 5010, dtype=np.int64)
    values = np.concatenate((low_run, high_run))
    runs = (values, np.array([0, 1000]), np.array([1000, 1010]), np.array([0]), np.array([2]))
    for p in (0.0, 0.5, 0.995, 1.0):
        n, lower, higher = holistic.holistic_select(*runs, "percentile_disc", p, True)
        want = np.sort(values)[max(int(np.ceil(p * 1010)) - 1, 0)]
        assert n[0] == 1010 and lower[0] == want and higher[0] == want
