"""The reader-fed plan (`ms.start` over a declared stream) against Spark's own streaming window
aggregation, alternating, at several stream lengths (docs/performance/spark-driver.md, "Inside
Spark: the reader-fed plan in the steady state").

`mangonel bench --spark` times 4 M tuples (2 micro-batches), where a plan's start weighs as
much as its micro-batches (the reader-fed plan's took about 2 s while a Python source paced
it, docs/performance/spark-driver.md); a streaming query runs far longer. Here the same stream (the
bench's: 1000 keys, event time 1 M tuples/s, watermark delay 0, Parquet files of `--batch`
rows, one per micro-batch) runs at each of `--tuples` lengths, each of `--slides` (w = 1 s)
and each of `--aggregates` of the value (default SUM): both plans once to warm up, then
`--rounds` rounds in turn, each start to `processAllAvailable`, Spark's own plan into its
no-op sink, the reader-fed plan into a sink that counts the rows. Before each timed run
both garbage collectors run
(Python's, and the JVM's through `System.gc()`), so a plan does not pay for the garbage the
other left in the shared JVM (`--no-settle`: as it was run before 2026-12-06 16:00 UTC). One
line per round: seconds, rows out (a round whose row counts differ stops the run) and the
ratio. `--placements driver,executors` times the reader-fed plan with its reader in each place
(`spark.mangonel.reader.placement`, docs/spark.md), in turn within each round, each placement
first after Spark's own run in one round of every len(placements) (that first run pays for
following Spark's); by default the session's own choice (the driver, on this local master).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from pyspark.sql import DataFrame

from mangonel.runtime.spark import bench
from mangonel.runtime.spark.reader_batch import PLACEMENT_SETTING
from mangonel.runtime.spark.session import SparkMangonelSession


def _numbers(text: str) -> list[int]:
    return [int(part) for part in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tuples", type=_numbers, default=[4_000_000, 20_000_000, 40_000_000])
    parser.add_argument("--slides", type=_numbers, default=[1_000_000, 100_000], help="us")
    parser.add_argument("--batch", type=int, default=2_000_000, help="rows per micro-batch")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-settle", dest="settle", action="store_false")
    parser.add_argument("--placements", type=lambda text: text.split(","), default=[""])
    parser.add_argument(
        "--aggregates", type=lambda text: text.split(","), default=["SUM"], help="SQL names"
    )
    arguments = parser.parse_args()
    spark = bench.start_local_spark()
    for slide, aggregate in [(s, a) for s in arguments.slides for a in arguments.aggregates]:
        shape = bench.SparkShape(1_000_000, slide, aggregate=aggregate)
        query = bench.mangonel_query(shape)
        for tuples in arguments.tuples:
            with tempfile.TemporaryDirectory(prefix="mangonel-steady-") as folder:
                bench.write_input(Path(folder), shape, tuples, 1_000_000, arguments.batch, 7)
                declared = bench.declared_stream(spark, Path(folder))
                native = bench.native_query(bench.parquet_stream(spark, Path(folder)), shape)
                _run_in_turn(
                    declared,
                    query,
                    native,
                    arguments.rounds,
                    arguments.settle,
                    arguments.placements,
                    f"{shape.name} tuples={tuples:,} micro-batches={-(-tuples // arguments.batch)}",
                )


def _run_in_turn(
    declared: SparkMangonelSession,
    query: str,
    native: DataFrame,
    rounds: int,
    settle: bool,
    placements: list[str],
    label: str,
) -> None:
    """Both plans once to warm up, then `rounds` rounds of each in turn, a line per round and
    reader placement ("": the session's choice)."""

    def settled() -> None:
        if settle:
            bench.settle(native.sparkSession)

    def reader(placement: str) -> tuple[float, int]:
        conf = native.sparkSession.conf
        if placement:
            conf.set(PLACEMENT_SETTING, placement)
        settled()
        try:
            return bench.driver_seconds_and_rows(declared, query, plan="reader")
        finally:
            conf.unset(PLACEMENT_SETTING)

    def spark_own() -> tuple[float, int]:
        settled()
        return bench.seconds_and_rows(native)

    for placement in placements:
        reader(placement)
    spark_own()
    for number in range(rounds):
        # the first reader-fed run after Spark's own pays a few seconds more (docs/performance/
        # spark-driver.md, "the reader-fed plan's start and slope"): each placement in turn
        turn = number % len(placements)
        ours = {placement: reader(placement) for placement in placements[turn:] + placements[:turn]}
        theirs, their_rows = spark_own()
        for placement, (seconds, our_rows) in ours.items():
            if our_rows != their_rows:
                raise SystemExit(f"{label}: {our_rows} rows out against Spark's {their_rows}")
            where = f" (reader on the {placement})" if placement else ""
            print(
                f"{label} round {number}: reader-fed{where} {seconds:.2f} s ({our_rows} rows), "
                f"Spark's own {theirs:.2f} s ({their_rows} rows): {theirs / seconds:.2f}x",
                flush=True,
            )


if __name__ == "__main__":
    main()
