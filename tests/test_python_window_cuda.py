"""Python window functions and numba's CUDA target, without a GPU: the planning check
(`runtime.gpu.python_window.cuda_problem`, numba's `compile_ptx`, which needs no device)
accepts functions that compile as CUDA device functions and refuses the others with numba's
reason, which EXPLAIN prints on the `holistic` step a GPU plan then keeps on the CPU; the
device evaluation (`gather_merge` and the function's kernel) runs under numba's CUDA simulator
(NUMBA_ENABLE_CUDASIM=1, in a subprocess: the switch is process-wide) and equals the CPU
kernel. The device results themselves: tests/test_python_window_gpu.py (`-m gpu`)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from child_process import child_environment
from test_holistic import DDL
from test_python_window import above_lowest, spread, time_weighted, trimmed_mean

import mangonel
from mangonel.aggregates.python import WindowFunction
from mangonel.catalog.types import SqlType
from mangonel.compiler import physical as ph
from mangonel.runtime.gpu.python_window import cuda_problem


def makes_an_object(values):
    """A Python object: nopython (and CUDA) code has none (object mode only)."""
    return object()


def through_a_list(values):
    """A Python list: numba's CUDA target has no lists (refused whatever ran before; a NumPy
    method such as `values.mean()` is not a stable example: once the CPU target has loaded
    numba's implementation, CUDA compiles it per device, so the answer depends on what the
    process compiled before and on whether a GPU is there)."""
    kept = [v for v in values if v > 0]
    return len(kept)


def rounded_mean(values):
    total = 0.0
    for i in range(values.shape[0]):
        total += values[i]
    return total / values.shape[0]


def _gpu_session() -> mangonel.Session:
    """A session that plans for the GPU on this machine (the probe answers yes): planning
    and EXPLAIN need no device."""
    session = mangonel.Session(backend="gpu")
    session.gpu_probe = lambda: (True, "a GPU for the test")
    session.execute(DDL.format(delay=0))
    return session


def test_a_function_with_timestamps_is_checked_with_both_arrays():
    timed = WindowFunction("time_weighted", time_weighted, SqlType.DOUBLE, True)
    assert cuda_problem(timed, SqlType.DOUBLE) is None
    assert cuda_problem(timed, SqlType.BIGINT) is None
    one_array = WindowFunction("spread", spread, SqlType.DOUBLE, True)
    problem = cuda_problem(one_array, SqlType.DOUBLE)
    assert problem is not None and "2 argument types given" in problem


@pytest.mark.parametrize("function", [trimmed_mean, spread, above_lowest, rounded_mean])
@pytest.mark.parametrize("argument", [SqlType.DOUBLE, SqlType.BIGINT, SqlType.INT])
def test_loop_functions_compile_for_cuda(function, argument):
    returns = SqlType.BIGINT if function is above_lowest else SqlType.DOUBLE
    window_function = WindowFunction(function.__name__, function, returns)
    assert cuda_problem(window_function, argument) is None


@pytest.mark.parametrize(
    ("function", "message"),
    [
        (makes_an_object, "^TypingError: .*Untyped global name 'object'"),
        (through_a_list, "TypingError: .*list"),
    ],
)
def test_functions_outside_cuda_are_refused_with_numbas_reason(function, message):
    window_function = WindowFunction(function.__name__, function, SqlType.DOUBLE)
    problem = cuda_problem(window_function, SqlType.DOUBLE)
    assert problem is not None
    assert "\n" not in problem and len(problem) <= 450
    import re

    assert re.search(message, problem), problem


def test_a_float_result_for_an_integer_type_is_refused_for_cuda():
    window_function = WindowFunction("mean", rounded_mean, SqlType.BIGINT)
    problem = cuda_problem(window_function, SqlType.BIGINT)
    assert problem == "it returns float64 for int64 values, which does not fit returns=BIGINT"


def test_a_gpu_plan_runs_a_function_that_compiles_for_cuda_on_the_gpu():
    session = _gpu_session()
    session.register_window_function("trimmed_mean", trimmed_mean)
    query = session.sql(
        "SELECT k, trimmed_mean(v), MEDIAN(v), SUM(v) FROM s "
        "[RANGE 1 SECOND SLIDE 10 MILLISECONDS] GROUP BY k"
    )
    window = ph.find(query.plan, ph.WindowAggregateExec)
    assert ph.placement(window, "holistic").backend == "gpu"
    assert window.holistic.gpu_form == "warp-per-window"  # MEDIAN's selection: 100 panes
    text = query.explain()
    assert "! holistic" not in text
    assert (
        "holistic=sorted-panes(warp-per-window, 41943 windows/launch, python thread-per-window)"
        in text
    )
    assert window.aggregates[0].python.cuda == {"float64": None}
    codegen = session.sql(
        "EXPLAIN CODEGEN SELECT k, trimmed_mean(v), MEDIAN(v) FROM s "
        "[RANGE 1 SECOND SLIDE 10 MILLISECONDS] GROUP BY k"
    )
    assert "// Python window functions (trimmed_mean): numba CUDA device functions" in codegen
    assert "mangonel GPU holistic kernel (percentile_cont, warp-per-window" in codegen


def test_a_gpu_plan_keeps_a_function_outside_cuda_on_the_cpu_and_says_why():
    session = _gpu_session()
    session.register_window_function("trimmed_mean", through_a_list)
    session.register_window_function("spread", spread)
    query = session.sql(
        "SELECT k, spread(v), trimmed_mean(v), SUM(v) FROM s "
        "[RANGE 1 SECOND SLIDE 10 MILLISECONDS] GROUP BY k"
    )
    window = ph.find(query.plan, ph.WindowAggregateExec)
    step = ph.placement(window, "holistic")
    assert step.backend == "cpu"
    assert step.reason.startswith(
        "the function trimmed_mean does not compile for CUDA: TypingError: "
    )
    assert "spread" not in step.reason  # the one that compiles is not blamed
    assert ph.placement(window, "lift").backend == "gpu"
    assert window.holistic.gpu_form is None
    assert (
        "! holistic runs on cpu because the function trimmed_mean does not compile for CUDA: "
        in query.explain()
    )


def test_integer_arguments_are_checked_for_their_own_dtype():
    session = _gpu_session()

    def lowest_plus_count(values):
        return values[0] + values.shape[0]

    session.register_window_function("lpc", lowest_plus_count, returns="BIGINT")
    session.register_window_function("positives", through_a_list, returns="BIGINT")
    query = session.sql("SELECT lpc(x) AS a FROM s [RANGE 1 SECOND]")
    window = ph.find(query.plan, ph.WindowAggregateExec)
    assert window.aggregates[0].python.cuda == {"int64": None}
    assert ph.placement(window, "holistic").backend == "gpu"
    query = session.sql("SELECT positives(n) AS a FROM s [RANGE 1 SECOND]")
    window = ph.find(query.plan, ph.WindowAggregateExec)
    assert set(window.aggregates[0].python.cuda) == {"int64"}
    step = ph.placement(window, "holistic")
    assert step.backend == "cpu"
    assert step.reason.startswith("the function positives does not compile for CUDA: TypingError")
    assert "list" in step.reason


def test_cpu_plans_do_not_check_for_cuda():
    session = mangonel.Session(backend="cpu")
    session.execute(DDL.format(delay=0))
    session.register_window_function("spread", spread)
    query = session.sql("SELECT spread(v) AS a FROM s [RANGE 1 SECOND]")
    assert ph.find(query.plan, ph.WindowAggregateExec).aggregates[0].python.cuda == {}


SIMULATED = """
import numpy as np, math
from mangonel.aggregates.holistic import order_keys
from mangonel.aggregates.python import WindowFunction
from mangonel.catalog.types import SqlType
from mangonel.runtime.cpu import python_window as cpu
from mangonel.runtime.gpu import python_window as gpu

gpu.THREADS_PER_BLOCK = 4  # the simulator runs each thread as a Python thread
gpu.MAX_VALUES = 9  # several launches per chunk, a window larger than one launch alone


def weighted(values):  # depends on the order: rank-weighted sum
    total = 0.0
    for i in range(values.shape[0]):
        total += values[i] * (i + 1)
    return total


def lowest_times_count(values):
    return values[0] * values.shape[0]


def scramble(values):  # changes its argument: no other window may see it
    first = values[0]
    for i in range(values.shape[0]):
        values[i] = 12345
    return first


def ordered_pairs(values, times):  # reads the timestamps: their order with the values
    total = 0.0
    for i in range(values.shape[0]):
        total = total * 3.0 + times[i] * (i + 1) + 0.5 * values[i]
    return total


rng = np.random.default_rng(7)
for trial in range(6):
    # blocks of 1 to 4 threads (the device's count of multiprocessors decides them)
    gpu._multiprocessors = lambda xp, count=2 * trial + 1: count
    floating = trial % 2 == 0
    count = 60
    if floating:
        raw = rng.integers(-6, 6, count).astype(np.float64) / 2
        raw[rng.integers(0, count, 4)] = [math.nan, -0.0, math.inf, -math.inf]
        keys = order_keys(raw)
    else:
        keys = rng.integers(-(2**40), 2**40, count).astype(np.int64)
    run_start = np.arange(0, count, 5, dtype=np.int64)
    run_end = run_start + rng.integers(0, 6, len(run_start))
    times = rng.integers(0, 4, count).astype(np.int64)  # ties of (value, time) too
    for s, e in zip(run_start, run_end):
        order = np.lexsort((times[s:e], keys[s:e]))
        keys[s:e] = keys[s:e][order]
        times[s:e] = times[s:e][order]
    rows = 7
    row_runs = rng.integers(0, 5, rows).astype(np.int64)
    row_first = rng.integers(0, len(run_start) - 4, rows).astype(np.int64)
    for fn in (weighted, lowest_times_count, scramble, ordered_pairs):
        returns = SqlType.DOUBLE if floating or fn in (weighted, ordered_pairs) else SqlType.BIGINT
        function = WindowFunction(fn.__name__, fn, returns, fn is ordered_pairs)
        runs = (run_start, run_end, row_first, row_runs)
        want_n, want = cpu.evaluate_python(
            function, keys.copy(), *runs, True, floating, times.copy()
        )
        got_n, got = gpu.evaluate_python(np, function, keys.copy(), *runs, floating, times.copy())
        assert got_n.tolist() == want_n.tolist(), (fn.__name__, got_n, want_n)
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        same = (got == want) | (np.isnan(got) & np.isnan(want)) if floating else got == want
        assert same.all(), (fn.__name__, trial, got, want)
print("simulated kernels equal the CPU")
"""


def test_the_device_kernels_equal_the_cpu_kernel_under_numbas_cuda_simulator():
    environment = child_environment(NUMBA_ENABLE_CUDASIM="1")
    done = subprocess.run(
        [sys.executable, "-c", SIMULATED],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "simulated kernels equal the CPU" in done.stdout


def test_the_function_kernel_spreads_few_windows_over_every_multiprocessor():
    from mangonel.runtime.gpu.python_window import THREADS_PER_BLOCK, function_threads

    assert function_threads(1000, 132) == 8  # a tumbling firing of 1000 keys: 125 blocks
    assert function_threads(100_000, 132) == THREADS_PER_BLOCK
    assert function_threads(1, 132) == 1
    assert function_threads(133, 132) == 2
    assert function_threads(5, 1) == 5
    assert function_threads(10, 0) == 10  # no count known: one multiprocessor assumed


def test_the_block_gather_merge_compiles_for_cuda():
    """`_gather_merge` (a block per window, its merges cut along the merge path)
    compiles to PTX for the argument types `evaluate_python` launches it with (no GPU
    needed): the simulator above runs its logic, this its typing for the device."""
    from numba import cuda, types

    from mangonel.runtime.gpu import python_window as gpu

    array = types.int64[::1]
    signature = (array,) * 9 + (types.boolean, types.boolean) + (array,) * 4
    ptx, _ = cuda.compile_ptx(gpu._gather_merge.py_func, signature, cc=(7, 5))
    assert "bar.sync" in ptx  # the block's barriers between the copy and the merge passes
