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
from plans import make_plan  # noqa: E402
from sqlglot import exp  # noqa: E402
from test_gpu_backend import ALL, COLUMNS, compare, random_batches  # noqa: E402
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


@pytest.mark.parametrize("keys", [(), ("k",), ("s", "k")])
def test_cumulate_long_firings_over_many_keys_on_the_gpu_equal_the_cpu(keys) -> None:
    """The prefix kernel over long runs: 64 panes a period (step 10 us, max 640 us), ~470
    periods, a watermark delay of ~8 periods (each firing cuts its run into pieces at period
    boundaries) and end of input, 300 keys, every aggregate kind, a snapshot; GPU rows equal
    the CPU's after every batch."""
    plan = make_plan(
        COLUMNS,
        keys=keys,
        aggregates=ALL,
        size=640,
        slide=10,
        delay=5000,
        kind="cumulate",
        where=exp.column("b"),
    )
    compare(plan, random_batches(11, 30_000, 300, 3000, 9), snapshot_at=4)
