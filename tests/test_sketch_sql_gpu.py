"""APPROX_COUNT_DISTINCT / APPROX_PERCENTILE in GPU plans (run with `pytest -m gpu` on a GPU
host): the sketch step runs on the CPU beside the GPU's pane-and-tree path of the query's
incremental aggregates (time windows), or the whole count window on the CPU; answers within
the sketches' bounds of the oracle's exact ones, and equal to the CPU backend's (the sketches
are deterministic)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from gpu_device import gpu_available  # noqa: E402

pytestmark = pytest.mark.gpu


if not gpu_available():
    pytest.skip("no CUDA device visible to CuPy", allow_module_level=True)

from fuzzer import check, engine_run  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from oracle import first_difference  # noqa: E402
from test_sketch_sql import SETTINGS, scenarios  # noqa: E402


@settings(max_examples=40, **SETTINGS)
@given(scenarios("time"))
def test_gpu_sketches_on_time_windows_stay_within_their_bounds(scenario):
    failure = check(scenario, "gpu")
    assert failure is None, f"{failure}\n{scenario.query}"


@settings(max_examples=15, **SETTINGS)
@given(scenarios("count"))
def test_gpu_sketches_on_count_windows_stay_within_their_bounds(scenario):
    failure = check(scenario, "gpu")
    assert failure is None, f"{failure}\n{scenario.query}"


@settings(max_examples=15, **SETTINGS)
@given(scenarios("time"))
def test_gpu_sketches_equal_the_cpu_backend(scenario):
    # the same sketch answers; SUM may round differently (GPU atomics add in another order)
    gpu, gpu_metrics = engine_run(scenario, "gpu")
    cpu, cpu_metrics = engine_run(scenario, "cpu")
    for got, want in zip(gpu, cpu, strict=True):
        assert first_difference(got, want) is None
    assert gpu_metrics == cpu_metrics
