"""Parquet and CSV files as a finite stream of batches, cast to the stream's schema."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.dataset as ds

from mangonel.catalog.catalog import Schema
from mangonel.errors import DataError

FORMATS = ("parquet", "csv")


def read_files(
    path: str, file_format: str, schema: Schema, batch_size: int = 100_000
) -> Iterator[pa.RecordBatch]:
    """Batches from a file or a folder of files, in file order, with the stream's columns
    and types (missing columns are an error; extra columns are ignored)."""
    if file_format not in FORMATS:
        raise DataError(f"unknown file format {file_format!r}; supported: {', '.join(FORMATS)}")
    target = schema.to_arrow()
    if file_format == "csv":
        csv_format = ds.CsvFileFormat(
            convert_options=pa_csv.ConvertOptions(
                column_types=dict(zip(target.names, target.types, strict=True))
            )
        )
        dataset = ds.dataset(path, format=csv_format)
    else:
        dataset = ds.dataset(path, format="parquet")
    missing = [name for name in target.names if name not in dataset.schema.names]
    if missing:
        raise DataError(
            f"{path}: the files lack column(s) {', '.join(missing)} of the stream",
        )
    for batch in dataset.to_batches(columns=target.names, batch_size=batch_size):
        yield pa.RecordBatch.from_arrays(
            [batch.column(i).cast(target.field(i).type) for i in range(len(target))],
            schema=target,
        )
