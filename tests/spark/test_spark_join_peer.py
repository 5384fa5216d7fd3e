"""`mangonel bench --join`'s peer: Spark's native window join gives mangonel's rows on the
same input (the check the benchmark prints as "equal"), tumbling and sliding, aggregated and
materialised."""

from __future__ import annotations

import pyarrow as pa
import pytest

from mangonel.bench_join import JoinShape, make_arrivals, make_session, same_rows
from mangonel.runtime.spark.join_peer import native_window_join


@pytest.mark.parametrize(
    "shape",
    [
        JoinShape("tumbling", keys=50, skew=1.0),
        JoinShape("sliding", keys=50, slide_us=250_000),
        JoinShape("rows", keys=50, aggregate=False),
    ],
    ids=lambda s: s.label,
)
def test_spark_window_join_equals_mangonel(spark, shape: JoinShape) -> None:  # noqa: ANN001
    arrivals = make_arrivals(shape, 6_000, 1_000, 1_000, seed=5)
    ours = make_session(shape).sql(shape.query()).run(arrivals)
    tables = [
        pa.Table.from_batches([b for n, b in arrivals if n == name]) for name in ("lefts", "rights")
    ]
    seconds, theirs = native_window_join(
        spark, *tables, shape.range_us, shape.slide_us, shape.aggregate
    )
    assert seconds > 0 and ours.num_rows > 0
    assert same_rows(ours, theirs, shape.aggregate)
    assert not same_rows(ours.slice(1), theirs, shape.aggregate)
