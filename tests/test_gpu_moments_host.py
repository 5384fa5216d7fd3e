"""MOMENTS (STDDEV, VARIANCE) merged lock-free by the generated fused pass, without a GPU.

The fused lift + key probe + merge kernel of a query (`fused.cu.j2`, the engine's standalone
path) runs over the warp shim (tests/cuda_warp_host.py: blocks of host threads, real
shuffles, barriers and concurrent atomics), its key table built by the module's own
`map_keys`; the pane store is a `GpuPaneState` over numpy, settled by its `settle` kernel when
it is read. A hot key (whole warps and blocks on one cell) and 1000 keys (a few rows per cell:
the global atomics), in order and out of order, the block table off and on, over hard data:
an offset of 1e9 with a spread of 1 (where sums of squares cancel), mixed signs with exact
zero means, NaN, +-inf, NULLs and cells of one row. The state equals the CPU backend's merge
of the same rows (counts exactly, means and m2 within rounding), and the variances equal a
two-pass evaluation. On a GPU host the same shapes run on the device through the engine
(tests/test_gpu_hot_keys.py, `test_moments_*`)."""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow as pa
import pytest
from cuda_host import HostCupy
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
    (F.STDDEV_SAMP, exp.column("x")),
    (F.VAR_POP, exp.column("x")),
    (F.SUM, exp.column("x")),
]
PANE = 10  # microseconds: size 40, slide 10
PANES = 8
ROWS = 2048
THREADS = 128


@pytest.fixture(scope="module")
def fused(tmp_path_factory):
    """(window plan, generated module, its warp-shim build)."""
    if shutil.which("g++") is None:
        pytest.skip("g++ not on PATH")
    plan = make_plan(COLUMNS, keys=("k",), aggregates=AGGREGATES, size=4 * PANE, slide=PANE)
    window = ph.find(plan, ph.WindowAggregateExec)
    assert window.pane_length == PANE
    generated = codegen.render_kernels(window.lift, window)
    assert generated.aux_words == 1  # one MOMENTS field: STDDEV and VAR_POP share it
    module = WarpHostModule(generated.source, tmp_path_factory.mktemp("moments_shim"))
    return window, generated, module


def _data(shape: str, data: str, rng: np.random.Generator):
    """(event times, keys, values, value validity) of ROWS rows."""
    if shape == "hot key":
        keys = np.zeros(ROWS, np.int64)
        ts = np.arange(ROWS, dtype=np.int64) * (2 * PANE) // ROWS  # two panes, in order
    else:  # 1000 keys: one to a few rows per cell
        keys = rng.integers(0, 1000, ROWS).astype(np.int64)
        ts = np.arange(ROWS, dtype=np.int64) * (2 * PANE) // ROWS
    if shape.endswith("out of order"):
        ts = rng.integers(0, PANES * PANE, ROWS).astype(np.int64)
    if data == "offset":  # 1e9 + U(0, 1): the naive sum of squares keeps no digit of m2
        x = 1e9 + rng.random(ROWS)
    else:  # mixed signs, exact zero means, NaN and infinities
        x = rng.choice([-1.0, 1.0, -2.5, 2.5, 0.0], ROWS) * rng.integers(1, 4, ROWS)
        x[rng.random(ROWS) < 0.01] = np.nan
        x[rng.random(ROWS) < 0.01] = np.inf
        x[rng.random(ROWS) < 0.01] = -np.inf
    valid = rng.random(ROWS) >= 0.05
    return ts, keys, x, valid


def _batch(ts, keys, x, valid) -> pa.RecordBatch:
    return pa.record_batch(
        [
            pa.array(ts).cast(pa.timestamp("us", tz="UTC")),
            pa.array(keys),
            pa.array(x, mask=~valid),
        ],
        names=[name for name, _ in COLUMNS],
    )


def _key_slots(generated, module, keys: np.ndarray):
    """The module's `map_keys` over the rows' keys: (table words, table slots, capacity,
    slots handed out, each row's slot)."""
    rows = keys.shape[0]
    words = generated.key_words
    capacity = 4096
    table_words = np.zeros(capacity * words, np.int64)
    table_slots = np.full(capacity, -1, np.int32)
    counter = np.zeros(1, np.int32)
    slot_capacity = 2048
    slot_words = np.zeros(slot_capacity * words, np.int64)
    first_row = np.full(slot_capacity, np.iinfo(np.int64).max, np.int64)
    slots = np.zeros(rows, np.int32)
    overflow = np.zeros(1, np.int32)
    key_words = np.zeros((words, rows), np.int64)
    key_words[0] = keys  # the NULL-mask word stays 0
    module.get_function(generated.names["map_keys"])(
        (device.grid(rows, THREADS),),
        (THREADS,),
        (
            np.ascontiguousarray(key_words.reshape(-1)),
            np.int64(rows),
            None,
            table_words,
            table_slots,
            np.int64(capacity),
            counter,
            slot_words,
            first_row,
            np.int64(slot_capacity),
            np.int32(0),
            slots,
            overflow,
        ),
    )
    assert overflow[0] == 0
    return table_words, table_slots, capacity, int(counter[0]), slots.astype(np.int64)


def _fused_state(fused, monkeypatch, ts, keys, x, valid, block_table: str):
    """The GPU pane state after two fused passes of the rows (the first third, then the
    rest, settled in between as a firing does: the second merges on top of settled cells;
    its cells are settled again when read)."""
    window, generated, module = fused
    monkeypatch.setattr(device, "cupy", lambda: HostCupy())
    table_words, table_slots, capacity, known, row_slots = _key_slots(generated, module, keys)
    options = GpuOptions(threads=THREADS, block_table=block_table)
    state = GpuPaneState(window.lift.fields, lambda: (generated, module), options)
    state.reshape(known, PANES, 0)
    for rows in (slice(0, ROWS // 3), slice(ROWS // 3, ROWS)):
        count = rows.stop - rows.start
        columns = []
        for column, values in zip(generated.columns, (ts, keys, x), strict=True):
            if column.offset:  # the wide form: 64-bit values, base 0
                columns += [np.ascontiguousarray(values[rows]), np.int64(0), np.int32(1)]
            else:
                columns.append(np.ascontiguousarray(values[rows]))
            valid_bytes = np.ascontiguousarray(valid[rows]).astype(np.uint8)
            columns.append(valid_bytes if column.name == "x" else None)
        status = np.zeros(6, np.uint64)
        decided = np.zeros(count, np.uint8)
        # the rows' pane and key slot, as a holistic driver asks for them (`share_rows`)
        shared_panes = np.full(count, -7, np.int64)
        shared_slots = np.full(count, -7, np.int32)
        module.get_function(generated.names["fused"])(
            (device.fused_grid(count, THREADS),),
            (THREADS,),
            (
                *columns,
                table_words,
                table_slots,
                np.int64(capacity),
                np.int32(known),
                *state.struct_args(),
                np.zeros(1, np.int32),  # no string literals
                np.int64(count),
                np.int64(PANES),
                np.int64(0),
                np.int64(0),
                np.int64(PANES),
                np.int64(np.iinfo(np.int64).min),  # no watermark: nothing late
                np.int32(block_table == "on"),
                decided,
                status,
                state.block_partials,
                shared_panes,
                shared_slots,
            ),
        )
        assert (decided == 1).all() and status[5] == 0  # every row merged, none left
        assert (shared_panes == ts[rows] // PANE).all()
        assert (shared_slots == row_slots[rows]).all()
        state.mark_merged(0, PANES)  # as `lift_merge` does from the status words
        if rows.start == 0:
            state.settle()
            assert not np.asarray(state.aux).any()
    return state, known, row_slots


def _cpu_state(fused, ts, keys, x, valid, row_slots, known: int):
    window = fused[0]
    kernels = CpuKernels()
    lifted = kernels.lift_tuples(window.lift, _batch(ts, keys, x, valid))
    cpu = kernels.new_pane_state(window.lift.fields)
    cpu.reshape(known, PANES, 0)
    cpu.merge(kernels.flat_index(row_slots, ts // PANE, cpu), lifted.partials)
    return cpu.to_arrays(known, 0, PANES)


def _two_pass_m2(ts, x, valid, row_slots, known: int) -> np.ndarray:
    """m2 per (slot, pane) by two passes over each cell's values (deviations from the cell's
    mean: no cancellation); NaN where a value is not finite."""
    m2 = np.zeros((known, PANES))
    cells = row_slots * PANES + ts // PANE
    for cell in np.unique(cells[valid]):
        values = x[valid & (cells == cell)]
        if not np.isfinite(values).all():
            m2.flat[cell] = np.nan
        else:
            m2.flat[cell] = float(((values - values.mean()) ** 2).sum())
    return m2


@pytest.mark.parametrize("block_table", ["off", "on"])
@pytest.mark.parametrize("data", ["offset", "signs"])
@pytest.mark.parametrize(
    "shape", ["hot key", "1000 keys", "hot key out of order", "1000 keys out of order"]
)
def test_fused_moments_equal_the_cpu(fused, monkeypatch, shape, data, block_table):
    rng = np.random.default_rng(len(shape) * 31 + len(data))
    ts, keys, x, valid = _data(shape, data, rng)
    state, known, row_slots = _fused_state(fused, monkeypatch, ts, keys, x, valid, block_table)
    got = state.to_arrays(known, 0, PANES)
    want = _cpu_state(fused, ts, keys, x, valid, row_slots, known)
    window = fused[0]
    moments = next(f.name for f in window.lift.fields if f.kind.name == "moments")
    n, mean, m2 = (np.asarray(got[f"{moments}.{k}"]) for k in range(3))
    want_n, want_mean, want_m2 = (want[f"{moments}.{k}"] for k in range(3))
    assert np.array_equal(n, want_n)
    assert not np.asarray(state.aux).any()  # settled: every aux word back to zero
    filled = n > 0
    assert filled.sum() > (1 if shape.startswith("hot") else 500)
    # empty cells keep the neutral mean (+0.0: the unset shift)
    assert np.array_equal(mean[~filled], np.zeros((~filled).sum()))
    finite = filled & np.isfinite(want_m2)
    # the means agree to rounding at their magnitude; NaN where the CPU's is NaN or +-inf
    scale = np.maximum(np.abs(want_mean[finite]), 1.0)
    assert (np.abs(mean[finite] - want_mean[finite]) <= 1e-12 * scale).all()
    assert np.isnan(m2[filled & ~np.isfinite(want_m2)]).all()
    # m2 against two passes: the error of (n, mean, m2) cells at a 1e9 offset is about
    # ulp(1e9) / spread (the CPU's Chan combine has the same), not the 1e18 * eps of sums
    truth = _two_pass_m2(ts, x, valid, row_slots, known)
    assert np.isnan(truth[filled & ~np.isfinite(want_m2)]).all()
    tolerance = 1e-5 if data == "offset" else 1e-12
    for m2_of in (m2, want_m2):
        error = np.abs(m2_of[finite] - truth[finite])
        assert (error <= tolerance * np.maximum(truth[finite], 1e-3)).all(), error.max()
    # one-row cells: m2 exactly 0 (no rounding left behind by the shift)
    single = finite & (n == 1)
    if shape.startswith("1000"):
        assert single.any()
    assert (m2[single] == 0.0).all()


def test_a_restored_zero_mean_is_not_read_as_an_unset_shift(fused, monkeypatch):
    """A snapshot's cell with a mean of exactly +0.0 (values -1 and 1) restored into the
    device state over cells merged before, then merged on top of: the +0.0 mean must not be
    taken for an unset shift (which would drop the restored rows' deviations), nor the
    earlier merges' shifted sums survive the restore."""
    window, generated, module = fused
    monkeypatch.setattr(device, "cupy", lambda: HostCupy())
    options = GpuOptions(threads=THREADS)
    gpu = GpuPaneState(window.lift.fields, lambda: (generated, module), options)
    kernels = CpuKernels()
    cpu = kernels.new_pane_state(window.lift.fields)
    for state in (gpu, cpu):
        state.reshape(1, PANES, 0)

    def lifted(values: np.ndarray):  # rows of key slot 0 in pane 0: (flat index, partials)
        rows = len(values)
        zeros = np.zeros(rows, np.int64)
        batch = _batch(zeros, zeros, values, np.ones(rows, bool))
        index = kernels.flat_index(zeros, zeros, cpu)  # one key: the layouts agree
        return np.ascontiguousarray(index), kernels.lift_tuples(window.lift, batch).partials

    cpu.merge(*lifted(np.array([-1.0, 1.0])))
    snapshot = cpu.to_arrays(1, 0, PANES)
    moments = next(f.name for f in window.lift.fields if f.kind.name == "moments")
    assert snapshot[f"{moments}.1"][0, 0] == 0.0 and snapshot[f"{moments}.0"][0, 0] == 2
    # merges the snapshot writes over (left unsettled: their aux words must not survive it)
    # (two launches: one launch combines a cell's rows before its one update)
    gpu.merge(*lifted(np.array([7.0, 9.5])))
    gpu.merge(*lifted(np.array([20.0])))
    assert np.asarray(gpu.aux).any()
    gpu.load_arrays(snapshot, 0)
    later = lifted(np.array([3.0, 5.0, 4.0]))
    cpu.merge(*later)
    gpu.merge(*later)
    got, want = gpu.to_arrays(1, 0, PANES), cpu.to_arrays(1, 0, PANES)
    all_values = np.array([-1.0, 1.0, 3.0, 5.0, 4.0])
    assert got[f"{moments}.0"][0, 0] == 5
    assert np.isclose(got[f"{moments}.1"][0, 0], all_values.mean(), rtol=1e-15)
    assert np.isclose(got[f"{moments}.2"][0, 0], ((all_values - 2.4) ** 2).sum(), rtol=1e-14)
    assert np.isclose(got[f"{moments}.2"][0, 0], want[f"{moments}.2"][0, 0], rtol=1e-14)
