"""Restart from checkpoint, malformed input, the generator source, DDL sources, EXPLAIN."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from spark_harness import (
    DDL,
    SCHEMA,
    assert_equals_native,
    assert_restart_lost_and_duplicated_nothing,
    assert_same_results,
    canonical,
    file_stream,
    generated_tables,
    mangonel_select,
    outputs_with_and_without_a_restart,
    write_micro_batches,
)

import mangonel as mg
from mangonel.errors import CatalogError

pytestmark = pytest.mark.spark

AGGREGATES = [("COUNT(*)", None, "n"), ("SUM", "v", "s"), ("STDDEV_SAMP", "v", "sd")]
QUERY = (
    f"SELECT k, window_start, window_end, {mangonel_select(AGGREGATES)} "
    "FROM s [RANGE 1 SECOND SLIDE 250 MILLISECONDS] GROUP BY k"
)


def tables(files: int, rows: int = 2000, delay_us: int = 100_000) -> list[pa.Table]:
    return generated_tables(
        SCHEMA, files=files, rows=rows, keys=3, delay_us=delay_us, seed=7, null_fraction=0.05
    )


def test_restart_from_checkpoint_loses_and_duplicates_nothing(spark, tmp_path):
    def registered(folders, restarted):
        session = mg.attach(spark)
        frame = file_stream(spark, folders["s"], DDL)
        session.register("s", frame, event_time="ts", watermark="200 milliseconds")
        return session.sql(QUERY)

    # four micro-batches (1 s of event time); the restarted run stops after two
    outputs = outputs_with_and_without_a_restart(spark, tmp_path, {"s": tables(4)}, 2, registered)
    assert_restart_lost_and_duplicated_nothing(*outputs, ["k"])


def test_malformed_csv_null_timestamps_and_empty_micro_batches(spark, tmp_path):
    """Unparsable values read as NULL (Spark's PERMISSIVE CSV): a NULL value is skipped by
    the aggregates, a NULL event time drops the row; an empty file is an empty micro-batch.
    The query keeps running and equals Spark's own aggregation of the same stream."""
    folder = tmp_path / "csv"
    folder.mkdir()
    good = tables(2, rows=1500)
    good[0].to_pandas().to_csv(folder / "part-00000.csv", index=False)
    malformed = good[1].to_pandas().astype({"v": object, "ts": object})
    malformed.loc[::7, "v"] = "not a number"
    malformed.loc[::11, "ts"] = "not a time"
    malformed.loc[::13, "ts"] = None
    malformed.to_csv(folder / "part-00001.csv", index=False)
    (folder / "part-00002.csv").write_text("ts,k,v\n")  # an empty micro-batch
    later = tables(3, rows=1500)[2].to_pandas()
    later.to_csv(folder / "part-00003.csv", index=False)

    session = mg.attach(spark)
    session.execute(
        f"CREATE STREAM s ({DDL}) WITH (event_time = 'ts', watermark = '200 milliseconds', "
        f"source = 'csv', path = '{folder}', files_per_trigger = '1')"
    )
    ours = session.sql(QUERY)
    assert_equals_native(
        ours,
        tmp_path,
        session._frames["s"],
        event_time="ts",
        delay="200 milliseconds",
        size="1 second",
        slide="250 milliseconds",
        keys=["k"],
        aggregates=AGGREGATES,
    )


def test_generator_source_from_ddl(spark, tmp_path):
    session = mg.attach(spark)
    session.execute(
        "CREATE STREAM trades (ts TIMESTAMP, symbol STRING, price DOUBLE, volume BIGINT) "
        "WITH (event_time = 'ts', watermark = '100 milliseconds', source = 'generator', "
        "tuples = '12000', rate = '10000', keys = '4', delay = '50 milliseconds', "
        "rows_per_batch = '4000', seed = '3')"
    )
    ours = session.sql(
        "SELECT symbol, window_start, window_end, COUNT(*) AS n, AVG(price) AS avg_price "
        "FROM trades [RANGE 500 MILLISECONDS SLIDE 100 MILLISECONDS] WHERE volume > 0 "
        "GROUP BY symbol"
    )
    result = assert_equals_native(
        ours,
        tmp_path,
        session._frames["trades"],
        event_time="ts",
        delay="100 milliseconds",
        size="500 milliseconds",
        slide="100 milliseconds",
        keys=["symbol"],
        aggregates=[("COUNT(*)", None, "n"), ("AVG", "price", "avg_price")],
        where="volume > 0",
    )
    assert set(result["symbol"]) == {"k0", "k1", "k2", "k3"}
    # every tuple of every fired window was generated: counts add up per window
    assert canonical(result, ["symbol"])["n"].min() > 0


def test_generator_rows_do_not_depend_on_micro_batch_boundaries():
    from mangonel.runtime.spark.schema import schema_ddl
    from mangonel.runtime.spark.sources import CHUNK_ROWS, columns_option, read_generator_rows

    options = {
        "schema": schema_ddl(SCHEMA),
        "columns": columns_option(SCHEMA),
        "event_time": "ts",
        "tuples": str(3 * CHUNK_ROWS),
        "keys": "5",
        "seed": "9",
        "delay": "1000 microseconds",
    }
    cut = CHUNK_ROWS + 123
    whole = [*read_generator_rows(options, CHUNK_ROWS, 2 * CHUNK_ROWS)]
    split = [
        *read_generator_rows(options, CHUNK_ROWS, cut),
        *read_generator_rows(options, cut, 2 * CHUNK_ROWS),
    ]
    assert pa.Table.from_batches(whole).equals(pa.Table.from_batches(split))
    again = pa.Table.from_batches([*read_generator_rows(options, CHUNK_ROWS, 2 * CHUNK_ROWS)])
    assert again.equals(pa.Table.from_batches(whole))
    assert pc.min(again["ts"]).as_py() is not None


def test_explain_shows_mangonel_plan_and_spark_stages(spark, tmp_path):
    write_micro_batches(tmp_path / "in", tables(1))
    session = mg.attach(spark)
    session.register(
        "s", file_stream(spark, tmp_path / "in", DDL), event_time="ts", watermark="200 milliseconds"
    )
    session.sql(QUERY)
    text = session.explain()
    lines = text.splitlines()
    assert lines[0].startswith("Project: ")
    assert any(
        line.strip().startswith("WindowAggregate: window=time range=1s slide=250ms")
        for line in lines
    )
    assert "Spark:" in lines
    assert any("Stage2 applyInPandasWithState: key=pmod(hash(`k`), 4)" in line for line in lines)
    assert any("Stage1 mapInArrow: preaggregate=arrow-hash-aggregate" in line for line in lines)
    assert any("EventTimeWatermark: column=ts delay=200ms" in line for line in lines)
    assert session.explain(QUERY) == text
    assert session.sql("EXPLAIN " + QUERY).startswith(text)


def test_register_rejects_unsupported_column_types(spark, tmp_path):
    frame = spark.readStream.schema("id BIGINT, items ARRAY<INT>").parquet(str(tmp_path))
    with pytest.raises(CatalogError, match="items"):
        mg.attach(spark).register("bad", frame, event_time="id")


def test_register_refuses_a_batch_dataframe_and_register_table_a_streaming_one(spark, tmp_path):
    batch = spark.createDataFrame([], DDL)
    session = mg.attach(spark)
    with pytest.raises(CatalogError, match="'s' is a batch DataFrame"):
        session.register("s", batch, event_time="ts")
    assert session.catalog.stream("s") is None
    with pytest.raises(CatalogError, match="'t' is a streaming DataFrame"):
        session.register_table("t", spark.readStream.schema(DDL).parquet(str(tmp_path)))


def test_the_embedding_names_arguments_it_cannot_use(spark, tmp_path):
    """Found by probing bad inputs: something other than a DataFrame failed on a missing
    attribute; a TIMESTAMP_NTZ event time planned and failed inside Spark at sql() (any other
    TIMESTAMP_NTZ column came back retyped as TIMESTAMP); a
    stream replaced by DDL kept the old DataFrame, read with the new types (silently wrong
    sums); start() took a sink or a checkpoint it could not use and failed in the first
    micro-batch; a missing path came as Spark's AnalysisException."""
    from mangonel.errors import PlanError

    session = mg.attach(spark)
    for method, given in (("register", None), ("register_table", [1, 2])):
        with pytest.raises(CatalogError, match=rf"{method}\('x', \.\.\.\) takes a pyspark"):
            if method == "register":
                session.register("x", given, event_time="ts")
            else:
                session.register_table("x", given)
    naive = spark.readStream.schema("ts TIMESTAMP_NTZ, v DOUBLE").parquet(str(tmp_path))
    with pytest.raises(CatalogError, match="event_time 'ts' of 'n' is TIMESTAMP_NTZ"):
        session.register("n", naive, event_time="ts")
    # any other TIMESTAMP_NTZ column came back as a TIMESTAMP (MAX(t2) of 13:00 in New York
    # was the instant 17:00 UTC where Spark's own MAX keeps the local 13:00)
    other = spark.readStream.schema("ts TIMESTAMP, t2 TIMESTAMP_NTZ, v DOUBLE").parquet(
        str(tmp_path)
    )
    with pytest.raises(CatalogError, match="column 't2' of 'o' is TIMESTAMP_NTZ"):
        session.register("o", other, event_time="ts")
    with pytest.raises(CatalogError, match="column 't2' of 'ot' is TIMESTAMP_NTZ"):
        session.register_table("ot", spark.createDataFrame([], "k BIGINT, t2 TIMESTAMP_NTZ"))
    assert session.catalog.stream("o") is None and session.catalog.table("ot") is None
    frame = spark.readStream.schema(DDL).parquet(str(tmp_path))
    session.register("s", frame, event_time="ts")
    replaced = DDL.replace("v DOUBLE", "v BIGINT")
    session.execute(f"CREATE OR REPLACE STREAM s ({replaced}) WITH (event_time = 'ts')")
    with pytest.raises(CatalogError, match="has no Spark DataFrame behind it"):
        session.sql("SELECT window_start, COUNT(*) AS n FROM s [RANGE 1 SECOND]")
    session.register("s", frame, event_time="ts", replace=True)
    query = "SELECT window_start, COUNT(*) AS n FROM s [RANGE 1 SECOND]"
    with pytest.raises(PlanError, match="sink must be a directory path or a callable"):
        session.start(query, 42, checkpoint_location=str(tmp_path / "ck"))
    with pytest.raises(PlanError, match="checkpoint_location must be a directory path"):
        session.start(query, str(tmp_path / "out"), checkpoint_location=None)
    with pytest.raises(CatalogError, match="path = '.*nowhere' does not exist"):
        session.execute(
            f"CREATE STREAM p ({DDL}) WITH (event_time = 'ts', source = 'parquet', "
            f"path = '{tmp_path / 'nowhere'}')"
        )
    assert session.catalog.stream("p") is None


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("keys = 'many'", "option keys = 'many' must be a positive whole number"),
        ("rate = '0'", r"option rate = '0' is out of range \(generator rate must be positive"),
        ("delay = 'soon'", "option delay = 'soon' must be a duration"),
        (
            "null_fraction = '1.5'",
            r"null_fraction = '1.5' is out of range \(generator null_fraction must be in \[0, 1\)",
        ),
        ("key_columns = 'nope'", "key_columns names 'nope'"),
    ],
)
def test_bad_generator_options_fail_at_create_stream(spark, option, message):
    session = mg.attach(spark)
    with pytest.raises(CatalogError, match=message):
        session.execute(
            f"CREATE STREAM g ({DDL}) WITH (event_time = 'ts', source = 'generator', {option})"
        )
    assert session.catalog.stream("g") is None  # not half-declared: the DDL can be retried


def test_stream_without_spark_source_is_a_clear_error(spark):
    session = mg.attach(spark)
    session.execute(f"CREATE STREAM s ({DDL}) WITH (event_time = 'ts')")
    with pytest.raises(CatalogError, match="no Spark DataFrame"):
        session.sql(QUERY)


def test_late_rows_of_session_windows_plan_the_per_tuple_stages(spark, tmp_path):
    """Session windows with `late_rows=` leave Spark's own aggregation, which drops late rows
    unseen, for the per-tuple stages (their rows and results: test_spark_late_rows.py);
    `explain()` before any query says there is none."""
    from mangonel.errors import PlanError

    write_micro_batches(tmp_path / "in", tables(1))
    session = mg.attach(spark)
    session.register("s", file_stream(spark, tmp_path / "in", DDL), event_time="ts")
    with pytest.raises(PlanError, match="no query yet"):
        session.explain()
    session.sql(
        "SELECT k, COUNT(*) AS n FROM s [SESSION GAP 1 SECOND] GROUP BY k",
        late_rows=str(tmp_path / "late"),
    )
    assert not session.last_plan.native and session.last_plan.stage1 == "kernels"
    assert "rows=per-tuple partials" in session.explain()
    assert "Stage1 mapInArrow" in session.sql("explain codegen " + QUERY)


def test_kafka_source_without_the_connector_says_what_to_add(spark):
    session = mg.attach(spark)
    with pytest.raises(CatalogError, match="spark-sql-kafka"):
        session.execute(
            f"CREATE STREAM events ({DDL}) WITH (event_time = 'ts', source = 'kafka', "
            "bootstrap_servers = 'localhost:9092', topic = 'events')"
        )
    assert session.catalog.stream("events") is None  # not half-declared: the DDL can be retried


def test_register_refuses_a_dataframe_that_already_has_a_watermark(spark, tmp_path):
    write_micro_batches(tmp_path / "in", tables(1))
    frame = file_stream(spark, tmp_path / "in", DDL).withWatermark("ts", "1 second")
    with pytest.raises(CatalogError, match="already has a watermark"):
        mg.attach(spark).register("s", frame, event_time="ts")


def test_benchmark_shape_reports_the_chosen_plan_and_the_native_plans_rows(spark):
    """`mangonel bench --spark` on a tiny input: tumbling windows run natively over both
    the declared Parquet stream and the registered DataFrame; sliding ones run two stages
    after Spark's Parquet reader over both; all, and the driver-side plans (with the tick,
    and reader-fed), give Spark's native streaming aggregation's rows."""
    from mangonel.runtime.spark.bench import SparkShape, measure_shape

    for shape, plans in (
        (SparkShape(100_000, 100_000, keys=5), ("native", "native")),
        (SparkShape(100_000, 20_000, keys=5), ("two-stage", "two-stage")),
    ):
        kept: list = []
        result = measure_shape(spark, shape, 4000, 20_000, 2000, 3, keep=kept)
        assert (result.plan, result.dataframe_plan) == plans
        assert result.dataframe_tuples_per_second > 0
        ours, native, frame, driver, reader = kept
        native = native.rename(columns={"start": "window_start", "end": "window_end"})
        assert_same_results(ours, native, ["key"])
        assert_same_results(frame, native, ["key"])
        assert_same_results(driver, native, ["key"])  # the driver-side plan (ms.start)
        assert_same_results(reader, native, ["key"])  # start(plan="reader")
        assert result.rows_out == result.spark_rows_out == result.driver_rows == len(native)
        assert result.reader_rows == len(native)
