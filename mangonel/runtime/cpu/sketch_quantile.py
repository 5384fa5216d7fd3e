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
from mangonel.runtime.cpu.sketch_inputs import batch_rows, groups

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
        """The set a snapshot holds, checked for consistency (the kernels index by offsets
        without bounds checks, so a damaged snapshot must fail here)."""
        at = struct.calcsize("<dqq")
        if len(blob) < at:
            raise ValueError("quantile snapshot is shorter than its header")
        eps, cells, samples = struct.unpack_from("<dqq", blob)
        if not (0.0 < eps <= 1.0 and cells >= 0 and samples >= 0):
            raise ValueError(f"quantile snapshot header is damaged: {eps}, {cells}, {samples}")
        if len(blob) < at + 8 * (2 * cells + 1 + 3 * samples):
            raise ValueError("quantile snapshot is shorter than its header says")
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
        counts, offsets = arrays[0], arrays[1]
        sizes = np.diff(offsets)
        if (
            offsets[0] != 0
            or offsets[-1] != samples
            or np.any(sizes < 0)
            or np.any(counts < sizes)
            or np.any((counts > 0) != (sizes > 0))
        ):
            raise ValueError("quantile snapshot offsets and counts do not match")
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
def _merge_pass(
    v: np.ndarray,
    g: np.ndarray,
    d: np.ndarray,
    src: np.ndarray,
    bounds: np.ndarray,
    runs: int,
    ov: np.ndarray,
    og: np.ndarray,
    od: np.ndarray,
    osrc: np.ndarray,
) -> int:
    """One level of a merge tree: runs 2j and 2j + 1 (bounds[r]..bounds[r + 1] of v, g, d,
    src) merge into o*, the smaller value first in Spark's order and, on a tie, the later run's
    sample (Spark's merge takes the other side's). Rewrites bounds; returns the run count."""
    out = 0
    for j in range(0, runs, 2):
        lo = bounds[j]
        if j + 1 == runs:
            hi = bounds[j + 1]
            ov[lo:hi], og[lo:hi], od[lo:hi], osrc[lo:hi] = v[lo:hi], g[lo:hi], d[lo:hi], src[lo:hi]
        else:
            i, iend, k, kend = lo, bounds[j + 1], bounds[j + 1], bounds[j + 2]
            w = lo
            while i < iend and k < kend:
                if _less(v[i], v[k]):
                    ov[w], og[w], od[w], osrc[w] = v[i], g[i], d[i], src[i]
                    i += 1
                else:
                    ov[w], og[w], od[w], osrc[w] = v[k], g[k], d[k], src[k]
                    k += 1
                w += 1
            n = iend - i
            ov[w : w + n], og[w : w + n], od[w : w + n] = v[i:iend], g[i:iend], d[i:iend]
            osrc[w : w + n] = src[i:iend]
            w += n
            n = kend - k
            ov[w : w + n], og[w : w + n], od[w : w + n] = v[k:kend], g[k:kend], d[k:kend]
            osrc[w : w + n] = src[k:kend]
        bounds[out] = lo
        out += 1
    bounds[out] = bounds[runs]
    return out


@_jit
def _merge_runs(
    v: np.ndarray,
    g: np.ndarray,
    d: np.ndarray,
    los: np.ndarray,
    his: np.ndarray,
    weights: np.ndarray,
    ov: np.ndarray,
    og: np.ndarray,
    od: np.ndarray,
    olo: int,
) -> int:
    """Merge sorted runs [los[r], his[r]) of v, g, d into o* from olo (a balanced tree of
    two-way merges: sequential memory access, O(samples log runs)); returns the end. Spark's
    two-sided merge, generalised: a sample gains weights[s] = floor(2 eps n_s) of rank
    uncertainty from every other run s that has samples both before and after it (its true
    rank could lie anywhere in s's gap there), nothing from a run wholly before or after it.
    With two runs this is exactly Spark's QuantileSummaries.merge."""
    k = los.shape[0]
    total = 0
    for r in range(k):
        total += his[r] - los[r]
    av, ag, ad = np.empty(total, np.float64), np.empty(total, np.int64), np.empty(total, np.int64)
    asrc = np.empty(total, np.int64)
    bounds = np.empty(k + 1, np.int64)
    at = 0
    for r in range(k):
        n = his[r] - los[r]
        bounds[r] = at
        av[at : at + n], ag[at : at + n] = v[los[r] : his[r]], g[los[r] : his[r]]
        ad[at : at + n] = d[los[r] : his[r]]
        asrc[at : at + n] = r
        at += n
    bounds[k] = total
    bv, bg, bd = np.empty(total, np.float64), np.empty(total, np.int64), np.empty(total, np.int64)
    bsrc = np.empty(total, np.int64)
    runs = k
    while runs > 1:
        runs = _merge_pass(av, ag, ad, asrc, bounds, runs, bv, bg, bd, bsrc)
        av, bv = bv, av
        ag, bg = bg, ag
        ad, bd = bd, ad
        asrc, bsrc = bsrc, asrc
    first = np.full(k, total, np.int64)  # merged position of each run's first, last sample
    last = np.zeros(k, np.int64)
    for p in range(total):
        r = asrc[p]
        if first[r] == total:
            first[r] = p
        last[r] = p
    # extra[p] = sum of weights of runs s with first[s] < p < last[s], less the sample's own
    extra = np.zeros(total + 1, np.int64)
    for r in range(k):
        if last[r] - first[r] > 1:
            extra[first[r] + 1] += weights[r]
            extra[last[r]] -= weights[r]
    running = np.int64(0)
    for p in range(total):
        running += extra[p]
        r = asrc[p]
        own = weights[r] if first[r] < p < last[r] else 0
        ov[olo + p], og[olo + p], od[olo + p] = av[p], ag[p], ad[p] + running - own
    return olo + total


@_jit
def _merge_two(
    v: np.ndarray,
    g: np.ndarray,
    d: np.ndarray,
    a: int,
    a_end: int,
    a_weight: int,
    b: int,
    b_end: int,
    b_weight: int,
    ov: np.ndarray,
    og: np.ndarray,
    od: np.ndarray,
    w: int,
) -> int:
    """`_merge_runs` of two runs (Spark's two-sided merge), straight into o* from w: no
    copies, no tree, no second pass. A sample gains the other run's weight when that run
    has samples both before it (its first was written) and after it (some remain): the
    general rule's first[s] < p < last[s]. On a tie the second run's sample goes first."""
    a_start, b_start = a, b
    while a < a_end and b < b_end:
        if _less(v[a], v[b]):
            ov[w], og[w] = v[a], g[a]
            od[w] = d[a] + (b_weight if b > b_start else 0)
            a += 1
        else:
            ov[w], og[w] = v[b], g[b]
            od[w] = d[b] + (a_weight if a > a_start else 0)
            b += 1
        w += 1
    while a < a_end:  # the other run is done: nothing of it follows
        ov[w], og[w], od[w] = v[a], g[a], d[a]
        a += 1
        w += 1
    while b < b_end:
        ov[w], og[w], od[w] = v[b], g[b], d[b]
        b += 1
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
    ov = np.empty(total, np.float64)
    og = np.empty(total, np.int64)
    od = np.empty(total, np.int64)
    out_counts = np.zeros(groups, np.int64)
    kept_lo = np.empty(groups, np.int64)
    for q in range(groups):
        lo = starts[q]
        runs = 0
        for k in range(group_offsets[q], group_offsets[q + 1]):
            if counts[members[k]] > 0:
                runs += 1
        los = np.empty(runs, np.int64)
        his = np.empty(runs, np.int64)
        weights = np.empty(runs, np.int64)
        r = 0
        count = 0
        for k in range(group_offsets[q], group_offsets[q + 1]):
            c = members[k]
            if counts[c] > 0:
                los[r], his[r] = offsets[c], offsets[c + 1]
                weights[r] = np.int64(np.floor(2.0 * eps * counts[c]))
                count += counts[c]
                r += 1
        if runs == 2:  # a pane's summary with a batch's, a window's prefix with its suffix
            end = _merge_two(
                v, g, d, los[0], his[0], weights[0], los[1], his[1], weights[1], ov, og, od, lo
            )
        else:
            end = _merge_runs(v, g, d, los, his, weights, ov, og, od, lo)
        out_counts[q] = count
        # one run: Spark's merge with an empty side copies the other, uncompressed
        kept_lo[q] = _compress(ov, og, od, lo, end, 2.0 * eps * count) if runs > 1 else lo
    return _compact(starts, kept_lo, out_counts, ov, og, od)


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
    if not 0.0 < eps <= 1.0:
        raise ValueError(f"relative error must be in (0, 1], got {eps}")
    values = np.ascontiguousarray(values, np.float64)
    cells, valid = batch_rows(cells, values, valid, n_cells)
    arrays = _build(cells, values, valid, n_cells, float(eps))
    return QuantileSketches(float(eps), *arrays)


def merge_groups(
    sketches: QuantileSketches, members: np.ndarray, group_offsets: np.ndarray
) -> QuantileSketches:
    """Group q = the merge of cells members[group_offsets[q]:group_offsets[q + 1]] (a window
    from its panes' cells; a pane from its old summary and a new batch's): one merge tree and
    one COMPRESS per group (`_merge_runs`), so a window of k panes costs O(samples log k).
    Two cells merge exactly as Spark merges two summaries; for more, Spark's fold compresses
    after every step (in partition order), this compresses once: both keep the bound."""
    s = sketches
    members, group_offsets = groups(members, group_offsets, s.cells)
    arrays = _merge_groups(
        s.counts, s.offsets, s.values, s.g, s.delta, members, group_offsets, s.eps
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
