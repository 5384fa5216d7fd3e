"""The reader-fed driver-side plan (`start(plan="reader")`): mangonel's own reader of the
stream (reader.py: lift and pane pre-aggregation inside Spark's Python Data Source) feeds
the driver's window operator under `foreachBatch`, with no stateful Spark operator and no
Spark watermark at all.

Why: the driver-side plan (foreach_batch.py) takes Spark's watermark of the micro-batch,
which needs a stateful operator (its "tick", a window aggregation over no rows) so that Spark
runs the no-data micro-batch firing the last windows; the tick costs a shuffle stage with
state every micro-batch (docs/performance/spark-driver.md, "Inside Spark: stage 2 on the driver").
Here:

- **Stage 1** is the reader's (`pane_reader.partition_batches`): each part reads its rows in
  Python and yields one carrier row and its (key, pane) partials, every row with the part's
  watermark time (the largest event time among the rows Spark's watermark would count). No
  row of the stream enters the JVM. Where (`reader_placement`, EXPLAIN's `reads`): with a
  local master the driver reads the parts itself, one micro-batch ahead (reader_ahead.py);
  on a cluster a Spark task per part (`mangonel_panes`, reader.py), whose partials
  `toArrow()` brings to the driver. The Spark setting `spark.mangonel.reader.placement`
  ("driver" or "executors") overrides the choice.
- **Spark's source** (`reader_source`, EXPLAIN's `source`) gives the micro-batches and their
  checkpointed progress. Where the driver reads a folder of files, it is Spark's own file
  source (`binaryFile`, paths only: it reads no file) with `maxFilesPerTrigger` =
  `files_per_trigger`, which only triggers the micro-batches: the driver takes each
  micro-batch's parts by the stream's own offset rules (files in name order,
  reader_offsets.py) and records them under the checkpoint before reading them
  (`FileTrigger`), so a re-run batch id reads the same parts. Why: a Python Data Source
  costs Spark fresh Python processes at every query start (its first micro-batch about 2 s
  after `start()` on the project's 2-core VM, docs/performance/spark-driver.md); with the JVM's file
  source, about 0.2 s. The
  generator (no files) keeps `mangonel_parts` (reader_source.py), which hands the driver
  the parts as rows.
- **The watermark** is computed on the driver by Spark's rule, in milliseconds as Spark keeps
  it: W_0 = 0, W_{N+1} = max(W_N, max event time through micro-batch N - delay). Micro-batch
  N merges its partials against W_{N-1} (a pane whose windows all ended then is late,
  dropped and counted: the operator's merge) and fires every window with end <= W_N, as
  Spark's own aggregation does (docs/spark.md, "Watermark and late data").
- **No-data micro-batches**: Spark runs one after data, when no new data is there, only for
  a stateful query, to fire the windows due at the new watermark. Where Spark's file source
  triggers, the micro-batch after which the driver finds no new data (its look ahead) fires
  them itself, after its own windows: the rows and the watermark Spark's no-data
  micro-batch would give, in the micro-batch before it. With `mangonel_parts` the source
  makes that micro-batch: after data, when idle, its next offset only marks the data as
  flushed (`ReaderSpec.flush`), a micro-batch with no parts.
- **State and exactly once** as foreach_batch.py: per batch id, the operator's snapshot
  (with W_{N+1}) under the checkpoint; a re-run batch id restores the batch before it.

Why not fire W_{N+1} right after every micro-batch N: Spark accepts, in micro-batch N + 1,
rows of windows ending in (W_N, W_{N+1}], which would have fired already; the results would
then differ from Spark's on out-of-order input (tested: tests/spark/test_spark_reader_batch.py).
Only when no new data is there does Spark run the no-data micro-batch first, and then judges
the next data against W_{N+1}: what firing it at the end of micro-batch N gives. (A file
that lands between the driver's look and Spark's next trigger is then read as if it came
just after the no-data micro-batch: the schedule Spark itself runs had the file landed a
moment later.)
"""

from __future__ import annotations

import dataclasses
import json
import struct
import weakref
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener

from mangonel.compiler import physical as ph
from mangonel.compiler.explain import Parameter, PlanNode, format_duration
from mangonel.compiler.explain import explain_text as node_text
from mangonel.errors import DataError, PlanError
from mangonel.runtime.spark import reader as reader_module
from mangonel.runtime.spark.foreach_batch import (
    STATE_FOLDER,
    DriverPlan,
    Sink,
    SnapshotStore,
    parquet_sink,
)
from mangonel.runtime.spark.functions import bucket_tree
from mangonel.runtime.spark.pane_reader import EVENT_TIME, ReaderSpec
from mangonel.runtime.spark.planner import SparkQueryPlan, reader_applies
from mangonel.runtime.spark.reader_ahead import DriverReader
from mangonel.runtime.spark.reader_offsets import (
    SourceOffsets,
    initial_offset,
    latest_offset,
    offset_parts,
    part_text,
)
from mangonel.runtime.spark.reader_source import (
    END_OFFSET,
    PANES_FORMAT,
    PART,
    PARTS_FORMAT,
    PartsDataSource,
)
from mangonel.runtime.spark.stage1 import (
    partial_ddl,
    partial_schema,
    spark_name,
    spark_partial_schema,
)

_WATERMARK = struct.Struct("<q")  # W_{N+1} in milliseconds, before the operator's snapshot
PLACEMENT_SETTING = "spark.mangonel.reader.placement"
READER_PLACEMENTS = ("driver", "executors")
TRIGGER_FORMAT = "binaryFile"  # Spark's file source of paths (module docstring)
_TRIGGER_SCHEMA = "path STRING, modificationTime TIMESTAMP, length BIGINT, content BINARY"
_OFFSETS_SUFFIX = "offsets"  # FileTrigger's record per batch id, beside the snapshots


def reader_placement(spark: SparkSession) -> tuple[str, str]:
    """Where the reader-fed plan reads its parts, and why (module docstring)."""
    setting = spark.conf.get(PLACEMENT_SETTING, None)
    if setting is not None:
        if setting not in READER_PLACEMENTS:
            raise PlanError(f"{PLACEMENT_SETTING} must be 'driver' or 'executors', not {setting!r}")
        return setting, f"{PLACEMENT_SETTING}={setting}"
    master = spark.sparkContext.master
    if master.startswith("local"):
        return "driver", f"master {master}: the executors share the driver's machine"
    return "executors", f"master {master}: the reading scales with the executors"


def reader_source(reads: str, offsets: SourceOffsets) -> tuple[str, str]:
    """Spark's source of the reader-fed plan's micro-batches, and why (module docstring)."""
    if reads == "executors":
        return PANES_FORMAT, "its partitions read the parts"
    if offsets.source in ("parquet", "csv") and Path(offsets.path).is_dir():
        return TRIGGER_FORMAT, "a folder: Spark's file source triggers, no Python process to start"
    return PARTS_FORMAT, f"a {offsets.source} stream: it hands the driver the parts"


def refused(planned: SparkQueryPlan, late_rows: bool = False) -> str | None:
    """Why the reader-fed plan cannot run this query (None: it can): the stream must be one
    mangonel reads (`planner.reader_applies`; late rows as data need the rows, which the
    reader never sends), and the aggregates must have pane partials that stage 2 merges
    (holistic values would travel as bytes per pane: not built)."""
    window = planned.window
    applies, why_not = reader_applies(window, late_rows)
    if not applies:
        return why_not
    holistic = sorted({f.kind.name for f in window.fields if f.kind.holistic})
    if holistic:
        return f"holistic state ({', '.join(holistic)}) is not built for the reader-fed plan"
    return None


def reader_plan(
    planned: SparkQueryPlan, reason: str, reads: tuple[str, str]
) -> tuple[SparkQueryPlan, DriverPlan]:
    """The query planned for the reader: stage 1's placements as the reader path's (the
    pane pre-aggregation runs where the lift does), one carrier row per partition; `reads`:
    where its parts are read, and why (`reader_placement`)."""
    why = refused(planned)
    if why is not None:
        raise PlanError(f"start(plan='reader'): {why}", hint="use plan='driver' or 'streaming'")
    window = planned.window
    lift = ph.placement(window, "lift")
    placements = (lift, ph.Placement("preaggregate", lift.backend, lift.reason))
    # stage2="native": the reader sends one carrier row (the partition's watermark time)
    for_reader = dataclasses.replace(
        planned, stage1="reader", native=False, stage1_placements=placements, stage2="native"
    )
    stage1_reason = "lift and pane pre-aggregation inside mangonel's reader"
    driver = DriverPlan(
        planned.plan,
        "reader",
        stage1_reason,
        reason,
        reader_reads=reads[0],
        reader_reads_reason=reads[1],
    )
    return for_reader, driver


def reader_rows(
    spark: SparkSession, spec: ReaderSpec, source: str
) -> tuple[DataFrame, DriverReader | None]:
    """Spark's stream of `source` (`reader_source`): the reader's partials, or where the
    driver reads, its parts or only its triggers, with the `DriverReader` that reads them."""
    if source == PANES_FORMAT:
        schema = partial_ddl(spec.window) + f", {EVENT_TIME} TIMESTAMP"
        flushing = dataclasses.replace(spec, flush=True)
        return reader_module.panes_stream(spark, flushing, schema), None
    # the GPU kernels' staging buffers are one per process: one thread drives them
    threads = 1 if spec.window.backend == "gpu" else spec.splits
    if source == TRIGGER_FORMAT:
        triggers = (
            spark.readStream.format(TRIGGER_FORMAT)
            .schema(_TRIGGER_SCHEMA)
            .option("maxFilesPerTrigger", spec.files_per_trigger)
            .option("recursiveFileLookup", "true")
            .load(spec.path)
        )
        return triggers.select("path"), DriverReader(spec, threads)
    spec = dataclasses.replace(spec, flush=True)
    spark.dataSource.register(PartsDataSource)
    parts = spark.readStream.format(PARTS_FORMAT).option("offsets", spec.offsets().encode())
    return parts.load(), DriverReader(spec, threads)


class FileTrigger:
    """The parts of each micro-batch Spark's file source triggers (module docstring): the
    next ones by the stream's offset rules after the batch id before, recorded under the
    checkpoint (the parts themselves, not only the offsets: a file that lands later with a
    name inside the range is not one of them) before they are read, so that a re-run batch
    id reads the same parts."""

    def __init__(self, offsets: SourceOffsets, checkpoint_location: str) -> None:
        self.offsets = offsets
        self.log = SnapshotStore(checkpoint_location, suffix=_OFFSETS_SUFFIX)

    def parts(self, batch_id: int) -> tuple[list[str], dict]:
        """Micro-batch `batch_id`'s parts as text, and its end offset."""
        saved = self.log.read(batch_id)
        if saved is not None:  # a re-run batch id
            recorded = json.loads(saved)
            return recorded["parts"], recorded["end"]
        start = self._end_of(batch_id - 1)
        end = latest_offset(self.offsets, start)
        parts = offset_parts(self.offsets, start, end) if end != start else []
        texts = [part_text(part) for part in parts]
        self.log.write(batch_id, json.dumps({"end": end, "parts": texts}).encode())
        return texts, end

    def _end_of(self, batch_id: int) -> dict:
        if batch_id < 0:
            return initial_offset(self.offsets)
        saved = self.log.read(batch_id)
        if saved is None:
            raise DataError(
                f"micro-batch {batch_id + 1}: no mangonel offsets of micro-batch {batch_id} "
                f"under {self.log.folder}: start the query with a new checkpoint location"
            )
        return json.loads(saved)["end"]


def spark_millis(microseconds: int) -> int:
    """An event time as Spark's watermark reads it: milliseconds, truncated toward zero
    (`EventTimeWatermarkExec`: the timestamp in microseconds / 1000, a Java long division)."""
    return microseconds // 1000 if microseconds >= 0 else -(-microseconds // 1000)


@dataclasses.dataclass
class ReaderStage2:
    """The `foreachBatch` function: the reader's partials to the driver, the watermark by
    Spark's rule, the window operator. `late_tuples` and `batches` count what it did (tests,
    the bench)."""

    plan: DriverPlan
    sink: Sink
    checkpoint_location: str
    delay_ms: int
    late_tuples: int = 0
    batches: int = 0
    # as DriverStage2's (`MangonelSpark.start_metrics`): the operator's counters after the
    # latest micro-batch, and the tuples it judged late in that micro-batch
    metrics: Any = None
    late_last_batch: int = 0
    # the driver reads the parts itself (`reader_placement`): the micro-batch's rows are parts
    driver_reader: DriverReader | None = None
    # ... and where Spark's file source only triggers, takes them itself (`reader_source`)
    trigger: FileTrigger | None = None

    def __post_init__(self) -> None:
        self.write = parquet_sink(self.sink) if isinstance(self.sink, str) else self.sink
        self.store = SnapshotStore(self.checkpoint_location)
        window = self.plan.window
        self.schema = partial_schema(window)
        self.spark_schema = spark_partial_schema(window)
        self.rows = spark_name(window.fields[0].name)

    def restore(self, batch_id: int):  # noqa: ANN201 - (OperatorTree, W_N in ms)
        tree = bucket_tree(self.plan.plan)
        if batch_id == 0:  # Spark's watermark starts at 0 (the epoch), not minus infinity
            tree.on_watermark(0)
            return tree, 0
        saved = self.store.before(batch_id)
        (watermark_ms,) = _WATERMARK.unpack_from(saved)
        tree.restore(saved[_WATERMARK.size :])  # the operator's watermark is W_{N-1}
        return tree, watermark_ms

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        idle = False  # no new data after this micro-batch's (the driver's look ahead)
        if self.trigger is not None and self.driver_reader is not None:
            texts, end = self.trigger.parts(batch_id)  # the batch's rows are not read
            table = self.driver_reader.partials(texts, json.dumps(end))
            idle = self.driver_reader.next_offset == end
        else:
            table = batch.toArrow()  # a flush micro-batch has no partitions: no rows
            if self.driver_reader is not None:  # the rows are parts: read them here
                last = table[END_OFFSET][0].as_py() if table.num_rows else None
                table = self.driver_reader.partials(table[PART].to_pylist(), last)
        tree, watermark_ms = self.restore(batch_id)
        operator = tree.leaf()
        late_before = operator.late
        next_ms = watermark_ms
        if table.num_rows:
            top = pc.max(table[EVENT_TIME]).cast(pa.int64()).as_py()
            if top is not None:  # W_{N+1}, by Spark's rule (starts at 0, only rises)
                next_ms = max(watermark_ms, spark_millis(top) - self.delay_ms)
            partials = self._partials(table)
            if partials is not None:
                operator.merge(partials)  # late against W_{N-1}
        fired = tree.on_watermark(watermark_ms * 1000)
        if idle and next_ms > watermark_ms:  # Spark's no-data micro-batch, here (docstring)
            fired += tree.on_watermark(next_ms * 1000)
        self.write(pa.Table.from_batches(fired, schema=tree.schema), batch_id)
        self.store.write(batch_id, _WATERMARK.pack(next_ms) + tree.snapshot())
        self.late_last_batch = operator.late - late_before
        self.late_tuples += self.late_last_batch
        self.metrics = operator.metrics()
        self.batches += 1

    def _partials(self, table: pa.Table) -> pa.RecordBatch | None:
        """The partials as the operator names them, without the carrier rows (no tuples)."""
        table = table.filter(pc.greater(table[self.rows], 0))
        if not table.num_rows:
            return None
        arrays = [
            table[name].combine_chunks().cast(f.type)
            for name, f in zip(self.spark_schema.names, self.schema, strict=True)
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


class ReaderCloser(StreamingQueryListener):
    """Closes a reader-fed query's `DriverReader` (its read-ahead threads and the micro-batch
    read ahead) once Spark reports the query terminated, stopped or failed: `query.stop()`
    releases what `start` took, as Spark's own sources do. One per Spark session
    (`close_when_terminated`)."""

    def __init__(self) -> None:
        self.readers: dict[str, DriverReader] = {}  # by the query's run id

    def watch(self, query: StreamingQuery, reader: DriverReader) -> None:
        self.readers[str(query.runId)] = reader
        if not query.isActive:  # terminated before this listener knew of it
            self.readers.pop(str(query.runId), None)
            reader.close()

    def onQueryStarted(self, event: Any) -> None:  # noqa: ANN401, N802 - Spark's names
        pass

    def onQueryProgress(self, event: Any) -> None:  # noqa: ANN401, N802
        pass

    def onQueryIdle(self, event: Any) -> None:  # noqa: ANN401, N802
        pass

    def onQueryTerminated(self, event: Any) -> None:  # noqa: ANN401, N802
        reader = self.readers.pop(str(event.runId), None)
        if reader is not None:
            reader.close()


# each Spark session's `ReaderCloser`, registered with its streams once
_CLOSERS: weakref.WeakKeyDictionary[SparkSession, ReaderCloser] = weakref.WeakKeyDictionary()


def close_when_terminated(spark: SparkSession, query: StreamingQuery, reader: DriverReader) -> None:
    """Close `reader` when `query` terminates (`ReaderCloser`)."""
    closer = _CLOSERS.get(spark)
    if closer is None:
        closer = _CLOSERS[spark] = ReaderCloser()
        spark.streams.addListener(closer)
    closer.watch(query, reader)


def start(
    spark: SparkSession,
    planned: SparkQueryPlan,
    reason: str,
    sink: Sink,
    checkpoint_location: str,
    query_name: str | None = None,
) -> tuple[StreamingQuery, DriverPlan, ReaderStage2]:
    """Start the reader-fed plan of `planned` into `sink`; (the running query, its plan, its
    `foreachBatch` function, whose counts the tests and the bench read)."""
    reads = reader_placement(spark)
    for_reader, driver = reader_plan(planned, reason, reads)
    delay_us = for_reader.window.window.watermark_delay_us
    spec = reader_module.reader_spec(for_reader, spark.sparkContext.defaultParallelism)
    offsets = spec.offsets()
    source, source_reason = reader_source(reads[0], offsets)
    driver = dataclasses.replace(driver, reader_source=source, reader_source_reason=source_reason)
    rows, driver_reader = reader_rows(spark, spec, source)
    trigger = FileTrigger(offsets, checkpoint_location) if source == TRIGGER_FORMAT else None
    function = ReaderStage2(
        driver,
        sink,
        checkpoint_location,
        delay_ms=delay_us // 1000,
        driver_reader=driver_reader,
        trigger=trigger,
    )
    writer = rows.writeStream.foreachBatch(function)
    if query_name is not None:
        writer = writer.queryName(query_name)
    query = writer.option("checkpointLocation", checkpoint_location).start()
    if driver_reader is not None:
        close_when_terminated(spark, query, driver_reader)
    return query, driver, function


def explain_text(plan: DriverPlan) -> str:
    """The Spark side of the reader-fed plan (EXPLAIN after `start`)."""
    window = plan.window
    stream = window.lift.scan.stream
    keys = ", ".join(k.name for k in window.keys)
    group_by = f"[{keys}{', ' if keys else ''}pane]"
    triggered = plan.reader_source == TRIGGER_FORMAT
    where, to_driver, no_data = {
        TRIGGER_FORMAT: (
            "the driver, one micro-batch ahead: the parts by the stream's offsets, recorded "
            "under the checkpoint",
            "nothing (it triggers)",
            "the micro-batch before idle fires the new watermark too",
        ),
        PARTS_FORMAT: (
            "the driver, one micro-batch ahead: Spark's source hands it the parts",
            "parts",
            "a flush offset after data, when idle",
        ),
        PANES_FORMAT: (
            "a Spark task per part",
            "(key, pane) partials as Arrow",
            "a flush offset after data, when idle",
        ),
    }[plan.reader_source]
    why = f" ({plan.reader_reads_reason})" if plan.reader_reads_reason else ""
    source = PlanNode(
        f"Stage1 {'Spark file source' if triggered else 'Python Data Source'} (foreachBatch)",
        (
            Parameter(
                "source",
                f"{plan.reader_source} over {stream.name} ({plan.reader_source_reason})",
                plan.reader_source,
            ),
            Parameter("group_by", group_by, group_by),
            Parameter("runs", "read a part, lift + pane pre-aggregation", None),
            Parameter("reads", where + why, plan.reader_reads),
            Parameter("to_driver", to_driver, "partials"),
            Parameter("no_data", no_data, None),
        ),
        (PlanNode(f"Source: stream={stream.name}", (), ()),),
    )
    fires = "window_end<=watermark"
    stage2 = PlanNode(
        "Stage2 driver window operator (foreachBatch)",
        (
            Parameter("state", f"snapshot per batch id under <checkpoint>/{STATE_FOLDER}", None),
            Parameter("watermark", "Spark's rule, on the driver (no Spark watermark)", None),
            Parameter("fires", fires, fires),
            Parameter("late", "window_end<=previous watermark, per pane", None),
            Parameter("window", format_duration(window.window.size), window.window.size),
            Parameter("backend", window.backend, window.backend),
        ),
        (source,),
    )
    title = f"Spark: mangonel's reader, stage 2 on the driver (reason: {plan.reason})"
    return title + "\n" + node_text(stage2, window.backend, depth=1)


__all__ = ["ReaderStage2", "explain_text", "reader_plan", "refused", "start"]
