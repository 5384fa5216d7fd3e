"""DDL statements: CREATE STREAM / CREATE TABLE / DROP / SHOW, and CREATE STREAM -> Stream."""

from __future__ import annotations

import pyarrow as pa
import pytest

from mangonel.catalog.catalog import Column
from mangonel.catalog.options import SOURCE_OPTIONS, SOURCES
from mangonel.catalog.types import SqlType
from mangonel.compiler.ddl import CreateStream, CreateTable, Drop, Show, parse_ddl
from mangonel.compiler.limits import MAX_DURATION_US
from mangonel.compiler.parse import parse_statement
from mangonel.compiler.streams import stream_from_ddl
from mangonel.errors import CatalogError, SqlError
from mangonel.session import Session

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
        "table INT, `not` INT) WITH (`Event_Time` = 'event \"time\"')"
    )
    assert statement.name == "my stream"
    assert [c.name for c in statement.columns] == ['event "time"', "a`b", "stream", "table", "not"]
    assert statement.options == (("event_time", 'event "time"'),)
    # unquoted, a word queries read as a keyword could never be read back: refused
    with pytest.raises(SqlError, match="'not' is an SQL keyword"):
        parse_ddl("CREATE STREAM s (ts TIMESTAMP, not INT) WITH (event_time = 'ts')")


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
    assert caught.value.message == (
        "columns 'a' and 'A' have the same name (column names are case-insensitive)"
    )
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


def test_a_misspelt_option_is_refused_with_the_known_ones() -> None:
    error = ddl_error("CREATE STREAM s (ts TIMESTAMP) WITH (event_time = 'ts', watermak = '10 s')")
    assert error.message == "unknown option 'watermak' for stream 's'"
    assert (error.line, error.column) == (1, 57)
    assert error.construct == "watermak = '10 s'"
    assert error.hint.startswith("a stream without a source takes event_time, watermark, source")


@pytest.mark.parametrize("source", SOURCES)
def test_every_source_takes_its_own_options(source: str) -> None:
    options = ", ".join(f"{key} = '1'" for key in SOURCE_OPTIONS[source])
    stream = stream_from_ddl(
        parse_ddl(
            f"CREATE STREAM s (ts TIMESTAMP) WITH (event_time = 'ts', source = '{source}', "
            f"{options})"
        )
    )
    assert [key for key, _ in stream.options] == ["source", *SOURCE_OPTIONS[source]]


def test_the_documented_generator_and_kafka_options_are_known() -> None:
    # the option table is derived from GeneratorConfig: docs/spark.md names these
    assert {"tuples", "rate", "keys", "skew", "delay", "seed", "null_fraction"} <= set(
        SOURCE_OPTIONS["generator"]
    )
    assert {"rows_per_batch", "key_columns"} <= set(SOURCE_OPTIONS["generator"])
    assert "delay_us" not in SOURCE_OPTIONS["generator"]


def test_an_option_of_another_source_is_refused() -> None:
    error = ddl_error(
        "CREATE STREAM s (ts TIMESTAMP) WITH (event_time = 'ts', source = 'parquet', topic = 't')"
    )
    assert error.message == "unknown option 'topic' for stream 's'"
    assert "with source = 'parquet' takes event_time, watermark, source, path" in error.hint


def test_an_unknown_source_is_refused() -> None:
    error = ddl_error("CREATE STREAM s (ts TIMESTAMP) WITH (event_time = 'ts', source = 'kafak')")
    assert error.message == "stream 's': unknown source 'kafak'"
    assert error.hint == "source is one of 'generator', 'parquet', 'csv', 'kafka'"


def session_with_trades() -> Session:
    session = Session(backend="cpu")
    session.execute(
        "CREATE STREAM trades (ts TIMESTAMP NOT NULL, symbol STRING, price DOUBLE NOT NULL) "
        "WITH (event_time = 'ts')"
    )
    return session


def test_create_stream_refuses_names_that_differ_in_case_only() -> None:
    schema = pa.schema([("ts", pa.timestamp("us")), ("k", pa.int64()), ("K", pa.int64())])
    with pytest.raises(CatalogError) as caught:
        Session(backend="cpu").create_stream("s", schema, event_time="ts")
    assert caught.value.message == (
        "stream 's': columns 'k' and 'K' have the same name (column names are case-insensitive)"
    )


def test_create_stream_checks_options_like_the_ddl() -> None:
    schema = pa.schema([("ts", pa.timestamp("us"))])
    session = Session(backend="cpu")
    with pytest.raises(CatalogError, match="unknown option 'watermak' for stream 's'"):
        session.create_stream("s", schema, event_time="ts", watermak="10 s")
    stream = session.create_stream("s", schema, event_time="ts", source="generator", rate=10)
    assert stream.options == (("rate", "10"), ("source", "generator"))


@pytest.mark.parametrize("watermark", [-1, MAX_DURATION_US + 1])
def test_create_stream_refuses_a_watermark_out_of_range(watermark: int) -> None:
    schema = pa.schema([("ts", pa.timestamp("us"))])
    with pytest.raises(CatalogError, match="watermark .* is out of range"):
        Session(backend="cpu").create_stream("s", schema, event_time="ts", watermark=watermark)


def test_show_streams_shows_not_null() -> None:
    shown = session_with_trades().execute("SHOW STREAMS")
    assert shown.column("columns").to_pylist() == [
        "ts TIMESTAMP NOT NULL, symbol STRING, price DOUBLE NOT NULL"
    ]


@pytest.mark.parametrize("if_exists", ["", "IF EXISTS "])
def test_drop_table_on_a_stream_says_it_is_a_stream(if_exists: str) -> None:
    session = session_with_trades()
    with pytest.raises(CatalogError) as caught:
        session.execute(f"DROP TABLE {if_exists}TRADES")
    assert caught.value.message == "'trades' is a stream, not a table"
    assert caught.value.hint == "DROP STREAM trades"
    session.execute("CREATE TABLE venues (id INT)")
    with pytest.raises(CatalogError, match="'venues' is a table, not a stream"):
        session.execute("DROP STREAM venues")
    with pytest.raises(CatalogError) as caught:
        session.execute("DROP TABLE nothing")
    assert caught.value.hint == "known tables: venues"
    session.execute("DROP STREAM trades")
    assert session.execute("SHOW STREAMS").num_rows == 0


def test_create_stream_names_arguments_of_the_wrong_kind() -> None:
    """`watermark`/`event_time` among the options in another case were stored and never
    read (the stream kept a 0 watermark); arguments of the wrong Python type raised from
    deep inside; a uint32 field became INT and its own batches were then refused (found by
    probing bad inputs)."""
    import datetime as dt

    session = Session(backend="cpu")
    schema = pa.schema([("ts", pa.timestamp("us")), ("k", pa.uint32())])
    for options in ({"Watermark": "10 seconds"}, {"EVENT_TIME": "k"}):
        with pytest.raises(CatalogError, match="given as an option"):
            session.create_stream("s", schema, event_time="ts", **options)
    for watermark in (1.5, None, True):
        with pytest.raises(TypeError, match="watermark is a duration"):
            session.create_stream("s", schema, event_time="ts", watermark=watermark)
    with pytest.raises(TypeError, match="non-empty str"):
        session.create_stream("", schema, event_time="ts")
    with pytest.raises(TypeError, match="pyarrow.Schema, got list"):
        session.create_stream("s", [("ts", pa.timestamp("us"))], event_time="ts")
    for text in (None, 3):
        with pytest.raises(TypeError, match="SQL text"):
            session.sql(text)
        with pytest.raises(TypeError, match="SQL text"):
            session.execute(text)
    stream = session.create_stream("s", schema, event_time="ts", watermark=dt.timedelta(seconds=2))
    assert stream.watermark_delay_us == 2_000_000
    assert stream.schema.find("k").type is SqlType.BIGINT  # uint32 does not fit INT
    big = pa.table(
        {"ts": pa.array([0], pa.timestamp("us")), "k": pa.array([4_000_000_000], pa.uint32())}
    )
    got = session.sql("SELECT k, COUNT(*) AS n FROM s [RANGE 1 SECOND] GROUP BY k").run([big])
    assert got.to_pylist() == [{"k": 4_000_000_000, "n": 1}]
