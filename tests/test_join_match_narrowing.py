"""The CPU join match (`CpuJoinKernels.match`, the arrival form's pairs) narrowed by window:
the build side of the hash join and the b side of the sort-merge join are sorted by (key
slot, first window), and a row searches only the rows of its slot whose window range can
overlap its own (`cpu/join.py _candidates`). Checked against every pair enumerated by brute
force: rows out of window order, ranges of very different widths, NULL keys, a static
table's rows (every window), windows far from zero."""

from __future__ import annotations

import numpy as np
import pytest

from mangonel.runtime.cpu.join import CpuJoinKernels

EVERY_WINDOW = (-(2**62), 2**62)  # the driver's ALL_FIRST, ALL_LAST: a static table's rows


def every_pair(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> list[tuple[int, int]]:
    slots_a, first_a, last_a = a
    slots_b, first_b, last_b = b
    return [
        (i, j)
        for i in range(len(slots_a))
        for j in range(len(slots_b))
        if slots_a[i] >= 0
        and slots_a[i] == slots_b[j]
        and max(first_a[i], first_b[j]) <= min(last_a[i], last_b[j])
    ]


def rows(rng: np.random.Generator, n: int, keys: int, base: int = 0) -> tuple[np.ndarray, ...]:
    slots = np.where(rng.random(n) < 0.1, -1, rng.integers(0, keys, n)).astype(np.int64)
    first = base + rng.integers(-30, 30, n).astype(np.int64)  # any order
    wide = rng.random(n) < 0.05
    last = first + np.where(wide, rng.integers(10, 60, n), rng.integers(0, 4, n))
    return slots, first, last


@pytest.mark.parametrize("algorithm", ["hash", "sort-merge"])
@pytest.mark.parametrize("seed", range(5))
def test_match_finds_every_overlapping_pair(algorithm: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    kernels = CpuJoinKernels()
    base = 10**12 if seed % 2 else 0  # window numbers of today's microseconds, or small
    for n_a, n_b in [(40, 300), (300, 40), (1, 1), (150, 150)]:
        a, b = rows(rng, n_a, 7, base), rows(rng, n_b, 7, base)
        got = kernels.match(algorithm, *a, *b)
        assert sorted(zip(got[0].tolist(), got[1].tolist(), strict=True)) == every_pair(a, b)


@pytest.mark.parametrize("algorithm", ["hash", "sort-merge"])
def test_rows_of_every_window_meet_every_row_of_their_key(algorithm: str) -> None:
    """A static table's rows span every window: their ranges bound no search (the widest
    range would overflow), on either side of the match."""
    rng = np.random.default_rng(11)
    kernels = CpuJoinKernels()
    stream = rows(rng, 200, 5)
    n = 12
    table = (
        rng.integers(0, 5, n).astype(np.int64),
        np.full(n, EVERY_WINDOW[0]),
        np.full(n, EVERY_WINDOW[1]),
    )
    for a, b in [(stream, table), (table, stream)]:
        got = kernels.match(algorithm, *a, *b)
        want = every_pair(a, b)
        assert sorted(zip(got[0].tolist(), got[1].tolist(), strict=True)) == want and want


def test_a_probe_row_pairs_only_with_rows_of_its_windows() -> None:
    """Not vacuous: a hand-made case, the build rows out of window order."""
    kernels = CpuJoinKernels()
    build = (np.array([0, 0, 0, 1, 0]), np.array([9, 1, 4, 1, 2]), np.array([9, 1, 6, 1, 2]))
    probe = (np.array([0, 1, -1]), np.array([2, 0, 0]), np.array([5, 3, 9]))
    for algorithm in ("hash", "sort-merge"):
        a_rows, b_rows = kernels.match(algorithm, *probe, *build)
        got = sorted(zip(a_rows.tolist(), b_rows.tolist(), strict=True))
        assert got == [(0, 2), (0, 4), (1, 3)]
