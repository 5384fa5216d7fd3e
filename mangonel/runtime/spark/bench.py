"""Benchmarks inside local Spark (`mangonel bench --spark`) and Spark's native window
aggregation as the peer of the CPU benchmark.

`run_spark_benchmarks`: for each shape, the same generated stream (same seed, one Parquet
file per micro-batch) runs end to end through mangonel's two stages and through Spark's native
`GROUP BY window(ts, w, s), key` streaming aggregation, in the same Spark session, one after
the other; each time covers planning, every micro-batch and the final no-data batch (start to
`processAllAvailable`), after one small warm-up run of each engine (Python workers, JIT).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from mangonel.catalog.catalog import Column, Schema
from mangonel.catalog.sources.generator import GeneratorConfig, generate
from mangonel.catalog.types import SqlType
from mangonel.compiler.explain import format_duration
from mangonel.runtime.spark.session import SparkMangonelSession, local_spark

STREAM_DDL = "ts TIMESTAMP, key BIGINT, value DOUBLE"


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
    plan: str  # "two-stage" or "native" (the planner's cost-based choice, native.py)
    # where the planner chose native: mangonel's two-stage plan of the same query (the
    # measurement behind the choice), else None
    two_stage_tuples_per_second: float | None = None


def start_local_spark(cores: int = 2, shuffle_partitions: int = 2) -> SparkSession:
    """Local Spark configured as the benchmarks and tests use it."""
    return local_spark("mangonel-bench", cores=cores, shuffle_partitions=shuffle_partitions)


def _seconds_and_rows(frame: DataFrame, keep: list[Any] | None = None) -> tuple[float, int]:
    """Run a streaming DataFrame to Spark's no-op sink; (wall seconds, rows written). With
    `keep`, the rows go to a memory sink instead and are appended to it as a pandas frame
    (for tests that compare results; the benchmark itself never keeps them)."""
    name = "bench_" + uuid.uuid4().hex[:8]
    started = time.perf_counter()
    query = (
        frame.writeStream.format("noop" if keep is None else "memory")
        .queryName(name)
        .outputMode("append")
        .option("checkpointLocation", f"/tmp/mangonel-bench-{uuid.uuid4().hex}")
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    seconds = time.perf_counter() - started
    rows = sum(int(p["sink"].get("numOutputRows", 0) or 0) for p in query.recentProgress)
    if keep is not None:
        keep.append(frame.sparkSession.table(name).toPandas())
        frame.sparkSession.catalog.dropTempView(name)
    return seconds, rows


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


def _file_source(spark: SparkSession, folder: Path) -> DataFrame:
    return spark.readStream.schema(STREAM_DDL).option("maxFilesPerTrigger", 1).parquet(str(folder))


def _mangonel_query(shape: SparkShape) -> str:
    return (
        f"SELECT key, window_start, window_end, {shape.aggregate}(value) AS result "
        f"FROM events [RANGE {shape.range_us} MICROSECONDS SLIDE {shape.slide_us} "
        "MICROSECONDS] GROUP BY key"
    )


def _native_query(source: DataFrame, shape: SparkShape) -> DataFrame:
    aggregate = {"SUM": F.sum, "AVG": F.avg, "MEDIAN": F.median}[shape.aggregate.upper()]
    window = F.window("ts", f"{shape.range_us} microseconds", f"{shape.slide_us} microseconds")
    return (
        source.withWatermark("ts", "0 milliseconds")
        .groupBy(window, "key")
        .agg(aggregate("value").alias("result"))
        .select("key", "window.start", "window.end", "result")
    )


def measure_shape(
    spark: SparkSession,
    shape: SparkShape,
    tuples: int,
    rate: int,
    batch: int,
    seed: int,
    backend: str = "auto",
    keep: list[Any] | None = None,
) -> SparkResult:
    """One shape through mangonel and Spark's native aggregation. With `keep`, both result
    tables are appended to it (mangonel's, then Spark's) instead of going to a no-op sink."""
    with tempfile.TemporaryDirectory(prefix="mangonel-bench-") as folder:
        write_input(Path(folder), shape, tuples, rate, batch, seed)
        source = _file_source(spark, Path(folder))
        session = SparkMangonelSession(spark, backend=backend)
        session.register("events", source, event_time="ts", watermark=0)
        ours_seconds, ours_rows = _seconds_and_rows(session.sql(_mangonel_query(shape)), keep)
        planned_native = session.last_plan is not None and session.last_plan.native
        native_seconds, native_rows = _seconds_and_rows(_native_query(source, shape), keep)
        two_stage_rate = None
        if planned_native:
            forced = SparkMangonelSession(spark, backend=backend, native=False)
            forced.register("events", source, event_time="ts", watermark=0)
            two_stage_seconds, _ = _seconds_and_rows(forced.sql(_mangonel_query(shape)))
            two_stage_rate = tuples / two_stage_seconds
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
        "native" if planned_native else "two-stage",
        two_stage_rate,
    )


def run_spark_benchmarks(
    arguments: argparse.Namespace | None = None,
    *,
    shapes: tuple[SparkShape, ...] | None = None,
    spark: SparkSession | None = None,
) -> list[dict[str, Any]]:
    """Every shape end to end in local Spark, mangonel vs Spark's native streaming window
    aggregation on the same micro-batches; prints one row per shape with the ratio."""
    tuples = getattr(arguments, "tuples", None) or 2_000_000
    # Event time advances 1 s per million tuples, so w = 1 s windows fire throughout the run
    # (the standalone benchmark's --rate is far higher; `spark_rate` overrides this one).
    rate = getattr(arguments, "spark_rate", None) or 1_000_000
    batch = getattr(arguments, "batch_size", None) or 1_000_000
    seed = getattr(arguments, "seed", None) or 1
    backend = getattr(arguments, "backend", None) or "auto"
    spark = spark or start_local_spark()
    holistic = getattr(arguments, "holistic", False)
    chosen = shapes or (HOLISTIC_SHAPES if holistic else DEFAULT_SHAPES)
    print("warming up (Python workers, JIT) ...", flush=True)
    warm_up = SparkShape(1_000_000, 100_000, keys=10, aggregate=chosen[0].aggregate)
    measure_shape(spark, warm_up, 20_000, rate, 10_000, seed, backend)
    print(
        f"{'shape':32s} {'tuples':>10s} {'mangonel':>14s} {'Spark native':>14s} {'ratio':>8s} "
        f"{'rows out':>10s}  plan (two-stage rate where native was chosen)"
    )
    results = []
    for shape in chosen:
        result = measure_shape(spark, shape, tuples, rate, batch, seed, backend)
        agree = "" if result.rows_out == result.spark_rows_out else "  (row counts differ!)"
        print(
            f"{result.shape:32s} {tuples:>10,} {result.mangonel_tuples_per_second / 1e6:>10.3f} M/s"
            f" {result.spark_tuples_per_second / 1e6:>10.3f} M/s {result.ratio:>7.1f}x "
            f"{result.rows_out:>10,}  {result.plan}"
            + (
                f" (two-stage {result.two_stage_tuples_per_second / 1e6:.3f} M/s)"
                if result.two_stage_tuples_per_second
                else ""
            )
            + f"  [{result.mangonel_seconds:.1f} s vs {result.spark_seconds:.1f} s]"
            + agree,
            flush=True,
        )
        results.append(asdict(result))
    return results


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
