"""DDL statements: CREATE STREAM / CREATE TABLE / DROP / SHOW, and CREATE STREAM -> Stream."""

from __future__ import annotations

import pytest

from mangonel.catalog.catalog import Column
from mangonel.catalog.types import SqlType
from mangonel.compiler.bind import stream_from_ddl
from mangonel.compiler.ddl import CreateStream, CreateTable, Drop, Show, parse_ddl
from mangonel.compiler.parse import parse_statement
from mangonel.errors import CatalogError, SqlError

TRADES = """CREATE STREAM trades (ts TIMESTAMP NOT NULL, symbol STRING, price DOUBLE,
                                volume BIGINT)
            WITH (event_time = 'ts', watermark = '500 milliseconds', source = 'generator',
                  RATE = 1000)"""


def test_create_stream() -> None:
    statement = parse_ddl(TRADES)
    assert statement == CreateStream(
        name="trades",
        columns=(
            Column("ts", SqlType.TIMESTAMP, nullable=False),
            Column("symbol", SqlType.STRING),
            Column("price", SqlType.DOUBLE),
            Column("volume", SqlType.BIGINT),
        ),
        options=(
            ("event_time", "ts"),
            ("watermark", "500 milliseconds"),
            ("source", "generator"),
            ("rate", "1000"),
        ),
    )
    assert statement.position == (1, 15)
    assert statement.option_position("watermark") == (3, 50)


def test_type_spellings_and_case() -> None:
    statement = parse_ddl(
        "create stream s (a integer, b long, c real, d varchar, e bool, f timestamp_ltz, "
        "g text, h Float) with (event_time = 'f')"
    )
    assert [c.type for c in statement.columns] == [
        SqlType.INT,
        SqlType.BIGINT,
        SqlType.FLOAT,
        SqlType.STRING,
        SqlType.BOOLEAN,
        SqlType.TIMESTAMP,
        SqlType.STRING,
        SqlType.FLOAT,
    ]


def test_quoted_names_and_keywords_as_names() -> None:
    statement = parse_ddl(
        'CREATE STREAM `my stream` ("event ""time""" TIMESTAMP, `a``b` INT, stream INT, '
        "table INT, not INT) WITH (`Event_Time` = 'event \"time\"')"
    )
    assert statement.name == "my stream"
    assert [c.name for c in statement.columns] == ['event "time"', "a`b", "stream", "table", "not"]
    assert statement.options == (("event_time", 'event "time"'),)


def test_string_values_unescape_quotes_and_keep_text() -> None:
    statement = parse_ddl("CREATE TABLE t (a INT) WITH (path = 'it''s here', n = -2.5)")
    assert statement.options == (("path", "it's here"), ("n", "-2.5"))


def test_create_table_without_options() -> None:
    assert parse_ddl("CREATE TABLE symbols (symbol STRING NOT NULL, sector STRING);") == (
        CreateTable(
            "symbols",
            (Column("symbol", SqlType.STRING, False), Column("sector", SqlType.STRING)),
        )
    )


def test_or_replace() -> None:
    assert parse_ddl("CREATE OR REPLACE STREAM s (ts TIMESTAMP) WITH (event_time='ts')").or_replace
    assert parse_ddl("CREATE OR REPLACE TABLE t (a INT)").or_replace
    assert not parse_ddl("CREATE TABLE t (a INT)").or_replace


def test_drop_and_show() -> None:
    assert parse_ddl("DROP STREAM trades") == Drop("STREAM", "trades", False)
    assert parse_ddl("drop table if exists `x y`") == Drop("TABLE", "x y", True)
    assert parse_ddl("SHOW STREAMS") == Show("STREAMS")
    assert parse_ddl("show tables;") == Show("TABLES")


def test_comments_are_ignored() -> None:
    statement = parse_ddl("-- a stream\nCREATE TABLE t /* note */ (a INT)")
    assert statement.name == "t"


def error_of(text: str) -> SqlError:
    with pytest.raises(SqlError) as caught:
        parse_ddl(text)
    return caught.value


def test_unknown_type_lists_the_supported_types() -> None:
    error = error_of("CREATE STREAM s (ts TIMESTAMP,\n  amount DECIMAL)")
    assert error.message == "unknown type 'DECIMAL' for column 'amount'"
    assert (error.line, error.column) == (2, 10)
    assert error.construct == "DECIMAL"
    for name in ("BIGINT", "BOOLEAN", "DOUBLE", "FLOAT", "INT", "STRING", "TIMESTAMP"):
        assert name in error.hint


def test_type_parameters_are_rejected() -> None:
    error = error_of("CREATE TABLE t (a VARCHAR(10))")
    assert "VARCHAR(10)" in error.message
    assert error.hint == "write STRING"


def test_duplicate_columns() -> None:
    with pytest.raises(CatalogError) as caught:
        parse_ddl("CREATE TABLE t (a INT, A BIGINT)")
    assert caught.value.message == "column 'A' is declared twice"
    assert caught.value.column == 24


def test_duplicate_options() -> None:
    error = error_of("CREATE TABLE t (a INT) WITH (k = '1', K = '2')")
    assert error.message == "option 'k' is given twice"


@pytest.mark.parametrize(
    ("text", "message", "column"),
    [
        ("CREATE STREAM s a INT", "unexpected 'a' in CREATE STREAM", 17),
        ("CREATE STREAM s ()", "unexpected ')' in CREATE STREAM", 18),
        ("CREATE STREAM s (a INT", "CREATE STREAM ends too early", 23),
        ("CREATE TABLE t (a INT) WITH (k = v)", "unexpected 'v' in CREATE TABLE", 34),
        ("DROP VIEW v", "unexpected 'VIEW' in DROP", 6),
        ("SHOW COLUMNS", "unexpected 'COLUMNS' in SHOW", 6),
        ("CREATE STREAM s (a INT) WITH (k = '1') extra", "unexpected 'extra' in CREATE STREAM", 40),
    ],
)
def test_syntax_errors_are_positioned(text: str, message: str, column: int) -> None:
    error = error_of(text)
    assert error.message == message
    assert (error.line, error.column) == (1, column)
    assert error.hint


# -- CREATE STREAM -> Stream -------------------------------------------------------------


def test_stream_from_ddl() -> None:
    stream = stream_from_ddl(parse_statement(TRADES))
    assert stream.name == "trades"
    assert stream.event_time == "ts"
    assert stream.watermark_delay_us == 500_000
    assert stream.options == (("source", "generator"), ("rate", "1000"))
    assert stream.schema.names() == ("ts", "symbol", "price", "volume")


def test_event_time_resolves_case_insensitively_to_the_schema_spelling() -> None:
    stream = stream_from_ddl(
        parse_ddl("CREATE STREAM s (EventTime TIMESTAMP) WITH (event_time = 'eventtime')")
    )
    assert stream.event_time == "EventTime"
    assert stream.watermark_delay_us == 0


def test_watermark_interval_form() -> None:
    stream = stream_from_ddl(
        parse_ddl(
            "CREATE STREAM s (ts TIMESTAMP) WITH (event_time = 'ts', watermark = "
            "'INTERVAL ''2'' SECOND')"
        )
    )
    assert stream.watermark_delay_us == 2_000_000


def ddl_error(text: str) -> SqlError:
    with pytest.raises(SqlError) as caught:
        stream_from_ddl(parse_ddl(text))
    return caught.value


def test_event_time_is_required() -> None:
    error = ddl_error("CREATE STREAM s (ts TIMESTAMP, x INT)")
    assert error.message == "stream 's' needs an event_time option"
    assert (error.line, error.column) == (1, 15)
    assert "TIMESTAMP columns: ts" in error.hint


def test_event_time_must_exist() -> None:
    error = ddl_error("CREATE STREAM s (ts TIMESTAMP) WITH (event_time = 'time')")
    assert isinstance(error, CatalogError)
    assert "has no column 'time'" in error.message
    assert error.column == 51


def test_event_time_must_be_a_timestamp() -> None:
    error = ddl_error("CREATE STREAM s (ts BIGINT) WITH (event_time = 'ts')")
    assert "column 'ts' is BIGINT, not TIMESTAMP" in error.message
    assert error.hint == "declare a TIMESTAMP column for the event time"


def test_malformed_watermark_points_into_the_option() -> None:
    error = ddl_error(
        "CREATE STREAM s (ts TIMESTAMP) WITH (event_time = 'ts', watermark = '5 fortnights')"
    )
    assert "unknown time unit 'fortnights'" in error.message
    # the value's quote is at column 69; "fortnights" starts 2 characters into the value
    assert error.column == 72
    assert error.construct == "watermark = '5 fortnights'"


def test_negative_watermark() -> None:
    error = ddl_error(
        "CREATE STREAM s (ts TIMESTAMP) WITH (event_time = 'ts', watermark = '-1 second')"
    )
    assert error.message == "watermark must not be negative, got '-1 second'"
