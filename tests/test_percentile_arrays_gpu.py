"""Percentiles over an ARRAY of p and the `window` struct in GPU plans (run with `pytest -m gpu`
on a GPU host): the holistic step's selection kernel takes the array of p on the device (one
launch selects every p of a chunk's windows), results against the array oracle; the kernel
against the CPU kernel per form; the struct column from a GPU plan's Project."""

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
from hypothesis import given, settings  # noqa: E402
from test_holistic import SETTINGS  # noqa: E402
from test_holistic_kernels import FORMS, _random_runs  # noqa: E402
from test_percentile_arrays import array_scenarios, check_arrays  # noqa: E402
from test_window_struct import struct_scenarios  # noqa: E402

from mangonel.runtime.cpu import holistic as cpu_holistic  # noqa: E402
from mangonel.runtime.gpu import device  # noqa: E402
from mangonel.runtime.gpu.compile import shared_context  # noqa: E402
from mangonel.runtime.gpu.holistic import GpuHolistic  # noqa: E402


@settings(max_examples=30, **SETTINGS)
@given(array_scenarios("time"))
def test_gpu_array_percentiles_over_time_windows_match_the_oracle(scenario):
    failure = check_arrays(scenario, "gpu")
    assert failure is None, f"{failure}\n{scenario.query}"


@settings(max_examples=10, **SETTINGS)
@given(array_scenarios("count"))
def test_gpu_array_percentiles_over_count_windows_match_the_oracle(scenario):
    failure = check_arrays(scenario, "gpu")
    assert failure is None, f"{failure}\n{scenario.query}"


@settings(max_examples=10, **SETTINGS)
@given(struct_scenarios("time"))
def test_gpu_window_struct_matches_the_oracle(scenario):
    failure = check_arrays(scenario, "gpu")
    assert failure is None, f"{failure}\n{scenario.query}"


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("evaluation", ["percentile_cont", "percentile_disc"])
def test_the_device_selects_every_p_in_one_launch_as_the_cpu(evaluation, form):
    rng = np.random.default_rng(21)
    gpu = GpuHolistic(device.cupy(), shared_context().module, form)
    fractions = (0.9, 0.0, 0.5, 1.0, 0.5, 0.123)
    for case in range(20):
        most_runs = 300 if case % 5 == 4 else 6
        values, runs = _random_runs(
            rng, int(rng.integers(0, 200)), [1, 3, 1000][case % 3], case % 4 == 0, most_runs
        )
        launches = gpu.launches
        got = gpu.holistic_select_later(values, *runs, evaluation, fractions, True)()
        assert gpu.launches - launches <= 1
        want = cpu_holistic.holistic_select(values, *runs, evaluation, fractions, True)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), case
        if evaluation == "percentile_cont":
            assert np.array_equal(got[2], want[2]), case
