"""The sampled key statistics of join_algorithm "auto" (runtime/operators/join_stats.py)."""

from __future__ import annotations

import numpy as np
import pytest

from mangonel.runtime.operators.join_sides import JoinSide
from mangonel.runtime.operators.join_stats import (
    KEY_SAMPLE_ROWS,
    STORED_SAMPLE_ROWS,
    choose_algorithm,
    key_sample,
)


def _slots(rng: np.random.Generator, n: int, keys: int, skew: float) -> np.ndarray:
    if skew:
        weights = 1.0 / np.arange(1, keys + 1) ** skew
        return rng.choice(keys, n, p=weights / weights.sum()).astype(np.int64)
    return rng.integers(0, keys, n).astype(np.int64)


@pytest.mark.parametrize(
    ("keys", "skew", "chosen"),
    [(1000, 0.0, "hash"), (10, 0.0, "hash"), (100_000, 0.0, "hash"), (1000, 1.0, "sort-merge")],
)
def test_samples_choose_as_full_counts_do(keys: int, skew: float, chosen: str) -> None:
    """Uniform keys (few or many) choose hash, Zipf 1 sort-merge, from samples of 200,000-row
    batches: what counting every key chose."""
    rng = np.random.default_rng(7)
    stored = [_slots(rng, 200_000, keys, skew) for _ in range(3)]
    batch = _slots(rng, 200_000, keys, skew)
    sampled = choose_algorithm(
        (key_sample(batch), len(batch)), [(key_sample(s), len(s)) for s in stored]
    )
    counts = np.bincount(np.concatenate([batch, *stored]))
    exact = counts.max() * np.count_nonzero(counts) / counts.sum()
    assert ("sort-merge" if exact > 8 else "hash") == chosen == sampled


def test_samples_are_bounded_and_weighted() -> None:
    """A batch keeps at most KEY_SAMPLE_ROWS slots; the choice reads at most the batch's and
    STORED_SAMPLE_ROWS of the newest stored samples, each weighted by its batch's rows: a
    large skewed batch outweighs small even ones; NULL keys (-1) are not counted, and with
    none keyed there is no choice."""
    assert len(key_sample(np.arange(10**6))) <= KEY_SAMPLE_ROWS
    assert len(key_sample(np.arange(10))) == 10
    hot = np.zeros(100_000, np.int64)
    hot[50_000:] = np.arange(50_000) % 1000  # key 0 holds half the rows
    even = [(np.arange(1000, dtype=np.int64), 1000)] * 4
    assert choose_algorithm((key_sample(hot), len(hot)), even) == "sort-merge"
    assert choose_algorithm((np.arange(1000, dtype=np.int64), 1000), even) == "hash"
    assert choose_algorithm((np.full(5, -1, np.int64), 5), []) is None
    # an old skewed batch beyond the stored sample bound is not read
    old = [(np.zeros(KEY_SAMPLE_ROWS, np.int64), 10**6)]
    recent = [(np.arange(KEY_SAMPLE_ROWS, dtype=np.int64), KEY_SAMPLE_ROWS)] * (
        STORED_SAMPLE_ROWS // KEY_SAMPLE_ROWS
    )
    batch = (np.arange(KEY_SAMPLE_ROWS, dtype=np.int64), KEY_SAMPLE_ROWS)
    assert choose_algorithm(batch, old + recent) == "hash"
    assert choose_algorithm(batch, recent + old) == "sort-merge"


def test_samples_follow_stored_batches() -> None:
    """A side's samples are appended and freed with its batches, and rebuilt from its slots
    after a restore (snapshots keep none)."""
    import pyarrow as pa

    side = JoinSide(0, "l", "s", False, None, ("k",), 0, False, 1)  # type: ignore[arg-type]
    for start in (0, 5000, 10_000):
        slots = np.arange(start, start + 5000, dtype=np.int64)
        ones = np.full(5000, start // 5000, np.int64)
        side.append(pa.record_batch({"k": slots}), slots, ones, ones, ones)
    assert len(side.key_samples) == 3
    assert all(KEY_SAMPLE_ROWS // 2 < len(s) <= KEY_SAMPLE_ROWS for s in side.key_samples)
    side.free_fired(0)  # the first batch's rows all end at window 0
    before = [s.copy() for s in side.key_samples]
    assert len(before) == 2 and before[0][0] == 5000
    side.key_samples = []
    side.resample()
    assert all(np.array_equal(a, b) for a, b in zip(before, side.key_samples, strict=True))
