"""The key statistics behind join_algorithm "auto" (`WindowJoinExec.adaptive`): sampled, so
choosing costs a few microseconds per batch whatever the stored rows or the key count.

Each stored batch keeps an evenly strided sample of its rows' key slots (`key_sample`, at most
`KEY_SAMPLE_ROWS`), taken when it is stored and dropped when the batch is freed (join_sides.py).
Before a batch is joined, `choose_algorithm` weighs its sample and the newest samples of the
other side's stored batches (at most `STORED_SAMPLE_ROWS` entries; each entry stands for
rows / sample rows of its batch) and estimates, over the rows about to be joined, the most
frequent key's share times the number of distinct keys: sort-merge above `SKEWED_KEYS` even
shares (one hash chain would hold most pairs), else hash. What it replaces counted every key
of the batch and of all stored rows on the host per batch (two bincounts over the key table).

A sample sees fewer distinct keys than the rows hold, which lowers the estimate for many rare
keys; the keys that decide skew (the frequent ones) are the ones a sample sees. Uniform keys
stay far under the threshold (1,000 keys over 2,048 sampled rows: about 3 even shares), Zipf 1
far over it (about 60).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mangonel.compiler import physical as ph

KEY_SAMPLE_ROWS = 1024  # per stored batch
STORED_SAMPLE_ROWS = 8 * KEY_SAMPLE_ROWS  # of the other side's newest batches


def key_sample(slots: np.ndarray) -> np.ndarray:
    """Up to KEY_SAMPLE_ROWS of a batch's key slots, evenly strided (deterministic: the same
    input chooses the same algorithms on every run)."""
    n = len(slots)
    if n <= KEY_SAMPLE_ROWS:
        return np.array(slots, np.int64)
    return np.array(slots[:: -(-n // KEY_SAMPLE_ROWS)], np.int64)


def choose_algorithm(
    batch: tuple[np.ndarray, int], stored: Sequence[tuple[np.ndarray, int]]
) -> str | None:
    """ "sort-merge" or "hash" for joining a batch (its sample, its rows) with the stored
    batches of the other side ((sample, rows) each, oldest first); None when no sampled row
    has a key (nothing to judge by)."""
    samples = [batch]
    taken = 0
    for sample, rows in reversed(stored):  # the newest stored batches
        if taken >= STORED_SAMPLE_ROWS:
            break
        samples.append((sample, rows))
        taken += len(sample)
    values = np.concatenate([s for s, _ in samples])
    lengths = [len(s) for s, _ in samples]
    weights = np.repeat(
        [rows / max(n, 1) for (_, rows), n in zip(samples, lengths, strict=True)], lengths
    )
    keyed = values >= 0  # NULL keys match nothing
    values, weights = values[keyed], weights[keyed]
    if not len(values):
        return None
    top = int(values.max())
    if top < 8 * len(values):  # slots dense enough: count by slot (no sort)
        counts = np.bincount(values, weights=weights, minlength=top + 1)
        distinct = int(np.count_nonzero(counts))
    else:
        keys, inverse = np.unique(values, return_inverse=True)
        counts = np.bincount(inverse, weights=weights)
        distinct = len(keys)
    even_shares = float(counts.max()) * distinct / float(counts.sum())
    return "sort-merge" if even_shares > ph.SKEWED_KEYS else "hash"


__all__ = ["KEY_SAMPLE_ROWS", "STORED_SAMPLE_ROWS", "choose_algorithm", "key_sample"]
