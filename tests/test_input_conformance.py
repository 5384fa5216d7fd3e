"""Input batches against the declared stream (issue 8): lossless widenings pass, every other
mismatch is a DataError naming the column, its declared type and the batch's type."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import mangonel as mg
from mangonel.compiler.physical import WindowAggregateExec, find
from mangonel.errors import DataError
from mangonel.runtime.operators.conform import event_time_range

UTC = pa.timestamp("us", tz="UTC")
QUERY = (
    "SELECT k, window_start, SUM(v) AS total, COUNT(*) AS n FROM s [RANGE 10 SECONDS] GROUP BY k"
)


def _query(v_type: str = "BIGINT", k_type: str = "BIGINT", not_null: str = "") -> mg.Query:
    session = mg.Session(backend="cpu")
    session.execute(
        f"CREATE STREAM s (ts TIMESTAMP{not_null}, k {k_type}, v {v_type}) WITH (event_time = 'ts')"
    )
    return session.sql(QUERY)


def _batch(ts, k, v, names=("ts", "k", "v"), **extra) -> pa.RecordBatch:
    arrays = [ts, k, v, *extra.values()]
    return pa.RecordBatch.from_arrays(arrays, names=[*names, *extra])


SECONDS = pa.array([1_000_000, 2_000_000, 3_000_000], pa.int64()).cast(UTC)
KEYS = pa.array([1, 1, 2], pa.int64())


def _rows(table: pa.Table) -> list[tuple]:
    return sorted((row["k"], row["total"], row["n"]) for row in table.to_pylist())


def _error(query: mg.Query, batch: pa.RecordBatch) -> str:
    with pytest.raises(DataError) as caught:
        query.run([batch])
    return str(caught.value)


@pytest.mark.parametrize(
    "values",
    [
        pa.array([1, 2, 3], pa.int32()),
        pa.array([1, 2, 3], pa.int8()),
        pa.array([1, 2, 3], pa.uint32()),
        pa.array([1, 2, 3], pa.uint64()),
        pa.array([1, 2, 3], pa.int16()).dictionary_encode(),
    ],
    ids=["int32", "int8", "uint32", "uint64-in-range", "dictionary-int16"],
)
def test_lossless_integer_widenings_pass(values: pa.Array) -> None:
    table = _query().run([_batch(SECONDS, KEYS, values)])
    assert _rows(table) == [(1, 3, 2), (2, 3, 1)]


@pytest.mark.parametrize(
    ("values", "batch_type"),
    [
        (pa.array([0.5, 2.5, 1.0]), "double"),  # was summed as 2 after a silent truncation
        (pa.array(["1", "2", "3"]), "string"),  # was parsed
        (pa.array([True, False, True]), "bool"),
        (SECONDS, "timestamp[us, tz=UTC]"),
    ],
)
def test_bigint_refuses_lossy_or_foreign_types(values: pa.Array, batch_type: str) -> None:
    message = _error(_query(), _batch(SECONDS, KEYS, values))
    assert "'v'" in message and "BIGINT" in message and batch_type in message


def test_uint64_above_int64_is_refused_not_wrapped() -> None:
    values = pa.array([1, 2, 2**63 + 5], pa.uint64())
    message = _error(_query(), _batch(SECONDS, KEYS, values))
    assert "'v'" in message and "BIGINT" in message and "uint64" in message


def test_double_column_accepts_float32_and_refuses_strings_and_int64() -> None:
    table = _query("DOUBLE").run([_batch(SECONDS, KEYS, pa.array([0.5, 2.5, 1.0], pa.float32()))])
    assert _rows(table) == [(1, 3.0, 2), (2, 1.0, 1)]
    half = pa.array(np.array([0.5, 2.5, 1.0], np.float16()))
    assert _rows(_query("DOUBLE").run([_batch(SECONDS, KEYS, half)])) == [(1, 3.0, 2), (2, 1.0, 1)]
    assert "string" in _error(_query("DOUBLE"), _batch(SECONDS, KEYS, pa.array(["a", "b", "c"])))
    message = _error(_query("DOUBLE"), _batch(SECONDS, KEYS, pa.array([1, 2, 3], pa.int64())))
    assert "'v'" in message and "DOUBLE" in message and "int64" in message


def test_string_key_column() -> None:
    values = pa.array([1, 2, 3], pa.int64())
    for keys in (
        pa.array(["a", "a", "b"], pa.large_string()),
        pa.array(["a", "a", "b"], pa.string_view()),
        pa.array(["a", "a", "b"]).dictionary_encode(),
    ):
        assert _rows(_query(k_type="STRING").run([_batch(SECONDS, keys, values)])) == [
            ("a", 3, 2),
            ("b", 3, 1),
        ]
    message = _error(_query(k_type="STRING"), _batch(SECONDS, KEYS, values))
    assert "'k'" in message and "STRING" in message and "int64" in message


@pytest.mark.parametrize("unit", ["s", "ms", "ns"])
def test_timestamp_units_without_loss_pass(unit: str) -> None:
    scale = {"s": 1, "ms": 1_000, "ns": 1_000_000_000}[unit]
    times = pa.array([1 * scale, 2 * scale, 3 * scale], pa.int64()).cast(pa.timestamp(unit))
    table = _query().run([_batch(times, KEYS, pa.array([1, 2, 3]))])
    assert _rows(table) == [(1, 3, 2), (2, 3, 1)]
    assert table.column("window_start").to_pylist()[0].timestamp() == 0


@pytest.mark.parametrize(
    ("times", "batch_type"),
    [
        (pa.array([1_000_000_001, 2, 3], pa.int64()).cast(pa.timestamp("ns")), "timestamp[ns]"),
        (pa.array([1, 2, 3], pa.int32()).cast(pa.date32()), "date32"),  # was read as us
        (pa.array([1, 2, 3], pa.int64()), "int64"),
        (pa.array(["2024-01-01", "x", "y"]), "string"),
        (pa.array([2**62, 0, 0], pa.int64()).cast(pa.timestamp("s")), "timestamp[s]"),
    ],
    ids=["ns-sub-microsecond", "date32", "int64", "string", "seconds-overflow"],
)
def test_event_time_mismatches_are_refused(times: pa.Array, batch_type: str) -> None:
    message = _error(_query(), _batch(times, KEYS, pa.array([1, 2, 3])))
    assert "'ts'" in message and "TIMESTAMP" in message and batch_type in message


def test_missing_column_and_case_insensitive_names_and_extra_columns() -> None:
    values = pa.array([1, 2, 3])
    message = _error(_query(), _batch(SECONDS, KEYS, values, names=("ts", "k", "w")))
    assert "'v'" in message and "no column" in message
    table = _query().run(
        [_batch(SECONDS, KEYS, values, names=("TS", "K", "V"), extra=pa.array(["x"] * 3))]
    )
    assert _rows(table) == [(1, 3, 2), (2, 3, 1)]
    ambiguous = _batch(SECONDS, KEYS, values, names=("ts", "k", "v"), V=values)
    assert _rows(_query().run([ambiguous])) == [(1, 3, 2), (2, 3, 1)]  # exact name wins
    clash = pa.RecordBatch.from_arrays([SECONDS, KEYS, values, values], ["ts", "k", "V", "V"])
    assert "ambiguous" in _error(_query(), clash)


def test_not_null_columns_refuse_nulls() -> None:
    query = _query(not_null=" NOT NULL")
    times = pa.array([1_000_000, None, 3_000_000], pa.int64()).cast(UTC)
    message = _error(query, _batch(times, KEYS, pa.array([1, 2, 3])))
    assert "'ts'" in message and "NOT NULL" in message
    # a nullable event time is still dropped and counted
    plain = _query()
    table = plain.run([_batch(times, KEYS, pa.array([1, 2, 3]))])
    assert _rows(table) == [(1, 1, 1), (2, 3, 1)]
    assert plain.metrics.null_event_time_dropped == 1


def test_a_refused_batch_leaves_the_stream_running() -> None:
    query = _query()
    query._runner = query._new_runner()
    runner = query._runner
    good = _batch(SECONDS, KEYS, pa.array([1, 2, 3]))
    runner.process(good)
    with pytest.raises(DataError):
        runner.process(_batch(SECONDS, KEYS, pa.array([0.5, 0.5, 0.5])))
    runner.process(good)
    rows = sorted((r["k"], r["total"], r["n"]) for b in runner.finish() for r in b.to_pylist())
    assert rows == [(1, 6, 4), (2, 6, 2)]
    assert runner.metrics.tuples_in == 6


def test_a_bad_batch_after_good_ones_in_a_stream_fails_at_its_turn() -> None:
    """With lookahead the next batch is conformed before the current one is processed; the
    error must still come only when the bad batch's turn comes."""
    query = _query()
    first = _batch(SECONDS, KEYS, pa.array([1, 2, 3]))
    later = pa.array([20_000_000, 21_000_000, 22_000_000], pa.int64()).cast(UTC)
    second = _batch(later, KEYS, pa.array([1, 2, 3]))
    bad = _batch(later, KEYS, pa.array(["x", "y", "z"]))
    results = []
    with pytest.raises(DataError):
        for batch in query.stream([first, second, bad]):
            results.append(batch)
    assert sum(b.num_rows for b in results) == 2  # the first window fired before the error


def test_matching_batches_are_not_copied() -> None:
    query = _query()
    runner = query._new_runner()
    batch = _batch(SECONDS, KEYS, pa.array([1, 2, 3]))
    assert runner.window_operator.conform(batch) == (batch, 0)
    assert runner.window_operator.conform(batch)[0] is batch
    widened = _batch(SECONDS, KEYS, pa.array([1, 2, 3], pa.int32()))
    conformed, _ = runner.window_operator.conform(widened)
    assert conformed.schema.field("v").type == pa.int64()


# -- event times near the int64 limits (window bounds must not wrap) ------------------------

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _limit_query(window: str, delay: str = "0 seconds") -> mg.Query:
    session = mg.Session(backend="cpu")
    session.execute(
        "CREATE STREAM s (ts TIMESTAMP, k BIGINT, v BIGINT) "
        f"WITH (event_time = 'ts', watermark = '{delay}')"
    )
    return session.sql(
        f"SELECT k, window_start, window_end, COUNT(*) AS n FROM s [{window}] GROUP BY k"
    )


def _micros(table: pa.Table, name: str) -> list[int]:
    return table.column(name).cast(pa.int64()).to_pylist()


@pytest.mark.parametrize(
    "window", ["RANGE 10 SECONDS", "RANGE 10 SECONDS SLIDE 3 SECONDS", "RANGE 7 SECONDS"]
)
def test_event_times_near_int64_limits_are_dropped_and_counted(window: str) -> None:
    query = _limit_query(window)
    low, high = event_time_range(find(query.plan, WindowAggregateExec).window)
    times = [INT64_MIN, low - 1, low, 0, high, high + 1, INT64_MAX]
    batch = _batch(
        pa.array(times, pa.int64()).cast(UTC),
        pa.array(range(len(times)), pa.int64()),
        pa.array([1] * len(times)),
    )
    table = query.run([batch])
    starts, ends = _micros(table, "window_start"), _micros(table, "window_end")
    assert all(start < end for start, end in zip(starts, ends, strict=True))
    assert sorted(set(table.column("k").to_pylist())) == [2, 3, 4]
    metrics = query.metrics
    assert metrics.event_time_out_of_range_dropped == 4
    assert metrics.null_event_time_dropped == 0
    assert metrics.tuples_in == len(times)
    # the range is the widest one: one microsecond further out, a window bound overflows
    size, slide = {
        "RANGE 10 SECONDS": (10**7, 10**7),
        "RANGE 10 SECONDS SLIDE 3 SECONDS": (10**7, 3 * 10**6),
        "RANGE 7 SECONDS": (7 * 10**6, 7 * 10**6),
    }[window]
    assert (high // slide) * slide + size <= INT64_MAX < ((high + 1) // slide) * slide + size
    first_start = lambda ts: ((ts - size) // slide + 1) * slide  # noqa: E731
    assert first_start(low) >= INT64_MIN > first_start(low - 1)


def test_out_of_range_rows_do_not_move_the_watermark() -> None:
    query = _limit_query("RANGE 10 SECONDS", delay="1 second")
    runner = query._new_runner()
    first = _batch(SECONDS, KEYS, pa.array([1, 2, 3]))
    outlier = _batch(
        pa.array([INT64_MAX, 4_000_000], pa.int64()).cast(UTC),
        pa.array([9, 1], pa.int64()),
        pa.array([1, 1]),
    )
    assert runner.process(first) == []
    assert runner.process(outlier) == []  # INT64_MAX would fire [0 s, 10 s) if it counted
    rows = [r for b in runner.finish() for r in b.to_pylist()]
    assert sorted((r["k"], r["n"]) for r in rows) == [(1, 3), (2, 1)]
    assert runner.metrics.event_time_out_of_range_dropped == 1


def test_count_windows_drop_the_last_microsecond() -> None:
    session = mg.Session(backend="cpu")
    session.execute("CREATE STREAM s (ts TIMESTAMP, k BIGINT) WITH (event_time = 'ts')")
    query = session.sql(
        "SELECT k, window_start, window_end, COUNT(*) AS n FROM s [ROWS 1] GROUP BY k"
    )
    times = pa.array([INT64_MAX - 1, INT64_MAX, INT64_MIN], pa.int64()).cast(UTC)
    batch = pa.RecordBatch.from_arrays([times, pa.array([1, 2, 3])], names=["ts", "k"])
    table = query.run([batch])
    ends = _micros(table, "window_end")
    assert sorted(zip(table.column("k").to_pylist(), ends, strict=True)) == [
        (1, INT64_MAX),
        (3, INT64_MIN + 1),
    ]
    assert query.metrics.event_time_out_of_range_dropped == 1


def test_parquet_files_meet_the_same_rules(tmp_path) -> None:  # noqa: ANN001
    import pyarrow.parquet as pq

    from mangonel.catalog.sources import read_files

    session = mg.Session(backend="cpu")
    session.execute("CREATE STREAM s (ts TIMESTAMP, k BIGINT, v BIGINT) WITH (event_time = 'ts')")
    query = session.sql(QUERY)
    schema = session.catalog.stream("s").schema
    widened = pa.table({"ts": SECONDS, "k": KEYS, "v": pa.array([1, 2, 3], pa.int32())})
    pq.write_table(widened, tmp_path / "ok.parquet")
    assert _rows(query.run(read_files(str(tmp_path / "ok.parquet"), "parquet", schema))) == [
        (1, 3, 2),
        (2, 3, 1),
    ]
    lossy = pa.table({"ts": SECONDS, "k": KEYS, "v": pa.array([0.5, 2.5, 1.0])})
    pq.write_table(lossy, tmp_path / "lossy.parquet")
    with pytest.raises(DataError, match="'v'.*BIGINT.*double"):
        query.run(read_files(str(tmp_path / "lossy.parquet"), "parquet", schema))


def test_run_takes_one_table_alone_and_names_what_holds_no_batches() -> None:
    """`run(table)` iterated the table's columns ("expected a RecordBatch or Table, got
    ChunkedArray"); a pandas DataFrame gave "got str"; None a bare TypeError (found by
    probing bad inputs)."""
    session = mg.Session("cpu")
    session.execute("CREATE STREAM s (ts TIMESTAMP, v BIGINT) WITH (event_time = 'ts')")
    query = session.sql("SELECT window_start, COUNT(*) AS n FROM s [RANGE 1 SECOND]")
    table = pa.table({"ts": pa.array([0, 1], pa.timestamp("us")), "v": [1, 2]})
    assert query.run(table).column("n").to_pylist() == [2]
    assert query.run(table.to_batches()[0]).column("n").to_pylist() == [2]
    with pytest.raises(DataError, match="not a DataFrame: pass"):
        query.run(table.to_pandas())
    for nothing in (None, "batches"):
        with pytest.raises(DataError, match="read a sequence"):
            query.run(nothing)
