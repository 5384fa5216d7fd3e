"""The stream the holistic, percentile, sketch, Python window function and window struct tests
share, `s (ts TIMESTAMP, k BIGINT, x BIGINT, n INT, v DOUBLE)`, and a query run over a few
hand-written rows of it on the CPU (one batch, then end of input)."""

from __future__ import annotations

import pyarrow as pa

import mangonel
from mangonel.runtime.local.query import LocalQuery

# the columns as tests/oracle.py names their types
COLUMNS = {"ts": "timestamp", "k": "bigint", "x": "bigint", "n": "int", "v": "double"}
DDL = (
    "CREATE STREAM s (ts TIMESTAMP, k BIGINT, x BIGINT, n INT, v DOUBLE) "
    "WITH (event_time = 'ts', watermark = '{delay} microseconds')"
)
SCHEMA = pa.schema(
    [("ts", pa.timestamp("us")), ("k", pa.int64()), ("x", pa.int64()), ("n", pa.int32())]
    + [("v", pa.float64())]
)


def cpu_session(delay: int = 0) -> mangonel.Session:
    """A CPU session with the stream declared, its watermark `delay` microseconds behind."""
    session = mangonel.Session(backend="cpu")
    session.execute(DDL.format(delay=delay))
    return session


def batch_of(rows: list[dict]) -> pa.RecordBatch:
    """Rows naming only the columns a test cares about: k 0, n 0, x and v NULL otherwise."""
    return pa.RecordBatch.from_pylist(
        [{"n": 0, "x": None, "v": None, "k": 0, **row} for row in rows], schema=SCHEMA
    )


def run_rows(session: mangonel.Session, query: str, rows: list[dict]) -> list[dict]:
    """Every row the query emits over `rows` (one batch, then end of input), in order."""
    runner = LocalQuery(session.sql(query).plan)
    out = runner.process(batch_of(rows)) + runner.finish()
    return [row for batch in out for row in batch.to_pylist()]
