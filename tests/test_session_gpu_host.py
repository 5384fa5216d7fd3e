"""The GPU session-window kernels (`runtime/gpu/sessions.py`, `session.cu.j2`) without a GPU:
the generated module compiled by g++ over the CUDA shim (tests/cuda_host.py), the sessions'
combine through the state merge kernel over the warp shim (tests/cuda_warp_host.py: it
shuffles), CuPy replaced by numpy. They equal the CPU's numba kernels exactly (sessions are
numbered in (slot, start) order on both), in both forms (the bucket table, the sort), for rows
in order, nearly in order and shuffled; and the session driver over these kernels equals the
oracle on random streams (late rows, NULL keys, snapshots). nvcc compiles the module for
sm_90. On a GPU host tests/test_session_window_gpu.py runs the same on the device."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from cuda_host import HostCupy, HostModule, write_shim
from cuda_warp_host import WarpHostModule
from hypothesis import given, settings
from test_gpu_combine_host import _partials, _same
from test_holistic_kernels import nvcc_ptx
from test_session_window import run_both, session_streams
from test_window_properties import SETTINGS

from mangonel.compiler import codegen
from mangonel.compiler.options import GpuOptions
from mangonel.runtime.cpu import sessions as cpu_sessions
from mangonel.runtime.cpu.kernels import CpuKernels
from mangonel.runtime.gpu import device
from mangonel.runtime.gpu import sessions as gpu_sessions
from mangonel.runtime.gpu.state import GpuPaneState
from mangonel.runtime.operators import registry

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not on PATH")

THREADS = 32  # the merge kernel's block on the warp shim: one warp of host threads


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    """`CompileContext.module` on the host: the session module over the one-thread shim
    (grid-stride loops, no cooperation), the state modules over the warp shim."""
    folder = tmp_path_factory.mktemp("session_shim")
    write_shim(folder)
    built: dict[str, object] = {}

    def module_of(generated, options=()):  # noqa: ANN001, ANN202
        if generated.digest not in built:
            if "session_cells" in generated.names:
                built[generated.digest] = HostModule(generated.source, folder)
            else:
                built[generated.digest] = WarpHostModule(generated.source, folder)
        return built[generated.digest]

    return module_of


def host_sessions(module_of) -> gpu_sessions.GpuSessions:  # noqa: ANN001
    """The GPU session kernels over numpy and the host modules (CuPy's place: HostCupy)."""
    states: dict[tuple, GpuPaneState] = {}

    def pane_state_of(fields):  # noqa: ANN001, ANN202
        if fields not in states:
            generated = codegen.render_state_kernels(fields)
            states[fields] = GpuPaneState(
                fields, lambda: (generated, module_of(generated)), GpuOptions(threads=THREADS)
            )
        return states[fields]

    return gpu_sessions.GpuSessions(HostCupy(), module_of, pane_state_of)


@pytest.fixture
def host_cupy(monkeypatch):
    monkeypatch.setattr(device, "cupy", lambda: HostCupy())


def _rows(order: str, rows: int, keys: int, rng: np.random.Generator):
    slots = rng.integers(0, keys, rows).astype(np.int64)
    starts = np.cumsum(rng.integers(0, 6, rows)) - 200  # event times before the epoch too
    if order == "nearly":
        starts = starts + rng.integers(0, 12, rows)
    elif order == "shuffled":
        starts = rng.permutation(starts)
    return slots, starts.astype(np.int64)


@pytest.mark.parametrize("form", ["table", "sort"])
@pytest.mark.parametrize("order", ["in order", "nearly", "shuffled"])
@pytest.mark.parametrize("gap", [1, 4, 37])
def test_batch_sessions_equal_the_cpu(modules, monkeypatch, form, order, gap):
    if form == "sort":  # no table is small enough: the rows are sorted by (slot, ts)
        monkeypatch.setattr(gpu_sessions, "TABLE_CELLS_PER_ROW", 0)
        monkeypatch.setattr(gpu_sessions, "TABLE_MIN_CELLS", 0)
    rng = np.random.default_rng(gap * 31 + len(order))
    keys = 5
    slots, starts = _rows(order, 700, keys, rng)
    kernels = host_sessions(modules)
    got = kernels.batch_sessions(slots, starts, gap, keys + 2)  # two slots without rows
    want = cpu_sessions.batch_sessions(slots, starts, gap, keys + 2)
    for g, w in zip(got, want, strict=True):
        assert np.array_equal(np.asarray(g), w)
    assert (kernels.table_batches, kernels.sorted_batches) == (
        (1, 0) if form == "table" else (0, 1)
    )


def test_batch_sessions_of_one_row_and_of_none(modules):
    kernels = host_sessions(modules)
    got = kernels.batch_sessions(np.array([3]), np.array([-7]), 5, 4)
    assert [np.asarray(a).tolist() for a in got] == [[0], [3], [-7], [-2]]
    assert [len(a) for a in kernels.batch_sessions(np.zeros(0), np.zeros(0), 5, 4)] == [0] * 4


def test_batch_sessions_near_the_int64_ends_equal_the_cpu(modules):
    """Event times a gap inside int64's ends (the conformer drops later ones): the bucket
    count is computed in Python integers, so the span picks the sort, and no end wraps."""
    gap = 50
    low, high = -(2**63), 2**63 - 1 - gap
    starts = np.array([high, low, low + 49, high - 10, low + 200, high - 60], np.int64)
    slots = np.array([0, 0, 0, 0, 1, 0], np.int64)
    kernels = host_sessions(modules)
    got = kernels.batch_sessions(slots, starts, gap, 2)
    want = cpu_sessions.batch_sessions(slots, starts, gap, 2)
    for g, w in zip(got, want, strict=True):
        assert np.array_equal(np.asarray(g), w)
    assert kernels.sorted_batches == 1
    assert np.asarray(got[3]).max() == 2**63 - 1  # [high, high + gap): the largest end


@pytest.mark.parametrize("seed", range(6))
def test_assign_sessions_of_intervals_of_any_length_equal_the_cpu(modules, seed):
    """Open sessions beside a batch's (each set disjoint per slot, lengths differ): one long
    interval can join several, which the walk's largest end so far catches."""
    rng = np.random.default_rng(seed)
    count, keys = 300, 6
    slots = rng.integers(0, keys, count).astype(np.int64)
    starts = rng.integers(-500, 500, count).astype(np.int64)
    ends = starts + rng.choice([1, 3, 10, 200], count)
    got = host_sessions(modules).assign_sessions(slots, starts, ends, keys)
    want = cpu_sessions.assign_sessions(slots, starts, ends, keys)
    numbers, first, session_ends = (np.asarray(a) for a in got)
    assert np.array_equal(numbers, want[0]) and np.array_equal(session_ends, want[2])
    # the first interval of a session: any of its least start (ties are the same session)
    assert np.array_equal(slots[first], slots[want[1]])
    assert np.array_equal(starts[first], starts[want[1]])


def _disjoint_set(rng: np.random.Generator, keys: int, per_key: int):
    """Intervals disjoint within each slot, none touching (touching ones are one session;
    some end one before the next start), shuffled: what the driver's open sessions, or a
    batch's sessions, are."""
    slots, starts, ends = [], [], []
    for slot in range(keys):
        cuts = np.sort(rng.choice(np.arange(-300, 300), 2 * per_key, replace=False))
        first, last = cuts[0::2], cuts[1::2].copy()
        touch = rng.random(per_key - 1) < 0.2
        last[:-1][touch] = first[1:][touch] - 1
        slots += [slot] * per_key
        starts += first.tolist()
        ends += last.tolist()
    order = rng.permutation(len(slots))
    return (np.asarray(a, np.int64)[order] for a in (slots, starts, ends))


@pytest.mark.parametrize("seed", range(8))
def test_two_disjoint_sets_merge_at_once_as_the_cpu_walks(modules, seed):
    """Open sessions (the first set) beside a batch's (the second): the per-position
    decision equals the CPU's walk, numbering, first intervals and ends included; a long
    interval of one set joins several of the other."""
    rng = np.random.default_rng(100 + seed)
    keys = 5
    first = list(_disjoint_set(rng, keys, int(rng.integers(1, 40))))
    second = list(_disjoint_set(rng, keys + 1, int(rng.integers(1, 40))))
    if seed % 2:  # equal starts across the sets: the same session whichever comes first
        second[1][: len(second[1]) // 3] = first[1][: len(second[1]) // 3]
        second[0][: len(second[0]) // 3] = first[0][: len(second[0]) // 3]
        second[2] = np.maximum(second[2], second[1] + 1)
        keep = _disjoint_within_slots(*second)
        second = [a[keep] for a in second]
    slots, starts, ends = (np.concatenate((a, b)) for a, b in zip(first, second, strict=True))
    got = host_sessions(modules).assign_sessions(
        slots, starts, ends, keys + 1, disjoint_first=len(first[0])
    )
    want = cpu_sessions.assign_sessions(slots, starts, ends, keys + 1)
    numbers, chosen, session_ends = (np.asarray(a) for a in got)
    assert np.array_equal(numbers, want[0]) and np.array_equal(session_ends, want[2])
    assert np.array_equal(slots[chosen], slots[want[1]])
    assert np.array_equal(starts[chosen], starts[want[1]])
    assert len(want[2]) < len(first[0]) + len(second[0])  # some intervals did join


def _disjoint_within_slots(slots, starts, ends) -> np.ndarray:
    """A mask keeping intervals so that the kept ones are disjoint and do not touch within
    each slot."""
    keep = np.zeros(len(slots), np.bool_)
    reach: dict[int, int] = {}
    for i in np.lexsort((starts, slots)):
        if starts[i] > reach.get(int(slots[i]), -(2**62)):
            keep[i] = True
            reach[int(slots[i])] = int(ends[i])
    return keep


def test_combine_sessions_equals_the_cpu(modules, host_cupy):
    """Every incremental state kind (NULLs, NaN, inf, int64 extremes) combined per session
    by the state merge kernel equals the CPU's scatter (floating sums within rounding)."""
    rng = np.random.default_rng(7)
    rows, count = 400, 23
    fields, partials = _partials(rows, rng)
    numbers = np.sort(rng.integers(0, count, rows)).astype(np.int64)
    numbers[: rows // 2] = rng.permutation(numbers[: rows // 2])  # some out of order
    kernels = host_sessions(modules)
    for _ in range(2):  # the second call starts from neutral cells again
        got = kernels.combine_sessions(fields, numbers, count, partials)
    want = cpu_sessions.combine_sessions(fields, numbers, count, partials)
    kinds = {field.name: field.kind.name for field in fields}
    for name, parts in want.items():
        exact = kinds[name] in ("count", "min", "max", "bool_and", "bool_or")
        for g, w in zip(got[name], parts, strict=True):
            assert _same(np.asarray(g), w, exact), (name, kinds[name])
    assert int(want[fields[0].name][0].sum()) == rows  # every row went to a session


class HostGpuSessionKernels(CpuKernels):
    """The CPU kernels with the GPU's session kernels (on the host): the session driver's
    GPU code path (device-shaped sessions handed back through `to_host`)."""

    sessions: gpu_sessions.GpuSessions

    def batch_sessions(self, *arguments):  # noqa: ANN002, ANN201
        return self.sessions.batch_sessions(*arguments)

    def assign_sessions(self, *arguments, **options):  # noqa: ANN002, ANN003, ANN201
        return self.sessions.assign_sessions(*arguments, **options)

    def combine_sessions(self, *arguments):  # noqa: ANN002, ANN201
        return self.sessions.combine_sessions(*arguments)


@settings(max_examples=40, **SETTINGS)
@given(session_streams())
def test_the_driver_over_the_gpu_session_kernels_equals_the_oracle(modules, case):
    plan, batches, snapshot_at = case
    kernels = HostGpuSessionKernels()
    kernels.sessions = host_sessions(modules)
    # hypothesis runs the examples inside one test call: a MonkeyPatch of their own
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(device, "cupy", lambda: HostCupy())
        patch.setattr(registry, "new_kernels", lambda backend, options=None: kernels)
        patch.setattr(gpu_sessions, "TABLE_MIN_CELLS", 64)  # the sorted form too
        run_both(plan, batches, snapshot_at)


def test_the_session_module_compiles_for_sm90(tmp_path):
    generated = codegen.render_session_kernels()
    ptx = nvcc_ptx(tmp_path, generated.source)
    assert all(f".entry {name}(" in ptx for name in generated.names.values())
