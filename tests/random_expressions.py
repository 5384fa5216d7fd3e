"""Random numeric SQL expressions for differential tests (a fresh seed each run): the
standalone evaluator against the SQL mangonel renders for Spark (tests/spark/
test_spark_numeric.py) and against the CUDA it renders, compiled for the host and the GPU
(tests/test_expressions_host.py, tests/test_expressions_nvcc.py).

No LN, EXP or POWER: they are the platform's (docs/semantics.md) and may differ in a bit."""

from __future__ import annotations

import random

import pytest

LITERALS = ["0", "1", "-1", "7", "2147483647", "3000000000", "0.5", "2.5E0", "1.1", "-0.0"]


def random_expression(rng: random.Random, columns: list[str], depth: int = 0) -> str:
    """A numeric expression over `columns` (numeric columns; a name listed twice is drawn
    twice as often) of every form mangonel compiles: arithmetic, casts, the numeric
    functions, GREATEST/LEAST/COALESCE, IF and both CASE forms (conditions from
    `random_predicate`)."""
    if depth > 3 or rng.random() < 0.3:
        return rng.choice(columns + LITERALS)

    def inner() -> str:
        return random_expression(rng, columns, depth + 1)

    form = rng.randrange(13)
    if form < 4:
        return f"({inner()} {rng.choice(['+', '-', '*', '/', '%'])} {inner()})"
    if form == 4:
        return f"(- {inner()})"
    if form == 5:
        return f"CAST({inner()} AS {rng.choice(['INT', 'BIGINT', 'DOUBLE', 'FLOAT'])})"
    if form in (6, 11):
        return f"{rng.choice(['ABS', 'FLOOR', 'CEIL', 'SIGN', 'SQRT'])}({inner()})"
    if form == 7:
        return f"ROUND({inner()}, {rng.choice([0, 1, -1, 2])})"
    if form == 8:
        return f"{rng.choice(['GREATEST', 'LEAST', 'COALESCE'])}({inner()}, {inner()})"
    if form == 9:
        return f"IF({random_predicate(rng, columns, depth + 1)}, {inner()}, {inner()})"
    if form == 12:
        whens = " ".join(f"WHEN {inner()} THEN {inner()}" for _ in range(rng.randint(1, 2)))
        return f"CASE {inner()} {whens} ELSE {inner()} END"
    condition = random_predicate(rng, columns, depth + 1)
    return f"CASE WHEN {condition} THEN {inner()} ELSE {inner()} END"


def random_predicate(rng: random.Random, columns: list[str], depth: int = 0) -> str:
    """A BOOLEAN expression over numeric ones: comparisons, IS [NOT] NULL, BETWEEN, IN and
    AND/OR/NOT over them (three-valued: NULL operands included)."""

    def value() -> str:
        return random_expression(rng, columns, depth + 1)

    form = rng.randrange(8)
    if form < 3:
        return f"({value()} {rng.choice(['<', '<=', '=', '<>', '>', '>='])} {value()})"
    if form == 3:
        return f"({value()} IS {rng.choice(['', 'NOT '])}NULL)"
    if form == 4:
        return f"({value()} {rng.choice(['', 'NOT '])}BETWEEN {value()} AND {value()})"
    if form == 5:
        listed = ", ".join(rng.sample(LITERALS + ["NULL"], rng.randint(1, 3)))
        return f"({value()} {rng.choice(['', 'NOT '])}IN ({listed}))"
    if depth > 3 or form == 6:
        return f"(NOT {random_predicate(rng, columns, depth + 1)})"
    left, right = (random_predicate(rng, columns, depth + 1) for _ in range(2))
    return f"({left} {rng.choice(['AND', 'OR'])} {right})"


def random_sql(rng: random.Random, columns: list[str], count: int) -> list[str]:
    """`count` random numeric expressions over `columns`, one in four a predicate (every one
    plans: all are numeric or BOOLEAN)."""
    draw = [random_expression] * 3 + [random_predicate]
    return [rng.choice(draw)(rng, columns) for _ in range(count)]


def run_seed(request: pytest.FixtureRequest, fuzz_summary: list[str], label: str) -> int:
    """This run's seed: --fuzz-seed, or a fresh one; printed at the end of the test run
    (`fuzz_summary`) with the option that replays it."""
    seed = request.config.getoption("--fuzz-seed") or random.SystemRandom().randrange(2**31)
    fuzz_summary.append(f"{label}: seed {seed} (--fuzz-seed={seed} replays it)")
    return seed
