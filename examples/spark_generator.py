"""`make run`: the README's query as a streaming query on local Spark.

Starts local Spark, declares the `trades` stream on mangonel's built-in generator source (no
files needed), plans the query of examples/trades.sql, runs it for a bounded time while
printing Spark's progress, then prints mangonel's EXPLAIN (with the part Spark runs) and a
table of results.

    python examples/spark_generator.py [--seconds 25] [--keys 20] [--rate 200000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def readme_query() -> str:
    """The query of examples/trades.sql (its CREATE STREAM is replaced by the generator's)."""
    from mangonel.compiler.script import split_statements

    statements = split_statements((HERE / "trades.sql").read_text())
    return next(s.text.strip() for s in statements if "SELECT" in s.text.upper())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=25.0, help="how long the query runs")
    parser.add_argument("--keys", type=int, default=20, help="distinct symbols")
    parser.add_argument(
        "--rate",
        type=int,
        default=200_000,
        help="tuples per micro-batch (one second of event time each)",
    )
    parser.add_argument("--backend", default="auto", choices=("auto", "cpu", "gpu"))
    args = parser.parse_args(argv)

    from mangonel.runtime.spark.java import check_java

    problem = check_java()
    if problem:
        print(problem, file=sys.stderr)
        return 1

    import mangonel
    from mangonel.runtime.spark.session import local_spark

    # pyspark's own applyInPandasWithState worker pads batches with empty frames and pandas
    # warns about that on every micro-batch; the Python workers inherit this environment.
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning:pyspark.worker")
    print("starting local Spark ...", flush=True)
    spark = local_spark("mangonel-example", shuffle_partitions=2)
    session = mangonel.attach(spark, backend=args.backend)
    session.execute(
        "CREATE STREAM trades (ts TIMESTAMP, symbol STRING, price DOUBLE, volume BIGINT) "
        "WITH (event_time = 'ts', watermark = '500 milliseconds', source = 'generator', "
        f"rate = '{args.rate}', rows_per_batch = '{args.rate}', keys = '{args.keys}', "
        f"tuples = '{args.rate * 1000}', delay = '200 milliseconds', seed = '1')"
    )
    query_text = readme_query()
    print("\n" + query_text + "\n")
    results = session.sql(query_text)

    query = (
        results.writeStream.format("memory")
        .queryName("trades_windows")
        .outputMode("append")
        .trigger(processingTime="1 second")
        .start()
    )
    started = time.monotonic()
    seen_batch = -1
    try:
        while time.monotonic() - started < args.seconds and query.isActive:
            time.sleep(1.0)
            progress = query.lastProgress
            if not progress or progress["batchId"] == seen_batch:
                continue
            seen_batch = progress["batchId"]
            watermark = progress.get("eventTime", {}).get("watermark", "-")
            rows_out = spark.table("trades_windows").count()
            print(
                f"[{time.monotonic() - started:5.1f}s] batch {progress['batchId']:3d}: "
                f"{progress['numInputRows']:>8,} tuples in, "
                f"{progress.get('processedRowsPerSecond', 0.0):>11,.0f} tuples/s, "
                f"watermark {watermark}, {rows_out:,} window rows so far",
                flush=True,
            )
    finally:
        # stopping interrupts the running micro-batch; Spark logs that as an error: hush it
        spark.sparkContext.setLogLevel("OFF")
        query.stop()
    if query.exception() is not None:
        print(query.exception(), file=sys.stderr)
        return 1

    print("\nEXPLAIN\n" + session.explain() + "\n")
    table = spark.table("trades_windows")
    print(f"{table.count():,} (window, symbol) rows; the latest windows:")
    table.orderBy(table.window_start.desc(), "symbol").show(20, truncate=False)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
