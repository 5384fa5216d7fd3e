"""`mangonel bench --spark`'s plumbing: `--spark-conf` settings reach the JVM when the bench
starts it (spark.driver.memory: the heap of local mode), a fixed setting that a running
session lacks is refused, and the standalone engine runs beside Spark on the same files
with Spark's rows (issue 11's comparison)."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
from spark_harness import assert_same_results

pytestmark = pytest.mark.spark

HEAP_SCRIPT = """
from mangonel.runtime.spark.bench import driver_heap_bytes, start_local_spark
spark = start_local_spark(extra={"spark.driver.memory": "1536m"})
print("HEAP", driver_heap_bytes(spark))
spark.stop()
"""


def test_a_driver_memory_setting_reaches_the_jvm_the_bench_starts():
    """A fresh process (one JVM per Python process: the suite's is running already): the
    driver's maximum heap follows spark.driver.memory, not the 1 GiB default."""
    done = subprocess.run(
        [sys.executable, "-c", HEAP_SCRIPT], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("HEAP"))
    heap = int(line.split()[1])
    # the JVM reports -Xmx less a survivor space: within a few percent of 1.5 GiB
    assert 1.35 * 2**30 < heap <= 1.5 * 2**30


def test_run_spark_benchmarks_gives_its_settings_to_the_session_it_starts(monkeypatch):
    """The settings go to the builder (before the JVM starts), not to `spark.conf.set` on a
    running session, where Spark core settings are refused or ignored."""
    from mangonel.runtime.spark import bench

    given: list = []

    class Started(Exception):
        pass

    def start(cores: int = 2, shuffle_partitions: int = 2, extra=None):  # noqa: ANN001, ANN202
        given.append(extra)
        raise Started

    monkeypatch.setattr(bench, "start_local_spark", start)
    arguments = argparse.Namespace(
        spark_conf=[("spark.driver.memory", "8g"), ("spark.sql.shuffle.partitions", "1")]
    )
    with pytest.raises(Started):
        bench.run_spark_benchmarks(arguments)
    assert given == [{"spark.driver.memory": "8g", "spark.sql.shuffle.partitions": "1"}]


def test_a_fixed_setting_a_running_session_lacks_is_refused(spark):
    from mangonel.runtime.spark.bench import run_spark_benchmarks

    arguments = argparse.Namespace(spark_conf=[("spark.driver.memory", "64g")])
    with pytest.raises(ValueError, match="spark.driver.memory=64g: fixed once Spark runs"):
        run_spark_benchmarks(arguments, spark=spark)


def test_the_standalone_engine_gives_sparks_rows_on_the_same_files(spark):
    """MEDIAN over sliding windows: mangonel inside Spark, Spark's native median, mangonel
    over the registered DataFrame (streaming and driver-side plans) and mangonel's standalone
    engine (windows closed by the
    watermark only, as in Spark's streaming run) all give the same rows."""
    from mangonel.bench import run_standalone_like_spark
    from mangonel.runtime.spark.bench import SparkShape, measure_shape

    shape = SparkShape(100_000, 20_000, keys=5, aggregate="MEDIAN")
    kept: list = []
    result = measure_shape(
        spark, shape, 6000, 20_000, 2000, 3, keep=kept, standalone=run_standalone_like_spark
    )
    ours, native, frame, driver, alone = kept
    native = native.rename(columns={"start": "window_start", "end": "window_end"})
    for table in (ours, frame, driver, alone):
        assert_same_results(table, native, ["key"])
    assert result.standalone_rows == result.rows_out == result.spark_rows_out == len(native)
    assert result.driver_rows == len(native)  # the driver-side plan (ms.start), same rows
    assert result.reader_seconds is None  # the reader-fed plan does not run holistic state
    assert result.standalone_seconds is not None and result.standalone_seconds > 0
