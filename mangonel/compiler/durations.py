"""Durations: `10 MILLISECONDS`, `500 ms`, `INTERVAL '5' MINUTE`, `INTERVAL '5 minutes'`.

`parse_duration` reads one from text (stream options, the CLI); `read_duration` reads one
from a statement's tokens (the window clause, in `parse.py`); `format_duration` prints one
back. Every duration is whole microseconds within `limits.MAX_DURATION_US`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from decimal import Decimal

from sqlglot.errors import TokenError
from sqlglot.tokens import Token, TokenType

from mangonel.compiler.limits import MAX_DURATION_DAYS, MAX_DURATION_US
from mangonel.errors import SqlError


def _tokenize(text: str) -> list[Token]:
    # mangonel's dialect tokenizes (its quoting rules); imported here, as parse.py imports
    # this module for the window clause
    from mangonel.compiler.parse import MangonelDialect

    return MangonelDialect().tokenize(text)


def line_and_column(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of character `offset` of `text`."""
    offset = max(0, min(offset, len(text)))
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, column


MICROSECONDS_PER_UNIT: dict[str, int] = {
    "MICROSECOND": 1,
    "MICROSECONDS": 1,
    "US": 1,
    "MILLISECOND": 1_000,
    "MILLISECONDS": 1_000,
    "MS": 1_000,
    "SECOND": 1_000_000,
    "SECONDS": 1_000_000,
    "S": 1_000_000,
    "MINUTE": 60_000_000,
    "MINUTES": 60_000_000,
    "MIN": 60_000_000,
    "HOUR": 3_600_000_000,
    "HOURS": 3_600_000_000,
    "H": 3_600_000_000,
    "DAY": 86_400_000_000,
    "DAYS": 86_400_000_000,
    "D": 86_400_000_000,
}

UNITS_HINT = (
    "units: microsecond(s)/us, millisecond(s)/ms, second(s)/s, minute(s)/min, hour(s)/h, day(s)/d"
)
DURATION_HINT = (
    "write a number and a unit, e.g. 1 SECOND, 10 MILLISECONDS, 500 ms, INTERVAL '5' MINUTE "
    f"or INTERVAL '5 minutes'; {UNITS_HINT}"
)

_NUMBER = re.compile(r"\d+(\.\d+)?")
WORD = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
CLAUSE_WORDS = frozenset({"SLIDE", "WATERMARK"})

# Largest unit first: how a duration is printed back, as SQL (error messages, generated SQL)
# or compact (EXPLAIN: `1s`, `10ms`, `100us`).
_DISPLAY_UNITS = (
    ("DAY", "d", 86_400_000_000),
    ("HOUR", "h", 3_600_000_000),
    ("MINUTE", "min", 60_000_000),
    ("SECOND", "s", 1_000_000),
    ("MILLISECOND", "ms", 1_000),
    ("MICROSECOND", "us", 1),
)


def format_duration(microseconds: int, *, compact: bool = False) -> str:
    """The largest unit that divides the duration exactly: `1500000` -> `'1500 MILLISECONDS'`,
    or `'1500ms'` with compact=True."""
    if microseconds == 0:
        return "0s" if compact else "0 SECONDS"
    for unit, suffix, size in _DISPLAY_UNITS:
        if microseconds % size == 0:
            amount = microseconds // size
            if compact:
                return f"{amount}{suffix}"
            return f"{amount} {unit}" + ("" if abs(amount) == 1 else "S")
    raise AssertionError("unreachable: every integer is a whole number of microseconds")


class DurationError(Exception):
    """A malformed duration; `token` is where it goes wrong."""

    def __init__(
        self, message: str, token: Token, hint: str = DURATION_HINT, *, malformed: bool = True
    ) -> None:
        super().__init__(message)
        self.message = message
        self.token = token
        self.hint = hint
        self.malformed = malformed  # False: well formed, but beyond a limit


def is_word(token: Token | None) -> bool:
    return (
        token is not None
        and token.token_type not in (TokenType.STRING, TokenType.IDENTIFIER)
        and WORD.fullmatch(token.text) is not None
    )


def _amount(number: Token, sign: int) -> Decimal:
    if number.token_type is TokenType.NUMBER and not _NUMBER.fullmatch(number.text):
        raise DurationError(
            f"{number.text} is not a plain decimal amount",
            number,
            hint="write the amount in digits with an optional decimal point (2 or 1.5, not "
            f"1e3), then a unit; {UNITS_HINT}",
        )
    if number.token_type is not TokenType.NUMBER:
        raise DurationError(f"expected a number, found {number.text!r}", number)
    return sign * Decimal(number.text)


def _whole_microseconds(amount: Decimal, unit: Token, text: str) -> int:
    factor = MICROSECONDS_PER_UNIT.get(unit.text.upper())
    if factor is None:
        raise DurationError(f"unknown time unit {unit.text!r}", unit, hint=UNITS_HINT)
    value = amount * factor
    if value != value.to_integral_value():
        raise DurationError(
            f"{text} is not a whole number of microseconds",
            unit,
            hint="durations are whole microseconds; use a smaller unit or a whole amount",
        )
    if abs(value) > MAX_DURATION_US:
        raise DurationError(
            f"{text} is too long: durations are at most {MAX_DURATION_DAYS} days "
            "(about 10,000 years)",
            unit,
            hint="durations are int64 microseconds; shorten the duration",
            malformed=False,
        )
    return int(value)


def read_duration(token_list: Sequence[Token], index: int, end_token: Token) -> tuple[int, int]:
    """Read one duration starting at token_list[index]; return (microseconds, next index).

    Forms: [-]<number> <unit>, INTERVAL '<number>' <unit>, INTERVAL '<number> <unit>'.
    `end_token` is what an error at the end of the list points at.
    """

    def at(position: int) -> Token | None:
        return token_list[position] if position < len(token_list) else None

    first = at(index)
    if first is None:
        raise DurationError("expected a duration", end_token)
    if first.token_type is TokenType.INTERVAL:
        quoted = at(index + 1)
        if quoted is None or quoted.token_type is not TokenType.STRING:
            raise DurationError(
                "INTERVAL needs a quoted amount, e.g. INTERVAL '5' MINUTE", quoted or end_token
            )
        inner = _tokenize_string_contents(quoted)
        unit = at(index + 2)
        has_outer_unit = is_word(unit) and unit.text.upper() not in CLAUSE_WORDS
        if has_outer_unit:
            if not inner:
                raise DurationError(
                    f"INTERVAL '' {unit.text} has no amount: quote a number, e.g. "
                    f"INTERVAL '5' {unit.text}",
                    quoted,
                )
            if len(inner) != 1:
                problem = (
                    "gives the unit twice"
                    if is_word(inner[-1])
                    else "is not one number (year-month and day-time ranges are not supported)"
                )
                raise DurationError(f"INTERVAL '{quoted.text}' {unit.text} {problem}", unit)
            amount = _amount(inner[0], 1)
            text = f"INTERVAL '{quoted.text}' {unit.text}"
            return _whole_microseconds(amount, unit, text), index + 3
        value, consumed = read_duration(inner, 0, quoted)
        if consumed != len(inner):
            raise DurationError(f"unexpected {inner[consumed].text!r} in INTERVAL", quoted)
        return value, index + 2

    sign = 1
    number_index = index
    if first.token_type in (TokenType.DASH, TokenType.PLUS):
        sign = -1 if first.token_type is TokenType.DASH else 1
        number_index += 1
    number = at(number_index)
    if number is None:
        raise DurationError("expected a number after the sign", end_token)
    amount = _amount(number, sign)
    unit = at(number_index + 1)
    if not is_word(unit) or unit.text.upper() in CLAUSE_WORDS:
        raise DurationError(f"the duration {number.text} has no time unit", unit or end_token)
    text = f"{'-' if sign < 0 else ''}{number.text} {unit.text}"
    return _whole_microseconds(amount, unit, text), number_index + 2


def _tokenize_string_contents(quoted: Token) -> list[Token]:
    """The tokens inside a string literal, positioned in the statement (the literal's quote
    is at quoted.start, so its contents start one character later)."""
    try:
        inner = _tokenize(quoted.text)
    except TokenError as error:
        raise DurationError("malformed duration", quoted) from error
    base = quoted.start + 1
    return [
        Token(
            token.token_type,
            token.text,
            line=quoted.line,
            col=quoted.col,
            start=base + token.start,
            end=base + token.end,
        )
        for token in inner
    ]


def parse_duration(text: str) -> int:
    """Microseconds of a duration: `parse_duration('500 milliseconds') == 500_000`.

    Accepts `10 MILLISECONDS`, `1 SECOND`, `500 ms`, `INTERVAL '5' MINUTE`,
    `INTERVAL '5 minutes'`, with a sign (negative durations are the caller's to reject).
    """
    try:
        token_list = _tokenize(text)
    except TokenError as error:
        raise SqlError(
            f"malformed duration {text!r}", line=1, column=1, construct=text, hint=DURATION_HINT
        ) from error
    end = Token(TokenType.UNKNOWN, "", line=1, col=len(text), start=len(text), end=len(text))
    try:
        value, consumed = read_duration(token_list, 0, end)
        if consumed != len(token_list):
            raise DurationError(
                f"unexpected {token_list[consumed].text!r} after the duration",
                token_list[consumed],
            )
    except DurationError as error:
        line, column = line_and_column(text, error.token.start)
        raise SqlError(
            f"malformed duration {text!r}: {error.message}"
            if error.malformed
            else f"duration {error.message}",
            line=line,
            column=column,
            construct=text,
            hint=error.hint,
        ) from None
    return value
