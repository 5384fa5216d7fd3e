"""Window joins inside Spark: equal to Spark's own stream-stream (and stream-static) join of
`window()` on both sides fed the same micro-batches, materialised rows, restart from a
checkpoint."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F
from spark_harness import (
    assert_restart_lost_and_duplicated_nothing,
    assert_same_results,
    file_stream,
    outputs_with_and_without_a_restart,
    run_to_memory,
    write_micro_batches,
)

import mangonel as mg

pytestmark = pytest.mark.spark

LEFT_DDL = "ts TIMESTAMP, k BIGINT, v DOUBLE, big BIGINT"
RIGHT_DDL = "ts TIMESTAMP, k INT, w DOUBLE"  # INT against BIGINT: both must hash alike
DELAY = "200 milliseconds"
EPOCH = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def side_tables(files: int, seed: int, value: str, key_type: pa.DataType) -> list[pa.Table]:
    """In-order micro-batches: file i covers [2i, 2i + 2) seconds, timestamps increasing, so
    no row is late; keys 0..5."""
    tables = []
    step = 37 + seed  # ms between rows, so the two streams interleave differently
    for file in range(files):
        start = file * 2000
        times = list(range(start + seed, start + 2000, step))
        ts = [EPOCH + dt.timedelta(milliseconds=t) for t in times]
        # NULL keys on the right (they match nothing)
        keys = [None if seed and t % 13 == 0 else (t * 7 + seed) % 6 for t in times]
        values = [float((t * 13) % 101) / 4 for t in times]
        columns = {
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "k": pa.array(keys, key_type),
            value: pa.array(values, pa.float64()),
        }
        if not seed:  # BIGINTs above 2^53 and NULLs: exact through the Python callback
            big = [None if t % 11 == 0 else 2**60 + t * 1000 + 1 for t in times]
            columns["big"] = pa.array(big, pa.int64())
        tables.append(pa.table(columns))
    return tables


def sides(files: int) -> tuple[list[pa.Table], list[pa.Table]]:
    return side_tables(files, 0, "v", pa.int64()), side_tables(files, 11, "w", pa.int32())


def write_streams(tmp_path, files: int = 3) -> None:
    left, right = sides(files)
    write_micro_batches(tmp_path / "a", left)
    write_micro_batches(tmp_path / "b", right)


def attach(spark, tmp_path, **options) -> mg.SparkMangonelSession:
    session = mg.attach(spark, **options)
    for name, ddl in (("a", LEFT_DDL), ("b", RIGHT_DDL)):
        frame = file_stream(spark, tmp_path / name, ddl)
        session.register(name, frame, event_time="ts", watermark=DELAY)
    return session


def window_clause(size: str, slide: str) -> str:
    return f"[RANGE {size} SLIDE {slide}]"


def native_join_aggregate(spark, tmp_path, size: str, slide: str, summed):  # noqa: ANN001, ANN201
    """Spark's own join aggregation per (key, window): n = COUNT(*), s = SUM(`summed`),
    m = MAX(w), as k, window_start, window_end, n, s, m rows."""
    joined = spark_window_join(spark, tmp_path, size, slide)
    return aggregate_natively(joined, tmp_path, summed, "w")


def aggregate_natively(joined, tmp_path, summed, maximum: str):  # noqa: ANN001, ANN201
    """Spark's own aggregation of joined rows (window `lw`, key `lk`) per (key, window):
    n = COUNT(*), s = SUM(`summed`), m = MAX(`maximum`)."""
    native = joined.groupBy("lw", "lk").agg(
        F.count(F.lit(1)).alias("n"), F.sum(summed).alias("s"), F.max(maximum).alias("m")
    )
    return run_to_memory(
        native.select(
            F.col("lk").alias("k"),
            F.col("lw.start").alias("window_start"),
            F.col("lw.end").alias("window_end"),
            "n",
            "s",
            "m",
        ),
        tmp_path / "ck_theirs",
    )


def spark_window_join(spark, tmp_path, size: str, slide: str):
    """Spark's own: window() on both sides, join on key and window."""
    a = file_stream(spark, tmp_path / "a", LEFT_DDL).withWatermark("ts", DELAY)
    b = file_stream(spark, tmp_path / "b", RIGHT_DDL).withWatermark("ts", DELAY)
    a = a.select(F.window("ts", size, slide).alias("lw"), F.col("k").alias("lk"), "v", "big")
    b = b.select(F.window("ts", size, slide).alias("rw"), F.col("k").alias("rk"), "w")
    return a.join(b, (F.col("lk") == F.col("rk")) & (F.col("lw") == F.col("rw")))


@pytest.mark.parametrize(
    ("size", "slide"), [("1 second", "1 second"), ("1 second", "250 milliseconds")]
)
def test_aggregated_join_equals_sparks_stream_stream_join(spark, tmp_path, size, slide):
    write_streams(tmp_path)
    session = attach(spark, tmp_path)
    clause = window_clause(size.upper(), slide.upper())
    ours = run_to_memory(
        session.sql(
            f"SELECT l.k AS k, window_start, window_end, COUNT(*) AS n, SUM(l.v * r.w) AS s, "
            f"MAX(r.w) AS m FROM a {clause} AS l JOIN b {clause} AS r ON l.k = r.k GROUP BY l.k"
        ),
        tmp_path / "ck_ours",
    )
    assert session.last_plan.buckets == 4  # GROUP BY l.k holds the join key
    theirs = native_join_aggregate(spark, tmp_path, size, slide, F.col("v") * F.col("w"))
    assert_same_results(ours, theirs, ["k"])


def test_flink_window_join_form_equals_sparks_stream_stream_join(spark, tmp_path):
    """Flink's window join (HOP on both sides, the bounds equated in ON) plans as the clause
    form, so inside Spark too it equals Spark's own join."""
    write_streams(tmp_path)
    session = attach(spark, tmp_path)
    hop = "TABLE(HOP(TABLE {}, DESCRIPTOR(ts), INTERVAL '250' MILLISECOND, INTERVAL '1' SECOND))"
    ours = run_to_memory(
        session.sql(
            "SELECT l.k AS k, l.window_start, r.window_end, COUNT(*) AS n, "
            f"SUM(l.v * r.w) AS s, MAX(r.w) AS m FROM {hop.format('a')} AS l "
            f"JOIN {hop.format('b')} AS r ON l.k = r.k AND l.window_start = r.window_start "
            "AND l.window_end = r.window_end GROUP BY l.k, l.window_start, l.window_end"
        ),
        tmp_path / "ck_ours",
    )
    theirs = native_join_aggregate(
        spark, tmp_path, "1 second", "250 milliseconds", F.col("v") * F.col("w")
    )
    assert_same_results(ours, theirs, ["k"])


def test_stream_joined_with_itself_equals_sparks_self_join(spark, tmp_path):
    """A self-join (`a AS l JOIN a AS r`): inside Spark each side's rows are the one
    registered stream's, tagged by side (both sides read the same micro-batches), and the
    result is Spark's own join of the stream with itself."""
    write_streams(tmp_path)
    session = attach(spark, tmp_path)
    clause = window_clause("1 SECOND", "500 MILLISECONDS")
    ours = run_to_memory(
        session.sql(
            f"SELECT l.k AS k, window_start, window_end, COUNT(*) AS n, SUM(l.v * r.v) AS s, "
            f"MAX(r.v) AS m FROM a {clause} AS l JOIN a {clause} AS r ON l.k = r.k "
            "GROUP BY l.k"
        ),
        tmp_path / "ck_ours",
    )
    stream = file_stream(spark, tmp_path / "a", LEFT_DDL).withWatermark("ts", DELAY)
    window = F.window("ts", "1 second", "500 milliseconds")
    left = stream.select(window.alias("lw"), F.col("k").alias("lk"), F.col("v").alias("lv"))
    right = stream.select(window.alias("rw"), F.col("k").alias("rk"), F.col("v").alias("rv"))
    joined = left.join(right, (F.col("lk") == F.col("rk")) & (F.col("lw") == F.col("rw")))
    theirs = aggregate_natively(joined, tmp_path, F.col("lv") * F.col("rv"), "rv")
    assert len(ours) > 0
    assert_same_results(ours, theirs, ["k"])


def test_materialised_join_rows_equal_sparks(spark, tmp_path):
    write_streams(tmp_path, files=3)
    session = attach(spark, tmp_path)
    clause = window_clause("1 SECOND", "500 MILLISECONDS")
    ours = run_to_memory(
        session.sql(
            f"SELECT l.k AS k, l.v AS v, r.w AS w, l.big % 1000 AS low, window_start, window_end "
            f"FROM a {clause} AS l "
            f"JOIN b {clause} AS r ON l.k = r.k AND r.w > 5"
        ),
        tmp_path / "ck_ours",
    )
    joined = spark_window_join(spark, tmp_path, "1 second", "500 milliseconds").where("w > 5")
    theirs = run_to_memory(
        joined.select(
            F.col("lk").alias("k"),
            "v",
            "w",
            (F.col("big") % 1000).alias("low"),
            F.col("lw.start").alias("window_start"),
            F.col("lw.end").alias("window_end"),
        ),
        tmp_path / "ck_theirs",
    )
    # Spark's inner join emits a pair at once; mangonel when its window closes: the windows
    # still open at the end (end > the final watermark, min over the streams) are not out yet
    final = min(
        max(t.column("ts").to_pylist()[-1] for t in tables) for tables in sides(files=3)
    ) - dt.timedelta(milliseconds=200)
    closed = pd.to_datetime(theirs["window_end"], utc=True) <= pd.Timestamp(final)
    assert 0 < closed.sum() < len(theirs)
    theirs = theirs[closed]
    assert len(ours) == len(theirs)
    # (2^60 + t * 1000 + 1) % 1000 is one value only if no bit was lost on the way into
    # Python (the results come back through pandas, where float64 would hide it)
    assert set(ours["low"].dropna()) == {(2**60 + 1) % 1000} and ours["low"].isna().any()
    assert_same_results(
        ours.sort_values(["v", "w"]), theirs.sort_values(["v", "w"]), ["k", "v", "w"]
    )


@pytest.mark.parametrize("declared", [False, True])
def test_stream_static_join_equals_sparks(spark, tmp_path, declared):
    """The table registered as a DataFrame, or declared with its files (`CREATE TABLE ..
    WITH (source = 'parquet', path = ..)`, which Spark's batch reader reads)."""
    write_streams(tmp_path, files=3)
    session = attach(spark, tmp_path)
    rows = {"k": [0, 1, 2, 3, 3, 7], "campaign": ["x", "y", "x", "z", "w", "q"]}
    ads = spark.createDataFrame(pd.DataFrame(rows), "k INT, campaign STRING")
    if declared:
        (tmp_path / "ads").mkdir()
        table = pa.table({"k": pa.array(rows["k"], pa.int32()), "campaign": rows["campaign"]})
        pq.write_table(table, tmp_path / "ads" / "part-0.parquet")
        session.execute(
            "CREATE TABLE ads (k INT, campaign STRING) "
            f"WITH (source = 'parquet', path = '{tmp_path / 'ads'}')"
        )
    else:
        session.register_table("ads", ads)
    ours = run_to_memory(
        session.sql(
            "SELECT c.k AS k, x.campaign AS campaign, window_start, window_end, COUNT(*) AS n, "
            "SUM(c.v) AS s FROM a [RANGE 1 SECOND] AS c JOIN ads AS x ON c.k = x.k "
            "GROUP BY c.k, x.campaign"
        ),
        tmp_path / "ck_ours",
    )
    stream = file_stream(spark, tmp_path / "a", LEFT_DDL).withWatermark("ts", DELAY)
    joined = stream.join(ads.withColumnRenamed("k", "ak"), F.col("k") == F.col("ak"))
    native = joined.groupBy(F.window("ts", "1 second"), "k", "campaign").agg(
        F.count(F.lit(1)).alias("n"), F.sum("v").alias("s")
    )
    theirs = run_to_memory(
        native.select(
            "k",
            "campaign",
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "n",
            "s",
        ),
        tmp_path / "ck_theirs",
    )
    assert_same_results(ours, theirs, ["k", "campaign"])


def test_stream_table_left_join_without_a_window_emits_each_micro_batch(spark, tmp_path):
    write_streams(tmp_path, files=2)
    session = attach(spark, tmp_path)
    ads = spark.createDataFrame(
        pd.DataFrame({"k": [0, 1, 3, 3], "campaign": ["x", "y", "z", "w"]}),
        "k BIGINT, campaign STRING",
    )
    session.register_table("ads", ads)
    ours = run_to_memory(
        session.sql(
            "SELECT c.ts AS ts, c.k AS k, c.big AS big, x.campaign AS campaign "
            "FROM a AS c LEFT JOIN ads AS x ON c.k = x.k"
        ),
        tmp_path / "ck_ours",
    )
    stream = file_stream(spark, tmp_path / "a", LEFT_DDL)
    joined = stream.join(ads.withColumnRenamed("k", "ak"), F.col("k") == F.col("ak"), "left")
    theirs = run_to_memory(joined.select("ts", "k", "big", "campaign"), tmp_path / "ck_theirs")
    order = ["ts", "campaign"]
    ours = ours.sort_values(order, na_position="last").reset_index(drop=True)
    theirs = theirs.sort_values(order, na_position="last").reset_index(drop=True)
    assert len(ours) > len(sides(2)[0][0]) and ours["campaign"].isna().any()
    pd.testing.assert_frame_equal(ours, theirs, check_dtype=False)


JOIN_QUERY = (
    "SELECT l.k AS k, window_start, window_end, COUNT(*) AS n, SUM(l.v + r.w) AS s "
    "FROM a [RANGE 1 SECOND SLIDE 500 MILLISECONDS] AS l "
    "LEFT JOIN b [RANGE 1 SECOND SLIDE 500 MILLISECONDS] AS r ON l.k = r.k GROUP BY l.k"
)


def test_join_restart_from_checkpoint_gives_the_same_output(spark, tmp_path):
    def joined(folders, restarted):
        session = mg.attach(spark)
        for name, ddl in (("a", LEFT_DDL), ("b", RIGHT_DDL)):
            session.register(
                name, file_stream(spark, folders[name], ddl), event_time="ts", watermark=DELAY
            )
        return session.sql(JOIN_QUERY)

    # four micro-batches a side (8 s of event time); the restarted run stops after two
    left, right = sides(4)
    outputs = outputs_with_and_without_a_restart(
        spark, tmp_path, {"a": left, "b": right}, 2, joined
    )
    assert_restart_lost_and_duplicated_nothing(*outputs, ["k"])


def test_explain_shows_the_spark_side_of_a_join(spark, tmp_path):
    write_streams(tmp_path, files=1)
    session = attach(spark, tmp_path)
    text = session.sql(f"EXPLAIN {JOIN_QUERY}")
    assert "WindowJoin" in text or "Join" in text
    spark_side = text[text.index("Spark: window join") :].splitlines()
    assert spark_side[0].startswith("Spark: window join (buckets: GROUP BY holds the join key")
    assert spark_side[1].startswith("  Stage2 applyInPandasWithState: key=bucket buckets=4")
    assert "watermark=min over the streams" in spark_side[1]
    assert spark_side[2].startswith("    Exchange:")
    assert spark_side[3] == "      Union: by=name, other side's columns filled"
    assert "bucket=pmod(hash(CAST(`k` AS BIGINT)), 4)" in spark_side[4]
