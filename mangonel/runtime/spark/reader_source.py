"""The reader path's Spark source (`mangonel_panes`, reader.py): the Python Data Source
classes, in a module light to import.

Why a module of its own: Spark starts a Python process for the source's offsets and
partitions at every query start (pyspark's `python_streaming_source_runner`, which
unpickles the data source: its module is imported there), and another that plans the read
function. With the heavy modules (the plan, the operators, pandas) behind them, each start
cost about 1 s of imports; this one imports pyspark's data source API and
reader_offsets.py. The partition's work (`pane_reader`) is imported in `read`, which runs
in the executors' reused Python workers.

Two sources over the same offsets and parts: `mangonel_panes` (`PaneStreamReader`) plans a
Spark task per part, which reads it and yields its partials (on the executors);
`mangonel_parts` (`PartsStreamReader`, Spark's `SimpleDataSourceStreamReader`) yields only
each micro-batch's parts as text, for the reader-fed plan to read on the driver itself
(reader_ahead.py) where Spark's own file source cannot pace it (the generator, a single
file; which source: `reader_batch.reader_source`).

Offsets and partitions: reader_offsets.py. With `flush` (the reader-fed plan,
reader_batch.py) an offset also says whether the data before it was flushed: after a
micro-batch that read data, when there is no new data, the next offset is the same one
marked flushed, a micro-batch with no partitions (the no-data micro-batch Spark runs by
itself only for a stateful query).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.errors import PySparkNotImplementedError
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    InputPartition,
    SimpleDataSourceStreamReader,
)
from pyspark.sql.types import StructType

from mangonel.runtime.spark.reader_offsets import (
    Part,
    SourceOffsets,
    initial_offset,
    latest_offset,
    offset_parts,
    part_text,
)

PANES_FORMAT = "mangonel_panes"
PARTS_FORMAT = "mangonel_parts"
PART = "part"  # mangonel_parts' columns: a part as text, the micro-batch's end offset
END_OFFSET = "end_offset"
PARTS_SCHEMA = f"{PART} STRING, {END_OFFSET} STRING"


@dataclasses.dataclass
class _PartRange(InputPartition):
    """One part as Spark ships it to the task that reads it."""

    part: Part


_SPECS: dict[str, Any] = {}  # decoded ReaderSpecs of this worker process, by their text


class PaneStreamReader(DataSourceStreamReader):
    """The reader path's streaming source (module docstring: offsets and partitions)."""

    def __init__(self, options: dict[str, str]) -> None:
        self.spec_text = options["spec"]  # decoded where a partition is read
        self.offsets = SourceOffsets.decode(options["offsets"])

    def initialOffset(self) -> dict:
        return initial_offset(self.offsets)

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:  # noqa: ANN401
        return latest_offset(self.offsets, start)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [_PartRange(part) for part in offset_parts(self.offsets, start, end)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from mangonel.runtime.spark import pane_reader  # the partition's work (docstring)

        spec = _SPECS.get(self.spec_text)
        if spec is None:
            spec = _SPECS[self.spec_text] = pane_reader.ReaderSpec.decode(self.spec_text)
        assert isinstance(partition, _PartRange)
        yield from pane_reader.read_part(spec, partition.part)

    def commit(self, end: dict) -> None:
        """Nothing to release: every offset's rows can be read again."""


class PartsStreamReader(SimpleDataSourceStreamReader):
    """`mangonel_parts` (module docstring): a micro-batch's rows are its parts as text, each
    with the micro-batch's end offset (from which the reader-fed plan reads one micro-batch
    ahead); a micro-batch with no parts (the flush one) has no rows. Reads no data: this
    process stays light (module docstring)."""

    def __init__(self, options: dict[str, str]) -> None:
        self.offsets = SourceOffsets.decode(options["offsets"])

    def initialOffset(self) -> dict:
        return initial_offset(self.offsets)

    def read(self, start: dict) -> tuple[Iterator[pa.RecordBatch], dict]:
        end = latest_offset(self.offsets, start)
        if end == start:
            return iter(()), start  # nothing new: no micro-batch
        return self.readBetweenOffsets(start, end), end

    def readBetweenOffsets(self, start: dict, end: dict) -> Iterator[pa.RecordBatch]:
        texts = [part_text(part) for part in offset_parts(self.offsets, start, end)]
        if not texts:
            return iter(())
        columns = {PART: texts, END_OFFSET: [json.dumps(end)] * len(texts)}
        return iter([pa.RecordBatch.from_pydict(columns)])

    def commit(self, end: dict) -> None:
        """Nothing to release (as `PaneStreamReader.commit`)."""


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


class PartsDataSource(DataSource):
    """`spark.readStream.format("mangonel_parts")` with the option "offsets"
    (`SourceOffsets.encode`); its rows are `PARTS_SCHEMA`."""

    @classmethod
    def name(cls) -> str:
        return PARTS_FORMAT

    def schema(self) -> str:
        return PARTS_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        # pyspark takes `simpleStreamReader` where `streamReader` is not implemented
        raise PySparkNotImplementedError(
            errorClass="NOT_IMPLEMENTED", messageParameters={"feature": "streamReader"}
        )

    def simpleStreamReader(self, schema: StructType) -> SimpleDataSourceStreamReader:
        return PartsStreamReader(dict(self.options))
