"""mangonel embedded in a SparkSession: `mangonel.attach(spark)` returns a SparkMangonelSession.

    ms = mangonel.attach(spark)
    ms.register("trades", spark.readStream..., event_time="ts", watermark="500 milliseconds")
    ms.execute("CREATE STREAM g (...) WITH (event_time = 'ts', source = 'generator', ...)")
    df = ms.sql("SELECT ... FROM trades [RANGE 1 SECOND SLIDE 10 MILLISECONDS] GROUP BY k")
    df.writeStream.format("parquet").option("checkpointLocation", ...).start(path)
    print(ms.explain())

A query becomes two Spark stages (see stage1.py and stage2.py): stateless pane
pre-aggregation over every input partition, a shuffle of the partials by key bucket, and the
stateful window operator per bucket with its snapshot in Spark's state store. A join query
runs as join.py says: both sides' rows bucketed by join key, one join operator per bucket.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from mangonel.aggregates.python import WindowFunction
from mangonel.catalog.catalog import Table
from mangonel.catalog.types import SqlType
from mangonel.compiler.explain import explain_text
from mangonel.compiler.statements import PlannedQuery, StatementRunner
from mangonel.errors import CatalogError, PlanError
from mangonel.runtime.cpu.python_window import compile_window_function
from mangonel.runtime.gpu.probe import gpu_status
from mangonel.runtime.spark import foreach_batch as foreach_batch_module
from mangonel.runtime.spark import join as join_module
from mangonel.runtime.spark import native as native_module
from mangonel.runtime.spark import native_stage2 as native_stage2_module
from mangonel.runtime.spark import reader as reader_module
from mangonel.runtime.spark import reader_batch as reader_batch_module
from mangonel.runtime.spark import stage1 as stage1_module
from mangonel.runtime.spark import stage2 as stage2_module
from mangonel.runtime.spark.java import check_java
from mangonel.runtime.spark.join_metrics import progress_totals
from mangonel.runtime.spark.planner import (
    STAGE1_KINDS,
    SparkQueryPlan,
    plan_spark,
    spark_stages_text,
)
from mangonel.runtime.spark.schema import schema_from_spark, spark_interval
from mangonel.runtime.spark.sources import create_source, read_table

_EXPLAIN_PREFIX = re.compile(r"^\s*EXPLAIN(\s+CODEGEN)?\s+", re.IGNORECASE)


def local_spark(
    app_name: str = "mangonel",
    *,
    cores: int = 2,
    shuffle_partitions: int = 2,
    extra: dict[str, str] | None = None,
) -> SparkSession:
    """A local SparkSession configured for mangonel: UTC session time zone, Arrow batches,
    small shuffles, no UI; the Python workers run this interpreter (so they see mangonel)."""
    problem = check_java()
    if problem:
        raise RuntimeError(problem)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100000")
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
        )
    )
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class SparkMangonelSession:
    """A mangonel catalog whose streams are Spark streaming DataFrames.

    backend: "cpu" | "gpu" | "auto" (as mangonel.Session). buckets: how many key buckets the
    stateful stage has (default: twice spark.sql.shuffle.partitions); each bucket is one
    state-store entry and one Python call per micro-batch. stage1: how partitions are
    pre-aggregated — "arrow" (Arrow's hash aggregation after a native projection; the CPU
    default), "kernels" (the backend's fused lift kernels; the GPU default), "reader" (the
    lift kernels inside mangonel's own reader of the stream, reader.py: the default for
    streams declared with source = 'generator' | 'parquet' | 'csv'), or None.
    native: None lets the planner choose Spark's native window aggregation by cost (where
    each tuple falls in one window, see native.py; EXPLAIN gives the reason); True / False
    force that plan / mangonel's two stages. gpu_join: in GPU plans, run join queries' join
    on the GPU (as mangonel.Session; False keeps it on the CPU). stage2: the reader path's
    stage 2, "native" (Spark's own aggregation over the pane partials, native_stage2.py) or
    "python" (mangonel's operator per key bucket); None lets the planner choose by cost.
    approx_percentile: APPROX_PERCENTILE's path, "auto" (None), "exact" or "sketch" (as
    mangonel.Session); stage 2 keeps raw values or sketches as the plan says.
    """

    def __init__(
        self,
        spark: SparkSession,
        backend: str = "auto",
        buckets: int | None = None,
        stage1: str | None = None,
        native: bool | None = None,
        gpu_join: bool = True,
        stage2: str | None = None,
        approx_percentile: str | None = None,
    ) -> None:
        if stage1 not in (None, *STAGE1_KINDS):
            raise PlanError(f"stage1 must be 'arrow', 'kernels' or 'reader', not {stage1!r}")
        self.spark = spark
        self.session = StatementRunner(
            backend,
            gpu_join=gpu_join,
            approx_percentile=approx_percentile,
            gpu_probe=gpu_status,
            compile_window_function=compile_window_function,
        )
        self.buckets = buckets
        self.stage1 = stage1
        self.native = native
        self.stage2 = stage2
        self._frames: dict[str, DataFrame] = {}
        self._last: SparkQueryPlan | None = None
        self._last_driver: foreach_batch_module.DriverPlan | None = None
        self._start_reason: str | None = None  # start() ran sql()'s plan: why (EXPLAIN)
        # the driver-side plan's foreachBatch function of each query start() ran: counters
        self._driver_queries: dict[str, foreach_batch_module.DriverStage2] = {}

    @property
    def catalog(self):  # noqa: ANN201
        return self.session.catalog

    # -- catalog -------------------------------------------------------------------------

    def register(
        self,
        name: str,
        streaming_df: DataFrame,
        *,
        event_time: str,
        watermark: str | int = 0,
        replace: bool = False,
    ) -> None:
        """Make a streaming DataFrame queryable as stream `name` (its event-time column and
        out-of-orderness bound: a duration string or microseconds)."""
        _check_data_frame(name, streaming_df, "register")
        if not streaming_df.isStreaming:
            # a batch DataFrame would plan, then fail inside Spark's stateful operator
            raise CatalogError(
                f"the DataFrame registered as {name!r} is a batch DataFrame; register() takes "
                "a streaming one",
                hint="build it with spark.readStream (a static DataFrame goes to register_table)",
            )
        _check_event_time_type(name, streaming_df, event_time)
        schema = schema_from_spark(name, streaming_df.schema)
        watermarked = [
            f.name for f in streaming_df.schema.fields if "spark.watermarkDelayMs" in f.metadata
        ]
        if watermarked:
            raise CatalogError(
                f"the DataFrame registered as {name!r} already has a watermark (on "
                f"{watermarked[0]!r}); mangonel sets Spark's watermark itself",
                hint=f"register the DataFrame without withWatermark and pass "
                f"register({name!r}, df, event_time=..., watermark='<delay>')",
            )
        self.session.create_stream(
            name, schema.to_arrow(), event_time=event_time, watermark=watermark, replace=replace
        )
        self._frames[name.lower()] = streaming_df

    def register_table(self, name: str, df: DataFrame, *, replace: bool = False) -> None:
        """A static DataFrame as table `name`, for stream-table joins (read once, when a
        query that joins it is built by `sql()`)."""
        _check_data_frame(name, df, "register_table")
        if df.isStreaming:
            raise CatalogError(
                f"the DataFrame registered as table {name!r} is a streaming DataFrame",
                hint=f"register({name!r}, df, event_time=...) declares a stream",
            )
        schema = schema_from_spark(name, df.schema)
        self.catalog.add_table(Table(name, schema), replace=replace)
        self._frames[name.lower()] = df

    def execute(self, statement: str) -> Any:
        """DDL as in mangonel.Session; `CREATE STREAM ... WITH (source = 'generator' |
        'parquet' | 'csv' | 'kafka', ...)` also creates the Spark source. A query returns a
        streaming DataFrame (as `sql`)."""
        declared = {**self.catalog.streams, **self.catalog.tables}
        result = self.session.execute(statement)
        if isinstance(result, PlannedQuery):
            return self._build(result)
        for name in list(self._frames):
            now = self.catalog.stream(name) or self.catalog.table(name)
            if now is not None and now is not declared.get(name):
                # replaced by DDL: the DataFrame registered for the old declaration would be
                # read with the new one's types (a source option makes a new one below)
                del self._frames[name]
        for stream in list(self.catalog.streams.values()):
            if stream.option("source") and stream.name.lower() not in self._frames:
                try:
                    self._frames[stream.name.lower()] = create_source(self.spark, stream)
                except Exception:
                    # a stream Spark cannot read is not declared (the DDL can be retried)
                    self.catalog.drop("STREAM", stream.name)
                    raise
        for table in list(self.catalog.tables.values()):
            if table.options and table.name.lower() not in self._frames:
                self._frames[table.name.lower()] = read_table(self.spark, table)
        for name in list(self._frames):
            if self.catalog.stream(name) is None and self.catalog.table(name) is None:
                del self._frames[name]  # dropped
        return result

    def register_window_function(
        self,
        name: str,
        function: Callable[..., Any],
        *,
        returns: str | SqlType = "DOUBLE",
        replace: bool = False,
        with_timestamps: bool = False,
    ) -> WindowFunction:
        """A Python window function, as `mangonel.Session.register_window_function`. Inside
        Spark it runs in stage 2's Python workers: Spark ships it with the query (cloudpickle:
        a function of an importable module by reference, a nested one by value), and each
        worker compiles it with numba when a window first needs it. `with_timestamps`: time
        windows' stage 1 ships the values' event times beside them."""
        return self.session.register_window_function(
            name, function, returns=returns, replace=replace, with_timestamps=with_timestamps
        )

    def window_function(
        self,
        name: str | None = None,
        *,
        returns: str | SqlType = "DOUBLE",
        replace: bool = False,
        with_timestamps: bool = False,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator form of `register_window_function`."""
        return self.session.window_function(
            name, returns=returns, replace=replace, with_timestamps=with_timestamps
        )

    # -- queries -------------------------------------------------------------------------

    def sql(self, query: str, late_rows: str | None = None) -> DataFrame | str:
        """A window query as a streaming DataFrame with the query's output schema (append
        mode); `EXPLAIN <query>` returns the text of `explain`. `late_rows`: a directory
        (local path or URI) the rows Spark's watermark finds late are written to as Parquet
        while the query runs (late.py; docs/spark.md, "Late rows as data")."""
        if late_rows is not None and not isinstance(late_rows, str):
            raise PlanError(f"late_rows must be a directory path, not {late_rows!r}")
        result = self.session.sql(query)
        if isinstance(result, str):  # EXPLAIN [CODEGEN] <query>: mangonel's plan, Spark's, code
            prefix = _EXPLAIN_PREFIX.match(query)
            inner = self.session.sql(_EXPLAIN_PREFIX.sub("", query, count=1))
            text = self._explain(self._spark_plan(inner))
            if prefix is not None and prefix.group(1):
                from mangonel.compiler.codegen import explain_codegen

                text += "\n" + explain_codegen(inner.plan)
            return text
        return self._build(result, late_rows)

    def _spark_plan(self, query: Any, late_rows: bool = False) -> SparkQueryPlan:
        partitions = int(self.spark.conf.get("spark.sql.shuffle.partitions", "2"))
        return plan_spark(
            query.text,
            query.plan,
            partitions=partitions,
            buckets=self.buckets,
            stage1=self.stage1,
            native=self.native,
            late_rows=late_rows,
            stage2=self.stage2,
        )

    def _build(self, query: Any, late_rows: str | None = None) -> DataFrame:
        planned = self._spark_plan(query, late_rows is not None)
        if planned.join is not None:
            frame = join_module.join_query(planned, self._frames, late_rows)
            self._last = planned
            return frame
        window = planned.window
        watermarked = self._watermarked(window)  # refuses a stream without a DataFrame
        self._last = planned
        self._last_driver = self._start_reason = None
        if planned.stage1 == "reader" and planned.stage2 == "native":
            # Spark's own aggregation merges the reader's partials (native_stage2.py)
            frame = reader_module.reader_partials(self.spark, planned)
            return native_stage2_module.native_stage2(planned.plan, frame)
        if planned.stage1 == "reader":  # mangonel reads the stream itself (reader.py)
            partials = reader_module.reader_stage1(self.spark, planned)
            return stage2_module.stage2(planned.plan, partials)
        if planned.native:
            return native_module.native_query(planned.plan, watermarked)
        if planned.stage1 == "kernels":
            partials = stage1_module.kernel_stage1(
                window,
                watermarked,
                planned.buckets,
                planned.stage1_placements,
                with_rows=late_rows is not None,
            )
        else:
            partials = stage1_module.stage1(
                window, watermarked, planned.buckets, with_rows=late_rows is not None
            )
        return stage2_module.stage2(planned.plan, partials, late_rows)

    def _watermarked(self, window: Any) -> DataFrame:  # noqa: ANN401 - a WindowAggregateExec
        stream = window.lift.scan.stream
        source = self._frames.get(stream.name.lower())
        if source is None:
            raise CatalogError(
                f"stream {stream.name!r} has no Spark DataFrame behind it",
                hint=f"register({stream.name!r}, spark.readStream..., event_time=...) or declare "
                "it with WITH (source = 'generator' | 'parquet' | 'csv' | 'kafka', ...)",
            )
        delay = window.window.watermark_delay_us
        return source.withWatermark(stream.event_time, spark_interval(delay))

    def start(
        self,
        query: str,
        sink: foreach_batch_module.Sink,
        *,
        checkpoint_location: str,
        query_name: str | None = None,
        plan: str | None = None,
        late_rows: foreach_batch_module.LateSink | None = None,
    ) -> StreamingQuery:
        """Start a window query into `sink`; returns the running `StreamingQuery`. `sink`
        receives each micro-batch's result rows: a callable `(pyarrow.Table, batch_id)`
        (idempotent by batch id, as Spark's `foreachBatch`), or a folder path, written as
        `part-<batch id>.parquet` by the driver-side plan (Spark's Parquet sink otherwise).
        `checkpoint_location` holds Spark's checkpoint (and the driver-side plan's
        snapshots). `plan`: "driver" (stage 1 as Spark's batch aggregation inside
        foreachBatch, stage 2 on the driver: foreach_batch.py; docs/spark.md, "Stage 2 on the
        driver"), "streaming" (`sql()`'s plan), or None: chosen by cost
        (`foreach_batch.choose_start`); EXPLAIN says which and why. `late_rows`: where the
        rows Spark's watermark finds late go, with `late_reason` and `late_watermark`: a
        directory (the driver-side plan writes `late-batch<id>.parquet` per micro-batch that
        has any; `sql()`'s plan as `sql(late_rows=)` does) or, on the driver-side plan, a
        callable `(pyarrow.Table, batch_id)` called for those micro-batches. Late-row counts:
        `start_metrics(query)`."""
        if late_rows is not None and not (isinstance(late_rows, str) or callable(late_rows)):
            raise PlanError(f"late_rows must be a directory path or a callable, not {late_rows!r}")
        if not (isinstance(sink, str | os.PathLike) or callable(sink)):
            raise PlanError(f"sink must be a directory path or a callable, not {sink!r}")
        if not isinstance(checkpoint_location, str | os.PathLike) or not str(checkpoint_location):
            raise PlanError(
                f"checkpoint_location must be a directory path, not {checkpoint_location!r}"
            )
        result = self.session.sql(query)
        if isinstance(result, str):
            raise PlanError("start() takes a query; EXPLAIN goes to sql() or explain()")
        planned = self._spark_plan(result)
        kind, reason = foreach_batch_module.choose_start(planned, plan, late_rows is not None)
        if kind == "reader":  # mangonel's reader feeds the driver (reader_batch.py)
            streaming, driver, stage2 = reader_batch_module.start(
                self.spark, planned, reason, sink, checkpoint_location, query_name
            )
            self._last, self._last_driver, self._start_reason = planned, driver, None
            self._driver_queries[streaming.runId] = stage2
            return streaming
        if kind == "streaming":
            if late_rows is not None and not isinstance(late_rows, str):
                raise PlanError(
                    f"start(): sql()'s plan runs this query ({reason}); it writes late rows "
                    "to a directory, not to a callable",
                    hint="pass late_rows='<directory>'",
                )
            frame = self._build(result, late_rows)
            self._start_reason = reason
            return foreach_batch_module.start_streaming(
                frame, sink, checkpoint_location, query_name
            )
        driver = foreach_batch_module.plan_driver(planned.plan, reason, late_rows is not None)
        watermarked = self._watermarked(planned.window)
        streaming, stage2 = foreach_batch_module.start(
            self.spark, driver, watermarked, sink, checkpoint_location, query_name, late_rows
        )
        self._last, self._last_driver, self._start_reason = planned, driver, None
        self._driver_queries[streaming.runId] = stage2
        return streaming

    def start_metrics(self, query: StreamingQuery) -> dict[str, int]:
        """The driver-side plan's counters of a query `start()` ran here (running or
        stopped), after its latest micro-batch: late_tuples_dropped (the tuples judged late,
        as the standalone `Query.metrics` counts them; kept in the operator's snapshot, so
        they include the runs before a restart from the same checkpoint), late_last_batch
        (those of the latest micro-batch), windows_fired, rows_out, state_bytes and batches
        (micro-batches run since this start)."""
        stage2 = self._driver_queries.get(query.runId)
        if stage2 is None:
            raise PlanError(
                "start_metrics(): the query is not one start() ran on the driver-side plan "
                "in this session (sql()'s plan keeps its counts in Spark's state)"
            )
        metrics = stage2.metrics
        return {
            "late_tuples_dropped": metrics.late_tuples_dropped if metrics else 0,
            "late_last_batch": stage2.late_last_batch,
            "windows_fired": metrics.windows_fired if metrics else 0,
            "rows_out": metrics.rows_out if metrics else 0,
            "state_bytes": metrics.state_bytes if metrics else 0,
            "batches": stage2.batches,
        }

    def join_metrics(self, query: StreamingQuery) -> dict[str, int]:
        """The join operator's metrics of a running (or stopped) join query, summed over the
        micro-batches Spark still reports in `query.recentProgress` (each micro-batch's own
        are in its progress, `observedMetrics["mangonel_join"]`; see join_metrics.py):
        rows_in_<alias> and late_<alias> per stream side, null_event_time_dropped,
        windows_fired, rows_out, state_bytes, batches_hash, batches_sort_merge."""
        return progress_totals(query.recentProgress)

    @property
    def last_plan(self) -> SparkQueryPlan | None:
        """What the latest `sql()` built (None before any): native or two-stage, and why."""
        return self._last

    def explain(self, query: str | None = None) -> str:
        """mangonel's physical plan of `query` (default: the latest `sql()`), followed by the
        part Spark runs."""
        if query is not None:
            planned = self._spark_plan(self.session.sql(query))
        elif self._last is not None:
            planned = self._last
        else:
            raise PlanError("explain(): no query yet; pass one or call sql() first")
        return self._explain(planned)

    def _explain(self, planned: SparkQueryPlan) -> str:
        driver = self._last_driver
        if driver is not None and planned is self._last and driver.stage1 == "reader":
            spark_side = reader_batch_module.explain_text(driver)
        elif driver is not None and planned is self._last:
            spark_side = foreach_batch_module.explain_text(driver)
        else:
            spark_side = spark_stages_text(planned)
            if self._start_reason is not None and planned is self._last:
                spark_side = f"start(): sql()'s plan (reason: {self._start_reason})\n{spark_side}"
        return explain_text(planned.plan) + "\n" + spark_side


__all__ = ["SparkMangonelSession", "local_spark", "spark_interval"]


def _check_data_frame(name: str, df: object, method: str) -> None:
    """A pyspark DataFrame, named where something else was given (it failed on a missing
    attribute)."""
    if not isinstance(df, DataFrame):
        raise CatalogError(
            f"{method}({name!r}, ...) takes a pyspark DataFrame, not {type(df).__name__}",
            hint="a pandas DataFrame becomes one with spark.createDataFrame(df); a stream is "
            "built with spark.readStream",
        )


def _check_event_time_type(name: str, df: DataFrame, event_time: str) -> None:
    """Spark's watermark takes a TIMESTAMP column only: a TIMESTAMP_NTZ event time planned
    and then failed inside Spark at `sql()`."""
    from pyspark.sql.types import TimestampNTZType

    for field in df.schema.fields:
        if field.name.lower() == str(event_time).lower() and isinstance(
            field.dataType, TimestampNTZType
        ):
            raise CatalogError(
                f"event_time {field.name!r} of {name!r} is TIMESTAMP_NTZ; Spark's watermark "
                "takes a TIMESTAMP (with the session time zone)",
                hint=f"cast it: df.withColumn({field.name!r}, "
                f"F.col({field.name!r}).cast('timestamp'))",
            )
