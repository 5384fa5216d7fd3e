"""Stage 2 as Spark's own aggregation over the reader's pane partials (native_stage2.py):
the results equal mangonel's Python stage 2 over the same partials (late rows included, by
Spark's rule), the standalone session's on in-order data, and a restart from the checkpoint
loses and duplicates nothing; EXPLAIN says which stage 2 runs and why."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest
from spark_harness import (
    assert_same_results,
    run_to_memory,
    run_to_parquet,
    write_micro_batches,
)

import mangonel as mg
from mangonel.catalog.catalog import Column, Schema
from mangonel.catalog.sources.generator import GeneratorConfig, generate
from mangonel.catalog.types import SqlType
from mangonel.errors import PlanError
from mangonel.runtime.local.query import LocalQuery
from mangonel.runtime.spark.planner import plan_spark, spark_stages_text

pytestmark = pytest.mark.spark

SCHEMA = Schema(
    (
        Column("ts", SqlType.TIMESTAMP),
        Column("k", SqlType.STRING),
        Column("v", SqlType.DOUBLE),
        Column("n", SqlType.BIGINT),
        Column("b", SqlType.BOOLEAN),
    )
)
DDL = "ts TIMESTAMP, k STRING, v DOUBLE, n BIGINT, b BOOLEAN"
# every aggregate the native stage 2 merges, NULL arguments included
CALLS = (
    "COUNT(*) AS c, COUNT(v) AS cv, SUM(v) AS sv, SUM(n) AS sn, MIN(v) AS lo, MAX(n) AS hi, "
    "AVG(n) AS an, MIN(ts) AS first_ts, BOOL_OR(b) AS any_b, SUM(v) / COUNT(*) + 1 AS mixed"
)
SLIDING = (
    f"SELECT k, window_start, window_end, {CALLS} "
    "FROM s [RANGE 500 MILLISECONDS SLIDE 100 MILLISECONDS] WHERE n > 20 GROUP BY k "
    "HAVING COUNT(*) > 1"
)
TUMBLING = f"SELECT k, window_start, window_end, {CALLS} FROM s [RANGE 250 MILLISECONDS] GROUP BY k"


def tables(files: int, delay_us: int, rows: int = 1500) -> list[pa.Table]:
    """250 ms of event time per file, 4 keys, NULL keys and values, disorder up to
    `delay_us` (beyond the 200 ms watermark delay: late rows)."""
    config = GeneratorConfig(
        tuples=files * rows,
        rate=6000,
        keys=4,
        delay_us=delay_us,
        batch_size=rows,
        seed=5,
        null_fraction=0.05,
    )
    return [pa.Table.from_batches([b]) for b in generate(SCHEMA, "ts", config)]


def declare(spark, folder, stage2: str | None = None) -> mg.SparkMangonelSession:  # noqa: ANN001
    session = mg.attach(spark, stage2=stage2)
    session.execute(
        f"CREATE STREAM s ({DDL}) WITH (event_time = 'ts', watermark = '200 milliseconds', "
        f"source = 'parquet', path = '{folder}', files_per_trigger = '1')"
    )
    return session


def standalone(data: list[pa.Table], query: str) -> pd.DataFrame:
    session = mg.Session("cpu")
    session.execute(f"CREATE STREAM s ({DDL}) WITH (event_time = 'ts', watermark = '200 ms')")
    runner = LocalQuery(session.sql(query).plan)
    fired = [batch for table in data for batch in runner.process(table)]
    return pa.Table.from_batches(fired, schema=runner.schema).to_pandas()


@pytest.mark.parametrize("query", [SLIDING, TUMBLING], ids=["sliding", "tumbling"])
def test_native_stage2_equals_python_stage2_with_late_rows(spark, tmp_path, query):
    write_micro_batches(tmp_path / "in", tables(3, delay_us=500_000))
    native = declare(spark, tmp_path / "in", stage2="native")
    ours = native.sql(query)
    assert (native.last_plan.stage1, native.last_plan.stage2) == ("reader", "native")
    assert "Stage2 native StreamingAggregate" in native.explain()
    python = declare(spark, tmp_path / "in", stage2="python")
    theirs = python.sql(query)
    assert python.last_plan.stage2 == "python"
    assert_same_results(
        run_to_memory(ours, tmp_path / "ck_native"),
        run_to_memory(theirs, tmp_path / "ck_python"),
        ["k"],
    )


def test_native_stage2_equals_the_standalone_session_in_order(spark, tmp_path):
    """Disorder within the watermark delay: no late rows, so Spark's watermark rules give
    the standalone windows (those closed by the last watermark)."""
    data = tables(3, delay_us=100_000)
    write_micro_batches(tmp_path / "in", data)
    session = declare(spark, tmp_path / "in", stage2="native")
    ours = run_to_memory(session.sql(SLIDING), tmp_path / "ck")
    assert session.last_plan.stage2 == "native"
    expected = standalone(data, SLIDING)
    last = pd.to_datetime(ours["window_end"], utc=True).max()
    expected = expected[pd.to_datetime(expected["window_end"], utc=True) <= last]
    assert_same_results(ours, expected, ["k"])


def run_to_files(spark, folder, checkpoint, output) -> None:  # noqa: ANN001
    run_to_parquet(declare(spark, folder, stage2="native").sql(TUMBLING), checkpoint, output)


def test_native_stage2_restart_from_checkpoint(spark, tmp_path):
    data = tables(4, delay_us=100_000)
    write_micro_batches(tmp_path / "all", data)
    run_to_files(spark, tmp_path / "all", tmp_path / "ck_all", tmp_path / "out_all")
    write_micro_batches(tmp_path / "part", data[:2])
    run_to_files(spark, tmp_path / "part", tmp_path / "ck_part", tmp_path / "out_part")
    first_run = spark.read.parquet(str(tmp_path / "out_part")).count()
    write_micro_batches(tmp_path / "part", data[2:])
    run_to_files(spark, tmp_path / "part", tmp_path / "ck_part", tmp_path / "out_part")
    uninterrupted = spark.read.parquet(str(tmp_path / "out_all")).toPandas()
    restarted = spark.read.parquet(str(tmp_path / "out_part")).toPandas()
    assert 0 < first_run < len(restarted), "the first run must have emitted part of the result"
    assert not restarted.duplicated(["k", "window_start"]).any()
    assert_same_results(restarted, uninterrupted, ["k"])


def _plan(query: str, **options):  # noqa: ANN003, ANN202
    """A CSV stream: the reader path is its default (a Parquet stream's is Spark's reader)."""
    session = mg.Session(backend="cpu")
    session.execute(
        f"CREATE STREAM s ({DDL}) WITH (event_time = 'ts', source = 'csv', path = '/tmp/x')"
    )
    return plan_spark(query, session.sql(query).plan, partitions=2, **options)


def test_the_planner_chooses_stage2_and_explain_says_why():
    # 5 windows per pane: Spark would copy each partial 5 times; mangonel's stage 2 by cost
    planned = _plan(SLIDING)
    assert planned.stage2 == "python" and "5 windows per pane > 1" in planned.stage2_reason
    assert spark_stages_text(planned).startswith("Spark: stage 2 in Python (reason: 5 windows")
    planned = _plan(SLIDING, stage2="native")
    assert planned.stage2 == "native"
    text = spark_stages_text(planned)
    assert text.startswith("Spark: stage 2 as Spark's native aggregation of pane partials")
    assert "Filter: where=row count > 0" in text
    assert "EventTimeWatermark: column=max(ts) of each partition" in text
    # a forced stage 2 takes the reader path also where Spark's own plan would run
    assert _plan(TUMBLING).native
    tumbling = _plan(TUMBLING, stage2="native")
    assert (tumbling.stage1, tumbling.native, tumbling.stage2) == ("reader", False, "native")
    # moments have no exact merge in Spark SQL; holistic functions keep their values
    moments = "SELECT k, STDDEV(v) AS d FROM s [RANGE 1 SECOND SLIDE 500 MILLISECONDS] GROUP BY k"
    assert "moments" in _plan(moments).stage2_reason
    with pytest.raises(PlanError, match="stage2='native' cannot run this query: state kind"):
        _plan(moments, stage2="native")
    median = "SELECT k, MEDIAN(v) AS m FROM s [RANGE 1 SECOND SLIDE 100 MILLISECONDS] GROUP BY k"
    assert "holistic" in _plan(median).stage2_reason
