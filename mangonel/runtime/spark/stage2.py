"""Stage 2 inside Spark: stateful, per key bucket (`applyInPandasWithState`).

Partials are grouped by a key bucket, `pmod(hash(keys), buckets)`; one bucket's whole window
operator (pending panes, key map, watermark) is its Spark state: the operator's `snapshot()`
bytes, so Spark's state store checkpoints it and a restarted query resumes it.

Watermark and lateness are Spark's own. The user's stream carries `withWatermark(event_time,
delay)`; micro-batch N runs with W_N, the watermark computed after micro-batch N-1 (max event
time seen - delay, in milliseconds; `GroupState.getCurrentWatermarkMs()`). Spark's windowed
aggregation (since 3.4, SPARK-40925) drops a (window, key) row of micro-batch N as late when
window.end <= W_{N-1} (the watermark "for late events", one micro-batch older) and emits a
window in append mode once window.end <= W_N (the watermark "for eviction"). The operator
does the same per bucket and call: merge the partials with lateness decided per pane against
its own watermark, which is W_{N-1} because the bucket ran in micro-batch N-1 (see below),
then `advance_watermark(W_N)` fires every window with end <= W_N.

Every bucket runs in every micro-batch that has data (stage 1 sends one carrier row per
bucket from every partition) and in every no-data micro-batch Spark runs after its watermark
moved (an event-time timeout at the current watermark: Spark times a key out once the
watermark passes it), so no bucket misses a watermark step.

Two Spark details shape this: `applyInPandasWithState` finds "the watermarked column" as the
input column whose metadata holds Spark's watermark delay key — it needs one to read the
watermark and to use event-time timeouts — and with an event-time timeout it drops input rows
whose watermarked column is <= the watermark. The event time does not survive stage 1
(mapInArrow makes new columns), and a second `withWatermark` below a first is refused. So the
partials carry a constant far-future timestamp tagged with that metadata key: never late, and
no second watermark operator, so the query's watermark stays the user's event-time one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import cloudpickle
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from mangonel.compiler import physical as ph
from mangonel.runtime.operators.tree import OperatorTree
from mangonel.runtime.spark.schema import ddl
from mangonel.runtime.spark.stage1 import (
    BUCKET,
    partial_schema,
    spark_name,
    spark_partial_schema,
)

NEVER_LATE = "__mangonel_never_late"
NEVER_LATE_VALUE = "2200-01-01 00:00:00"  # in range of pandas datetime64[ns]
STATE_DDL = "snapshot BINARY"
WATERMARK_DELAY_KEY = "spark.watermarkDelayMs"  # Spark's EventTimeWatermark.delayKey


def output_ddl(plan: ph.ProjectExec) -> str:
    return ddl([(o.name, o.type) for o in plan.outputs])


def _to_arrow(
    frames: Iterator[pd.DataFrame], spark_schema: pa.Schema, schema: pa.Schema, rows: str
) -> pa.RecordBatch | None:
    """The partials of one call as the operator names them (Spark's names differ), without
    the carrier rows (no tuples: their row count is 0), which only wake the bucket."""
    batches = [
        pa.RecordBatch.from_pandas(
            frame[spark_schema.names], schema=spark_schema, preserve_index=False
        )
        for frame in frames
        if len(frame)
    ]
    if not batches:
        return None
    table = pa.Table.from_batches(batches, schema=spark_schema)
    table = table.filter(pc.greater(table[spark_name(rows)], 0))
    if not table.num_rows:
        return None
    columns = [table[name].combine_chunks() for name in spark_schema.names]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


# Plans by the digest of their pickled bytes, per Python worker. Spark deserializes a
# callback's closure anew for every task (each micro-batch); a plan carrying a Python window
# function would then hold a new function object each time, and numba compiles the
# evaluation loop per function object. Reused workers (Spark's default) keep one plan, and its
# compiled functions, for all the query's tasks.
_PLANS: dict[str, ph.ProjectExec] = {}
_MAX_PLANS = 16  # per worker: the oldest is forgotten first (it is only a cache)


def _shipped(plan: ph.ProjectExec) -> Callable[[], ph.ProjectExec]:
    """`plan` as bytes in the callback's closure, deserialized once per worker process."""
    if not any(
        a.python is not None
        for node in ph.walk(plan)
        if isinstance(node, ph.WindowAggregateExec)
        for a in node.aggregates
    ):
        return lambda: plan  # nothing compiled per object: no need
    payload = cloudpickle.dumps(plan)
    digest = hashlib.sha256(payload).hexdigest()

    def load() -> ph.ProjectExec:
        cached = _PLANS.get(digest)
        if cached is None:
            if len(_PLANS) >= _MAX_PLANS:
                del _PLANS[next(iter(_PLANS))]
            cached = _PLANS[digest] = cloudpickle.loads(payload)
        return cached

    return load


def bucket_function(plan: ph.ProjectExec):  # noqa: ANN201  (a pyspark callback)
    """The applyInPandasWithState callback of one query."""
    load_plan = _shipped(plan)
    window = ph.find(plan, ph.WindowAggregateExec)
    schema = partial_schema(window)
    spark_schema = spark_partial_schema(window)
    rows = window.fields[0].name

    def run_bucket(
        bucket: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        tree = OperatorTree(load_plan())  # the window operator, HAVING, the projection
        results = tree.schema
        if state.exists:
            # the bucket ran in every earlier micro-batch (carrier rows, timeouts), so the
            # operator's watermark is the previous micro-batch's: Spark's lateness bound
            tree.restore(bytes(state.get[0]))
        watermark_ms = state.getCurrentWatermarkMs()
        if not state.hasTimedOut:
            partials = _to_arrow(frames, spark_schema, schema, rows)
            if partials is not None:
                tree.leaf().merge(partials)  # the split form's stage 2 input
        # then Spark's eviction: every window with end <= this micro-batch's watermark
        fired = tree.on_watermark(watermark_ms * 1000)
        state.update((tree.snapshot(),))
        # wake the bucket in the next micro-batch whose watermark is higher (Spark times a key
        # out once watermark > timeout and runs a no-data micro-batch for it)
        state.setTimeoutTimestamp(max(watermark_ms, 1))
        for batch in fired:
            if batch.num_rows:
                yield pa.Table.from_batches([batch], schema=results).to_pandas()

    return run_bucket


def stage2(plan: ph.ProjectExec, partials: DataFrame) -> DataFrame:
    """The query's results as a streaming DataFrame in append mode."""
    never_late = F.lit(NEVER_LATE_VALUE).cast("timestamp")
    keyed = partials.select("*", never_late.alias(NEVER_LATE, metadata={WATERMARK_DELAY_KEY: 0}))
    return keyed.groupBy(BUCKET).applyInPandasWithState(
        bucket_function(plan),
        outputStructType=output_ddl(plan),
        stateStructType=STATE_DDL,
        outputMode="append",
        timeoutConf=GroupStateTimeout.EventTimeTimeout,
    )
