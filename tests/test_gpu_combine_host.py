"""The GPU pane merge's warp and block combine (state.cu.j2: `state_reduce_peers`,
`state_merge_block`, the block table and the block's carry) without a GPU: the generated merge
kernel, compiled by g++ over the warp shim (tests/cuda_warp_host.py: one block of host threads,
real shuffles, ballots, `__match_any_sync` and barriers), merges hot cells (one cell, two keys,
out of order, NULL slots) for every incremental state kind, and the state equals the CPU
backend's merge of the same partials: counts, integer sums, MIN and MAX exactly (NaN included),
floating sums and MOMENTS within rounding (the combine order differs). On a GPU host the
same shapes run on the device through the engine (tests/test_gpu_hot_keys.py)."""

from __future__ import annotations

import math
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

COLUMNS = [("ts", T.TIMESTAMP), ("k", T.BIGINT), ("x", T.DOUBLE), ("i", T.BIGINT), ("b", T.BOOLEAN)]
AGGREGATES = [
    (F.COUNT_STAR, None),
    (F.COUNT, exp.column("x")),
    (F.SUM, exp.column("x")),
    (F.SUM, exp.column("i")),
    (F.MIN, exp.column("x")),
    (F.MAX, exp.column("x")),
    (F.MIN, exp.column("i")),
    (F.MAX, exp.column("i")),
    (F.STDDEV_SAMP, exp.column("x")),
    (F.BOOL_AND, exp.column("b")),
    (F.BOOL_OR, exp.column("b")),
]
KEYS, PANES = 4, 8  # the state block: 4 key slots x 8 panes


@pytest.fixture(scope="module")
def warp_modules(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("g++ not on PATH")
    folder = tmp_path_factory.mktemp("warp_shim")
    modules: dict[str, WarpHostModule] = {}

    def module_of(generated):  # noqa: ANN001, ANN202
        if generated.digest not in modules:
            modules[generated.digest] = WarpHostModule(generated.source, folder)
        return modules[generated.digest]

    return module_of


def _partials(rows: int, rng: np.random.Generator):
    """The CPU lift's per-row partials of AGGREGATES over random rows: NULLs, NaN, inf, and
    the int64 extremes (integer sums wrap, MIN/MAX must keep them)."""
    plan = make_plan(COLUMNS, keys=("k",), aggregates=AGGREGATES, size=100, slide=100)
    lift = ph.find(plan, ph.WindowAggregateExec).lift
    x = rng.normal(50, 20, rows)
    x[rng.random(rows) < 0.02] = np.nan
    x[rng.random(rows) < 0.02] = np.inf
    i = rng.integers(-1000, 1000, rows)
    i[rng.random(rows) < 0.02] = 2**63 - 1
    i[rng.random(rows) < 0.02] = -(2**63)
    batch = pa.record_batch(
        [
            pa.array(np.arange(rows)).cast(pa.timestamp("us", tz="UTC")),
            pa.array(np.zeros(rows, np.int64)),
            pa.array(x, mask=rng.random(rows) < 0.1),
            pa.array(i, mask=rng.random(rows) < 0.05),
            pa.array(rng.random(rows) < 0.9, mask=rng.random(rows) < 0.1),
        ],
        names=[name for name, _ in COLUMNS],
    )
    return lift.fields, CpuKernels().lift_tuples(lift, batch).partials


def _cells(shape: str, rows: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(key slot, pane) per row; slot -1: a row that does not count."""
    if shape == "one cell":
        slots, panes = np.zeros(rows, np.int64), np.full(rows, 3, np.int64)
    elif shape == "two keys":
        slots, panes = np.arange(rows, dtype=np.int64) % 2, np.full(rows, 3, np.int64)
    elif shape == "out of order":
        slots, panes = rng.integers(0, 2, rows), rng.integers(0, 4, rows)
    else:  # runs of one cell, then another, NULL slots between: warps change cells mid-round
        slots = (np.arange(rows) // 100) % 2
        panes = np.arange(rows) // 150 % PANES
        slots[rng.random(rows) < 0.05] = -1
    return slots.astype(np.int64), panes.astype(np.int64)


def _same(got: np.ndarray, want: np.ndarray, exact: bool) -> bool:
    if got.dtype.kind != "f" or exact:
        return bool(np.array_equal(got, want, equal_nan=got.dtype.kind == "f"))
    both_nan = np.isnan(got) & np.isnan(want)
    close = np.isclose(got, want, rtol=1e-9, atol=1e-9) | both_nan
    return bool(close.all())


@pytest.mark.parametrize("threads", [64, 128])
@pytest.mark.parametrize("block_table", ["off", "on"])
@pytest.mark.parametrize("shape", ["one cell", "two keys", "out of order", "runs"])
def test_block_combined_merge_equals_the_cpu_merge(
    warp_modules, monkeypatch, shape, block_table, threads
):
    rng = np.random.default_rng(len(shape) * 7 + threads)
    rows = 1500
    fields, partials = _partials(rows, rng)
    slots, panes = _cells(shape, rows, rng)
    monkeypatch.setattr(device, "cupy", lambda: HostCupy())
    generated = codegen.render_state_kernels(fields)
    options = GpuOptions(threads=threads, block_table=block_table)
    gpu = GpuPaneState(fields, lambda: (generated, warp_modules(generated)), options)
    cpu_kernels = CpuKernels()
    cpu = cpu_kernels.new_pane_state(fields)
    for state in (gpu, cpu):
        state.reshape(KEYS, PANES, 0)
    cpu.merge(cpu_kernels.flat_index(slots, panes, cpu), partials)
    gpu_index = np.where(slots >= 0, slots * PANES + panes, -1)
    # two launches: the second must find the per-launch scratch reset by the first
    for half in (slice(0, rows // 3), slice(rows // 3, rows)):
        gpu.merge(
            np.ascontiguousarray(gpu_index[half]),
            {name: tuple(np.ascontiguousarray(p[half]) for p in v) for name, v in partials.items()},
        )
    got, want = gpu.to_arrays(KEYS, 0, PANES), cpu.to_arrays(KEYS, 0, PANES)
    assert got.keys() == want.keys()
    kinds = {field.name: field.kind.name for field in fields}
    for name in want:
        kind = kinds[name.split(".")[0]]
        exact = kind in ("count", "min", "max", "bool_and", "bool_or")
        assert _same(np.asarray(got[name]), want[name], exact), (name, kind, got[name], want[name])
    # something merged into every cell the rows name (the comparison is not of two empties)
    counts = want[f"{fields[0].name}.0"]
    assert int(counts.sum()) == int((slots >= 0).sum())
    assert not math.isnan(float(np.asarray(got[f"{fields[0].name}.0"]).sum()))
