"""The driver-side plan (`ms.start`, foreach_batch.py): stage 1 as Spark's batch aggregation
inside foreachBatch, stage 2 on the driver. Its results equal Spark's own streaming
`GROUP BY window(ts, w, s), keys` with `withWatermark` on the same micro-batches (in order,
out of order with late rows, several keys, sliding and tumbling, WHERE on and off the event
time), and a restart from the checkpoint loses and repeats nothing."""

from __future__ import annotations

import datetime
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute
import pyarrow.parquet as pq
import pytest
from spark_harness import (
    ALL_AGGREGATES,
    assert_same_results,
    canonical,
    file_stream,
    generated_tables,
    mangonel_select,
    native_window_query,
    outputs_with_and_without_a_restart,
    run_to_memory,
    write_micro_batches,
)

import mangonel as mg
from mangonel.catalog.catalog import Column, Schema
from mangonel.catalog.types import SqlType
from mangonel.errors import PlanError
from mangonel.runtime.spark import foreach_batch

pytestmark = pytest.mark.spark

# the aggregates of each state kind (VAR_SAMP and STDDEV_POP share VAR_POP's and
# STDDEV_SAMP's MOMENTS state)
AGGREGATES = [a for a in ALL_AGGREGATES if a[2] not in ("var_samp_v", "sd_pop_v")]


def tables_of(
    value_type: SqlType, *, delay_us: int, files: int = 4, keys: int = 5, seed: int = 3
) -> list[pa.Table]:
    schema = Schema(
        (
            Column("ts", SqlType.TIMESTAMP),
            Column("k", SqlType.STRING),
            Column("v", value_type),
        )
    )
    return generated_tables(
        schema,
        files=files,
        rows=2000,
        keys=keys,
        delay_us=delay_us,
        seed=seed,
        null_fraction=0.1,
    )


class Collect:
    """A callable sink keeping each batch id's rows (a re-run id replaces its rows)."""

    def __init__(self) -> None:
        self.batches: dict[int, pa.Table] = {}

    def __call__(self, table: pa.Table, batch_id: int) -> None:
        self.batches[batch_id] = table

    def frame(self) -> pd.DataFrame:
        tables = [t for _, t in sorted(self.batches.items()) if t.num_rows]
        return pa.concat_tables(tables).to_pandas()


def run_start(session, query: str, checkpoint: Path, sink=None, plan="driver"):  # noqa: ANN001, ANN201
    sink = sink if sink is not None else Collect()
    streaming = session.start(query, sink, checkpoint_location=str(checkpoint), plan=plan)
    try:
        streaming.processAllAvailable()
    finally:
        streaming.stop()
    return sink


CASES = {
    # name: (value type, delay us, RANGE, SLIDE, watermark, native size, native slide, WHERE)
    "sliding-out-of-order-late-rows": (
        SqlType.DOUBLE,
        1_500_000,
        "1 SECOND",
        "100 MILLISECONDS",
        "100 milliseconds",
        "1 second",
        "100 milliseconds",
        None,
    ),
    "tumbling-in-order-bigint": (
        SqlType.BIGINT,
        0,
        "500 MILLISECONDS",
        "500 MILLISECONDS",
        "0 milliseconds",
        "500 milliseconds",
        "500 milliseconds",
        None,
    ),
    "uneven-panes-where-on-value-and-time": (
        SqlType.DOUBLE,
        300_000,
        "700 MILLISECONDS",
        "200 MILLISECONDS",
        "50 milliseconds",
        "700 milliseconds",
        "200 milliseconds",
        "v > 20 AND ts <> TIMESTAMP '2026-01-01 00:00:00.5' "
        "AND ts < TIMESTAMP '2026-01-01 00:00:00.8'",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_start_equals_spark_native(spark, tmp_path, case):
    check_equals_native(spark, tmp_path, case)


def test_the_tick_leaves_the_watermark_alone_under_the_max_policy(spark, tmp_path):
    """The tick's branch must not move the watermark, also under
    `multipleWatermarkPolicy=max`: each micro-batch ends with rows 400 ms after the others
    whose value WHERE drops, which Spark's own aggregation does not count (the conjunct is
    pushed below its watermark); a watermark operator counting them would fire and drop
    windows earlier."""
    case = "uneven-panes-where-on-value-and-time"
    tables = []
    for table in tables_of(SqlType.DOUBLE, delay_us=CASES[case][1]):
        latest = pa.compute.max(table["ts"]).as_py()
        extra = pa.table(
            {
                "ts": pa.array(
                    [latest + datetime.timedelta(milliseconds=400)] * 10, table["ts"].type
                ),
                "k": pa.array(["x"] * 10),
                "v": pa.array([None] * 10, pa.float64()),
            }
        )
        tables.append(pa.concat_tables([table, extra.cast(table.schema)]))
    key = "spark.sql.streaming.multipleWatermarkPolicy"
    spark.conf.set(key, "max")
    try:
        check_equals_native(spark, tmp_path, case, tables)
    finally:
        spark.conf.unset(key)


def case_query(case: str) -> str:
    """The mangonel query of CASES[case]: every aggregate of AGGREGATES per key."""
    _, _, size, slide, _, _, _, where = CASES[case]
    where_clause = f" WHERE {where}" if where else ""
    return (
        f"SELECT k, window_start, window_end, {mangonel_select(AGGREGATES)} "
        f"FROM s [RANGE {size} SLIDE {slide}]{where_clause} GROUP BY k"
    )


def native_case_rows(source, case: str, folder: Path):  # noqa: ANN001, ANN201
    """Spark's own window aggregation of CASES[case] over streaming DataFrame `source`."""
    _, _, _, _, watermark, native_size, native_slide, where = CASES[case]
    native = native_window_query(
        source,
        event_time="ts",
        delay=watermark,
        size=native_size,
        slide=native_slide,
        keys=["k"],
        aggregates=AGGREGATES,
        where=where,
    )
    return run_to_memory(native, folder)


def check_equals_native(spark, tmp_path, case, tables=None):  # noqa: ANN001, ANN201
    value_type, delay_us, _, _, watermark, native_size, native_slide, where = CASES[case]
    if tables is None:
        tables = tables_of(value_type, delay_us=delay_us)
    write_micro_batches(tmp_path / "in", tables)
    ddl = f"ts TIMESTAMP, k STRING, v {value_type.info.spark}"
    source = file_stream(spark, tmp_path / "in", ddl)
    session = mg.attach(spark)
    session.register("s", source, event_time="ts", watermark=watermark)
    ours = run_start(session, case_query(case), tmp_path / "ck").frame()
    assert_same_results(ours, native_case_rows(source, case, tmp_path / "native"), ["k"])
    if delay_us > 1_000_000:  # the case has late rows: Spark dropped some, and so did we
        from pyspark.sql import functions as F

        rows = spark.read.parquet(str(tmp_path / "in"))
        rows = rows.where(where) if where else rows
        every = rows.groupBy(F.window("ts", native_size, native_slide), "k").count()
        every = every.select(
            "k",
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "count",
        )
        joined = canonical(ours, ["k"]).merge(
            canonical(every.toPandas(), ["k"]), on=["k", "window_start", "window_end"]
        )
        assert (joined["count"] >= joined["n"]).all() and (joined["count"] > joined["n"]).any()


RESTART_QUERY = (
    "SELECT k, window_start, window_end, COUNT(*) AS n, SUM(v) AS s "
    "FROM s [RANGE 1 SECOND SLIDE 250 MILLISECONDS] GROUP BY k"
)
RESTART_DDL = "ts TIMESTAMP, k STRING, v DOUBLE"


def native_restart_outputs(spark, folder: Path, tables: list):  # noqa: ANN001, ANN201
    """Spark's own aggregation of RESTART_QUERY over `tables` (watermark 100 ms):
    (uninterrupted, stopped after two micro-batches and restarted from its checkpoint)."""

    def native_over(folders, restarted):  # noqa: ANN001, ANN202, ARG001
        return native_window_query(
            file_stream(spark, folders["s"], RESTART_DDL),
            event_time="ts",
            delay="100 milliseconds",
            size="1 second",
            slide="250 milliseconds",
            keys=["k"],
            aggregates=[("COUNT(*)", None, "n"), ("SUM", "v", "s")],
        )

    whole, restarted, _ = outputs_with_and_without_a_restart(
        spark, folder, {"s": tables}, 2, native_over
    )
    return whole, restarted


def start_with_a_restart(session_of, tmp_path: Path, tables: list, **plan):  # noqa: ANN001, ANN201
    """RESTART_QUERY under `start()` over the first two of `tables` written under
    tmp_path/part, then restarted from its checkpoint once the rest are there
    (`session_of(folder)`: the session reading them): the rows written, checked to be more
    after the restart and none twice."""
    write_micro_batches(tmp_path / "part", tables[:2])
    out = tmp_path / "out"
    run_start(session_of(tmp_path / "part"), RESTART_QUERY, tmp_path / "ck_part", str(out), **plan)
    first = pq.read_table(out).num_rows
    write_micro_batches(tmp_path / "part", tables[2:])
    run_start(session_of(tmp_path / "part"), RESTART_QUERY, tmp_path / "ck_part", str(out), **plan)
    restarted = pq.read_table(out).to_pandas()
    assert 0 < first < len(restarted)
    assert not restarted.duplicated(["k", "window_start"]).any()
    return restarted


def test_restart_from_checkpoint_equals_spark_native_restarted(spark, tmp_path):
    """Stopped after two micro-batches and restarted from its checkpoint for the rest: no
    window lost or emitted twice, and the rows equal Spark's own aggregation stopped and
    restarted the same way (the stop lets Spark run a no-data micro-batch, which moves the
    bound for late rows: with out-of-order data both runs drop more than uninterrupted)."""
    tables = tables_of(SqlType.DOUBLE, delay_us=1_500_000, files=5)
    native_whole, native_restarted = native_restart_outputs(spark, tmp_path / "native", tables)

    def session_over(folder: Path):  # noqa: ANN202
        session = mg.attach(spark)
        source = file_stream(spark, folder, RESTART_DDL)
        session.register("s", source, event_time="ts", watermark="100ms")
        return session

    write_micro_batches(tmp_path / "all", tables)
    whole = run_start(session_over(tmp_path / "all"), RESTART_QUERY, tmp_path / "ck_all").frame()
    assert_same_results(whole, native_whole, ["k"])
    restarted = start_with_a_restart(session_over, tmp_path, tables)
    assert_same_results(restarted, native_restarted, ["k"])
    # the operator's snapshots: the two latest batch ids only
    assert len(foreach_batch.SnapshotStore(str(tmp_path / "ck_part")).batch_ids()) == 2


def _counting_session(spark, tmp_path, *, delay_us: int, files: int):  # noqa: ANN001, ANN202
    """(session, query): stream `s` over `files` micro-batches written under tmp_path/in,
    and a COUNT per key over 500 ms windows of it."""
    write_micro_batches(tmp_path / "in", tables_of(SqlType.DOUBLE, delay_us=delay_us, files=files))
    session = mg.attach(spark)
    source = file_stream(spark, tmp_path / "in", "ts TIMESTAMP, k STRING, v DOUBLE")
    session.register("s", source, event_time="ts", watermark="0ms")
    return session, (
        "SELECT k, window_start, COUNT(*) AS n FROM s [RANGE 500 MILLISECONDS] GROUP BY k"
    )


def assert_a_rerun_batch_id_gives_the_same_rows(session, query: str, checkpoint: Path, **plan):  # noqa: ANN001
    """Batch id 1's sink fails once, so Spark runs it again after the restart: both runs
    hand out the same rows (the batch before it restored)."""
    seen: list[tuple[int, pa.Table]] = []
    failed = []

    def flaky(table: pa.Table, batch_id: int) -> None:
        seen.append((batch_id, table))
        if batch_id == 1 and not failed:
            failed.append(batch_id)
            raise RuntimeError("sink failed once")

    with pytest.raises(Exception, match="sink failed once"):
        run_start(session, query, checkpoint, flaky, **plan)
    run_start(session, query, checkpoint, flaky, **plan)
    reruns = [table for batch_id, table in seen if batch_id == 1]
    assert len(reruns) == 2 and reruns[0].num_rows > 0
    assert reruns[0].equals(reruns[1])


def test_rerun_batch_id_gives_the_same_rows(spark, tmp_path):
    """A batch id run twice (after a failure) restores the batch before it: same results."""
    session, query = _counting_session(spark, tmp_path, delay_us=200_000, files=3)
    assert_a_rerun_batch_id_gives_the_same_rows(session, query, tmp_path / "ck")


def test_missing_snapshot_is_refused(spark, tmp_path):
    session, query = _counting_session(spark, tmp_path, delay_us=0, files=2)
    run_start(session, query, tmp_path / "ck")
    for path in (tmp_path / "ck" / foreach_batch.STATE_FOLDER).iterdir():
        path.unlink()
    write_micro_batches(tmp_path / "in", tables_of(SqlType.DOUBLE, delay_us=0, files=1, seed=9))
    time.sleep(0.1)
    with pytest.raises(Exception, match="no mangonel snapshot of micro-batch"):
        run_start(session, query, tmp_path / "ck")


def test_explain_and_refusals(spark, tmp_path):
    write_micro_batches(tmp_path / "in", tables_of(SqlType.DOUBLE, delay_us=0, files=1))
    session = mg.attach(spark)
    source = file_stream(spark, tmp_path / "in", "ts TIMESTAMP, k STRING, v DOUBLE")
    session.register("s", source, event_time="ts", watermark="0ms")
    query = (
        "SELECT k, window_start, SUM(v) AS s FROM s "
        "[RANGE 1 SECOND SLIDE 10 MILLISECONDS] GROUP BY k"
    )
    run_start(session, query, tmp_path / "ck")
    text = session.explain()
    assert "Spark: stage 2 on the driver under foreachBatch (reason:" in text
    assert "Stage1 batch HashAggregate (foreachBatch): group_by=[`k`, pane]" in text
    assert "Stage2 driver window operator (foreachBatch)" in text
    assert "EventTimeWatermark: column=ts" in text
    with pytest.raises(PlanError, match="count windows"):
        session.start(
            "SELECT k, COUNT(*) AS n FROM s [ROWS 10 SLIDE 5] GROUP BY k",
            Collect(),
            checkpoint_location=str(tmp_path / "ck2"),
            plan="driver",
        )


def test_start_chooses_by_cost_and_says_why(spark, tmp_path):
    """Sliding windows of Spark aggregates take the driver-side plan; tumbling windows run
    Spark's own aggregation (sql()'s plan) into the same sink, with equal rows."""
    write_micro_batches(tmp_path / "in", tables_of(SqlType.DOUBLE, delay_us=200_000, files=3))
    source = file_stream(spark, tmp_path / "in", "ts TIMESTAMP, k STRING, v DOUBLE")
    session = mg.attach(spark)
    session.register("s", source, event_time="ts", watermark="50 milliseconds")
    sliding = (
        "SELECT k, window_start, SUM(v) AS s "
        "FROM s [RANGE 1 SECOND SLIDE 100 MILLISECONDS] GROUP BY k"
    )
    run_start(session, sliding, tmp_path / "ck1", plan=None)
    assert "Spark: stage 2 on the driver under foreachBatch (reason: w/s = 10" in session.explain()
    tumbling = (
        "SELECT k, window_start, window_end, COUNT(*) AS n, SUM(v) AS sum_v "
        "FROM s [RANGE 500 MILLISECONDS] GROUP BY k"
    )
    chosen = run_start(session, tumbling, tmp_path / "ck2", plan=None).frame()
    text = session.explain()
    assert "start(): sql()'s plan (reason: Spark's own window aggregation: w/s = 1" in text
    assert "Spark: native window aggregation" in text
    driver = run_start(session, tumbling, tmp_path / "ck3").frame()
    assert_same_results(driver, chosen, ["k"])
    out = tmp_path / "out"
    run_start(session, tumbling, tmp_path / "ck4", str(out), plan="streaming")
    assert_same_results(pq.read_table(out).to_pandas(), chosen, ["k"])
    with pytest.raises(PlanError, match="plan must be"):
        session.start(tumbling, Collect(), checkpoint_location=str(tmp_path / "x"), plan="fast")


def test_median_runs_with_the_driver_arrow_stage1(spark, tmp_path):
    """A holistic function has no Spark partial: the rows go to the driver (Arrow stage 1);
    results equal Spark's median over the same micro-batches."""
    write_micro_batches(tmp_path / "in", tables_of(SqlType.DOUBLE, delay_us=200_000, files=3))
    source = file_stream(spark, tmp_path / "in", "ts TIMESTAMP, k STRING, v DOUBLE")
    session = mg.attach(spark)
    session.register("s", source, event_time="ts", watermark="100 milliseconds")
    query = (
        "SELECT k, window_start, window_end, MEDIAN(v) AS m, COUNT(*) AS n "
        "FROM s [RANGE 1 SECOND SLIDE 500 MILLISECONDS] GROUP BY k"
    )
    ours = run_start(session, query, tmp_path / "ck").frame()
    assert "driver arrow-hash-aggregate" in session.explain()
    run_start(session, query, tmp_path / "ck_chosen", plan=None)  # by default: sql()'s plan
    assert "start(): sql()'s plan (reason: holistic functions" in session.explain()
    from pyspark.sql import functions as F

    native = (
        source.withWatermark("ts", "100 milliseconds")
        .groupBy(F.window("ts", "1 second", "500 milliseconds"), "k")
        .agg(F.median("v").alias("m"), F.count(F.lit(1)).alias("n"))
        .select(
            "k",
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "m",
            "n",
        )
    )
    assert_same_results(ours, run_to_memory(native, tmp_path / "native"), ["k"])


def test_partials_wrap_order_nan_and_booleans_as_the_two_stage_plan(spark, tmp_path):
    """Spark's batch partials are the window operator's: an integer SUM that overflows
    wraps, MIN/MAX of DOUBLE with NaN and infinities in Spark's order, MIN of TIMESTAMP,
    BOOL_AND/BOOL_OR, COUNT of a column with NULLs; equal to the two-stage plan's rows."""
    import datetime

    import numpy as np

    rng = np.random.default_rng(5)
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    tables = []
    for number in range(3):
        rows = 600
        offsets = number * 300_000 + np.sort(rng.integers(0, 300_000, rows))
        big = rng.integers(2**61, 2**62, rows)
        doubles = rng.normal(size=rows)
        doubles[rng.random(rows) < 0.05] = np.nan
        doubles[rng.random(rows) < 0.03] = np.inf
        doubles[rng.random(rows) < 0.03] = -np.inf
        flags = rng.random(rows) < 0.7
        tables.append(
            pa.table(
                {
                    "ts": pa.array(
                        [start + datetime.timedelta(microseconds=int(o)) for o in offsets],
                        pa.timestamp("us", "UTC"),
                    ),
                    "k": pa.array(rng.integers(0, 3, rows)),
                    "b": pa.array(big, mask=rng.random(rows) < 0.1),
                    "d": pa.array(doubles),
                    "f": pa.array(flags, mask=rng.random(rows) < 0.1),
                }
            )
        )
    write_micro_batches(tmp_path / "in", tables)
    source = file_stream(
        spark, tmp_path / "in", "ts TIMESTAMP, k BIGINT, b BIGINT, d DOUBLE, f BOOLEAN"
    )
    query = (
        "SELECT k, window_start, window_end, SUM(b) AS sb, COUNT(b) AS nb, MIN(d) AS lo, "
        "MAX(d) AS hi, MIN(ts) AS first_ts, BOOL_AND(f) AS all_f, BOOL_OR(f) AS any_f, "
        "MAX(b) AS top FROM s [RANGE 200 MILLISECONDS SLIDE 50 MILLISECONDS] GROUP BY k"
    )
    session = mg.attach(spark, native=False)
    session.register("s", source, event_time="ts", watermark="20 milliseconds")
    ours = run_start(session, query, tmp_path / "ck").frame()
    assert "Stage1 batch HashAggregate" in session.explain()
    two_stage = run_to_memory(session.sql(query), tmp_path / "two_stage")
    assert (ours["sb"] < 0).any()  # some sums wrapped
    assert ours["hi"].isna().any() or np.isinf(ours["hi"]).any()
    assert_same_results(ours, two_stage, ["k"])


EARLY_DDL = "ts TIMESTAMP, k STRING, v DOUBLE"


def test_event_times_before_1970_give_sparks_rows_in_every_plan(spark, tmp_path):
    """Spark judges its first micro-batch against its initial watermark, 0 (the epoch): a
    window ending at or before 1970 is dropped. The native plan did so; the two-stage and
    driver-side plans started at minus infinity and emitted those windows (found by probing
    the Spark embedding)."""
    from pyspark.sql import functions

    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    times = [[-2.5, -1.7, -0.7, 0.4], [8.0]]
    batches = [
        pa.table(
            {
                "ts": pa.array(
                    [epoch + datetime.timedelta(seconds=t) for t in batch],
                    pa.timestamp("us", "UTC"),
                ),
                "k": ["a"] * len(batch),
                "v": [1.0] * len(batch),
            }
        )
        for batch in times
    ]
    write_micro_batches(tmp_path / "in", batches)
    for size, slide, native in (
        ("1 SECOND", "1 SECOND", False),
        ("1 SECOND", "300 MILLISECONDS", None),
    ):
        session = mg.attach(spark, native=native)
        session.register("s", file_stream(spark, tmp_path / "in", EARLY_DDL), event_time="ts")
        query = (
            "SELECT k, window_start, window_end, COUNT(*) AS n "
            f"FROM s [RANGE {size} SLIDE {slide}] GROUP BY k"
        )
        name = f"{size}-{slide}-{native}".replace(" ", "")
        ours = run_to_memory(session.sql(query), tmp_path / f"ck_{name}")
        own = file_stream(spark, tmp_path / "in", EARLY_DDL).withWatermark("ts", "0 seconds")
        window = functions.window("ts", size.lower(), slide.lower())
        theirs = run_to_memory(
            own.groupBy(window, "k")
            .agg(functions.count(functions.lit(1)).alias("n"))
            .select("k", "window.start", "window.end", "n")
            .withColumnRenamed("start", "window_start")
            .withColumnRenamed("end", "window_end"),
            tmp_path / f"ck_theirs_{name}",
        )
        assert_same_results(ours, theirs, ["k"])
        driver = run_start(session, query, tmp_path / f"ck_driver_{name}").frame()
        assert_same_results(driver[list(ours.columns)], theirs, ["k"])
