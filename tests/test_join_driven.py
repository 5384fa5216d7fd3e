"""The join operator driven by an outside watermark (`JoinOperator.drive_watermark`, how the
Spark runner uses it, no Spark here): key buckets that each see part of the rows, fed
micro-batches and a global watermark as Spark computes it, give the standalone results; the
watermark survives snapshot/restore; lateness is judged against the last watermark given."""

from __future__ import annotations

import pyarrow as pa
from oracle import rows_of

from mangonel.runtime.operators.join import JoinOperator
from mangonel.runtime.operators.tree import OperatorTree
from mangonel.session import Session

MS = 1000
CLICKS = pa.schema([("ts", pa.timestamp("us")), ("k", pa.int64()), ("x", pa.int64())])
VIEWS = pa.schema([("ts", pa.timestamp("us")), ("k", pa.int32()), ("y", pa.float64())])
DELAY = 50 * MS
QUERY = (
    "SELECT l.k AS k, window_start, window_end, COUNT(*) AS n, SUM(l.x * r.y) AS s "
    "FROM clicks [RANGE 1 SECOND SLIDE 250 MILLISECONDS] AS l "
    "JOIN views [RANGE 1 SECOND SLIDE 250 MILLISECONDS] AS r ON l.k = r.k GROUP BY l.k"
)


def session() -> Session:
    s = Session("cpu")
    for name, columns in (("clicks", "k BIGINT, x BIGINT"), ("views", "k INT, y DOUBLE")):
        s.execute(
            f"CREATE STREAM {name} (ts TIMESTAMP, {columns}) WITH (event_time = 'ts', "
            f"watermark = '{DELAY} microseconds')"
        )
    return s


def micro_batches(count: int) -> list[tuple[pa.RecordBatch, pa.RecordBatch]]:
    """In order: micro-batch i covers [i, i + 1) seconds of both streams."""
    out = []
    for i in range(count):
        times = range(i * 1000, (i + 1) * 1000, 23)
        clicks = [{"ts": t * MS, "k": t % 5, "x": t % 7} for t in times]
        views = [{"ts": (t + 5) * MS, "k": (t // 3) % 5, "y": t / 8} for t in times]
        out.append(
            (
                pa.RecordBatch.from_pylist(clicks, schema=CLICKS),
                pa.RecordBatch.from_pylist(views, schema=VIEWS),
            )
        )
    return out


def driven_tree(plan) -> OperatorTree:  # noqa: ANN001
    tree = OperatorTree(plan)
    tree.find(JoinOperator).drive_watermark()
    return tree


def bucket_of(batch: pa.RecordBatch, bucket: int) -> pa.RecordBatch:
    keys = batch.column(1).to_pylist()
    return batch.filter(pa.array([k % 2 == bucket for k in keys]))


def test_buckets_driven_by_the_global_watermark_give_the_standalone_results() -> None:
    query = session().sql(QUERY)
    batches = micro_batches(6)
    arrivals = [
        (name, b) for pair in batches for name, b in zip(("clicks", "views"), pair, strict=True)
    ]
    trees = [driven_tree(query.plan) for _ in range(2)]
    out: list[pa.RecordBatch] = []
    watermark = 0  # Spark's global watermark before any data
    for number, (clicks, views) in enumerate(batches + [(None, None)]):  # then a no-data batch
        if number == 3:  # a restart: every bucket from its snapshot
            saved = [tree.snapshot() for tree in trees]
            trees = [driven_tree(query.plan) for _ in range(2)]
            for tree, data in zip(trees, saved, strict=True):
                tree.restore(data)
        for bucket, tree in enumerate(trees):
            if clicks is not None:
                out += tree.process(bucket_of(clicks, bucket), 0)
                out += tree.process(bucket_of(views, bucket), 1)
            out += tree.on_watermark(watermark)
        if clicks is not None:  # W for the next micro-batch: min over the streams
            top = [int(b.column(0).cast(pa.int64()).to_numpy().max()) for b in (clicks, views)]
            watermark = max(watermark, min(t - DELAY for t in top))
    driven = rows_of(pa.Table.from_batches(out, schema=trees[0].schema))
    expected = [
        row
        for row in rows_of(query.run(arrivals))
        if row["window_end"] <= watermark  # rows_of gives microseconds
    ]
    key = lambda row: (row["window_start"], row["k"])  # noqa: E731
    assert len(expected) > 20
    assert sorted(driven, key=key) == sorted(expected, key=key)
    assert all(t.metrics().late_tuples_dropped == 0 for t in trees)


def test_a_driven_join_judges_lateness_by_the_last_watermark_given() -> None:
    query = session().sql(QUERY)
    tree = driven_tree(query.plan)
    ((clicks, views),) = micro_batches(1)
    tree.process(clicks, 0)
    tree.process(views, 1)  # their own times do not move a driven join's watermark
    assert tree.find(JoinOperator).watermark() is None
    assert tree.on_watermark(2_000 * MS)  # windows ending by 2 s fire
    restored = driven_tree(query.plan)
    restored.restore(tree.snapshot())
    assert restored.find(JoinOperator).watermark() == 2_000 * MS
    late = pa.RecordBatch.from_pylist([{"ts": 900 * MS, "k": 1, "x": 1}], schema=CLICKS)
    assert restored.process(late, 0) == []
    assert restored.metrics().late_tuples_dropped == 1
    assert restored.on_watermark(1_000 * MS) == []  # a watermark never goes back
    assert restored.find(JoinOperator).watermark() == 2_000 * MS
