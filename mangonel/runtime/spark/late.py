"""Late rows as data inside Spark: `ms.sql(query, late_rows="<directory>")`.

Inside Spark a row is late by Spark's rule for windowed aggregation (docs/spark.md,
"Watermark and late data"): in micro-batch N, a row whose windows all ended at or before
W_{N-1} (the watermark for late events, one micro-batch older than the one that fires). Only
stage 2 knows W_{N-1} (each bucket's operator holds it), and stage 2 sees pane partials, not
rows. So, when late rows are asked for, stage 1 hands each partial row the tuples it was made
of: the stream's columns of its (key, pane) cell's rows of the partition, as Arrow IPC bytes in
one extra column (`ROWS`). Stage 2 merges the partials as always; the window operator's
judgement of a partial row as late (the verdict it counts, `late_rows.LateRows`, never a second
rule) hands that partial row to the sink, and its tuples are the late rows, written with
`late_reason` and `late_watermark` to a Parquet file in the directory.

Files: `late-bucket<b>-call<n>.parquet`, `n` counting the bucket's stage-2 calls in its Spark
state: a retried task restores the same state and rewrites the same file, so each late row is
in the directory once. Read them with `spark.read.parquet(directory)` (or any Parquet reader).

Cost: every row of the stream crosses into Python with every column (not only those the
query reads) and through the shuffle beside its partial, about what a plan without pane
pre-aggregation would move. Arrow stage 1 (the CPU default) carries the rows, and so does
the count windows' per-tuple stage 1 (one row per partial, stage1.kernel_stage1); the native
plan (Spark's own aggregation drops late rows unseen) refuses `late_rows` (planner.py). Join
queries hand out theirs from the join's stage (join.py), with this module's file naming.
"""

from __future__ import annotations

import io
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import Column as SparkColumn
from pyspark.sql import functions as F

from mangonel.compiler import physical as ph
from mangonel.runtime.operators.late_rows import REASON_COLUMN, WATERMARK_COLUMN
from mangonel.runtime.spark.schema import quote

ROWS = "__mangonel_rows"  # a partial row's tuples: Arrow IPC stream bytes
ROW_ID = "__mangonel_row_id"
ROW_PREFIX = "__mangonel_row_"
ROWS_DDL = f"{ROWS} BINARY"


def row_columns(window: ph.WindowAggregateExec) -> list[tuple[str, str]]:
    """(name inside stage 1, the stream's column name) of every column of the stream: the
    key columns keep their names in stage 1, so the row's copies are renamed."""
    stream = window.lift.scan.stream
    return [(f"{ROW_PREFIX}{i}", c.name) for i, c in enumerate(stream.schema.columns)]


def row_select(window: ph.WindowAggregateExec) -> list[SparkColumn]:
    return [F.col(quote(name)).alias(alias) for alias, name in row_columns(window)]


def rows_of_groups(
    table: pa.Table, row_lists: pa.ChunkedArray | pa.Array, columns: list[tuple[str, str]]
) -> pa.Array:
    """One IPC blob per group: the rows of `table` a group's row-id list names, with the
    stream's column names."""
    rows = table.select([alias for alias, _ in columns]).rename_columns([n for _, n in columns])
    blobs = []
    for ids in row_lists.to_pylist():
        sink = io.BytesIO()
        chosen = rows.take(pa.array(ids, pa.int64()))
        with pa.ipc.new_stream(sink, chosen.schema) as writer:
            writer.write_table(chosen)
        blobs.append(sink.getvalue())
    return pa.array(blobs, pa.binary())


def expand(late_partials: list[pa.RecordBatch]) -> pa.Table | None:
    """The tuples of the partial rows the operator judged late, with their partial row's
    `late_reason` and `late_watermark`; None when there are none."""
    tables = []
    for batch in late_partials:
        reasons = batch.column(REASON_COLUMN)
        watermarks = batch.column(WATERMARK_COLUMN)
        for i, blob in enumerate(batch.column(ROWS).to_pylist()):
            rows = pa.ipc.open_stream(blob).read_all()
            n = rows.num_rows
            rows = rows.append_column(REASON_COLUMN, pa.repeat(reasons[i], n))
            tables.append(rows.append_column(WATERMARK_COLUMN, pa.repeat(watermarks[i], n)))
    if not tables:
        return None
    return pa.concat_tables(tables)


def write(directory: str, table: pa.Table, bucket: int, call: int) -> None:
    """One stage-2 call's late rows as one Parquet file (named by bucket and call: a retry
    rewrites it)."""
    if "://" not in directory:
        os.makedirs(directory, exist_ok=True)
    name = f"late-bucket{bucket:05d}-call{call:012d}.parquet"
    pq.write_table(table, f"{directory.rstrip('/')}/{name}")


def null_rows(count: int) -> pa.Array:
    """The ROWS column of carrier rows (no tuples)."""
    return pa.nulls(count, pa.binary())


def row_ids(count: int) -> pa.Array:
    return pa.array(np.arange(count, dtype=np.int64))
