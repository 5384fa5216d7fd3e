"""APPROX_COUNT_DISTINCT / APPROX_PERCENTILE in GPU plans (run with `pytest -m gpu` on a GPU
host): APPROX_COUNT_DISTINCT's HLL registers are built, merged and counted on the device
(time windows without APPROX_PERCENTILE: `test_gpu_hll_*`); a node with a GK summary runs its
sketch step on the CPU beside the GPU's pane-and-tree path of the incremental aggregates, and
count windows run on the CPU; an APPROX_PERCENTILE on its exact path selects on the device
as PERCENTILE_DISC. Answers within the sketches' bounds of the oracle's exact ones,
and equal to the CPU backend's (the sketches are deterministic, the HLL registers and
estimates bit-identical across backends)."""

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
from hypothesis import assume, given, settings  # noqa: E402
from oracle import first_difference  # noqa: E402
from test_sketch_sql import SETTINGS, scenarios  # noqa: E402

import mangonel  # noqa: E402
from mangonel.compiler import physical as ph  # noqa: E402


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


def _holistic_backend(scenario) -> str:  # noqa: ANN001
    session = mangonel.Session(backend="gpu", approx_percentile=scenario.approx_percentile)
    session.execute(scenario.ddl)
    window = ph.find(session.sql(scenario.query).plan, ph.WindowAggregateExec)
    return ph.placement(window, "holistic").backend


@settings(max_examples=30, **SETTINGS)
@given(scenarios("time", hll_only=True))
def test_gpu_hll_on_the_device_equals_the_cpu_backend(scenario):
    # the HLL registers live on the device here (with MEDIAN's sorted panes beside them)
    assert _holistic_backend(scenario) == "gpu"
    gpu, gpu_metrics = engine_run(scenario, "gpu")
    cpu, cpu_metrics = engine_run(scenario, "cpu")
    for got, want in zip(gpu, cpu, strict=True):
        assert first_difference(got, want) is None
    assert gpu_metrics == cpu_metrics


@settings(max_examples=30, **SETTINGS)
@given(scenarios("time", hll_only=True))
def test_gpu_hll_on_the_device_stays_within_its_bounds(scenario):
    failure = check(scenario, "gpu")
    assert failure is None, f"{failure}\n{scenario.query}"


@settings(max_examples=30, **SETTINGS)
@given(scenarios("time"))
def test_gpu_exact_approx_percentile_selects_on_the_device(scenario):
    """APPROX_PERCENTILE forced onto its exact path is PERCENTILE_DISC's selection: with no
    GK summary left the node's holistic step runs on the device (HLL registers beside it);
    its answers are the oracle's within the bound (exactly its PERCENTILE_DISC) and the CPU
    backend's bit for bit."""
    assume("PERCENTILE_APPROX(" in scenario.query or "APPROX_PERCENTILE(" in scenario.query)
    scenario.approx_percentile = "exact"
    assert _holistic_backend(scenario) == "gpu"
    failure = check(scenario, "gpu")
    assert failure is None, f"{failure}\n{scenario.query}"
    gpu, gpu_metrics = engine_run(scenario, "gpu")
    cpu, cpu_metrics = engine_run(scenario, "cpu")
    for got, want in zip(gpu, cpu, strict=True):
        assert first_difference(got, want) is None
    assert gpu_metrics == cpu_metrics
