"""The options `CREATE STREAM ... WITH (...)` and `Session.create_stream(**options)` accept.

The stream options every stream takes, and per `source` kind the options that source reads
(`mangonel.catalog.sources.options`, the table the Spark sources and `mangonel run` read).
Anything else is refused with the list, so a typo (`watermak = '10 seconds'`) cannot
silently leave a default in place.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

# the sources and the options each reads: one table, with the source readers
from mangonel.catalog.sources.options import SOURCE_OPTIONS, SOURCES

STREAM_OPTIONS: tuple[str, ...] = ("event_time", "watermark", "source")
# a static table's files (read once, when a query starts): the file sources' options that
# mean something without time
TABLE_SOURCES: tuple[str, ...] = ("parquet", "csv")
TABLE_OPTIONS: dict[str, tuple[str, ...]] = {"parquet": ("path",), "csv": ("path", "header")}


@dataclasses.dataclass(frozen=True)
class OptionProblem:
    """Why one option is refused: `key` is the option at fault, `message` and `hint` say
    what is wrong and what is accepted."""

    key: str
    message: str
    hint: str


def check_stream_options(stream: str, options: Iterable[tuple[str, str]]) -> OptionProblem | None:
    """The first option a stream cannot take (keys are lower-case), or None.

    `source` must name a known source kind; every other key must be a stream option or an
    option of that source.
    """
    options = list(options)
    values = dict(options)
    source = values.get("source")
    if source is not None and source.lower() not in SOURCE_OPTIONS:
        return OptionProblem(
            "source",
            f"stream {stream!r}: unknown source {source!r}",
            "source is one of " + ", ".join(f"'{s}'" for s in SOURCES),
        )
    known = STREAM_OPTIONS + (SOURCE_OPTIONS[source.lower()] if source is not None else ())
    for key, _ in options:
        if key not in known:
            if source is None:
                where = "without a source"
                also = "; source options (" + ", ".join(SOURCES) + ") need source = '<kind>'"
            else:
                where = f"with source = '{source.lower()}'"
                also = ""
            return OptionProblem(
                key,
                f"unknown option {key!r} for stream {stream!r}",
                f"a stream {where} takes " + ", ".join(known) + also,
            )
    return None


def check_table_options(table: str, options: Iterable[tuple[str, str]]) -> OptionProblem | None:
    """The first option a static table cannot take (keys are lower-case), or None: only
    `source` = 'parquet' | 'csv' with its `path` (and CSV's `header`); without options the
    table's rows are given by the caller (standalone: the query's inputs; Spark:
    `register_table`)."""
    values = dict(options)
    source = values.get("source")
    if not values:
        return None
    if source is None or source.lower() not in TABLE_SOURCES:
        return OptionProblem(
            "source",
            f"table {table!r}: "
            + (
                "options without a source"
                if source is None
                else f"source = {source!r}, which a table cannot read"
            ),
            "a table reads files: WITH (source = 'parquet' | 'csv', path = '<file or "
            "folder>'), or no options (its rows given with the query's inputs, or by "
            "register_table inside Spark)",
        )
    known = ("source", *TABLE_OPTIONS[source.lower()])
    for key in values:
        if key not in known:
            return OptionProblem(
                key,
                f"unknown option {key!r} for table {table!r}",
                f"a table with source = '{source.lower()}' takes " + ", ".join(known),
            )
    if not values.get("path"):
        return OptionProblem(
            "path",
            f"table {table!r} with source = '{source.lower()}' needs the option 'path'",
            f"CREATE TABLE {table} (...) WITH (source = '{source.lower()}', path = '<file or "
            "folder>')",
        )
    return None
