"""The driver-side plan (`SparkMangonelSession.start`): stage 1 as Spark's own *batch*
aggregation inside `foreachBatch`, stage 2 as mangonel's window operator on the driver.

Why: a streaming query whose stage 2 is a stateful Spark operator pays that operator's fixed
cost every micro-batch (`applyInPandasWithState`, about 1 s a micro-batch on 2 cores even
doing nothing), and its stage 1 must copy every row into Python (`mapInArrow`), since
Structured Streaming has no stateless grouped aggregation (docs/performance/spark.md, "Inside
Spark"). Inside `foreachBatch` a micro-batch is a *batch* DataFrame, which does have one:

- **Stage 1** (JVM, stateless): the streaming query is the stream with Spark's watermark, the
  plan's WHERE and its projection (keys, pane id, aggregate arguments: `stage1.lift_select`),
  so Spark pushes WHERE conjuncts below its watermark exactly as in its own aggregation. Per
  micro-batch, `GROUP BY keys, pane` computes each state field's partial with Spark
  functions (`partial_calls`: the window operator's partial format, `stage1.partial_schema`),
  collected to the driver as Arrow (`DataFrame.toArrow`). No row enters Python. Aggregates
  whose state has no Spark aggregate (holistic values, sketches) take the rows to the driver
  instead and pre-aggregate them there with Arrow (`stage1.arrow_preaggregate`).
- **Stage 2** (driver): one window operator for all keys; per micro-batch it restores the
  snapshot of the batch before, merges the partials (a pane whose windows all ended at or
  before the operator's watermark W_{N-1} is late: Spark's rule), fires every window with
  end <= W_N and writes its snapshot under the checkpoint location, by batch id. W_N is
  Spark's own watermark of the micro-batch (`IncrementalExecution.offsetSeqMetadata`), so
  lateness and firing are those of Spark's `GROUP BY window(ts, w, s), keys`.
- **No-data micro-batches.** Spark runs one (after the watermark moved, with no new data)
  only for a query with a stateful operator; without one the last windows would never fire.
  So the stream is unioned with a *tick*: Spark's own window aggregation over no rows (a
  `WHERE false` branch of the same watermarked stream), whose only effect is that Spark
  runs the no-data micro-batches its own aggregation would.
- **Exactly once.** A re-run batch id (after a failure or restart) restores the snapshot of
  the batch before it and computes the same results, which the sink receives with the same
  batch id: a Parquet folder sink overwrites the batch's file; a callable sink must be
  idempotent by batch id (Spark's `foreachBatch` contract).

- **Late rows as data** (`late_rows=`). Spark's `withWatermark` drops nothing here: only a
  stateful operator filters late rows, and the rows' branch has none (the tick's aggregation
  reads no rows), so every row reaches `foreachBatch`, and the window operator's merge judges
  each (key, pane) partial against W_{N-1} (the verdict it counts). With `late_rows=` the
  streaming query also carries every column of the stream (`late.row_select`); the partial
  rows judged late name the late panes, which form a prefix of the pane ids (a pane is late
  when its last window ended at or before W_{N-1}), and only a micro-batch that has some
  runs a second Spark job, `PANE <= the latest late pane` over the same micro-batch, to
  collect its late rows (the rows themselves when stage 1 already took them to the driver).
  They must be as many as the operator counted (else DataError: none lost, none invented),
  and go to the late-row sink with `late_reason` and `late_watermark` before the results
  and the snapshot: a re-run batch id judges the same rows and rewrites the same file.

Needs Spark classic (a py4j JVM): the micro-batch's watermark is read from the running
query's execution. Runs time windows (TUMBLE/HOP/CUMULATE) of one stream; count and
session windows and joins keep `sql()`'s plans.
"""

from __future__ import annotations

import math
import os
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from mangonel.catalog.types import SqlType
from mangonel.compiler import physical as ph
from mangonel.compiler.explain import Parameter, PlanNode, format_duration, format_expression
from mangonel.compiler.explain import explain_text as node_text
from mangonel.compiler.logical import WindowKind
from mangonel.errors import DataError, PlanError
from mangonel.runtime.operators.base import partial_column_name
from mangonel.runtime.operators.kernels import neutral
from mangonel.runtime.operators.protocol import OperatorMetrics
from mangonel.runtime.spark import late
from mangonel.runtime.spark.functions import bucket_tree
from mangonel.runtime.spark.planner import SparkQueryPlan, _source, _watermark
from mangonel.runtime.spark.schema import quote
from mangonel.runtime.spark.stage1 import (
    PANE,
    argument_column,
    arrow_preaggregate,
    distinct_arguments,
    lift_select,
    partial_schema,
    spark_name,
    spark_partial_schema,
)

Sink = Callable[[pa.Table, int], None] | str
# where late rows go (`late_rows=`): a directory (`late-batch<id>.parquet` per micro-batch
# with late rows) or a callable (pyarrow.Table, batch_id), called for those micro-batches
LateSink = Callable[[pa.Table, int], None] | str
STATE_FOLDER = "mangonel-driver-state"
_LOW_32 = 4294967295
# state kinds whose (key, pane) partial Spark's batch aggregation computes (`partial_calls`)
NATIVE_KINDS = ("count", "sum", "min", "max", "bool_and", "bool_or", "moments")


@dataclass(frozen=True)
class DriverPlan:
    """What `start()` runs: the window, how stage 1 pre-aggregates, and why this plan."""

    plan: ph.ProjectExec
    # "native" (Spark's batch GROUP BY), "driver-arrow" (rows to the driver) or "reader"
    # (mangonel's reader, reader_batch.py)
    stage1: str
    stage1_reason: str
    reason: str
    late_rows: bool = False  # the rows carry the stream's columns; late ones are written
    # the reader-fed plan: where its reader reads (`reader_batch.reader_placement`) and why
    reader_reads: str = "executors"
    reader_reads_reason: str = ""
    # ... and Spark's source of its micro-batches (`reader_batch.reader_source`) and why
    reader_source: str = ""
    reader_source_reason: str = ""

    @property
    def window(self) -> ph.WindowAggregateExec:
        return ph.find(self.plan, ph.WindowAggregateExec)


def refused(plan: ph.ProjectExec) -> str | None:
    """Why the driver-side plan cannot run `plan` (None: it can)."""
    if any(isinstance(node, ph.WindowJoinExec) for node in ph.walk(plan)):
        return "joins run as sql()'s plan (their stage 2 holds both streams' rows per bucket)"
    window = ph.find(plan, ph.WindowAggregateExec)
    if window.window.kind in (WindowKind.COUNT, WindowKind.SESSION):
        return f"{window.window.kind.name.lower()} windows have per-tuple partials, no panes"
    return None


START_PLANS = ("driver", "reader", "streaming")
LATE_ROWS_COST = (
    "late_rows=: the streaming query carries every column of the stream, and each "
    "micro-batch with late rows runs a second Spark job over it to collect them"
)


def choose_start(
    planned: SparkQueryPlan, forced: str | None = None, late_rows: bool = False
) -> tuple[str, str]:
    """("reader" | "driver" | "streaming", why) for `start()`: the reader-fed plan over a
    stream mangonel reads itself, tumbling windows included, where the reader can run the
    query (`choose_reader`; `reader_batch.refused` says where not: session windows, holistic
    aggregates, late rows as data); otherwise the driver-side plan where it ran faster than
    `sql()`'s plan on this project's measurements (docs/performance/spark-driver.md, "Inside Spark:
    stage 2 on the driver under `foreachBatch`"): windows with w/s > 1 whose aggregates are
    Spark aggregates. Where Spark's own aggregation is the plan (w/s <= 1: each tuple in one
    window) the driver-side plan's stage 1 is the same hash aggregation plus its tick and was
    slower; holistic functions would take every row to the driver (one process), not
    measured. With `late_rows` (`planned` as planned without them) Spark's own aggregation
    cannot run (it drops late rows unseen) and `sql()`'s plan would take every row into
    Python, so w/s <= 1 takes the driver-side plan too; the reason names the added cost."""
    if forced not in (None, *START_PLANS):
        raise PlanError(f"plan must be 'driver', 'reader' or 'streaming', not {forced!r}")
    reader = choose_reader(planned, forced, late_rows)
    if reader is not None:
        return reader
    why_not = refused(planned.plan)
    if forced == "driver":
        if why_not is not None:
            raise PlanError(f"start(plan='driver'): {why_not}")
        return "driver", "plan='driver' requested"
    if forced == "streaming":
        return "streaming", "plan='streaming' requested"
    if why_not is not None:
        return "streaming", why_not
    window = planned.window
    if planned.native and late_rows:
        return "driver", (
            f"Spark's own window aggregation ({planned.native_reason}) drops late rows unseen "
            "and sql()'s plan would take every row into Python; stage 1 as Spark's batch "
            f"aggregation inside foreachBatch, stage 2 on the driver; {LATE_ROWS_COST}"
        )
    if planned.native:
        return "streaming", f"Spark's own window aggregation: {planned.native_reason}"
    if any(f.kind.holistic for f in window.fields):
        return "streaming", (
            "holistic functions: the driver-side plan would take every row to the driver "
            "(plan='driver' forces it)"
        )
    shape = f"w/s = {window.window.size / window.window.slide:g}"
    cost = f"; {LATE_ROWS_COST}" if late_rows else ""
    return "driver", (
        f"{shape}: stage 1 as Spark's batch aggregation inside foreachBatch (no row enters "
        f"Python), stage 2 on the driver (no stateful Spark operator per micro-batch){cost}"
    )


def choose_reader(
    planned: SparkQueryPlan, forced: str | None, late_rows: bool = False
) -> tuple[str, str] | None:
    """("reader", why) where `start()` runs the reader-fed plan (reader_batch.py), else None:
    forced, or by default over a stream mangonel reads itself. It was faster than this
    module's plan at every measured shape and needs no tick (docs/performance/spark-driver.md,
    "Inside Spark: mangonel's reader feeding stage 2 on the driver"), and on tumbling windows, where
    `sql()` plans Spark's own aggregation, it is faster than that too: about 0.16 s a 2 M-row
    micro-batch against Spark's 0.36-0.45 s, and where Spark's file source paces it (a folder
    of files read on the driver) it starts as fast; behind a Python source (the generator,
    the executors reading) its start is 1-2 s slower, so it is ahead after a few
    micro-batches ("Inside Spark: Spark's file source as the trigger"). A streaming query
    runs for long, so the steady state decides. Late rows as data need the rows, which the
    reader never sends."""
    from mangonel.runtime.spark import reader_batch  # it builds on this module

    why_not = reader_batch.refused(planned, late_rows)
    if forced == "reader":
        if why_not is not None:
            raise PlanError(f"start(plan='reader'): {why_not}")
        return "reader", "plan='reader' requested"
    if forced is not None or why_not is not None:
        return None
    window = planned.window
    shape = f"w/s = {window.window.size / window.window.slide:g}"
    source = window.lift.scan.stream.option("source").lower()
    instead = (
        f"; instead of Spark's own window aggregation ({planned.native_reason}): under half "
        "its time a micro-batch; as fast to start over a folder of files read on the driver, "
        "1-2 s slower behind a Python source"
        if planned.native
        else ""
    )
    return "reader", (
        f"{shape} over a stream mangonel reads (source = '{source}'): panes pre-aggregated in "
        "mangonel's reader, the watermark and stage 2 on the driver (no stateful Spark "
        f"operator, no tick){instead}"
    )


def plan_driver(plan: ph.ProjectExec, reason: str, late_rows: bool = False) -> DriverPlan:
    why = refused(plan)
    if why is not None:
        raise PlanError(f"start(): {why}", hint="use sql() and writeStream for this query")
    window = ph.find(plan, ph.WindowAggregateExec)
    kinds = sorted({f.kind.name for f in window.fields if f.kind.name not in NATIVE_KINDS})
    kinds += sorted({f.kind.name for f in window.fields if f.kind.holistic} - set(kinds))
    if kinds:
        why_rows = (
            f"state kind {', '.join(kinds)} has no Spark aggregate: the rows go to the "
            "driver, which pre-aggregates them with Arrow"
        )
        return DriverPlan(plan, "driver-arrow", why_rows, reason, late_rows)
    return DriverPlan(plan, "native", "every state field is a Spark aggregate", reason, late_rows)


# -- stage 1 ------------------------------------------------------------------------------


def _neutral_literal(value: float | int, dtype: np.dtype) -> SparkColumn:
    if dtype.kind == "i":
        return F.lit(int(value)).cast("bigint")
    if math.isnan(value):
        return F.expr("CAST('NaN' AS DOUBLE)")
    if math.isinf(value):
        return F.expr(f"CAST('{'-' if value < 0 else ''}Infinity' AS DOUBLE)")
    return F.lit(float(value)).cast("double")


def _value_sql(field: ph.StateField, column: str, dtype: np.dtype) -> str:
    """The argument as the field's storage: int64 (TIMESTAMP as microseconds, BOOLEAN as
    0/1) or double."""
    if field.type is SqlType.TIMESTAMP:
        return f"unix_micros({column})"
    if dtype.kind == "i":
        return f"CAST({column} AS BIGINT)"
    return f"CAST({column} AS DOUBLE)"


def partial_calls(window: ph.WindowAggregateExec) -> list[SparkColumn]:
    """One Spark aggregate per partial column (`stage1.spark_partial_columns`' names), each
    the value the window operator's `preaggregate` writes: NULL (no non-NULL argument) as
    the field's neutral; an integer SUM wraps (summed as 32-bit halves, which cannot
    overflow); MIN/MAX in Spark's order (NaN largest), which is the state kinds' order."""
    arguments = distinct_arguments(window)
    calls: list[SparkColumn] = []
    for field in window.fields:
        dtype, neutrals = neutral(field)
        names = [spark_name(partial_column_name(field, p)) for p in range(len(neutrals))]
        if field.argument is None:
            calls.append(F.count(F.lit(1)).alias(names[0]))
            continue
        column = quote(argument_column(arguments.index(field.argument)))
        value = _value_sql(field, column, dtype)
        kind = field.kind.name
        if kind == "count":
            parts = [f"count({column})"]
        elif kind == "sum" and dtype.kind == "i":
            high = f"sum(shiftright({value}, 32))"
            low = f"sum({value} & {_LOW_32})"
            parts = [f"(shiftleft({high} + shiftright({low}, 32), 32) | ({low} & {_LOW_32}))"]
        elif kind in ("sum", "min", "max"):
            parts = [f"{kind}({value})"]
        elif kind in ("bool_and", "bool_or"):
            parts = [f"{'min' if kind == 'bool_and' else 'max'}(CAST({column} AS BIGINT))"]
        elif kind == "moments":
            double = f"CAST({column} AS DOUBLE)"
            n = f"CAST(count({column}) AS DOUBLE)"
            parts = [n, f"avg({double})", f"var_pop({double}) * {n}"]
        else:  # plan_driver routes every other kind to the driver's Arrow stage 1
            raise PlanError(f"state kind {kind} has no Spark aggregate")
        for name, sql, empty in zip(names, parts, neutrals, strict=True):
            calls.append(F.coalesce(F.expr(sql), _neutral_literal(empty, dtype)).alias(name))
    return calls


def streaming_rows(
    window: ph.WindowAggregateExec, watermarked: DataFrame, late_rows: bool = False
) -> DataFrame:
    """The streaming query under `foreachBatch`: WHERE and the lift's projection over the
    watermarked stream (with `late_rows`, and every column of the stream: `late.row_select`),
    unioned with the tick (module docstring)."""
    where, columns = lift_select(window)
    kept = watermarked.where(where)
    rows = kept.select(*columns, *(late.row_select(window) if late_rows else ()))
    event_time = quote(window.lift.scan.stream.event_time)
    # Spark's own streaming window aggregation over no rows: it makes Spark run the no-data
    # micro-batches (a WHERE false branch reads only the event-time column). It sits on the
    # same WHERE, so that its watermark operator sees the rows the other branch's does
    # (Spark pushes the conjuncts that do not read the event time below both), whatever
    # the session's multipleWatermarkPolicy
    tick = kept.where(F.lit(False)).groupBy(F.window(event_time, "1 day")).count()
    nulls = [F.lit(None).cast(f.dataType).alias(f.name) for f in rows.schema.fields]
    return rows.unionByName(tick.select(*nulls))


def batch_partials(
    plan: DriverPlan, batch: DataFrame
) -> tuple[pa.RecordBatch | None, pa.Table | None]:
    """One micro-batch's (key, pane) partials, as the window operator's `merge` reads them
    (None: no rows), and the rows where stage 1 took them to the driver (else None)."""
    window = plan.window
    schema = partial_schema(window)
    if plan.stage1 == "native":
        keys = [F.col(quote(k.name)) for k in window.keys]
        table = batch.groupBy(*keys, F.col(PANE)).agg(*partial_calls(window)).toArrow()
        spark_schema = spark_partial_schema(window)
        if not table.num_rows:
            return None, None
        arrays = [
            table[name].combine_chunks().cast(f.type)
            for name, f in zip(spark_schema.names, schema, strict=True)
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=schema), None
    rows = batch.toArrow()
    if not rows.num_rows:
        return None, rows
    partials = arrow_preaggregate(window)(rows)  # Spark's names: dots become "__"
    return pa.RecordBatch.from_arrays(partials.columns, schema=schema), rows


# -- stage 2 and the state ----------------------------------------------------------------


class SnapshotStore:
    """The operator's snapshot per batch id under the checkpoint location (a local path or
    a URI pyarrow can write): written whole, then renamed into place. `suffix` names another
    record kept the same way beside it (the reader-fed plan's offsets, reader_batch.py)."""

    def __init__(self, checkpoint_location: str, suffix: str = "snapshot") -> None:
        self.filesystem, root = pafs.FileSystem.from_uri(_uri(checkpoint_location))
        self.folder = f"{root.rstrip('/')}/{STATE_FOLDER}"
        self.suffix = suffix
        self.filesystem.create_dir(self.folder, recursive=True)

    def _path(self, batch_id: int) -> str:
        return f"{self.folder}/{batch_id:012d}.{self.suffix}"

    def batch_ids(self) -> list[int]:
        selector = pafs.FileSelector(self.folder, allow_not_found=True)
        found = []
        for info in self.filesystem.get_file_info(selector):
            match = re.fullmatch(rf"(\d{{12}})\.{re.escape(self.suffix)}", info.base_name)
            if match:
                found.append(int(match.group(1)))
        return sorted(found)

    def read(self, batch_id: int) -> bytes | None:
        path = self._path(batch_id)
        if self.filesystem.get_file_info(path).type == pafs.FileType.NotFound:
            return None
        with self.filesystem.open_input_stream(path) as stream:
            return stream.read()

    def before(self, batch_id: int) -> bytes:
        """The snapshot micro-batch `batch_id` starts from: the one `batch_id - 1` wrote."""
        saved = self.read(batch_id - 1)
        if saved is None:
            raise DataError(
                f"micro-batch {batch_id}: no mangonel snapshot of micro-batch {batch_id - 1} "
                f"under {self.folder}: the checkpoint location holds Spark's checkpoint "
                "without mangonel's state; start the query with a new checkpoint location"
            )
        return saved

    def write(self, batch_id: int, data: bytes) -> None:
        temporary = f"{self.folder}/.{uuid.uuid4().hex}.tmp"
        with self.filesystem.open_output_stream(temporary) as stream:
            stream.write(data)
        self.filesystem.move(temporary, self._path(batch_id))
        # a re-run of batch N + 1 needs N's snapshot: keep the two latest
        for old in self.batch_ids():
            if old < batch_id - 1:
                self.filesystem.delete_file(self._path(old))


def _uri(location: str) -> str:
    return location if "://" in location else os.path.abspath(location)


def parquet_sink(folder: str) -> Callable[[pa.Table, int], None]:
    """A sink writing each micro-batch's rows to `<folder>/part-<batch id>.parquet`: a re-run
    batch id overwrites its own file, so each result row is there once."""
    filesystem, root = pafs.FileSystem.from_uri(_uri(folder))
    filesystem.create_dir(root, recursive=True)

    def write(table: pa.Table, batch_id: int) -> None:
        if table.num_rows:
            pq.write_table(table, f"{root}/part-{batch_id:012d}.parquet", filesystem=filesystem)

    return write


def micro_batch_watermark_ms(spark: SparkSession, batch_id: int) -> int:
    """Spark's watermark of the running micro-batch (W_N: from the micro-batches before it),
    read from the query's execution on the driver's JVM."""
    query_id = spark.sparkContext.getLocalProperty("sql.streaming.queryId")
    wrapper = spark._jsparkSession.streams().get(query_id) if query_id else None  # noqa: SLF001
    if wrapper is None:
        raise PlanError("start(): the micro-batch's query is not found (Spark classic needed)")
    execution = wrapper.streamingQuery().lastExecution()
    if int(execution.currentBatchId()) != batch_id:
        raise DataError(f"micro-batch {batch_id}: the query runs {execution.currentBatchId()}")
    return int(execution.offsetSeqMetadata().batchWatermarkMs())


def late_row_sink(late_rows: LateSink) -> Callable[[pa.Table, int], None]:
    """`late_rows=` as a function of (late rows, batch id): a directory gets one Parquet file
    per batch id (late.write_batch), which a re-run batch id rewrites."""
    if isinstance(late_rows, str):
        directory = late_rows

        def write(table: pa.Table, batch_id: int) -> None:
            late.write_batch(directory, table, batch_id)

        return write
    return late_rows


class DriverStage2:
    """The `foreachBatch` function: stage 1's batch aggregation, then the window operator.
    `metrics`: the operator's counters after the latest micro-batch (kept in its snapshot,
    so they run on over restarts); `late_last_batch`: the tuples it judged late in that
    micro-batch; `batches`: micro-batches run by this function."""

    def __init__(
        self,
        spark: SparkSession,
        plan: DriverPlan,
        sink: Sink,
        checkpoint_location: str,
        late_rows: LateSink | None = None,
    ) -> None:
        self.spark = spark
        self.plan = plan
        self.sink = parquet_sink(sink) if isinstance(sink, str) else sink
        self.store = SnapshotStore(checkpoint_location)
        self.late_sink = None if late_rows is None else late_row_sink(late_rows)
        self.metrics: OperatorMetrics | None = None
        self.late_last_batch = 0
        self.batches = 0

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        watermark_ms = micro_batch_watermark_ms(self.spark, batch_id)
        tree = bucket_tree(self.plan.plan)
        if batch_id > 0:
            # the operator's watermark is now W_{N-1}: Spark's bound for late rows
            tree.restore(self.store.before(batch_id))
        else:  # Spark's initial watermark, 0 (the epoch), not minus infinity (stage2.py)
            tree.on_watermark(watermark_ms * 1000)
        # the micro-batch's one Spark job (a second one only for late rows, below)
        partials, rows = batch_partials(self.plan, batch)
        operator = tree.leaf()
        dropped = operator.metrics().late_tuples_dropped
        if partials is not None and self.late_sink is None:
            operator.merge(partials)
        elif partials is not None:
            verdict = late.judged_late(operator, partials)
            if verdict is not None:
                found = late.driver_late_rows(
                    self.plan.window, rows if rows is not None else batch, verdict
                )
                # before the results and the snapshot: a re-run batch id rewrites them
                self.late_sink(found, batch_id)
        fired = tree.on_watermark(watermark_ms * 1000)
        results = pa.Table.from_batches(fired, schema=tree.schema)
        self.sink(results, batch_id)
        self.store.write(batch_id, tree.snapshot())
        self.metrics = operator.metrics()
        self.late_last_batch = self.metrics.late_tuples_dropped - dropped
        self.batches += 1


def start_streaming(
    frame: DataFrame, sink: Sink, checkpoint_location: str, query_name: str | None = None
) -> StreamingQuery:
    """`sql()`'s streaming DataFrame into `sink`: a folder goes to Spark's Parquet sink, a
    callable gets each micro-batch's rows as Arrow (`foreachBatch`)."""
    writer = frame.writeStream.outputMode("append")
    if query_name is not None:
        writer = writer.queryName(query_name)
    writer = writer.option("checkpointLocation", checkpoint_location)
    if isinstance(sink, str):
        return writer.format("parquet").start(sink)

    def to_sink(batch: DataFrame, batch_id: int) -> None:
        sink(batch.toArrow(), batch_id)

    return writer.foreachBatch(to_sink).start()


def start(
    spark: SparkSession,
    plan: DriverPlan,
    watermarked: DataFrame,
    sink: Sink,
    checkpoint_location: str,
    query_name: str | None = None,
    late_rows: LateSink | None = None,
) -> tuple[StreamingQuery, DriverStage2]:
    """Start the driver-side plan over the watermarked stream; results go to `sink`, late
    rows to `late_rows` (`plan.late_rows` must say so). The query runs in the stream's
    session (its StreamingQueryManager knows the query; `spark` when the stream has none).
    Returns the query and its `foreachBatch` function (its counters)."""
    if plan.late_rows != (late_rows is not None):
        raise AssertionError("plan_driver(late_rows=) and start(late_rows=) must agree")
    session = getattr(watermarked, "sparkSession", None) or spark
    stage2 = DriverStage2(session, plan, sink, checkpoint_location, late_rows)
    frame = streaming_rows(plan.window, watermarked, plan.late_rows)
    writer = frame.writeStream.foreachBatch(stage2)
    if query_name is not None:
        writer = writer.queryName(query_name)
    return writer.option("checkpointLocation", checkpoint_location).start(), stage2


# -- EXPLAIN ------------------------------------------------------------------------------


def explain_nodes(plan: DriverPlan, watermarked: PlanNode) -> tuple[str, PlanNode]:
    """(title, operators top first) of the Spark side of the driver-side plan."""
    window = plan.window
    stream = window.lift.scan.stream
    keys = ", ".join(quote(k.name) for k in window.keys)
    group_by = f"[{keys}{', ' if keys else ''}pane]"
    where = f"{stream.event_time} IS NOT NULL"
    if window.lift.predicate is not None:
        where += f" AND ({format_expression(window.lift.predicate)})"
    pane = f"floor(unix_micros({stream.event_time}) / {window.pane_length})"
    carried = (
        (Parameter("rows", "every column of the stream (late_rows=)", "rows"),)
        if plan.late_rows
        else ()
    )
    project = PlanNode(
        "Stage1 native Project/Filter",
        (Parameter("where", where, where), Parameter("pane", pane, pane), *carried),
        (watermarked,),
    )
    tick = "Spark's window aggregation over no rows, so that Spark runs no-data micro-batches"
    union = PlanNode("Union", (Parameter("tick", tick, "tick"),), (project,))
    if plan.stage1 == "native":
        stage1 = PlanNode(
            "Stage1 batch HashAggregate (foreachBatch)",
            (
                Parameter("group_by", group_by, group_by),
                Parameter("partials", "Spark aggregates per state field", "spark"),
                Parameter("to_driver", "(key, pane) partials as Arrow", "partials"),
            ),
            (union,),
        )
    else:
        stage1 = PlanNode(
            "Stage1 driver arrow-hash-aggregate (foreachBatch)",
            (
                Parameter("group_by", group_by, group_by),
                Parameter("to_driver", "rows as Arrow", "rows"),
                Parameter("reason", plan.stage1_reason, plan.stage1_reason),
            ),
            (union,),
        )
    fires = "window_end<=watermark"
    stage2 = PlanNode(
        "Stage2 driver window operator (foreachBatch)",
        (
            Parameter("state", f"snapshot per batch id under <checkpoint>/{STATE_FOLDER}", None),
            Parameter("watermark", "Spark's, of the micro-batch", None),
            Parameter("fires", fires, fires),
            Parameter("late", "window_end<=previous watermark, per pane", None),
            *(
                (Parameter("late_rows", "written per batch id (a second Spark job)", None),)
                if plan.late_rows
                else ()
            ),
            Parameter("window", format_duration(window.window.size), window.window.size),
            Parameter("backend", window.backend, window.backend),
        ),
        (stage1,),
    )
    return f"Spark: stage 2 on the driver under foreachBatch (reason: {plan.reason})", stage2


def explain_text(plan: DriverPlan) -> str:
    """The Spark side of the driver-side plan, as `planner.spark_stages_text` prints others."""
    window = plan.window
    stream = window.lift.scan.stream
    title, root = explain_nodes(plan, _watermark(window, stream, _source(stream)))
    return title + "\n" + node_text(root, window.backend, depth=1)
