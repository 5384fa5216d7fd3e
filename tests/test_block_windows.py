"""Sliding windows without the tree on the CPU (`cpu.aggregate`, `cpu.generated`): every kind's
`block_windows` (tasks of any leaf stride: count windows) and `block_runs` (runs of windows of
every key of the pane-major state, keys in tiles) give each window the combine of its leaves,
as the numpy combine of the kind gives it left to right (floats within rounding: blocks
associate otherwise); `CpuPaneState.windows` takes them (and `sliding_sums_runs` for int64
sums) for overlapping windows; moving a pane state's origin in place keeps what a fresh
reshape keeps."""

from __future__ import annotations

import numpy as np
import pytest
from test_aggregates import FIXED, _accumulators, _lift, _same, _values

from mangonel.aggregates import state_kind
from mangonel.catalog.types import SqlType
from mangonel.compiler.physical import StateField
from mangonel.runtime.cpu.generated import kind_kernels
from mangonel.runtime.cpu.kernels import CpuKernels, CpuPaneState

SHAPES = [(1, 100), (2, 5), (3, 7), (1, 2), (2, 6)]  # (panes per slide, panes per window)


def _leaves(kind, accumulator, dtype, size: int, rng):  # noqa: ANN001, ANN202
    """Lifted single values as leaves: NULL arguments read 0 there, as `to_values` gives."""
    valid = rng.random(size) < 0.8
    values = _values(dtype, accumulator, size, rng)
    values[~valid] = 0
    return _lift(kind, accumulator, values, valid)


def _reference(kind, dtype, neutrals, parts, leaves_of_window):  # noqa: ANN001, ANN202
    """Left-to-right numpy combine of each window's leaves (a list of leaf index arrays)."""
    out = tuple(np.full(len(leaves_of_window), v, dtype) for v in neutrals)
    for w, leaves in enumerate(leaves_of_window):
        acc = tuple(np.full(1, v, dtype) for v in neutrals)
        for leaf in leaves:
            acc = kind.combine(*acc, *(p[leaf : leaf + 1] for p in parts))
        for o, a in zip(out, acc, strict=True):
            o[w] = a[0]
    return out


@pytest.mark.parametrize("kind", FIXED, ids=lambda k: k.name)
@pytest.mark.parametrize(("pps", "ppw"), SHAPES)
@pytest.mark.parametrize("stride", [1, 5])
def test_block_windows_combine_each_window_of_a_task(kind, pps: int, ppw: int, stride: int):
    rng = np.random.default_rng(pps * 31 + ppw + stride)
    kernels = kind_kernels(kind)
    for accumulator in _accumulators(kind):
        dtype = kind.storage(accumulator)
        neutrals = kind.neutral(dtype)
        counts = np.array([0, 1, 4, 9, 3], np.int64)  # windows per task
        spans = np.where(counts > 0, ppw + (counts - 1) * pps, 0) * stride
        base = np.concatenate([[0], np.cumsum(spans)[:-1]]).astype(np.int64) + 1
        size = int(spans.sum()) + 2
        parts = _leaves(kind, accumulator, dtype, size, rng)
        out_at = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        outs = tuple(np.full(int(counts.sum()), v, dtype) for v in neutrals)
        kernels.block_windows(
            *parts,
            *(dtype.type(v) for v in neutrals),
            stride,
            base,
            counts,
            out_at,
            np.ones(len(counts), np.int64),
            pps,
            ppw,
            4,  # windows per batch: tasks of 9 windows take three batches
            *outs,
        )
        windows = [
            base[t] + (w * pps + np.arange(ppw)) * stride
            for t in range(len(counts))
            for w in range(counts[t])
        ]
        want = _reference(kind, dtype, neutrals, parts, windows)
        for got, expected in zip(outs, want, strict=True):
            assert _same(got, expected), (kind.name, accumulator)


@pytest.mark.parametrize("kind", FIXED, ids=lambda k: k.name)
@pytest.mark.parametrize(("pps", "ppw"), [(1, 20), (2, 5), (3, 7)])
@pytest.mark.parametrize("shift", [None, 3, -2], ids=["rows", "ring", "ring-wrapping"])
@pytest.mark.parametrize("per_batch", [2, 8])
def test_block_runs_combine_every_key_of_each_run(kind, pps: int, ppw: int, shift, per_batch):
    """Runs over a pane-major matrix of 150 keys (two tiles of keys, the last partial), out
    window-major after the runs before; also over the same rows in a ring (`CpuPaneState`:
    pane column c at row c & mask), turned so that runs wrap around its end. 8 windows a
    batch: window starts in two blocks of a batch (the suffixes of both, prefixes of the
    second and third)."""
    rng = np.random.default_rng(pps * 7 + ppw)
    kernels = kind_kernels(kind)
    n_keys, key_capacity = 150, 160
    runs = [(2, 5), (0, 1), (4, 3)]  # (first pane column, windows)
    panes = max(c + ppw + (n - 1) * pps for c, n in runs) + 1
    for accumulator in _accumulators(kind):
        dtype = kind.storage(accumulator)
        neutrals = kind.neutral(dtype)
        size = panes * key_capacity
        parts = _leaves(kind, accumulator, dtype, size, rng)
        total = sum(n for _, n in runs) * n_keys
        outs = tuple(np.empty(total, dtype) for _ in neutrals)
        read, mask, turn = parts, -1, 0
        if shift is not None:
            capacity = 1 << (panes - 1).bit_length()
            turn = shift % capacity
            rows = (np.arange(panes) + turn) % capacity
            read, mask = [], capacity - 1
            for part, value in zip(parts, neutrals, strict=True):
                ring = np.full((capacity, key_capacity), value, dtype)
                ring[rows] = part.reshape(panes, key_capacity)
                read.append(ring.reshape(-1))
        kernels.block_runs(
            *read,
            *(dtype.type(v) for v in neutrals),
            key_capacity,
            mask,
            n_keys,
            np.array([c + turn for c, _ in runs], np.int64),
            np.array([n for _, n in runs], np.int64),
            pps,
            ppw,
            per_batch,
            *outs,
        )
        windows = [
            (column + w * pps + np.arange(ppw)) * key_capacity + key
            for column, count in runs
            for w in range(count)
            for key in range(n_keys)
        ]
        want = _reference(kind, dtype, neutrals, parts, windows)
        for got, expected in zip(outs, want, strict=True):
            assert _same(got, expected), (kind.name, accumulator)


def test_block_runs_of_long_windows_take_narrower_tiles():
    """2,000 panes a window, 2,000 windows a batch: a tile's prefixes and suffixes would pass
    their bound at 128 keys, so tiles narrow (32 keys here); every key is still computed."""
    rng = np.random.default_rng(2)
    n_keys, key_capacity, ppw, pps = 150, 152, 2000, 3
    runs = [(5, 2), (1, 3)]
    leaves = rng.integers(-(10**9), 10**9, (ppw + 3 * pps + 6) * key_capacity)
    out = np.empty(5 * n_keys, np.int64)
    kind_kernels(state_kind("max")).block_runs(
        leaves,
        np.int64(np.iinfo(np.int64).min),
        key_capacity,
        -1,
        n_keys,
        np.array([c for c, _ in runs], np.int64),
        np.array([n for _, n in runs], np.int64),
        pps,
        ppw,
        2000,
        out,
    )
    matrix = leaves.reshape(-1, key_capacity)
    want = [
        matrix[column + w * pps : column + w * pps + ppw, :n_keys].max(axis=0)
        for column, count in runs
        for w in range(count)
    ]
    assert np.array_equal(out, np.concatenate(want))


def _state(fields: tuple[StateField, ...], rng) -> CpuPaneState:  # noqa: ANN001
    state = CpuPaneState(fields)
    state.reshape(16, 64, 100)
    for field in fields:
        for array in state.arrays[field.name]:
            array[: 40 * 16] = rng.integers(0, 1000, 40 * 16)
    return state


def test_pane_state_windows_of_sliding_runs_equal_the_tree():
    """`CpuPaneState.windows` of overlapping windows (differences for the counts, blocks for
    MIN) equals the per-task tree over the same state, every key of every run."""
    rng = np.random.default_rng(3)
    fields = (
        StateField("rows", state_kind("count"), None, SqlType.BIGINT),
        StateField("low", state_kind("min"), None, SqlType.BIGINT),
    )
    state = _state(fields, rng)
    runs, n_keys, pps, ppw = [(100, 7), (110, 3)], 13, 2, 6
    got = state.windows(n_keys, runs, pps, ppw, 4)
    tumbling = CpuPaneState(fields)  # the tree: the task path, one window per task
    tumbling.arrays, tumbling.key_capacity, tumbling.pane_capacity = (
        state.arrays,
        state.key_capacity,
        state.pane_capacity,
    )
    tumbling.origin, tumbling.base, tumbling.fresh_end = state.origin, state.base, state.fresh_end
    for field in fields:
        want = []
        for first, count in runs:
            for w in range(count):
                cells = tumbling.windows(n_keys, [(first + w * pps, 1)], ppw, ppw, 4)
                want.append(cells[field.name][0])
        assert np.array_equal(got[field.name][0], np.concatenate(want)), field.name


def test_moving_the_origin_in_place_keeps_the_panes_a_fresh_state_keeps():
    """The ring moved on in place (the same arrays: only the rows of the panes it leaves are
    cleared) holds what a freshly allocated state holds: the panes kept, neutral rows for
    the panes entering, also after releasing panes and moving again, around the ring."""
    rng = np.random.default_rng(8)
    fields = (StateField("rows", state_kind("count"), None, SqlType.BIGINT),)
    for origin in (100, 107, 130, 163, 200):  # same place, moved, moved past every pane
        state = _state(fields, rng)
        before = state.to_arrays(16, 100, 164)
        array = state.arrays["rows"][0]
        fresh = CpuPaneState(fields)
        fresh.reshape(32, 64, origin)  # another key capacity: new arrays
        kept = max(164 - origin, 0)
        if kept:
            fresh.load_arrays({"rows.0": before["rows.0"][:, 64 - kept :]}, origin)
        state.reshape(16, 64, origin)
        assert state.arrays["rows"][0] is array  # in place
        got, want = (
            state.to_arrays(16, origin, origin + 64),
            fresh.to_arrays(16, origin, origin + 64),
        )
        assert np.array_equal(got["rows.0"], want["rows.0"]), origin
        # a second lap of the ring starts clean
        state.merge(np.arange(16, dtype=np.int64) + 20 * 16, {"rows": (np.ones(16, np.int64),)})
        state.reshape(16, 64, origin + 90)
        got = state.to_arrays(16, origin + 90, origin + 154)["rows.0"]
        assert got.sum() == 0, origin


def test_tree_runs_across_the_ring_end_equal_those_of_a_linear_state():
    """Windows whose panes wrap around the ring's end (gapped hopping windows read by the
    tree, CUMULATE's prefix combine) turn the ring linear first: the same cells as a
    freshly laid out state."""
    rng = np.random.default_rng(5)
    fields = (
        StateField("rows", state_kind("count"), None, SqlType.BIGINT),
        StateField("low", state_kind("min"), None, SqlType.BIGINT),
    )
    state = CpuPaneState(fields)
    state.reshape(16, 64, 0)
    state.reshape(16, 64, 50)  # in place: pane 50 at row 50, pane 64 at row 0
    panes, slots = rng.integers(50, 114, 400), rng.integers(0, 13, 400)
    partials = {"rows": (np.ones(400, np.int64),), "low": (rng.integers(0, 99, 400),)}
    state.merge(CpuKernels().flat_index(slots, panes, state), partials)
    linear = CpuPaneState(fields)
    linear.reshape(16, 64, 50)
    linear.load_arrays(state.to_arrays(16, 50, 114), 50)
    for name, args in (("windows", ([(58, 3)], 3, 2, 4)), ("cumulative_windows", ([(60, 6)], 4))):
        want = getattr(linear, name)(13, *args)
        got = getattr(state, name)(13, *args)
        for field in fields:
            for a, b in zip(got[field.name], want[field.name], strict=True):
                assert np.array_equal(a, b), (name, field.name)
    assert state.base == 50  # turned linear once


def test_sliding_firings_in_sequence_equal_the_rows_merged(monkeypatch):
    """Firing after firing over a ring moving on (stale rows cleared as merges reach them),
    the counts' windows stepping from the last window of the firing before where no row
    has since landed in its panes and summed afresh where one has (out of order, not
    late): every window equals the rows merged, also MIN's (by blocks)."""
    from mangonel.runtime.cpu import aggregate

    carried = []
    runs_kernel = aggregate.sliding_sums_runs

    def recording(*args):  # noqa: ANN002, ANN202
        carried.append(bool(args[-2]))
        return runs_kernel(*args)

    monkeypatch.setattr(aggregate, "sliding_sums_runs", recording)
    rng = np.random.default_rng(11)
    fields = (
        StateField("rows", state_kind("count"), None, SqlType.BIGINT),
        StateField("low", state_kind("min"), None, SqlType.BIGINT),
    )
    state, kernels = CpuPaneState(fields), CpuKernels()
    n_keys, pps, ppw = 13, 2, 6
    rows = np.zeros((600, n_keys), np.int64)
    low = np.full((600, n_keys), np.iinfo(np.int64).max, np.int64)
    window = 3
    for step in range(60):
        live = window * pps  # the next window's first pane: earlier panes are late
        state.reshape(16, 32, live - (ppw - 1))
        # odd steps: rows in the last fired window's panes too (its carried sums go stale)
        first = live if step % 2 else live - pps + ppw
        panes = rng.integers(first, live + 20, 30)
        slots = rng.integers(0, n_keys, 30)
        values = rng.integers(-50, 50, 30)
        partials = {"rows": (np.ones(30, np.int64),), "low": (values,)}
        state.merge(kernels.flat_index(slots, panes, state), partials)
        np.add.at(rows, (panes, slots), 1)
        np.minimum.at(low, (panes, slots), values)
        count = int(rng.integers(1, 5))
        got = state.windows(n_keys, [(window * pps, count)], pps, ppw, 4)
        for w in range(count):
            span = slice((window + w) * pps, (window + w) * pps + ppw)
            cells = slice(w * n_keys, (w + 1) * n_keys)
            assert np.array_equal(got["rows"][0][cells], rows[span].sum(axis=0)), step
            assert np.array_equal(got["low"][0][cells], low[span].min(axis=0)), step
        window += count
    assert any(carried) and not all(carried)
