"""Python window functions in GPU plans (run with `pytest -m gpu` on a GPU host): over time
windows the holistic step runs on the GPU (the function compiled by numba's CUDA target, a
thread per window over its merged pane runs, `runtime/gpu/python_window.py`) beside the GPU's
pane-and-tree path of the incremental aggregates; count windows run on the CPU. Results
against the oracle and equal to the CPU backend's; a function numba cannot compile for CUDA
runs on the CPU and EXPLAIN says why."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
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
from test_python_window import scenarios, time_weighted, trimmed_mean  # noqa: E402

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


def _sliding(session: mangonel.Session, calls: str) -> mangonel.Query:
    return session.sql(
        f"SELECT k, window_start, {calls} FROM s [RANGE 1 SECOND SLIDE 10 MILLISECONDS] GROUP BY k"
    )


def test_the_python_function_runs_on_the_gpu_and_equals_the_cpu_backend():
    rng = np.random.default_rng(11)
    rows = 20_000
    batch = pa.RecordBatch.from_pydict(
        {
            "ts": pa.array(np.sort(rng.integers(0, 3_000_000, rows)), pa.timestamp("us")),
            "k": pa.array(rng.integers(0, 50, rows), pa.int64()),
            "x": pa.array(rng.integers(-1000, 1000, rows), pa.int64()),
            "n": pa.array(rng.integers(-3, 3, rows).astype(np.int32), pa.int32()),
            "v": pa.array(
                np.where(rng.random(rows) < 0.1, np.nan, rng.normal(size=rows)),
                pa.float64(),
                mask=rng.random(rows) < 0.05,
            ),
        }
    )
    calls = (
        "trimmed_mean(v) AS t, trimmed_mean(x) AS tx, time_weighted(v) AS w, "
        "time_weighted(n) AS wn, MEDIAN(v) AS m, SUM(x) AS s"
    )
    results = {}
    for backend in ("gpu", "cpu"):
        session = mangonel.Session(backend=backend)
        session.execute(DDL.format(delay=0))
        session.register_window_function("trimmed_mean", trimmed_mean)
        session.register_window_function("time_weighted", time_weighted, with_timestamps=True)
        query = _sliding(session, calls)
        if backend == "gpu":
            window = ph.find(query.plan, ph.WindowAggregateExec)
            assert ph.placement(window, "holistic").backend == "gpu", query.explain()
            assert "python thread-per-window" in query.explain()
        results[backend] = query.run([batch]).sort_by(
            [("k", "ascending"), ("window_start", "ascending")]
        )
    gpu, cpu = results["gpu"], results["cpu"]
    assert gpu.num_rows == cpu.num_rows > 1000
    for column in ("t", "tx", "w", "wn", "m", "s"):
        np.testing.assert_array_equal(
            gpu.column(column).to_numpy(zero_copy_only=False),
            cpu.column(column).to_numpy(zero_copy_only=False),
            err_msg=column,
        )


def test_a_function_numba_cannot_compile_for_cuda_runs_on_the_cpu_and_says_why():
    session = mangonel.Session(backend="gpu")
    session.execute(DDL.format(delay=0))

    def through_a_list(values):  # numba's CUDA target has no lists
        kept = [v for v in values if v > 0]
        return len(kept)

    session.register_window_function("trimmed_mean", through_a_list)
    query = _sliding(session, "trimmed_mean(v), SUM(v)")
    window = ph.find(query.plan, ph.WindowAggregateExec)
    assert ph.placement(window, "lift").backend == "gpu"
    assert ph.placement(window, "holistic").backend == "cpu"
    assert (
        "! holistic runs on cpu because the function trimmed_mean does not compile for CUDA: "
        in query.explain()
    )
