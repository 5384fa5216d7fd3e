"""The driver-side plan (`ms.start`) with and without `late_rows=`, alternating, in one local
Spark session (docs/performance/spark-driver.md, "Inside Spark: late rows on the driver-side plan").

Input: the bench's stream (`mangonel bench --spark`: 1000 keys, SUM(value), event time 1 M
tuples/s, watermark delay 0) as Parquet files of `--batch` rows, one per micro-batch, twice:
in order, and with every tuple moved back by up to `--disorder-ms` (so that rows reach back
past W_{N-1} and are late). Variants (`--variants`, comma-separated):

- `plain`: start() in order; `late`: start(late_rows=<dir>) in order (no late rows: the cost
  of carrying the stream's columns);
- `plain-disorder` / `late-disorder`: the same over the disordered files (late rows in every
  micro-batch after the second: the second Spark job per micro-batch and their Parquet files);
- `sql-late-disorder`: `sql(query, late_rows=<dir>)` (the two-stage plan) over them.

Each variant runs once to warm up, then `--rounds` rounds in turn; one JSON line per run.
Runs on the code PYTHONPATH points at (variants without late_rows also on older code).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import mangonel as mg
from mangonel.catalog.catalog import Column, Schema
from mangonel.catalog.sources.generator import GeneratorConfig, generate
from mangonel.catalog.types import SqlType
from mangonel.runtime.spark.bench import STREAM_DDL, start_local_spark

QUERY = (
    "SELECT key, window_start, window_end, SUM(value) AS result "
    "FROM events [RANGE {w} MICROSECONDS SLIDE {s} MICROSECONDS] GROUP BY key"
)


def write_files(folder: Path, tuples: int, batch: int, delay_us: int) -> None:
    if folder.exists():
        return
    folder.mkdir(parents=True)
    schema = Schema(
        (
            Column("ts", SqlType.TIMESTAMP),
            Column("key", SqlType.BIGINT),
            Column("value", SqlType.DOUBLE),
        )
    )
    config = GeneratorConfig(
        tuples=tuples, rate=1_000_000, keys=1000, batch_size=batch, seed=1, delay_us=delay_us
    )
    for number, generated in enumerate(generate(schema, "ts", config)):
        pq.write_table(pa.Table.from_batches([generated]), folder / f"part-{number:05d}.parquet")


def run(spark, folder: Path, query: str, variant: str) -> dict:  # noqa: ANN001
    session = mg.attach(spark)
    source = (
        spark.readStream.schema(STREAM_DDL).option("maxFilesPerTrigger", 1).parquet(str(folder))
    )
    session.register("events", source, event_time="ts", watermark=0)
    rows = [0]

    def sink(table: pa.Table, batch_id: int) -> None:  # noqa: ARG001
        rows[0] += table.num_rows

    work = Path(tempfile.mkdtemp(prefix="late-bench-"))
    late_dir = str(work / "late")
    started = time.perf_counter()
    metrics = {}
    if variant.startswith("sql-"):
        frame = session.sql(query, late_rows=late_dir)
        handle = (
            frame.writeStream.format("noop")
            .outputMode("append")
            .option("checkpointLocation", str(work / "ck"))
            .start()
        )
    else:
        late = {"late_rows": late_dir} if variant.startswith("late") else {}
        handle = session.start(
            query, sink, checkpoint_location=str(work / "ck"), plan="driver", **late
        )
    try:
        handle.processAllAvailable()
    finally:
        handle.stop()
    seconds = time.perf_counter() - started
    if not variant.startswith("sql-") and hasattr(session, "start_metrics"):
        metrics = session.start_metrics(handle)
    late_rows = pq.read_table(late_dir).num_rows if Path(late_dir).exists() else 0
    shutil.rmtree(work)
    return {
        "variant": variant,
        "seconds": round(seconds, 3),
        "rows_out": rows[0],
        "late_rows_written": late_rows,
        "late_tuples_dropped": metrics.get("late_tuples_dropped"),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--variants", default="plain,late,plain-disorder,late-disorder")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tuples", type=int, default=4_000_000)
    parser.add_argument("--batch", type=int, default=500_000)
    parser.add_argument("--disorder-ms", type=int, default=1750)
    parser.add_argument("--range-us", type=int, default=1_000_000)
    parser.add_argument("--slide-us", type=int, default=100_000)
    parser.add_argument("--data", default="/tmp/late-bench-data")
    args = parser.parse_args()
    root = Path(args.data)
    tag = f"{args.tuples}-{args.batch}"
    folders = {
        False: root / f"inorder-{tag}",
        True: root / f"disorder-{tag}-{args.disorder_ms}",
    }
    write_files(folders[False], args.tuples, args.batch, 0)
    write_files(folders[True], args.tuples, args.batch, args.disorder_ms * 1000)
    spark = start_local_spark()
    query = QUERY.format(w=args.range_us, s=args.slide_us)
    variants = args.variants.split(",")
    for round_number in range(args.rounds + 1):
        for variant in variants:
            result = run(spark, folders["disorder" in variant], query, variant)
            result["round"] = "warm-up" if round_number == 0 else round_number
            print(json.dumps(result), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
