"""CUMULATE windows as a prefix combine (`PaneState.cumulative_windows`): each window of a
period is the one before it combined with one more pane. On the CPU (numba `prefix_windows`)
against the aggregation tree over each window's panes alone, runs starting mid-period and
spanning periods included; the GPU's `window_prefix` kernel, compiled by g++ over the warp
shim (tests/cuda_warp_host.py), against the CPU. On a GPU host the engine runs the same
kernel (tests/test_window_syntax_gpu.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_gpu_tree_host import _merge, states  # noqa: F401 - the fixture

from mangonel.runtime.cpu.kernels import CpuKernels

PERIOD = 7  # panes per period (max / step)
# (last pane of the first window, windows): mid-period starts, several periods, one window
RUNS = [(0, 3), (5, 12), (30, 1), (41, 30)]


def _same(a: np.ndarray, b: np.ndarray) -> None:
    assert a.shape == b.shape
    for x, y in zip(a.tolist(), b.tolist(), strict=True):
        if isinstance(x, float):
            assert (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=1e-9), (x, y)
        else:
            assert x == y


def _tree_windows(state, n_keys: int, runs: list[tuple[int, int]]) -> dict:
    """Every window of the runs on its own: the tree over panes [period start, g + 1)."""
    columns: dict[str, list[list[np.ndarray]]] = {}
    for last, count in runs:
        for g in range(last, last + count):
            start = g // PERIOD * PERIOD
            values = state.windows(n_keys, [(start, 1)], 1, g - start + 1, 64)
            for name, parts in values.items():
                field = columns.setdefault(name, [[] for _ in parts])
                for index, part in enumerate(parts):
                    field[index].append(np.asarray(part))
    return {name: tuple(np.concatenate(p) for p in parts) for name, parts in columns.items()}


def test_cpu_prefix_equals_the_tree_per_window(states) -> None:  # noqa: F811
    s = states
    rng = np.random.default_rng(3)
    _merge(s, rng, 3, 0, 75, 900, fused=False)
    got = s.cpu.cumulative_windows(3, RUNS, PERIOD)
    want = _tree_windows(s.cpu, 3, RUNS)
    assert got.keys() == want.keys()
    for name in want:
        for a, b in zip(got[name], want[name], strict=True):
            _same(a, b)


def test_gpu_prefix_kernel_equals_the_cpu(states) -> None:  # noqa: F811
    s = states
    rng = np.random.default_rng(4)
    _merge(s, rng, 4, 2, 80, 1200, fused=False)
    for runs in (RUNS, [(14, 7)], [(69, 1)]):
        got = s.gpu.cumulative_windows(4, runs, PERIOD)
        want = s.cpu.cumulative_windows(4, runs, PERIOD)
        for name in want:
            for a, b in zip(got[name], want[name], strict=True):
                _same(np.asarray(a), b)
    # no keys, no windows: neutral-filled, empty
    empty = s.gpu.cumulative_windows(0, [(3, 2)], PERIOD)
    assert all(len(part) == 2 for parts in empty.values() for part in parts)


def test_windows_outside_the_state_are_refused_on_the_cpu() -> None:
    from plans import make_plan
    from test_gpu_tree_host import AGGREGATES, COLUMNS

    from mangonel.compiler import physical as ph

    window = ph.find(
        make_plan(COLUMNS, keys=("k",), aggregates=AGGREGATES, size=100, slide=10),
        ph.WindowAggregateExec,
    )
    state = CpuKernels().new_pane_state(window.fields)
    state.reshape(2, 16, 10)
    with pytest.raises(AssertionError, match="outside the pane state"):
        state.cumulative_windows(2, [(12, 2)], PERIOD)  # its period starts at pane 7 < 10
