"""Where a micro-batch's time goes inside Spark, per Spark setting (issue 13, item 6).

    PYTHONPATH=$PWD python benchmarks/spark_batch_costs.py [--slide-us 10000] \
        [--setting KEY=VALUE[,KEY=VALUE...] ...] [--repeat 2]

The bench's input (`mangonel bench --spark`'s Parquet files: 1000 keys, SUM(value), one file
of --batch-size rows per micro-batch, event time 1 M tuples/s, watermark delay 0) runs
through the planner's plan for a declared Parquet stream, once per setting group (the empty
group is Spark's defaults), alternating groups in one Spark session. Per run: wall seconds to
`processAllAvailable`, and Spark's progress `durationMs` summed over micro-batches by phase
(`addBatch`: the micro-batch's jobs; `walCommit` and `commitOffsets`: the offset and commit
log writes; `queryPlanning`, `latestOffset`, `getBatch`; the rest of `triggerExecution`), and the
stateful operator's `allUpdatesTimeMs` and `commitTimeMs` (summed over its tasks: part of
`addBatch`, and more than its wall time where tasks run in parallel).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from mangonel.runtime.spark.bench import (
    STREAM_DDL,
    SparkShape,
    run_to_sink,
    start_local_spark,
    write_input,
)
from mangonel.runtime.spark.session import SparkMangonelSession

PHASES = ("addBatch", "walCommit", "commitOffsets", "queryPlanning", "latestOffset", "getBatch")


def run(spark, folder: Path, shape: SparkShape, settings: dict[str, str]) -> str:  # noqa: ANN001
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        session = SparkMangonelSession(spark)
        session.execute(
            f"CREATE STREAM events ({STREAM_DDL}) WITH (event_time = 'ts', watermark = "
            f"'0 milliseconds', source = 'parquet', path = '{folder}', files_per_trigger = '1')"
        )
        frame = session.sql(
            f"SELECT key, window_start, window_end, SUM(value) AS result FROM events "
            f"[RANGE {shape.range_us} MICROSECONDS SLIDE {shape.slide_us} MICROSECONDS] "
            "GROUP BY key"
        )
        load = os.getloadavg()[0]
        seconds, query = run_to_sink(frame)
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
    totals = dict.fromkeys((*PHASES, "other", "state updates", "state commit"), 0.0)
    rows = 0
    for progress in query.recentProgress:
        durations = progress.get("durationMs", {})
        phases = sum(durations.get(phase, 0) for phase in PHASES)
        for phase in PHASES:
            totals[phase] += durations.get(phase, 0) / 1000
        totals["other"] += (durations.get("triggerExecution", 0) - phases) / 1000
        rows += int(progress["sink"].get("numOutputRows", 0) or 0)
        for operator in progress.get("stateOperators", []):
            totals["state updates"] += operator.get("allUpdatesTimeMs", 0) / 1000
            totals["state commit"] += operator.get("commitTimeMs", 0) / 1000
    phases_text = " ".join(f"{phase} {value:.2f}" for phase, value in totals.items())
    return (
        f"{seconds:.2f} s, {len(query.recentProgress)} micro-batches, {rows} rows, "
        f"load {load:.1f} | {phases_text}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--slide-us", type=int, nargs="+", default=[10_000])
    parser.add_argument("--tuples", type=int, default=4_000_000)
    parser.add_argument("--batch-size", type=int, default=2_000_000)
    parser.add_argument("--setting", action="append", default=[], help="KEY=VALUE[,KEY=VALUE]")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--shuffle-partitions", type=int, default=2)
    args = parser.parse_args()
    groups = [{}] + [
        dict(pair.split("=", 1) for pair in group.split(",")) for group in args.setting
    ]
    spark = start_local_spark(shuffle_partitions=args.shuffle_partitions)
    with tempfile.TemporaryDirectory() as scratch:
        warm = Path(scratch) / "warm"
        write_input(warm, SparkShape(1_000_000, 100_000, keys=10), 20_000, 1_000_000, 10_000, 1)
        run(spark, warm, SparkShape(1_000_000, 100_000, keys=10), {})
        for slide in args.slide_us:
            shape = SparkShape(1_000_000, slide)
            folder = Path(scratch) / f"s{slide}"
            write_input(folder, shape, args.tuples, 1_000_000, args.batch_size, 1)
            for _ in range(args.repeat):
                for group in groups:
                    label = ",".join(f"{k}={v}" for k, v in group.items()) or "defaults"
                    print(f"{shape.name} [{label}]: {run(spark, folder, shape, group)}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
