"""The floor of Spark's two stateful Python operators on stage 2's input (issue 13, item 6).

    PYTHONPATH=$PWD:/path/to/protobuf python benchmarks/spark_stateful_floor.py [--keys 1000]

Stage 2 inside Spark runs as `applyInPandasWithState` over key buckets (stage2.py). This
measures what the operator costs when the handler does (almost) nothing, against Spark 4's
`transformWithStateInPandas` (per-key ValueState, the RocksDB state store, which that API
needs), on the same input: partial rows shaped as stage 1 emits them (bucket, key, pane, sum,
count, an event-time column carrying the watermark) for the bench's shapes, written as one
Parquet file per micro-batch (2 M tuples of event time at 1 M tuples/s each) and read with
`maxFilesPerTrigger=1`, so every variant sees the same micro-batches. Per variant: seconds to
`processAllAvailable` (including the no-data micro-batch after the last watermark step) and
the sum of the stateful operator's `allUpdatesTimeMs` and `commitTimeMs` over micro-batches.

The handlers: "noop" reads every input frame, writes one small state value and returns no
row; "row-per-key" also returns one row per key it saw; "map" (tws/bucket only) writes one
MapState entry per key the micro-batch touched and returns no row. transformWithStateInPandas needs
`google.protobuf` in the Python workers (pyspark's state client speaks protobuf to the JVM).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from mangonel.runtime.spark.bench import run_to_sink
from mangonel.runtime.spark.session import local_spark

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
PARTIAL_DDL = "bucket INT, key BIGINT, pane BIGINT, s DOUBLE, n BIGINT, ts TIMESTAMP"
OUTPUT_DDL = "key BIGINT, n BIGINT"
BUCKETS = 4
TUPLES_PER_BATCH = 2_000_000
RATE = 1_000_000  # tuples per second of event time


def write_partials(folder: Path, keys: int, slide_us: int, batches: int, seed: int) -> int:
    """Stage 1's partials of `batches` micro-batches: one row per (key, pane) that the
    micro-batch's generated tuples (uniform keys, event time at RATE) hit. Returns rows."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    total = 0
    for number in range(batches):
        first = number * TUPLES_PER_BATCH
        ts_us = (np.arange(first, first + TUPLES_PER_BATCH) * (1_000_000 // RATE)).astype(np.int64)
        key = rng.integers(0, keys, TUPLES_PER_BATCH)
        pane = ts_us // slide_us
        pairs = np.unique(pane * keys + key)
        table = pa.table(
            {
                "bucket": pa.array((pairs % keys) % BUCKETS, pa.int32()),
                "key": pa.array(pairs % keys, pa.int64()),
                "pane": pa.array(pairs // keys, pa.int64()),
                "s": pa.array(np.ones(len(pairs))),
                "n": pa.array(np.ones(len(pairs), np.int64)),
                "ts": pa.array((pairs // keys) * slide_us, pa.timestamp("us")),
            }
        )
        pq.write_table(table, folder / f"part-{number:05d}.parquet")
        total += len(pairs)
    return total


def apply_bucket_handler(rows_out: bool):  # noqa: ANN201 - a pyspark callback
    def handle(
        bucket: tuple, frames: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        seen = [frame["key"].to_numpy() for frame in frames]
        if not state.hasTimedOut:
            state.update((b"x",))
        state.setTimeoutTimestamp(max(state.getCurrentWatermarkMs(), 1))
        if rows_out and seen:
            keys, counts = np.unique(np.concatenate(seen), return_counts=True)
            yield pd.DataFrame({"key": keys, "n": counts})

    return handle


class PerGroupProcessor(StatefulProcessor):
    """One ValueState per grouping key (a bucket or a user key); reads its input frames."""

    def __init__(self, rows_out: bool) -> None:
        self.rows_out = rows_out

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("calls", "calls BIGINT")

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:  # noqa: ANN001
        seen = [frame["key"].to_numpy() for frame in rows]
        calls = self.state.get()[0] if self.state.exists() else 0
        self.state.update((calls + 1,))
        if self.rows_out and seen:
            keys, counts = np.unique(np.concatenate(seen), return_counts=True)
            yield pd.DataFrame({"key": keys, "n": counts})

    def close(self) -> None:
        pass


class TouchedKeysProcessor(StatefulProcessor):
    """Per bucket, one MapState entry per user key the micro-batch touched: the state layout
    that writes only what a micro-batch changes (each entry one call to the JVM's state
    server)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getMapState("per_key", "key BIGINT", "n BIGINT")

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:  # noqa: ANN001
        seen = [frame["key"].to_numpy() for frame in rows]
        if seen:
            keys, counts = np.unique(np.concatenate(seen), return_counts=True)
            for user_key, count in zip(keys.tolist(), counts.tolist(), strict=True):
                self.state.updateValue((user_key,), (count,))
        return iter(())

    def close(self) -> None:
        pass


def run_variant(spark: SparkSession, folder: Path, variant: str) -> tuple[float, float, int]:
    api, group, output = variant.split("/")
    rows_out = output == "row-per-key"
    source = (
        spark.readStream.schema(PARTIAL_DDL)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(folder))
        .withWatermark("ts", "0 milliseconds")
    )
    grouped = source.groupBy("bucket" if group == "bucket" else "key")
    if api == "apply":
        spark.conf.set("spark.sql.streaming.stateStore.providerClass", HDFS)
        frame: DataFrame = grouped.applyInPandasWithState(
            apply_bucket_handler(rows_out),
            outputStructType=OUTPUT_DDL,
            stateStructType="snapshot BINARY",
            outputMode="append",
            timeoutConf=GroupStateTimeout.EventTimeTimeout,
        )
    else:
        spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
        processor = TouchedKeysProcessor() if output == "map" else PerGroupProcessor(rows_out)
        frame = grouped.transformWithStateInPandas(
            statefulProcessor=processor,
            outputStructType=OUTPUT_DDL,
            outputMode="Append",
            timeMode="EventTime",
        )
    seconds, query = run_to_sink(frame)
    operator_ms = 0.0
    batches = 0
    for progress in query.recentProgress:
        batches += 1
        for operator in progress.get("stateOperators", []):
            operator_ms += operator.get("allUpdatesTimeMs", 0) + operator.get("commitTimeMs", 0)
    return seconds, operator_ms / 1000, batches


VARIANTS = (
    "apply/bucket/noop",
    "tws/bucket/noop",
    "tws/key/noop",
    "apply/bucket/row-per-key",
    "tws/key/row-per-key",
    "tws/bucket/map",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--slides-us", type=int, nargs="+", default=[1_000_000, 10_000])
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS))
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    spark = local_spark("tws-floor")
    with tempfile.TemporaryDirectory() as scratch:
        warm = Path(scratch) / "warm"
        write_partials(warm, 100, 1_000_000, 1, seed=0)
        for variant in args.variants:  # Python workers, imports, JIT: once per variant kind
            run_variant(spark, warm, variant)
        for keys in args.keys:
            for slide in args.slides_us:
                folder = Path(scratch) / f"k{keys}-s{slide}"
                rows = write_partials(folder, keys, slide, args.batches, seed=1)
                for _ in range(args.repeat):
                    for variant in args.variants:
                        load = os.getloadavg()[0]
                        seconds, operator_s, batches = run_variant(spark, folder, variant)
                        print(
                            f"keys={keys} slide_us={slide} partials={rows} {variant}: "
                            f"{seconds:.2f} s, operator {operator_s:.2f} s, "
                            f"{batches} micro-batches, load {load:.1f}",
                            flush=True,
                        )
    spark.stop()


if __name__ == "__main__":
    main()
