"""A factorised aggregated window join inside Spark (two side window aggregations per key
bucket, compiler/factorised.py) equals Spark's own stream-stream join of `window()` on
both sides followed by the same aggregation, on sliding windows."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F
from spark_harness import assert_same_results, run_to_memory
from test_spark_join import attach, native_join_aggregate, window_clause, write_streams

from mangonel.compiler import physical as ph

pytestmark = pytest.mark.spark


@pytest.mark.parametrize(("size", "slide"), [("1 second", "250 milliseconds")])
def test_factorised_join_equals_sparks_stream_stream_join(spark, tmp_path, size, slide):
    write_streams(tmp_path)
    session = attach(spark, tmp_path)
    clause = window_clause(size.upper(), slide.upper())
    query = session.sql(
        f"SELECT l.k AS k, window_start, window_end, COUNT(*) AS n, SUM(l.v) AS s, "
        f"MAX(r.w) AS m FROM a {clause} AS l JOIN b {clause} AS r ON l.k = r.k GROUP BY l.k"
    )
    assert ph.find(session.last_plan.plan, ph.JoinAggregateExec).factorised is not None
    ours = run_to_memory(query, tmp_path / "ck_ours")
    theirs = native_join_aggregate(spark, tmp_path, size, slide, F.col("v"))
    assert len(ours) > 0
    assert_same_results(ours, theirs, ["k"])
