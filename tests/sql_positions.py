"""Where a construct starts in a query's text, as SqlError reports it (1-based line and
column), for the tests that check an error points at its construct."""

from __future__ import annotations


def line_and_column(query: str, at: str) -> tuple[int, int]:
    """(line, column) of the first occurrence of `at` in `query`."""
    offset = query.index(at)
    line = query.count("\n", 0, offset) + 1
    column = offset - (query.rfind("\n", 0, offset) + 1) + 1
    return line, column
