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

The driver-side plan (`ms.start(..., late_rows=)`, foreach_batch.py) has one window operator
on the driver and the micro-batch as a batch DataFrame: its partials carry no tuples; the
operator's verdict on them names the late panes (`judged_late`), and the rows of those panes
are selected from the micro-batch (`driver_late_rows`), one file per batch id
(`write_batch`).
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from mangonel.compiler import physical as ph
from mangonel.errors import DataError
from mangonel.runtime.operators.base import PANE_META
from mangonel.runtime.operators.late_rows import REASON_COLUMN, WATERMARK_COLUMN, with_late_columns
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
    _write(directory, table, f"late-bucket{bucket:05d}-call{call:012d}.parquet")


def write_batch(directory: str, table: pa.Table, batch_id: int) -> None:
    """The driver-side plan's late rows of one micro-batch as one Parquet file, named by
    batch id: a re-run batch id rewrites it."""
    _write(directory, table, f"late-batch{batch_id:012d}.parquet")


def _write(directory: str, table: pa.Table, name: str) -> None:
    if "://" not in directory:
        os.makedirs(directory, exist_ok=True)
    pq.write_table(table, f"{directory.rstrip('/')}/{name}")


def null_rows(count: int) -> pa.Array:
    """The ROWS column of carrier rows (no tuples)."""
    return pa.nulls(count, pa.binary())


def row_ids(count: int) -> pa.Array:
    return pa.array(np.arange(count, dtype=np.int64))


# -- the driver-side plan (foreach_batch.py) ----------------------------------------------


@dataclass(frozen=True)
class LateVerdict:
    """What the driver's window operator judged late in one micro-batch's partials."""

    last_pane: int  # the latest late pane: one watermark judges them all, so every pane
    # up to it is late, and no later one is
    tuples: int  # the tuples those partials hold: what the operator counted
    reason: str
    watermark: pa.Scalar  # the watermark they were judged against (timestamp[us, UTC])


def merge_keeping_late(operator: Any, partials: pa.RecordBatch) -> list[pa.RecordBatch]:  # noqa: ANN401
    """`merge` of partials into a window operator (its split form), returning the partial
    rows it judged late: its own verdict, the one it counts."""
    sink = operator.late_rows
    sink.keep = True
    sink.arriving(partials)
    try:
        operator.merge(partials)
    finally:
        sink.done()
    return sink.take()


def judged_late(operator: Any, partials: pa.RecordBatch) -> LateVerdict | None:  # noqa: ANN401
    """`merge` of one micro-batch's partials into the driver's window operator, keeping the
    partial rows it judges late (its own verdict, the one it counts); None when none is."""
    counted = operator.metrics().late_tuples_dropped
    pieces = merge_keeping_late(operator, partials)
    if not pieces:
        return None
    table = pa.Table.from_batches(pieces)
    judged = table.select([REASON_COLUMN, WATERMARK_COLUMN]).group_by(
        [REASON_COLUMN, WATERMARK_COLUMN]
    )
    verdicts = judged.aggregate([]).to_pylist()
    if len(verdicts) != 1:
        raise AssertionError(f"one micro-batch, one watermark: the verdicts are {verdicts}")
    return LateVerdict(
        last_pane=pc.max(table[PANE_META]).as_py(),
        tuples=operator.metrics().late_tuples_dropped - counted,
        reason=table[REASON_COLUMN][0].as_py(),
        watermark=table[WATERMARK_COLUMN][0],
    )


def driver_late_rows(
    window: ph.WindowAggregateExec, rows: DataFrame | pa.Table, verdict: LateVerdict
) -> pa.Table:
    """The late rows of a micro-batch whose rows carry `row_select`'s columns beside the
    pane (the micro-batch as a batch DataFrame: one more Spark job; or its rows already on
    the driver), with the stream's column names, `late_reason` and `late_watermark`.
    DataError unless they are exactly the tuples the operator counted."""
    columns = row_columns(window)
    aliases = [alias for alias, _ in columns]
    if isinstance(rows, pa.Table):
        chosen = rows.filter(pc.less_equal(rows[PANE_META], verdict.last_pane)).select(aliases)
    else:
        chosen = rows.where(F.col(PANE_META) <= verdict.last_pane)
        chosen = chosen.select(*[F.col(quote(alias)) for alias in aliases]).toArrow()
    if chosen.num_rows != verdict.tuples:
        raise DataError(
            f"the late rows selected ({chosen.num_rows}) are not the {verdict.tuples} the "
            f"window operator counted (panes up to {verdict.last_pane}): a source that "
            "reads a micro-batch differently the second time cannot hand out late rows"
        )
    named = chosen.rename_columns([name for _, name in columns])
    batch = pa.RecordBatch.from_arrays(
        [column.combine_chunks() for column in named.columns], schema=named.schema
    )
    watermark = verdict.watermark.cast(pa.int64()).as_py()
    return pa.Table.from_batches([with_late_columns(batch, verdict.reason, watermark, None)])
