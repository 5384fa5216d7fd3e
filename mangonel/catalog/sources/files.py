"""Parquet and CSV files as a finite stream of batches with the stream's columns.

Rules (docs/spark.md, "Sources"): a folder is read file by file in name order (also its
subfolders; names starting with `.` or `_` are skipped, as Spark and Arrow do); an empty
(0-byte) file holds no rows; the stream's columns are found by name, case-insensitively (CSV:
by position when `header` is false) and extra columns are ignored. CSV follows Spark's
defaults (PERMISSIVE mode): only an empty field is NULL (`NA` or `null` is text; `NaN`, `Inf`
and `-Inf` are DOUBLEs; integers and booleans are read as Spark reads them: `+5` is 5, `0x10`
and `1` as a BOOLEAN are not values), a value that does not parse as its column's type is NULL (and
counted: `on_malformed`), and a timestamp without a zone offset (`2026-01-01 00:00:00.1`) is
UTC, like Spark with the session time zone UTC (`local_spark` sets it). A file that cannot be
read — a missing path, a corrupt Parquet file, a CSV row with the wrong number of fields, a
Parquet column the query's conformance step refuses — is a DataError naming the file or the
column; files are opened and their columns checked before the first batch is read.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from mangonel.catalog.catalog import Schema
from mangonel.errors import DataError

FORMATS = ("parquet", "csv")
UTC_MICROS = pa.timestamp("us", tz="UTC")
# a time of day followed by a zone (Z, +01, +0100, +01:00): such strings carry their own zone
_ZONED = r"\d{2}:\d{2}(:\d{2}(\.\d*)?)?\s*(Z|[+-]\d{2}(:?\d{2})?)$"


def read_files(
    path: str,
    file_format: str,
    schema: Schema,
    batch_size: int = 100_000,
    *,
    header: bool = True,
    on_malformed: Callable[[Path, int], None] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Batches of up to `batch_size` rows from a file or a folder of files, in file order,
    with the stream's columns and types. Every file is opened and its columns checked now;
    rows are read as the batches are taken. `on_malformed(file, count)` hears of CSV values
    read as NULL because they did not parse (once per file that had any)."""
    if file_format not in FORMATS:
        raise DataError(f"unknown file format {file_format!r}; supported: {', '.join(FORMATS)}")
    if batch_size <= 0:
        raise DataError(f"batch size must be positive, got {batch_size}")
    target = schema.to_arrow()
    files = data_files(path)
    if file_format == "parquet":
        found = {file: _file_names(file, _parquet_columns(file), target) for file in files}
        return _batches(
            files,
            target,
            batch_size,
            lambda file, target, size: _parquet_batches(file, target, size, found[file]),
        )
    readers = {file: _csv_reader_options(file, target, header) for file in files}
    return _batches(
        files,
        target,
        batch_size,
        lambda file, target, size: _csv_batches(file, target, size, readers[file], on_malformed),
    )


def data_files(path: str) -> list[Path]:
    """The non-empty data files at `path` (a file, or a folder read recursively), in order."""
    root = Path(path)
    if not root.exists():
        raise DataError(f"{path}: no such file or folder")
    if root.is_file():
        candidates = [root]
    else:
        candidates = sorted(
            file
            for file in root.rglob("*")
            if file.is_file()
            and not any(part.startswith((".", "_")) for part in file.relative_to(root).parts)
        )
        if not candidates:
            raise DataError(f"{path}: the folder holds no data files")
    return [file for file in candidates if file.stat().st_size > 0]


def _problem(error: Exception) -> str:
    """The first line of an Arrow error, without Arrow's restating of the file name."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    for marker in ("input source", "Parquet file"):
        head, found, tail = text.partition(marker)
        if found and "': " in tail:
            return tail.split("': ", 1)[1]
    return text


def _parquet_columns(file: Path) -> list[str]:
    try:
        return pq.read_schema(file).names
    except (pa.ArrowException, OSError) as error:
        raise DataError(f"{file}: not a readable Parquet file ({_problem(error)})") from None


def _file_names(file: Path, names: list[str], target: pa.Schema) -> list[str]:
    """The file's name of each stream column: found case-insensitively (as Spark's default
    `spark.sql.caseSensitive=false` and mangonel's SQL do); a DataError where a column is
    missing or two of the file's match one."""
    by_lower: dict[str, list[str]] = {}
    for name in names:
        by_lower.setdefault(name.lower(), []).append(name)
    missing = [name for name in target.names if name.lower() not in by_lower]
    if missing:
        raise DataError(
            f"{file}: the file lacks column(s) {', '.join(missing)} of the stream "
            f"(it has {', '.join(names) or 'none'})"
        )
    for name in target.names:
        if len(by_lower[name.lower()]) > 1:
            raise DataError(
                f"{file}: the file has {len(by_lower[name.lower()])} columns named "
                f"{name!r} ({', '.join(by_lower[name.lower()])}; names are "
                "case-insensitive): rename all but one"
            )
    return [by_lower[name.lower()][0] for name in target.names]


def _csv_reader_options(
    file: Path, target: pa.Schema, header: bool
) -> tuple[pa_csv.ReadOptions, pa_csv.ConvertOptions, list[str]]:
    """How to read one CSV file, after checking its first line names the stream's columns
    (a UTF-8 byte-order mark, as Excel writes, is skipped, as Arrow's reader does)."""
    try:
        with open(file, newline="", encoding="utf-8-sig") as text:
            first = next(csv.reader(text), [])
    except (UnicodeDecodeError, csv.Error) as error:
        raise DataError(f"{file}: not a readable CSV file ({error})") from None
    if header:
        found = _file_names(file, [name.strip() for name in first], target)
        # the header's own spelling of each name (stripped) becomes the stream's
        spelled = {name.strip(): name for name in first}
        names = [spelled[name] for name in found]
        read = pa_csv.ReadOptions(block_size=1 << 22)
    else:
        # by position, as Spark does without a header: extra columns get throwaway names
        if len(first) < len(target):
            raise DataError(
                f"{file}: the first row has {len(first)} field(s); the stream has "
                f"{len(target)} columns ({', '.join(target.names)}) and header = false"
            )
        extra = [f"_extra_{i}" for i in range(len(first) - len(target))]
        read = pa_csv.ReadOptions(column_names=[*target.names, *extra], block_size=1 << 22)
        names = target.names
    convert = pa_csv.ConvertOptions(
        # read as text and converted per column afterwards: a value that does not parse is
        # NULL (Spark's PERMISSIVE mode), and naive timestamps can be taken as UTC
        column_types={name: pa.string() for name in names},
        include_columns=names,
        # Spark's nullValue: only an empty field is NULL (Arrow's default list would also
        # read NA, null, N/A, NaN, ... as NULL, in STRING columns too); NaN, Inf and -Inf
        # then parse as DOUBLEs, as Spark's nanValue/positiveInf/negativeInf
        null_values=[""],
        strings_can_be_null=True,
    )
    return read, convert, names


def _csv_batches(
    file: Path,
    target: pa.Schema,
    batch_size: int,
    options: tuple[pa_csv.ReadOptions, pa_csv.ConvertOptions, list[str]],
    on_malformed: Callable[[Path, int], None] | None,
) -> Iterator[pa.RecordBatch]:
    read, convert, names = options  # names: the file's spelling of each stream column
    reader = pa_csv.open_csv(file, read_options=read, convert_options=convert)
    malformed = 0
    for batch in reader:
        columns = []
        for field, name in zip(target, names, strict=True):
            column, bad = from_text(batch.column(name), field.type)
            columns.append(column)
            malformed += bad
        yield pa.RecordBatch.from_arrays(columns, names=target.names)
    if malformed and on_malformed is not None:
        on_malformed(file, malformed)


def from_text(strings: pa.Array, sql_type: pa.DataType) -> tuple[pa.Array, int]:
    """CSV text as `sql_type`, and how many values did not parse and became NULL. The whole
    array converts in one step unless a value is malformed; then halves are tried, so k bad
    values cost O(k log n) conversions."""
    if pa.types.is_string(sql_type):
        return strings, 0
    strings, refused = _as_spark_reads(strings, sql_type)
    if refused:
        converted, bad = from_text(strings, sql_type)
        return converted, bad + refused
    try:
        if pa.types.is_timestamp(sql_type):
            return parse_timestamps(strings), 0
        return pc.cast(strings, sql_type), 0
    except (pa.ArrowInvalid, DataError):
        if len(strings) == 1:
            return pa.nulls(1, sql_type), 1
    middle = len(strings) // 2
    left, left_bad = from_text(strings.slice(0, middle), sql_type)
    right, right_bad = from_text(strings.slice(middle), sql_type)
    return pa.concat_arrays([left, right]), left_bad + right_bad


# the text Spark's CSV reader takes for these types (Java's parseLong and Scala's toBoolean):
# Arrow's cast also reads `0x10` as 16 and `1`/`0` as booleans, and refuses `+5`
_INTEGER_TEXT = r"^[+-]?[0-9]+$"
_BOOLEAN_TEXT = r"(?i)^(true|false)$"


def _as_spark_reads(strings: pa.Array, sql_type: pa.DataType) -> tuple[pa.Array, int]:
    """The text Arrow's cast would read otherwise than Spark made NULL (and counted), a
    leading `+` of an integer dropped, a number's surrounding white space trimmed (Java's
    parseDouble trims it)."""
    if pa.types.is_floating(sql_type):
        return pc.utf8_trim_whitespace(strings), 0
    if pa.types.is_integer(sql_type):
        pattern = _INTEGER_TEXT
    elif pa.types.is_boolean(sql_type):
        pattern = _BOOLEAN_TEXT
    else:
        return strings, 0
    readable = pc.match_substring_regex(strings, pattern)
    refused = int(pc.sum(pc.invert(readable)).as_py() or 0)  # NULLs stay NULL, uncounted
    if refused:
        strings = pc.if_else(readable, strings, pa.scalar(None, pa.string()))
    if pa.types.is_integer(sql_type):
        strings = pc.replace_substring_regex(strings, r"^\+", "")
    return strings, refused


def parse_timestamps(strings: pa.Array, column: str = "") -> pa.Array:
    """Timestamp text as UTC microseconds: with a zone offset as written, without one as UTC
    (Spark with session time zone UTC); digits of a second past the sixth are dropped, as
    Spark's parser drops them (Arrow's cast to microseconds refused the value)."""
    strings = pc.replace_substring_regex(strings, r"(:\d{2}\.\d{6})\d+", r"\1")
    zoned = pc.match_substring_regex(strings, _ZONED)
    try:
        with_zone = pc.cast(pc.if_else(zoned, strings, None), UTC_MICROS)
        naive = pc.cast(pc.if_else(zoned, None, strings), pa.timestamp("us"))
    except pa.ArrowInvalid as error:
        raise DataError(f"column {column!r}: {_problem(error)}") from None
    return pc.if_else(zoned, with_zone, naive.cast(UTC_MICROS))


def _parquet_batches(
    file: Path, target: pa.Schema, batch_size: int, names: list[str]
) -> Iterator[pa.RecordBatch]:
    """`names`: the file's spelling of each stream column; the batches name them as the
    stream does."""
    for batch in pq.ParquetFile(file).iter_batches(batch_size=batch_size, columns=names):
        yield pa.RecordBatch.from_arrays([batch.column(name) for name in names], names=target.names)


def _batches(
    files: list[Path], target: pa.Schema, batch_size: int, read
) -> Iterator[pa.RecordBatch]:  # noqa: ANN001, E501
    """Each file's batches cut to `batch_size` rows; an error while reading names the file.
    CSV text is parsed into the declared types; Parquet columns keep their own types and meet
    the declared ones at the query's conformance step (`mangonel.runtime.operators.conform`:
    lossless widening or a DataError naming the column), one rule for every source."""
    for file in files:
        pending: list[pa.RecordBatch] = []
        held = 0
        try:
            for batch in read(file, target, batch_size):
                pending.append(batch)
                held += batch.num_rows
                while held >= batch_size:
                    table = pa.Table.from_batches(pending)
                    yield from table.slice(0, batch_size).combine_chunks().to_batches()
                    rest = table.slice(batch_size)
                    pending, held = rest.combine_chunks().to_batches(), rest.num_rows
        except DataError as error:
            raise DataError(f"{file}: {error}") from None
        except (pa.ArrowException, OSError) as error:
            raise DataError(f"{file}: {_problem(error)}") from None
        if held:
            yield from pa.Table.from_batches(pending).combine_chunks().to_batches()


def table_files(schema: Schema, options: dict[str, str]) -> Iterator[pa.RecordBatch]:
    """The batches of a static table declared `WITH (source = 'parquet' | 'csv', path = ...)`
    (options checked by `catalog.options.check_table_options`), read as a stream's files."""
    source = options["source"].lower()
    header = options.get("header", "true").strip().lower() == "true"
    return read_files(options["path"], source, schema, header=header)
