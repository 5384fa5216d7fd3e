"""Python window functions in GPU plans (run with `pytest -m gpu` on a GPU host): the
function's holistic step runs on the CPU (EXPLAIN says why) beside the GPU's pane-and-tree path
of the query's incremental aggregates (time windows), or the whole count window on the CPU;
results against the oracle and equal to the CPU backend's."""

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
from test_holistic import DDL, SETTINGS  # noqa: E402
from test_python_window import scenarios, trimmed_mean  # noqa: E402

import mangonel  # noqa: E402
from mangonel.compiler import physical as ph  # noqa: E402


@settings(max_examples=40, **SETTINGS)
@given(scenarios("time"))
def test_gpu_python_functions_over_time_windows_match_the_oracle(scenario):
    failure = check(scenario, "gpu")
    assert failure is None, f"{failure}\n{scenario.query}"


@settings(max_examples=15, **SETTINGS)
@given(scenarios("count"))
def test_gpu_python_functions_over_count_windows_match_the_oracle(scenario):
    failure = check(scenario, "gpu")
    assert failure is None, f"{failure}\n{scenario.query}"


@settings(max_examples=15, **SETTINGS)
@given(scenarios("time"))
def test_gpu_python_functions_equal_cpu(scenario):
    # same rows; SUM may round differently (GPU atomics add in another order)
    gpu, _ = engine_run(scenario, "gpu")
    cpu, _ = engine_run(scenario, "cpu")
    for got, want in zip(gpu, cpu, strict=True):
        assert first_difference(got, want) is None


def test_a_gpu_plan_says_why_the_python_function_runs_on_the_cpu():
    session = mangonel.Session(backend="gpu")
    session.execute(DDL.format(delay=0))
    session.register_window_function("trimmed_mean", trimmed_mean)
    query = session.sql(
        "SELECT k, trimmed_mean(v), SUM(v) FROM s [RANGE 1 SECOND SLIDE 10 MILLISECONDS] GROUP BY k"
    )
    window = ph.find(query.plan, ph.WindowAggregateExec)
    assert ph.placement(window, "lift").backend == "gpu"
    assert "! holistic runs on cpu because Python window function trimmed_mean:" in (
        query.explain()
    )
