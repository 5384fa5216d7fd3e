"""What Spark's workers run, driven without Spark (`mangonel.runtime.spark.functions`): the
scenario `test_spark_functions.py` runs on the CPU and `test_spark_functions_gpu.py` on the
device. Batches are shaped as Spark's `mapInArrow` passes the scan columns: TIMESTAMP as
`timestamp[us, tz=Etc/UTC]` (Spark's session time zone), nullable BIGINT and DOUBLE."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

import mangonel as mg
from mangonel.compiler import physical as ph
from mangonel.runtime.operators.tree import OperatorTree
from mangonel.runtime.spark import functions
from mangonel.runtime.spark.pane_reader import EVENT_TIME, ReaderSpec

CREATE = (
    "CREATE STREAM t (ts TIMESTAMP, k BIGINT, v DOUBLE) "
    "WITH (event_time = 'ts', watermark = '200 milliseconds')"
)
QUERY = (
    "SELECT k, window_start, SUM(v) AS s, COUNT(*) AS n, MIN(v) AS lo, STDDEV(v) AS sd "
    "FROM t [RANGE 1 SECOND SLIDE 250 MILLISECONDS] WHERE v > 0 GROUP BY k"
)
# session windows in the per-tuple stages (late_rows= or native=False inside Spark); rows of
# a key are ~0.7 ms apart on average, so a 5 ms gap both merges and breaks sessions
SESSION_QUERY = (
    "SELECT k, window_start, window_end, SUM(v) AS s, COUNT(*) AS n, MIN(v) AS lo, "
    "STDDEV(v) AS sd FROM t [SESSION GAP 5 MILLISECONDS] WHERE v > 0 GROUP BY k"
)
DELAY_US = 200_000
SPARK_TIMESTAMP = pa.timestamp("us", tz="Etc/UTC")


def query_plan(backend: str, query: str = QUERY) -> ph.ProjectExec:
    session = mg.Session(backend="cpu")
    session.execute(CREATE)
    plan = session.sql(query).plan
    return plan if backend == "cpu" else ph.with_backend(plan, backend, "test")


def stage1_placements(
    window: ph.WindowAggregateExec, preaggregate: str = "gpu"
) -> tuple[ph.Placement, ...]:
    """Stage-1 placements of a GPU plan: the lift on the GPU and the pane pre-aggregation on
    `preaggregate` (the Spark planner's choice: the lift's backend); none for a CPU plan."""
    if window.backend != "gpu":
        return ()
    return (ph.placement(window, "lift"), ph.Placement("preaggregate", preaggregate, "test"))


def micro_batches(count: int = 6, rows: int = 4000, seed: int = 7) -> list[pa.RecordBatch]:
    """Rows over 50 keys, out of order within the watermark delay, NULL keys and values, and
    a few late rows in every micro-batch after the first."""
    rng = np.random.default_rng(seed)
    batches = []
    for number in range(count):
        base = number * 700_000
        ts = base + rng.integers(0, 700_000, rows) - rng.integers(0, DELAY_US, rows)
        ts[rng.random(rows) < 0.01] -= 3_000_000  # late
        keys = rng.integers(0, 50, rows)
        values = rng.normal(10, 5, rows)
        batches.append(
            pa.RecordBatch.from_arrays(
                [
                    pa.array(ts, pa.int64()).cast(SPARK_TIMESTAMP),
                    pa.array(keys, pa.int64(), mask=rng.random(rows) < 0.02),
                    pa.array(values, pa.float64(), mask=rng.random(rows) < 0.05),
                ],
                names=["ts", "k", "v"],
            )
        )
    return batches


def on_time(batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """`micro_batches` without their late rows (those moved 3 s back): no row is then late
    by Spark's rule or the standalone one, so both give the same windows."""
    kept = []
    for number, batch in enumerate(batches):
        times = batch.column(0).cast(pa.int64()).to_numpy(zero_copy_only=False)
        kept.append(batch.filter(pa.array(times >= number * 700_000 - DELAY_US)))
    return kept


def standalone_rows(query: str, batches: list[pa.RecordBatch]) -> list[dict]:
    """The standalone session's rows over `batches` and the end of input, sorted as
    `run_stages` sorts them."""
    session = mg.Session(backend="cpu")
    session.execute(CREATE)
    table = session.sql(query).run(batches)
    rows = table.to_pylist()
    return sorted(rows, key=lambda row: (row["window_start"], row["k"] is None, row["k"] or 0))


def run_stages(plan: ph.ProjectExec, batches: list[pa.RecordBatch], executors=None) -> list[dict]:
    """Spark's two stages over `batches` as micro-batches, one partition and one bucket:
    stage 1's partials, then stage 2 built anew, restored from the last snapshot, merged and
    fired at the micro-batch's watermark (max event time of the earlier micro-batches minus
    the delay), snapshotted; the end fires everything. `executors(number)`: a tree factory
    per micro-batch (default `functions.bucket_tree`), to move the bucket between executors.
    Result rows sorted by (window_start, k)."""
    window = ph.find(plan, ph.WindowAggregateExec)
    placements = stage1_placements(window)
    snapshot, rows, seen = None, [], None
    for number, batch in enumerate([*batches, None]):
        tree = executors(number) if executors else functions.bucket_tree(plan)
        if snapshot is not None:
            tree.restore(snapshot)
        watermark = 2**62 if batch is None else (None if seen is None else seen - DELAY_US)
        if batch is not None:
            partials = functions.stage1_preaggregate(window, placements, batch)
            if partials.num_rows:
                tree.leaf().merge(partials)
            times = batch.column(0).cast(pa.int64()).to_numpy(zero_copy_only=False)
            seen = int(times.max()) if seen is None else max(seen, int(times.max()))
        if watermark is not None:
            for fired in tree.on_watermark(watermark):
                rows += fired.to_pylist()
        snapshot = tree.snapshot()
    return sorted(rows, key=lambda row: (row["window_start"], row["k"] is None, row["k"] or 0))


def cpu_tree(plan: ph.ProjectExec) -> OperatorTree:
    """A CPU executor's tree of `plan` (as `functions.executor_plan` makes it there)."""
    return OperatorTree(ph.with_backend(plan, "cpu", "a CPU executor"))


def reader_spec(window: ph.WindowAggregateExec, **fields) -> ReaderSpec:  # noqa: ANN003
    """A reader spec of `window` with no carrier rows (stage1.carrier_rows needs pyspark)
    and the operator's own partial names (Spark's differ only where a name has a dot);
    a GPU plan's stage 1 placed as the Spark planner places it."""
    cpu_window = ph.with_backend(window, "cpu", "schema") if window.backend != "cpu" else window
    partial = functions.stage1_preaggregate(cpu_window, (), micro_batches(count=1)[0]).schema
    schema = pa.schema(list(partial)).append(pa.field(EVENT_TIME, pa.timestamp("us", "UTC")))
    carriers = pa.RecordBatch.from_pylist([], schema=pa.schema(list(partial)))
    placements = stage1_placements(window)
    return ReaderSpec(window, placements, "parquet", schema, carriers, **fields)
