"""The split (Spark) form of holistic window functions in a GPU plan (run with `pytest -m gpu`
on a GPU host; Spark is not needed): stage 1 with the GPU lift kernels and its
pre-aggregation on the device (as the Spark planner places it) or the host, stage 2 merging
into the GPU pane state and evaluating the holistic step on the device, with a restart;
results equal the CPU backend's standalone run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from gpu_device import gpu_available  # noqa: E402

pytestmark = pytest.mark.gpu

if not gpu_available():
    pytest.skip("no CUDA device visible to CuPy", allow_module_level=True)

from test_holistic_split import (  # noqa: E402
    GPU_QUERY,
    _batches,
    _plan,
    _timed_plan,
    split_run,
    standalone_run,
)

from mangonel.compiler import physical as ph  # noqa: E402


@pytest.mark.parametrize("preaggregate", ["gpu", "cpu"])
def test_gpu_split_form_with_a_restart_equals_the_cpu_standalone_run(preaggregate):
    """Stage 1's incremental part pre-aggregates on the device (the Spark planner's
    placement) or on the host; the values are lifted on the host either way."""
    plan = _plan(GPU_QUERY, backend="gpu")
    window = ph.find(plan, ph.WindowAggregateExec)
    assert ph.placement(window, "holistic").backend == "gpu"
    assert ph.placement(window, "lift").backend == "gpu"
    expected = standalone_run(_plan(GPU_QUERY, backend="cpu"), _batches())
    placed = (ph.Placement("preaggregate", preaggregate, "test"),)
    got = split_run(plan, _batches(), stage1_placements=placed)
    # the values are small integers: sums are exact in any order of addition
    assert [str(row) for row in got] == [str(row) for row in expected]


def test_gpu_split_form_of_a_function_with_timestamps_equals_the_cpu_standalone_run():
    """Stage 2 groups the shipped values and their event times by pane on the device
    (`split_panes` with times) and calls the function through numba's CUDA target."""
    plan = _timed_plan(backend="gpu")
    window = ph.find(plan, ph.WindowAggregateExec)
    assert ph.placement(window, "holistic").backend == "gpu"
    expected = standalone_run(_timed_plan(backend="cpu"), _batches())
    assert any(row["p"] is not None for row in expected)
    placed = (ph.Placement("preaggregate", "gpu", "Spark's planner: where the lift runs"),)
    got = split_run(plan, _batches(), stage1_placements=placed)
    assert [str(row) for row in got] == [str(row) for row in expected]


def test_gpu_split_form_of_hll_registers_equals_the_cpu_standalone_run():
    """APPROX_COUNT_DISTINCT's registers are built and merged on the device in stage 2 from
    the shipped values (equal to the CPU's bit for bit)."""
    query = GPU_QUERY.replace("COUNT(*) AS n", "APPROX_COUNT_DISTINCT(x) AS a, COUNT(*) AS n")
    plan = _plan(query, backend="gpu")
    assert ph.placement(ph.find(plan, ph.WindowAggregateExec), "holistic").backend == "gpu"
    expected = standalone_run(_plan(query, backend="cpu"), _batches())
    assert any(row["a"] for row in expected)
    placed = (ph.Placement("preaggregate", "gpu", "Spark's planner: where the lift runs"),)
    got = split_run(plan, _batches(), stage1_placements=placed)
    assert [str(row) for row in got] == [str(row) for row in expected]
