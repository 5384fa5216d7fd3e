"""The split (Spark) form of holistic window functions, without Spark: stage 1's
`preaggregate` over parts of each batch (as partitions would), stage 2's `merge` and
watermark, and a snapshot/restore between batches, give the fused standalone results (also
for a Python function `with_timestamps`, whose values' event times are shipped); the
pane-values wire format round-trips."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import mangonel
from mangonel.compiler import physical as ph
from mangonel.runtime.local.query import LocalQuery
from mangonel.runtime.operators import pane_values
from mangonel.runtime.operators.tree import OperatorTree

DDL = (
    "CREATE STREAM s (ts TIMESTAMP, k BIGINT, x BIGINT, v DOUBLE) "
    "WITH (event_time = 'ts', watermark = '3 microseconds')"
)
SCHEMA = pa.schema(
    [("ts", pa.timestamp("us")), ("k", pa.int64()), ("x", pa.int64()), ("v", pa.float64())]
)
QUERY = (
    "SELECT k, window_start, MEDIAN(v) AS m, SUM(v) AS s, COUNT(DISTINCT x) AS d, "
    "PERCENTILE_DISC(0.25) WITHIN GROUP (ORDER BY x) AS pd, PERCENTILE(v, 0.9) AS p9, "
    "APPROX_COUNT_DISTINCT(x) AS a, spread(v) AS sp, COUNT(*) AS n "
    "FROM s [RANGE 8 MICROSECONDS SLIDE 2 MICROSECONDS] WHERE x <> 13 GROUP BY k"
)

# the exact functions a GPU plan selects on the device (test_holistic_split_gpu.py adds a
# sketch and a Python function, each in its own test)
GPU_QUERY = (
    "SELECT k, window_start, MEDIAN(v) AS m, SUM(v) AS s, COUNT(DISTINCT x) AS d, "
    "PERCENTILE_DISC(0.25) WITHIN GROUP (ORDER BY x) AS pd, PERCENTILE(v, 0.9) AS p9, "
    "COUNT(*) AS n FROM s [RANGE 8 MICROSECONDS SLIDE 2 MICROSECONDS] WHERE x <> 13 GROUP BY k"
)


def spread(values: np.ndarray) -> float:
    return values[-1] - values[0] if len(values) else np.nan


def _batches() -> list[pa.RecordBatch]:
    rng = np.random.default_rng(5)
    batches, clock = [], 0
    for _ in range(6):
        rows = 40
        ts = clock + rng.integers(-16, 6, rows)  # out of order, some late
        clock += 6
        v = rng.integers(0, 5, rows).astype(float)  # ties
        v[rng.random(rows) < 0.2] = np.nan
        x = rng.integers(0, 20, rows)
        batches.append(
            pa.RecordBatch.from_arrays(
                [
                    pa.array(np.maximum(ts, 0), pa.int64()).cast(pa.timestamp("us")),
                    pa.array(rng.integers(0, 3, rows)),
                    pa.array(x, mask=rng.random(rows) < 0.1),
                    pa.array(v, mask=rng.random(rows) < 0.15),
                ],
                schema=SCHEMA,
            )
        )
    return batches


def _plan(query: str = QUERY, backend: str = "cpu"):
    session = mangonel.Session(backend=backend)
    session.execute(DDL)
    session.register_window_function("spread", spread, returns="DOUBLE")
    return session.sql(query).plan


def _rows(batches: list[pa.RecordBatch]) -> list[dict]:
    return [row for batch in batches for row in batch.to_pylist()]


def value_time_pairs(values: np.ndarray, times: np.ndarray) -> float:
    """Registered with_timestamps: each (value, event time) pair as the function sees it, in
    its order, folded into one number (a time shipped apart from its value changes it)."""
    total = 0.0
    for i in range(values.shape[0]):
        total = (total * 31.0 + values[i] * 7.0 + times[i]) % 1_000_003.0
    return total


TIMED_QUERY = (
    "SELECT k, window_start, pairs(v) AS p, MEDIAN(v) AS m, pairs(x) AS px, COUNT(*) AS n "
    "FROM s [RANGE 8 MICROSECONDS SLIDE 2 MICROSECONDS] WHERE x <> 13 GROUP BY k"
)


def _timed_plan(backend: str = "cpu"):
    session = mangonel.Session(backend=backend)
    session.execute(DDL)
    session.register_window_function("pairs", value_time_pairs, with_timestamps=True)
    return session.sql(TIMED_QUERY).plan


def split_run(plan, batches, stage1_placements=(), restart_after: int | None = 2) -> list[dict]:
    """The plan in the split form, as Spark drives it: stage 1 over two halves of each batch
    (two "partitions", each a fresh operator), stage 2 merging them and advancing the
    watermark; its state snapshotted and restored into a new tree after `restart_after`."""
    window = ph.find(plan, ph.WindowAggregateExec)
    stage2 = OperatorTree(plan)
    got = []
    for number, batch in enumerate(batches):
        half = batch.num_rows // 2
        for part in (batch.slice(0, half), batch.slice(half)):
            stage1 = OperatorTree(window, extra_placements=stage1_placements).leaf()
            stage2.leaf().merge(stage1.preaggregate(part))
        got += _rows(stage2.on_watermark(stage2.leaf().max_event_time - 3))
        if number == restart_after:  # a restart from the checkpointed state
            saved = stage2.snapshot()
            stage2 = OperatorTree(plan)
            stage2.restore(saved)
    assert stage2.leaf().metrics().late_tuples_dropped > 0  # late panes were dropped too
    return got + _rows(stage2.finish())


def standalone_run(plan, batches) -> list[dict]:
    standalone = LocalQuery(plan)
    return _rows([b for batch in batches for b in standalone.process(batch)] + standalone.finish())


def test_split_form_with_a_restart_equals_the_fused_operator():
    plan = _plan()
    expected = standalone_run(plan, _batches())
    assert len(expected) > 20 and any(row["d"] for row in expected)
    got = split_run(plan, _batches())
    assert [str(row) for row in got] == [str(row) for row in expected]


def test_split_form_ships_event_times_of_a_function_with_timestamps():
    from mangonel.runtime.spark.planner import plan_spark, spark_stages_text

    plan = _timed_plan()
    stages = spark_stages_text(plan_spark(TIMED_QUERY, plan, partitions=2))
    assert "pane_times=[values_" in stages
    window = ph.find(plan, ph.WindowAggregateExec)
    partials = OperatorTree(window).leaf().preaggregate(_batches()[0])
    timed = [n for n in partials.schema.names if n.endswith(".time")]
    assert len(timed) == 2  # pairs(v) and pairs(x) read two fields, each with its times
    for name in timed:
        counts, _ = pane_values.unpack(partials.column(name))
        assert counts.tolist() == pane_values.unpack(partials.column(name[:-5]))[0].tolist()
    expected = standalone_run(plan, _batches())
    assert any(row["p"] is not None for row in expected)
    got = split_run(plan, _batches())
    assert [str(row) for row in got] == [str(row) for row in expected]


def test_stage_two_state_drops_panes_no_unfired_window_covers():
    plan = _plan()
    stage2 = OperatorTree(plan)
    for batch in _batches():
        stage2.leaf().merge(OperatorTree(plan).leaf().preaggregate(batch))
        stage2.on_watermark(stage2.leaf().max_event_time - 3)
    operator = stage2.leaf()
    oldest = operator.next_window * operator.panes_per_slide
    for store in operator.panes.values():
        assert store and min(store) >= oldest


@pytest.mark.parametrize("counts", [[], [0], [3, 0, 2], [0, 0], [1]])
def test_pane_values_round_trip(counts):
    values = np.arange(sum(counts), dtype=np.int64) * -(2**40) + 7
    packed = pane_values.pack(np.array(counts, np.int64), values)
    got_counts, got = pane_values.unpack(packed)
    assert got_counts.tolist() == counts and got.tolist() == values.tolist()
    if len(counts) > 1:  # a slice, and the same cells after pandas (bytes objects)
        sliced_counts, sliced = pane_values.unpack(packed.slice(1))
        assert sliced_counts.tolist() == counts[1:]
        assert sliced.tolist() == values[counts[0] :].tolist()
    through_pandas = pa.array(packed.to_pandas(), pa.binary())
    assert pane_values.unpack(through_pandas)[1].tolist() == values.tolist()
    with_null = pa.concat_arrays([packed, pa.nulls(1, pa.binary())])
    assert pane_values.unpack(with_null)[0].tolist() == [*counts, 0]


@pytest.mark.parametrize("timed", [False, True], ids=["values", "with_timestamps"])
def test_split_form_of_a_gpu_plan_obeys_stage_ones_placement(monkeypatch, timed):
    """With the stand-in "gpu" backend (CPU kernels that refuse the steps the GPU lacks):
    stage 1 pre-aggregates on the CPU as the Spark planner places it, stage 2 runs the GPU
    plan's lift, merge and holistic step on the "gpu" kernels (also with event times
    shipped for a function with_timestamps); results are the CPU's."""
    import fake_gpu_backend

    from mangonel.runtime.operators import registry

    monkeypatch.setitem(registry.BACKEND_MODULES, "gpu", "fake_gpu_backend")
    fake_gpu_backend.LIFTS.clear()
    cpu_plan = _timed_plan() if timed else _plan(GPU_QUERY)
    # a GPU session checks the function compiles for CUDA (replanning a CPU plan does not)
    plan = _timed_plan("gpu") if timed else ph.with_backend(cpu_plan, "gpu", "test")
    assert ph.placement(ph.find(plan, ph.WindowAggregateExec), "holistic").backend == "gpu"
    expected = standalone_run(cpu_plan, _batches())
    placed = (ph.Placement("preaggregate", "cpu", "partials leave by the host"),)
    got = split_run(plan, _batches(), stage1_placements=placed)
    assert [str(row) for row in got] == [str(row) for row in expected]
    assert fake_gpu_backend.LIFTS  # stage 1 lifted on the "gpu" kernels
