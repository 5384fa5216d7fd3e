"""Benchmarks inside local Spark (`mangonel bench --spark`) and Spark's native window
aggregation as the peer of the CPU benchmark.

`run_spark_benchmarks`: for each shape, the same generated stream (same seed, one Parquet
file per micro-batch) runs end to end, in the same Spark session, one after the other:
1. mangonel on a stream declared with `CREATE STREAM ... WITH (source = 'parquet')`: the
   planner's choice there is two stages after Spark's Parquet reader for w/s > 1 (Arrow
   stage 1 in `mapInArrow`, mangonel's Python stage 2) and Spark's native plan for tumbling
   windows (native.py); with `compare`, also a plan not chosen: the reader path (reader.py:
   lift and pane pre-aggregation inside mangonel's own Python Data Source, only partials
   enter the JVM) for the two stages, Spark's own stage 2 over the reader's partials
   (native_stage2.py) for tumbling windows, or the other stage 2 of a forced reader path;
2. Spark's native `GROUP BY window(ts, w, s), key` streaming aggregation over Spark's file
   source (the peer; the ratio is 1 over 2);
3. mangonel on the same files registered as a Spark DataFrame (`register`): the planner's
   choice there (two stages after Spark's file source, or Spark's native plan by cost);
4. mangonel's driver-side plan (`SparkMangonelSession.start`, foreach_batch.py) over the
   registered DataFrame: stage 1 as Spark's batch aggregation inside `foreachBatch`, stage 2
   on the driver, results to a sink that counts them;
4b. mangonel's reader-fed plan (`start(plan="reader")`, reader_batch.py) over the declared
   stream: mangonel's reader pre-aggregates panes, the driver computes the watermark and
   runs the window operator, no stateful Spark operator;
5. with `standalone` (the entry point's runner, mangonel.bench.spark_standalone_runner),
   mangonel's own engine outside Spark over the same files read as Arrow batches, one per
   micro-batch.
Each time covers planning, every micro-batch and the final no-data batch (start to
`processAllAvailable`), after one small warm-up run of each shape's plans (Python workers,
JIT, Spark's generated code).
`state_store` picks Spark's state store provider for the run (`STATE_STORES`). `--spark-conf`
settings go to the builder before Spark's JVM starts, so settings such as
`spark.driver.memory` (the driver's heap in local mode) reach it.
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from mangonel.catalog.catalog import Column, Schema
from mangonel.catalog.sources.generator import GeneratorConfig, generate
from mangonel.catalog.types import SqlType
from mangonel.compiler.explain import format_duration
from mangonel.errors import PlanError
from mangonel.runtime.spark import reader_batch
from mangonel.runtime.spark.session import SparkMangonelSession, local_spark

STREAM_DDL = "ts TIMESTAMP, key BIGINT, value DOUBLE"
STATE_STORES = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}


@dataclass(frozen=True)
class SparkShape:
    range_us: int
    slide_us: int
    keys: int = 1000
    aggregate: str = "SUM"

    @property
    def name(self) -> str:
        return (
            f"w={format_duration(self.range_us)} s={format_duration(self.slide_us)} "
            f"keys={self.keys} {self.aggregate}"
        )


DEFAULT_SHAPES = (
    SparkShape(1_000_000, 10_000),
    SparkShape(1_000_000, 100_000),
    SparkShape(1_000_000, 1_000_000),
)
# `--spark --holistic`: MEDIAN inside Spark (two stages: pane values shipped, windows
# evaluated at close) against Spark's native streaming `median` (a `percentile` buffer per
# window and key) over the same sliding windows (issue 11)
HOLISTIC_SHAPES = (SparkShape(1_000_000, 10_000, aggregate="MEDIAN"),)


@dataclass
class SparkResult:
    shape: str
    tuples: int
    micro_batches: int
    mangonel_seconds: float
    mangonel_tuples_per_second: float
    spark_seconds: float
    spark_tuples_per_second: float
    ratio: float
    rows_out: int
    spark_rows_out: int
    plan: str  # the planner's choice for the CREATE STREAM parquet stream: "reader" or "native"
    # the same query over the files registered as a DataFrame: the planner's choice there
    # ("two-stage" or "native", native.py) and its rate
    dataframe_plan: str = ""
    dataframe_tuples_per_second: float | None = None
    state_store: str = "hdfs"
    # the declared stream with the plan the planner did not choose (`alternative_plan`):
    # Spark's own stage 2 against mangonel's Python one over the reader's partials, or the
    # reader with Spark's own stage 2 against Spark's native plan over its file source
    alternative: str = ""
    alternative_tuples_per_second: float | None = None
    spark_conf: str = ""  # the run's `--spark-conf` settings, "KEY=VALUE; ..."
    # mangonel's standalone engine (`Session.sql().run()`) on the same files, outside Spark
    standalone_seconds: float | None = None
    standalone_rows: int | None = None
    # the driver-side plan (`ms.start`: foreachBatch, stage 2 on the driver) on the same files
    driver_seconds: float | None = None
    driver_rows: int | None = None
    # the reader-fed plan (`start(plan="reader")`: the reader feeds stage 2 on the driver)
    reader_seconds: float | None = None
    reader_rows: int | None = None


def start_local_spark(
    cores: int = 2, shuffle_partitions: int = 2, extra: dict[str, str] | None = None
) -> SparkSession:
    """Local Spark configured as the benchmarks and tests use it; `extra` settings are given
    to the builder, so they reach the JVM when this call starts it (spark.driver.memory)."""
    return local_spark(
        "mangonel-bench", cores=cores, shuffle_partitions=shuffle_partitions, extra=extra
    )


def driver_heap_bytes(spark: SparkSession) -> int:
    """The driver JVM's maximum heap (-Xmx; in local mode the executors share it)."""
    return int(spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory())


def _is_runtime_setting(key: str) -> bool:
    """Whether `spark.conf.set` may change `key` on a running session: SQL settings may;
    Spark core settings (spark.driver.memory, ...) are fixed once the JVM runs."""
    return key.startswith("spark.sql.")


def run_to_sink(
    frame: DataFrame, sink: str = "noop", name: str | None = None
) -> tuple[float, StreamingQuery]:
    """Run a streaming DataFrame in append mode to `sink` until every input is processed,
    with a fresh checkpoint; (wall seconds, the stopped query, whose `recentProgress` the
    benchmarks read)."""
    started = time.perf_counter()
    writer = frame.writeStream.format(sink).outputMode("append")
    if name is not None:
        writer = writer.queryName(name)
    query = writer.option("checkpointLocation", f"/tmp/mangonel-bench-{uuid.uuid4().hex}").start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    return time.perf_counter() - started, query


def seconds_and_rows(frame: DataFrame, keep: list[Any] | None = None) -> tuple[float, int]:
    """Run a streaming DataFrame to Spark's no-op sink; (wall seconds, rows written). With
    `keep`, the rows go to a memory sink instead and are appended to it as a pandas frame
    (for tests that compare results; the benchmark itself never keeps them)."""
    name = "bench_" + uuid.uuid4().hex[:8]
    seconds, query = run_to_sink(frame, "noop" if keep is None else "memory", name)
    rows = sum(int(p["sink"].get("numOutputRows", 0) or 0) for p in query.recentProgress)
    if keep is not None:
        keep.append(frame.sparkSession.table(name).toPandas())
        frame.sparkSession.catalog.dropTempView(name)
    return seconds, rows


def driver_seconds_and_rows(
    session: SparkMangonelSession, query: str, keep: list[Any] | None = None, plan: str = "driver"
) -> tuple[float, int]:
    """`session.start(query, plan=plan)` (a driver-side plan) until every input is processed, with a
    fresh checkpoint, into a sink that counts the rows (with `keep`, keeps them);
    (wall seconds, rows out)."""
    tables: list[pa.Table] = []
    counted = [0]

    def sink(table: pa.Table, batch_id: int) -> None:  # noqa: ARG001
        counted[0] += table.num_rows
        if keep is not None:
            tables.append(table)

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mangonel-bench-driver-") as checkpoint:
        query_handle = session.start(query, sink, checkpoint_location=checkpoint, plan=plan)
        try:
            query_handle.processAllAvailable()
        finally:
            query_handle.stop()
        seconds = time.perf_counter() - started
    if keep is not None:
        keep.append(pa.concat_tables(tables).to_pandas() if tables else None)
    return seconds, counted[0]


def write_input(
    folder: Path, shape: SparkShape, tuples: int, rate: int, batch: int, seed: int
) -> None:
    """The generator's stream as Parquet files, one per micro-batch: Spark's file source reads
    them natively, so neither engine's time includes generating (or a Python source)."""
    folder.mkdir(parents=True, exist_ok=True)
    schema = Schema(
        (
            Column("ts", SqlType.TIMESTAMP),
            Column("key", SqlType.BIGINT),
            Column("value", SqlType.DOUBLE),
        )
    )
    config = GeneratorConfig(tuples=tuples, rate=rate, keys=shape.keys, batch_size=batch, seed=seed)
    for number, generated in enumerate(generate(schema, "ts", config)):
        pq.write_table(pa.Table.from_batches([generated]), folder / f"part-{number:05d}.parquet")


def declared_stream(
    spark: SparkSession, folder: Path, backend: str = "cpu", **options: Any
) -> SparkMangonelSession:
    """A session with the bench's stream `events` declared over the Parquet files in
    `folder` (one file a micro-batch, watermark delay 0): what the reader-fed and declared
    plans read; `options` go to the session (a plan the planner would not choose)."""
    declared = SparkMangonelSession(spark, backend=backend, **options)
    declared.execute(
        f"CREATE STREAM events ({STREAM_DDL}) WITH (event_time = 'ts', watermark = "
        f"'0 milliseconds', source = 'parquet', path = '{folder}', files_per_trigger = '1')"
    )
    return declared


def settle(spark: SparkSession) -> None:
    """Run Python's and the JVM's garbage collectors: before a timed run, so a plan does not
    pay for the garbage another run left in the shared JVM (the benchmarks' protocol)."""
    gc.collect()
    spark.sparkContext._jvm.java.lang.System.gc()


def parquet_stream(spark: SparkSession, folder: Path) -> DataFrame:
    """Spark's own file source over the bench's Parquet files, one file a micro-batch."""
    return spark.readStream.schema(STREAM_DDL).option("maxFilesPerTrigger", 1).parquet(str(folder))


def mangonel_query(shape: SparkShape) -> str:
    """The bench's window query of `shape` over the declared stream `events`."""
    return (
        f"SELECT key, window_start, window_end, {shape.aggregate}(value) AS result "
        f"FROM events [RANGE {shape.range_us} MICROSECONDS SLIDE {shape.slide_us} "
        "MICROSECONDS] GROUP BY key"
    )


def native_query(source: DataFrame, shape: SparkShape) -> DataFrame:
    """Spark's own streaming window aggregation of `shape` over `source` (the peer): the
    same aggregate function of the value column, by its SQL name (SUM, AVG, MIN, MEDIAN,
    STDDEV_SAMP, ...)."""
    window = F.window("ts", f"{shape.range_us} microseconds", f"{shape.slide_us} microseconds")
    return (
        source.withWatermark("ts", "0 milliseconds")
        .groupBy(window, "key")
        .agg(F.expr(f"{shape.aggregate}(value)").alias("result"))
        .select("key", "window.start", "window.end", "result")
    )


def _plan_name(session: SparkMangonelSession) -> str:
    planned = session.last_plan
    if planned is None or planned.native:
        return "native"
    if planned.stage1 == "reader":
        return f"reader+{planned.stage2}"  # the reader path and its stage 2
    return "two-stage"


def alternative_plan(plan: str) -> dict[str, str] | None:
    """The session options of the plan to measure beside the planner's choice `plan`: the
    reader path for two stages after Spark's source, the other stage 2 of a reader path, or
    Spark's own stage 2 over the reader's partials for a query the planner ran natively."""
    return {
        "two-stage": {"stage1": "reader"},
        "reader+native": {"stage2": "python"},
        "reader+python": {"stage2": "native"},
        "native": {"stage2": "native"},
    }.get(plan)


def measure_shape(
    spark: SparkSession,
    shape: SparkShape,
    tuples: int,
    rate: int,
    batch: int,
    seed: int,
    backend: str = "auto",
    keep: list[Any] | None = None,
    state_store: str = "hdfs",
    compare: bool = False,
    standalone: StandaloneRunner | None = None,
) -> SparkResult:
    """One shape through mangonel's reader path, Spark's native aggregation and mangonel
    over a registered DataFrame (module docstring). With `keep`, the three result tables are
    appended to it in that order instead of going to a no-op sink, then the driver-side
    plan's, the reader-fed plan's (where it runs the query) and the standalone engine's.
    `compare`: also the declared stream with a plan the planner did not
    choose (`alternative_plan`). `standalone`: also mangonel's own engine outside Spark on
    the same files through this runner (`run_standalone`)."""
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", STATE_STORES[state_store])
    with tempfile.TemporaryDirectory(prefix="mangonel-bench-") as folder:
        write_input(Path(folder), shape, tuples, rate, batch, seed)
        declared = declared_stream(spark, Path(folder), backend)
        ours_seconds, ours_rows = seconds_and_rows(declared.sql(mangonel_query(shape)), keep)
        plan = _plan_name(declared)
        alternative, alternative_rate = "", None
        options = alternative_plan(plan) if compare else None
        if options is not None:
            other = declared_stream(spark, Path(folder), backend, **options)
            try:
                seconds, _ = seconds_and_rows(other.sql(mangonel_query(shape)))
                alternative, alternative_rate = _plan_name(other), tuples / seconds
            except PlanError:  # Spark's own stage 2 cannot merge this aggregate
                pass
        source = parquet_stream(spark, Path(folder))
        native_seconds, native_rows = seconds_and_rows(native_query(source, shape), keep)
        registered = SparkMangonelSession(spark, backend=backend)
        registered.register("events", source, event_time="ts", watermark=0)
        frame_seconds, _ = seconds_and_rows(registered.sql(mangonel_query(shape)), keep)
        driver_seconds, driver_rows = driver_seconds_and_rows(
            registered, mangonel_query(shape), keep
        )
        reader_seconds, reader_rows = (
            driver_seconds_and_rows(declared, mangonel_query(shape), keep, plan="reader")
            if declared.last_plan is not None and reader_batch.refused(declared.last_plan) is None
            else (None, None)
        )
        alone_seconds, alone_rows = (
            run_standalone(Path(folder), shape, standalone, backend, keep)
            if standalone is not None
            else (None, None)
        )
    ours_rate = tuples / ours_seconds
    native_rate = tuples / native_seconds
    return SparkResult(
        shape.name,
        tuples,
        -(-tuples // batch),
        ours_seconds,
        ours_rate,
        native_seconds,
        native_rate,
        ours_rate / native_rate,
        ours_rows,
        native_rows,
        plan,
        _plan_name(registered),
        tuples / frame_seconds,
        state_store,
        alternative,
        alternative_rate,
        standalone_seconds=alone_seconds,
        standalone_rows=alone_rows,
        driver_seconds=driver_seconds,
        driver_rows=driver_rows,
        reader_seconds=reader_seconds,
        reader_rows=reader_rows,
    )


# mangonel's own engine outside Spark, given by the entry point (runtime.spark cannot import
# the standalone runtime): (query text, backend, batches) -> (seconds, result table)
StandaloneRunner = Callable[[str, str, list[pa.RecordBatch]], tuple[float, pa.Table]]


def run_standalone(
    folder: Path,
    shape: SparkShape,
    runner: StandaloneRunner,
    backend: str = "auto",
    keep: list[Any] | None = None,
) -> tuple[float, int]:
    """`runner` over the bench's Parquet files, one Arrow batch per file as Spark's
    micro-batches; the files are read before its clock starts. (seconds, rows out); with
    `keep`, the result table is appended to it as a pandas frame."""
    batches = [
        batch
        for path in sorted(folder.glob("part-*.parquet"))
        for batch in pq.read_table(path).combine_chunks().to_batches()
    ]
    seconds, table = runner(mangonel_query(shape), backend, batches)
    if keep is not None:
        keep.append(table.to_pandas())
    return seconds, table.num_rows


def run_spark_benchmarks(
    arguments: argparse.Namespace | None = None,
    *,
    shapes: tuple[SparkShape, ...] | None = None,
    spark: SparkSession | None = None,
    standalone: StandaloneRunner | None = None,
) -> list[dict[str, Any]]:
    """Every shape end to end in local Spark, mangonel vs Spark's native streaming window
    aggregation on the same micro-batches; prints one row per shape with the ratio (and
    with `standalone`, mangonel's own engine outside Spark on the same files beside it)."""
    tuples = getattr(arguments, "tuples", None) or 2_000_000
    # Event time advances 1 s per million tuples, so w = 1 s windows fire throughout the run
    # (the standalone benchmark's --rate is far higher; `spark_rate` overrides this one).
    rate = getattr(arguments, "spark_rate", None) or 1_000_000
    batch = getattr(arguments, "batch_size", None) or 1_000_000
    seed = getattr(arguments, "seed", None) or 1
    backend = getattr(arguments, "backend", None) or "auto"
    state_store = getattr(arguments, "spark_state", None) or "hdfs"
    settings = dict(getattr(arguments, "spark_conf", None) or [])  # (key, value) pairs
    # both engines run under the settings (the ratio stays fair); given to the builder, they
    # reach the JVM if this call starts it (spark.driver.memory: the heap of local mode)
    if spark is None:
        spark = start_local_spark(extra=settings)
    else:
        for key, value in settings.items():
            if _is_runtime_setting(key):
                spark.conf.set(key, value)
            elif spark.conf.get(key, None) != value:
                raise ValueError(
                    f"--spark-conf {key}={value}: fixed once Spark runs; this session has "
                    f"{spark.conf.get(key, None)!r}"
                )
    holistic = getattr(arguments, "holistic", False)
    chosen = shapes or (HOLISTIC_SHAPES if holistic else DEFAULT_SHAPES)
    print("warming up (Python workers, JIT, each shape's plans) ...", flush=True)
    # every shape's own plans once, small: Spark compiles each plan's generated code on its
    # first run (and caches it by its text), which cost the first engine of a shape up to
    # 3x on tumbling windows when only one two-stage shape was warmed (docs/performance/spark.md)
    for shape in chosen:
        measure_shape(
            spark,
            SparkShape(shape.range_us, shape.slide_us, keys=10, aggregate=shape.aggregate),
            20_000,
            rate,
            10_000,
            seed,
            backend,
            state_store=state_store,
            standalone=standalone,
        )
    print(
        f"driver heap: {driver_heap_bytes(spark) / 2**30:.2f} GiB; state store: {state_store}"
        + "".join(f"; {key}={value}" for key, value in settings.items())
        + "\n"
        f"{'shape':32s} {'tuples':>10s} {'mangonel':>14s} {'Spark native':>14s} {'ratio':>8s} "
        f"{'rows out':>10s}  plan; registered DataFrame: plan, rate"
    )
    results = []
    for shape in chosen:
        result = measure_shape(
            spark,
            shape,
            tuples,
            rate,
            batch,
            seed,
            backend,
            state_store=state_store,
            compare=True,
            standalone=standalone,
        )
        result.spark_conf = "; ".join(f"{key}={value}" for key, value in settings.items())
        agree = "" if result.rows_out == result.spark_rows_out else "  (row counts differ!)"
        frame_rate = (result.dataframe_tuples_per_second or 0) / 1e6
        print(
            f"{result.shape:32s} {tuples:>10,} {result.mangonel_tuples_per_second / 1e6:>10.3f} M/s"
            f" {result.spark_tuples_per_second / 1e6:>10.3f} M/s {result.ratio:>7.1f}x "
            f"{result.rows_out:>10,}  {result.plan}; DataFrame: {result.dataframe_plan}, "
            f"{frame_rate:.3f} M/s ({frame_rate * 1e6 / result.spark_tuples_per_second:.1f}x)"
            + f"  [{result.mangonel_seconds:.1f} s vs {result.spark_seconds:.1f} s]"
            + _alternative_text(result)
            + _start_text("driver-side (start)", result.driver_seconds, result.driver_rows, result)
            + _start_text(
                "reader-fed (start()'s plan over a declared stream)",
                result.reader_seconds,
                result.reader_rows,
                result,
            )
            + _standalone_text(result)
            + agree,
            flush=True,
        )
        results.append(asdict(result))
    return results


def _alternative_text(result: SparkResult) -> str:
    if result.alternative_tuples_per_second is None:
        return ""
    rate = result.alternative_tuples_per_second
    return (
        f"; not chosen: {result.alternative} {rate / 1e6:.3f} M/s "
        f"({rate / result.spark_tuples_per_second:.1f}x)"
    )


def _start_text(label: str, seconds: float | None, rows: int | None, result: SparkResult) -> str:
    """A `start()` plan's column: its rate, ratio to Spark native, time, and rows' check."""
    if seconds is None:
        return ""
    agree = "" if rows == result.spark_rows_out else " (rows differ!)"
    rate = result.tuples / seconds
    ratio = rate / result.spark_tuples_per_second
    return f"; {label}: {rate / 1e6:.3f} M/s ({ratio:.1f}x) [{seconds:.1f} s]{agree}"


def _standalone_text(result: SparkResult) -> str:
    if result.standalone_seconds is None:
        return ""
    agree = "" if result.standalone_rows == result.spark_rows_out else " (rows differ!)"
    return (
        f"; standalone engine {result.standalone_seconds:.3f} s "
        f"({result.spark_seconds / result.standalone_seconds:.1f}x Spark), "
        f"{result.standalone_rows:,} rows{agree}"
    )


def native_window_aggregate(
    spark: SparkSession,
    table: pa.Table,
    w: int | str,
    s: int | str,
    key: str,
    agg: str,
) -> tuple[float, int]:
    """Spark's native BATCH `GROUP BY window(ts, w, s), key` over an Arrow table (event time:
    its first timestamp column; `agg` SUM | AVG | MIN | MAX | COUNT of the first other
    numeric column, or a SQL aggregate expression such as "SUM(price)"). w and s are
    microseconds or Spark interval strings. The table is loaded and cached first, so the
    seconds returned are the aggregation's only. Returns (seconds, result rows)."""
    event_time = next(f.name for f in table.schema if pa.types.is_timestamp(f.type))
    frame = spark.createDataFrame(table).cache()
    frame.count()
    size = f"{w} microseconds" if isinstance(w, int) else w
    slide = f"{s} microseconds" if isinstance(s, int) else s
    if "(" in agg:
        expression = F.expr(agg)
    else:
        value = next(
            f.name
            for f in table.schema
            if f.name not in (event_time, key)
            and (pa.types.is_integer(f.type) or pa.types.is_floating(f.type))
        )
        expression = F.expr(f"{agg.upper()}({value})")
    result = frame.groupBy(F.window(event_time, size, slide), key).agg(expression.alias("result"))
    started = time.perf_counter()
    # the no-op sink computes every column (count() could prune the aggregate away)
    result.write.format("noop").mode("overwrite").save()
    seconds = time.perf_counter() - started
    rows = result.count()
    frame.unpersist()
    return seconds, rows
