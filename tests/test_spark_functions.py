"""The functions Spark's workers call (`runtime.spark.functions`), without Spark: per-executor
backend choice, kernels built once per process, stage 1's operator cached, and stage 2's
restore -> merge -> fire -> snapshot chain equal to one operator that never stops. The same
scenario runs on the device in `test_spark_functions_gpu.py`."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from gpu_device import gpu_available  # noqa: E402
from oracle import rows_close  # noqa: E402
from spark_functions import (  # noqa: E402
    SESSION_QUERY,
    micro_batches,
    on_time,
    query_plan,
    run_stages,
    standalone_rows,
)

from mangonel.compiler import physical as ph  # noqa: E402
from mangonel.runtime.operators.tree import OperatorTree  # noqa: E402
from mangonel.runtime.spark import functions  # noqa: E402


def test_stage_two_chain_equals_one_operator_that_never_stops():
    plan = query_plan("cpu")
    batches = micro_batches()
    chained = run_stages(plan, batches)
    # the same watermarks, one operator kept across micro-batches (no snapshot)
    tree = OperatorTree(plan)
    window = ph.find(plan, ph.WindowAggregateExec)
    rows, seen = [], None
    for batch in batches:
        watermark = None if seen is None else seen - 200_000
        tree.leaf().merge(functions.stage1_preaggregate(window, (), batch))
        seen = max(seen or -(2**62), batch.column(0).cast("int64").to_numpy().max().item())
        if watermark is not None:
            rows += [r for b in tree.on_watermark(watermark) for r in b.to_pylist()]
    rows += [r for b in tree.on_watermark(2**62) for r in b.to_pylist()]
    rows.sort(key=lambda row: (row["window_start"], row["k"] is None, row["k"] or 0))
    assert len(chained) > 100
    assert rows_close(chained, rows)


def test_kernels_and_stage_one_operators_are_made_once_per_process():
    plan = query_plan("cpu")
    window = ph.find(plan, ph.WindowAggregateExec)
    batch = micro_batches(count=1)[0]
    first = functions.stage1_preaggregate(window, (), batch)
    made = functions.process_kernels()
    again = functions.stage1_preaggregate(window, (), batch)
    assert first.equals(again)
    trees = [functions.bucket_tree(plan) for _ in range(3)]
    assert functions.process_kernels() == made  # no new kernels object
    assert len({id(tree.kernels_of("cpu")) for tree in trees}) == 1
    assert trees[0].kernels_of("cpu") is made["cpu"]


def test_a_gpu_plan_runs_on_the_cpu_on_an_executor_without_a_gpu():
    if gpu_available():
        return  # this executor has one: test_spark_functions_gpu.py covers it
    backend, reason = functions.executor_backend("gpu")
    assert backend == "cpu" and "this executor has no GPU" in reason
    gpu_plan = query_plan("gpu")
    here = functions.executor_plan(gpu_plan)
    window = ph.find(here, ph.WindowAggregateExec)
    assert window.backend == "cpu" and "this executor has no GPU" in window.backend_reason
    assert functions.executor_plan(gpu_plan) is here  # decided once
    batches = micro_batches()
    assert rows_close(run_stages(gpu_plan, batches), run_stages(query_plan("cpu"), batches))


def test_session_stages_equal_the_standalone_session():
    """Session windows in the per-tuple stages (Spark's plan with late_rows= or native=False):
    stage 1's one partial per tuple, stage 2 merging them into sessions per micro-batch from
    the bucket's snapshot, give the standalone session's rows where no row is late."""
    batches = on_time(micro_batches())
    got = run_stages(query_plan("cpu", SESSION_QUERY), batches)
    want = standalone_rows(SESSION_QUERY, batches)
    assert len(want) > 1000 and any(row["n"] > 1 for row in want)
    assert rows_close(got, want)
