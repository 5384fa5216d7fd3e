"""Run a mangonel query and Spark's native `GROUP BY window(ts, w, s), keys` on the same
micro-batches (one file per trigger) and compare: the Spark tests' one harness."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from mangonel.catalog.catalog import Column, Schema
from mangonel.catalog.sources.generator import GeneratorConfig, generate
from mangonel.catalog.types import SqlType

# The stream most Spark tests read: a string key and a double value.
SCHEMA = Schema(
    (Column("ts", SqlType.TIMESTAMP), Column("k", SqlType.STRING), Column("v", SqlType.DOUBLE))
)
DDL = "ts TIMESTAMP, k STRING, v DOUBLE"

NATIVE_AGGREGATES = {
    "COUNT(*)": lambda column: F.count(F.lit(1)),
    "COUNT": F.count,
    "SUM": F.sum,
    "MIN": F.min,
    "MAX": F.max,
    "AVG": F.avg,
    "VAR_POP": F.var_pop,
    "VAR_SAMP": F.var_samp,
    "STDDEV_POP": F.stddev_pop,
    "STDDEV_SAMP": F.stddev_samp,
}


# every incremental aggregate of one argument `v`, with its output name (`mangonel_select`)
ALL_AGGREGATES = [
    ("COUNT(*)", None, "n"),
    ("COUNT", "v", "n_v"),
    ("SUM", "v", "sum_v"),
    ("MIN", "v", "min_v"),
    ("MAX", "v", "max_v"),
    ("AVG", "v", "avg_v"),
    ("VAR_POP", "v", "var_pop_v"),
    ("VAR_SAMP", "v", "var_samp_v"),
    ("STDDEV_POP", "v", "sd_pop_v"),
    ("STDDEV_SAMP", "v", "sd_samp_v"),
]


def write_micro_batches(folder: Path, batches: Sequence[pa.Table | pa.RecordBatch]) -> None:
    """One Parquet file per micro-batch, named so Spark's file source reads them in order."""
    folder.mkdir(parents=True, exist_ok=True)
    written = list(folder.glob("*.parquet"))
    existing = len(written)
    previous = max((path.stat().st_mtime for path in written), default=time.time() - 3600)
    for offset, batch in enumerate(batches):
        table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        path = folder / f"part-{existing + offset:05d}.parquet"
        pq.write_table(table, path)
        # Spark's file source orders files by modification time, not by name: files written
        # in the same clock tick were read in either order, and a batch read after a later
        # one is late (seen once in CI). One second apart, in name order.
        stamp = previous + 1 + offset
        os.utime(path, (stamp, stamp))


def generated_tables(
    schema: Schema,
    *,
    files: int,
    rows: int,
    keys: int,
    delay_us: int,
    seed: int,
    null_fraction: float,
) -> list[pa.Table]:
    """`files` micro-batches of `rows` rows each from the generator source at 8,000 rows per
    second (2,000 rows: 250 ms of event time), out of order by up to `delay_us`."""
    config = GeneratorConfig(
        tuples=files * rows,
        rate=8000,
        keys=keys,
        delay_us=delay_us,
        batch_size=rows,
        seed=seed,
        null_fraction=null_fraction,
    )
    return [pa.Table.from_batches([batch]) for batch in generate(schema, "ts", config)]


def file_stream(spark: SparkSession, folder: Path, schema_ddl: str) -> DataFrame:
    return spark.readStream.schema(schema_ddl).option("maxFilesPerTrigger", 1).parquet(str(folder))


def run_to_memory(df: DataFrame, checkpoint: Path) -> pd.DataFrame:
    """Every micro-batch the source has, then the no-data batches Spark runs after them."""
    name = "q" + uuid.uuid4().hex[:12]
    query = (
        df.writeStream.format("memory")
        .queryName(name)
        .outputMode("append")
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    result = df.sparkSession.table(name).toPandas()
    df.sparkSession.catalog.dropTempView(name)
    return result


def run_to_parquet(df: DataFrame, checkpoint: Path, output: Path) -> None:
    """Every micro-batch the source has, appended as Parquet files under `output`."""
    query = (
        df.writeStream.format("parquet")
        .option("checkpointLocation", str(checkpoint))
        .outputMode("append")
        .start(str(output))
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()


def outputs_with_and_without_a_restart(
    spark: SparkSession,
    root: Path,
    streams: Mapping[str, Sequence[pa.Table]],
    cut: int,
    query: Callable[[Mapping[str, Path], bool], DataFrame],
) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """One query over the same micro-batches twice: uninterrupted, and stopped after the
    first `cut` micro-batches of every stream then restarted from its checkpoint for the
    rest. `query(folders, restarted)` builds the query over the stream folders (name ->
    folder). Returns (uninterrupted output, restarted output, rows the first run wrote)."""
    whole = {name: root / f"all_{name}" for name in streams}
    part = {name: root / f"part_{name}" for name in streams}
    for name, tables in streams.items():
        write_micro_batches(whole[name], tables)
    run_to_parquet(query(whole, False), root / "ck_all", root / "out_all")
    for name, tables in streams.items():
        write_micro_batches(part[name], tables[:cut])
    run_to_parquet(query(part, True), root / "ck_part", root / "out_part")
    first_run = spark.read.parquet(str(root / "out_part")).count()
    for name, tables in streams.items():
        write_micro_batches(part[name], tables[cut:])
    run_to_parquet(query(part, True), root / "ck_part", root / "out_part")
    uninterrupted = spark.read.parquet(str(root / "out_all")).toPandas()
    return uninterrupted, spark.read.parquet(str(root / "out_part")).toPandas(), first_run


def assert_restart_lost_and_duplicated_nothing(
    uninterrupted: pd.DataFrame, restarted: pd.DataFrame, first_run: int, keys: Sequence[str]
) -> None:
    assert 0 < first_run < len(restarted), "the first run must have emitted part of the result"
    assert not restarted.duplicated([*keys, "window_start"]).any()  # no window emitted twice
    assert_same_results(restarted, uninterrupted, keys)  # and none lost


def native_window_query(
    source: DataFrame,
    *,
    event_time: str,
    delay: str,
    size: str,
    slide: str,
    keys: Sequence[str],
    aggregates: Sequence[tuple[str, str | None, str]],
    where: str | None = None,
) -> DataFrame:
    """Spark's own windowed aggregation: aggregates are (function, column, alias)."""
    watermarked = source.withWatermark(event_time, delay)
    if where:
        watermarked = watermarked.where(where)
    window = F.window(event_time, size, slide)
    calls = [
        NATIVE_AGGREGATES[function](column).alias(alias) for function, column, alias in aggregates
    ]
    grouped = watermarked.groupBy(window, *keys).agg(*calls)
    return grouped.select(
        *keys,
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        *[alias for _, _, alias in aggregates],
    )


def assert_equals_native(
    ours: DataFrame, root: Path, source: DataFrame, *, keys: Sequence[str], **window: Any
) -> pd.DataFrame:
    """Our query's rows equal Spark's own windowed aggregation of `source` on the same
    micro-batches (`window`: native_window_query's other arguments); returns our rows."""
    native = native_window_query(source, keys=keys, **window)
    rows = run_to_memory(ours, root / "ours")
    assert_same_results(rows, run_to_memory(native, root / "native"), keys)
    return rows


def mangonel_select(aggregates: Sequence[tuple[str, str | None, str]]) -> str:
    calls = []
    for function, column, alias in aggregates:
        call = "COUNT(*)" if function == "COUNT(*)" else f"{function}({column})"
        calls.append(f"{call} AS {alias}")
    return ", ".join(calls)


def canonical(frame: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Rows in (window, keys) order, NULL keys last; timestamps compared as instants."""
    order = ["window_start", *keys]
    frame = frame.copy()
    for column in ("window_start", "window_end"):
        frame[column] = pd.to_datetime(frame[column], utc=True)
    return frame.sort_values(order, na_position="last", kind="stable").reset_index(drop=True)


def assert_same_results(ours: pd.DataFrame, native: pd.DataFrame, keys: Sequence[str]) -> None:
    assert len(native) > 0, "the case produced no windows: it tests nothing"
    left, right = canonical(ours, keys), canonical(native, keys)
    assert list(left.columns) == list(right.columns)
    pd.testing.assert_frame_equal(left, right, check_dtype=False, rtol=1e-9, atol=1e-9)
