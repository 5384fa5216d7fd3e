"""The GPU output path (`GpuPaneState._finalize_cells`, finalize.cu.j2, every aggregate's
`cuda_finalize`) without a GPU: the generated finalize kernel, compiled by g++ over the CUDA
shim (tests/cuda_host.py; a grid-stride kernel without block cooperation), finalizes random
window state (empty cells, all-NULL arguments, one-value sample variances, NaN and negative
rounding in m2, int64 extremes) and packs it; the Arrow results equal the host finalize the
CPU backend runs (`results.cells_with_rows` + `results.finalize`) value for value, NULLs and
NaN included, and the cells come out in the same order. On a GPU host the engine runs the
same path (tests/test_gpu_hot_keys.py)."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pyarrow as pa
import pytest
from cuda_host import HostCupy, host_key_map, host_modules
from plans import make_plan
from sqlglot import exp

from mangonel.catalog.types import SqlType as T
from mangonel.compiler import codegen
from mangonel.compiler import physical as ph
from mangonel.compiler.logical import AggregateFunction as F
from mangonel.compiler.options import GpuOptions
from mangonel.runtime.gpu import device
from mangonel.runtime.gpu.state import GpuPaneState
from mangonel.runtime.host.keys import StringDictionary
from mangonel.runtime.operators.results import cells_with_rows, finalize

COLUMNS = [("ts", T.TIMESTAMP), ("k", T.BIGINT), ("x", T.DOUBLE), ("i", T.INT), ("b", T.BOOLEAN)]
AGGREGATES = [
    (F.COUNT_STAR, None),
    (F.COUNT, exp.column("x")),
    (F.SUM, exp.column("x")),
    (F.SUM, exp.column("i")),
    (F.AVG, exp.column("x")),
    (F.AVG, exp.column("i")),
    (F.MIN, exp.column("x")),
    (F.MAX, exp.column("i")),
    (F.MIN, exp.column("ts")),
    (F.VAR_POP, exp.column("x")),
    (F.VAR_SAMP, exp.column("x")),
    (F.STDDEV_POP, exp.column("i")),
    (F.STDDEV_SAMP, exp.column("x")),
    (F.BOOL_AND, exp.column("b")),
    (F.BOOL_OR, exp.column("b")),
]


def _state(window, cells: int, rng: np.random.Generator, empty_share: float):
    """Random values per state part of `cells` fired cells, consistent enough to exercise
    every finalize rule: row counts 0 for `empty_share` of the cells, argument counts 0
    (all NULL) and 1, MOMENTS n 0/1/many with NaN and tiny negative m2."""
    parts = codegen.state_parts(window.fields)
    rows = rng.integers(1, 50, cells)
    rows[rng.random(cells) < empty_share] = 0
    values = {}
    for part in parts:
        field = next(f for f in window.fields if f.name == part.field)
        kind = field.kind.name
        if kind == "count":
            count = np.minimum(rng.integers(0, 3, cells) * rows, rows)
            values[part.member] = rows if part.field == window.fields[0].name else count
        elif kind == "moments":
            values[part.member] = (
                rng.choice([0.0, 1.0, 2.0, 7.0], cells),
                rng.normal(0, 10, cells),
                np.where(rng.random(cells) < 0.1, np.nan, rng.normal(5, 10, cells)),
            )[part.part]
        elif part.ctype == "double":
            values[part.member] = np.where(
                rng.random(cells) < 0.05, np.nan, rng.normal(0, 1e6, cells)
            )
        else:
            # the extremes of the accumulator type (MIN/MAX of INT keep INT values)
            bits = 31 if field.type is T.INT else 63
            extremes = rng.choice(np.array([-(2**bits), 2**bits - 1, 0, 1], np.int64), cells)
            values[part.member] = np.where(
                rng.random(cells) < 0.2, extremes, rng.integers(-(10**9), 10**9, cells)
            )
    return parts, values


def _key_map(n_keys: int, rng: np.random.Generator, with_nulls: bool):
    """A key map of n_keys (STRING, INT) keys, some of either column NULL where
    `with_nulls`: what the finalize kernel writes the result rows' keys from."""
    strings = StringDictionary()
    codes, _ = strings.encode(pa.array([f"key {i}" for i in range(n_keys)]))
    numbers = rng.integers(-(2**31), 2**31, n_keys)
    null_mask = rng.integers(0, 4, n_keys) if with_nulls else np.zeros(n_keys, np.int64)
    if with_nulls:
        null_mask[:2] = (1, 2)  # a NULL of either column at least
    words = np.stack(
        (np.where(null_mask & 1, 0, codes), np.where(null_mask & 2, 0, numbers), null_mask), 1
    )
    return host_key_map((T.STRING, T.INT), words, strings)


def _same(got, want) -> bool:
    if got.type != want.type or len(got) != len(want):
        return False
    if pa.types.is_timestamp(got.type):  # extremes have no Python datetime
        got, want = got.view(pa.int64()), want.view(pa.int64())
    for a, b in zip(got.to_pylist(), want.to_pylist(), strict=True):
        nan = isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
        if not (nan or a == b):
            return False
    return True


@pytest.mark.parametrize("consecutive", [True, False])
@pytest.mark.parametrize("empty_share", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("n_keys", [1, 2, 37])
def test_device_finalize_equals_the_host_finalize(
    tmp_path, monkeypatch, n_keys, empty_share, consecutive
):
    if shutil.which("g++") is None:
        pytest.skip("g++ not on PATH")
    monkeypatch.setattr(device, "cupy", lambda: HostCupy())
    plan = make_plan(COLUMNS, keys=("k",), aggregates=AGGREGATES, size=100, slide=10)
    window = ph.find(plan, ph.WindowAggregateExec)
    plans = window.aggregates
    rng = np.random.default_rng(n_keys * 10 + int(empty_share * 10))
    windows = 23
    cells = windows * n_keys
    parts, values = _state(window, cells, rng, empty_share)
    module = host_modules(tmp_path)
    generated = codegen.render_finalize_kernels(window.fields, plans)
    found = (generated, module(generated), codegen.finalize_ctypes(window.fields, plans))
    state = GpuPaneState(window.fields, lambda: None, GpuOptions())
    out = {member: HostCupy().ascontiguousarray(array) for member, array in values.items()}
    by_field = {}
    for part in parts:
        by_field.setdefault(part.field, []).append(values[part.member])
    # consecutive window ids (no upload), then ids with gaps (the kernel reads them)
    window_ids = np.arange(100, 100 + windows, dtype=np.int64)
    if consecutive is False:
        window_ids = 100 + np.cumsum(rng.integers(1, 5, windows))
    keys = _key_map(n_keys, rng, with_nulls=n_keys > 1)
    for with_slots in (True, False, True):  # later firings reuse the device and pinned buffers
        starts, ends, slots, key_columns, results = state._finalize_cells(
            found, out, cells, n_keys, plans, window_ids, (10, 100), keys, with_slots
        )
        assert (slots is None) is not with_slots
    want_windows, want_slots, chosen = cells_with_rows(
        {name: tuple(v) for name, v in by_field.items()}, window.fields[0].name, n_keys, window_ids
    )
    np.testing.assert_array_equal(starts, want_windows * 10)
    np.testing.assert_array_equal(ends, want_windows * 10 + 100)
    np.testing.assert_array_equal(slots, want_slots)
    # the keys the kernel wrote beside the results are those the host decodes of the slots
    want_keys = keys.decode(want_slots)
    assert len(key_columns) == 2
    for got, expected in zip(key_columns, want_keys, strict=True):
        assert got.equals(expected), (got, expected)
    if n_keys > 1 and empty_share == 0.0:
        assert want_keys[1].null_count and want_keys[0].null_count
    want = finalize(plans, chosen)
    assert len(results) == len(want) == len(AGGREGATES)
    for plan, got, expected in zip(plans, results, want, strict=True):
        assert _same(got, expected), (plan.function, got, expected)
    if empty_share == 0.0:  # NULL results and NaN are there to compare
        assert any(r.null_count for r in want) and len(want_slots) == cells


def test_finalize_is_refused_for_aggregates_without_a_device_finalize():
    plan = make_plan(COLUMNS, keys=("k",), aggregates=[(F.MEDIAN, exp.column("x"))], size=10)
    window = ph.find(plan, ph.WindowAggregateExec)
    assert codegen.finalize_ctypes(window.fields, window.aggregates) is None
    with pytest.raises(ValueError, match="device finalize"):
        codegen.render_finalize_kernels(window.fields, window.aggregates)
