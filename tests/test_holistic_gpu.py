"""Holistic aggregates in GPU plans (run with `pytest -m gpu` on a GPU host): the holistic step
runs on the CPU beside the GPU's pane-and-tree path of the same query's incremental
aggregates (time windows), or the whole count window on the CPU; results against the oracle
and equal to the CPU backend's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

pytestmark = pytest.mark.gpu


def _gpu_available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


if not _gpu_available():
    pytest.skip("no CUDA device visible to CuPy", allow_module_level=True)

from fuzzer import check, engine_run  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from oracle import first_difference  # noqa: E402
from test_holistic import SETTINGS, scenarios  # noqa: E402

import mangonel  # noqa: E402
from mangonel.compiler import physical as ph  # noqa: E402


@settings(max_examples=40, **SETTINGS)
@given(scenarios("time"))
def test_gpu_holistic_time_windows_match_the_oracle(scenario):
    failure = check(scenario, "gpu")
    assert failure is None, f"{failure}\n{scenario.query}"


@settings(max_examples=15, **SETTINGS)
@given(scenarios("count"))
def test_gpu_holistic_count_windows_match_the_oracle(scenario):
    failure = check(scenario, "gpu")
    assert failure is None, f"{failure}\n{scenario.query}"


@settings(max_examples=15, **SETTINGS)
@given(scenarios("time"))
def test_gpu_holistic_equals_cpu(scenario):
    # same rows; SUM may round differently (GPU atomics add in another order)
    gpu, gpu_metrics = engine_run(scenario, "gpu")
    cpu, cpu_metrics = engine_run(scenario, "cpu")
    for got, want in zip(gpu, cpu, strict=True):
        assert first_difference(got, want) is None
    assert gpu_metrics == cpu_metrics


def test_gpu_plan_keeps_the_incremental_part_on_the_gpu():
    session = mangonel.Session(backend="gpu")
    session.execute("CREATE STREAM s (ts TIMESTAMP, k BIGINT, v DOUBLE) WITH (event_time = 'ts')")
    plan = session.sql(
        "SELECT k, MEDIAN(v), SUM(v) FROM s [RANGE 1 SECOND SLIDE 10 MILLISECONDS] GROUP BY k"
    ).plan
    window = ph.find(plan, ph.WindowAggregateExec)
    assert window.backend == "gpu"
    assert ph.placement(window, "lift").backend == "gpu"
    assert ph.placement(window, "holistic").backend == "cpu"
