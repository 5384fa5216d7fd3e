"""The holistic driver's pane arena (`holistic_pane.PaneArena`, read by `pane_span`): over
random sequences of firings (panes added, re-sorted after late values, freed, the store
emptied), every span's runs read exactly the values each pane held before it was placed; a
pane is copied into the arena once, not once per firing; compaction keeps the live panes and
frees the space of the others. The drivers' results over it are checked against the oracle
by tests/test_holistic.py and tests/test_python_window.py (CPU) and their GPU twins."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mangonel.runtime.cpu.kernels import CpuKernels
from mangonel.runtime.operators.holistic_pane import (
    MIN_ARENA_VALUES,
    HeldPane,
    PaneArena,
    pane_span,
)


class CountingKernels:
    """The CPU kernels' `concatenate` and `allocate`, counting the values copied."""

    def __init__(self) -> None:
        self.copied = 0
        self.cpu = CpuKernels.__new__(CpuKernels)  # the two methods read no state

    def concatenate(self, pieces, out=None):  # noqa: ANN001, ANN201
        self.copied += sum(len(p) for p in pieces)
        return CpuKernels.concatenate(self.cpu, pieces, out=out)

    def allocate(self, length, dtype):  # noqa: ANN001, ANN201
        return CpuKernels.allocate(self.cpu, length, dtype)


def _sorted_pane(rng: np.random.Generator, rows: int, n_slots: int, timed: bool) -> HeldPane:
    slots = np.sort(rng.integers(0, n_slots, rows))
    pane = HeldPane()
    values = rng.integers(-1000, 1000, rows).astype(np.int64)
    offsets = np.searchsorted(slots, np.arange(n_slots + 1)).astype(np.int64)
    times = rng.integers(0, 99, rows).astype(np.int64) if timed else None
    pane.take_sorted(values, offsets, times)
    return pane


def _expected(pane: HeldPane) -> tuple:
    return tuple(
        None if a is None else np.array(a, copy=True)
        for a in (pane.sorted_values, pane.offsets, pane.sorted_times)
    )


def _check_span(arena: PaneArena, store: dict, expected: dict, low: int, end: int) -> None:
    span = pane_span(arena, store, (low, end, end), lambda panes: None)
    for number in range(low, end):
        index = number - low
        if number not in store:
            assert span.offset_last[index] == -1
            continue
        values, offsets, times = expected[number]
        first = span.offset_first[index]
        assert span.offset_last[index] == len(offsets) - 1
        np.testing.assert_array_equal(span.offsets[first : first + len(offsets)], offsets)
        base = span.base[index]
        np.testing.assert_array_equal(span.values[base : base + len(values)], values)
        if times is not None:
            np.testing.assert_array_equal(span.times[base : base + len(times)], times)
        # the pane holds views of the arena now: the same values
        np.testing.assert_array_equal(store[number].sorted_values, values)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    timed=st.booleans(),
    steps=st.lists(st.sampled_from(["add", "fire", "resort", "free", "empty"]), max_size=40),
)
def test_spans_read_what_each_pane_held(seed: int, timed: bool, steps: list[str]) -> None:
    rng = np.random.default_rng(seed)
    kernels = CountingKernels()
    arena = PaneArena(kernels, timed)
    store: dict[int, HeldPane] = {}
    expected: dict[int, tuple] = {}
    next_pane, n_slots = 0, 3
    for step in steps:
        if step == "add":
            n_slots += int(rng.integers(0, 2))  # keys seen later: wider offsets
            rows = int(rng.choice([0, 1, 7, MIN_ARENA_VALUES // 3]))
            store[next_pane] = _sorted_pane(rng, rows, n_slots, timed)
            expected[next_pane] = _expected(store[next_pane])
            next_pane += 1
        elif step == "resort" and store:  # late values: the pane sorted anew
            number = int(rng.choice(list(store)))
            store[number] = _sorted_pane(rng, int(rng.integers(0, 50)), n_slots, timed)
            expected[number] = _expected(store[number])
        elif step == "free" and store:
            number = min(store)
            del store[number]
            if rng.random() < 0.5:  # as the driver frees panes; else compaction finds out
                arena.forget([number])
        elif step == "empty":
            store.clear()
            arena.clear()
        if store:
            low = min(store) - int(rng.integers(0, 2))
            _check_span(arena, store, expected, low, max(store) + 1)
        # the arena holds at most twice the live values, plus what one placement added
        live = sum(len(p.sorted_values) for p in store.values())
        if arena.buffers[0] is not None:
            assert len(arena.buffers[0]) <= max(2 * live + 2 * MIN_ARENA_VALUES, MIN_ARENA_VALUES)


def test_a_pane_is_copied_once_over_many_firings() -> None:
    """Sliding firings: each adds one pane, frees the oldest, and reads the last ten. The
    arena copies each pane's values about twice (once in, once per compaction), where the
    concatenation per firing copied each ten times."""
    rng = np.random.default_rng(7)
    kernels = CountingKernels()
    arena = PaneArena(kernels, timed=False)
    store: dict[int, HeldPane] = {}
    rows, firings, window = 1000, 200, 10
    for number in range(firings):
        store[number] = _sorted_pane(rng, rows, 5, False)
        if store.pop(number - window, None) is not None:
            arena.forget([number - window])
        pane_span(arena, store, (max(0, number - window + 1), number + 1, number + 1), list)
    values_in = rows * firings
    offsets_in = 6 * firings
    assert kernels.copied <= 2.5 * (values_in + offsets_in)
    assert kernels.copied >= values_in + offsets_in


def test_a_span_of_one_pane_reads_its_arrays() -> None:
    """Tumbling windows read one pane a span: its own arrays, nothing copied."""
    kernels = CountingKernels()
    arena = PaneArena(kernels, timed=False)
    store = {4: _sorted_pane(np.random.default_rng(1), 100, 3, False)}
    span = pane_span(arena, store, (4, 5, 5), list)
    assert span.values is store[4].sorted_values and span.offsets is store[4].offsets
    assert kernels.copied == 0 and arena.buffers[0] is None
