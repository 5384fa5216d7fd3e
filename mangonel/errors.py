"""Errors a user sees. Each names where (line, column), what construct, and what to do instead."""

from __future__ import annotations


class MangonelError(Exception):
    """Base of every error mangonel raises on purpose."""


class SqlError(MangonelError):
    """A statement mangonel cannot accept, with its position in the text.

    `line` and `column` are 1-based and point at the start of `construct` in the statement.
    """

    def __init__(
        self,
        message: str,
        *,
        line: int | None = None,
        column: int | None = None,
        construct: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.message = message
        self.line = line
        self.column = column
        self.construct = construct
        self.hint = hint
        super().__init__(self.render())

    def render(self) -> str:
        where = f"line {self.line}, column {self.column}: " if self.line is not None else ""
        text = f"{where}{self.message}"
        if self.construct:
            text += f"\n  in: {self.construct}"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text


class CatalogError(SqlError):
    """Unknown or duplicate stream, table or column."""


class PlanError(SqlError):
    """A query that parsed and bound but cannot be planned as asked (beyond a limit, or a
    runtime option that does not fit it). It points at the construct when it has one."""


class BackendUnavailableError(MangonelError):
    """The backend asked for cannot run here (for example backend='gpu' without a GPU)."""


class DataError(MangonelError):
    """Input batches that do not match the stream's declared schema."""


class FunctionError(MangonelError):
    """A user's Python window function failed on a window's values while the query ran (it
    raised, or read past the window's values): the query stops with the function's name and
    its error, as a Spark UDF's exception fails its query."""
