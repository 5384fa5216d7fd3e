"""The GPU window tree kept across firings (`GpuPaneState._kept_tree`: SPRINGALD's B-PAT
updated in place) and the whole GPU firing path without a GPU: merge, tree levels, window
compute, device finalize and the packed copy, every generated kernel compiled by g++ over the
warp shim (tests/cuda_warp_host.py: blocks in turn, real barriers and shuffles; pointers are
host addresses). A sequence of merges and firings (fused-style merges that mark only their
panes stale, split-path merges that mark everything, windows that leave the state's columns
and take a firing's own padded tree) gives the CPU backend's results every time. On a GPU
host the engine runs the same path (tests/test_gpu_hot_keys.py)."""

from __future__ import annotations

import math
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
from cuda_host import HostArray, HostCupy, host_key_map
from cuda_warp_host import WarpHostModule
from plans import make_plan
from sqlglot import exp

from mangonel.catalog.types import SqlType as T
from mangonel.compiler import codegen
from mangonel.compiler import physical as ph
from mangonel.compiler.logical import AggregateFunction as F
from mangonel.compiler.options import GpuOptions
from mangonel.runtime.cpu.kernels import CpuKernels
from mangonel.runtime.gpu import device
from mangonel.runtime.gpu.state import GpuPaneState

COLUMNS = [("ts", T.TIMESTAMP), ("k", T.BIGINT), ("x", T.DOUBLE)]
AGGREGATES = [
    (F.COUNT_STAR, None),
    (F.SUM, exp.column("x")),
    (F.MIN, exp.column("x")),
    (F.STDDEV_SAMP, exp.column("x")),
]
KEYS, PANES = 4, 128  # state capacity
PS, PW = 5, 20  # panes per slide and per window: tree levels 1..4


class PointerArray(HostArray):
    """A host array whose `.data.ptr` is its address (CuPy's device pointer)."""

    @property
    def data(self):  # noqa: ANN201
        return SimpleNamespace(ptr=self.ctypes.data)


class PointerCupy(HostCupy):
    """HostCupy whose arrays have `.data.ptr` (the tree passes level pointers)."""

    @staticmethod
    def empty(shape, dtype=np.float64) -> PointerArray:  # noqa: ANN001
        return np.zeros(shape, dtype).view(PointerArray)

    def __getattr__(self, name: str):  # noqa: ANN204
        found = super().__getattr__(name)
        if not callable(found) or isinstance(found, type):
            return found

        def wrapped(*args, **kwargs):  # noqa: ANN202
            result = found(*args, **kwargs)
            return result.view(PointerArray) if isinstance(result, np.ndarray) else result

        return wrapped


@pytest.fixture()
def states(tmp_path, monkeypatch):
    if shutil.which("g++") is None:
        pytest.skip("g++ not on PATH")
    monkeypatch.setattr(device, "cupy", lambda: PointerCupy())
    plan = make_plan(COLUMNS, keys=("k",), aggregates=AGGREGATES, size=100, slide=10)
    window = ph.find(plan, ph.WindowAggregateExec)
    fields = window.fields
    state_kernels = codegen.render_state_kernels(fields)
    state_module = WarpHostModule(state_kernels.source, tmp_path)
    finalize_kernels = codegen.render_finalize_kernels(fields, window.aggregates)
    finalize_module = WarpHostModule(finalize_kernels.source, tmp_path)
    ctypes = codegen.finalize_ctypes(fields, window.aggregates)
    options = GpuOptions(threads=32, tree_span=2, tree_threads=32)
    gpu = GpuPaneState(
        fields,
        lambda: (state_kernels, state_module),
        options,
        lambda plans: (finalize_kernels, finalize_module, ctypes),
    )
    cpu_kernels = CpuKernels()
    cpu = cpu_kernels.new_pane_state(fields)
    for state in (gpu, cpu):
        state.reshape(KEYS, PANES, 0)
    return SimpleNamespace(gpu=gpu, cpu=cpu, cpu_kernels=cpu_kernels, window=window)


def _merge(s, rng, keys: int, first_pane: int, end_pane: int, rows: int, fused: bool) -> None:
    """Random rows of `keys` slots over panes [first_pane, end_pane) into both states; a
    fused-style merge marks only its panes stale in the kept tree (as `lift_merge` does)."""
    slots = rng.integers(0, keys, rows)
    panes = rng.integers(first_pane, end_pane, rows)
    x = rng.normal(10, 3, rows)
    partials = {}
    for field in s.window.fields:
        kind = field.kind.name
        if kind == "count":
            partials[field.name] = (np.ones(rows, np.int64),)
        elif kind == "moments":
            partials[field.name] = (np.ones(rows), x, np.zeros(rows))
        else:
            partials[field.name] = (x,)
    s.cpu.merge(s.cpu_kernels.flat_index(slots, panes, s.cpu), partials)
    gpu_partials = {
        name: tuple(PointerCupy().asarray(p) for p in v) for name, v in partials.items()
    }
    stale = s.gpu._dirty
    s.gpu.merge(PointerCupy().asarray(slots * PANES + panes), gpu_partials)
    if fused:  # the merge kernel marked everything; the fused pass marks its panes only
        s.gpu._dirty = stale
        s.gpu.mark_merged(first_pane, end_pane)


def _fire_and_compare(s, n_keys: int, first_window: int, windows: int, cpu=None) -> int:
    runs = [(first_window * PS, windows)]
    window_ids = np.arange(first_window, first_window + windows, dtype=np.int64)
    plans = s.window.aggregates
    # the keys: 10 * slot (the CPU decodes the slots on the host, the GPU's finalize kernel
    # writes the words; without slots asked for it writes none)
    keys = host_key_map((T.BIGINT,), np.stack((10 * np.arange(KEYS), np.zeros(KEYS)), 1))
    want = (cpu or s.cpu).fire(n_keys, runs, PS, PW, 64, window_ids, plans, (PS, PW), keys)
    for with_slots in (False, True):
        got = s.gpu.fire(n_keys, runs, PS, PW, 64, window_ids, plans, (PS, PW), keys, with_slots)
        assert (got[2] is None) is not with_slots
        np.testing.assert_array_equal(got[3][0].to_numpy(), want[2] * 10)
        assert got[3][0].equals(want[3][0])
    for index in range(3):  # window starts, ends, key slots
        np.testing.assert_array_equal(got[index], want[index])
    for plan, a, b in zip(plans, got[4], want[4], strict=True):
        assert a.type == b.type and a.null_count == b.null_count, plan.function
        for x, y in zip(a.to_pylist(), b.to_pylist(), strict=True):
            if isinstance(x, float) and isinstance(y, float):
                assert (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=1e-9)
            else:
                assert x == y, (plan.function, x, y)
    return len(want[0])


def test_kept_tree_through_merges_and_firings_equals_the_cpu(states):
    s = states
    rng = np.random.default_rng(5)
    _merge(s, rng, 3, 0, 60, 600, fused=False)
    assert _fire_and_compare(s, 3, 0, 8) > 0  # windows [0, 60): the tree is built whole
    assert s.gpu._dirty is None and s.gpu._tree is not None
    # fused-style merges: only their panes are rebuilt; one touches a window already fired
    _merge(s, rng, 3, 40, 70, 300, fused=True)
    assert s.gpu._dirty == (40, 70)
    assert _fire_and_compare(s, 3, 6, 10) > 0
    _merge(s, rng, 3, 95, 101, 50, fused=True)
    _merge(s, rng, 3, 3, 4, 10, fused=True)  # one stale stretch spans both
    assert s.gpu._dirty == (3, 101)
    assert _fire_and_compare(s, 3, 0, 20) > 0
    # a new key through the split path: everything is rebuilt, the new slot included
    _merge(s, rng, 4, 60, 100, 200, fused=False)
    assert _fire_and_compare(s, 4, 10, 12) > 0
    # windows starting before the state's first column or ending past its last take a
    # firing's own padded tree (the CPU needs a state that holds them: the same cells)
    wide = s.cpu_kernels.new_pane_state(s.window.fields)
    wide.reshape(KEYS, 2 * PANES, -PANES // 2)
    wide.load_arrays(s.cpu.to_arrays(KEYS, 0, PANES), 0)
    assert _fire_and_compare(s, 4, -3, 6, wide) > 0
    assert _fire_and_compare(s, 4, 18, 10, wide) > 0
    # no merge since the last firing: nothing to rebuild, the same results
    assert s.gpu._dirty is None
    assert _fire_and_compare(s, 4, 10, 12) > 0


def test_a_reshape_drops_the_kept_tree(states):
    s = states
    rng = np.random.default_rng(9)
    _merge(s, rng, 2, 10, 50, 300, fused=False)
    assert _fire_and_compare(s, 2, 2, 5) > 0
    for state in (s.gpu, s.cpu):
        state.reshape(KEYS, 2 * PANES, 5)  # the columns move (values kept): a new tree
    assert s.gpu._tree is None
    assert _fire_and_compare(s, 2, 2, 6) > 0
