"""Golden error messages: every case of tests/golden/errors.sql fails with the text kept in
tests/golden/errors.expected (line, column, construct, hint).

Regenerate the expected file after an intended change with `python tests/golden/update.py`
and review the diff by hand before committing it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from child_process import child_environment

from mangonel.catalog.catalog import Catalog, Schema, Table
from mangonel.compiler import ddl, nodes
from mangonel.compiler.bind import bind
from mangonel.compiler.parse import parse_statement
from mangonel.compiler.streams import stream_from_ddl
from mangonel.errors import MangonelError

GOLDEN = Path(__file__).parent / "golden"
CASES_FILE = GOLDEN / "errors.sql"
EXPECTED_FILE = GOLDEN / "errors.expected"
CASE_HEADER = re.compile(r"^-- name: (\S+)\s*$")

SETUP = (
    "CREATE STREAM trades (ts TIMESTAMP, symbol STRING, price DOUBLE, volume BIGINT, venue INT)"
    " WITH (event_time = 'ts', watermark = '500 milliseconds')",
    "CREATE STREAM clicks (event_time TIMESTAMP, user_id BIGINT) WITH (event_time = 'event_time')",
    "CREATE TABLE symbols (symbol STRING, sector STRING)",
)


def read_cases(text: str) -> dict[str, str]:
    """Case name -> statement text (the lines up to the next `-- name:`, trimmed)."""
    cases: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        header = CASE_HEADER.match(line)
        if header:
            name = header.group(1)
            assert name not in cases, f"case {name} appears twice"
            current = cases[name] = []
        elif current is not None:
            current.append(line)
    return {name: "\n".join(lines).strip("\n") for name, lines in cases.items()}


def read_expected(text: str) -> dict[str, str]:
    return read_cases(text)


def fresh_catalog() -> Catalog:
    catalog = Catalog()
    for statement_text in SETUP:
        statement = parse_statement(statement_text)
        if isinstance(statement, ddl.CreateStream):
            catalog.add_stream(stream_from_ddl(statement))
        else:
            assert isinstance(statement, ddl.CreateTable)
            catalog.add_table(Table(statement.name, Schema(statement.columns)))
    return catalog


def run_case(text: str) -> str:
    """The rendered error of one statement, or a line saying it was accepted."""
    catalog = fresh_catalog()
    try:
        statement = parse_statement(text)
        if isinstance(statement, ddl.CreateStream):
            stream_from_ddl(statement)
        elif isinstance(statement, (ddl.CreateTable, ddl.Drop, ddl.Show)):
            pass
        else:
            bind(statement.this if isinstance(statement, nodes.Explain) else statement, catalog)
    except MangonelError as error:
        return f"{type(error).__name__}: {error}"
    return "ACCEPTED (expected an error)"


def render_expected(cases: dict[str, str]) -> str:
    blocks = [f"-- name: {name}\n{run_case(text)}\n" for name, text in cases.items()]
    return "\n".join(blocks)


CASES = read_cases(CASES_FILE.read_text())


def test_golden_file_has_enough_cases() -> None:
    assert len(CASES) >= 30


@pytest.mark.parametrize("name", list(CASES))
def test_error_matches_golden(name: str) -> None:
    expected = read_expected(EXPECTED_FILE.read_text())
    assert name in expected, f"no expected output for {name}: run tests/golden/update.py"
    actual = run_case(CASES[name])
    assert not actual.startswith("ACCEPTED"), f"{name} was accepted:\n{CASES[name]}"
    assert actual == expected[name]


def test_every_expected_case_still_exists() -> None:
    assert set(read_expected(EXPECTED_FILE.read_text())) == set(CASES)


_RENDER_ALL = (
    "import sys; sys.path.insert(0, 'tests'); import test_errors_golden as t; "
    "sys.stdout.write(t.render_expected(t.CASES))"
)


def test_errors_are_deterministic_across_hash_seeds() -> None:
    """Set and dict orders of strings change with PYTHONHASHSEED between processes (never
    within one): every message must come out the same under two seeds."""
    first, second = (run_with_hash_seed(seed, _RENDER_ALL) for seed in ("1", "2"))
    assert first == second
    assert first == EXPECTED_FILE.read_text().rstrip("\n") + "\n"


def run_with_hash_seed(seed: str, code: str) -> str:
    """Run `code` in a fresh interpreter with PYTHONHASHSEED=seed; its standard output."""
    root = Path(__file__).resolve().parent.parent
    environment = child_environment(PYTHONHASHSEED=seed)
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout
