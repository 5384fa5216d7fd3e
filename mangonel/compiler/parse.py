"""SQL text -> AST: the sqlglot dialect of mangonel and the CQL window clause (durations are
read by `mangonel.compiler.durations`; `parse_duration` is re-exported here).

`parse_statement` is the one entry point: DDL (CREATE/DROP/SHOW) goes to the small lark
grammar of `mangonel.compiler.ddl`; queries and `EXPLAIN [CODEGEN] <query>` go to
`MangonelDialect`, sqlglot's own parser extended with the window clause

    FROM s [RANGE <dur> [SLIDE <dur>] [WATERMARK <dur>]] [[AS] alias]
    FROM s [ROWS <n> [SLIDE <m>] [WATERMARK <dur>]] [[AS] alias]
    FROM s [SESSION GAP <dur> [WATERMARK <dur>]] [[AS] alias]

which becomes `nodes.WindowClause(this=<exp.Table>, kind, size, slide, watermark)`.
The clause is only read here; its values are validated by the binder (`bind.py`), which
knows the stream and can name the construct precisely (the positions of each part are kept
in the clause's `meta["parts"]`).

Every error is a `SqlError` whose line and column (1-based) point at the start of the
offending construct in the statement text.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlglot import exp, generator, parser, tokens
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError
from sqlglot.parsers.base import BaseParser
from sqlglot.tokens import Token, TokenType

from mangonel import aggregates
from mangonel.compiler import ddl
from mangonel.compiler.durations import (
    CLAUSE_WORDS,
    WORD,
    DurationError,
    format_duration,
    is_word,
    line_and_column,
    read_duration,
)
from mangonel.compiler.durations import parse_duration as parse_duration  # re-exported
from mangonel.compiler.limits import (
    MAX_EXPRESSION_DEPTH,
    MAX_PARENTHESIS_NESTING,
    ensure_recursion_headroom,
)
from mangonel.compiler.nodes import (
    AggregateRef,
    Explain,
    WindowBound,
    WindowClause,
    WindowStruct,
    WindowTableFunction,
)
from mangonel.compiler.session_tvf import read_session_tvf
from mangonel.compiler.window_tvf import (
    WINDOW_TABLE_FUNCTIONS,
    read_window_table_function,
    starts_window_table_function,
)
from mangonel.errors import SqlError

Statement = exp.Select | Explain | ddl.CreateStream | ddl.CreateTable | ddl.Drop | ddl.Show

WINDOW_CLAUSE_HINT = (
    "the window clause is [RANGE <duration> [SLIDE <duration>] [WATERMARK <duration>]] or "
    "[ROWS <n> [SLIDE <m>] [WATERMARK <duration>]] or [SESSION GAP <duration> [WATERMARK "
    "<duration>]], e.g. [RANGE 1 SECOND SLIDE 10 MILLISECONDS]"
)
QUERY_HINT = (
    "mangonel reads window queries: SELECT <keys, window_start, window_end, aggregates> "
    "FROM <stream> [RANGE ..] [WHERE ..] [GROUP BY <columns>] [HAVING ..]"
)


# ---------------------------------------------------------------------------------------
# Positions


def _annotate_start_positions(tree: exp.Expression, text: str) -> None:
    """sqlglot's meta has the line and the *last* column of a node's first token; add the
    exact start (`start_line`, `start_col`) that errors report."""
    for node in tree.walk():
        start = node.meta.get("start")
        if start is not None and "start_line" not in node.meta:
            node.meta["start_line"], node.meta["start_col"] = line_and_column(text, start)
        if isinstance(node, exp.Identifier) and start is not None and text[start] == '"':
            # a name, as in standard SQL; Spark reads "s" as a string: errors say so
            node.meta["double_quoted"] = True


def double_quote_hint(column: exp.Column) -> str:
    """The start of an unknown column's hint where the query double-quoted it (`k = "s"`):
    double quotes quote a name here, as in standard SQL and Flink SQL, where Spark reads a
    string; '' otherwise."""
    identifier = column.args.get("this")
    if not isinstance(identifier, exp.Identifier) or not identifier.meta.get("double_quoted"):
        return ""
    text = identifier.name.replace("'", "''")
    return (
        f'"{identifier.name}" is a name: double quotes quote names; a string is written in '
        f"single quotes, '{text}'; "
    )


def position_of(node: exp.Expression) -> tuple[int, int] | None:
    """(line, column) of the first token of `node`: the earliest position in its subtree."""
    best: tuple[int, int, int] | None = None  # (offset, line, column)
    for child in node.walk():
        meta = child.meta if child._meta is not None else None
        if not meta or "start" not in meta:
            continue
        if "start_line" in meta:
            line, column = meta["start_line"], meta["start_col"]
        else:  # built outside parse_statement: derive the start from the token's end
            line = meta["line"]
            column = max(1, meta["col"] - (meta["end"] - meta["start"]))
        if best is None or meta["start"] < best[0]:
            best = (meta["start"], line, column)
    return None if best is None else (best[1], best[2])


def copy_position(target: exp.Expression, source: exp.Expression) -> exp.Expression:
    """Give `target` the position of `source` (resolved nodes keep pointing at the text)."""
    earliest = None
    for child in source.walk():
        if child._meta is not None and "start" in child.meta:
            if earliest is None or child.meta["start"] < earliest.meta["start"]:
                earliest = child
    if earliest is not None:
        for key in ("line", "col", "start", "end", "start_line", "start_col"):
            if key in earliest.meta:
                target.meta[key] = earliest.meta[key]
    return target


def source_text(text: str, token_list: Sequence[Token]) -> str:
    """The statement text the tokens span, with comments dropped and every run of
    whitespace (or comment) between two tokens written as one space."""
    parts: list[str] = []
    previous_end = None
    for token in token_list:
        if previous_end is not None and token.start > previous_end + 1:
            parts.append(" ")
        parts.append(text[token.start : token.end + 1])
        previous_end = token.end
    return "".join(parts)


def output_text(node: exp.Expression) -> str:
    """The text of a SELECT item as the user wrote it (`source_text`), else its SQL."""
    return node.meta.get("source_text") or node.sql(dialect=MangonelDialect)


def conjuncts(node: exp.Expression) -> list[exp.Expression]:
    """The AND-ed terms of a condition (parentheses around them dropped)."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        return conjuncts(node.this) + conjuncts(node.expression)
    return [node]


def display_sql(node: exp.Expression) -> str:
    """Readable SQL of a (possibly resolved) node for messages: simple names unquoted."""

    def unquote(child: exp.Expression) -> exp.Expression:
        if isinstance(child, exp.Identifier) and child.quoted and child.meta.get("joined"):
            # a join's resolved `alias.column` reads as the user wrote it
            return exp.Identifier(this=child.name, quoted=False)
        if (
            isinstance(child, exp.Identifier)
            and child.quoted
            and WORD.fullmatch(child.name)
            and child.name.upper() not in MangonelDialect.tokenizer_class.KEYWORDS
        ):
            return exp.Identifier(this=child.name, quoted=False)
        return child

    return node.transform(unquote).sql(dialect=MangonelDialect)


# ---------------------------------------------------------------------------------------
# The dialect


def _record_start(name: str) -> Callable:
    """Wrap Parser.<name> so the node it returns remembers its first token's position.

    sqlglot positions identifiers, literals and functions; clauses (ORDER BY, JOIN, OVER,
    LIMIT, ...) are what errors must point at too.
    """
    base = getattr(BaseParser, name)

    def wrapper(self: MangonelParser, *args, **kwargs):
        start = self._curr
        result = base(self, *args, **kwargs)
        if (
            isinstance(result, exp.Expression)
            and start
            and (result._meta is None or "start" not in result.meta)
        ):
            result.update_positions(start)
        return result

    wrapper.__name__ = name
    return wrapper


_record_start_select = _record_start("_parse_select")


@dataclass
class _PartPosition:
    line: int
    column: int
    text: str


# Aggregate names sqlglot does not read as their aggregate (`Aggregate.parse_names`) -> class
_AGGREGATE_NAMES: dict[str, type[exp.Expression]] = {
    name: definition.sqlglot_classes[0]
    for definition in aggregates.aggregates()
    for name in definition.parse_names
}


def _aggregate_builder(cls: type[exp.Expression]) -> Callable[[list], exp.Expression]:
    def build(args: list) -> exp.Expression:
        return cls.from_arg_list(args)

    return build


class MangonelParser(BaseParser):
    """sqlglot's parser plus the CQL window clause after a table name, and the aggregate
    names sqlglot reads as something else (EVERY, ANY, SOME: `Aggregate.parse_names` in the
    registry) built as their aggregate's sqlglot class. `x = ANY (SELECT ..)` stays a
    subquery predicate (sqlglot decides that before it looks a function up)."""

    FUNCTIONS = {
        **BaseParser.FUNCTIONS,
        **{name: _aggregate_builder(cls) for name, cls in _AGGREGATE_NAMES.items()},
    }
    # sqlglot reads `ANY <expr>` as a subquery predicate before any function lookup
    NO_PAREN_FUNCTION_PARSERS = {
        name: parser
        for name, parser in BaseParser.NO_PAREN_FUNCTION_PARSERS.items()
        if name not in _AGGREGATE_NAMES
    }

    def _parse_select(self, *args, **kwargs):
        start_index = self._index
        result = _record_start_select(self, *args, **kwargs)
        distinct = result.args.get("distinct") if isinstance(result, exp.Select) else None
        if distinct is not None and (distinct._meta is None or "start" not in distinct.meta):
            # SELECT DISTINCT: sqlglot keeps no position for the keyword; find its token.
            for token in self._tokens[start_index : self._index]:
                if token.token_type is TokenType.DISTINCT:
                    distinct.update_positions(token)
                    break
        return result

    def _parse_projections(self) -> tuple[list[exp.Expression], None]:
        # Each SELECT item remembers the text the user wrote for it: an unnamed output is
        # named after that text (see `output_text`), not after sqlglot's normalised node.
        return self._parse_csv(self._parse_projection), None

    def _parse_projection(self) -> exp.Expression | None:
        first = self._index
        result = self._parse_expression()
        if result is not None and self._index > first:
            result.meta["source_text"] = source_text(self.sql, self._tokens[first : self._index])
        return result

    _parse_join = _record_start("_parse_join")
    _parse_order = _record_start("_parse_order")
    _parse_limit = _record_start("_parse_limit")
    _parse_group = _record_start("_parse_group")
    _parse_having = _record_start("_parse_having")
    _parse_where = _record_start("_parse_where")
    _parse_window = _record_start("_parse_window")

    def raise_error(self, message: str, token: Token | None = None) -> None:
        # Keep the token on the error: its start offset gives the exact column.
        token = token or self._curr or self._prev
        try:
            super().raise_error(message, token) if token else super().raise_error(message)
        except ParseError as error:
            error.mangonel_token = token  # type: ignore[attr-defined]
            raise

    def _parse_bracket(self, this: exp.Expression | None = None) -> exp.Expression | None:
        # `s [RANGE ..]` is a window clause, not a subscript of the table `s`.
        if (
            isinstance(this, exp.Table)
            and self._curr
            and self._curr.token_type is (TokenType.L_BRACKET)
        ):
            return this
        return super()._parse_bracket(this)

    def _parse_table(self, *args, **kwargs) -> exp.Expression | None:
        session = read_session_tvf(self)  # Flink's TABLE(SESSION(...)): compiler/session_tvf.py
        if session is not None:
            alias = self._parse_table_alias(alias_tokens=self.TABLE_ALIAS_TOKENS)
            if alias:
                session.this.set("alias", alias)
            return session
        if starts_window_table_function(self):  # Flink: TABLE(TUMBLE(TABLE s, ...))
            return read_window_table_function(self)
        table = super()._parse_table(*args, **kwargs)
        if table is None or not self._curr or self._curr.token_type is not TokenType.L_BRACKET:
            return table
        if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
            self._window_error(
                "a window clause on a subquery",
                self._curr,
                "put the window clause directly after a stream name: FROM s [RANGE 1 SECOND]",
            )
        if table.args.get("alias"):
            self._window_error(
                "the window clause goes right after the stream name, before its alias",
                self._curr,
                f"write FROM {table.name} [RANGE ..] AS {table.alias}",
            )
        clause = self._parse_cql_window(table)
        alias = self._parse_table_alias(alias_tokens=self.TABLE_ALIAS_TOKENS)
        if alias:
            table.set("alias", alias)
        if self._curr and self._curr.token_type is TokenType.L_BRACKET:
            self._window_error(
                "two window clauses on one stream",
                self._curr,
                "give each stream one window clause: [RANGE <size> SLIDE <slide>]",
            )
        return clause

    _clause_start = -1  # offset of the `[` of the window clause being read, else -1

    def _window_error(self, message: str, token: Token, hint: str = WINDOW_CLAUSE_HINT):
        """Raise at `token`; the construct is the whole clause (from its `[`, or from `token`
        outside one) to its closing bracket."""
        line, column = line_and_column(self.sql, token.start)
        start = token.start if self._clause_start < 0 else self._clause_start
        close = self.sql.find("]", max(start, token.start))
        end = close + 1 if close >= 0 else len(self.sql)
        construct = " ".join(self.sql[start:end].split())
        raise SqlError(message, line=line, column=column, construct=construct, hint=hint)

    def _parse_cql_window(self, table: exp.Table) -> WindowClause:
        open_bracket = self._curr
        self._clause_start = open_bracket.start
        try:
            return self._read_cql_window(table, open_bracket)
        finally:
            self._clause_start = -1

    def _read_cql_window(self, table: exp.Table, open_bracket: Token) -> WindowClause:
        self._advance()
        kind_token = self._curr
        kind = kind_token.text.upper() if kind_token else ""
        if kind not in ("RANGE", "ROWS", "SESSION"):
            self._window_error(
                "a window clause starts with RANGE, ROWS or SESSION", kind_token or open_bracket
            )
        self._advance()
        if kind == "SESSION":
            # [SESSION GAP <duration>]: the gap is the clause's size (compiler/session.py)
            if not self._curr or self._curr.text.upper() != "GAP":
                self._window_error(
                    "expected GAP after SESSION",
                    self._curr or self._prev,
                    "a session window is [SESSION GAP <duration> [WATERMARK <duration>]], "
                    "e.g. [SESSION GAP 30 SECONDS]",
                )
            self._advance()
        parts: dict[str, _PartPosition] = {}
        values: dict[str, int | None] = {"slide": None, "watermark": None}
        values["size"] = self._read_clause_value(kind, kind == "ROWS", "size", parts)
        while self._curr and self._curr.text.upper() in CLAUSE_WORDS:
            word = self._curr
            part = word.text.lower()
            if part in parts:
                self._window_error(f"{word.text.upper()} is given twice", word)
            self._advance()
            counts_rows = kind == "ROWS" and part == "slide"
            values[part] = self._read_clause_value(word.text.upper(), counts_rows, part, parts)
        if not self._curr or self._curr.token_type is not TokenType.R_BRACKET:
            found = repr(self._curr.text) if self._curr else "the end of the statement"
            self._window_error(
                f"expected SLIDE, WATERMARK or ] in the window clause, found {found}",
                self._curr or self._prev,
            )
        self._advance()
        clause = WindowClause(
            this=table,
            kind=kind,
            size=values["size"],
            slide=values["slide"],
            watermark=values["watermark"],
        )
        clause.update_positions(open_bracket)
        clause.meta["parts"] = {
            name: (position.line, position.column, position.text)
            for name, position in parts.items()
        }
        return clause

    def _read_clause_value(
        self, keyword: str, counts_rows: bool, part: str, parts: dict[str, _PartPosition]
    ) -> int:
        """Read the row count or duration after RANGE/ROWS/SLIDE/WATERMARK."""
        first = self._curr
        if counts_rows:
            value = self._read_row_count(keyword)
        else:
            try:
                value, next_index = read_duration(self._tokens, self._index, self._prev)
            except DurationError as error:
                self._window_error(
                    f"malformed duration after {keyword}: {error.message}"
                    if error.malformed
                    else f"{keyword} {error.message}",
                    error.token,
                    error.hint,
                )
            self._advance(next_index - self._index)
        last = self._prev
        line, column = line_and_column(self.sql, first.start)
        parts[part] = _PartPosition(line, column, self.sql[first.start : last.end + 1])
        return value

    def _read_row_count(self, keyword: str) -> int:
        hint = f"{keyword} takes a whole number of rows, e.g. [ROWS 1024 SLIDE 2]"
        sign = 1
        if self._curr and self._curr.token_type in (TokenType.DASH, TokenType.PLUS):
            sign = -1 if self._curr.token_type is TokenType.DASH else 1
            self._advance()
        number = self._curr
        if not number or number.token_type is not TokenType.NUMBER:
            self._window_error(f"expected a row count after {keyword}", number or self._prev, hint)
        if not number.text.isdigit():
            self._window_error(f"{number.text} is not a whole number of rows", number, hint)
        self._advance()
        if is_word(self._curr) and self._curr.text.upper() not in CLAUSE_WORDS:
            self._window_error(
                f"ROWS windows count tuples; {number.text} {self._curr.text} is a duration",
                self._curr,
                "use [RANGE <duration>] for time windows, [ROWS <n>] for count windows",
            )
        return sign * int(number.text)


def _window_clause_sql(self: generator.Generator, clause: WindowClause) -> str:
    table = clause.this.copy()
    alias = table.args.get("alias")
    table.set("alias", None)
    rows = clause.args["kind"] == "ROWS"

    def amount(value: int) -> str:
        return str(value) if rows else format_duration(value)

    kind = "SESSION GAP" if clause.args["kind"] == "SESSION" else clause.args["kind"]
    parts = [f"{kind} {amount(clause.args['size'])}"]
    if clause.args.get("slide") is not None:
        parts.append(f"SLIDE {amount(clause.args['slide'])}")
    if clause.args.get("watermark") is not None:
        parts.append(f"WATERMARK {format_duration(clause.args['watermark'])}")
    text = f"{self.sql(table)} [{' '.join(parts)}]"
    if alias:
        text += f" AS {self.sql(alias)}"
    return text


def _aggregate_ref_sql(self: generator.Generator, ref: AggregateRef) -> str:
    # The binder keeps the aggregate's own text, so resolved expressions read as written.
    return ref.meta.get("sql") or f"AGGREGATE_REF({ref.number})"


def _explain_sql(self: generator.Generator, explain: Explain) -> str:
    codegen = "CODEGEN " if explain.args.get("codegen") else ""
    return f"EXPLAIN {codegen}{self.sql(explain, 'this')}"


def _aggregate_name_sql(name: str) -> Callable:
    def sql(self: generator.Generator, node: exp.Expression) -> str:
        # every argument in declared order: PERCENTILE(x, p), APPROX_PERCENTILE(x, p, acc)
        arguments = [node.args.get(key) for key in type(node).arg_types]
        return self.func(name, *[a for a in arguments if isinstance(a, exp.Expression)])

    return sql


# Registered aggregates whose sqlglot class prints under another name (LogicalAnd prints
# LOGICAL_AND) print as their first SQL name (BOOL_AND) in messages and EXPLAIN.
_AGGREGATE_SPELLINGS = {
    cls: _aggregate_name_sql(definition.names[0])
    for definition in aggregates.aggregates()
    for cls in definition.sqlglot_classes
    if definition.names and cls.sql_name() not in definition.names
}


class MangonelGenerator(generator.Generator):
    TRANSFORMS = {
        **generator.Generator.TRANSFORMS,
        **_AGGREGATE_SPELLINGS,
        WindowClause: _window_clause_sql,
        # Flink's window table functions print as written (only messages print them)
        WindowTableFunction: lambda self, e: e.meta.get("text", f"TABLE({e.function}(..))"),
        WindowBound: lambda self, e: f"window_{e.bound}",
        WindowStruct: lambda self, e: "window",
        # IF prints as written (sqlglot's default spells it as a CASE); a CASE's branches
        # print through the CASE
        exp.If: lambda self, e: self.func("IF", e.this, e.args.get("true"), e.args.get("false")),
        AggregateRef: _aggregate_ref_sql,
        Explain: _explain_sql,
    }


class MangonelDialect(Dialect):
    """Spark-flavoured SQL with CQL window clauses.

    Identifiers are double-quoted (standard SQL) or back-quoted (Spark); strings are
    single-quoted.
    """

    class Tokenizer(tokens.Tokenizer):
        IDENTIFIERS = ['"', "`"]

    Parser = MangonelParser
    Generator = MangonelGenerator


@functools.cache
def reserved_words() -> frozenset[str]:
    """The keywords a query cannot read as a name unquoted (`FROM select` is a syntax
    error): the dialect's keywords whose tokens its parser never takes as an identifier."""
    dialect = MangonelDialect()
    identifiers = dialect.parser_class.ID_VAR_TOKENS
    return frozenset(
        word
        for word, token in dialect.tokenizer_class.KEYWORDS.items()
        if word.isalpha() and token not in identifiers
    )


# ---------------------------------------------------------------------------------------
# Statements

_DDL_KEYWORDS = frozenset({"CREATE", "DROP", "SHOW"})


def parse_statement(text: str) -> Statement:
    """Parse one statement: a query, `EXPLAIN [CODEGEN] <query>`, or DDL."""
    if not isinstance(text, str):
        raise TypeError(f"a statement is SQL text (a str), got {type(text).__name__}")
    dialect = MangonelDialect()
    token_list = _tokenize(dialect, text)
    if not token_list:
        raise SqlError("empty statement", line=1, column=1, hint=QUERY_HINT)
    first = token_list[0]
    if first.text.upper() in _DDL_KEYWORDS:
        return ddl.parse_ddl(text)
    if first.text.upper() != "EXPLAIN":
        return _parse_query(dialect, token_list, text)

    # sqlglot reads EXPLAIN as a command that swallows the rest of the text; blank the
    # keyword out (keeping every offset) and read what follows as a query.
    body = _tokenize(dialect, text[: first.start] + " " * len(first.text) + text[first.end + 1 :])
    codegen = bool(body) and body[0].text.upper() == "CODEGEN"
    if codegen:
        body = body[1:]
    explain_hint = "EXPLAIN [CODEGEN] SELECT ... FROM <stream> [RANGE ..] ..."
    if not body:
        line, column = line_and_column(text, len(text.rstrip()))
        raise SqlError(
            "EXPLAIN needs a query",
            line=line,
            column=column,
            construct=" ".join(text.split()),
            hint=explain_hint,
        )
    if body[0].text.upper() in _DDL_KEYWORDS | {"EXPLAIN"}:
        line, column = line_and_column(text, body[0].start)
        raise SqlError(
            f"EXPLAIN explains queries, not {body[0].text.upper()}",
            line=line,
            column=column,
            construct=body[0].text,
            hint=explain_hint,
        )
    explain = Explain(this=_parse_query(dialect, body, text), codegen=codegen)
    explain.update_positions(first)
    _annotate_start_positions(explain, text)
    return explain


def _tokenize(dialect: MangonelDialect, text: str) -> list[Token]:
    """The statement's tokens, without the `;` that may end it."""
    try:
        token_list = dialect.tokenize(text)
    except TokenError as error:
        offset = error.start if error.start is not None else 0
        line, column = line_and_column(text, offset)
        raise SqlError(
            "the statement cannot be read (an unclosed quote or comment?)",
            line=line,
            column=column,
            construct=" ".join(text[offset : offset + 40].split()),
            hint="close every '...' string, \"...\" or `...` identifier and /* comment */",
        ) from None
    if _only_trailing_semicolons(token_list):
        token_list = [t for t in token_list if t.token_type is not TokenType.SEMICOLON]
    return token_list


def _only_trailing_semicolons(token_list: list[Token]) -> bool:
    """True when every `;` is at the end (a statement may end with `;`)."""
    seen_semicolon = False
    for token in token_list:
        if token.token_type is TokenType.SEMICOLON:
            seen_semicolon = True
        elif seen_semicolon:
            return False
    return True


def _check_nesting(body: list[Token], text: str) -> None:
    """Refuse more than MAX_PARENTHESIS_NESTING open parentheses before parsing: sqlglot's
    parser recurses deeply for each one."""
    depth = 0
    for token in body:
        if token.token_type is TokenType.L_PAREN:
            depth += 1
            if depth > MAX_PARENTHESIS_NESTING:
                line, column = line_and_column(text, token.start)
                raise SqlError(
                    f"parentheses are nested more than {MAX_PARENTHESIS_NESTING} deep",
                    line=line,
                    column=column,
                    construct=" ".join(text[token.start : token.start + 40].split()),
                    hint="drop redundant parentheses or split the expression",
                )
        elif token.token_type is TokenType.R_PAREN:
            depth = max(0, depth - 1)


def _check_depth(tree: exp.Expression, text: str) -> None:
    """Refuse expression trees deeper than MAX_EXPRESSION_DEPTH (counted without recursion,
    since the passes that follow recurse once or more per level)."""
    stack: list[tuple[exp.Expression, int]] = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_EXPRESSION_DEPTH:
            line, column = position_of(node) or (1, 1)
            raise SqlError(
                f"the expression is nested more than {MAX_EXPRESSION_DEPTH} levels deep",
                line=line,
                column=column,
                construct=" ".join(node.sql(dialect=MangonelDialect)[:40].split()),
                hint="split a long chain of operators into sums of smaller groups, e.g. "
                "(a + b + ...) + (c + d + ...)",
            )
        stack.extend((child, depth + 1) for child in node.iter_expressions())


def _parse_query(dialect: MangonelDialect, body: list[Token], text: str) -> exp.Select:
    ensure_recursion_headroom()
    _check_nesting(body, text)
    _window_calls_as_functions(body)
    parser_ = dialect.parser(error_level=parser.ErrorLevel.IMMEDIATE)
    try:
        trees = [tree for tree in parser_.parse(body, text) if tree is not None]
    except ParseError as error:
        raise (
            _window_function_form(body, text)
            or _misplaced_window_clause(body, text)
            or _syntax_error(error, text)
        ) from None
    if not trees:
        raise SqlError("empty statement", line=1, column=1, hint=QUERY_HINT)
    if len(trees) > 1:
        line, column = position_of(trees[1]) or (1, 1)
        raise SqlError(
            "one statement at a time",
            line=line,
            column=column,
            construct=display_sql(trees[1]),
            hint="split scripts at ';' and run each statement on its own",
        )
    tree = trees[0]
    _annotate_start_positions(tree, text)
    _check_depth(tree, text)
    while isinstance(tree, exp.Subquery) and not tree.args.get("alias"):
        tree = tree.this  # (SELECT ...) is the same query
    if isinstance(tree, exp.Select):
        return tree
    line, column = position_of(tree) or line_and_column(text, body[0].start)
    if isinstance(tree, exp.SetOperation):
        operation = type(tree).__name__.upper()
        keyword = next((t for t in body if t.text.upper() == operation), body[0])
        line, column = line_and_column(text, keyword.start)
        raise SqlError(
            f"{operation} of queries is not supported",
            line=line,
            column=column,
            construct=keyword.text,
            hint="run one window query at a time",
        )
    raise SqlError(
        f"{body[0].text.upper()} statements are not supported",
        line=line,
        column=column,
        construct=body[0].text,
        hint="mangonel runs SELECT window queries, EXPLAIN [CODEGEN], CREATE STREAM, "
        "CREATE TABLE, DROP STREAM/TABLE and SHOW STREAMS/TABLES",
    )


def _window_calls_as_functions(body: list[Token]) -> None:
    """Spark's `window(ts, '1 second')`: WINDOW is a keyword (named windows), so sqlglot
    stops a GROUP BY list at it; a WINDOW token right before `(` is a function name
    (`window_syntax.py` reads the call)."""
    for token, following in zip(body, body[1:], strict=False):
        if token.token_type is TokenType.WINDOW and following.token_type is TokenType.L_PAREN:
            token.token_type = TokenType.VAR


def _window_function_form(body: list[Token], text: str) -> SqlError | None:
    """Flink's `TUMBLE(...)`/`HOP(...)`/`CUMULATE(...)` outside `TABLE(...)` do not parse
    (`FROM TUMBLE(TABLE s, ..)`); name the form instead of a bare syntax error."""
    for index, (token, following) in enumerate(zip(body, body[1:], strict=False)):
        name = token.text.upper()
        if (
            name in WINDOW_TABLE_FUNCTIONS
            and following.token_type is TokenType.L_PAREN
            and not (index >= 2 and body[index - 2].token_type is TokenType.TABLE)
        ):
            line, column = line_and_column(text, token.start)
            return SqlError(
                f"{name}(...) is a window table function: it goes in FROM TABLE(...)",
                line=line,
                column=column,
                construct=f"{token.text}(",
                hint=f"FROM TABLE({name}(TABLE s, DESCRIPTOR(ts), ...)) GROUP BY window_start, "
                "window_end, ...; or the window clause: FROM s [RANGE 1 SECOND SLIDE 10 "
                "MILLISECONDS]",
            )
    return None


_CLAUSES_BEFORE_WINDOW = {
    TokenType.WHERE: "WHERE",
    TokenType.GROUP_BY: "GROUP BY",
    TokenType.HAVING: "HAVING",
}


def _misplaced_window_clause(body: list[Token], text: str) -> SqlError | None:
    """`FROM s WHERE .. [RANGE ..]`: the window clause written after WHERE, GROUP BY or
    HAVING does not parse (sqlglot reads `[` as a subscript); say where it goes."""
    clause_seen: str | None = None
    stream = "<stream>"
    for index, token in enumerate(body):
        if token.token_type is TokenType.FROM and index + 1 < len(body):
            stream = body[index + 1].text
        elif token.token_type in _CLAUSES_BEFORE_WINDOW:
            clause_seen = clause_seen or _CLAUSES_BEFORE_WINDOW[token.token_type]
        elif (
            token.token_type is TokenType.L_BRACKET
            and clause_seen is not None
            and index + 1 < len(body)
            and body[index + 1].text.upper() in ("RANGE", "ROWS", "SESSION")
        ):
            close = next((t for t in body[index:] if t.token_type is TokenType.R_BRACKET), body[-1])
            line, column = line_and_column(text, token.start)
            return SqlError(
                f"the window clause goes right after the stream name, before {clause_seen}",
                line=line,
                column=column,
                construct=" ".join(text[token.start : close.end + 1].split()),
                hint=f"write FROM {stream} [{body[index + 1].text.upper()} ..] "
                "[WHERE ..] [GROUP BY ..] [HAVING ..]",
            )
    return None


def _syntax_error(error: ParseError, text: str) -> SqlError:
    token: Token | None = getattr(error, "mangonel_token", None)
    detail = error.errors[0] if error.errors else {}
    description = detail.get("description") or str(error).splitlines()[0]
    if token is not None:
        line, column = line_and_column(text, token.start)
        construct = token.text or None
    else:
        line = detail.get("line") or 1
        highlight = detail.get("highlight") or ""
        column = max(1, (detail.get("col") or 1) - len(highlight) + 1)
        construct = highlight or None
    description = re.sub(r" for <class '[\w.]+'>", "", description)
    description = re.sub(r"Required keyword: '\w+' missing", "incomplete expression", description)
    return SqlError(
        f"syntax error: {description}",
        line=line,
        column=column,
        construct=construct,
        hint=QUERY_HINT,
    )
