"""Window joins inside Spark: both sides' rows, tagged by side, grouped by a key bucket
(`applyInPandasWithState`); one bucket's whole join operator is its Spark state.

Each stream side keeps Spark's `withWatermark(event_time, delay)`; the side's rows (the columns
the query reads) get the side tag and a bucket, Spark's hash of the join keys that the planner
chose (`planner.bucket_key_pairs`): rows with equal keys meet in one bucket. The two sides are
unioned by name (a side's columns are NULL in the other side's rows) and grouped by bucket.
A static table (`register_table`) is read once when `sql()` builds the query (the table "as it
is when the query starts"), bucketed by Spark with the same hash, and shipped with the
callback: a bucket loads its table rows once, when it starts; from then on they are part of
its snapshot.

Watermark: Spark's global one, `min` over the two streams' watermarks (Spark's default
`multipleWatermarkPolicy`; 0 until every stream has had data, where mangonel standalone says
minus infinity), read per call with `getCurrentWatermarkMs()`. The join operator is driven by
it (`JoinOperator.drive_watermark`): a bucket sees only its keys' rows, so it cannot derive the
watermark from them. As in stage2.py, rows of micro-batch N are late against the watermark the
bucket saw last (W_{N-1}: a bucket runs in every micro-batch whose watermark moved, through its
event-time timeout), then every window with end <= W_N fires. The event times travel as
microseconds (BIGINT), so no input column carries Spark's watermark metadata: the callback's
watermarked column is stage2's far-future constant and no input row is dropped by Spark.

Late rows as data (`ms.sql(query, late_rows=directory)`): the rows already reach the join
operator, so each stream side then carries every column of its stream (not only those the
query reads), the operator's late-row sinks keep the rows it judges late (its own verdict,
the one it counts), and each call writes them as one Parquet file (late.py: named by bucket
and call, the call count kept in the bucket's state, so a retried task rewrites the same
file), in the standalone join's columns: the stream's columns, `late_reason`,
`late_watermark` and `late_stream`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from mangonel.catalog.catalog import Column
from mangonel.catalog.types import SqlType
from mangonel.compiler import physical as ph
from mangonel.errors import CatalogError
from mangonel.runtime.operators.join import JoinOperator
from mangonel.runtime.operators.late_rows import late_schema, late_table
from mangonel.runtime.spark import late
from mangonel.runtime.spark.functions import bucket_tree
from mangonel.runtime.spark.join_metrics import (
    metric_columns,
    metric_row,
    metric_values,
    observed,
)
from mangonel.runtime.spark.planner import SparkQueryPlan, join_bucket_sql
from mangonel.runtime.spark.schema import ddl, quote, spark_interval
from mangonel.runtime.spark.stage1 import BUCKET
from mangonel.runtime.spark.stage2 import (
    LATE_STATE_DDL,
    NEVER_LATE,
    NEVER_LATE_VALUE,
    STATE_DDL,
    WATERMARK_DELAY_KEY,
)

SIDE = "__mangonel_side"
NULL_FLAG = "__null"  # an integer column's NULL flag (see `_carried`)


def side_column(side: int, name: str) -> str:
    """A side's column in the unioned rows (both sides may have a column of one name)."""
    return f"__mangonel_s{side}_{name}"


def _event_time(scan: ph.StreamScanExec | ph.TableScanExec) -> str | None:
    return scan.stream.event_time if isinstance(scan, ph.StreamScanExec) else None


def _carried(
    scan: ph.StreamScanExec | ph.TableScanExec, side: int, every: bool = False
) -> list[tuple[str, Column, str]]:
    """How a side's columns cross into Python: (name, column, how). Rows reach the callback
    as pandas, where an integer column with a NULL becomes float64 and a BIGINT loses its low
    bits above 2^53; so integers travel as a never-NULL BIGINT plus a NULL flag ("int"), the
    event time as BIGINT microseconds and a NULL flag ("time": it must not carry Spark's
    watermark metadata, see the module docstring; rows with a NULL time reach the operator,
    which drops and counts them as standalone), the rest as they are ("plain"). `every`:
    every column of a stream, not only those the query reads (its late rows keep them)."""
    event_time = _event_time(scan)
    out = []
    columns = scan.columns
    if every and isinstance(scan, ph.StreamScanExec):
        columns = scan.stream.schema.columns
    for column in columns:
        if column.name == event_time:
            how = "time"
        elif column.type in (SqlType.INT, SqlType.BIGINT):
            how = "int"
        else:
            how = "plain"
        out.append((side_column(side, column.name), column, how))
    return out


def _transport_columns(
    scan: ph.StreamScanExec | ph.TableScanExec, side: int, own: bool, every: bool
) -> list[SparkColumn]:
    """A side's transport columns: its values (`own`), or fillers for the other side's rows
    (the union needs no missing column, so no integer column is NULL-padded)."""
    columns = []
    for name, column, how in _carried(scan, side, every):
        source = F.col(quote(column.name))
        if how in ("time", "int"):
            micros = F.expr(f"unix_micros({quote(column.name)})") if how == "time" else source
            value = F.coalesce(micros.cast("bigint"), F.lit(0)) if own else F.lit(0)
            columns.append(value.cast("bigint").alias(name))
            columns.append((source.isNull() if own else F.lit(True)).alias(name + NULL_FLAG))
        else:
            value = source if own else F.lit(None).cast(column.type.info.spark)
            columns.append(value.alias(name))
    return columns


def _side_rows(
    join: ph.WindowJoinExec,
    side: int,
    frame: DataFrame,
    planned: SparkQueryPlan,
    every: bool = False,
) -> DataFrame:
    """A side's rows, fillers for the other stream's columns, its tag and bucket (Spark SQL,
    run by Spark); `every`: the streams carry all their columns (late rows)."""
    scan = join.children[side]
    event_time = _event_time(scan)
    columns = []
    for index, other in enumerate(join.children):
        if index == side or (event_time is not None and isinstance(other, ph.StreamScanExec)):
            columns += _transport_columns(other, index, own=index == side, every=every)
    columns.append(F.lit(side).alias(SIDE))
    bucket = join_bucket_sql(join, side, planned.join_keys, planned.buckets)
    columns.append(F.expr(bucket).cast("int").alias(BUCKET))
    return frame.select(*columns)


def _side_batch(
    table: pa.Table, scan: ph.StreamScanExec | ph.TableScanExec, side: int, every: bool = False
) -> pa.RecordBatch:
    """A side's rows as its scan (`every`: its stream) names and types them (what the join
    operator reads; it takes the columns it needs by name)."""
    arrays, fields = [], []
    for name, column, how in _carried(scan, side, every):
        array = table[name].combine_chunks()
        if how in ("time", "int"):
            flags = table[name + NULL_FLAG].combine_chunks()
            values = array.to_numpy(zero_copy_only=False)
            nulls = flags.to_numpy(zero_copy_only=False)
            array = pa.array(values, pa.int64(), mask=nulls).cast(column.type.info.arrow)
        arrays.append(array)
        fields.append(pa.field(column.name, column.type.info.arrow))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def _from_pandas(rows: pd.DataFrame, scan: ph.StreamScanExec, side: int, every: bool) -> pa.Table:
    columns: dict[str, pa.Array] = {}
    for name, column, how in _carried(scan, side, every):
        if how == "plain":
            columns[name] = pa.Array.from_pandas(rows[name], type=column.type.info.arrow)
            continue
        columns[name] = pa.array(rows[name].to_numpy(np.int64))
        columns[name + NULL_FLAG] = pa.array(rows[name + NULL_FLAG].to_numpy(np.bool_))
    return pa.table(columns)


def _frames_by_side(
    frames: Iterator[pd.DataFrame], join: ph.WindowJoinExec, every: bool
) -> list[tuple[int, pa.RecordBatch]]:
    """One call's rows, split by side (stream sides only); `every`: they carry all their
    stream's columns."""
    parts = [frame for frame in frames if len(frame)]
    if not parts:
        return []
    frame = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    out = []
    for side, scan in enumerate(join.children):
        if isinstance(scan, ph.TableScanExec):
            continue
        rows = frame[frame[SIDE] == side]
        if len(rows):
            table = _from_pandas(rows, scan, side, every)
            out.append((side, _side_batch(table, scan, side, every)))
    return out


def _null_row(schema: pa.Schema) -> pa.Table:
    """One row of NULLs in every result column (the metrics row's result part)."""
    return pa.table([pa.nulls(1, f.type) for f in schema], schema=schema)


def bucket_function(  # noqa: ANN201
    plan: ph.ProjectExec, table_rows: tuple[int, pa.Table] | None, late_rows: str | None = None
):
    """The applyInPandasWithState callback of one join query; `table_rows`: (side, rows with
    their bucket) of a static table; `late_rows`: the directory the late rows go to."""
    join = ph.find(plan, ph.WindowJoinExec)
    metrics = [name for name, _ in metric_columns(join)]
    every = late_rows is not None
    no_late_rows = late_schema(pa.schema([]), stream=True)  # (never written: only found rows)

    def run_bucket(
        bucket: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        tree = bucket_tree(plan)  # the join operator, then aggregation, HAVING, projection
        operator = tree.find(JoinOperator)
        operator.drive_watermark()
        results = tree.schema
        out: list[pa.RecordBatch] = []
        watermark_ms = state.getCurrentWatermarkMs()
        calls = 0  # this bucket's calls so far: names its late-row files
        if every:
            tree.keep_late_rows()
        if state.exists:
            tree.restore(bytes(state.get[0]))
            calls = int(state.get[1]) if every else 0
            before = metric_values(join, operator.metrics())
        else:
            before = metric_values(join, None)
            # A new bucket has not seen the watermark yet (a bucket learns it when it runs):
            # its first rows are judged against this micro-batch's, the one Spark knows now.
            out += tree.on_watermark(watermark_ms * 1000)
            if table_rows is not None:
                side, rows = table_rows
                mine = rows.filter(pc.equal(rows[BUCKET], pa.scalar(int(bucket[0]), pa.int32())))
                tree.process(_side_batch(mine, join.children[side], side), side)
        if not state.hasTimedOut:
            for side, batch in _frames_by_side(frames, join, every):
                out += tree.process(batch, side)
        out += tree.on_watermark(watermark_ms * 1000)
        if every:
            found = tree.take_late_rows()
            if found:
                late.write(late_rows, late_table(found, no_late_rows), int(bucket[0]), calls)
            state.update((tree.snapshot(), calls + 1))
        else:
            state.update((tree.snapshot(),))
        # woken in the next micro-batch whose watermark is higher (see stage2.py)
        state.setTimeoutTimestamp(max(watermark_ms, 1))
        for batch in out:
            if batch.num_rows:
                yield _with_metrics(pa.Table.from_batches([batch], schema=results), None)
        after = metric_values(join, operator.metrics())
        yield _with_metrics(_null_row(results), metric_row(before, after))

    def _with_metrics(table: pa.Table, values: dict[str, int] | None) -> pd.DataFrame:
        """Result rows (metric columns NULL) or the metrics row (`values`)."""
        for name in metrics:
            value = (
                pa.nulls(table.num_rows, pa.int64())
                if values is None
                else pa.array([values[name]], pa.int64())
            )
            table = table.append_column(name, value)
        return table.to_pandas()

    return run_bucket


def join_query(
    planned: SparkQueryPlan, frames: dict[str, DataFrame], late_rows: str | None = None
) -> DataFrame:
    """The join query as a streaming DataFrame in append mode; `frames`: each input's
    DataFrame by lower-case name (streams without a watermark yet); `late_rows`: the
    directory the rows the join finds late are written to (see the module docstring)."""
    join = planned.join
    assert join is not None
    streams: list[DataFrame] = []
    table_rows: tuple[int, pa.Table] | None = None
    for side, scan in enumerate(join.children):
        name = scan.table.name if isinstance(scan, ph.TableScanExec) else scan.stream.name
        frame = frames.get(name.lower())
        if frame is None:
            kind = "table" if isinstance(scan, ph.TableScanExec) else "stream"
            raise CatalogError(
                f"{kind} {name!r} has no Spark DataFrame behind it",
                hint=f"register({name!r}, spark.readStream..., event_time=...) or "
                f"register_table({name!r}, df)",
            )
        if isinstance(scan, ph.TableScanExec):
            table_rows = (side, _side_rows(join, side, frame, planned).toArrow())
            continue
        delay = spark_interval(join.watermark_delays[side] or 0)
        watermarked = frame.withWatermark(scan.stream.event_time, delay)
        streams.append(_side_rows(join, side, watermarked, planned, late_rows is not None))
    rows = streams[0]
    if len(streams) == 2:
        rows = rows.unionByName(streams[1])
    never_late = F.lit(NEVER_LATE_VALUE).cast("timestamp")
    keyed = rows.select("*", never_late.alias(NEVER_LATE, metadata={WATERMARK_DELAY_KEY: 0}))
    outputs = [o.name for o in planned.plan.outputs]
    columns = [(o.name, o.type) for o in planned.plan.outputs] + metric_columns(join)
    joined = keyed.groupBy(BUCKET).applyInPandasWithState(
        bucket_function(planned.plan, table_rows, late_rows),
        outputStructType=ddl(columns),
        stateStructType=STATE_DDL if late_rows is None else LATE_STATE_DDL,
        outputMode="append",
        timeoutConf=GroupStateTimeout.EventTimeTimeout,
    )
    return observed(joined, join, outputs)


__all__ = ["join_query", "side_column"]
