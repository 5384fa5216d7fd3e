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

Count windows (`ROWS n SLIDE m`) differ on purpose (docs/spark.md, "Count windows"): their
partials are per tuple with an arrival order (stage1.arrival_order); a call first fires with
W_N (tuples with ts < W_N final), then merges its tuples sorted by that order, late when
ts < W_N, which is what the standalone session does with the same micro-batches.

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

from collections.abc import Iterator
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from mangonel.compiler import physical as ph
from mangonel.compiler.logical import WindowKind
from mangonel.runtime.spark import late
from mangonel.runtime.spark.functions import bucket_tree
from mangonel.runtime.spark.schema import ddl, flat_columns, flatten, nest
from mangonel.runtime.spark.shipping import shipped
from mangonel.runtime.spark.stage1 import (
    BUCKET,
    ORDER,
    partial_schema,
    spark_name,
    spark_partial_schema,
)

NEVER_LATE = "__mangonel_never_late"
NEVER_LATE_VALUE = "2200-01-01 00:00:00"  # in range of pandas datetime64[ns]
STATE_DDL = "snapshot BINARY"
LATE_STATE_DDL = "snapshot BINARY, calls BIGINT"  # with late rows: the bucket's call count
WATERMARK_DELAY_KEY = "spark.watermarkDelayMs"  # Spark's EventTimeWatermark.delayKey


def output_ddl(plan: ph.ProjectExec) -> str:
    """The stateful stage's output: the query's columns, a STRUCT as its fields (`nest`
    puts it together after the stage)."""
    return ddl(flat_columns([(o.name, o.type) for o in plan.outputs]))


def _to_arrow(
    frames: Iterator[pd.DataFrame],
    spark_schema: pa.Schema,
    schema: pa.Schema,
    rows: str,
    order: str | None = None,
) -> pa.RecordBatch | None:
    """The partials of one call as the operator names them (Spark's names differ), without
    the carrier rows (no tuples: their row count is 0), which only wake the bucket; sorted
    by the `order` column when given (count windows' arrival order)."""
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
    if order is not None:
        table = table.sort_by(order)
    columns = [table[name].combine_chunks() for name in spark_schema.names]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def bucket_function(plan: ph.ProjectExec, late_rows: str | None = None):  # noqa: ANN201
    """The applyInPandasWithState callback of one query (a pyspark callback). `late_rows`:
    the directory the late rows go to (late.py); the partials then carry their tuples."""
    load_plan = shipped(plan)  # a plan with a Python function: once per worker process
    window = ph.find(plan, ph.WindowAggregateExec)
    schema = partial_schema(window)
    spark_schema = spark_partial_schema(window)
    if late_rows is not None:
        schema = schema.append(pa.field(late.ROWS, pa.binary()))
        spark_schema = spark_schema.append(pa.field(late.ROWS, pa.binary()))
    counted = window.window.kind is WindowKind.COUNT
    if counted:  # per-tuple partials with their arrival order (stage1.arrival_order)
        schema = schema.append(pa.field(ORDER, pa.int64()))
        spark_schema = spark_schema.append(pa.field(ORDER, pa.int64()))
    rows = window.fields[0].name

    def run_bucket(
        bucket: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        tree = bucket_tree(load_plan())  # the window operator, HAVING, the projection
        results = tree.schema
        calls = 0  # this bucket's calls so far: names its late-row files
        if state.exists:
            # the bucket ran in every earlier micro-batch (carrier rows, timeouts), so the
            # operator's watermark is the previous micro-batch's: Spark's lateness bound
            tree.restore(bytes(state.get[0]))
            calls = int(state.get[1]) if late_rows is not None else 0
        watermark_ms = state.getCurrentWatermarkMs()
        fired: list[pa.RecordBatch] = []
        if not state.exists and not counted:
            # a new bucket (every bucket runs from the first micro-batch with data) starts at
            # Spark's watermark, not minus infinity: 0 (the epoch) in micro-batch 0, so a
            # window ending at or before 1970 is late, as Spark's own aggregation drops it
            tree.on_watermark(watermark_ms * 1000)
        if counted:
            # count windows: W_N first (tuples with ts < W_N are final, their windows fire),
            # then this micro-batch's tuples, late when ts < W_N: the watermark the standalone
            # query holds before the same batch, so both give the same windows
            fired = tree.on_watermark(watermark_ms * 1000)
        if not state.hasTimedOut:
            partials = _to_arrow(frames, spark_schema, schema, rows, ORDER if counted else None)
            if partials is not None:
                operator = tree.leaf()
                if late_rows is None:
                    operator.merge(partials)  # the split form's stage 2 input
                else:
                    _merge_keeping_late(operator, partials, late_rows, int(bucket[0]), calls)
        # then Spark's eviction: every window with end <= this micro-batch's watermark
        if not counted:
            fired = tree.on_watermark(watermark_ms * 1000)
        if late_rows is None:
            state.update((tree.snapshot(),))
        else:
            state.update((tree.snapshot(), calls + 1))
        # wake the bucket in the next micro-batch whose watermark is higher (Spark times a key
        # out once watermark > timeout and runs a no-data micro-batch for it)
        state.setTimeoutTimestamp(max(watermark_ms, 1))
        for batch in fired:
            if batch.num_rows:
                yield flatten(pa.Table.from_batches([batch], schema=results)).to_pandas()

    return run_bucket


def _merge_keeping_late(
    operator: Any,  # noqa: ANN401 - the tree's window operator (its split form)
    partials: pa.RecordBatch,
    directory: str,
    bucket: int,
    call: int,
) -> None:
    """`merge`, with the partial rows it judges late handed to its late-row sink (the
    operator's own verdict), and their tuples written to `directory` (late.py)."""
    found = late.expand(late.merge_keeping_late(operator, partials))
    if found is not None:
        late.write(directory, found, bucket, call)


def stage2(plan: ph.ProjectExec, partials: DataFrame, late_rows: str | None = None) -> DataFrame:
    """The query's results as a streaming DataFrame in append mode; `late_rows`: the
    directory its late rows are written to (the partials carry their tuples, late.py)."""
    never_late = F.lit(NEVER_LATE_VALUE).cast("timestamp")
    keyed = partials.select("*", never_late.alias(NEVER_LATE, metadata={WATERMARK_DELAY_KEY: 0}))
    results = keyed.groupBy(BUCKET).applyInPandasWithState(
        bucket_function(plan, late_rows),
        outputStructType=output_ddl(plan),
        stateStructType=STATE_DDL if late_rows is None else LATE_STATE_DDL,
        outputMode="append",
        timeoutConf=GroupStateTimeout.EventTimeTimeout,
    )
    return nest(results, [(o.name, o.type) for o in plan.outputs])
