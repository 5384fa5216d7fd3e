"""The reader path (reader.py): streams mangonel reads itself run stage 1 inside its own
Python Data Source, so only pane partials enter the JVM. Results equal the DataFrame path's
and Spark's own aggregation on the same micro-batches (late rows included), a restart from
the checkpoint loses and duplicates nothing, and the planner says when the path applies."""

from __future__ import annotations

import pyarrow as pa
import pytest
from spark_harness import (
    DDL,
    SCHEMA,
    assert_equals_native,
    assert_restart_lost_and_duplicated_nothing,
    assert_same_results,
    file_stream,
    generated_tables,
    mangonel_select,
    outputs_with_and_without_a_restart,
    run_to_memory,
    write_micro_batches,
)

import mangonel as mg
from mangonel.errors import PlanError
from mangonel.runtime.spark.planner import plan_spark, spark_stages_text

pytestmark = pytest.mark.spark

AGGREGATES = [("COUNT(*)", None, "n"), ("SUM", "v", "s"), ("MAX", "v", "hi")]
SLIDING = (
    f"SELECT k, window_start, window_end, {mangonel_select(AGGREGATES)} "
    "FROM s [RANGE 500 MILLISECONDS SLIDE 250 MILLISECONDS] WHERE v > 5 GROUP BY k"
)
TUMBLING = (
    f"SELECT k, window_start, window_end, {mangonel_select(AGGREGATES)} "
    "FROM s [RANGE 250 MILLISECONDS SLIDE 250 MILLISECONDS] GROUP BY k"
)


def tables(files: int, rows: int = 2000, delay_us: int = 600_000) -> list[pa.Table]:
    """250 ms of event time per file, disorder up to `delay_us` (beyond the 200 ms watermark
    delay: some rows of every file are late), NULL keys and values."""
    return generated_tables(
        SCHEMA, files=files, rows=rows, keys=4, delay_us=delay_us, seed=11, null_fraction=0.05
    )


def declare(spark, folder) -> mg.SparkMangonelSession:  # noqa: ANN001
    """The Parquet stream on the reader path (the planner's default for Parquet is Spark's
    own reader, then Arrow stage 1: `test_the_planner_takes_the_reader_...` below)."""
    session = mg.attach(spark, stage1="reader")
    session.execute(
        f"CREATE STREAM s ({DDL}) WITH (event_time = 'ts', watermark = '200 milliseconds', "
        f"source = 'parquet', path = '{folder}', files_per_trigger = '1')"
    )
    return session


def test_reader_path_equals_the_dataframe_path_and_spark_with_late_rows(spark, tmp_path):
    """WHERE v > 5 does not read the event time: Spark pushes it below its watermark on the
    DataFrame path, so the reader's watermark counts only those rows too."""
    write_micro_batches(tmp_path / "in", tables(3))
    session = declare(spark, tmp_path / "in")
    ours = session.sql(SLIDING)
    assert session.last_plan.stage1 == "reader" and not session.last_plan.native
    assert "Stage1 Python Data Source: mangonel_panes: source=parquet" in session.explain()
    ours_rows = assert_equals_native(
        ours,
        tmp_path,
        file_stream(spark, tmp_path / "in", DDL),
        event_time="ts",
        delay="200 milliseconds",
        size="500 milliseconds",
        slide="250 milliseconds",
        keys=["k"],
        aggregates=AGGREGATES,
        where="v > 5",
    )

    frame = mg.attach(spark)
    frame.register(
        "s", file_stream(spark, tmp_path / "in", DDL), event_time="ts", watermark="200 ms"
    )
    dataframe = frame.sql(SLIDING)
    assert frame.last_plan.stage1 == "arrow"
    assert_same_results(ours_rows, run_to_memory(dataframe, tmp_path / "ck_frame"), ["k"])


def test_reader_restart_from_checkpoint_loses_and_duplicates_nothing(spark, tmp_path):
    """Offsets (last file read) and partitions (row groups) come back from the checkpoint.
    No late rows: the
    stopped run's last micro-batch is a no-data one that moves the watermark, so by Spark's
    rule (late against the previous micro-batch's watermark) a restart may judge rows of its
    first micro-batch stricter than the uninterrupted run does, on either path."""
    data = tables(4, delay_us=100_000)
    outputs = outputs_with_and_without_a_restart(
        spark,
        tmp_path,
        {"s": data},
        2,
        lambda folders, _: declare(spark, folders["s"]).sql(SLIDING),
    )
    assert_restart_lost_and_duplicated_nothing(*outputs, ["k"])


def _declared_plan(source: str, query: str = TUMBLING) -> tuple[str, object]:
    session = mg.Session(backend="cpu")
    options = {"generator": "source = 'generator'", "none": ""}.get(
        source, f"source = '{source}', path = '/tmp/x'"
    )
    session.execute(
        f"CREATE STREAM s ({DDL}) WITH (event_time = 'ts'{', ' if options else ''}{options})"
    )
    return query, session.sql(query).plan


def test_the_planner_takes_the_reader_for_streams_mangonel_reads():
    """Unasked, the reader runs for the generator and CSV; a Parquet stream reads through
    Spark's vectorized reader, then Arrow stage 1, and EXPLAIN says why; `stage1="reader"`
    forces the reader for all three."""
    for source in ("generator", "parquet", "csv"):
        planned = plan_spark(*_declared_plan(source, SLIDING), partitions=2)
        if source == "parquet":
            assert (planned.stage1, planned.native) == ("arrow", False)
            assert "reader=none: a Parquet stream is read by Spark's vectorized reader" in (
                spark_stages_text(planned)
            )
            planned = plan_spark(*_declared_plan(source, SLIDING), partitions=2, stage1="reader")
        assert (planned.stage1, planned.native) == ("reader", False)
        text = spark_stages_text(planned)
        assert "EventTimeWatermark: column=max(ts) of each partition" in text
        assert "reader=none" not in text
        # tumbling: Spark's own aggregation by cost, unless the reader is asked for
        assert plan_spark(*_declared_plan(source), partitions=2).native
        forced = plan_spark(*_declared_plan(source), partitions=2, stage1="reader")
        assert (forced.stage1, forced.native) == ("reader", False)
    registered = plan_spark(*_declared_plan("none", SLIDING), partitions=2)
    assert registered.stage1 == "arrow"  # a registered DataFrame: Spark's source
    with pytest.raises(PlanError, match="stage1='reader' does not apply: the stream is a"):
        plan_spark(*_declared_plan("none"), partitions=2, stage1="reader")
    # late rows need the rows beside the partials: Arrow stage 1 after Spark's source
    late = plan_spark(*_declared_plan("parquet", SLIDING), partitions=2, late_rows=True)
    assert late.stage1 == "arrow"
    assert plan_spark(*_declared_plan("parquet"), partitions=2, native=True).native


def test_holistic_functions_through_the_reader_equal_the_dataframe_path(spark, tmp_path):
    """Stage 1 inside the reader ships the holistic values columns too (partial_ddl)."""
    query = (
        "SELECT k, window_start, window_end, MEDIAN(v) AS m, COUNT(DISTINCT v) AS d, "
        "SUM(v) AS s FROM s [RANGE 500 MILLISECONDS SLIDE 250 MILLISECONDS] GROUP BY k"
    )
    write_micro_batches(tmp_path / "in", tables(3, rows=500))
    session = declare(spark, tmp_path / "in")
    ours = session.sql(query)
    assert session.last_plan.stage1 == "reader"
    ours_rows = run_to_memory(ours, tmp_path / "ck_reader")
    frame = mg.attach(spark)
    frame.register(
        "s", file_stream(spark, tmp_path / "in", DDL), event_time="ts", watermark="200 ms"
    )
    assert_same_results(ours_rows, run_to_memory(frame.sql(query), tmp_path / "ck_frame"), ["k"])
