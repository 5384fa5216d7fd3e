"""The reader path's offsets and partitions (reader_source.py's source), free of pyspark and
of the query's plan: Spark's process for the source's offsets imports only this, and the
GPU machine (no Spark) tests it with pane_reader.py.

The source's offsets and parts as `latest_offset` and `offset_parts` give them are what both
sources of reader_source.py read (a Spark task per part, or the driver reading them itself:
reader_ahead.py); a part travels as text (`part_text`) where the driver reads it.

Offsets: the generator's are tuple counts (`{"tuples": n}`); a file source's the name of
the last file read (`{"file": name}`, files in name order, `files_per_trigger` per
micro-batch). Partitions follow from the offsets alone (generator ranges on chunk
boundaries, one per Parquet row group, one per CSV file), so a restart from the checkpoint
reads and pre-aggregates the same rows.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

# Chunks are the generator's unit of reproducibility: chunk c is generate(...) with seed
# (seed, c), so rows [a, b) never depend on micro-batch or partition boundaries.
CHUNK_ROWS = 50_000


@dataclasses.dataclass(frozen=True)
class SourceOffsets:
    """What the offsets and partitions depend on (`ReaderSpec.offsets`), as the "offsets"
    option: JSON, so that the source's process need not unpickle the query's plan."""

    source: str  # "generator", "parquet" or "csv"
    path: str = ""  # files: an absolute file or folder
    files_per_trigger: int = 1
    splits: int = 2  # generator: partitions per micro-batch
    flush: bool = False
    tuples: int = 0  # generator: all its tuples, and per micro-batch
    batch_size: int = 0

    def encode(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @staticmethod
    def decode(text: str) -> SourceOffsets:
        return SourceOffsets(**json.loads(text))


@dataclasses.dataclass(frozen=True)
class FilePart:
    """One reader partition of a file source: a file, and for Parquet some of its row groups
    (None: the whole file)."""

    path: str
    row_groups: tuple[int, ...] | None = None


def listed_files(spec: SourceOffsets) -> list[str]:
    """The source's data files in name order (`catalog.sources.files.data_files`: the rules
    of `mangonel run`); a folder with none yet is a stream that has not started (as Spark's
    file source, it waits), a missing path an error."""
    # imported here: of the processes that import this module only the source's lists files
    from mangonel.catalog.sources.files import data_files

    root = Path(spec.path)
    if root.is_dir() and not any(root.iterdir()):
        return []
    return [str(path) for path in data_files(spec.path)]


def next_files(spec: SourceOffsets, after: str) -> str:
    """The file offset after one more micro-batch: the name of the last file it reads
    (`files_per_trigger` files named after `after`), or `after` when there is none. Files are
    read in name order; a file added with a name at or before `after` is never read."""
    newer = [name for name in listed_files(spec) if name > after]
    return newer[: spec.files_per_trigger][-1] if newer else after


def file_parts(spec: SourceOffsets, after: str, until: str) -> list[FilePart]:
    """The partitions of the micro-batch (after, until]: one per Parquet row group, one per
    CSV file."""
    import pyarrow as pa  # (as in listed_files)
    import pyarrow.parquet as pq

    from mangonel.errors import DataError

    parts: list[FilePart] = []
    for name in listed_files(spec):
        if not after < name <= until:
            continue
        if spec.source == "parquet":
            try:
                groups = pq.ParquetFile(name).metadata.num_row_groups
            except (pa.ArrowException, OSError) as error:
                raise DataError(f"{name}: not a readable Parquet file ({error})") from None
            parts.extend(FilePart(name, (group,)) for group in range(groups))
        else:
            parts.append(FilePart(name))
    return parts


def generator_parts(spec: SourceOffsets, begin: int, end: int) -> list[tuple[int, int]]:
    """Tuples [begin, end) as `splits` contiguous ranges whose inner bounds fall on chunk
    boundaries (each range reads whole chunks where it can)."""
    if end <= begin:
        return []
    chunks = (end - 1) // CHUNK_ROWS - begin // CHUNK_ROWS + 1  # the chunks the range touches
    per_part = max(1, -(-chunks // max(1, spec.splits)))
    bounds = [begin]
    while bounds[-1] < end:
        bounds.append(min(end, (bounds[-1] // CHUNK_ROWS + per_part) * CHUNK_ROWS))
    return list(zip(bounds[:-1], bounds[1:], strict=True))


FLUSHED = "flushed"  # an offset's flush mark (reader_source.py's module docstring)
Part = FilePart | tuple[int, int]  # a file part, or a range [begin, end) of generated tuples


def initial_offset(spec: SourceOffsets) -> dict:
    offset: dict[str, Any] = {"tuples": 0} if spec.source == "generator" else {"file": ""}
    return {**offset, FLUSHED: True} if spec.flush else offset


def latest_offset(spec: SourceOffsets, start: dict | None) -> dict:
    """The offset after the next micro-batch from `start`; `start` itself when there is
    nothing to read (with `flush`: once after data, the same offset marked flushed)."""
    start = start or initial_offset(spec)
    if spec.source == "generator":
        begin = start["tuples"]
        offset: dict[str, Any] = {"tuples": min(spec.tuples, begin + spec.batch_size)}
    else:
        offset = {"file": next_files(spec, start["file"])}
    if not spec.flush:
        return offset
    if any(offset[name] != start[name] for name in offset):
        return {**offset, FLUSHED: False}  # data: a micro-batch that reads it
    return {**offset, FLUSHED: True}  # no new data: a micro-batch with no parts, once


def offset_parts(spec: SourceOffsets, start: dict, end: dict) -> list[Part]:
    """The parts of the micro-batch (start, end]."""
    if spec.source == "generator":
        return list(generator_parts(spec, start["tuples"], end["tuples"]))
    return list(file_parts(spec, start["file"], end["file"]))


def part_text(part: Part) -> str:
    if isinstance(part, FilePart):
        groups = None if part.row_groups is None else list(part.row_groups)
        return json.dumps({"path": part.path, "row_groups": groups})
    return json.dumps({"tuples": list(part)})


def part_of_text(text: str) -> Part:
    fields = json.loads(text)
    if "tuples" in fields:
        begin, end = fields["tuples"]
        return (begin, end)
    groups = fields["row_groups"]
    return FilePart(fields["path"], None if groups is None else tuple(groups))
