"""The GPU's holistic driver over the fused pass's row decisions (run with `pytest -m gpu` on
a GPU host): the fused kernel writes each row's pane and key slot beside its merge
(`GpuKernels.lift_merge(share_rows=True)`), and the driver lifts only the values, from the
columns the fused pass staged. Results equal the driver's own pass over the batch and the
CPU backend's: string keys, the first batch's head split, keys first seen mid-stream (the
split path's rows), late rows, NULL values, a key map in another order, snapshots."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from gpu_device import gpu_available  # noqa: E402

pytestmark = pytest.mark.gpu


if not gpu_available():
    pytest.skip("no CUDA device visible to CuPy", allow_module_level=True)

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from fuzzer import same_with_and_without  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from test_holistic import SETTINGS  # noqa: E402
from test_holistic import scenarios as holistic_scenarios  # noqa: E402
from test_holistic_shared_rows import _batches, _rows, _runner  # noqa: E402
from test_sketch_sql import scenarios as sketch_scenarios  # noqa: E402

from mangonel.runtime.gpu.kernels import GpuKernels  # noqa: E402


@settings(max_examples=25, **SETTINGS)
@given(holistic_scenarios("time"))
def test_gpu_holistic_rows_are_the_same_with_and_without_the_shared_rows(scenario):
    same_with_and_without(scenario, GpuKernels, "shares_fused_rows", False, "gpu")


@settings(max_examples=15, **SETTINGS)
@given(sketch_scenarios("time"))
def test_gpu_sketch_rows_are_the_same_with_and_without_the_shared_rows(scenario):
    same_with_and_without(scenario, GpuKernels, "shares_fused_rows", False, "gpu")


def test_gpu_shared_rows_string_keys_head_split_late_rows_and_snapshots():
    batches = _batches(3)
    want = _runner("cpu")
    want_rows = _rows([want.process(b) for b in batches] + [want.finish()])
    shared = _runner("gpu")
    operator = shared.window_operator
    assert operator.shares_rows
    kernels = operator.lifting
    stagings = kernels.metrics.shared_stagings
    got = [shared.process(b) for b in batches] + [shared.finish()]
    assert _rows(got) == want_rows
    assert shared.metrics.late_tuples_dropped > 0
    # every batch's values lift read the columns its fused pass staged
    assert kernels.metrics.shared_stagings - stagings >= len(batches)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(GpuKernels, "shares_fused_rows", False)
        own = _runner("gpu")
        assert not own.window_operator.shares_rows
        assert _rows([own.process(b) for b in batches] + [own.finish()]) == want_rows
        own = _runner("gpu")
        own.process(batches[0])
        snapshot = own.snapshot()
    restored = _runner("gpu")
    restored.restore(snapshot)
    head = _runner("gpu").process(batches[0])
    tail = [restored.process(b) for b in batches[1:]] + [restored.finish()]
    assert _rows([head, *tail]) == want_rows


def test_gpu_holistic_key_map_in_another_order_is_remapped():
    batches = _batches(4)
    plain = _runner("cpu")
    want = [plain.process(b) for b in batches] + [plain.finish()]
    runner = _runner("gpu")
    operator = runner.window_operator
    keys = sorted({k for b in batches for k in b.column("k").to_pylist()}, reverse=True)
    every = operator.lifting.from_host(np.ones(len(keys), np.bool_))
    operator.keys.map_columns([pa.array(keys)], every)
    got = [runner.process(b) for b in batches] + [runner.finish()]
    assert operator.shares_rows and not operator._same_slots
    assert _rows(got) == _rows(want)
