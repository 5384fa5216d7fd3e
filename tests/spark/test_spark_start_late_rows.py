"""Late rows as data on the driver-side plan (`ms.start(..., late_rows=)`, foreach_batch.py and
late.py): the rows written are exactly the standalone engine's late rows on the same
micro-batches (every column, `late_reason`, `late_watermark`), the late-row counts are its
`late_tuples_dropped`, the results are unchanged by asking for them, and a re-run batch id
writes its late rows once. The micro-batches are built so that Spark's bound for late rows
(W_{N-1}) is the standalone one (the watermark before the batch): every micro-batch with
rows reaching back follows one that did not raise the largest event time."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from spark_harness import assert_same_results, file_stream, write_micro_batches

import mangonel as mg
from mangonel.errors import PlanError
from mangonel.runtime.local.query import LocalQuery
from mangonel.runtime.spark import foreach_batch

pytestmark = pytest.mark.spark

MS = 1000
EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
DELAY_MS = 200
SCHEMA = pa.schema(
    [
        ("ts", pa.timestamp("us", tz="UTC")),
        ("k", pa.int64()),
        ("v", pa.float64()),
        ("note", pa.string()),
    ]
)
DDL = "ts TIMESTAMP, k BIGINT, v DOUBLE, note STRING"
QUERIES = {
    "sliding": "SELECT k, window_start, window_end, COUNT(*) AS n, SUM(v) AS total, "
    "MAX(v) AS top FROM s [RANGE 1 SECOND SLIDE 250 MILLISECONDS] GROUP BY k",
    "tumbling": "SELECT k, window_start, window_end, COUNT(*) AS n, SUM(v) AS total "
    "FROM s [RANGE 500 MILLISECONDS] GROUP BY k",
}


def micro_batches(seed: int, count: int = 8, back_ms: int = 2500) -> list[pa.Table]:
    """Even micro-batches move the largest event time on and hold rows reaching back up to
    `back_ms` (some late, some not); odd ones hold rows within half the delay behind the
    largest event time so far (never late, and they do not move it). Whole milliseconds:
    Spark's watermark is in milliseconds. Four keys; notes name the rows."""
    rng = random.Random(seed)
    batches, top = [], 10_000  # ms after EPOCH
    for number in range(count):
        rows = []
        if number % 2 == 0:
            top += rng.randrange(300, 900)
            times = [top] + [top - rng.randrange(0, back_ms) for _ in range(rng.randrange(4, 12))]
        else:
            times = [top - rng.randrange(0, DELAY_MS // 2) for _ in range(rng.randrange(1, 6))]
        for i, ms in enumerate(times):
            rows.append(
                {
                    "ts": EPOCH + dt.timedelta(milliseconds=ms),
                    "k": rng.randrange(4),
                    "v": float(rng.randrange(-5, 20)),
                    "note": f"b{number}r{i}",
                }
            )
        batches.append(pa.Table.from_pylist(rows, schema=SCHEMA))
    return batches


def standalone(tables: list[pa.Table], query: str) -> tuple[pd.DataFrame, pa.Table, int]:
    """(results fired, late rows, late_tuples_dropped) of the standalone engine over the same
    batches (no end of input: Spark has none either)."""
    session = mg.Session("cpu")
    session.execute(
        f"CREATE STREAM s ({DDL}) WITH (event_time = 'ts', watermark = '{DELAY_MS} milliseconds')"
    )
    runner = LocalQuery(session.sql(query).plan, keep_late_rows=True)
    fired = [batch for table in tables for batch in runner.process(table)]
    results = pa.Table.from_batches(fired, schema=runner.schema).to_pandas()
    return results, runner.late_rows(), runner.metrics.late_tuples_dropped


class Collect:
    """A callable sink keeping each batch id's table (a re-run batch id replaces its own)."""

    def __init__(self) -> None:
        self.batches: dict[int, pa.Table] = {}
        self.calls: list[int] = []

    def __call__(self, table: pa.Table, batch_id: int) -> None:
        self.batches[batch_id] = table
        self.calls.append(batch_id)

    def table(self) -> pa.Table:
        return pa.concat_tables([t for _, t in sorted(self.batches.items()) if t.num_rows])


def attached(spark, folder: Path):  # noqa: ANN001, ANN201
    session = mg.attach(spark)
    session.register(
        "s", file_stream(spark, folder, DDL), event_time="ts", watermark=f"{DELAY_MS}ms"
    )
    return session


def run_start(session, query: str, checkpoint: Path, sink, late_rows, plan="driver"):  # noqa: ANN001, ANN201
    """Run every available micro-batch; returns start_metrics of the run (driver-side)."""
    streaming = session.start(
        query, sink, checkpoint_location=str(checkpoint), plan=plan, late_rows=late_rows
    )
    try:
        streaming.processAllAvailable()
    finally:
        streaming.stop()
    return session.start_metrics(streaming) if plan == "driver" else None


def late_tuples(table: pa.Table) -> list[tuple]:
    """Rows as comparable tuples: timestamps as microseconds."""
    columns = ["ts", "k", "v", "note", "late_reason", "late_watermark"]
    plain = [
        table.column(c).cast(pa.int64())
        if pa.types.is_timestamp(table.schema.field(c).type)
        else table.column(c)
        for c in columns
    ]
    return sorted(zip(*(c.to_pylist() for c in plain), strict=True))


@pytest.mark.parametrize("shape", sorted(QUERIES))
def test_late_rows_and_counts_equal_the_standalone_engine(spark, tmp_path, shape) -> None:
    tables = micro_batches(5)
    expected, want_late, want_count = standalone(tables, QUERIES[shape])
    assert want_count > 0 and want_late.num_rows == want_count and len(expected)
    write_micro_batches(tmp_path / "in", tables)
    session = attached(spark, tmp_path / "in")
    results = Collect()
    metrics = run_start(session, QUERIES[shape], tmp_path / "ck", results, str(tmp_path / "late"))
    got = pq.read_table(tmp_path / "late")
    assert got.column_names == ["ts", "k", "v", "note", "late_reason", "late_watermark"]
    assert got.schema.field("late_watermark").type == pa.timestamp("us", tz="UTC")
    assert late_tuples(got) == late_tuples(want_late)
    assert metrics["late_tuples_dropped"] == want_count
    assert metrics["batches"] >= len(tables)
    # the results are the standalone ones, as without late rows
    assert_same_results(results.table().to_pandas(), expected, ["k"])
    plain = Collect()
    counted = run_start(
        attached(spark, tmp_path / "in"), QUERIES[shape], tmp_path / "ck2", plain, None
    )
    assert results.table().equals(plain.table())
    assert counted["late_tuples_dropped"] == want_count  # counted without late_rows= too
    text = session.explain()
    assert "late_rows=written per batch id (a second Spark job)" in text
    assert "rows=every column of the stream (late_rows=)" in text


def test_no_late_rows_writes_nothing_and_counts_zero(spark, tmp_path) -> None:
    tables = micro_batches(2, back_ms=DELAY_MS // 2)  # nothing reaches back past the watermark
    _, want_late, want_count = standalone(tables, QUERIES["sliding"])
    assert want_count == 0 and want_late.num_rows == 0
    write_micro_batches(tmp_path / "in", tables)
    late = Collect()
    metrics = run_start(
        attached(spark, tmp_path / "in"), QUERIES["sliding"], tmp_path / "ck", Collect(), late
    )
    assert late.calls == [] and metrics["late_tuples_dropped"] == 0
    assert metrics["late_last_batch"] == 0 and metrics["windows_fired"] > 0


def test_rows_on_the_driver_and_a_callable_late_sink(spark, tmp_path) -> None:
    """MEDIAN takes the rows to the driver (Arrow stage 1): the late rows come from those
    rows, without a second Spark job; a callable receives them per batch id."""
    query = (
        "SELECT k, window_start, window_end, MEDIAN(v) AS m, COUNT(*) AS n "
        "FROM s [RANGE 1 SECOND SLIDE 500 MILLISECONDS] GROUP BY k"
    )
    tables = micro_batches(7)
    expected, want_late, want_count = standalone(tables, query)
    assert want_count > 0
    write_micro_batches(tmp_path / "in", tables)
    session = attached(spark, tmp_path / "in")
    results, late = Collect(), Collect()
    metrics = run_start(session, query, tmp_path / "ck", results, late)
    assert "driver arrow-hash-aggregate" in session.explain()
    assert late_tuples(late.table()) == late_tuples(want_late)
    assert all(late.batches[b].num_rows for b in late.calls)  # called only with late rows
    assert sum(t.num_rows for t in late.batches.values()) == metrics["late_tuples_dropped"]
    assert_same_results(results.table().to_pandas(), expected, ["k"])


def test_a_rerun_batch_id_writes_its_late_rows_once(spark, tmp_path) -> None:
    """The results sink fails once on a micro-batch with late rows, after they were
    written; the restarted query re-runs that batch id from the snapshot before it and
    rewrites the same file: the directory holds each late row once, the counters run on
    from the snapshot."""
    tables = micro_batches(11)
    _, want_late, want_count = standalone(tables, QUERIES["sliding"])
    write_micro_batches(tmp_path / "in", tables)
    late_ids = sorted(
        {int(note[1:].split("r")[0]) for note in want_late.column("note").to_pylist()}
    )
    assert len(late_ids) >= 2
    failing = late_ids[1]  # a micro-batch id: one file per micro-batch
    failed: list[int] = []

    def flaky(table: pa.Table, batch_id: int) -> None:
        if batch_id == failing and not failed:
            failed.append(batch_id)
            raise RuntimeError("sink failed once")

    late = str(tmp_path / "late")
    with pytest.raises(Exception, match="sink failed once"):
        run_start(
            attached(spark, tmp_path / "in"), QUERIES["sliding"], tmp_path / "ck", flaky, late
        )
    assert (Path(late) / f"late-batch{failing:012d}.parquet").exists()  # written before
    metrics = run_start(
        attached(spark, tmp_path / "in"), QUERIES["sliding"], tmp_path / "ck", flaky, late
    )
    assert late_tuples(pq.read_table(late)) == late_tuples(want_late)
    assert metrics["late_tuples_dropped"] == want_count  # from the snapshot of the batch before


def test_start_chooses_the_driver_side_plan_for_late_rows_and_says_the_cost(
    spark, tmp_path
) -> None:
    """Tumbling windows run Spark's own aggregation by default, which drops late rows
    unseen: with late_rows= start() takes the driver-side plan, and the reason names the
    added cost. Holistic functions keep sql()'s plan, which writes to a directory only."""
    write_micro_batches(tmp_path / "in", micro_batches(3, count=2))
    session = attached(spark, tmp_path / "in")
    choice, reason = foreach_batch.choose_start(
        session._spark_plan(session.session.sql(QUERIES["tumbling"])), None, late_rows=True
    )
    assert choice == "driver" and foreach_batch.LATE_ROWS_COST in reason
    run_start(session, QUERIES["tumbling"], tmp_path / "ck", Collect(), Collect(), plan=None)
    assert foreach_batch.LATE_ROWS_COST in session.explain()
    median = "SELECT k, MEDIAN(v) AS m FROM s [RANGE 1 SECOND SLIDE 500 MILLISECONDS] GROUP BY k"
    with pytest.raises(PlanError, match="not to a callable"):
        session.start(median, Collect(), checkpoint_location=str(tmp_path / "x"), late_rows=print)
    with pytest.raises(PlanError, match="late_rows must be"):
        session.start(median, Collect(), checkpoint_location=str(tmp_path / "x"), late_rows=3)
    streaming = session.start(
        median, Collect(), checkpoint_location=str(tmp_path / "y"), late_rows=str(tmp_path / "l")
    )
    streaming.stop()
    with pytest.raises(PlanError, match="not one start\\(\\) ran on the driver-side plan"):
        session.start_metrics(streaming)


def test_late_rows_follow_sparks_rule_where_it_differs_from_the_standalone_one(
    spark, tmp_path
) -> None:
    """On `test_spark_late_rows`' micro-batches (rows reaching back after batches that moved
    the largest event time: Spark judges against W_{N-1}, older than the standalone bound),
    start() writes the rows `sql(late_rows=)` writes: Spark's rule by hand."""
    from test_spark_late_rows import late_case, late_rows_written

    expected, _, session = late_case(spark, tmp_path)
    query = (
        "SELECT k, window_start, COUNT(*) AS n FROM s "
        "[RANGE 1 SECOND SLIDE 500 MILLISECONDS] GROUP BY k"
    )
    metrics = run_start(session, query, tmp_path / "ck", Collect(), str(tmp_path / "late"))
    got = late_rows_written(tmp_path / "late")
    assert sorted(got, key=lambda r: r["note"]) == sorted(expected, key=lambda r: r["note"])
    assert metrics["late_tuples_dropped"] == len(expected)


def test_late_rows_must_be_the_counted_ones() -> None:
    """The rows selected for the late panes must be as many as the operator counted (a
    source that reads a micro-batch differently the second time would lose or invent
    some): a DataError otherwise. The rows here are on the driver (no Spark job)."""
    from mangonel.compiler import physical as ph
    from mangonel.errors import DataError
    from mangonel.runtime.operators.base import PANE_META
    from mangonel.runtime.spark import late

    session = mg.Session("cpu")
    session.execute(f"CREATE STREAM s ({DDL}) WITH (event_time = 'ts')")
    window = ph.find(session.sql(QUERIES["sliding"]).plan, ph.WindowAggregateExec)
    table = micro_batches(1, count=1)[0]
    panes = pa.array([i % 3 for i in range(table.num_rows)], pa.int64())
    rows = pa.table(
        [*table.columns, panes],
        names=[alias for alias, _ in late.row_columns(window)] + [PANE_META],
    )
    watermark = pa.scalar(5, pa.timestamp("us", tz="UTC"))
    lates = sum(1 for p in panes.to_pylist() if p <= 1)
    verdict = late.LateVerdict(1, lates, "window closed", watermark)
    found = late.driver_late_rows(window, rows, verdict)
    assert found.column_names == ["ts", "k", "v", "note", "late_reason", "late_watermark"]
    assert found.num_rows == lates and found["late_watermark"].cast(pa.int64())[0].as_py() == 5
    with pytest.raises(DataError, match="not the .* the window operator counted"):
        late.driver_late_rows(window, rows, late.LateVerdict(1, lates + 1, "x", watermark))
