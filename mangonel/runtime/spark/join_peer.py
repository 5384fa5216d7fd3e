"""Spark's native window join, the peer of `mangonel bench --join`.

Spark's stream-stream window join is `window()` on both sides, an equi-join on the key and
the window struct, then the aggregation. It runs here in batch mode over DataFrames loaded
and cached before the clock (as the aggregation peer, `bench.native_window_aggregate`): the
same physical join Spark runs in each micro-batch, without the state store's cost, so the
peer is measured at its fastest.
"""

from __future__ import annotations

import time

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F


def native_window_join(
    spark: SparkSession,
    left: pa.Table,
    right: pa.Table,
    size_us: int,
    slide_us: int,
    aggregate: bool,
    collect: bool = True,
) -> tuple[float, pa.Table | None]:
    """Seconds of Spark's window join of `left` and `right` (columns ts, key, value) on key
    and window, and (with `collect`) its result as an Arrow table, computed again after the
    clock. Aggregated: `key, window_start, window_end, n = COUNT(*), total = SUM(r.value)`
    per key and window; else the joined rows `key, l_value, r_value, window_start,
    window_end`."""
    frames = []
    for table in (left, right):
        frame = spark.createDataFrame(table).cache()
        frame.count()
        frames.append(frame)
    result = _join(frames[0], frames[1], size_us, slide_us, aggregate)
    started = time.perf_counter()
    # the no-op sink computes every column (count() could prune the join's payload away)
    result.write.format("noop").mode("overwrite").save()
    seconds = time.perf_counter() - started
    rows = None
    if collect:
        rows = pa.Table.from_pandas(result.toPandas(), preserve_index=False)
    for frame in frames:
        frame.unpersist()
    return seconds, rows


def _join(left: DataFrame, right: DataFrame, size_us: int, slide_us: int, aggregate: bool):  # noqa: ANN202
    def windowed(frame: DataFrame, side: str) -> DataFrame:
        window = F.window("ts", f"{size_us} microseconds", f"{slide_us} microseconds")
        return frame.select(
            F.col("key").alias(f"{side}_key"),
            F.col("value").alias(f"{side}_value"),
            window.alias(f"{side}_window"),
        )

    lw, rw = windowed(left, "l"), windowed(right, "r")
    joined = lw.join(rw, (lw.l_key == rw.r_key) & (lw.l_window == rw.r_window))
    if aggregate:
        return (
            joined.groupBy("l_key", "l_window")
            .agg(F.count(F.lit(1)).alias("n"), F.sum("r_value").alias("total"))
            .select(
                F.col("l_key").alias("key"),
                F.col("l_window.start").alias("window_start"),
                F.col("l_window.end").alias("window_end"),
                "n",
                "total",
            )
        )
    return joined.select(
        F.col("l_key").alias("key"),
        "l_value",
        "r_value",
        F.col("l_window.start").alias("window_start"),
        F.col("l_window.end").alias("window_end"),
    )
