"""Input batches against the declared stream (issue 8): lossless widenings pass, every other
mismatch is a DataError naming the column, its declared type and the batch's type."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import mangonel as mg
from mangonel.errors import DataError

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
    assert runner.operator.conform(batch) is batch
    widened = _batch(SECONDS, KEYS, pa.array([1, 2, 3], pa.int32()))
    conformed = runner.operator.conform(widened)
    assert conformed.schema.field("v").type == pa.int64()
