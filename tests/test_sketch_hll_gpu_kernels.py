"""APPROX_COUNT_DISTINCT's GPU kernels (runtime/gpu/sketches.py, sketch_hll.cu.j2) without a
GPU: the module compiles with nvcc; compiled by g++ over the CUDA shim (tests/cuda_host.py)
the update kernel gives the CPU's registers byte for byte (every argument type, NaN, -0.0,
infinities, extremes, several precisions), the merge the CPU's maxima, the histograms the
CPU's estimates, the snapshot the CPU's bytes; and the time-window driver over the GPU code
path (numpy standing in for CuPy) equals the CPU backend and stays within the oracle's
bounds. On a GPU host the same comparisons run on the device (tests/test_sketch_sql_gpu.py).
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from cuda_host import HostCupy, host_modules
from fuzzer import check, engine_run
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import first_difference
from test_holistic_kernels import nvcc_ptx
from test_sketch_sql import SETTINGS, grouped_scenario, scenarios

from mangonel.aggregates.holistic import order_keys
from mangonel.catalog.types import SqlType
from mangonel.compiler import codegen
from mangonel.runtime.cpu import sketch_hll, sketch_windows
from mangonel.runtime.cpu.kernels import CpuKernels
from mangonel.runtime.cpu.sketch_windows import HllSketches
from mangonel.runtime.gpu.holistic import GpuHolistic
from mangonel.runtime.gpu.sketches import DeviceHll, GpuSketches
from mangonel.runtime.operators import sketch_panes, sketch_ring
from mangonel.runtime.operators.holistic import HolisticTimeWindows

HLL = "approx_count_distinct"
RSD_OF_P = {4: 0.3, 9: 0.05, 12: 0.02, 14: 0.01}  # hll_precision(rsd) == p


@pytest.fixture(scope="module")
def host_module(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("g++ not on PATH")
    return host_modules(tmp_path_factory.mktemp("hll_shim"))


@pytest.fixture
def gpu(host_module) -> GpuSketches:
    return GpuSketches(HostCupy(), host_module)


def test_the_hll_kernels_compile_with_nvcc(tmp_path):
    generated = codegen.render_hll_kernels()
    ptx = nvcc_ptx(tmp_path, generated.source)
    for name in generated.names.values():
        assert name in ptx


def _values(rng: np.random.Generator, argument: SqlType, rows: int) -> np.ndarray:
    """Values of `argument`: random, with the special ones Spark normalises or hashes at the
    edges (NaN, -0.0, infinities, integer extremes)."""
    if argument in (SqlType.DOUBLE, SqlType.FLOAT):
        dtype = np.float64 if argument is SqlType.DOUBLE else np.float32
        values = rng.normal(0, 1e6, rows).astype(dtype)
        special = np.array([np.nan, -np.nan, -0.0, 0.0, np.inf, -np.inf, 1.5, -1.5], dtype)
        values[: len(special)] = special
        return values
    if argument is SqlType.INT:
        values = rng.integers(-(2**31), 2**31, rows).astype(np.int64)
        values[:3] = [-(2**31), 2**31 - 1, 0]
        return values
    values = rng.integers(-(2**63), 2**63 - 1, rows, dtype=np.int64)
    values[:3] = [-(2**63), 2**63 - 1, -1]
    return values


@pytest.mark.parametrize(
    "argument", [SqlType.BIGINT, SqlType.TIMESTAMP, SqlType.INT, SqlType.DOUBLE, SqlType.FLOAT]
)
@pytest.mark.parametrize("p", sorted(RSD_OF_P))
def test_the_update_kernel_gives_the_cpu_registers(gpu, argument, p):
    rng = np.random.default_rng(p)
    rows, n_cells = 3000, 7
    values = _values(rng, argument, rows)
    values = np.concatenate([values, values[:500]])  # duplicates change nothing
    cells = rng.integers(0, n_cells, len(values)).astype(np.int64)
    # the device reads order keys (the VALUES lift); FLOAT values widen to double first
    keys = order_keys(values.astype(np.float64) if argument is SqlType.FLOAT else values)
    got = gpu.build(HLL, cells, n_cells, keys, argument, RSD_OF_P[p])
    want = sketch_windows.build(HLL, cells, n_cells, keys, argument, RSD_OF_P[p])
    assert got.p == want.p == p
    assert np.array_equal(np.asarray(got.registers), want.registers)
    assert want.registers.any()
    # ... which are the registers of the values themselves (hashed as Spark hashes them)
    assert np.array_equal(
        sketch_hll.build(cells, n_cells, values, None, argument, p), got.registers
    )


def test_merge_histograms_and_estimates_equal_the_cpu(gpu):
    rng = np.random.default_rng(4)
    p, n_cells = 9, 40
    # small (linear counting), in Ertl's band (raw estimate 2.5m..5m: the device answer
    # reads those cells' histograms) and large
    band = [1500, 2000, 2400]
    sizes = np.concatenate([np.arange(0, 20), band, rng.integers(1, 40 * 512, n_cells - 23)])
    cells = np.repeat(np.arange(n_cells), sizes).astype(np.int64)
    keys = rng.integers(0, 2**62, len(cells)).astype(np.int64)
    got = gpu.build(HLL, cells, n_cells, keys, SqlType.BIGINT, 0.05)
    want = sketch_windows.build(HLL, cells, n_cells, keys, SqlType.BIGINT, 0.05)
    assert np.array_equal(np.asarray(got.registers), want.registers)
    # groups over two sets (a pane's cells and a batch's): empty groups, repeats, one member
    second = sketch_windows.build(HLL, cells % 5, 5, keys + 1, SqlType.BIGINT, 0.05)
    second_gpu = gpu.build(HLL, cells % 5, 5, keys + 1, SqlType.BIGINT, 0.05)
    lengths = rng.integers(0, 8, 30)
    lengths[:3] = [0, 1, 0]
    members = rng.integers(0, n_cells + 5, int(lengths.sum())).astype(np.int64)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    merged = gpu.merge([got, second_gpu], members, offsets)
    merged_cpu = sketch_windows.merge([want, second], members, offsets)
    assert np.array_equal(np.asarray(merged.registers), merged_cpu.registers)
    histograms = gpu.histograms(merged)
    assert np.array_equal(
        histograms[:, : 64 - p + 2], sketch_hll.histograms(merged_cpu.registers, p)
    )
    assert not histograms[:, 64 - p + 2 :].any()
    for sketches, cpu in ((got, want), (merged, merged_cpu)):
        count, estimate = gpu.answer(sketches, None)
        want_count, want_estimate = sketch_windows.answer(cpu, None)
        assert np.array_equal(count, want_count) and np.array_equal(estimate, want_estimate)
    in_band = sketch_windows.answer(want, None)[1][20:23]
    assert ((in_band > 2.5 * 512) & (in_band < 5 * 512)).all()
    # a band cell with a register above 53 - p: its sum is not exact, so the device answer
    # reads that cell's histogram (the others in the band need none)
    raised = np.array(got.registers)
    raised[21, 7] = 65 - p
    count, estimate = gpu.answer(DeviceHll(p, HostCupy().asarray(raised)), None)
    want_count, want_estimate = sketch_windows.answer(HllSketches(p, raised), None)
    assert np.array_equal(estimate, want_estimate) and np.array_equal(count, want_count)
    empty = gpu.merge([gpu.empty(HLL, 0.05)], np.empty(0, np.int64), np.zeros(3, np.int64))
    assert gpu.answer(empty, None)[1].tolist() == [0, 0]


@pytest.mark.parametrize("p", [4, 9, 14])
def test_cells_past_the_band_are_estimated_by_the_kernel_as_by_the_host(gpu, monkeypatch, p):
    """A cell with no zero register whose raw estimate is past Ertl's band is rounded by the
    `estimate` kernel, the others by `hll_estimate_of_sums` on the host: the CPU's counts
    either way, and the host's function sees only the cells the kernel left."""
    from mangonel.runtime.gpu import sketches as gpu_sketches

    rng = np.random.default_rng(p)
    m = 1 << p
    sizes = np.concatenate(
        [[0, 1, 3], rng.integers(m // 2, 3 * m, 5), rng.integers(20 * m, 80 * m, 12)]
    )
    n_cells = len(sizes)
    cells = np.repeat(np.arange(n_cells), sizes).astype(np.int64)
    keys = rng.integers(0, 2**62, len(cells)).astype(np.int64)
    rsd = 1.01 * 1.106 / 2 ** (p / 2)  # Spark: p = ceil(2 log2(1.106 / rsd))
    got = gpu.build(HLL, cells, n_cells, keys, SqlType.BIGINT, rsd)
    want = sketch_windows.build(HLL, cells, n_cells, keys, SqlType.BIGINT, rsd)
    assert got.p == p
    on_host = []
    original = gpu_sketches.hll_estimate_of_sums
    monkeypatch.setattr(
        gpu_sketches,
        "hll_estimate_of_sums",
        lambda sums, *rest: on_host.append(len(sums)) or original(sums, *rest),
    )
    count, estimate = gpu.answer(got, None)
    want_count, want_estimate = sketch_windows.answer(want, None)
    assert np.array_equal(count, want_count) and np.array_equal(estimate, want_estimate)
    registers = np.asarray(want.registers)
    raw = [float(sum(2.0 ** -registers[c].astype(np.float64))) for c in range(n_cells)]
    past_band = [(registers[c] > 0).all() and 0.7 * m * m / raw[c] >= 5 * m for c in range(n_cells)]
    assert sum(past_band) >= 10  # the large cells: the kernel's
    assert sum(on_host) <= n_cells - sum(past_band) + 1


def test_snapshots_are_the_cpu_format(gpu):
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 1000, 2000).astype(np.int64)
    cells = (keys % 3).astype(np.int64)
    got = gpu.build(HLL, cells, 3, keys, SqlType.INT, 0.1)
    want = sketch_windows.build(HLL, cells, 3, keys, SqlType.INT, 0.1)
    blob = gpu.to_bytes(got)
    assert blob == sketch_windows.to_bytes(want)
    back = gpu.from_bytes(HLL, blob)
    assert np.array_equal(np.asarray(back.registers), want.registers)
    part = gpu.cell_range(back, 1, 3)
    assert np.array_equal(np.asarray(part.registers), want.registers[1:3])


def test_aligned_merges_equal_the_member_merge(gpu):
    """`merge_aligned` (a pane's sets with a batch's of the same keys) is `merge` with cell i
    of each set paired, on both backends; sets of different sizes are refused."""
    rng = np.random.default_rng(8)
    keys = rng.integers(0, 10_000, 3000).astype(np.int64)
    cells = rng.integers(0, 6, 3000).astype(np.int64)
    halves = [
        sketch_windows.build(HLL, cells[part], 6, keys[part], SqlType.BIGINT, 0.05)
        for part in (slice(0, 1500), slice(1500, 3000))
    ]
    want = sketch_windows.merge(halves, *sketch_windows.aligned_members(6)).registers
    assert np.array_equal(sketch_windows.merge_aligned(*halves).registers, want)
    on_gpu = [gpu.from_bytes(HLL, sketch_windows.to_bytes(h)) for h in halves]
    assert np.array_equal(np.asarray(gpu.merge_aligned(*on_gpu).registers), want)
    assert not np.array_equal(want, halves[0].registers)  # the second half added registers
    with pytest.raises(ValueError, match="as many cells"):
        gpu.merge_aligned(on_gpu[0], gpu.cell_range(on_gpu[1], 0, 5))
    gk = [
        sketch_windows.build("approx_percentile", cells, 6, keys, SqlType.BIGINT, 100)
        for _ in range(2)
    ]
    merged = sketch_windows.merge_aligned(*gk)
    assert merged.counts.tolist() == (2 * gk[0].counts).tolist()


def test_pane_cells_equal_the_cpu_cells(gpu):
    rng = np.random.default_rng(6)
    slots = rng.integers(0, 50, 400).astype(np.int64)
    want_present, want_cells = sketch_windows.pane_cells(slots, False)
    for chunk, presorted in ((slots, False), (np.sort(slots), True)):
        present, cells = gpu.pane_cells(chunk, presorted)
        assert np.array_equal(present, want_present)
        assert np.array_equal(present[np.asarray(cells)], chunk)
    present, cells = gpu.pane_cells(np.empty(0, np.int64), True)
    assert len(present) == 0 and len(cells) == 0


def test_panes_cells_read_at_once_equal_each_panes_cells(gpu):
    """`panes_cells` (every pane of a batch, one read back) is `pane_cells` per pane: chunks
    whose neighbours end and start on the same slot, empty chunks, a one-row chunk."""
    rng = np.random.default_rng(9)
    pieces = [np.sort(rng.integers(0, 30, n)).astype(np.int64) for n in (50, 0, 1, 40, 0, 70)]
    pieces[3][:5] = pieces[2][-1]  # a chunk starting on the slot the one before ended on
    pieces[3].sort()
    got = gpu.panes_cells(pieces, True)
    assert len(got) == len(pieces)
    for (present, cells), piece in zip(got, pieces, strict=True):
        want_present, want_cells = gpu.pane_cells(piece, True)
        assert np.array_equal(present, want_present)
        assert np.array_equal(np.asarray(cells), np.asarray(want_cells))
    assert sketch_windows.panes_cells(pieces, False)[0][0].tolist() == got[0][0].tolist()


def test_a_quantile_sketch_is_refused_by_the_gpu_kernels(gpu):
    with pytest.raises(ValueError, match="places it on the CPU"):
        gpu.empty("approx_percentile", 10000)


class _HostGpuSketches:
    """The driver's `sketches` with APPROX_COUNT_DISTINCT through the GPU code path (the host
    module) and APPROX_PERCENTILE through the CPU's (a GPU plan keeps GK nodes on the CPU;
    the scenarios mix both in one node)."""

    def __init__(self, gpu: GpuSketches) -> None:
        self.gpu = gpu
        self.batch_cells = gpu.batch_cells  # None, as on the device: rows split by pane

    def _of(self, evaluation: str):  # noqa: ANN202
        return self.gpu if evaluation == HLL else sketch_windows

    def _by_set(self, sketches):  # noqa: ANN001, ANN202
        return sketch_windows if hasattr(sketches, "counts") else self.gpu

    def pane_cells(self, slots, presorted):  # noqa: ANN001, ANN201
        return self.gpu.pane_cells(slots, presorted)

    def panes_cells(self, pieces, presorted):  # noqa: ANN001, ANN201
        return self.gpu.panes_cells(pieces, presorted)

    def concatenate(self, pieces):  # noqa: ANN001, ANN201
        return self.gpu.concatenate(pieces)

    def build(self, evaluation, cells, n_cells, keys, argument, parameter):  # noqa: ANN001, ANN201
        if evaluation != HLL:
            cells, keys = np.asarray(cells), np.asarray(keys)
        return self._of(evaluation).build(evaluation, cells, n_cells, keys, argument, parameter)

    def empty(self, evaluation, parameter):  # noqa: ANN001, ANN201
        return self._of(evaluation).empty(evaluation, parameter)

    def from_bytes(self, evaluation, blob):  # noqa: ANN001, ANN201
        return self._of(evaluation).from_bytes(evaluation, blob)

    def cell_range(self, sketches, start, stop):  # noqa: ANN001, ANN201
        return self._by_set(sketches).cell_range(sketches, start, stop)

    def merge(self, sets, members, offsets):  # noqa: ANN001, ANN201
        return self._by_set(sets[0]).merge(sets, members, offsets)

    def merge_aligned(self, first, second):  # noqa: ANN001, ANN201
        return self._by_set(first).merge_aligned(first, second)

    def answer(self, sketches, fraction):  # noqa: ANN001, ANN201
        return self._by_set(sketches).answer(sketches, fraction)

    def merge_answer(self, sets, members, offsets, fraction):  # noqa: ANN001, ANN201
        return self._by_set(sets[0]).merge_answer(sets, members, offsets, fraction)

    def to_bytes(self, sketches):  # noqa: ANN001, ANN201
        return self._by_set(sketches).to_bytes(sketches)

    def __getattr__(self, name: str):  # noqa: ANN204 - the ring table's calls (HLL only)
        if name.startswith("ring_"):
            return getattr(self.gpu, name)
        raise AttributeError(name)


def _equal_over_the_gpu_path(host_module, scenario, **ring_settings) -> None:  # noqa: ANN001
    """The driver over the GPU kernels' code (the panes split and sorted as on the device, or
    kept as a ring table; HLL registers built, merged and counted by the host-compiled
    kernels) gives the CPU backend's rows exactly, and the oracle's bounds hold.
    `ring_settings`: `sketch_ring` module constants to set for the run."""
    want, want_metrics = engine_run(scenario, "cpu")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            CpuKernels, "holistic_for", lambda self, plan: GpuHolistic(HostCupy(), host_module)
        )
        patch.setattr(
            CpuKernels, "sketches", _HostGpuSketches(GpuSketches(HostCupy(), host_module))
        )
        for name, value in ring_settings.items():
            patch.setattr(sketch_ring, name, value)
        got, got_metrics = engine_run(scenario, "cpu")
        failure = check(scenario, "cpu")
    for got_rows, want_rows in zip(got, want, strict=True):
        assert first_difference(got_rows, want_rows) is None
    assert got_metrics == want_metrics
    assert failure is None, f"{failure}\n{scenario.query}"


@settings(max_examples=30, **SETTINGS)
@given(scenarios("time"))
def test_time_windows_over_the_gpu_sketch_path_equal_the_cpu(host_module, scenario):
    _equal_over_the_gpu_path(host_module, scenario)


@settings(max_examples=25, **SETTINGS)
@given(scenarios("time", hll_only=True), st.sampled_from([0, 1 << 12, 1 << 14, 1 << 17]))
def test_ring_tables_grown_or_moved_to_the_sparse_form_give_the_same_rows(
    host_module, scenario, budget
):
    """No spare panes (every batch past the ring grows it) and a small memory bound (the
    panes move to the sparse form mid-stream, or never enter a ring): the same rows."""
    _equal_over_the_gpu_path(host_module, scenario, MIN_SPARE_PANES=0, MAX_RING_BYTES=budget)


@pytest.mark.parametrize(("size", "slide"), [(20, 5), (24, 2), (64, 1)])
def test_the_gpu_path_keeps_hll_panes_as_a_ring_table(host_module, monkeypatch, size, slide):
    """A sliding query's APPROX_COUNT_DISTINCT panes go into the ring table and its windows
    are answered from it, from scanned blocks where a window has SCAN_FROM panes or more
    (12 and 64 here: several blocks, the pool's entries reused), equal to the CPU's."""
    calls = {"add": 0, "answer": 0, "_scan": 0}
    for name in calls:
        original = getattr(sketch_ring.SketchRing, name)

        def counted(self, *args, _name=name, _original=original, **kwargs):  # noqa: ANN001, ANN202
            calls[_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(sketch_ring.SketchRing, name, counted)
    rng = np.random.default_rng(3)
    data = [
        {
            "ts": i + int(rng.integers(0, 5)),
            "k": int(rng.integers(0, 3)),
            "x": 1,
            "n": 1,
            "v": float(rng.integers(0, 40)),
        }
        for i in range(300)
    ]
    batches = [data[:100], data[100:220], data[220:]]
    acd = ("approx_count_distinct:0.05", "APPROX_COUNT_DISTINCT(v)", ["col", "v"])
    scenario = grouped_scenario("time", size, slide, 3, [acd], batches, ())
    _equal_over_the_gpu_path(host_module, scenario)
    assert calls["add"] >= 3 and calls["answer"] >= 3
    assert (calls["_scan"] > 0) == (size // slide >= sketch_ring.SCAN_FROM)


@pytest.mark.parametrize("ring_rows", [3, 1 << 20])
def test_a_firing_answers_its_ring_rows_in_one_call(host_module, monkeypatch, ring_rows):
    """The firing answers every result row of a firing in one `SketchRing.answer` per
    aggregate, whatever rows the selection evaluates together (one window a chunk here);
    a ring answer of more than MAX_RING_ROWS rows goes in pieces: the CPU's rows either way."""
    monkeypatch.setattr(sketch_panes, "MAX_RING_ROWS", ring_rows)
    monkeypatch.setattr(HolisticTimeWindows, "_planned_chunk", lambda self: 1)
    calls = {"ring": 0, "firings": 0}
    answer, complete = sketch_ring.SketchRing.answer, HolisticTimeWindows._complete

    def counted_answer(self, slots, first_panes):  # noqa: ANN001, ANN202
        calls["ring"] += 1
        assert len(slots) <= ring_rows
        return answer(self, slots, first_panes)

    def counted_complete(self, batches, *arguments):  # noqa: ANN001, ANN202
        out = complete(self, batches, *arguments)
        calls["firings"] += any(batch.num_rows for batch in out)
        return out

    monkeypatch.setattr(sketch_ring.SketchRing, "answer", counted_answer)
    monkeypatch.setattr(HolisticTimeWindows, "_complete", counted_complete)
    rng = np.random.default_rng(12)
    data = [
        {"ts": i, "k": int(rng.integers(0, 6)), "x": 1, "n": 1, "v": float(rng.integers(0, 40))}
        for i in range(240)
    ]
    acd = ("approx_count_distinct:0.05", "APPROX_COUNT_DISTINCT(v)", ["col", "v"])
    scenario = grouped_scenario("time", 20, 5, 3, [acd], [data[:90], data[90:]], ())
    _equal_over_the_gpu_path(host_module, scenario)
    assert calls["ring"] > 0
    if ring_rows > 1000:  # one call a firing (CPU and GPU-path runs counted alike)
        assert calls["ring"] <= calls["firings"]


def test_the_pane_split_for_sketches_sorts_by_slot_only(host_module):
    """A field only sketches read is split without sorting its values: each pane's chunk is
    sorted by slot (the cells' runs), holding the same rows as the full sort's."""
    rng = np.random.default_rng(8)
    rows = 400
    panes = rng.integers(-2, 3, rows).astype(np.int64)
    slots = rng.integers(0, 9, rows).astype(np.int32)
    values = rng.integers(-50, 50, rows).astype(np.int64)
    keep = rng.random(rows) < 0.8
    split = GpuHolistic(HostCupy(), host_module).split_panes
    got_panes, got, presorted = split(panes, slots, values, keep, by_value=False)
    want_panes, want, _ = split(panes, slots, values, keep)
    assert presorted and got_panes == want_panes
    for (g_slots, g_values, _), (w_slots, w_values, _) in zip(got, want, strict=True):
        g_slots, g_values = np.asarray(g_slots), np.asarray(g_values)
        assert np.array_equal(g_slots, np.asarray(w_slots))  # sorted by slot
        pairs = sorted(zip(g_slots.tolist(), g_values.tolist(), strict=True))
        w_slots, w_values = np.asarray(w_slots).tolist(), np.asarray(w_values).tolist()
        assert pairs == list(zip(w_slots, w_values, strict=True))
