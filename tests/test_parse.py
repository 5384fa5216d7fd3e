"""The sqlglot dialect: window clauses, durations, EXPLAIN, positioned syntax errors."""

from __future__ import annotations

import pytest
from sqlglot import exp

from mangonel.compiler import ddl
from mangonel.compiler.limits import (
    MAX_DURATION_DAYS,
    MAX_DURATION_US,
    MAX_EXPRESSION_DEPTH,
    MAX_PARENTHESIS_NESTING,
)
from mangonel.compiler.nodes import Explain, WindowClause
from mangonel.compiler.parse import (
    MangonelDialect,
    format_duration,
    line_and_column,
    parse_duration,
    parse_statement,
    position_of,
)
from mangonel.errors import SqlError

SECOND = 1_000_000


def window_of(query: exp.Select) -> WindowClause:
    clause = query.args["from_"].this
    assert isinstance(clause, WindowClause)
    return clause


@pytest.mark.parametrize(
    ("text", "microseconds"),
    [
        ("500 milliseconds", 500_000),
        ("1 SECOND", SECOND),
        ("2 seconds", 2 * SECOND),
        ("10 MILLISECONDS", 10_000),
        ("500 ms", 500_000),
        ("500ms", 500_000),
        ("7 us", 7),
        ("1 microsecond", 1),
        ("3 s", 3 * SECOND),
        ("5 min", 300 * SECOND),
        ("2 minutes", 120 * SECOND),
        ("1 h", 3600 * SECOND),
        ("1 HOURS", 3600 * SECOND),
        ("1 day", 86_400 * SECOND),
        ("2 d", 2 * 86_400 * SECOND),
        ("1.5 seconds", 1_500_000),
        ("0.001 ms", 1),
        ("INTERVAL '5' MINUTE", 300 * SECOND),
        ("INTERVAL '5 minutes'", 300 * SECOND),
        ("interval '250 ms'", 250_000),
        ("0 seconds", 0),
        ("-5 seconds", -5 * SECOND),
    ],
)
def test_parse_duration(text: str, microseconds: int) -> None:
    assert parse_duration(text) == microseconds


@pytest.mark.parametrize(
    ("text", "message", "column"),
    [
        ("1 FORTNIGHT", "unknown time unit 'FORTNIGHT'", 3),
        ("SECOND", "expected a number, found 'SECOND'", 1),
        ("1.5 US", "not a whole number of microseconds", 5),
        ("5", "has no time unit", 2),
        ("", "expected a duration", 1),
        ("1 second 2", "unexpected '2' after the duration", 10),
        ("INTERVAL 5 MINUTE", "INTERVAL needs a quoted amount", 10),
        ("INTERVAL '5 minutes' MINUTE", "gives the unit twice", 22),
        ("INTERVAL '' SECOND", "has no amount", 10),
        ("INTERVAL '1-2' YEAR TO MONTH", "is not one number", 16),
        ("1e3 ms", "1e3 is not a plain decimal amount", 1),
    ],
)
def test_malformed_durations_are_positioned(text: str, message: str, column: int) -> None:
    with pytest.raises(SqlError) as caught:
        parse_duration(text)
    assert message in caught.value.message
    assert caught.value.line == 1
    assert caught.value.column == column
    assert caught.value.hint


def test_format_duration_picks_the_largest_exact_unit() -> None:
    assert format_duration(SECOND) == "1 SECOND"
    assert format_duration(10_000) == "10 MILLISECONDS"
    assert format_duration(1_500_000) == "1500 MILLISECONDS"
    assert format_duration(300 * SECOND) == "5 MINUTES"
    assert format_duration(7) == "7 MICROSECONDS"
    assert format_duration(0) == "0 SECONDS"
    assert format_duration(-SECOND) == "-1 SECOND"


def test_tumbling_range_window() -> None:
    query = parse_statement("SELECT COUNT(*) FROM trades [RANGE 1 SECOND]")
    assert isinstance(query, exp.Select)
    clause = window_of(query)
    assert clause.args["kind"] == "RANGE"
    assert clause.args["size"] == SECOND
    assert clause.args["slide"] is None
    assert clause.args["watermark"] is None
    assert clause.this.name == "trades"


def test_sliding_range_window_with_watermark_and_alias() -> None:
    query = parse_statement(
        "SELECT t.symbol FROM trades [RANGE 1 SECOND SLIDE 10 MILLISECONDS "
        "WATERMARK 500 ms] AS t GROUP BY t.symbol"
    )
    clause = window_of(query)
    assert (clause.args["size"], clause.args["slide"], clause.args["watermark"]) == (
        SECOND,
        10_000,
        500_000,
    )
    assert clause.this.alias == "t"


def test_alias_without_as() -> None:
    clause = window_of(parse_statement("SELECT COUNT(*) FROM trades [RANGE 1 SECOND] t"))
    assert clause.this.alias == "t"


def test_rows_window() -> None:
    clause = window_of(parse_statement("SELECT COUNT(*) FROM s [ROWS 1024 SLIDE 2]"))
    assert (clause.args["kind"], clause.args["size"], clause.args["slide"]) == ("ROWS", 1024, 2)
    assert clause.args["watermark"] is None


def test_rows_window_with_watermark() -> None:
    clause = window_of(parse_statement("SELECT COUNT(*) FROM s [ROWS 10 WATERMARK 1 SECOND]"))
    assert (clause.args["size"], clause.args["slide"], clause.args["watermark"]) == (
        10,
        None,
        SECOND,
    )


def test_interval_durations_in_the_clause() -> None:
    clause = window_of(
        parse_statement(
            "SELECT COUNT(*) FROM s [RANGE INTERVAL '5' MINUTE SLIDE INTERVAL '30 seconds']"
        )
    )
    assert (clause.args["size"], clause.args["slide"]) == (300 * SECOND, 30 * SECOND)


def test_keywords_are_case_insensitive() -> None:
    clause = window_of(parse_statement("select count(*) from s [range 2 Seconds slide 1 second]"))
    assert (clause.args["size"], clause.args["slide"]) == (2 * SECOND, SECOND)


def test_negative_and_zero_sizes_parse_and_are_left_to_the_binder() -> None:
    clause = window_of(parse_statement("SELECT COUNT(*) FROM s [RANGE -1 SECOND]"))
    assert clause.args["size"] == -SECOND
    clause = window_of(parse_statement("SELECT COUNT(*) FROM s [ROWS 0]"))
    assert clause.args["size"] == 0


def test_clause_parts_remember_their_positions() -> None:
    clause = window_of(parse_statement("SELECT COUNT(*)\nFROM s [RANGE 1 SECOND SLIDE 2 SECONDS]"))
    assert clause.meta["parts"]["size"] == (2, 15, "1 SECOND")
    assert clause.meta["parts"]["slide"] == (2, 30, "2 SECONDS")
    assert position_of(clause) == (2, 6)  # the clause starts with its stream name


def test_table_without_window_clause_is_a_plain_table() -> None:
    query = parse_statement("SELECT COUNT(*) FROM s")
    assert isinstance(query.args["from_"].this, exp.Table)


def test_array_subscripts_elsewhere_still_parse() -> None:
    query = parse_statement("SELECT MAX(a[1]) FROM s [RANGE 1 SECOND]")
    assert query.find(exp.Bracket) is not None


def test_quoted_identifiers() -> None:
    query = parse_statement('SELECT `my col`, "other col" FROM `my stream` [RANGE 1 SECOND]')
    names = [column.name for column in query.find_all(exp.Column)]
    assert names == ["my col", "other col"]
    assert window_of(query).this.name == "my stream"


def test_generated_sql_round_trips_the_window_clause() -> None:
    text = "SELECT COUNT(*) FROM s [RANGE 1 SECOND SLIDE 10 MILLISECONDS WATERMARK 2 SECONDS] AS t"
    query = parse_statement(text)
    assert query.sql(dialect=MangonelDialect) == text
    assert parse_statement(query.sql(dialect=MangonelDialect)) == query


def test_explain() -> None:
    statement = parse_statement("EXPLAIN SELECT COUNT(*) FROM s [RANGE 1 SECOND]")
    assert isinstance(statement, Explain)
    assert not statement.args.get("codegen")
    assert isinstance(statement.this, exp.Select)


def test_explain_codegen() -> None:
    statement = parse_statement("explain codegen SELECT COUNT(*) FROM s [ROWS 5]")
    assert isinstance(statement, Explain)
    assert statement.args["codegen"] is True
    assert window_of(statement.this).args["kind"] == "ROWS"


def test_trailing_semicolon_and_comments() -> None:
    query = parse_statement("-- hello\nSELECT COUNT(*) FROM s [RANGE 1 SECOND]; ")
    assert isinstance(query, exp.Select)


def test_ddl_is_dispatched_to_the_ddl_grammar() -> None:
    assert isinstance(parse_statement("SHOW STREAMS"), ddl.Show)
    assert isinstance(parse_statement("  drop stream x"), ddl.Drop)
    assert isinstance(parse_statement("CREATE TABLE t (a INT)"), ddl.CreateTable)


def test_parenthesised_query_is_the_query() -> None:
    query = parse_statement("(SELECT COUNT(*) FROM s [RANGE 1 SECOND])")
    assert isinstance(query, exp.Select)


def raises(text: str) -> SqlError:
    with pytest.raises(SqlError) as caught:
        parse_statement(text)
    return caught.value


def test_syntax_error_points_at_the_token() -> None:
    error = raises("SELECT COUNT(*\nFROM s [RANGE 1 SECOND]")
    assert error.message.startswith("syntax error")
    assert (error.line, error.column) == (2, 1)
    assert error.construct == "FROM"
    assert error.hint


def test_window_clause_on_a_subquery() -> None:
    error = raises("SELECT COUNT(*) FROM (SELECT a FROM s) [RANGE 1 SECOND]")
    assert error.message == "a window clause on a subquery"
    assert (error.line, error.column) == (1, 40)


def test_two_window_clauses() -> None:
    error = raises("SELECT COUNT(*) FROM s [RANGE 1 SECOND] [ROWS 5]")
    assert error.message == "two window clauses on one stream"
    assert error.column == 41


def test_alias_before_window_clause() -> None:
    error = raises("SELECT COUNT(*) FROM s AS t [RANGE 1 SECOND]")
    assert "before its alias" in error.message
    assert "FROM s [RANGE ..] AS t" in error.hint


@pytest.mark.parametrize(
    ("text", "message", "column"),
    [
        ("SELECT COUNT(*) FROM s [RANGE 1 FORTNIGHT]", "unknown time unit 'FORTNIGHT'", 33),
        ("SELECT COUNT(*) FROM s [RANGE SECOND]", "expected a number, found 'SECOND'", 31),
        ("SELECT COUNT(*) FROM s [RANGE 1.5 US]", "not a whole number of microseconds", 35),
        ("SELECT COUNT(*) FROM s [RANGE 1]", "has no time unit", 32),
        ("SELECT COUNT(*) FROM s [RANGE]", "expected a number", 30),
        ("SELECT COUNT(*) FROM s [SPAN 1 SECOND]", "starts with RANGE, ROWS or SESSION", 25),
        ("SELECT COUNT(*) FROM s [ROWS 1.5]", "not a whole number of rows", 30),
        ("SELECT COUNT(*) FROM s [ROWS 10 SECONDS]", "is a duration", 33),
        ("SELECT COUNT(*) FROM s [ROWS 10 SLIDE 2 SLIDE 3]", "SLIDE is given twice", 41),
        ("SELECT COUNT(*) FROM s [RANGE 1 SECOND HOP 2 SECONDS]", "expected SLIDE", 40),
        ("SELECT COUNT(*) FROM s [RANGE 1 SECOND", "expected SLIDE", 33),
    ],
)
def test_malformed_window_clauses(text: str, message: str, column: int) -> None:
    error = raises(text)
    assert message in error.message
    assert (error.line, error.column) == (1, column)
    assert error.construct and error.construct.startswith("[")
    assert error.hint


def test_union_is_rejected() -> None:
    error = raises("SELECT COUNT(*) FROM a [RANGE 1 SECOND] UNION SELECT COUNT(*) FROM b [ROWS 2]")
    assert "UNION" in error.message


def test_other_statements_are_rejected() -> None:
    error = raises("INSERT INTO t VALUES (1)")
    assert "INSERT" in error.message
    assert "CREATE STREAM" in error.hint


def test_one_statement_at_a_time() -> None:
    error = raises("SELECT COUNT(*) FROM a [RANGE 1 SECOND]; SELECT 1")
    assert error.message == "one statement at a time"
    assert (error.line, error.column) == (1, 42)


def test_empty_statement() -> None:
    assert raises("  -- nothing\n").message == "empty statement"


def test_unclosed_string() -> None:
    error = raises("SELECT COUNT(*) FROM s WHERE a = 'x")
    assert "cannot be read" in error.message


def test_explain_needs_a_query() -> None:
    assert raises("EXPLAIN").message == "EXPLAIN needs a query"
    assert "not CREATE" in raises("EXPLAIN CREATE TABLE t (a INT)").message


def test_line_and_column() -> None:
    assert line_and_column("ab\ncd", 0) == (1, 1)
    assert line_and_column("ab\ncd", 3) == (2, 1)
    assert line_and_column("ab\ncd", 4) == (2, 2)


def test_positions_of_identifiers_are_their_first_character() -> None:
    query = parse_statement("SELECT\n  price\nFROM s [RANGE 1 SECOND]")
    column = query.find(exp.Column)
    assert position_of(column) == (2, 3)


def test_errors_inside_explain_point_into_the_whole_statement() -> None:
    error = raises("EXPLAIN CODEGEN\nSELECT COUNT(*) FROM s [RANGE 2 WEEKS]")
    assert (error.line, error.column) == (2, 33)
    statement = parse_statement("EXPLAIN  SELECT price FROM s [RANGE 1 SECOND]")
    assert position_of(statement.this.find(exp.Column)) == (1, 17)


@pytest.mark.parametrize("clause", ["WHERE price > 0", "GROUP BY symbol", "HAVING COUNT(*) > 1"])
def test_window_clause_after_where_group_by_or_having_says_where_it_goes(clause: str) -> None:
    keyword = clause.split(" ")[0] if not clause.startswith("GROUP") else "GROUP BY"
    error = raises(f"SELECT COUNT(*) FROM trades {clause} [RANGE 1 SECOND SLIDE 10 ms]")
    assert error.message == f"the window clause goes right after the stream name, before {keyword}"
    assert error.construct == "[RANGE 1 SECOND SLIDE 10 ms]"
    assert error.column == len(f"SELECT COUNT(*) FROM trades {clause} ") + 1
    assert error.hint.startswith("write FROM trades [RANGE ..] [WHERE ..]")


def test_deep_expressions_within_the_limits_parse() -> None:
    inner = MAX_PARENTHESIS_NESTING - 1  # SUM's own parenthesis is one level
    nested = "(" * inner + "price" + ")" * inner
    parse_statement(f"SELECT SUM({nested}) FROM s [RANGE 1 SECOND]")
    chain = " + ".join(["price"] * 350)
    query = parse_statement(f"SELECT SUM({chain}) FROM s [RANGE 1 SECOND]")
    assert len(list(query.find_all(exp.Add))) == 349


def test_too_many_nested_parentheses_are_a_sql_error() -> None:
    depth = MAX_PARENTHESIS_NESTING  # inside SUM(: one level too many
    error = raises(f"SELECT SUM({'(' * depth}price{')' * depth}) FROM s [RANGE 1 SECOND]")
    assert error.message == f"parentheses are nested more than {MAX_PARENTHESIS_NESTING} deep"
    assert (error.line, error.column) == (1, len("SELECT SUM(") + depth)


def test_too_deep_an_expression_is_a_sql_error() -> None:
    chain = " + ".join(["price"] * (MAX_EXPRESSION_DEPTH + 1))
    error = raises(f"SELECT SUM({chain}) FROM s [RANGE 1 SECOND]")
    assert error.message == f"the expression is nested more than {MAX_EXPRESSION_DEPTH} levels deep"
    assert error.line == 1


@pytest.mark.parametrize(
    "clause",
    [
        f"[RANGE {MAX_DURATION_DAYS + 1} DAYS]",
        "[RANGE 1000000000000000000 DAYS]",
        f"[RANGE 1 SECOND WATERMARK {MAX_DURATION_DAYS + 1} DAYS]",
        "[RANGE INTERVAL '9999999999999999999' SECONDS]",
    ],
)
def test_durations_beyond_the_limit_are_sql_errors(clause: str) -> None:
    error = raises(f"SELECT COUNT(*) FROM s {clause}")
    assert f"durations are at most {MAX_DURATION_DAYS} days" in error.message


def test_longest_duration_parses() -> None:
    assert parse_duration(f"{MAX_DURATION_DAYS} days") == MAX_DURATION_US
    assert parse_duration(f"-{MAX_DURATION_DAYS} days") == -MAX_DURATION_US
