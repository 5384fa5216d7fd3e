"""The reader-fed driver-side plan (`start(plan="reader")`, reader_batch.py): mangonel's reader
of a declared stream feeds the driver's window operator, which computes the watermark by
Spark's rule itself (no stateful Spark operator). Its results equal Spark's own streaming
`GROUP BY window(ts, w, s), keys` with `withWatermark` over the same files (late rows,
WHERE on and off the event time, a row accepted one micro-batch after the watermark passed
its window), its late counts are Spark's rule's, and a restart loses and repeats nothing."""

from __future__ import annotations

import datetime
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from spark_harness import (
    assert_same_results,
    file_stream,
    native_window_query,
    run_to_memory,
    write_micro_batches,
)
from test_spark_foreach_batch import (
    CASES,
    RESTART_DDL,
    Collect,
    assert_a_rerun_batch_id_gives_the_same_rows,
    case_query,
    native_case_rows,
    native_restart_outputs,
    run_start,
    start_with_a_restart,
    tables_of,
)

import mangonel as mg
from mangonel.catalog.types import SqlType
from mangonel.errors import PlanError
from mangonel.runtime.spark import foreach_batch, reader_batch
from mangonel.runtime.spark.reader_offsets import FLUSHED, SourceOffsets
from mangonel.runtime.spark.reader_source import PaneStreamReader

pytestmark = pytest.mark.spark


def declared(spark, folder: Path, ddl: str, watermark: str):  # noqa: ANN001, ANN201
    session = mg.attach(spark)
    session.execute(
        f"CREATE STREAM s ({ddl}) WITH (event_time = 'ts', watermark = '{watermark}', "
        f"source = 'parquet', path = '{folder}', files_per_trigger = '1')"
    )
    return session


@pytest.mark.parametrize("case", sorted(CASES))
def test_reader_plan_equals_spark_native(spark, tmp_path, case):
    value_type, delay_us, _, _, watermark, _, _, _ = CASES[case]
    write_micro_batches(tmp_path / "in", tables_of(value_type, delay_us=delay_us))
    ddl = f"ts TIMESTAMP, k STRING, v {value_type.info.spark}"
    session = declared(spark, tmp_path / "in", ddl, watermark)
    # start()'s default over a declared stream, tumbling windows included
    sink = run_start(session, case_query(case), tmp_path / "ck", plan=None)
    assert "mangonel's reader, stage 2 on the driver" in session.explain()
    source = file_stream(spark, tmp_path / "in", ddl)
    assert_same_results(sink.frame(), native_case_rows(source, case, tmp_path / "native"), ["k"])
    # 4 files: 4 micro-batches triggered by Spark's file source; the last, with no new data
    # after it, also fires what Spark's no-data micro-batch would
    assert sorted(sink.batches) == [0, 1, 2, 3]


@pytest.mark.parametrize("placement", ["driver", "executors"])
def test_both_reader_placements_equal_spark_native(spark, tmp_path, placement):
    """The driver reads the parts itself (a local master's default, one micro-batch ahead),
    or a Spark task per part reads them (a cluster's): the same rows either way, and EXPLAIN
    says which and why."""
    case = "sliding-out-of-order-late-rows"
    value_type, delay_us, _, _, watermark, _, _, _ = CASES[case]
    write_micro_batches(tmp_path / "in", tables_of(value_type, delay_us=delay_us))
    ddl = f"ts TIMESTAMP, k STRING, v {value_type.info.spark}"
    session = declared(spark, tmp_path / "in", ddl, watermark)
    spark.conf.set(reader_batch.PLACEMENT_SETTING, placement)
    try:
        sink = run_start(session, case_query(case), tmp_path / "ck", plan="reader")
    finally:
        spark.conf.unset(reader_batch.PLACEMENT_SETTING)
    text = session.explain()
    reads = {
        "driver": "the driver, one micro-batch ahead: the parts by the stream's offsets, "
        "recorded under the checkpoint",
        "executors": "a Spark task per part",
    }
    assert f"reads={reads[placement]} ({reader_batch.PLACEMENT_SETTING}={placement})" in text
    source = {
        "driver": "binaryFile over s (a folder: Spark's file source triggers, no Python process",
        "executors": "mangonel_panes over s (its partitions read the parts)",
    }[placement]
    assert f"source={source}" in text
    source = file_stream(spark, tmp_path / "in", ddl)
    assert_same_results(sink.frame(), native_case_rows(source, case, tmp_path / "native"), ["k"])
    # the executors' source makes a flush micro-batch; the driver fires it in the last one
    assert sorted(sink.batches) == list(range(5 if placement == "executors" else 4))
    if placement == "driver":  # micro-batches 1-3 were read while the one before ran
        reader = session._driver_queries[next(reversed(session._driver_queries))].driver_reader  # noqa: SLF001
        assert (reader.ahead.hits, reader.ahead.misses) == (3, 1)
        # the stopped query's reader was closed (Spark's listener bus tells it: not at once)
        deadline = time.monotonic() + 30
        while reader.ahead._pool is not None and time.monotonic() < deadline:  # noqa: SLF001
            time.sleep(0.1)
        assert reader.ahead._pool is None  # noqa: SLF001


@pytest.mark.parametrize("placement", ["driver", "executors"])
def test_an_unreadable_file_fails_the_query_naming_it_after_the_good_ones(
    spark, tmp_path, placement
):
    """A file that is not Parquet stops the stream (as Spark's file source does) with an
    error naming the file, in the micro-batch that would read it: the driver's read ahead of
    that micro-batch does not fail the one before it."""
    write_micro_batches(tmp_path / "in", tables_of(SqlType.DOUBLE, delay_us=0, files=2))
    (tmp_path / "in" / "part-00009.parquet").write_bytes(b"not a Parquet file")
    session = declared(spark, tmp_path / "in", "ts TIMESTAMP, k STRING, v DOUBLE", "0ms")
    query = "SELECT k, window_start, COUNT(*) AS n FROM s [RANGE 1 SECOND] GROUP BY k"
    sink = Collect()
    spark.conf.set(reader_batch.PLACEMENT_SETTING, placement)
    try:
        with pytest.raises(Exception, match=r"part-00009\.parquet: not a readable Parquet file"):
            run_start(session, query, tmp_path / "ck", sink, plan="reader")
    finally:
        spark.conf.unset(reader_batch.PLACEMENT_SETTING)
    assert sorted(sink.batches) == [0, 1]  # both good files' micro-batches ran


def test_reader_placement_default_and_a_bad_setting(spark):
    assert reader_batch.reader_placement(spark)[0] == "driver"  # the tests' master is local
    assert "local" in reader_batch.reader_placement(spark)[1]
    spark.conf.set(reader_batch.PLACEMENT_SETTING, "nowhere")
    try:
        with pytest.raises(PlanError, match="must be 'driver' or 'executors', not 'nowhere'"):
            reader_batch.reader_placement(spark)
    finally:
        spark.conf.unset(reader_batch.PLACEMENT_SETTING)


def _at(seconds: float) -> datetime.datetime:
    return datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(seconds=seconds)


def _rows(times: list[float], key: str = "a") -> pa.Table:
    return pa.table(
        {
            "ts": pa.array([_at(t) for t in times], pa.timestamp("us", "UTC")),
            "k": pa.array([key] * len(times)),
            "v": pa.array([1.0] * len(times)),
        }
    )


def _native_counts(spark, folder: Path, ddl: str):  # noqa: ANN001, ANN202
    """Spark's own COUNT(*) per key over 1 s tumbling windows of `folder`, delay 0."""
    return native_window_query(
        file_stream(spark, folder, ddl),
        event_time="ts",
        delay="0 milliseconds",
        size="1 second",
        slide="1 second",
        keys=["k"],
        aggregates=[("COUNT(*)", None, "n")],
    )


def _counts_equal_sparks(spark, tmp_path):  # noqa: ANN001, ANN202
    """COUNT(*) per key over 1 s tumbling windows of the files in `tmp_path / "in"`, through
    the reader-fed plan (delay 0), checked equal to Spark's own: (rows, sink, function)."""
    ddl = "ts TIMESTAMP, k STRING, v DOUBLE"
    session = declared(spark, tmp_path / "in", ddl, "0ms")
    query = "SELECT k, window_start, window_end, COUNT(*) AS n FROM s [RANGE 1 SECOND] GROUP BY k"
    planned = session._spark_plan(session.session.sql(query))  # noqa: SLF001
    sink = Collect()
    streaming, _, function = reader_batch.start(spark, planned, "test", sink, str(tmp_path / "ck"))
    try:
        streaming.processAllAvailable()
    finally:
        streaming.stop()
    ours = sink.frame()
    native = _native_counts(spark, tmp_path / "in", ddl)
    assert_same_results(ours, run_to_memory(native, tmp_path / "native"), ["k"])
    return ours, sink, function


def test_a_row_behind_the_watermark_by_one_micro_batch_counts_as_in_spark(spark, tmp_path):
    """Micro-batch 0 moves the watermark to 5.5 s; micro-batch 1 holds a row at 4.5 s, whose
    window [4 s, 5 s) ended at or before that watermark. Spark judges micro-batch 1's rows
    against the watermark before micro-batch 0 (0) and emits [4 s, 5 s) with it; firing
    every window up to 5.5 s right after micro-batch 0 would have lost it. A row at 3.5 s in
    micro-batch 2 is late (its window ended before micro-batch 1's watermark): dropped and
    counted."""
    tables = [_rows([5.5]), _rows([4.5, 6.2]), _rows([3.5, 7.1])]
    write_micro_batches(tmp_path / "in", tables)
    ours, sink, function = _counts_equal_sparks(spark, tmp_path)
    starts = sorted(ours["window_start"].dt.second)
    assert starts == [4, 5, 6] and function.late_tuples == 1
    # W after micro-batch 2 is 7.1 s, and no file follows: [6 s, 7 s) fires in micro-batch 2
    # after [5 s, 6 s), where Spark fires it in its no-data micro-batch 3
    assert sorted(sink.batches) == [0, 1, 2]
    assert sink.batches[2].column("window_start").to_pylist() == [_at(5), _at(6)]


def test_a_file_after_idle_is_judged_as_spark_judges_it_after_its_no_data_batch(spark, tmp_path):
    """A running query goes idle after [4.5 s, 5.5 s): its micro-batch fires [4 s, 5 s) at
    W = 5.5 s itself, where Spark fires it in a no-data micro-batch. A file that lands then
    is judged against 5.5 s in both: its 4.7 s row is late, its 6.5 s row counts."""
    ddl = "ts TIMESTAMP, k STRING, v DOUBLE"
    query = "SELECT k, window_start, window_end, COUNT(*) AS n FROM s [RANGE 1 SECOND] GROUP BY k"
    write_micro_batches(tmp_path / "in", [_rows([4.5, 5.5])])
    session = declared(spark, tmp_path / "in", ddl, "0ms")
    planned = session._spark_plan(session.session.sql(query))  # noqa: SLF001
    sink = Collect()
    streaming, _, function = reader_batch.start(spark, planned, "test", sink, str(tmp_path / "ck"))
    try:
        streaming.processAllAvailable()
        assert sink.batches[0].column("window_start").to_pylist() == [_at(4)]
        write_micro_batches(tmp_path / "in", [_rows([4.7, 6.5])])
        streaming.processAllAvailable()
    finally:
        streaming.stop()
    assert sorted(sink.batches) == [0, 1] and function.late_tuples == 1
    write_micro_batches(tmp_path / "native_in", [_rows([4.5, 5.5])])
    native = _native_counts(spark, tmp_path / "native_in", ddl)
    name = "idle_native"
    running = (
        native.writeStream.format("memory")
        .queryName(name)
        .outputMode("append")
        .option("checkpointLocation", str(tmp_path / "native_ck"))
        .start()
    )
    try:
        running.processAllAvailable()
        write_micro_batches(tmp_path / "native_in", [_rows([4.7, 6.5])])
        running.processAllAvailable()
    finally:
        running.stop()
    native_rows = spark.table(name).toPandas()
    spark.catalog.dropTempView(name)
    assert_same_results(sink.frame(), native_rows, ["k"])
    assert sorted(native_rows["window_start"].dt.second) == [4, 5]


def test_a_rerun_batch_id_reads_the_parts_it_recorded(spark, tmp_path):
    """Where Spark's file source triggers, the driver records a micro-batch's parts under
    the checkpoint before reading them. Micro-batch 1 fails in the sink after a file named
    between the two read lands; its re-run reads what it read the first time, and the new
    file, named before the last file read, is never read (files are read in name order)."""
    folder = tmp_path / "in"
    folder.mkdir()
    pq.write_table(_rows([1.5]), folder / "part-00000.parquet")
    pq.write_table(_rows([2.5, 3.5]), folder / "part-00002.parquet")
    session = declared(spark, folder, "ts TIMESTAMP, k STRING, v DOUBLE", "0ms")
    query = "SELECT k, window_start, COUNT(*) AS n FROM s [RANGE 1 SECOND] GROUP BY k"
    seen: list[tuple[int, pa.Table]] = []

    def flaky(table: pa.Table, batch_id: int) -> None:
        seen.append((batch_id, table))
        if batch_id == 1 and len([b for b, _ in seen if b == 1]) == 1:
            pq.write_table(_rows([2.2] * 5), folder / "part-00001.parquet")
            raise RuntimeError("sink failed once")

    with pytest.raises(Exception, match="sink failed once"):
        run_start(session, query, tmp_path / "ck", flaky, plan="reader")
    run_start(session, query, tmp_path / "ck", flaky, plan="reader")
    reruns = [table for batch_id, table in seen if batch_id == 1]
    assert len(reruns) == 2 and reruns[0].equals(reruns[1])
    last = dict(seen)  # each batch id's rows as finally written
    assert sorted(last) == [0, 1, 2]  # 2: Spark's micro-batch for the new file, none read
    rows = pa.concat_tables([last[batch_id] for batch_id in sorted(last)]).to_pydict()
    assert rows["window_start"] == [_at(1), _at(2)] and rows["n"] == [1, 1]


def test_restart_from_checkpoint_equals_spark_native_restarted(spark, tmp_path):
    tables = tables_of(SqlType.DOUBLE, delay_us=1_500_000, files=5)
    _, native_restarted = native_restart_outputs(spark, tmp_path / "native", tables)
    sessions: list = []  # one session for both runs, declared once the folder has files

    def session_of(folder: Path):  # noqa: ANN202
        if not sessions:
            sessions.append(declared(spark, folder, RESTART_DDL, "100ms"))
        return sessions[0]

    restarted = start_with_a_restart(session_of, tmp_path, tables, plan="reader")
    assert_same_results(restarted, native_restarted, ["k"])


def test_rerun_batch_id_gives_the_same_rows(spark, tmp_path):
    write_micro_batches(tmp_path / "in", tables_of(SqlType.DOUBLE, delay_us=200_000, files=3))
    session = declared(spark, tmp_path / "in", "ts TIMESTAMP, k STRING, v DOUBLE", "0ms")
    query = "SELECT k, window_start, COUNT(*) AS n FROM s [RANGE 500 MILLISECONDS] GROUP BY k"
    assert_a_rerun_batch_id_gives_the_same_rows(session, query, tmp_path / "ck", plan="reader")


def test_flush_offsets(tmp_path):
    """After data, an idle source's next offset marks it flushed (a micro-batch with no
    partitions), once; new data comes first."""
    write_micro_batches(tmp_path / "in", [_rows([1.0]), _rows([2.0])])
    offsets = SourceOffsets("parquet", str(tmp_path / "in"), flush=True)
    reader = PaneStreamReader({"spec": "", "offsets": offsets.encode()})
    start = reader.initialOffset()
    assert start[FLUSHED] and reader.latestOffset(start) != start
    first = reader.latestOffset(start)
    second = reader.latestOffset(first)
    assert not first[FLUSHED] and not second[FLUSHED] and second["file"] > first["file"]
    assert len(reader.partitions(first, second)) == 1
    flushed = reader.latestOffset(second)
    assert flushed == {"file": second["file"], FLUSHED: True}
    assert reader.partitions(second, flushed) == []
    assert reader.latestOffset(flushed) == flushed  # idle: no micro-batch
    generated = SourceOffsets("generator", flush=True, tuples=250, batch_size=100, splits=2)
    reader = PaneStreamReader({"spec": "", "offsets": generated.encode()})
    offsets = [reader.initialOffset()]
    while len(offsets) < 6:
        offsets.append(reader.latestOffset(offsets[-1]))
    assert [o["tuples"] for o in offsets] == [0, 100, 200, 250, 250, 250]
    assert [o[FLUSHED] for o in offsets] == [True, False, False, False, True, True]
    assert reader.partitions(offsets[1], offsets[2]) and not reader.partitions(*offsets[3:5])


def test_choice_explain_and_refusals(spark, tmp_path):
    write_micro_batches(tmp_path / "in", tables_of(SqlType.DOUBLE, delay_us=0, files=1))
    ddl = "ts TIMESTAMP, k STRING, v DOUBLE"
    session = declared(spark, tmp_path / "in", ddl, "0ms")
    query = (
        "SELECT k, window_start, SUM(v) AS s FROM s [RANGE 1 SECOND SLIDE 100 MILLISECONDS] "
        "GROUP BY k"
    )
    run_start(session, query, tmp_path / "ck", plan="reader")
    text = session.explain()
    assert "mangonel's reader, stage 2 on the driver" in text
    assert "Stage1 Spark file source (foreachBatch)" in text
    median = "SELECT k, window_start, MEDIAN(v) AS m FROM s [RANGE 1 SECOND] GROUP BY k"
    with pytest.raises(PlanError, match="holistic"):
        run_start(session, median, tmp_path / "ck2", plan="reader")
    registered = mg.attach(spark)
    registered.register("s", file_stream(spark, tmp_path / "in", ddl), event_time="ts")
    with pytest.raises(PlanError, match="registered DataFrame"):
        run_start(registered, query, tmp_path / "ck3", plan="reader")
    planned = registered._spark_plan(registered.session.sql(query))  # noqa: SLF001
    assert foreach_batch.choose_start(planned)[0] == "driver"
    # a declared stream: the reader-fed plan by default, also on tumbling windows, where
    # sql() plans Spark's own aggregation (faster there only in its first micro-batches);
    # plan= forces the others
    planned = session._spark_plan(session.session.sql(query))  # noqa: SLF001
    kind, reason = foreach_batch.choose_start(planned)
    assert kind == "reader" and "w/s = 10 over a stream mangonel reads" in reason
    assert "instead of Spark's own" not in reason
    assert foreach_batch.choose_start(planned, "driver")[0] == "driver"
    tumbling = "SELECT k, window_start, SUM(v) AS s FROM s [RANGE 1 SECOND] GROUP BY k"
    planned = session._spark_plan(session.session.sql(tumbling))  # noqa: SLF001
    assert planned.native
    kind, reason = foreach_batch.choose_start(planned)
    assert kind == "reader" and "w/s = 1 over a stream mangonel reads" in reason
    assert "instead of Spark's own window aggregation (w/s = 1" in reason
    assert foreach_batch.choose_start(planned, "streaming")[0] == "streaming"
    # a session window: no panes for the reader, so Spark's own session_window aggregation
    sessions = "SELECT k, window_start, SUM(v) AS s FROM s [SESSION GAP 1 SECOND] GROUP BY k"
    planned = session._spark_plan(session.session.sql(sessions))  # noqa: SLF001
    assert foreach_batch.choose_start(planned)[0] == "streaming"


@pytest.mark.parametrize("source", ["generator", "csv"])
def test_generator_and_csv_streams_take_the_reader_fed_plan_and_equal_spark(
    spark, tmp_path, source
):
    """start()'s default over the other sources mangonel reads: equal to Spark's own
    aggregation over the stream's Spark source (CSV: mangonel parses it, so the files hold
    only well-formed rows here)."""
    ddl = "ts TIMESTAMP, k STRING, v DOUBLE"
    if source == "generator":
        options = (
            "source = 'generator', tuples = '12000', rate = '10000', keys = '4', "
            "delay = '50 milliseconds', rows_per_batch = '4000', seed = '3'"
        )
    else:
        folder = tmp_path / "in"
        folder.mkdir()
        for number, table in enumerate(tables_of(SqlType.DOUBLE, delay_us=300_000, files=3)):
            table.to_pandas().to_csv(folder / f"part-{number:05d}.csv", index=False)
        options = f"source = 'csv', path = '{folder}', files_per_trigger = '1'"
    session = mg.attach(spark)
    session.execute(
        f"CREATE STREAM s ({ddl}) WITH (event_time = 'ts', watermark = '100 milliseconds', "
        f"{options})"
    )
    query = (
        "SELECT k, window_start, window_end, COUNT(*) AS n, SUM(v) AS s "
        "FROM s [RANGE 500 MILLISECONDS SLIDE 100 MILLISECONDS] GROUP BY k"
    )
    ours = run_start(session, query, tmp_path / "ck", plan=None).frame()
    assert "mangonel's reader, stage 2 on the driver (reason: w/s = 5" in session.explain()
    native = native_window_query(
        session._frames["s"],  # noqa: SLF001
        event_time="ts",
        delay="100 milliseconds",
        size="500 milliseconds",
        slide="100 milliseconds",
        keys=["k"],
        aggregates=[("COUNT(*)", None, "n"), ("SUM", "v", "s")],
    )
    assert len(ours) > 0
    assert_same_results(ours, run_to_memory(native, tmp_path / "native"), ["k"])


def test_event_times_before_1970_are_judged_against_sparks_initial_watermark(spark, tmp_path):
    """The reader-fed plan's first micro-batch starts at Spark's watermark 0 (the epoch):
    windows ending at or before 1970 are late, as in Spark's own aggregation (the operator
    started at minus infinity and emitted them)."""
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    early = pa.table(
        {
            "ts": pa.array(
                [epoch + datetime.timedelta(seconds=t) for t in (-2.5, -0.7, 0.4)],
                pa.timestamp("us", "UTC"),
            ),
            "k": ["a"] * 3,
            "v": [1.0] * 3,
        }
    )
    later = early.set_column(
        0, "ts", pa.array([epoch + datetime.timedelta(seconds=5)] * 3, pa.timestamp("us", "UTC"))
    )
    write_micro_batches(tmp_path / "in", [early, later])  # the second moves W past [0 s, 1 s)
    ours, sink, function = _counts_equal_sparks(spark, tmp_path)
    assert list(ours["n"]) == [1] and function.late_tuples == 2
