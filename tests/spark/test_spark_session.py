"""Session windows inside Spark (Spark's native `session_window` aggregation by default,
mangonel's per-tuple stages with native=False or late_rows=) equal Spark's native
aggregation on the same micro-batches, and the standalone engine equals both where no row
arrives behind the watermark (docs/semantics.md, "Session windows": Spark judges lateness
one micro-batch behind, so only such rows can differ)."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest
from pyspark.sql import functions as F
from spark_harness import assert_same_results, file_stream, run_to_memory, write_micro_batches
from test_spark_equality import micro_batches

import mangonel as mg
from mangonel.catalog.types import SqlType
from mangonel.errors import PlanError
from mangonel.runtime.spark.native import SESSION_NATIVE, SESSION_STAGES
from mangonel.runtime.spark.planner import plan_spark, spark_stages_text
from mangonel.session import Session

pytestmark = pytest.mark.spark

GAP = "1 millisecond"  # rows of one key are ~0.5 ms apart: sessions both merge and break
WATERMARK = "300 milliseconds"  # above the generator's 200 ms disorder: no row behind W
SELECT = "k, window_start, window_end, COUNT(*) AS n, SUM(v) AS total, MAX(v) AS top"


def session_batches() -> list[pa.Table]:
    _, tables = micro_batches(
        SqlType.STRING, SqlType.DOUBLE, delay_us=200_000, files=4, rows=1500, null_keys=True
    )
    # one row far ahead, so both engines' watermarks pass every other session
    last = tables[-1].slice(0, 1)
    ts = pa.array([last["ts"][0].value + 60_000_000], pa.int64()).cast(last.schema.field("ts").type)
    return [*tables, last.set_column(0, "ts", ts)]


def native_sessions(source):  # noqa: ANN001, ANN201 - DataFrames
    grouped = (
        source.withWatermark("ts", WATERMARK)
        .groupBy(F.session_window("ts", GAP), "k")
        .agg(F.count(F.lit(1)).alias("n"), F.sum("v").alias("total"), F.max("v").alias("top"))
    )
    return grouped.select(
        "k",
        F.col("session_window.start").alias("window_start"),
        F.col("session_window.end").alias("window_end"),
        "n",
        "total",
        "top",
    )


def standalone(tables: list[pa.Table], select: str = SELECT) -> pd.DataFrame:
    """The standalone engine on the same batches, without end of input (Spark has none)."""
    session = Session(backend="cpu")
    session.execute(
        "CREATE STREAM s (ts TIMESTAMP, k STRING, v DOUBLE) "
        f"WITH (event_time = 'ts', watermark = '{WATERMARK}')"
    )
    query = session.sql(f"SELECT {select} FROM s [SESSION GAP {GAP}] GROUP BY k")
    runner = query._new_runner()
    batches = [b for t in tables for b in runner.process(t)]
    return pa.Table.from_batches(batches, schema=query.schema).to_pandas()


@pytest.mark.parametrize("form", ["cql", "spark", "spark_struct"])
def test_session_windows_equal_sparks_session_window(spark, tmp_path, form):
    tables = session_batches()
    write_micro_batches(tmp_path / "in", tables)
    source = file_stream(spark, tmp_path / "in", "ts TIMESTAMP, k STRING, v DOUBLE")
    ms = mg.attach(spark)
    ms.register("s", source, event_time="ts", watermark=WATERMARK)
    if form == "cql":
        text = f"SELECT {SELECT} FROM s [SESSION GAP {GAP}] GROUP BY k"
    elif form == "spark":
        text = (
            "SELECT k, session_window.start AS window_start, session_window.end AS window_end, "
            "COUNT(*) AS n, SUM(v) AS total, MAX(v) AS top "
            f"FROM s GROUP BY session_window(ts, '{GAP}'), k"
        )
    else:  # the session_window struct column (Spark's native plan builds it)
        text = (
            "SELECT k, session_window, COUNT(*) AS n, SUM(v) AS total, MAX(v) AS top "
            f"FROM s GROUP BY session_window(ts, '{GAP}'), k"
        )
    ours = run_to_memory(ms.sql(text), tmp_path / "ours")
    if form == "spark_struct":
        sessions = ours.pop("session_window")
        ours.insert(1, "window_start", [w["start"] for w in sessions])
        ours.insert(2, "window_end", [w["end"] for w in sessions])
    assert ms.last_plan.native
    native = run_to_memory(native_sessions(source), tmp_path / "native")
    assert (native["n"] > 1).any() and native["k"].isna().any()  # merged sessions, NULL keys
    assert_same_results(ours, native, ["k"])
    assert_same_results(standalone(tables), native, ["k"])


def test_native_false_runs_the_per_tuple_stages_and_equals_sparks_session_window(spark, tmp_path):
    tables = session_batches()
    write_micro_batches(tmp_path / "in", tables)
    source = file_stream(spark, tmp_path / "in", "ts TIMESTAMP, k STRING, v DOUBLE")
    ms = mg.attach(spark, native=False)
    ms.register("s", source, event_time="ts", watermark=WATERMARK)
    ours = run_to_memory(
        ms.sql(f"SELECT {SELECT} FROM s [SESSION GAP {GAP}] GROUP BY k"), tmp_path / "ours"
    )
    assert not ms.last_plan.native and ms.last_plan.stage1 == "kernels"
    native = run_to_memory(native_sessions(source), tmp_path / "native")
    assert (native["n"] > 1).any() and native["k"].isna().any()
    assert_same_results(ours, native, ["k"])


def test_holistic_functions_over_session_windows_equal_the_standalone_session(spark, tmp_path):
    """MEDIAN, an exact percentile and the approximate distinct count over sessions inside
    Spark: Spark's session_window aggregation cannot run them, so the per-tuple stages do;
    each tuple's values travel beside its partials, and the sessions equal the standalone
    engine's on the same micro-batches (no row is late here)."""
    select = (
        "k, window_start, window_end, COUNT(*) AS n, MEDIAN(v) AS m, "
        "PERCENTILE_DISC(0.25) WITHIN GROUP (ORDER BY v) AS pd, APPROX_COUNT_DISTINCT(v) AS a"
    )
    tables = session_batches()
    write_micro_batches(tmp_path / "in", tables)
    source = file_stream(spark, tmp_path / "in", "ts TIMESTAMP, k STRING, v DOUBLE")
    ms = mg.attach(spark)
    ms.register("s", source, event_time="ts", watermark=WATERMARK)
    ours = run_to_memory(
        ms.sql(f"SELECT {select} FROM s [SESSION GAP {GAP}] GROUP BY k"), tmp_path / "ours"
    )
    assert not ms.last_plan.native and ms.last_plan.stage1 == "kernels"
    want = standalone(tables, select)
    assert (want["n"] > 2).any()  # sessions of several values: the median is not one value
    assert_same_results(ours, want, ["k"])


def test_spark_side_of_explain_groups_by_session_window() -> None:
    """Planning only (no Spark job): the native plan, its reason, the grouping."""
    session = Session(backend="cpu")
    session.execute(
        "CREATE STREAM s (ts TIMESTAMP, k STRING, v DOUBLE) "
        "WITH (event_time = 'ts', watermark = '300 milliseconds')"
    )
    text = "SELECT k, SUM(v) FROM s [SESSION GAP 30 SECONDS] WHERE v > 0 GROUP BY k"
    planned = plan_spark(text, session.sql(text).plan, partitions=2)
    lines = spark_stages_text(planned).splitlines()
    assert (
        planned.native
        and lines[0] == f"Spark: native window aggregation (reason: {SESSION_NATIVE})"
    )
    assert lines[1].startswith("  StreamingAggregate: group_by=[session_window(ts, 30s), `k`]")
    staged = plan_spark(text, session.sql(text).plan, partitions=2, late_rows=True)
    lines = spark_stages_text(staged).splitlines()
    assert not staged.native and staged.stage1 == "kernels"
    assert lines[0] == f"Spark: two stages (reason: {SESSION_STAGES})"
    text_lines = "\n".join(lines)
    assert "rows=per-tuple partials" in text_lines
    assert "fires=session_end<=watermark, late when ts+gap<=previous watermark" in text_lines


def test_the_per_tuple_stages_refuse_what_they_cannot_run() -> None:
    """Planning only: native=True with late rows (Spark's own aggregation drops them
    unseen), a stage 1 that pre-aggregates panes, native=True with holistic functions (which
    otherwise take the per-tuple stages)."""
    session = Session(backend="cpu")
    session.execute(
        "CREATE STREAM s (ts TIMESTAMP, k STRING, v DOUBLE) "
        "WITH (event_time = 'ts', watermark = '300 milliseconds')"
    )
    text = "SELECT k, SUM(v) FROM s [SESSION GAP 30 SECONDS] GROUP BY k"
    plan = session.sql(text).plan
    with pytest.raises(PlanError, match="native session_window aggregation drops them"):
        plan_spark(text, plan, partitions=2, native=True, late_rows=True)
    for stage1 in ("arrow", "reader"):
        with pytest.raises(PlanError, match=f"per-tuple partials.*stage1='{stage1}'"):
            plan_spark(text, plan, partitions=2, native=False, stage1=stage1)
    median = "SELECT k, MEDIAN(v) FROM s [SESSION GAP 30 SECONDS] GROUP BY k"
    with pytest.raises(PlanError, match="cannot run MEDIAN"):
        plan_spark(median, session.sql(median).plan, partitions=2, native=True)
    staged = plan_spark(median, session.sql(median).plan, partitions=2)
    assert not staged.native and staged.stage1 == "kernels"
    lines = spark_stages_text(staged).splitlines()
    assert lines[0] == f"Spark: two stages (reason: {SESSION_STAGES})"
    assert any("holistic=" in line for line in lines)
