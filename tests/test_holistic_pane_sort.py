"""One sort of a firing's panes (`sort_panes`, runtime/gpu/holistic.py and the CPU's
runtime/cpu/holistic.py): each pane's values and offsets equal a sort of that pane alone
(`sort_pane`, `sort_pane_timed`) over random panes (empty ones, one slot, slots past a pane's
rows, ties, a sorted part with late chunks, event times); and the time-window driver over the
GPU kernels' code path (numpy standing in for CuPy) sorts a span's panes in one call, with
the oracle's results. On a GPU host the same comparisons run on the device
(tests/test_holistic_gpu.py: the driver's results against the CPU backend)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from cuda_host import HostArray, HostCupy, host_modules
from fuzzer import check
from hypothesis import given, settings
from test_holistic import SETTINGS
from test_holistic_kernels import edge_scenario
from test_python_window import scenarios as python_scenarios

from mangonel.runtime.cpu import holistic as cpu_holistic
from mangonel.runtime.cpu import python_window as cpu_python_window
from mangonel.runtime.cpu.kernels import CpuKernels
from mangonel.runtime.gpu import holistic as gpu_holistic
from mangonel.runtime.gpu.holistic import GpuHolistic
from mangonel.runtime.operators import holistic as holistic_driver
from mangonel.runtime.operators.holistic_pane import HeldPane, pane_span


@pytest.fixture(scope="module")
def host_module(tmp_path_factory):
    """A `CompileContext.module` stand-in: g++ over the CUDA shim."""
    if shutil.which("g++") is None:
        pytest.skip("g++ not on PATH")
    return host_modules(tmp_path_factory.mktemp("pane_sort_shim"))


def _chunk(rng, rows: int, n_slots: int, spread: int, timed: bool, top_slot: int | None = None):
    """(slots, values, times or None) of `rows` random rows in slots below `top_slot`."""
    top = n_slots if top_slot is None else top_slot
    slots = rng.integers(0, top, rows).astype(rng.choice([np.int32, np.int64]))
    values = rng.integers(-spread, spread + 1, rows).astype(np.int64)
    times = rng.integers(0, 6, rows).astype(np.int64) if timed else None
    return slots, values, times


def _sorted_part(rng, rows: int, n_slots: int, spread: int, timed: bool, by_value: bool):
    """A pane's part sorted earlier, when only the first slots were known (offsets of fewer
    than n_slots + 1 entries); `by_value` False: grouped by slot, unsorted within one."""
    known = int(rng.integers(1, n_slots + 1))
    slots, values, times = _chunk(rng, rows, n_slots, spread, timed, known)
    keys = (values, slots) if times is None else (times, values, slots)
    order = np.lexsort(keys) if by_value else np.argsort(slots, kind="stable")
    offsets = np.searchsorted(slots[order], np.arange(known + 1)).astype(np.int64)
    return values[order], offsets, None if times is None else times[order]


def random_panes(rng, n_slots: int, timed: bool, by_value: bool = True) -> list:
    """Panes as `sort_panes` takes them: (sorted part or None, chunks)."""
    panes = []
    for _ in range(int(rng.integers(0, 9))):
        spread = int(rng.choice([0, 2, 1000]))  # 0: every value equal
        shape = rng.integers(0, 5)
        sorted_part = None
        if shape >= 3:  # values sorted when a window read the pane, then late chunks
            rows = int(rng.integers(0, 30))
            sorted_part = _sorted_part(rng, rows, n_slots, spread, timed, by_value)
        chunks = []
        if shape != 0:  # 0: a pane with no values at all
            for _ in range(int(rng.integers(0 if shape >= 3 else 1, 4))):
                rows = int(rng.choice([0, 1, 7, 40]))
                # a chunk's rows often in a few slots only: slots past them read its end
                top = int(rng.integers(1, n_slots + 1))
                chunks.append(_chunk(rng, rows, n_slots, spread, timed, top))
        panes.append((sorted_part, chunks))
    return panes


def pane_rows(pane, timed: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """One pane's rows (slots, values, times) in one array each, its sorted part's first."""
    sorted_part, chunks = pane
    pieces = list(chunks)
    if sorted_part is not None:
        values, offsets, times = sorted_part
        slots = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
        pieces.insert(0, (slots, values, times))
    slots = np.concatenate([np.zeros(0, np.int64)] + [s.astype(np.int64) for s, _, _ in pieces])
    values = np.concatenate([np.zeros(0, np.int64)] + [v for _, v, _ in pieces])
    if not timed:
        return slots, values, None
    return slots, values, np.concatenate([np.zeros(0, np.int64)] + [t for _, _, t in pieces])


def _one_pane_sorts(kernels, pane, n_slots: int, timed: bool):
    """(values, offsets, times or None) of a sort of the pane alone (`sort_pane`)."""
    slots, values, times = pane_rows(pane, timed)
    if timed:
        sorted_values, sorted_times, offsets = kernels.sort_pane_timed(
            slots, values, times, n_slots
        )
        return sorted_values, offsets, sorted_times
    sorted_values, offsets = kernels.sort_pane(slots, values, n_slots)
    return sorted_values, offsets, None


def _same(got, want) -> bool:
    return (got is None and want is None) or (
        got is not None and want is not None and np.array_equal(np.asarray(got), want)
    )


def _on_the_device(pane):
    """The pane as the GPU path holds it: sorted parts on the device (HostArray)."""
    sorted_part, chunks = pane
    if sorted_part is not None:
        sorted_part = tuple(
            None if a is None else np.asarray(a).view(HostArray) for a in sorted_part
        )
    return sorted_part, chunks


@pytest.mark.parametrize("timed", [False, True], ids=["values", "timed"])
def test_the_batched_sort_equals_a_sort_per_pane(host_module, timed):
    rng = np.random.default_rng(41)
    gpu = GpuHolistic(HostCupy(), host_module)
    cpu = CpuKernels()
    for case in range(150):
        n_slots = int(rng.choice([1, 2, 5, 300]))
        panes = random_panes(rng, n_slots, timed, by_value=case % 3 != 0)
        got_gpu = gpu.sort_panes([_on_the_device(p) for p in panes], n_slots, timed)
        got_cpu = cpu.sort_panes(panes, n_slots, timed)
        assert len(got_gpu) == len(got_cpu) == len(panes)
        for number, pane in enumerate(panes):
            want = _one_pane_sorts(cpu, pane, n_slots, timed)
            alone = _one_pane_sorts(gpu, pane, n_slots, timed)  # the GPU's sort of one pane
            for got in (got_gpu[number], got_cpu[number], alone):
                assert len(got[1]) == n_slots + 1, (case, number)
                for part, g, w in zip(("values", "offsets", "times"), got, want, strict=True):
                    assert _same(g, w), (case, number, part)


def test_the_batched_sort_reads_nothing_from_the_device_and_sorts_once(host_module, monkeypatch):
    """One sort for every pane (two stable argsorts untimed: value, then (pane, slot)); no
    device-to-host read, also for a pane sorted before (its slots found from its offsets on
    the device)."""
    reads, sorts = [], []
    original_host, original_sort = gpu_holistic._host, gpu_holistic.lexsort_order
    monkeypatch.setattr(gpu_holistic, "_host", lambda a: reads.append(1) or original_host(a))
    monkeypatch.setattr(
        gpu_holistic, "lexsort_order", lambda xp, keys: sorts.append(1) or original_sort(xp, keys)
    )
    rng = np.random.default_rng(43)
    gpu = GpuHolistic(HostCupy(), host_module)
    panes = [(_sorted_part(rng, 20, 6, 9, False, True), [_chunk(rng, 15, 6, 9, False)])]
    panes += [(None, [_chunk(rng, 10, 6, 9, False) for _ in range(3)]) for _ in range(12)]
    found = gpu.sort_panes([_on_the_device(p) for p in panes], 6, False)
    assert len(found) == 13 and len(sorts) == 1 and not reads
    # every pane's results are views of one sorted array
    owner = found[0][0].base
    assert owner is not None and all(values.base is owner for values, _, _ in found)
    empty = gpu.sort_panes([(None, []), (None, [_chunk(rng, 0, 6, 9, False)])], 6, False)
    assert [(len(v), np.asarray(o).tolist()) for v, o, _ in empty] == [(0, [0] * 7)] * 2


class _CountingHolistic(GpuHolistic):
    """The GPU kernels counting sorts: `sort_panes` calls and panes, and per-pane sorts that
    sorted (not a presorted chunk's offsets). A Python function runs on the CPU kernel over
    the host's copies (numba's CUDA target needs a device)."""

    calls: list[int] = []  # panes per `sort_panes` call, over every instance
    pane_sorts: list[int] = []

    def sort_panes(self, panes, n_slots, timed):  # noqa: ANN001, ANN201
        type(self).calls.append(len(panes))
        return super().sort_panes(panes, n_slots, timed)

    def sort_pane(self, slots, keys, n_slots, presorted=False):  # noqa: ANN001, ANN201
        if not presorted:
            type(self).pane_sorts.append(1)
        return super().sort_pane(slots, keys, n_slots, presorted)

    def sort_pane_timed(self, slots, keys, times, n_slots):  # noqa: ANN001, ANN201
        type(self).pane_sorts.append(1)
        return super().sort_pane_timed(slots, keys, times, n_slots)

    def python_window(  # noqa: ANN201
        self,
        function,
        keys,
        start,
        end,
        first,
        count,
        sorted_runs,
        floating,
        times=None,  # noqa: ANN001
    ):
        host = [np.asarray(a) for a in (keys, start, end, first, count)]
        host_times = None if times is None else np.asarray(times)
        return cpu_python_window.evaluate_python(function, *host, sorted_runs, floating, host_times)


@pytest.fixture
def counted_gpu_path(host_module, monkeypatch):
    """CPU plans whose holistic step runs the GPU kernels' code, counting the pane sorts and
    the spans (`pane_span` calls) the driver built."""
    monkeypatch.setattr(_CountingHolistic, "calls", [])
    monkeypatch.setattr(_CountingHolistic, "pane_sorts", [])
    monkeypatch.setattr(
        CpuKernels, "holistic_for", lambda self, plan: _CountingHolistic(HostCupy(), host_module)
    )
    spans: list[int] = []
    original = holistic_driver.pane_span
    monkeypatch.setattr(holistic_driver, "pane_span", lambda *a: spans.append(1) or original(*a))
    return spans


@pytest.mark.parametrize(("size", "slide"), [(40, 4), (12, 4), (300, 1)])
def test_an_out_of_order_stream_sorts_each_span_once(counted_gpu_path, size, slide):
    failure = check(edge_scenario(size, slide), "cpu")
    assert failure is None, str(failure)
    calls = _CountingHolistic.calls
    assert 0 < len(calls) <= len(counted_gpu_path)  # at most one sort per span
    assert max(calls) > 1  # a call sorted several panes of a firing together
    assert not _CountingHolistic.pane_sorts  # and no pane was sorted alone


@settings(max_examples=25, **SETTINGS)
@given(python_scenarios("time"))
def test_python_functions_over_the_gpu_path_match_the_oracle(counted_gpu_path, scenario):
    """Python functions (`with_timestamps` too: the timed sort) and MEDIAN beside them."""
    failure = check(scenario, "cpu")
    assert failure is None, f"{failure}\n{scenario.query}"
    assert not _CountingHolistic.pane_sorts
    assert len(_CountingHolistic.calls) <= len(counted_gpu_path)


def test_a_pane_given_late_values_after_its_sort_merges_them(host_module):
    """The sorted values of a pane plus its late chunk, through the driver's `_sort_panes`
    rule: sorted again with the late values in their slots, as a sort of all of them."""
    from mangonel.runtime.operators.holistic_pane import HeldPane

    rng = np.random.default_rng(47)
    for kernels in (CpuKernels(), GpuHolistic(HostCupy(), host_module)):
        pane = HeldPane()
        first = _chunk(rng, 50, 4, 20, False)
        pane.add(first, False)
        ((values, offsets, _),) = kernels.sort_panes([pane.unsorted()], 4, False)
        pane.take_sorted(values, offsets, None)
        assert not pane.needs_sort
        late = _chunk(rng, 9, 6, 20, False)  # two slots the first sort did not know
        pane.add(late, False)
        assert pane.needs_sort and pane.length == 59
        ((values, offsets, _),) = kernels.sort_panes([pane.unsorted()], 6, False)
        slots = np.concatenate([first[0], late[0]]).astype(np.int64)
        want_values, want_offsets = cpu_holistic.sort_pane(
            slots, np.concatenate([first[1], late[1]]), 6
        )
        assert np.array_equal(np.asarray(values), want_values)
        assert np.array_equal(np.asarray(offsets), want_offsets)


def test_a_span_of_one_pane_reads_its_arrays_and_of_more_a_concatenation() -> None:
    """Tumbling windows read one pane a span: its own arrays, not a copy; a span of several
    panes (one empty number between them) is their values in order, each pane's base and
    offsets where its values start."""
    kernels = CpuKernels.__new__(CpuKernels)  # `concatenate` reads no state
    panes = {}
    for number, values in ((3, [5, 1, 9]), (5, [2, 7])):
        pane = HeldPane()
        pane.take_sorted(np.array(values, np.int64), np.array([0, len(values)], np.int64), None)
        panes[number] = pane
    one = pane_span(kernels, panes, (3, 4, 4), False, lambda listed: None)
    assert one.values is panes[3].sorted_values and one.offsets is panes[3].offsets
    both = pane_span(kernels, panes, (3, 6, 6), False, lambda listed: None)
    np.testing.assert_array_equal(both.values, [5, 1, 9, 2, 7])
    np.testing.assert_array_equal(both.base, [0, 3, 3])
    np.testing.assert_array_equal(both.offset_last, [1, -1, 1])
