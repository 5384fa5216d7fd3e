"""Holistic window functions inside Spark Structured Streaming (the two stages: stage 1 ships
each (key, pane)'s values, stage 2 keeps them in the state store and evaluates windows at
their close). References: Spark's own `median`, `percentile`, `percentile_disc` and
`count(DISTINCT)` in batch mode over the same rows and windows (Spark rejects COUNT DISTINCT
in streaming), and the standalone Session for a Python window function and a sketch."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from spark_harness import (
    assert_same_results,
    canonical,
    file_stream,
    outputs_with_and_without_a_restart,
    run_to_memory,
    write_micro_batches,
)

import mangonel as mg
from mangonel.runtime.local.query import LocalQuery

pytestmark = pytest.mark.spark

DDL = "ts TIMESTAMP, k INT, x BIGINT, v DOUBLE"
DELAY_MS = 300
WINDOW = "[RANGE 1 SECOND SLIDE 250 MILLISECONDS]"
NATIVE = (
    "MEDIAN(v) AS med, PERCENTILE(v, 0.9) AS p90, "
    "PERCENTILE_DISC(0.25) WITHIN GROUP (ORDER BY v) AS pd, COUNT(DISTINCT x) AS cd, "
    "SUM(v) AS s, APPROX_PERCENTILE(x, 0.3) AS ap"
)
QUERY = (
    f"SELECT k, window_start, window_end, {NATIVE}, trimmed_mean(v) AS tm, "
    f"APPROX_COUNT_DISTINCT(x) AS acd FROM s {WINDOW} GROUP BY k"
)


def micro_batches(files: int = 5, rows: int = 300) -> list[pa.Table]:
    """Out of order inside each file and across files, never late: a file's rows start
    after the previous file's maximum minus less than the watermark delay. Ties (small
    integers as doubles), NULLs in both arguments, a key (3) whose values are all NULL."""
    rng = np.random.default_rng(11)
    tables = []
    for number in range(files):
        base = 1_700_000_000_000 + number * 800  # ms
        ts = base + rng.integers(-150, 800, rows)
        k = rng.integers(0, 4, rows)
        v = rng.integers(0, 8, rows).astype(float)
        v_null = (rng.random(rows) < 0.15) | (k == 3)
        x = rng.integers(0, 25, rows)
        tables.append(
            pa.table(
                {
                    "ts": pa.array(ts * 1000, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                    "k": pa.array(k, pa.int32()),
                    "x": pa.array(x, pa.int64(), mask=(rng.random(rows) < 0.1) | (k == 3)),
                    "v": pa.array(v, pa.float64(), mask=v_null),
                }
            )
        )
    return tables


def final_watermark(tables: list[pa.Table]) -> pd.Timestamp:
    """Spark's watermark after the last micro-batch: windows ending by it have fired."""
    latest = max(pa.compute.max(t["ts"]).value for t in tables) // 1000  # ms
    return pd.Timestamp((latest - DELAY_MS) * 1000, unit="us", tz="UTC")


def attached_stream(spark, tmp_path, data: list[pa.Table], **options):  # noqa: ANN001, ANN201
    """A mangonel session on `spark` (`options`: `mg.attach`'s) whose stream `s` reads `data`
    as Parquet files, one micro-batch each."""
    write_micro_batches(tmp_path / "in", data)
    session = mg.attach(spark, **options)
    session.register(
        "s",
        file_stream(spark, tmp_path / "in", DDL),
        event_time="ts",
        watermark=f"{DELAY_MS} milliseconds",
    )
    return session


def test_holistic_functions_equal_spark_and_the_standalone_session(spark, tmp_path):
    data = micro_batches()
    session = attached_stream(spark, tmp_path, data)

    def trimmed(values):  # nested: Spark's workers get it by value
        cut = len(values) // 10
        kept = values[cut : len(values) - cut]
        return kept.mean() if len(kept) else np.nan

    session.register_window_function("trimmed_mean", trimmed, returns="DOUBLE")
    text = session.explain(QUERY)
    assert "holistic=sorted-panes+sketch-panes on cpu at window close" in text
    assert 'APPROX_PERCENTILE(x, 0.3, 10000): exact because "accuracy 10000' in text
    assert "pane_values=[" in text and "two stages (reason: holistic functions" in text
    frame = session.sql(QUERY)
    query = (
        frame.writeStream.format("memory")
        .queryName("holistic_out")
        .outputMode("append")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    try:
        query.processAllAvailable()
        assert len(query.recentProgress) >= len(data)  # several micro-batches
    finally:
        query.stop()
    ours = spark.table("holistic_out").toPandas()
    spark.catalog.dropTempView("holistic_out")

    closed = final_watermark(data)
    batch = spark.read.schema(DDL).parquet(str(tmp_path / "in"))
    batch.createOrReplaceTempView("holistic_batch")
    native = spark.sql(
        "SELECT k, window.start AS window_start, window.end AS window_end, median(v) AS med, "
        "percentile(v, 0.9) AS p90, percentile_disc(0.25) WITHIN GROUP (ORDER BY v) AS pd, "
        "count(DISTINCT x) AS cd, sum(v) AS s, percentile_approx(x, 0.3) AS ap "
        "FROM holistic_batch "
        "GROUP BY window(ts, '1 second', '250 milliseconds'), k"
    ).toPandas()
    native = native[pd.to_datetime(native["window_end"], utc=True) <= closed]
    # ap: APPROX_PERCENTILE on its exact path (accuracy 10000), Spark's percentile_approx
    # summarising windows of far fewer than 5,000 values whole: the same value
    columns = ["k", "window_start", "window_end", "med", "p90", "pd", "cd", "s", "ap"]
    null_key = ours[ours["k"] == 3]
    assert len(null_key) and null_key["med"].isna().all() and (null_key["cd"] == 0).all()
    assert_same_results(ours[columns], native, ["k"])

    standalone = mg.Session(backend="cpu")
    standalone.execute(
        f"CREATE STREAM s ({DDL}) WITH (event_time = 'ts', watermark = '{DELAY_MS} milliseconds')"
    )
    standalone.register_window_function("trimmed_mean", trimmed, returns="DOUBLE")
    runner = LocalQuery(standalone.sql(QUERY).plan)
    out = [b for table in data for b in runner.process(table)] + runner.finish()
    expected = pa.Table.from_batches(out).to_pandas()
    expected = expected[pd.to_datetime(expected["window_end"], utc=True) <= closed]
    python_columns = ["k", "window_start", "window_end", "tm", "acd"]
    left = canonical(ours[python_columns], ["k"])
    right = canonical(expected[python_columns], ["k"])
    pd.testing.assert_frame_equal(left, right, check_dtype=False, rtol=1e-12, atol=0)


RESTART_QUERY = (
    f"SELECT k, window_start, MEDIAN(v) AS med, COUNT(DISTINCT x) AS cd, SUM(v) AS s "
    f"FROM s {WINDOW} GROUP BY k"
)


def test_restart_from_checkpoint_gives_the_uninterrupted_output(spark, tmp_path):
    """The restarted query runs stage 1 with the operator's own `preaggregate` (the GPU
    plans' kind, here on the CPU kernels), the uninterrupted one with Arrow's: the two
    stage-1 paths ship the same values."""

    def query(folders, restarted):
        session = mg.attach(spark, stage1="kernels" if restarted else "arrow")
        frame = file_stream(spark, folders["s"], DDL)
        session.register("s", frame, event_time="ts", watermark=f"{DELAY_MS} milliseconds")
        return session.sql(RESTART_QUERY)

    data = micro_batches(files=4, rows=200)
    uninterrupted, restarted, first_run = outputs_with_and_without_a_restart(
        spark, tmp_path, {"s": data}, 2, query
    )
    assert 0 < first_run < len(restarted)  # windows came from both runs
    left = canonical(restarted.assign(window_end=restarted["window_start"]), ["k"])
    right = canonical(uninterrupted.assign(window_end=uninterrupted["window_start"]), ["k"])
    pd.testing.assert_frame_equal(left, right, check_dtype=False)


def test_arrow_stage1_ships_the_values_the_operator_ships():
    """Stage 1's Arrow path (`list` aggregation of order keys, packed) gives each (key, pane)
    the values the operator's own `preaggregate` gives (no Spark job: pure Arrow)."""
    from mangonel.compiler import physical as ph
    from mangonel.runtime.operators import pane_values
    from mangonel.runtime.spark.stage1 import argument_column, arrow_preaggregate, spark_name

    session = mg.Session(backend="cpu")
    session.execute(f"CREATE STREAM s ({DDL}) WITH (event_time = 'ts')")
    plan = session.sql(f"SELECT k, {NATIVE} FROM s {WINDOW} WHERE x <> 4 GROUP BY k").plan
    window = ph.find(plan, ph.WindowAggregateExec)
    rows = micro_batches(files=1, rows=400)[0]
    rows = rows.set_column(3, "v", pa.array([-0.0, np.nan, None, 0.0] * 100, pa.float64()))
    ours = LocalQuery(plan).window_operator.preaggregate(rows)
    kept = rows.filter(pa.compute.not_equal(rows["x"], 4))  # WHERE, as Spark runs it natively
    micros = kept["ts"].cast(pa.int64()).to_numpy()
    columns = {"k": kept["k"], "__pane": pa.array(micros // window.pane_length)}
    arguments = []
    for field in window.fields:
        if field.argument is not None and field.argument not in arguments:
            arguments.append(field.argument)
            columns[argument_column(len(arguments) - 1)] = kept[field.argument.name]
    theirs = arrow_preaggregate(window)(pa.table(columns))
    assert theirs.num_rows == ours.num_rows

    def cells(batch: pa.RecordBatch, name: str) -> dict[tuple, list[int]]:
        counts, values = pane_values.unpack(batch.column(name))
        ends = np.cumsum(counts)
        keys = zip(batch.column("k").to_pylist(), batch.column("__pane").to_pylist(), strict=True)
        return {
            key: sorted(values[end - n : end].tolist())
            for key, n, end in zip(keys, counts, ends, strict=True)
        }

    names = [f.name for f in window.fields if f.kind.holistic]
    assert len(names) == 2  # v and x
    for name in names:
        assert cells(theirs, spark_name(name)) == cells(ours, name)
    assert any(cells(ours, names[0]).values())


def timed_function():
    """A function registered with_timestamps, nested so that Spark's workers get it by value
    (this test module is not importable there): the event-time span of the window's values
    plus the value of the latest one (its time has to travel with it through stage 1)."""

    def time_spread(values, times):
        first = times[0]
        last = 0
        for i in range(times.shape[0]):
            if times[i] < first:
                first = times[i]
            if times[i] >= times[last]:
                last = i
        return float(times[last] - first) + values[last]

    return time_spread


TIMED_QUERY = (
    "SELECT k, window_start, window_end, time_spread(v) AS t, MEDIAN(v) AS med "
    f"FROM s {WINDOW} GROUP BY k"
)


@pytest.mark.parametrize("stage1", ["arrow", "kernels"])
def test_a_function_with_timestamps_gets_the_event_times_through_either_stage1(
    spark, tmp_path, stage1
):
    data = micro_batches(files=3, rows=200)
    session = attached_stream(spark, tmp_path, data, stage1=stage1)
    time_spread = timed_function()
    session.register_window_function("time_spread", time_spread, with_timestamps=True)
    ours = run_to_memory(session.sql(TIMED_QUERY), tmp_path / "ck")

    standalone = mg.Session(backend="cpu")
    standalone.execute(
        f"CREATE STREAM s ({DDL}) WITH (event_time = 'ts', watermark = '{DELAY_MS} milliseconds')"
    )
    standalone.register_window_function("time_spread", time_spread, with_timestamps=True)
    runner = LocalQuery(standalone.sql(TIMED_QUERY).plan)
    out = [b for table in data for b in runner.process(table)] + runner.finish()
    expected = pa.Table.from_batches(out).to_pandas()
    closed = final_watermark(data)
    expected = expected[pd.to_datetime(expected["window_end"], utc=True) <= closed]
    assert ours["t"].notna().any()
    pd.testing.assert_frame_equal(
        canonical(ours, ["k"]), canonical(expected, ["k"]), check_dtype=False, rtol=1e-12, atol=0
    )


ARRAY_QUERY = (
    "SELECT k, window_start, window_end, PERCENTILE(v, ARRAY(0.25, 0.5, 0.9)) AS ps, "
    f"PERCENTILE_DISC(ARRAY(0.5, 0.1)) WITHIN GROUP (ORDER BY x) AS pd FROM s {WINDOW} GROUP BY k"
)


def test_percentiles_over_an_array_of_p_equal_the_standalone_session(spark, tmp_path):
    """ARRAY results leave stage 2 as list cells (Spark's ArrayType); a key whose values are
    all NULL gives NULL, not a list of NULLs."""
    data = micro_batches(files=3, rows=200)
    session = attached_stream(spark, tmp_path, data)
    ours = run_to_memory(session.sql(ARRAY_QUERY), tmp_path / "ck")
    standalone = mg.Session(backend="cpu")
    standalone.execute(
        f"CREATE STREAM s ({DDL}) WITH (event_time = 'ts', watermark = '{DELAY_MS} milliseconds')"
    )
    runner = LocalQuery(standalone.sql(ARRAY_QUERY).plan)
    out = [b for table in data for b in runner.process(table)] + runner.finish()
    expected = pa.Table.from_batches(out).to_pandas()
    expected = expected[pd.to_datetime(expected["window_end"], utc=True) <= final_watermark(data)]

    def rows(frame: pd.DataFrame) -> list[tuple]:
        frame = canonical(frame, ["k"])
        return [
            (
                r.k,
                r.window_start,
                None if r.ps is None else list(r.ps),
                None if r.pd is None else list(r.pd),
            )
            for r in frame.itertuples(index=False)
        ]

    got, want = rows(ours), rows(expected)
    assert len(want) > 5 and any(r[2] is None for r in want)  # key 3: all NULL
    assert got == want


def test_a_failing_function_stops_the_spark_query_with_its_name(spark, tmp_path):
    """A Python window function that reads past its values fails the streaming query, as a
    failing UDF does, with mangonel's FunctionError naming it (docs/semantics.md)."""
    from pyspark.errors import StreamingQueryException

    data = micro_batches(files=2, rows=100)
    session = attached_stream(spark, tmp_path, data)

    def past_the_end(values):  # nested: Spark's workers get it by value
        return values[values.shape[0]]

    session.register_window_function("past_the_end", past_the_end, returns="DOUBLE")
    frame = session.sql(f"SELECT k, window_start, past_the_end(v) AS p FROM s {WINDOW} GROUP BY k")
    with pytest.raises(StreamingQueryException, match="'past_the_end' raised IndexError"):
        run_to_memory(frame, tmp_path / "ck")
