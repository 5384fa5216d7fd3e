"""The reader path's partition work without Spark (`mangonel.runtime.spark.pane_reader`): a
partition's partials equal stage 1's, its watermark time counts the rows Spark's pushed-down
WHERE keeps, and partitions are pure functions of the offsets (restarts re-read the same
rows). The device runs `partition_batches` in `test_spark_functions_gpu.py`."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sqlglot import exp

sys.path.insert(0, str(Path(__file__).parent))

from spark_functions import micro_batches, query_plan, reader_spec  # noqa: E402

import mangonel as mg  # noqa: E402
from mangonel.compiler import physical as ph  # noqa: E402
from mangonel.runtime.spark import functions  # noqa: E402
from mangonel.runtime.spark.pane_reader import (  # noqa: E402
    EVENT_TIME,
    partition_batches,
    read_file_part,
    read_generator_part,
    watermark_predicate,
)
from mangonel.runtime.spark.reader_offsets import (  # noqa: E402
    CHUNK_ROWS,
    file_parts,
    generator_parts,
    next_files,
)


def test_a_partition_yields_stage_ones_partials_and_the_watermark_time_of_pushed_rows():
    window = ph.find(query_plan("cpu"), ph.WindowAggregateExec)
    batch = micro_batches(count=1)[0]
    out = list(partition_batches(reader_spec(window), pa.Table.from_batches([batch])))
    assert [b.num_rows for b in out][0] == 0  # the (here empty) carriers come first
    partials = out[1]
    want = functions.stage1_preaggregate(window, (), batch)
    assert partials.drop_columns([EVENT_TIME]).to_pylist() == want.to_pylist()
    # WHERE v > 0 does not read ts: Spark pushes it below its watermark, so only rows with
    # v > 0 count for the maximum event time (v NULL: not kept)
    ts = batch.column("ts").cast(pa.int64()).to_numpy(zero_copy_only=False)
    values = batch.column("v").to_numpy(zero_copy_only=False)
    kept = np.nan_to_num(values, nan=-1.0) > 0
    times = partials.column(EVENT_TIME).cast(pa.int64()).to_numpy()
    assert set(times.tolist()) == {int(ts[kept].max())}
    assert int(ts[kept].max()) != int(ts.max())  # the case tells the two rules apart


def test_conjuncts_that_read_the_event_time_stay_above_the_watermark():
    session = mg.Session(backend="cpu")
    session.execute(
        "CREATE STREAM t (ts TIMESTAMP, k BIGINT, v DOUBLE) "
        "WITH (event_time = 'ts', watermark = '200 milliseconds')"
    )
    query = (
        "SELECT k, window_start, COUNT(*) AS n FROM t [RANGE 1 SECOND SLIDE 250 MILLISECONDS] "
        "WHERE {} GROUP BY k"
    )
    window = ph.find(
        session.sql(query.format("ts > TIMESTAMP '2026-01-01 00:00:00'")).plan,
        ph.WindowAggregateExec,
    )
    assert watermark_predicate(window) is None
    mixed = session.sql(query.format("v > 1 AND ts > TIMESTAMP '2026-01-01 00:00:00' AND k < 9"))
    pushed = watermark_predicate(ph.find(mixed.plan, ph.WindowAggregateExec))
    assert pushed is not None
    assert sorted(c.name for c in pushed.find_all(exp.Column)) == ["k", "v"]


def test_generator_partitions_cover_the_offsets_on_chunk_boundaries():
    window = ph.find(query_plan("cpu"), ph.WindowAggregateExec)
    options = {
        "columns": '[["ts", "TIMESTAMP", true], ["k", "BIGINT", true], ["v", "DOUBLE", true]]',
        "event_time": "ts",
        "tuples": str(5 * CHUNK_ROWS),
        "rate": "100000",
        "keys": "7",
        "seed": "4",
    }
    spec = reader_spec(window, generator=options, splits=2)
    begin, end = CHUNK_ROWS // 2, 4 * CHUNK_ROWS + 17
    parts = generator_parts(spec, begin, end)
    assert len(parts) == 2 and parts[0][0] == begin and parts[-1][1] == end
    assert all(
        a[1] == b[0] and a[1] % CHUNK_ROWS == 0 for a, b in zip(parts[:-1], parts[1:], strict=True)
    )
    whole = read_generator_part(spec, begin, end)
    pieces = pa.concat_tables([read_generator_part(spec, a, b) for a, b in parts])
    assert pieces.equals(whole)
    assert read_generator_part(spec, begin, end).equals(whole)  # pure function of offsets


def test_file_offsets_read_files_in_name_order_one_partition_per_row_group(tmp_path):
    window = ph.find(query_plan("cpu"), ph.WindowAggregateExec)
    batches = micro_batches(count=3, rows=3000)
    for number, batch in enumerate(batches):
        pq.write_table(
            pa.Table.from_batches([batch]), tmp_path / f"b{number}.parquet", row_group_size=1000
        )
    spec = reader_spec(window, path=str(tmp_path), files_per_trigger=2)
    first = next_files(spec, "")
    assert first.endswith("b1.parquet")
    second = next_files(spec, first)
    assert second.endswith("b2.parquet") and next_files(spec, second) == second
    parts = file_parts(spec, "", first)
    assert len(parts) == 6 and all(len(p.row_groups) == 1 for p in parts)
    read = pa.concat_tables([read_file_part(spec, p) for p in parts])
    assert read.equals(pa.Table.from_batches(batches[:2]).select(read.column_names))
    assert file_parts(spec, "", first) == parts  # the same partitions after a restart


def test_an_empty_folder_is_a_stream_that_has_not_started(tmp_path):
    window = ph.find(query_plan("cpu"), ph.WindowAggregateExec)
    spec = reader_spec(window, path=str(tmp_path))
    assert next_files(spec, "") == "" and file_parts(spec, "", "") == []
