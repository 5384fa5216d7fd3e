"""The reader-fed plan's start and per-micro-batch cost at w/s = 100, and what a run of Spark's
own aggregation just before it in the same JVM does to it (docs/performance/spark-driver.md, "Inside
Spark: the reader-fed plan's start and slope at w/s = 100").

`PYTHONPATH=$PWD python benchmarks/spark_reader_start.py slope`: the reader-fed plan alone
(`start(plan="reader")`, w = 1 s, s = 10 ms, the bench's stream) over 2, 6 and 10 micro-batches
of 2 M rows, three runs each: the slope is its cost a micro-batch, the rest its start.
`... after-spark [tuples]`: three reader-fed runs, one run of Spark's own window aggregation on
the same files, three reader-fed runs, and two more after 20 s (default 4 M tuples). Both
garbage collectors run before every run (as in `spark_steady_state.py`).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from pyspark.sql import SparkSession

from mangonel.runtime.spark import bench
from mangonel.runtime.spark.session import SparkMangonelSession

SHAPE = bench.SparkShape(1_000_000, 10_000)
BATCH = 2_000_000


def reader_seconds(spark: SparkSession, declared: SparkMangonelSession) -> float:
    bench.settle(spark)
    query = bench.mangonel_query(SHAPE)
    return bench.driver_seconds_and_rows(declared, query, plan="reader")[0]


def runs(spark: SparkSession, declared: SparkMangonelSession, count: int) -> str:
    return ", ".join(f"{reader_seconds(spark, declared):.2f}" for _ in range(count))


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "slope"
    spark = bench.start_local_spark()
    if mode == "slope":
        lengths = [4_000_000, 12_000_000, 20_000_000]
    else:
        lengths = [int(sys.argv[2]) if len(sys.argv) > 2 else 4_000_000]
    for tuples in lengths:
        with tempfile.TemporaryDirectory(prefix="mangonel-reader-start-") as folder:
            bench.write_input(Path(folder), SHAPE, tuples, 1_000_000, BATCH, 7)
            declared = bench.declared_stream(spark, Path(folder))
            label = f"{tuples:,} tuples ({tuples // BATCH} micro-batches)"
            if mode == "slope":
                print(f"{label}, reader-fed: {runs(spark, declared, 3)} s", flush=True)
                continue
            print(f"{label}, reader-fed before: {runs(spark, declared, 3)} s", flush=True)
            bench.settle(spark)
            native = bench.native_query(bench.parquet_stream(spark, Path(folder)), SHAPE)
            print(f"Spark's own: {bench.seconds_and_rows(native)[0]:.2f} s", flush=True)
            print(f"reader-fed after it: {runs(spark, declared, 3)} s", flush=True)
            time.sleep(20)
            print(f"reader-fed 20 s later: {runs(spark, declared, 2)} s", flush=True)


if __name__ == "__main__":
    main()
