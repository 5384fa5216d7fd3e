"""The functions Spark's workers call, on the device (`pytest -m gpu`; the GPU machine has no
Spark and no Java, so they run here directly, with Arrow batches shaped as Spark's
mapInArrow passes them and the bucket state as snapshot bytes): a GPU executor runs the GPU
plan, made once per process; its two stages equal the CPU plan's; a bucket's state moves
between GPU and CPU executors in both directions."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from gpu_device import gpu_available  # noqa: E402

pytestmark = pytest.mark.gpu

if not gpu_available():
    pytest.skip("no CUDA device visible to CuPy", allow_module_level=True)

from oracle import rows_close  # noqa: E402
from spark_functions import (  # noqa: E402
    SESSION_QUERY,
    cpu_tree,
    micro_batches,
    query_plan,
    reader_spec,
    run_stages,
    stage1_placements,
)

from mangonel.compiler import physical as ph  # noqa: E402
from mangonel.runtime.spark import functions  # noqa: E402
from mangonel.runtime.spark.pane_reader import EVENT_TIME, partition_batches  # noqa: E402


def test_a_gpu_executor_runs_the_gpu_plan_once_per_process():
    backend, reason = functions.executor_backend("gpu")
    assert backend == "gpu" and "this executor has a GPU" in reason
    plan = query_plan("gpu")
    assert functions.executor_plan(plan) is plan
    window = ph.find(plan, ph.WindowAggregateExec)
    batch = micro_batches(count=1)[0]
    first = functions.stage1_preaggregate(window, stage1_placements(window), batch)
    made = functions.process_kernels()
    assert "gpu" in made
    for _ in range(3):
        functions.stage1_preaggregate(window, stage1_placements(window), batch)
        tree = functions.bucket_tree(plan)
        assert tree.kernels_of("gpu") is made["gpu"]
    assert functions.process_kernels() == made
    cpu_window = ph.find(query_plan("cpu"), ph.WindowAggregateExec)
    want = functions.stage1_preaggregate(cpu_window, (), batch)
    # the pre-aggregation on the device (the planner's choice) and on the CPU give the CPU
    # plan's partials
    on_cpu = functions.stage1_preaggregate(window, stage1_placements(window, "cpu"), batch)
    key = ["k", "__pane"]
    for got in (first, on_cpu):
        assert got.column_names == want.column_names
        assert got.num_rows == want.num_rows > 100
        assert rows_close(
            sorted(got.to_pylist(), key=lambda r: tuple(str(r[c]) for c in key)),
            sorted(want.to_pylist(), key=lambda r: tuple(str(r[c]) for c in key)),
        )


def test_gpu_stages_equal_the_cpu_stages():
    batches = micro_batches()
    got = run_stages(query_plan("gpu"), batches)
    want = run_stages(query_plan("cpu"), batches)
    assert len(want) > 100
    assert rows_close(got, want)


def test_gpu_session_stages_equal_the_cpu_stages():
    """Session windows in the per-tuple stages on a GPU executor: stage 1's lift on the
    device, stage 2's session merge on the device (late rows included), the CPU's rows."""
    batches = micro_batches()
    got = run_stages(query_plan("gpu", SESSION_QUERY), batches)
    want = run_stages(query_plan("cpu", SESSION_QUERY), batches)
    assert len(want) > 1000
    assert rows_close(got, want)


def test_a_buckets_state_moves_between_gpu_and_cpu_executors():
    plan = query_plan("gpu")
    batches = micro_batches()

    def alternate(number: int):
        return functions.bucket_tree(plan) if number % 2 == 0 else cpu_tree(plan)

    got = run_stages(plan, batches, executors=alternate)
    want = run_stages(query_plan("cpu"), batches)
    assert rows_close(got, want)


def test_the_reader_partition_on_the_gpu_equals_the_cpu_one():
    """The reader path (pane_reader.partition_batches: lift and pane pre-aggregation where
    the rows are read) on a GPU executor: the GPU plan's partials and watermark time equal
    the CPU plan's."""
    batch = pa.Table.from_batches([micro_batches(count=1)[0]])
    outputs = []
    for backend in ("gpu", "cpu"):
        window = ph.find(query_plan(backend), ph.WindowAggregateExec)
        batches = list(partition_batches(reader_spec(window), batch))
        outputs.append(batches[1])
    gpu, cpu = outputs
    assert gpu.column(EVENT_TIME).equals(cpu.column(EVENT_TIME))
    key = ["k", "__pane"]
    assert rows_close(
        sorted(gpu.to_pylist(), key=lambda r: tuple(str(r[c]) for c in key)),
        sorted(cpu.to_pylist(), key=lambda r: tuple(str(r[c]) for c in key)),
    )
