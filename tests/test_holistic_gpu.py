"""Holistic aggregates in GPU plans (run with `pytest -m gpu` on a GPU host): for time windows
the holistic step runs the GPU kernels (panes sorted on the device, the rendered selection
kernel, a thread, warp or block per window) beside the GPU's pane-and-tree path of the query's
incremental aggregates; count windows run on the CPU. Results against the oracle and equal to
the CPU backend's; the kernels alone against the CPU kernels. Quick: seconds after the first
compile."""

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
from fuzzer import check, engine_run  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from oracle import first_difference  # noqa: E402
from test_holistic import SETTINGS, scenarios  # noqa: E402
from test_holistic_kernels import (  # noqa: E402
    EDGE_WINDOWS,
    EVALUATIONS,
    FORMS,
    _random_runs,
    assert_selection_equals_the_cpu,
    edge_scenario,
    window_runs_case,
)

import mangonel  # noqa: E402
from mangonel.compiler import physical as ph  # noqa: E402
from mangonel.runtime.cpu import holistic as cpu_holistic  # noqa: E402
from mangonel.runtime.gpu import device  # noqa: E402
from mangonel.runtime.gpu.compile import shared_context  # noqa: E402
from mangonel.runtime.gpu.holistic import GpuHolistic  # noqa: E402
from mangonel.runtime.local.query import LocalQuery  # noqa: E402


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


def test_gpu_plan_runs_the_holistic_step_and_the_incremental_part_on_the_gpu():
    session = mangonel.Session(backend="gpu")
    session.execute("CREATE STREAM s (ts TIMESTAMP, k BIGINT, v DOUBLE) WITH (event_time = 'ts')")
    plan = session.sql(
        "SELECT k, MEDIAN(v), SUM(v) FROM s [RANGE 1 SECOND SLIDE 10 MILLISECONDS] GROUP BY k"
    ).plan
    window = ph.find(plan, ph.WindowAggregateExec)
    assert window.backend == "gpu"
    assert ph.placement(window, "lift").backend == "gpu"
    assert ph.placement(window, "holistic").backend == "gpu"
    assert window.holistic.gpu_form == "warp-per-window"


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("evaluation", EVALUATIONS)
def test_gpu_selection_kernel_equals_the_cpu_kernel(evaluation, form):
    # random runs shared between windows, ties, empty and one-value windows, int64 extremes;
    # 600 windows a launch, so threads, warps and blocks of windows run side by side
    cp = device.cupy()
    gpu = GpuHolistic(cp, shared_context().module, form)
    rng = np.random.default_rng(7)
    for case in range(6):
        # every other case up to 300 runs a window: a warp's lanes and a block's warps
        # all hold values when they combine
        most_runs = 300 if case % 2 else 6
        values, runs = _random_runs(rng, 600, [1, 3, 1000][case % 3], case % 3 == 0, most_runs)
        for fraction in (0.0, 1.0, 0.5, 0.999, float(rng.random())):
            assert_selection_equals_the_cpu(
                gpu, values, runs, evaluation, fraction, (evaluation, form, case), cp.asarray
            )


@pytest.mark.parametrize("evaluation", ["percentile_cont", "percentile_disc"])
def test_gpu_selection_over_windows_of_many_long_runs_equals_the_cpu_kernel(evaluation):
    # the benchmarks' shape: windows of up to 128 runs of up to 120 values (a warp's sampled
    # selection runs many rounds, its bracket misses and, with few distinct values, keeps
    # every candidate), values from one distinct value to 2**40 and int64 extremes
    cp = device.cupy()
    gpu = GpuHolistic(cp, shared_context().module, "warp-per-window")
    rng = np.random.default_rng(17)
    for case in range(8):
        spread = [0, 1, 3, 1000, 2**40][case % 5]
        values, runs = _random_runs(
            rng, 300, spread, case % 4 == 3, 128, lengths=(0, 1, 40, 100, 120)
        )
        fractions = (0.0, 1.0, 0.5, 0.001, 0.999, float(rng.random()))
        assert_selection_equals_the_cpu(
            gpu, values, runs, evaluation, fractions, (evaluation, spread, case), cp.asarray
        )


def test_gpu_pane_sort_equals_the_cpu_sort():
    cp = device.cupy()
    gpu = GpuHolistic(cp, shared_context().module)
    rng = np.random.default_rng(1)
    slots = rng.integers(0, 50, 20_000).astype(np.int64)
    keys = rng.integers(-100, 100, 20_000).astype(np.int64)
    sorted_values, offsets = gpu.sort_pane(slots, keys, 64)
    want_values, want_offsets = cpu_holistic.sort_pane(slots, keys, 64)
    assert isinstance(sorted_values, cp.ndarray)  # stays on the device
    assert isinstance(offsets, cp.ndarray)  # so do the offsets: `window_runs` reads them there
    assert np.array_equal(cp.asnumpy(sorted_values), want_values)
    assert np.array_equal(cp.asnumpy(offsets), want_offsets)


@pytest.mark.parametrize("timed", [False, True], ids=["values", "timed"])
def test_gpu_sort_of_several_panes_equals_the_cpu_sort_of_each(timed):
    """`sort_panes` on the device (one sort of every pane's rows; a sorted part's slots found
    from its device offsets) against the CPU's sort of each pane alone."""
    from test_holistic_pane_sort import pane_rows, random_panes

    cp = device.cupy()
    gpu = GpuHolistic(cp, shared_context().module)
    rng = np.random.default_rng(5)
    for case in range(40):
        n_slots = int(rng.choice([1, 5, 300]))
        panes = random_panes(rng, n_slots, timed, by_value=case % 2 == 0)
        on_device = [
            (
                None if part is None else tuple(None if a is None else cp.asarray(a) for a in part),
                [tuple(None if a is None else cp.asarray(a) for a in chunk) for chunk in chunks],
            )
            for part, chunks in panes
        ]
        found = gpu.sort_panes(on_device, n_slots, timed)
        for number, pane in enumerate(panes):
            slots, values, times = pane_rows(pane, timed)
            if timed:
                want_values, want_times, want_offsets = cpu_holistic.sort_pane_timed(
                    slots, values, times, n_slots
                )
            else:
                want_values, want_offsets = cpu_holistic.sort_pane(slots, values, n_slots)
            got_values, got_offsets, got_times = found[number]
            assert isinstance(got_values, cp.ndarray) and isinstance(got_offsets, cp.ndarray)
            assert np.array_equal(cp.asnumpy(got_values), want_values), (case, number)
            assert np.array_equal(cp.asnumpy(got_offsets), want_offsets), (case, number)
            assert (got_times is None) == (not timed)
            if timed:
                assert np.array_equal(cp.asnumpy(got_times), want_times), (case, number)


def test_gpu_pane_split_over_a_known_range_equals_the_general_split():
    """`split_panes` with the batch's pane range (one device read of the panes' bounds)
    groups and sorts as the general path does, on the device; a range missing a kept row's
    pane falls back to it."""
    cp = device.cupy()
    gpu = GpuHolistic(cp, shared_context().module)
    rng = np.random.default_rng(6)
    rows = 50_000
    panes = cp.asarray(rng.integers(100, 140, rows).astype(np.int64))
    slots = cp.asarray(rng.integers(-1, 300, rows).astype(np.int32))
    values = cp.asarray(rng.integers(-1000, 1000, rows).astype(np.int64))
    times = cp.asarray(rng.integers(0, 10**6, rows).astype(np.int64))
    keep = cp.asarray(rng.random(rows) < 0.8) & (slots >= 0)
    for by_value, row_times in ((True, None), (False, None), (True, times)):
        arguments = (panes, slots, values, keep, row_times, by_value)
        want = gpu.split_panes(*arguments)
        for pane_range in ((100, 139), (101, 139)):  # the second misses pane 100
            got = gpu.split_panes(*arguments, pane_range=pane_range)
            assert got[0] == want[0] and got[2]
            for got_chunk, want_chunk in zip(got[1], want[1], strict=True):
                for g, w in zip(got_chunk, want_chunk, strict=True):
                    assert (g is None and w is None) or (
                        isinstance(g, cp.ndarray) and np.array_equal(cp.asnumpy(g), cp.asnumpy(w))
                    )


def test_gpu_window_runs_equal_the_cpu_runs():
    cp = device.cupy()
    gpu = GpuHolistic(cp, shared_context().module)
    arguments = window_runs_case(np.random.default_rng(8))
    got = gpu.window_runs(cp.asarray(arguments[0]), *arguments[1:])
    want = cpu_holistic.window_runs(*arguments)
    for g, w in zip(got, want, strict=True):
        assert isinstance(g, cp.ndarray)  # the runs stay on the device for the selection
        assert np.array_equal(cp.asnumpy(g), w)


@pytest.mark.parametrize(("size", "slide"), EDGE_WINDOWS)
def test_gpu_holistic_edge_cases_match_the_oracle_and_the_cpu(size, slide):
    # NULLs, ties, NaN/-0.0/infinities, p = 0 and 1, one-value windows, out of order, late
    # rows, snapshot/restore; sliding (warp and thread per window) and tumbling
    scenario = edge_scenario(size, slide)
    failure = check(scenario, "gpu")
    assert failure is None, str(failure)
    gpu, gpu_metrics = engine_run(scenario, "gpu")
    cpu, cpu_metrics = engine_run(scenario, "cpu")
    assert sum(len(rows) for rows in gpu) > 100
    for got, want in zip(gpu, cpu, strict=True):
        assert first_difference(got, want) is None
    assert gpu_metrics == cpu_metrics


def test_gpu_holistic_kernels_run_on_the_device():
    session = mangonel.Session(backend="gpu")
    session.execute("CREATE STREAM s (ts TIMESTAMP, k BIGINT, v DOUBLE) WITH (event_time = 'ts')")
    runner = LocalQuery(
        session.sql(
            "SELECT k, MEDIAN(v) AS m FROM s [RANGE 40 MICROSECONDS SLIDE 4 MICROSECONDS] "
            "GROUP BY k"
        ).plan
    )
    ts = np.arange(4000, dtype=np.int64)
    batch = pa.RecordBatch.from_arrays(
        [pa.array(ts, pa.timestamp("us")), pa.array(ts % 5), pa.array((ts % 17).astype(float))],
        names=["ts", "k", "v"],
    )
    rows = [r for out in runner.process(batch) + runner.finish() for r in out.to_pylist()]
    kernels = runner.window_operator.kernels
    assert isinstance(kernels, GpuHolistic) and kernels.form == "warp-per-window"
    assert kernels.launches > 0
    assert len(rows) > 4000  # 5 keys x ~1000 windows


def test_gpu_holistic_values_lift_reads_the_prefetched_staging_and_device_key_words():
    """A holistic query with incremental aggregates beside it stages each batch once (the
    values lift reads the fused pass's prefetched columns) and keys the values with the
    words its lift built on the device (STRING and INT keys, NULL keys among them): results
    equal the CPU backend's."""
    query = (
        "SELECT k, j, MEDIAN(v) AS m, PERCENTILE_DISC(0.25) WITHIN GROUP (ORDER BY v) AS d, "
        "SUM(v) AS s FROM s [RANGE 40 MICROSECONDS SLIDE 4 MICROSECONDS] GROUP BY k, j"
    )
    rng = np.random.default_rng(4)
    batches = []
    for number in range(4):
        ts = np.arange(number * 3000, (number + 1) * 3000, dtype=np.int64)
        k = pa.array([None if t % 11 == 0 else f"key{t % 7}" for t in ts.tolist()])
        j_values = (ts % 3).astype(np.int32)
        j = pa.array(j_values, mask=(ts % 13 == 0))
        v = pa.array(rng.integers(0, 50, len(ts)).astype(float))
        batches.append(
            pa.RecordBatch.from_arrays(
                [pa.array(ts, pa.timestamp("us")), k, j, v], names=["ts", "k", "j", "v"]
            )
        )
    results = {}
    for backend in ("gpu", "cpu"):
        session = mangonel.Session(backend=backend)
        session.execute(
            "CREATE STREAM s (ts TIMESTAMP, k STRING, j INT, v DOUBLE) WITH (event_time = 'ts')"
        )
        runner = LocalQuery(session.sql(query).plan)
        out = []
        staged = []
        for batch in batches:
            out += runner.process(batch)
            if backend == "gpu":
                metrics = runner.window_operator.lifting.metrics
                staged.append((metrics.staged_rows, metrics.shared_stagings))
        out += runner.finish()
        results[backend] = [r for batch in out for r in batch.to_pylist()]
        if backend == "gpu":
            # each batch: its rows staged once, and the values lift read that staging
            rows = [b.num_rows for b in batches]
            assert [s for s, _ in staged] == list(np.cumsum(rows))
            assert [shared for _, shared in staged] == [1, 2, 3, 4]
    assert len(results["gpu"]) > 1000
    assert first_difference(results["gpu"], results["cpu"]) is None
