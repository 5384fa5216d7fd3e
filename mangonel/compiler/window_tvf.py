"""The parser side of Flink's windowing table functions in FROM:

    FROM TABLE(<NAME>(<argument>, ...)) [[AS] alias]
    argument := [<PARAMETER> =>] ( TABLE <stream> [PARTITION BY <column>, ...]
                                 | DESCRIPTOR(<column>)
                                 | <duration> )

sqlglot 30 reads none of this (`TABLE s` as an argument fails), so `MangonelParser` hands the
tokens from `TABLE (` on to `read_window_table_function` when the name is one of
`WINDOW_TABLE_FUNCTIONS`. Durations are read as the CQL clause reads them
(`durations.read_duration`: `INTERVAL '1' SECOND`, `INTERVAL '1 second'`, `1 SECOND`). The
result is a `nodes.WindowTableFunction`; what the arguments mean (which parameter, which
checks) is `window_syntax.py`'s, which knows the stream.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from mangonel.compiler.durations import DurationError, line_and_column, read_duration
from mangonel.compiler.nodes import Descriptor, Duration, WindowArgument, WindowTableFunction
from mangonel.errors import SqlError

if TYPE_CHECKING:  # parse.py imports this module
    from mangonel.compiler.parse import MangonelParser

# name -> its parameters in positional order (Flink's names: `SIZE => ...`). A new windowing
# function adds its row here and its builder in `window_syntax.WINDOW_BUILDERS`.
WINDOW_TABLE_FUNCTIONS: dict[str, tuple[str, ...]] = {
    "TUMBLE": ("DATA", "TIMECOL", "SIZE", "OFFSET"),
    "HOP": ("DATA", "TIMECOL", "SLIDE", "SIZE", "OFFSET"),
    "CUMULATE": ("DATA", "TIMECOL", "STEP", "SIZE", "OFFSET"),
}

TVF_HINT = (
    "Flink's window functions read FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(ts), INTERVAL '1' "
    "SECOND)), HOP(TABLE s, DESCRIPTOR(ts), <slide>, <size>) or CUMULATE(TABLE s, "
    "DESCRIPTOR(ts), <step>, <max size>)"
)
_IDENTIFIER_TOKENS = (TokenType.VAR, TokenType.IDENTIFIER)


def starts_window_table_function(parser: MangonelParser) -> bool:
    """At `TABLE ( <NAME> (` with NAME a windowing function."""
    tokens, index = parser._tokens, parser._index
    if index + 3 >= len(tokens):
        return False
    table, open_paren, name, name_paren = tokens[index : index + 4]
    return (
        table.token_type is TokenType.TABLE
        and open_paren.token_type is TokenType.L_PAREN
        and name.text.upper() in WINDOW_TABLE_FUNCTIONS
        and name_paren.token_type is TokenType.L_PAREN
    )


def _fail(parser: MangonelParser, message: str, token: Token, hint: str = TVF_HINT) -> SqlError:
    line, column = line_and_column(parser.sql, token.start)
    return SqlError(message, line=line, column=column, construct=token.text or None, hint=hint)


def _positioned(node: exp.Expression, parser: MangonelParser, first: Token, last: Token):  # noqa: ANN202
    line, column = line_and_column(parser.sql, first.start)
    node.meta.update(
        line=first.line,
        col=first.col,
        start=first.start,
        end=last.end,
        start_line=line,
        start_col=column,
        text=parser.sql[first.start : last.end + 1],
    )
    return node


def _expect(parser: MangonelParser, token_type: TokenType, what: str) -> Token:
    token = parser._curr
    if token is None or token.token_type is not token_type:
        found = repr(token.text) if token is not None else "the end of the statement"
        raise _fail(parser, f"expected {what}, found {found}", token or parser._prev)
    parser._advance()
    return token


def _identifier(parser: MangonelParser, what: str) -> exp.Identifier:
    token = parser._curr
    if token is None or token.token_type not in _IDENTIFIER_TOKENS:
        found = repr(token.text) if token is not None else "the end of the statement"
        raise _fail(parser, f"expected {what}, found {found}", token or parser._prev)
    parser._advance()
    identifier = exp.Identifier(this=token.text, quoted=token.token_type is TokenType.IDENTIFIER)
    return _positioned(identifier, parser, token, token)


def read_window_table_function(parser: MangonelParser) -> WindowTableFunction:
    """Read `TABLE(NAME(args)) [[AS] alias]` (the parser is at `TABLE`)."""
    table_token = parser._curr
    parser._advance(2)  # TABLE (
    name_token = parser._curr
    parser._advance(2)  # NAME (
    arguments: list[WindowArgument] = []
    while True:
        arguments.append(_read_argument(parser))
        if parser._curr is not None and parser._curr.token_type is TokenType.COMMA:
            parser._advance()
            continue
        break
    _expect(parser, TokenType.R_PAREN, f"',' or ')' after an argument of {name_token.text}")
    close = _expect(parser, TokenType.R_PAREN, f"')' closing TABLE({name_token.text}(...)")
    node = WindowTableFunction(this=name_token.text.upper(), expressions=arguments)
    _positioned(node, parser, table_token, close)
    alias = parser._parse_table_alias(alias_tokens=parser.TABLE_ALIAS_TOKENS)
    if alias:
        node.set("alias", alias)
    return node


def _read_argument(parser: MangonelParser) -> WindowArgument:
    first = parser._curr
    if first is None:
        raise _fail(parser, "expected an argument, found the end of the statement", parser._prev)
    name = None
    following = (
        parser._tokens[parser._index + 1] if parser._index + 1 < len(parser._tokens) else None
    )
    if following is not None and following.token_type is TokenType.FARROW:
        name = first.text.upper()
        parser._advance(2)
    value_token = parser._curr
    if value_token is None:
        raise _fail(parser, "expected an argument after =>", parser._prev)
    partition: list[exp.Column] = []
    if value_token.token_type is TokenType.TABLE:
        parser._advance()
        identifier = _identifier(parser, "a stream name after TABLE")
        value: exp.Expression = _positioned(
            exp.Table(this=identifier), parser, value_token, parser._prev
        )
        if parser._curr is not None and parser._curr.token_type is TokenType.PARTITION_BY:
            parser._advance()
            while True:
                column = _identifier(parser, "a column after PARTITION BY")
                partition.append(
                    _positioned(exp.Column(this=column), parser, parser._prev, parser._prev)
                )
                if _another_partition_column(parser):
                    parser._advance()  # the comma
                    continue
                break
    elif value_token.text.upper() == "DESCRIPTOR":
        parser._advance()
        _expect(parser, TokenType.L_PAREN, "'(' after DESCRIPTOR")
        identifier = _identifier(parser, "a column in DESCRIPTOR(...)")
        column = _positioned(exp.Column(this=identifier), parser, parser._prev, parser._prev)
        close = _expect(parser, TokenType.R_PAREN, "')' after the DESCRIPTOR column")
        value = _positioned(Descriptor(this=column), parser, value_token, close)
    else:
        try:
            microseconds, next_index = read_duration(parser._tokens, parser._index, parser._prev)
        except DurationError as error:
            raise _fail(
                parser,
                f"expected TABLE <stream>, DESCRIPTOR(<column>) or a duration: {error.message}",
                error.token,
                error.hint,
            ) from None
        parser._advance(next_index - parser._index)
        value = _positioned(Duration(this=microseconds), parser, value_token, parser._prev)
    argument = WindowArgument(this=value, name=name, partition=partition or None)
    return _positioned(argument, parser, first, parser._prev)


def _another_partition_column(parser: MangonelParser) -> bool:
    """At `, <name>` followed by `,` or `)`: another PARTITION BY column (the next argument
    would be TABLE, DESCRIPTOR(..), a duration or `NAME =>`, never a bare name)."""
    ahead = parser._tokens[parser._index : parser._index + 3]
    return (
        len(ahead) == 3
        and ahead[0].token_type is TokenType.COMMA
        and ahead[1].token_type in _IDENTIFIER_TOKENS
        and ahead[1].text.upper() != "DESCRIPTOR"
        and ahead[2].token_type in (TokenType.COMMA, TokenType.R_PAREN)
    )
