"""DDL: CREATE STREAM / CREATE TABLE / DROP / SHOW, read with a small lark grammar.

    CREATE [OR REPLACE] STREAM name (col TYPE [NOT NULL], ...) WITH (key = 'value', ...)
    CREATE [OR REPLACE] TABLE name (col TYPE [NOT NULL], ...) [WITH (key = 'value', ...)]
    DROP STREAM|TABLE [IF EXISTS] name
    SHOW STREAMS | SHOW TABLES

Names may be plain, `back-quoted` or "double-quoted"; option keys are case-insensitive
(kept lower-case); option values are 'strings' or numbers (kept as text). What the options
mean (event_time, watermark, source, ...) is the binder's business (`bind.stream_from_ddl`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache

import lark

from mangonel.catalog.catalog import (
    DUPLICATE_COLUMN_HINT,
    Column,
    duplicate_column,
    stream_column_problem,
)
from mangonel.catalog.types import TYPE_NAMES, SqlType, type_from_name
from mangonel.errors import CatalogError, SqlError

_GRAMMAR = r"""
start: _statement ";"?
_statement: create_stream | create_table | drop | show

create_stream: "CREATE"i or_replace? "STREAM"i name "(" _columns ")" options?
create_table: "CREATE"i or_replace? "TABLE"i name "(" _columns ")" options?
or_replace: "OR"i "REPLACE"i
_columns: column ("," column)*
column: name type_name not_null?
type_name: NAME type_parameters?
type_parameters: "(" INT ("," INT)* ")"
not_null: "NOT"i "NULL"i
options: "WITH"i "(" option ("," option)* ")"
option: name "=" (STRING | SIGNED_NUMBER)

drop: "DROP"i DROP_KIND if_exists? name
DROP_KIND: "STREAM"i | "TABLE"i
if_exists: "IF"i "EXISTS"i

show: "SHOW"i SHOW_KIND
SHOW_KIND: "STREAMS"i | "TABLES"i

name: NAME | BACKQUOTED | DOUBLEQUOTED
NAME: /[A-Za-z_][A-Za-z_0-9]*/
BACKQUOTED: /`(?:[^`]|``)+`/
DOUBLEQUOTED: /"(?:[^"]|"")+"/
STRING: /'(?:[^']|'')*'/
COMMENT: /--[^\n]*/ | /\/\*(?:.|\n)*?\*\//

%import common.INT
%import common.SIGNED_NUMBER
%import common.WS
%ignore WS
%ignore COMMENT
"""

_SYNTAX = {
    "CREATE STREAM": "CREATE STREAM name (col TYPE [NOT NULL], ...) "
    "WITH (event_time = 'col', watermark = '500 milliseconds', ...)",
    "CREATE TABLE": "CREATE TABLE name (col TYPE [NOT NULL], ...) [WITH (key = 'value', ...)]",
    "DROP": "DROP STREAM|TABLE [IF EXISTS] name",
    "SHOW": "SHOW STREAMS | SHOW TABLES",
}

SUPPORTED_TYPES_HINT = (
    "supported types: "
    + ", ".join(t.value for t in sorted(SqlType, key=lambda t: t.value))
    + " (also spelled "
    + ", ".join(sorted(n for n, t in TYPE_NAMES.items() if n != t.value))
    + ")"
)


@dataclass(frozen=True)
class CreateStream:
    """`CREATE STREAM`. options: lower-case key -> value text, in the order written.

    position: (line, column) of the stream's name; option_positions: key -> (line, column)
    of the option's value (the opening quote), so the binder can point at a bad value;
    option_key_positions: the same for the key (an unknown option).
    """

    name: str
    columns: tuple[Column, ...]
    options: tuple[tuple[str, str], ...]
    or_replace: bool = False
    position: tuple[int, int] = field(default=(1, 1), compare=False)
    option_positions: tuple[tuple[str, int, int], ...] = field(default=(), compare=False)
    option_key_positions: tuple[tuple[str, int, int], ...] = field(default=(), compare=False)

    def option(self, key: str) -> str | None:
        return dict(self.options).get(key.lower())

    def option_position(self, key: str, *, of_key: bool = False) -> tuple[int, int]:
        """Where the option's value (or, with of_key, its key) starts."""
        positions = self.option_key_positions if of_key else self.option_positions
        for name, line, column in positions:
            if name == key.lower():
                return line, column
        return self.position


@dataclass(frozen=True)
class CreateTable:
    """`CREATE TABLE` of a static relation (joins arrive in a later wave)."""

    name: str
    columns: tuple[Column, ...]
    options: tuple[tuple[str, str], ...] = ()
    or_replace: bool = False
    position: tuple[int, int] = field(default=(1, 1), compare=False)


@dataclass(frozen=True)
class Drop:
    kind: str  # "STREAM" | "TABLE"
    name: str
    if_exists: bool = False


@dataclass(frozen=True)
class Show:
    kind: str  # "STREAMS" | "TABLES"


DdlStatement = CreateStream | CreateTable | Drop | Show


@cache
def _parser() -> lark.Lark:
    return lark.Lark(_GRAMMAR, parser="lalr", propagate_positions=True, maybe_placeholders=False)


def parse_ddl(text: str) -> DdlStatement:
    """Parse one DDL statement; errors are SqlErrors pointing into `text`."""
    try:
        tree = _parser().parse(text)
    except lark.exceptions.UnexpectedInput as error:
        raise _syntax_error(text, error) from None
    statement = tree.children[0]
    return _BUILDERS[statement.data](statement)


def _statement_kind(text: str) -> str:
    words = [w.upper() for w in text.split()[:4]]
    if words[:1] == ["CREATE"]:
        rest = words[3:] if words[1:3] == ["OR", "REPLACE"] else words[1:]
        if rest[:1] == ["TABLE"]:
            return "CREATE TABLE"
        return "CREATE STREAM"
    return words[0] if words else "SHOW"


def _syntax_error(text: str, error: lark.exceptions.UnexpectedInput) -> SqlError:
    kind = _statement_kind(_strip_comments(text))
    syntax = _SYNTAX.get(kind, _SYNTAX["SHOW"])
    if isinstance(error, lark.exceptions.UnexpectedEOF) or (
        isinstance(error, lark.exceptions.UnexpectedToken) and error.token.type == "$END"
    ):
        end = len(text.rstrip())
        line = text.count("\n", 0, end) + 1
        column = end - (text.rfind("\n", 0, end) + 1) + 1
        return SqlError(
            f"{kind} ends too early",
            line=line,
            column=column,
            construct=" ".join(text.split())[-40:],
            hint=syntax,
        )
    if isinstance(error, lark.exceptions.UnexpectedToken):
        found = str(error.token)
    else:  # UnexpectedCharacters
        found = text[error.pos_in_stream] if error.pos_in_stream < len(text) else ""
    composite = re.search(r"\b(ARRAY|STRUCT|MAP)\s*$", text[: error.pos_in_stream], re.I)
    if found == "<" and composite is not None:
        name = composite.group(1).upper()
        return SqlError(
            f"{name}<...> columns are not supported in {kind}: ARRAY and STRUCT are result "
            "types only (a percentile over an ARRAY of p, Spark's window struct)",
            line=error.line,
            column=error.column - len(composite.group(0)),
            construct=f"{name}<",
            hint=SUPPORTED_TYPES_HINT,
        )
    return SqlError(
        f"unexpected {found!r} in {kind}",
        line=error.line,
        column=error.column,
        construct=found,
        hint=syntax,
    )


def _strip_comments(text: str) -> str:
    lines = [line.split("--", 1)[0] for line in text.splitlines()]
    return " ".join(lines)


def _position(node: lark.Tree | lark.Token) -> tuple[int, int]:
    if isinstance(node, lark.Token):
        return node.line, node.column
    return node.meta.line, node.meta.column


def _name(node: lark.Tree) -> str:
    token = node.children[0]
    text = str(token)
    if token.type == "BACKQUOTED":
        return text[1:-1].replace("``", "`")
    if token.type == "DOUBLEQUOTED":
        return text[1:-1].replace('""', '"')
    return text


def _identifier(node: lark.Tree) -> str:
    """A stream, table or column name (`_name`); unquoted, it must not be a word queries
    read as a keyword (declared, it could then never be read: `FROM select [..]`)."""
    from mangonel.compiler.parse import reserved_words  # parse imports this module

    token = node.children[0]
    name = _name(node)
    if token.type == "NAME" and name.upper() in reserved_words():
        line, column = _position(node)
        raise SqlError(
            f"{name!r} is an SQL keyword, which a query cannot read as a name",
            line=line,
            column=column,
            construct=name,
            hint=f"quote it here and in queries: `{name}` (or choose another name)",
        )
    return name


def _value(token: lark.Token) -> str:
    text = str(token)
    if token.type == "STRING":
        return text[1:-1].replace("''", "'")
    return text


def _children(tree: lark.Tree, data: str) -> list[lark.Tree]:
    return [c for c in tree.children if isinstance(c, lark.Tree) and c.data == data]


def _column(node: lark.Tree) -> Column:
    name_node, type_node = node.children[0], node.children[1]
    type_token = type_node.children[0]
    sql_type = type_from_name(str(type_token))
    if sql_type is None:
        line, column = _position(type_token)
        raise SqlError(
            f"unknown type {str(type_token)!r} for column {_name(name_node)!r}",
            line=line,
            column=column,
            construct=str(type_token),
            hint=SUPPORTED_TYPES_HINT,
        )
    if len(type_node.children) > 1:
        line, column = _position(type_node)
        parameters = ", ".join(str(p) for p in type_node.children[1].children)
        raise SqlError(
            f"type parameters are not supported: {str(type_token)}({parameters})",
            line=line,
            column=column,
            construct=f"{str(type_token)}({parameters})",
            hint=f"write {sql_type.value}",
        )
    nullable = not _children(node, "not_null")
    return Column(_identifier(name_node), sql_type, nullable)


def _columns(statement: lark.Tree, stream: bool = False) -> tuple[Column, ...]:
    """The declared columns; a stream's pass `stream_column_problem` too."""
    nodes = _children(statement, "column")
    columns = tuple(_column(node) for node in nodes)
    problem: tuple[int, str, str] | None = None
    if stream:
        problem = stream_column_problem(columns)
    else:
        duplicate = duplicate_column(columns)
        if duplicate is not None:
            problem = (*duplicate, DUPLICATE_COLUMN_HINT)
    if problem is not None:
        index, message, hint = problem
        line, col = _position(nodes[index])
        raise CatalogError(message, line=line, column=col, construct=columns[index].name, hint=hint)
    return columns


_Positions = tuple[tuple[str, int, int], ...]


def _options(
    statement: lark.Tree,
) -> tuple[tuple[tuple[str, str], ...], _Positions, _Positions]:
    """The options in order, the positions of their values, and of their keys."""
    options: list[tuple[str, str]] = []
    positions: list[tuple[str, int, int]] = []
    key_positions: list[tuple[str, int, int]] = []
    for options_node in _children(statement, "options"):
        for option in _children(options_node, "option"):
            key = _name(option.children[0]).lower()
            value_token = option.children[1]
            if any(key == existing for existing, _ in options):
                line, column = _position(option)
                raise SqlError(
                    f"option {key!r} is given twice",
                    line=line,
                    column=column,
                    construct=key,
                    hint="option keys are case-insensitive; give each once",
                )
            options.append((key, _value(value_token)))
            positions.append((key, *_position(value_token)))
            key_positions.append((key, *_position(option)))
    return tuple(options), tuple(positions), tuple(key_positions)


def _name_child(statement: lark.Tree) -> lark.Tree:
    return _children(statement, "name")[0]


def _create_stream(statement: lark.Tree) -> CreateStream:
    name_node = _name_child(statement)
    options, option_positions, option_key_positions = _options(statement)
    return CreateStream(
        name=_identifier(name_node),
        columns=_columns(statement, stream=True),
        options=options,
        or_replace=bool(_children(statement, "or_replace")),
        position=_position(name_node),
        option_positions=option_positions,
        option_key_positions=option_key_positions,
    )


def _create_table(statement: lark.Tree) -> CreateTable:
    name_node = _name_child(statement)
    options, _, _ = _options(statement)
    return CreateTable(
        name=_identifier(name_node),
        columns=_columns(statement),
        options=options,
        or_replace=bool(_children(statement, "or_replace")),
        position=_position(name_node),
    )


def _drop(statement: lark.Tree) -> Drop:
    kind = next(c for c in statement.children if isinstance(c, lark.Token))
    return Drop(
        kind=str(kind).upper(),
        name=_name(_name_child(statement)),
        if_exists=bool(_children(statement, "if_exists")),
    )


def _show(statement: lark.Tree) -> Show:
    return Show(kind=str(statement.children[0]).upper())


_BUILDERS = {
    "create_stream": _create_stream,
    "create_table": _create_table,
    "drop": _drop,
    "show": _show,
}
