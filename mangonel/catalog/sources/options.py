"""The options of `CREATE STREAM ... WITH (source = ..., ...)`: one table, read by every runner.

`mangonel run` (generator, parquet, csv) and the Spark sources (all four) read a stream's
source from these functions, so an option means the same everywhere and a bad value is
refused when the source is created (at `CREATE STREAM` inside Spark, before any tuple is read
by `mangonel run`), with the option and the stream named.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from mangonel.catalog.catalog import Schema
from mangonel.catalog.sources.generator import (
    GeneratorConfig,
    GeneratorSettingError,
    default_key_columns,
)
from mangonel.errors import CatalogError, SqlError

SOURCES = ("generator", "parquet", "csv", "kafka")

# option -> (GeneratorConfig field, what its value is). `delay` is a duration with its unit
# (the Spark reader receives it as '<n> microseconds').
GENERATOR_FIELDS: dict[str, tuple[str, str]] = {
    "tuples": ("tuples", "a positive whole number"),
    "rate": ("rate", "a positive whole number (tuples per second of event time)"),
    "keys": ("keys", "a positive whole number"),
    "skew": ("skew", "a number >= 0 (Zipf exponent)"),
    "delay": ("delay_us", "a duration >= 0 such as '200 milliseconds'"),
    "seed": ("seed", "a whole number >= 0"),
    "null_fraction": ("null_fraction", "a number in [0, 1)"),
    "rows_per_batch": ("batch_size", "a positive whole number (tuples per batch)"),
}
# Every option each source reads besides the stream's own (event_time, watermark).
SOURCE_OPTIONS: dict[str, tuple[str, ...]] = {
    "generator": (*GENERATOR_FIELDS, "key_columns"),
    "parquet": ("path", "files_per_trigger"),
    "csv": ("path", "files_per_trigger", "header"),
    "kafka": ("bootstrap_servers", "topic", "format", "starting_offsets"),
}


def source_of(options: Mapping[str, str], stream: str) -> str | None:
    """The stream's `source` option, lower-case and checked (None when it has none)."""
    source = options.get("source")
    if source is None:
        return None
    if source.lower() not in SOURCES:
        raise CatalogError(
            f"stream {stream!r} has source = {source!r}, which is not a source",
            hint="source = 'generator' | 'parquet' | 'csv' | 'kafka'",
        )
    return source.lower()


@dataclass(frozen=True)
class GeneratorSource:
    """A generator stream: the generator's settings and which columns carry keys."""

    config: GeneratorConfig
    key_columns: tuple[str, ...]


def _bad(stream: str, key: str, value: str, wanted: str) -> CatalogError:
    return CatalogError(f"stream {stream!r}: option {key} = {value!r} must be {wanted}")


def _whole(text: str) -> int:
    return int(text.strip())


def _number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


_PARSERS: dict[str, Callable[[str], int | float]] = {
    "skew": _number,
    "null_fraction": _number,
}


def generator_source(
    options: Mapping[str, str],
    schema: Schema,
    event_time: str,
    stream: str,
    defaults: Mapping[str, str] | None = None,
    *,
    durations: Callable[[str], int],
) -> GeneratorSource:
    """The generator a stream's options describe. `defaults` (option -> text) fill options the
    stream does not set; anything unset keeps GeneratorConfig's default. `durations` reads a
    duration's text (`mangonel.compiler.parse.parse_duration`: durations are the SQL
    dialect's syntax, which the catalog below the compiler does not import)."""
    given = {**(defaults or {}), **options}
    # a bare number is refused by `durations`, as every other duration is ('5' has no unit)
    parsers = {**_PARSERS, "delay_us": durations}
    values: dict[str, int | float] = {}
    for key, (field, wanted) in GENERATOR_FIELDS.items():
        if key not in given:
            continue
        try:
            values[field] = parsers.get(field, _whole)(given[key])
        except (ValueError, SqlError):  # SqlError: a malformed duration
            raise _bad(stream, key, given[key], wanted) from None
    try:
        config = GeneratorConfig(**values)  # type: ignore[arg-type]
    except GeneratorSettingError as error:  # in range is GeneratorConfig's to say
        key = next(k for k, (f, _) in GENERATOR_FIELDS.items() if f == error.field)
        raise CatalogError(
            f"stream {stream!r}: option {key} = {given.get(key)!r} is out of range ({error})"
        ) from None
    return GeneratorSource(config, _key_columns(given, schema, event_time, stream))


def _key_columns(
    options: Mapping[str, str], schema: Schema, event_time: str, stream: str
) -> tuple[str, ...]:
    text = options.get("key_columns")
    if text is None:
        return default_key_columns(schema, event_time)
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if not names:
        raise CatalogError(
            f"stream {stream!r}: key_columns = {text!r} names no column",
            hint="name the key column(s), comma-separated, or leave the option out for the "
            "first STRING or integer column",
        )
    for name in names:
        column = schema.find(name)
        if column is None or column.name == event_time:
            raise CatalogError(
                f"stream {stream!r}: key_columns names {name!r}, which is not a non-event-time "
                "column of the stream",
                hint="columns: " + ", ".join(c.name for c in schema.columns),
            )
    return tuple(schema.find(name).name for name in names)  # type: ignore[union-attr]


@dataclass(frozen=True)
class FileSource:
    """A parquet or csv stream: where its files are and how to read them."""

    format: str
    path: str
    header: bool = True
    files_per_trigger: int = 1


def file_source(options: Mapping[str, str], stream: str, file_format: str) -> FileSource:
    """The files a `source = 'parquet' | 'csv'` stream reads (`path` is required)."""
    path = options.get("path")
    if not path:
        raise CatalogError(
            f"stream {stream!r} with source = '{file_format}' needs the option 'path'",
            hint=f"CREATE STREAM {stream} (...) WITH (..., path = '<file or folder>')",
        )
    header_text = options.get("header", "true").strip().lower()
    if header_text not in ("true", "false"):
        raise _bad(stream, "header", options["header"], "true or false")
    files_text = options.get("files_per_trigger", "1")
    try:
        files_per_trigger = _whole(files_text)
    except ValueError:
        files_per_trigger = 0
    if files_per_trigger <= 0:
        raise _bad(stream, "files_per_trigger", files_text, "a positive whole number")
    return FileSource(file_format, path, header_text == "true", files_per_trigger)


def generator_reader_options(source: GeneratorSource) -> dict[str, str]:
    """A checked generator as option text (delay in microseconds) that `generator_source`
    reads back unchanged: what the Spark reader on each executor receives."""
    fields = dataclasses.asdict(source.config)
    options = {key: str(fields[field]) for key, (field, _) in GENERATOR_FIELDS.items()}
    options["delay"] = f"{source.config.delay_us} microseconds"
    if source.key_columns:  # none: the stream has no column a key could be in (the default)
        options["key_columns"] = ",".join(source.key_columns)
    return options
