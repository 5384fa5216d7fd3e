"""Streams and static tables known to a session."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from mangonel.catalog.types import SqlType
from mangonel.errors import CatalogError


@dataclass(frozen=True)
class Column:
    name: str
    type: SqlType
    nullable: bool = True


def duplicate_column(columns: Sequence[Column]) -> tuple[int, str] | None:
    """(index, message) of the first column whose name an earlier column already has, or
    None. Names compare case-insensitively, as columns resolve (`Schema.find`): with `k` and
    `K` both declared, `"K"` would silently read `k`."""
    seen: dict[str, str] = {}
    for index, column in enumerate(columns):
        earlier = seen.get(column.name.lower())
        if earlier is not None:
            if earlier == column.name:
                return index, f"column {column.name!r} is declared twice"
            return index, (
                f"columns {earlier!r} and {column.name!r} have the same name "
                "(column names are case-insensitive)"
            )
        seen[column.name.lower()] = column.name
    return None


DUPLICATE_COLUMN_HINT = "column names are case-insensitive; give each column its own name"
# a query names its window's bounds so (docs/sql.md): a stream column of that name would hide
# one, silently (Flink's window TVFs refuse a table with such a column the same way)
WINDOW_COLUMN_NAMES = ("window_start", "window_end", "window_time")


def stream_column_problem(columns: Sequence[Column]) -> tuple[int, str, str] | None:
    """(index, message, hint) of the first column a stream cannot have: a name declared
    twice (`duplicate_column`), an empty name, or a window bound's name; None if none."""
    duplicate = duplicate_column(columns)
    if duplicate is not None:
        return duplicate[0], duplicate[1], DUPLICATE_COLUMN_HINT
    for index, column in enumerate(columns):
        if not column.name.strip():
            return index, "a column has an empty name", "give every column a name"
        if column.name.lower() in WINDOW_COLUMN_NAMES:
            return (
                index,
                f"column {column.name!r} has the name of a window bound, which queries read "
                "as the window's",
                f"rename it (e.g. {column.name}_at); reserved: " + ", ".join(WINDOW_COLUMN_NAMES),
            )
    return None


@dataclass(frozen=True)
class Schema:
    columns: tuple[Column, ...]

    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def find(self, name: str) -> Column | None:
        """Columns resolve case-insensitively, as in Spark's default configuration."""
        lowered = name.lower()
        for column in self.columns:
            if column.name.lower() == lowered:
                return column
        return None

    def to_arrow(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, c.type.info.arrow, c.nullable) for c in self.columns])


@dataclass(frozen=True)
class Stream:
    """An unbounded input. `watermark_delay_us` is the declared out-of-orderness bound."""

    name: str
    schema: Schema
    event_time: str
    watermark_delay_us: int = 0
    options: tuple[tuple[str, str], ...] = ()

    def option(self, key: str, default: str | None = None) -> str | None:
        return dict(self.options).get(key, default)


@dataclass(frozen=True)
class Table:
    """A static relation (for joins in a later wave)."""

    name: str
    schema: Schema
    options: tuple[tuple[str, str], ...] = ()


@dataclass
class Catalog:
    streams: dict[str, Stream] = field(default_factory=dict)
    tables: dict[str, Table] = field(default_factory=dict)
    # user window functions written in Python, by lower-case name: `aggregates.python`'s
    # WindowFunction (this layer sits below aggregates, so it only holds them)
    window_functions: dict[str, Any] = field(default_factory=dict)

    def _taken(self, name: str) -> bool:
        return name.lower() in self.streams or name.lower() in self.tables

    def add_stream(self, stream: Stream, *, replace: bool = False) -> None:
        if self._taken(stream.name) and not replace:
            raise CatalogError(
                f"a stream or table named {stream.name!r} already exists",
                hint=f"DROP STREAM {stream.name} first, or choose another name",
            )
        self.tables.pop(stream.name.lower(), None)
        self.streams[stream.name.lower()] = stream

    def add_table(self, table: Table, *, replace: bool = False) -> None:
        if self._taken(table.name) and not replace:
            raise CatalogError(
                f"a stream or table named {table.name!r} already exists",
                hint=f"DROP TABLE {table.name} first, or choose another name",
            )
        self.streams.pop(table.name.lower(), None)
        self.tables[table.name.lower()] = table

    def stream(self, name: str) -> Stream | None:
        return self.streams.get(name.lower())

    def table(self, name: str) -> Table | None:
        return self.tables.get(name.lower())

    def drop(self, kind: str, name: str, *, if_exists: bool = False) -> None:
        registry = self.streams if kind == "STREAM" else self.tables
        other_kind, other = ("TABLE", self.tables) if kind == "STREAM" else ("STREAM", self.streams)
        if name.lower() in other:
            # As Spark refuses DROP TABLE on a view (IF EXISTS or not): the name exists, the
            # statement names the wrong kind.
            actual = other[name.lower()].name
            raise CatalogError(
                f"{actual!r} is a {other_kind.lower()}, not a {kind.lower()}",
                hint=f"DROP {other_kind} {actual}",
            )
        if name.lower() not in registry:
            if if_exists:
                return
            names = sorted(item.name for item in registry.values())
            raise CatalogError(
                f"no {kind.lower()} named {name!r}",
                hint=f"known {kind.lower()}s: {', '.join(names) or 'none'}",
            )
        del registry[name.lower()]

    def known_names(self) -> list[str]:
        return [s.name for s in self.streams.values()] + [t.name for t in self.tables.values()]
