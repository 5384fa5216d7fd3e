"""The reader path's Spark source (`mangonel_panes`, reader.py): the Python Data Source
classes, in a module light to import.

Why a module of its own: Spark starts a Python process for the source's offsets and
partitions at every query start (pyspark's `python_streaming_source_runner`, which
unpickles the data source: its module is imported there), and another that plans the read
function. With the heavy modules (the plan, the operators, pandas) behind them, each start
cost about 1 s of imports; this one imports pyspark's data source API and
reader_offsets.py. The partition's work (`pane_reader`) is imported in `read`, which runs
in the executors' reused Python workers.

Offsets and partitions: reader_offsets.py. With `flush` (the reader-fed plan,
reader_batch.py) an offset also says whether the data before it was flushed: after a
micro-batch that read data, when there is no new data, the next offset is the same one
marked flushed, a micro-batch with no partitions (the no-data micro-batch Spark runs by
itself only for a stateful query).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from mangonel.runtime.spark.reader_offsets import (
    FilePart,
    SourceOffsets,
    file_parts,
    generator_parts,
    next_files,
)

PANES_FORMAT = "mangonel_panes"
FLUSHED = "flushed"  # the offsets' flush mark (module docstring)


@dataclasses.dataclass
class _GeneratorRange(InputPartition):
    start: int
    end: int


@dataclasses.dataclass
class _FileRange(InputPartition):
    path: str
    row_groups: tuple[int, ...] | None


_SPECS: dict[str, Any] = {}  # decoded ReaderSpecs of this worker process, by their text


class PaneStreamReader(DataSourceStreamReader):
    """The reader path's streaming source (module docstring: offsets and partitions)."""

    def __init__(self, options: dict[str, str]) -> None:
        self.spec_text = options["spec"]  # decoded where a partition is read
        self.offsets = SourceOffsets.decode(options["offsets"])
        self.generated = self.offsets.source == "generator"

    def initialOffset(self) -> dict:
        offset: dict[str, Any] = {"tuples": 0} if self.generated else {"file": ""}
        return {**offset, FLUSHED: True} if self.offsets.flush else offset

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:  # noqa: ANN401
        start = start or self.initialOffset()
        if self.generated:
            begin = start["tuples"]
            end = min(self.offsets.tuples, begin + self.offsets.batch_size)
            offset: dict[str, Any] = {"tuples": end}
        else:
            offset = {"file": next_files(self.offsets, start["file"])}
        if not self.offsets.flush:
            return offset
        if any(offset[name] != start[name] for name in offset):
            return {**offset, FLUSHED: False}  # data: a micro-batch that reads it
        # no new data: once after data, a micro-batch with no partitions (module docstring)
        return {**offset, FLUSHED: True}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        if self.generated:
            ranges = generator_parts(self.offsets, start["tuples"], end["tuples"])
            return [_GeneratorRange(begin, finish) for begin, finish in ranges]
        parts = file_parts(self.offsets, start["file"], end["file"])
        return [_FileRange(part.path, part.row_groups) for part in parts]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from mangonel.runtime.spark import pane_reader  # the partition's work (docstring)

        spec = _SPECS.get(self.spec_text)
        if spec is None:
            spec = _SPECS[self.spec_text] = pane_reader.ReaderSpec.decode(self.spec_text)
        if isinstance(partition, _GeneratorRange):
            rows = pane_reader.read_generator_part(spec, partition.start, partition.end)
        else:
            assert isinstance(partition, _FileRange)
            part = FilePart(partition.path, partition.row_groups)
            rows = pane_reader.read_file_part(spec, part)
        yield from pane_reader.partition_batches(spec, rows)

    def commit(self, end: dict) -> None:
        """Nothing to release: every offset's rows can be read again."""


class PaneDataSource(DataSource):
    """`spark.readStream.format("mangonel_panes")` with the options "spec" (the partition's
    work, `ReaderSpec.encode`), "offsets" (`SourceOffsets.encode`) and "schema" (DDL)."""

    @classmethod
    def name(cls) -> str:
        return PANES_FORMAT

    def schema(self) -> str:
        return self.options["schema"]

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return PaneStreamReader(dict(self.options))
