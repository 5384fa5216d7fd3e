"""Greenwald-Khanna quantile summaries on the CPU (numba), Spark's QuantileSummaries rules
(definition in `mangonel.aggregates.sketches`; docs/sketches.md): build one summary per
(key, pane) cell from a batch in one pass, merge sets of cells (a window from its panes),
query percentiles, snapshot to bytes.

A set of summaries is CSR: summary c holds samples [offsets[c], offsets[c + 1]) of the
parallel arrays values (float64, sorted, NaN last), g and delta (int64), and counts[c] values.
Every array is fixed-width, so a set travels as a handful of buffers (snapshot, Spark
partials, a device copy).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numba
import numpy as np

from mangonel.aggregates.sketches import check_percentages

_jit = numba.njit(cache=True, nogil=True)


@dataclass(frozen=True)
class QuantileSketches:
    """Summaries of `len(counts)` cells at relative error eps (see the module docstring)."""

    eps: float
    counts: np.ndarray
    offsets: np.ndarray
    values: np.ndarray
    g: np.ndarray
    delta: np.ndarray

    @property
    def cells(self) -> int:
        return self.counts.shape[0]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.counts, self.offsets, self.values, self.g, self.delta))

    def samples(self, cell: int) -> list[tuple[float, int, int]]:
        """Cell `cell`'s (value, g, delta) samples, for tests and debugging."""
        lo, hi = self.offsets[cell], self.offsets[cell + 1]
        return list(
            zip(
                self.values[lo:hi].tolist(),
                self.g[lo:hi].tolist(),
                self.delta[lo:hi].tolist(),
                strict=True,
            )
        )

    def to_bytes(self) -> bytes:
        """Snapshot: eps, cells and samples, then counts, offsets, values, g, delta."""
        header = struct.pack("<dqq", self.eps, self.cells, self.values.shape[0])
        return header + b"".join(
            np.ascontiguousarray(a).tobytes()
            for a in (self.counts, self.offsets, self.values, self.g, self.delta)
        )

    @staticmethod
    def from_bytes(blob: bytes) -> QuantileSketches:
        eps, cells, samples = struct.unpack_from("<dqq", blob)
        at = struct.calcsize("<dqq")
        arrays = []
        for dtype, n in (
            (np.int64, cells),
            (np.int64, cells + 1),
            (np.float64, samples),
            (np.int64, samples),
            (np.int64, samples),
        ):
            arrays.append(np.frombuffer(blob, dtype, n, at).copy())
            at += n * 8
        if at != len(blob):
            raise ValueError(f"quantile snapshot has {len(blob) - at} trailing bytes")
        return QuantileSketches(eps, *arrays)


@_jit
def _less(a: float, b: float) -> bool:
    """Spark's sort order of doubles: NaN above every other value (+inf too)."""
    return a < b or (b != b and a == a)


@_jit
def _compress(
    v: np.ndarray, g: np.ndarray, d: np.ndarray, lo: int, hi: int, threshold: float
) -> int:
    """GK COMPRESS of samples [lo, hi) in place (Spark's compressImmut): walking down from the
    last sample, which is always kept, a sample folds its g into the running head while
    g + head.g + head.delta < threshold; the first sample is always kept. The result is
    [new_lo, hi); returns new_lo. Writes go at or above the sample being read, so in place
    is safe."""
    n = hi - lo
    if n <= 2:
        return lo
    hv, hg, hd = v[hi - 1], g[hi - 1], d[hi - 1]
    w = hi - 1  # next slot to write, from the top
    for i in range(hi - 2, lo, -1):
        sv, sg, sd = v[i], g[i], d[i]
        if sg + hg + hd < threshold:
            hg += sg
        else:
            v[w], g[w], d[w] = hv, hg, hd
            w -= 1
            hv, hg, hd = sv, sg, sd
    v[w], g[w], d[w] = hv, hg, hd
    w -= 1
    v[w], g[w], d[w] = v[lo], g[lo], d[lo]
    return w


@_jit
def _build(
    cells: np.ndarray, values: np.ndarray, valid: np.ndarray, n_cells: int, eps: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    counts = np.zeros(n_cells, np.int64)
    for i in range(values.shape[0]):
        if valid[i]:
            counts[cells[i]] += 1
    starts = np.zeros(n_cells + 1, np.int64)
    for c in range(n_cells):
        starts[c + 1] = starts[c] + counts[c]
    v = np.empty(starts[n_cells], np.float64)
    fill = starts[:n_cells].copy()
    for i in range(values.shape[0]):
        if valid[i]:
            c = cells[i]
            v[fill[c]] = values[i]
            fill[c] += 1
    g = np.ones(v.shape[0], np.int64)
    d = np.zeros(v.shape[0], np.int64)
    kept_lo = np.empty(n_cells, np.int64)
    for c in range(n_cells):
        lo, hi = starts[c], starts[c + 1]
        v[lo:hi].sort()  # NaN last
        n = hi - lo
        # the samples of a fresh summary: the i-th value (1-based) has rank uncertainty
        # floor(2 eps i), the first and the last none (Spark's withHeadBufferInserted)
        for k in range(1, n - 1):
            d[lo + k] = np.int64(np.floor(2.0 * eps * (k + 1)))
        kept_lo[c] = _compress(v, g, d, lo, hi, 2.0 * eps * n)
    return _compact(starts, kept_lo, counts, v, g, d)


@_jit
def _compact(
    starts: np.ndarray,
    kept_lo: np.ndarray,
    counts: np.ndarray,
    v: np.ndarray,
    g: np.ndarray,
    d: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pack each cell's kept samples [kept_lo[c], starts[c + 1]) into fresh CSR arrays."""
    n_cells = counts.shape[0]
    offsets = np.zeros(n_cells + 1, np.int64)
    for c in range(n_cells):
        offsets[c + 1] = offsets[c] + starts[c + 1] - kept_lo[c]
    total = offsets[n_cells]
    ov = np.empty(total, np.float64)
    og = np.empty(total, np.int64)
    od = np.empty(total, np.int64)
    for c in range(n_cells):
        n = starts[c + 1] - kept_lo[c]
        ov[offsets[c] : offsets[c] + n] = v[kept_lo[c] : starts[c + 1]]
        og[offsets[c] : offsets[c] + n] = g[kept_lo[c] : starts[c + 1]]
        od[offsets[c] : offsets[c] + n] = d[kept_lo[c] : starts[c + 1]]
    return counts, offsets, ov, og, od


@_jit
def _merge_two(
    v: np.ndarray,
    g: np.ndarray,
    d: np.ndarray,
    alo: int,
    ahi: int,
    acount: int,
    blo: int,
    bhi: int,
    bcount: int,
    eps: float,
    ov: np.ndarray,
    og: np.ndarray,
    od: np.ndarray,
    olo: int,
) -> int:
    """Merge summary A = [alo, ahi) with B = [blo, bhi) (both in v, g, d) into o* from olo,
    Spark's merge: a sample of one side that lands between samples of the other gains the
    other side's floor(2 eps n) of rank uncertainty; then COMPRESS at 2 eps (na + nb). Ties
    take B's sample first (Spark takes self's only when strictly smaller). Returns the end;
    the merged samples are [returned lo, end) -- see `_merge_groups`."""
    extra_a = np.int64(np.floor(2.0 * eps * bcount))
    extra_b = np.int64(np.floor(2.0 * eps * acount))
    i, j, w = alo, blo, olo
    while i < ahi and j < bhi:
        if _less(v[i], v[j]):
            ov[w], og[w], od[w] = v[i], g[i], d[i] + (extra_a if j > blo else 0)
            i += 1
        else:
            ov[w], og[w], od[w] = v[j], g[j], d[j] + (extra_b if i > alo else 0)
            j += 1
        w += 1
    while i < ahi:
        ov[w], og[w], od[w] = v[i], g[i], d[i]
        i += 1
        w += 1
    while j < bhi:
        ov[w], og[w], od[w] = v[j], g[j], d[j]
        j += 1
        w += 1
    return w


@_jit
def _merge_groups(
    counts: np.ndarray,
    offsets: np.ndarray,
    v: np.ndarray,
    g: np.ndarray,
    d: np.ndarray,
    members: np.ndarray,
    group_offsets: np.ndarray,
    eps: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    groups = group_offsets.shape[0] - 1
    # capacity: a merge never holds more samples than its inputs together
    starts = np.zeros(groups + 1, np.int64)
    for q in range(groups):
        size = 0
        for k in range(group_offsets[q], group_offsets[q + 1]):
            c = members[k]
            size += offsets[c + 1] - offsets[c]
        starts[q + 1] = starts[q] + size
    total = starts[groups]
    # two work areas the fold ping-pongs between; the result lands in acc*
    acc_v = np.empty(total, np.float64)
    acc_g = np.empty(total, np.int64)
    acc_d = np.empty(total, np.int64)
    tmp_v = np.empty(total, np.float64)
    tmp_g = np.empty(total, np.int64)
    tmp_d = np.empty(total, np.int64)
    out_counts = np.zeros(groups, np.int64)
    kept_lo = np.empty(groups, np.int64)
    for q in range(groups):
        lo = starts[q]
        n = 0  # samples in the accumulator [lo, lo + n)
        count = 0
        for k in range(group_offsets[q], group_offsets[q + 1]):
            c = members[k]
            clo, chi = offsets[c], offsets[c + 1]
            if counts[c] == 0:
                continue
            if count == 0:
                # Spark's merge with an empty side copies the other, uncompressed
                acc_v[lo : lo + chi - clo] = v[clo:chi]
                acc_g[lo : lo + chi - clo] = g[clo:chi]
                acc_d[lo : lo + chi - clo] = d[clo:chi]
                n = chi - clo
                count = counts[c]
                continue
            # tmp = merge(acc, cell): copy the cell after the accumulator so both sides
            # live in one array triple for _merge_two
            acc_v[lo + n : lo + n + chi - clo] = v[clo:chi]
            acc_g[lo + n : lo + n + chi - clo] = g[clo:chi]
            acc_d[lo + n : lo + n + chi - clo] = d[clo:chi]
            end = _merge_two(
                acc_v,
                acc_g,
                acc_d,
                lo,
                lo + n,
                count,
                lo + n,
                lo + n + chi - clo,
                counts[c],
                eps,
                tmp_v,
                tmp_g,
                tmp_d,
                lo,
            )
            count += counts[c]
            new_lo = _compress(tmp_v, tmp_g, tmp_d, lo, end, 2.0 * eps * count)
            n = end - new_lo
            acc_v[lo : lo + n] = tmp_v[new_lo:end]
            acc_g[lo : lo + n] = tmp_g[new_lo:end]
            acc_d[lo : lo + n] = tmp_d[new_lo:end]
        out_counts[q] = count
        # _compact reads [kept_lo, starts[q + 1]): move the result to the top of the slot
        top = starts[q + 1]
        acc_v[top - n : top] = acc_v[lo : lo + n].copy()
        acc_g[top - n : top] = acc_g[lo : lo + n].copy()
        acc_d[top - n : top] = acc_d[lo : lo + n].copy()
        kept_lo[q] = top - n
    return _compact(starts, kept_lo, out_counts, acc_v, acc_g, acc_d)


@_jit
def _query(
    counts: np.ndarray,
    offsets: np.ndarray,
    v: np.ndarray,
    g: np.ndarray,
    d: np.ndarray,
    percentages: np.ndarray,
    eps: float,
    out: np.ndarray,
) -> None:
    for c in range(counts.shape[0]):
        lo, hi = offsets[c], offsets[c + 1]
        if hi == lo:
            for k in range(percentages.shape[0]):
                out[c, k] = np.nan  # no value: NULL (the caller reads counts == 0)
            continue
        target_error = np.int64(0)
        for i in range(lo, hi):
            if g[i] + d[i] > target_error:
                target_error = g[i] + d[i]
        target_error //= 2
        for k in range(percentages.shape[0]):
            p = percentages[k]
            if p <= eps:
                out[c, k] = v[lo]
                continue
            if p >= 1.0 - eps:
                out[c, k] = v[hi - 1]
                continue
            rank = np.int64(np.ceil(p * counts[c]))
            result = v[hi - 1]
            min_rank = np.int64(0)
            for i in range(lo, hi - 1):
                min_rank += g[i]
                max_rank = min_rank + d[i]
                if max_rank - target_error <= rank and rank <= min_rank + target_error:
                    result = v[i]
                    break
            out[c, k] = result


def build(
    cells: np.ndarray, n_cells: int, values: np.ndarray, valid: np.ndarray | None, eps: float
) -> QuantileSketches:
    """One summary per cell 0..n_cells-1 from one batch: row i's value (as a double; skipped
    where not valid) goes into cell cells[i]. One counting-sort pass by cell, a sort per
    cell, then the GK samples and COMPRESS; no Python per row."""
    values = np.ascontiguousarray(values, np.float64)
    if valid is None:
        valid = np.ones(values.shape[0], np.bool_)
    cells = np.ascontiguousarray(cells, np.int64)
    if cells.shape[0] and (cells.min() < 0 or cells.max() >= n_cells):
        raise ValueError(f"cell ids must lie in [0, {n_cells})")
    arrays = _build(cells, values, np.ascontiguousarray(valid, np.bool_), n_cells, float(eps))
    return QuantileSketches(float(eps), *arrays)


def merge_groups(
    sketches: QuantileSketches, members: np.ndarray, group_offsets: np.ndarray
) -> QuantileSketches:
    """Group q = the merge, in order, of cells members[group_offsets[q]:group_offsets[q + 1]]
    (a window from its panes' cells; a pane from its old summary and a new batch's)."""
    s = sketches
    arrays = _merge_groups(
        s.counts,
        s.offsets,
        s.values,
        s.g,
        s.delta,
        np.ascontiguousarray(members, np.int64),
        np.ascontiguousarray(group_offsets, np.int64),
        s.eps,
    )
    return QuantileSketches(s.eps, *arrays)


def concat(*sets: QuantileSketches) -> QuantileSketches:
    """The cells of several sets as one set (cells of the second follow the first's), so
    that `merge_groups` can combine cells of different sets."""
    eps = {s.eps for s in sets}
    if len(eps) != 1:
        raise ValueError(f"cannot combine summaries of different relative errors {sorted(eps)}")
    shift = np.cumsum([0] + [s.values.shape[0] for s in sets[:-1]])
    offsets = np.concatenate(
        [sets[0].offsets[:1]] + [s.offsets[1:] + k for s, k in zip(sets, shift, strict=True)]
    )
    return QuantileSketches(
        sets[0].eps,
        np.concatenate([s.counts for s in sets]),
        offsets,
        np.concatenate([s.values for s in sets]),
        np.concatenate([s.g for s in sets]),
        np.concatenate([s.delta for s in sets]),
    )


def query(sketches: QuantileSketches, percentages: float | tuple[float, ...]) -> np.ndarray:
    """APPROX_PERCENTILE of every cell at each percentage: float64 [cells, len(percentages)],
    NaN where the cell is empty (NULL; tell it from a NaN answer by counts == 0). An integer
    argument's result is this double cast back (Spark's PercentileDigest)."""
    ps = np.asarray(check_percentages(percentages), np.float64)
    s = sketches
    out = np.empty((s.cells, ps.shape[0]), np.float64)
    _query(s.counts, s.offsets, s.values, s.g, s.delta, ps, s.eps, out)
    return out
