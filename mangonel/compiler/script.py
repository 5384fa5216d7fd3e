"""Splitting a script (DDL and queries separated by `;`) into statements."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot.tokens import TokenType

from mangonel.compiler.parse import MangonelDialect


@dataclass(frozen=True)
class ScriptStatement:
    text: str
    line: int  # 1-based line of the statement's first character in the script


def split_statements(script: str) -> list[ScriptStatement]:
    """Statements of a script, split at top-level `;` (not inside strings or comments).

    Uses the dialect's tokenizer so quoting (also `back-quoted` names) and comments follow
    the rules the parser uses.
    """
    statements: list[ScriptStatement] = []
    start = 0
    for token in MangonelDialect().tokenize(script):
        if token.token_type is TokenType.SEMICOLON:
            _append(statements, script, start, token.start)
            start = token.end + 1
    _append(statements, script, start, len(script))
    return statements


def _append(statements: list[ScriptStatement], script: str, start: int, end: int) -> None:
    text = script[start:end]
    stripped = text.strip()
    if not stripped or all(
        line.strip().startswith("--") or not line.strip() for line in stripped.splitlines()
    ):
        return
    offset = start + (len(text) - len(text.lstrip()))
    statements.append(ScriptStatement(stripped, script.count("\n", 0, offset) + 1))
