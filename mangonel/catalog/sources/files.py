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
    (missing columns are an error; extra columns are ignored). CSV is parsed into the declared
    types; Parquet columns keep theirs and meet the declared ones at the query's conformance
    step (`mangonel.runtime.operators.conform`)."""
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
        if file_format == "csv":  # parsed straight into the declared types
            yield batch
        else:
            # Parquet columns keep their own types: the query's conformance step widens them
            # losslessly or refuses them with a DataError naming the column (an Arrow cast
            # here would parse strings and round or fail deep inside)
            yield pa.RecordBatch.from_arrays(batch.columns, names=target.names)
