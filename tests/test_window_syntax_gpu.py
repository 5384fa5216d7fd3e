"""Spark's and Flink's window forms and CUMULATE windows on the GPU against the oracle (run
with `pytest -m gpu` on a GPU host): CUMULATE runs the GPU's prefix-combine kernel
(`window_prefix`, through `GpuPaneState.cumulative_windows`) and the fused kernel's lateness
by the period; the forms plan as the CQL clause, so they check the same kernels."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from gpu_device import gpu_available  # noqa: E402

pytestmark = pytest.mark.gpu

if not gpu_available():
    pytest.skip("no CUDA device visible to CuPy", allow_module_level=True)

from fuzzer import check  # noqa: E402
from test_window_syntax import _scenario, _time_case, cumulate_case, form_query  # noqa: E402


@pytest.mark.parametrize("seed", range(60))
def test_cumulate_fuzz_cases_on_the_gpu_match_the_oracle(seed: int) -> None:
    case = cumulate_case(seed)
    if case is None:
        pytest.skip("a count-window case or holistic aggregates")
    scenario = _scenario(case, form_query(case, "flink"))
    failure = check(scenario, "gpu")
    assert failure is None, f"cumulate seed {seed}: {failure}\n{scenario.query}"


@pytest.mark.parametrize("seed", range(20))
def test_spark_and_flink_forms_on_the_gpu_match_the_oracle(seed: int) -> None:
    case = _time_case(seed)
    if case is None:
        pytest.skip("a count-window case")
    forms = ["spark"] + (["flink"] if case.size % case.slide == 0 else [])
    for form in forms:
        scenario = _scenario(case, form_query(case, form))
        failure = check(scenario, "gpu")
        assert failure is None, f"{form} seed {seed}: {failure}\n{scenario.query}"
