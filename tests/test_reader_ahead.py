"""The reader-fed plan's parts read on the driver, one micro-batch ahead
(`runtime/spark/reader_ahead.py`, no pyspark: the GPU machine runs these too): a read ahead is
taken only under its own key, a part's error is raised where its micro-batch is taken, a
micro-batch's parts are read on several threads at once; and `DriverReader` turns a
micro-batch's parts (as `mangonel_parts` hands them) into the partials the executors' reader
gives for the same parts, reading the next ahead."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from spark_functions import micro_batches, query_plan, reader_spec  # noqa: E402

from mangonel.compiler import physical as ph  # noqa: E402
from mangonel.runtime.spark.pane_reader import read_part  # noqa: E402
from mangonel.runtime.spark.reader_ahead import DriverReader, ReadAhead  # noqa: E402
from mangonel.runtime.spark.reader_offsets import (  # noqa: E402
    SourceOffsets,
    initial_offset,
    latest_offset,
    offset_parts,
    part_of_text,
    part_text,
)


class Parts:
    """A part is an int; reading it gives one batch holding it, and counts the read."""

    def __init__(self) -> None:
        self.read: list[int] = []

    def __call__(self, part: int) -> list[pa.RecordBatch]:
        if part < 0:
            raise ValueError(f"part {part} is bad")
        self.read.append(part)
        return [pa.RecordBatch.from_pydict({"part": [part]})]


def values(batches: list[pa.RecordBatch]) -> list[int]:
    return [batch.column(0)[0].as_py() for batch in batches]


def test_a_read_ahead_is_taken_only_under_its_own_key():
    parts = Parts()
    ahead = ReadAhead(parts, threads=2)
    assert values(ahead.take("a", [1, 2])) == [1, 2]
    ahead.read_ahead("b", [3])
    assert values(ahead.take("b", [99])) == [3]  # taken, not read again
    assert (ahead.hits, ahead.misses) == (1, 1)
    ahead.read_ahead("c", [4])
    # other parts handed over (a file added in between): read anew, the read ahead dropped
    assert values(ahead.take("d", [5, 6])) == [5, 6]
    assert (ahead.hits, ahead.misses) == (1, 2)
    ahead.read_ahead("e", [])  # no parts: nothing read ahead
    assert values(ahead.take("e", [])) == []
    ahead.close()
    # part 4 was read ahead and dropped (cancelled, or finished unread); 99 never read
    assert 99 not in parts.read and {1, 2, 3, 5, 6} <= set(parts.read)


def test_an_error_is_raised_where_its_micro_batch_is_taken():
    ahead = ReadAhead(Parts(), threads=1)
    ahead.read_ahead("a", [-1])  # no error yet
    with pytest.raises(ValueError, match="part -1 is bad"):
        ahead.take("a", [-1])
    ahead.read_ahead("b", [-2])
    assert values(ahead.take("c", [7])) == [7]  # not taken: its error belongs to no batch
    ahead.close()


def test_the_parts_of_a_micro_batch_are_read_at_once():
    """Each part waits for the other at a barrier: read one after another, they time out."""
    barrier = threading.Barrier(2, timeout=10)

    def read(part: int) -> list[pa.RecordBatch]:
        barrier.wait()
        return [pa.RecordBatch.from_pydict({"part": [part]})]

    ahead = ReadAhead(read, threads=2)
    assert values(ahead.take("a", [0, 1])) == [0, 1]
    ahead.close()


def test_parts_as_text_round_trip():
    offsets = SourceOffsets("generator", flush=True, tuples=250, batch_size=100, splits=2)
    start = initial_offset(offsets)
    end = latest_offset(offsets, start)
    for part in offset_parts(offsets, start, end):
        assert part_of_text(part_text(part)) == part


def test_the_driver_reader_gives_the_partials_of_the_same_parts_and_reads_ahead(tmp_path):
    for number, batch in enumerate(micro_batches(count=3)):
        pq.write_table(pa.Table.from_batches([batch]), tmp_path / f"part-{number:05d}.parquet")
    window = ph.find(query_plan("cpu"), ph.WindowAggregateExec)
    spec = reader_spec(window, path=str(tmp_path), flush=True)
    offsets = spec.offsets()
    reader = DriverReader(spec, threads=2)
    start = initial_offset(offsets)
    for number in range(3):
        end = latest_offset(offsets, start)
        parts = offset_parts(offsets, start, end)
        table = reader.partials([part_text(p) for p in parts], json.dumps(end))
        expected = [batch for part in parts for batch in read_part(spec, part)]
        assert table.equals(pa.Table.from_batches(expected, schema=spec.spark_schema))
        assert table.num_rows > len(parts)  # partials, not only the carrier rows
        assert (reader.ahead.hits, reader.ahead.misses) == (number, 1)
        start = end
    flushed = latest_offset(offsets, start)
    assert flushed != start and offset_parts(offsets, start, flushed) == []
    assert reader.partials([], None).num_rows == 0  # the flush micro-batch: no parts
    reader.close()


def test_the_driver_reader_says_whether_new_data_follows(tmp_path):
    """`next_offset` after a micro-batch's parts are taken (what the file-triggered plan reads
    as idle): the next micro-batch's end while files follow, the micro-batch's own end when
    none do, None where the next parts could not be worked out."""
    for number, batch in enumerate(micro_batches(count=2)):
        pq.write_table(pa.Table.from_batches([batch]), tmp_path / f"part-{number:05d}.parquet")
    window = ph.find(query_plan("cpu"), ph.WindowAggregateExec)
    spec = reader_spec(window, path=str(tmp_path))  # no flush marks: Spark's file source paces
    offsets = spec.offsets()
    reader = DriverReader(spec, threads=1)
    first = latest_offset(offsets, initial_offset(offsets))
    texts = [part_text(p) for p in offset_parts(offsets, initial_offset(offsets), first)]
    reader.partials(texts, json.dumps(first))
    second = latest_offset(offsets, first)
    assert second != first and reader.next_offset == second
    reader.partials(
        [part_text(p) for p in offset_parts(offsets, first, second)], json.dumps(second)
    )
    assert reader.next_offset == second  # idle: nothing after it
    (tmp_path / "part-00009.parquet").write_bytes(b"not a Parquet file")
    reader.partials([], json.dumps(second))
    assert reader.next_offset is None  # its error is the micro-batch's that will read it
    reader.close()
