"""Flink's session window table-valued function, read by the parser as the CQL clause:

    FROM TABLE(SESSION(TABLE s PARTITION BY k, DESCRIPTOR(ts), INTERVAL '30' SECOND)) [AS a]

becomes `WindowClause(this=<s>, kind="SESSION", size=<gap>)` with `meta["session_tvf"]`
holding the PARTITION BY columns and the DESCRIPTOR column (names and positions), which
`compiler/session.py` (`session_forms`) checks against the stream and GROUP BY. `PARTITION BY`
takes one column, several separated by commas, or a parenthesised list.

`read_session_tvf(parser)` is called by `MangonelParser._parse_table` before sqlglot's own
table parsing; it imports nothing of `parse.py` (which imports it).
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from mangonel.compiler.durations import DurationError, line_and_column, read_duration
from mangonel.compiler.nodes import WindowClause
from mangonel.errors import SqlError

TVF_HINT = (
    "Flink's session window: FROM TABLE(SESSION(TABLE s PARTITION BY k, DESCRIPTOR(ts), "
    "INTERVAL '30' SECOND)) GROUP BY window_start, window_end, k"
)


def _is(token: Token | None, token_type: TokenType, text: str | None = None) -> bool:
    return (
        token is not None
        and token.token_type is token_type
        and (text is None or token.text.upper() == text)
    )


def starts_session_tvf(tokens: list[Token], index: int) -> bool:
    """Whether tokens[index:] read `TABLE ( SESSION (`."""
    window = tokens[index : index + 4]
    return (
        len(window) == 4
        and _is(window[0], TokenType.TABLE)
        and _is(window[1], TokenType.L_PAREN)
        and window[2].text.upper() == "SESSION"
        and _is(window[3], TokenType.L_PAREN)
    )


def read_session_tvf(parser: Any) -> WindowClause | None:  # noqa: ANN401 - MangonelParser
    """The clause of `TABLE(SESSION(...))` at the parser's position, else None (nothing
    read). Errors are the parser's positioned window errors."""
    if not starts_session_tvf(parser._tokens, parser._index):
        return None
    open_token = parser._curr
    parser._advance(4)

    def fail(message: str, token: Token | None, hint: str = TVF_HINT) -> None:
        token = token or parser._prev
        line, column = line_and_column(parser.sql, token.start)
        construct = " ".join(parser.sql[open_token.start : token.end + 1].split())
        raise SqlError(message, line=line, column=column, construct=construct, hint=hint)

    def expect(token_type: TokenType, what: str, text: str | None = None) -> Token:
        token = parser._curr
        if not _is(token, token_type, text):
            found = repr(token.text) if token else "the end of the statement"
            fail(f"expected {what} in SESSION(...), found {found}", token)
        parser._advance()
        return token

    expect(TokenType.TABLE, "TABLE <stream>")
    table = parser._parse_table_parts()
    if not isinstance(table, exp.Table):
        fail("expected a stream name after TABLE", parser._curr)
    partition: list[tuple[str, tuple[int, int]]] = []
    if _is(parser._curr, TokenType.PARTITION_BY):
        parser._advance()
        parenthesised = _is(parser._curr, TokenType.L_PAREN)
        if parenthesised:
            parser._advance()
        while True:
            token = parser._curr
            if token is None or token.token_type not in (TokenType.VAR, TokenType.IDENTIFIER):
                fail("expected a column after PARTITION BY", token)
            partition.append((token.text, line_and_column(parser.sql, token.start)))
            parser._advance()
            more = _is(parser._curr, TokenType.COMMA) and not (
                not parenthesised
                and parser._next is not None
                and parser._next.text.upper() == "DESCRIPTOR"
            )
            if not more:
                break
            parser._advance()
        if parenthesised:
            expect(TokenType.R_PAREN, "')' after the PARTITION BY columns")
    expect(TokenType.COMMA, "',' before DESCRIPTOR(<event time>)")
    expect(TokenType.VAR, "DESCRIPTOR(<event time>)", "DESCRIPTOR")
    expect(TokenType.L_PAREN, "'(' after DESCRIPTOR")
    descriptor = parser._curr
    if descriptor is None or descriptor.token_type not in (TokenType.VAR, TokenType.IDENTIFIER):
        fail("expected the event-time column in DESCRIPTOR(...)", descriptor)
    parser._advance()
    expect(TokenType.R_PAREN, "')' after the DESCRIPTOR column")
    expect(TokenType.COMMA, "',' before the session gap")
    gap_token = parser._curr
    try:
        gap, next_index = read_duration(parser._tokens, parser._index, parser._prev)
    except DurationError as error:
        fail(f"malformed session gap: {error.message}", error.token, error.hint)
    parser._advance(next_index - parser._index)
    gap_text = parser.sql[gap_token.start : parser._prev.end + 1]
    expect(TokenType.R_PAREN, "')' closing SESSION(...)")
    expect(TokenType.R_PAREN, "')' closing TABLE(...)")
    clause = WindowClause(this=table, kind="SESSION", size=gap)
    clause.update_positions(open_token)
    clause.meta["parts"] = {"size": (*line_and_column(parser.sql, gap_token.start), gap_text)}
    clause.meta["session_tvf"] = {
        "partition": partition,
        "descriptor": (descriptor.text, line_and_column(parser.sql, descriptor.start)),
    }
    return clause
