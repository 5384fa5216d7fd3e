"""`make run`: the query of examples/trades.sql as a streaming query on local Spark.

Starts local Spark, declares the `trades` stream on mangonel's built-in generator source (no
files needed), plans the query of examples/trades.sql, and runs it until window results have
arrived and at least --seconds have passed (the first micro-batch starts Spark's Python
workers and can take tens of seconds on a loaded machine; progress is printed while waiting,
and --timeout ends the wait with a message saying so). Then prints mangonel's EXPLAIN (with
the part Spark runs) and a table of results.

    python examples/spark_generator.py [--seconds 25] [--timeout 300] [--keys 20] [--rate 200000]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def example_query() -> str:
    """The query of examples/trades.sql (its CREATE STREAM is replaced by the generator's)."""
    from mangonel.compiler.script import split_statements

    statements = split_statements((HERE / "trades.sql").read_text())
    return next(s.text.strip() for s in statements if "SELECT" in s.text.upper())


def wait_for_results(
    query: Any,
    count_rows: Callable[[], int],
    seconds: float,
    timeout: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    report_every: float = 5.0,
) -> int:
    """Poll a running streaming query, printing a line per finished micro-batch and, while
    one runs, a waiting line every `report_every` seconds. Returns the window rows written
    once some have arrived and `seconds` have passed, or when `timeout` passes (the caller
    says so when that returns 0) or the query stops."""
    started = clock()
    last_line = started
    seen_batch = -1
    rows_out = 0
    while query.isActive:
        sleep(1.0)
        now = clock()
        elapsed = now - started
        progress = query.lastProgress
        if progress and progress["batchId"] != seen_batch:
            seen_batch = progress["batchId"]
            rows_out = count_rows()
            watermark = progress.get("eventTime", {}).get("watermark", "-")
            print(
                f"[{elapsed:5.1f}s] batch {seen_batch:3d}: "
                f"{progress['numInputRows']:>8,} tuples in, "
                f"{progress.get('processedRowsPerSecond', 0.0):>11,.0f} tuples/s, "
                f"watermark {watermark}, {rows_out:,} window rows so far",
                flush=True,
            )
            last_line = now
        elif now - last_line >= report_every:
            first = " (the first starts Spark's Python workers)" if seen_batch < 0 else ""
            print(
                f"[{elapsed:5.1f}s] waiting for micro-batch {seen_batch + 1}{first}: "
                f"{query.status.get('message', '')}",
                flush=True,
            )
            last_line = now
        if (rows_out > 0 and elapsed >= seconds) or elapsed >= timeout:
            break
    return rows_out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds",
        type=float,
        default=25.0,
        help="run at least this long, and on until the first window results arrive",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="give up waiting for window results after this many seconds",
    )
    parser.add_argument("--keys", type=int, default=20, help="distinct symbols")
    parser.add_argument(
        "--rate",
        type=int,
        default=200_000,
        help="tuples per micro-batch (one second of event time each)",
    )
    parser.add_argument("--backend", default="auto", choices=("auto", "cpu", "gpu"))
    args = parser.parse_args(argv)
    if not 0 < args.seconds <= args.timeout or args.keys <= 0 or args.rate <= 0:
        parser.error("need 0 < --seconds <= --timeout, and positive --keys and --rate")

    from mangonel.runtime.spark.java import check_java

    problem = check_java()
    if problem:
        print(problem, file=sys.stderr)
        return 1

    import mangonel
    from mangonel.runtime.spark.session import local_spark

    print("starting local Spark ...", flush=True)
    spark = local_spark("mangonel-example", shuffle_partitions=2)
    session = mangonel.attach(spark, backend=args.backend)
    session.execute(
        "CREATE STREAM trades (ts TIMESTAMP, symbol STRING, price DOUBLE, volume BIGINT) "
        "WITH (event_time = 'ts', watermark = '500 milliseconds', source = 'generator', "
        f"rate = '{args.rate}', rows_per_batch = '{args.rate}', keys = '{args.keys}', "
        f"tuples = '{args.rate * 1000}', delay = '200 milliseconds', seed = '1')"
    )
    query_text = example_query()
    print("\n" + query_text + "\n")
    results = session.sql(query_text)

    query = (
        results.writeStream.format("memory")
        .queryName("trades_windows")
        .outputMode("append")
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        rows_out = wait_for_results(
            query, lambda: spark.table("trades_windows").count(), args.seconds, args.timeout
        )
    finally:
        # stopping interrupts the running micro-batch; Spark logs that as an error: hush it
        spark.sparkContext.setLogLevel("OFF")
        query.stop()
    if query.exception() is not None:
        print(query.exception(), file=sys.stderr)
        return 1

    if rows_out == 0:
        print(
            f"no window results after {args.timeout:.0f} s: Spark's micro-batches did not finish "
            "in time (a slow or busy machine); rerun with a larger --timeout",
            file=sys.stderr,
        )
        spark.stop()
        return 1
    print("\nEXPLAIN\n" + session.explain() + "\n")
    table = spark.table("trades_windows")
    print(f"{table.count():,} (window, symbol) rows; the latest windows:")
    table.orderBy(table.window_start.desc(), "symbol").show(20, truncate=False)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
