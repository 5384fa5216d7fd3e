"""The command line as a user runs it: explain, run on the generator and on files, outputs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mangonel.catalog.catalog import Column, Schema
from mangonel.catalog.sources import GeneratorConfig, generate
from mangonel.catalog.sources.files import from_text, read_files
from mangonel.catalog.types import SqlType
from mangonel.cli import format_table, main
from mangonel.errors import DataError
from mangonel.session import Session

EXAMPLE = Path(__file__).parent.parent / "examples" / "trades.sql"
SMALL = ["--tuples", "50000", "--keys", "7", "--rate", "20000", "--batch-size", "5000"]


def test_explain_prints_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(EXAMPLE), "--backend", "cpu"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("Project: outputs=[symbol:STRING=symbol")
    assert "  WindowAggregate: window=time range=1s slide=10ms" in out
    assert out.rstrip().splitlines()[-1].lstrip().startswith("StreamScan: stream=trades")


def test_explain_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(EXAMPLE), "--backend", "cpu", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["operator"] == "Project"
    assert plan["children"][0]["parameters"]["pane_length"] == 10_000  # microseconds


def test_run_prints_a_table_and_metrics(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(EXAMPLE), "--backend", "cpu", "--limit", "3", *SMALL]) == 0
    captured = capsys.readouterr()
    header = captured.out.splitlines()[0]
    assert [c.strip() for c in header.split("|")] == [
        "symbol",
        "window_start",
        "window_end",
        "n",
        "avg_price",
        "vwap",
    ]
    assert "more rows" in captured.out
    assert "tuples in: 50,000" in captured.err


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".json"])
def test_run_writes_the_same_rows_as_the_api(tmp_path: Path, suffix: str) -> None:
    output = tmp_path / f"out{suffix}"
    assert (
        main(["run", str(EXAMPLE), "--backend", "cpu", "--quiet", "--output", str(output), *SMALL])
        == 0
    )
    session = Session(backend="cpu")
    statements = EXAMPLE.read_text().split(";")
    session.execute(statements[0])
    query = session.sql(statements[1])
    stream = session.catalog.stream("trades")
    config = GeneratorConfig(tuples=50_000, keys=7, rate=20_000, batch_size=5_000)
    expected = query.run(generate(stream.schema, "ts", config))
    if suffix == ".parquet":
        got = pq.read_table(output)
        assert got.equals(expected)
    elif suffix == ".csv":
        assert len(output.read_text().splitlines()) == expected.num_rows + 1
    else:
        rows = [json.loads(line) for line in output.read_text().splitlines()]
        assert len(rows) == expected.num_rows
        assert rows[0]["n"] == expected.column("n")[0].as_py()


def test_run_on_parquet_files_equals_the_generator(tmp_path: Path) -> None:
    session = Session(backend="cpu")
    session.execute(EXAMPLE.read_text().split(";")[0])
    stream = session.catalog.stream("trades")
    config = GeneratorConfig(tuples=20_000, keys=3, rate=10_000, batch_size=4_000, seed=5)
    data = pa.Table.from_batches(list(generate(stream.schema, "ts", config)))
    folder = tmp_path / "in"
    folder.mkdir()
    pq.write_table(data, folder / "part-0.parquet")
    from_files = tmp_path / "files.parquet"
    from_generator = tmp_path / "generator.parquet"
    common = [str(EXAMPLE), "--backend", "cpu", "--quiet", "--batch-size", "4000"]
    assert main(["run", *common, "--source", f"parquet:{folder}", "--output", str(from_files)]) == 0
    assert (
        main(
            [
                "run",
                *common,
                "--tuples",
                "20000",
                "--keys",
                "3",
                "--rate",
                "10000",
                "--seed",
                "5",
                "--output",
                str(from_generator),
            ]
        )
        == 0
    )
    assert pq.read_table(from_files).equals(pq.read_table(from_generator))


def test_errors_name_the_file_line_and_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "bad.sql"
    script.write_text(
        "CREATE STREAM s (ts TIMESTAMP, k INT) WITH (event_time = 'ts');\n\n"
        "SELECT k, SUM(x)\nFROM s [RANGE 1 SECOND] GROUP BY k\n"
    )
    assert main(["explain", str(script)]) == 2
    err = capsys.readouterr().err
    assert f"{script}: line 3, column 15: unknown column 'x'" in err
    assert "hint: columns of s: ts, k" in err


def test_unknown_source_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(EXAMPLE), "--backend", "cpu", "--source", "ftp:x"]) == 2
    assert "use generator, parquet:PATH or csv:PATH" in capsys.readouterr().err


STREAM = (
    "CREATE STREAM trades (ts TIMESTAMP, symbol STRING, price DOUBLE, volume BIGINT) "
    "WITH (event_time = 'ts', watermark = '500 milliseconds'{options});\n"
)
QUERY = (
    "SELECT symbol, window_start, COUNT(*) AS n, SUM(price) AS total "
    "FROM trades [RANGE 1 SECOND] GROUP BY symbol\n"
)


def catalog_schema() -> Schema:
    """The columns of STREAM's trades."""
    return Schema(
        (
            Column("ts", SqlType.TIMESTAMP),
            Column("symbol", SqlType.STRING),
            Column("price", SqlType.DOUBLE),
            Column("volume", SqlType.BIGINT),
        )
    )


def _script(tmp_path: Path, options: str = "", query: str = QUERY) -> Path:
    script = tmp_path / "q.sql"
    script.write_text(STREAM.format(options=options) + query)
    return script


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    return err.strip()


def test_naive_csv_timestamps_are_utc_and_empty_fields_null(tmp_path: Path) -> None:
    data = tmp_path / "in.csv"
    data.write_text(
        "ts,symbol,price,volume\n"
        "2026-01-01 00:00:00.1,a,1.5,2\n"  # naive: UTC, as Spark with session time zone UTC
        "2026-01-01T01:00:00.5+01:00,a,,3\n"  # its own offset: the same second in UTC
        "2026-01-01T00:00:01Z,b,4,1\n"
    )
    out = tmp_path / "out.parquet"
    script = _script(tmp_path)
    assert main(["run", str(script), "--backend", "cpu", "--quiet", "--source", f"csv:{data}",
                 "--output", str(out)]) == 0  # fmt: skip
    rows = sorted(pq.read_table(out).to_pylist(), key=lambda r: (r["window_start"], r["symbol"]))
    assert [(str(r["window_start"]), r["symbol"], r["n"], r["total"]) for r in rows] == [
        ("2026-01-01 00:00:00+00:00", "a", 2, 1.5),
        ("2026-01-01 00:00:01+00:00", "b", 1, 4.0),
    ]


def test_csv_text_like_na_is_text_nan_is_a_double_and_headers_match_any_case(
    tmp_path: Path,
) -> None:
    """Only an empty CSV field is NULL (Spark's nullValue): `NA`, `null`, `N/A` stay three
    symbols (Arrow's default list read them all as one NULL group), `NaN` is the DOUBLE NaN
    (Spark's nanValue); header names match the stream's case-insensitively, after Excel's
    byte-order mark; a header naming a column twice is an error."""
    data = tmp_path / "in.csv"
    data.write_text(
        "\ufeffTS,Symbol,PRICE,volume\n"
        "2026-01-01 00:00:00.1,NA,NaN,1\n"
        "2026-01-01 00:00:00.2,null,1.5,1\n"
        "2026-01-01 00:00:00.3,N/A,2,1\n"
        "2026-01-01 00:00:00.4,,3,1\n",
        encoding="utf-8",
    )
    out = tmp_path / "out.parquet"
    script = _script(tmp_path)
    assert main(["run", str(script), "--backend", "cpu", "--quiet", "--source", f"csv:{data}",
                 "--output", str(out)]) == 0  # fmt: skip
    rows = {r["symbol"]: r["total"] for r in pq.read_table(out).to_pylist()}
    assert set(rows) == {"NA", "null", "N/A", None}
    assert math.isnan(rows["NA"]) and rows["null"] == 1.5 and rows[None] == 3.0
    twice = tmp_path / "twice.csv"
    twice.write_text("ts,symbol,price,volume,Price\n2026-01-01 00:00:00,a,1,1,2\n")
    with pytest.raises(DataError, match="2 columns named 'price'"):
        list(read_files(str(twice), "csv", catalog_schema()))


def test_csv_numbers_booleans_and_timestamps_read_as_spark_reads_them() -> None:
    """Arrow's cast read `0x10` as 16 and `1` as true, silently, and refused `+5` and
    ` 1.5 `; Spark's CSV reader (Java's parseLong/parseDouble, Scala's toBoolean) does the
    opposite. What Spark refuses is NULL and counted."""
    integers, bad = from_text(pa.array(["0x10", "+5", "-5", " 5", "7", None]), pa.int64())
    assert integers.to_pylist() == [None, 5, -5, None, 7, None] and bad == 2
    booleans, bad = from_text(pa.array(["1", "true", "FALSE", "yes", None]), pa.bool_())
    assert booleans.to_pylist() == [None, True, False, None, None] and bad == 2
    doubles, bad = from_text(pa.array([" 1.5 ", "-Inf", "x"]), pa.float64())
    assert doubles.to_pylist() == [1.5, float("-inf"), None] and bad == 1
    # nanoseconds: the digits past the sixth dropped, as Spark does (they made the value NULL)
    times, bad = from_text(
        pa.array(["2026-01-01 00:00:00.123456789", "2026-01-01T01:00:00.1234567+01:00"]),
        pa.timestamp("us", tz="UTC"),
    )
    assert [t.microsecond for t in times.to_pylist()] == [123456, 123456] and bad == 0
    assert times.to_pylist()[1].hour == 0


def test_a_parquet_file_of_the_wrong_type_is_named_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The conformance step found it when its batch came, mid-run, without naming the file
    and with advice for the Python API."""
    folder = tmp_path / "in"
    folder.mkdir()
    good = {"ts": pa.array([0], pa.timestamp("us")), "symbol": ["a"], "price": [1.0]}
    pq.write_table(pa.table({**good, "volume": pa.array([1], pa.int32())}), folder / "a.parquet")
    pq.write_table(pa.table({**good, "volume": ["many"]}), folder / "b.parquet")
    script = str(_script(tmp_path))
    assert main(["run", script, "--backend", "cpu", "--source", f"parquet:{folder}"]) == 2
    error = _one_line_error(capsys)
    assert f"{folder / 'b.parquet'}: column 'volume' is string" in error
    assert "declares volume BIGINT" in error


def test_parquet_columns_match_the_stream_in_any_case(tmp_path: Path) -> None:
    table = pa.table(
        {
            "TS": pa.array([0, 1], pa.timestamp("us")),
            "Symbol": ["a", "a"],
            "price": [1.0, 2.0],
            "VOLUME": [1, 1],
        }
    )
    pq.write_table(table, tmp_path / "in.parquet")
    batches = list(read_files(str(tmp_path / "in.parquet"), "parquet", catalog_schema()))
    assert batches[0].schema.names == ["ts", "symbol", "price", "volume"]
    assert batches[0].column("price").to_pylist() == [1.0, 2.0]


def test_malformed_csv_values_are_null_as_in_spark_and_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "in.csv"
    data.write_text(
        "ts,symbol,price,volume\n"
        "2026-01-01 00:00:00.1,a,1.5,2\n"
        "2026-01-01 00:00:00.2,a,not a number,3\n"  # price NULL: SUM skips it, COUNT(*) not
        "noon,a,7,1\n"  # event time NULL: the row is dropped, as Spark's window() drops it
        "2026-01-01 00:00:00.3,a,2.5,x\n"
    )
    out = tmp_path / "out.parquet"
    script = str(_script(tmp_path))
    source = f"csv:{data}"
    assert main(["run", script, "--backend", "cpu", "--source", source, "--output", str(out)]) == 0
    assert pq.read_table(out).to_pylist()[0] | {"window_start": None} == {
        "symbol": "a",
        "window_start": None,
        "n": 3,
        "total": 4.0,
    }
    assert (
        f"warning: {data}: 3 value(s) did not parse as their column's type and were read as NULL"
        in capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("name", "content", "kind", "problem"),
    [
        ("ragged.csv", "ts,symbol,price,volume\n2026-01-01 00:00:00,a\n", "csv", "Expected 4"),
        ("lacking.csv", "ts,symbol\n2026-01-01 00:00:00,a\n", "csv", "lacks column(s) price"),
        ("corrupt.parquet", "not parquet at all", "parquet", "not a readable Parquet file"),
    ],
)
def test_unreadable_files_are_one_line_errors_naming_the_file(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    content: str,
    kind: str,
    problem: str,
) -> None:
    (tmp_path / name).write_text(content)
    source = f"{kind}:{tmp_path / name}"
    assert main(["run", str(_script(tmp_path)), "--backend", "cpu", "--source", source]) == 2
    err = _one_line_error(capsys)
    assert err.startswith(f"error: {tmp_path / name}: ")
    assert problem in err


def test_missing_source_path_and_empty_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = str(_script(tmp_path))
    missing = tmp_path / "nowhere.parquet"
    assert main(["run", script, "--backend", "cpu", "--source", f"parquet:{missing}"]) == 2
    assert _one_line_error(capsys) == f"error: {missing}: no such file or folder"
    folder = tmp_path / "empty"
    folder.mkdir()
    assert main(["run", script, "--backend", "cpu", "--source", f"csv:{folder}"]) == 2
    assert "the folder holds no data files" in _one_line_error(capsys)
    # an empty (0-byte) file holds no rows, as in Spark's file sources
    (folder / "a.csv").write_text("")
    (folder / "b.csv").write_text("ts,symbol,price,volume\n2026-01-01 00:00:00,a,1,1\n")
    assert main(["run", script, "--backend", "cpu", "--quiet", "--source", f"csv:{folder}"]) == 0
    assert "(1 rows)" in capsys.readouterr().out


def test_a_query_files_source_options_are_honoured(tmp_path: Path) -> None:
    """WITH (source = 'parquet', path = ...) and generator options in the query file drive the
    run when no --source is given; flags override the file's generator options."""
    session = Session(backend="cpu")
    session.execute(EXAMPLE.read_text().split(";")[0])
    config = GeneratorConfig(tuples=6000, keys=3, rate=5000, batch_size=1500, seed=4)
    stream = session.catalog.stream("trades")
    pq.write_table(
        pa.Table.from_batches(list(generate(stream.schema, "ts", config))), tmp_path / "in.parquet"
    )
    outputs = {}
    for name, options, flags in [
        ("flags", "", ["--tuples", "6000", "--keys", "3", "--rate", "5000", "--seed", "4"]),
        (
            "generator",
            ", source = 'generator', tuples = '6000', keys = 3, rate = '5000', seed = '4'",
            [],
        ),
        (
            "overridden",
            ", source = 'generator', tuples = '99', keys = '50', rate = '5000', seed = '4'",
            ["--tuples", "6000", "--keys", "3"],
        ),  # fmt: skip
        ("parquet", f", source = 'parquet', path = '{tmp_path / 'in.parquet'}'", []),
    ]:
        script = tmp_path / f"{name}.sql"
        script.write_text(STREAM.format(options=options) + QUERY)
        outputs[name] = tmp_path / f"{name}.parquet"
        arguments = ["--batch-size", "1500", "--output", str(outputs[name])]
        assert main(["run", str(script), "--backend", "cpu", "--quiet", *arguments, *flags]) == 0
    expected = pq.read_table(outputs["flags"])
    assert expected.num_rows > 0
    for name in ("generator", "overridden", "parquet"):
        assert pq.read_table(outputs[name]).equals(expected), name


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        (
            ", source = 'generator', keys = 'many'",
            "stream 'trades': option keys = 'many' must be a positive whole",
        ),
        (
            ", source = 'generator', delay = 'soon'",
            "option delay = 'soon' must be a duration >= 0 such as",
        ),
        (", source = 'generator', skew = '-1'", "skew = '-1' is out of range (generator skew"),
        # a bare number was microseconds here only, where every other duration needs a unit
        (", source = 'generator', delay = '5'", "option delay = '5' must be a duration >= 0"),
        (", source = 'generator', key_columns = ''", "key_columns = '' names no column"),
        (  # positions * 1e6 // rate overflowed int64 in a traceback
            ", source = 'generator', rate = '99999999999999999999'",
            "generator rate must be at most 1,000,000,000,000",
        ),
        (  # every key spelled up front: memory and time grew with it, whatever the tuples
            ", source = 'generator', keys = '3000000000'",
            "generator keys must be at most 2,147,483,647",
        ),
        (
            ", source = 'generator', key_columns = 'ts'",
            "key_columns names 'ts', which is not a non-event-time column",
        ),
        (", source = 'csv'", "stream 'trades' with source = 'csv' needs the option 'path'"),
        (", source = 'ftp'", "stream 'trades': unknown source 'ftp'"),
        (", source = 'kafka'", "reads Kafka, which runs inside Spark"),
    ],
)
def test_bad_source_options_in_a_query_file_are_clear_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: str, problem: str
) -> None:
    assert main(["run", str(_script(tmp_path, options)), "--backend", "cpu"]) == 2
    assert problem in capsys.readouterr().err


def test_run_refuses_what_it_cannot_run_before_reading_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A join of two streams or with a table without files (its error spoke of the Python
    call), run flags on an EXPLAIN (ignored), a file source without its path (called an
    unknown source): one line each, exit 2."""
    join = tmp_path / "join.sql"
    join.write_text(
        STREAM.format(options="")
        + STREAM.format(options="").replace("trades", "quotes")
        + "SELECT t.symbol, window_start, COUNT(*) AS n FROM trades [RANGE 1 SECOND] AS t "
        "JOIN quotes [RANGE 1 SECOND] AS q ON t.symbol = q.symbol GROUP BY t.symbol\n"
    )
    assert main(["run", str(join), "--backend", "cpu"]) == 2
    assert "`mangonel run` reads one stream and this join reads two" in _one_line_error(capsys)
    table = tmp_path / "table.sql"
    table.write_text(
        STREAM.format(options="")
        + "CREATE TABLE sectors (symbol STRING, sector STRING);\n"
        + "SELECT s.sector, window_start, COUNT(*) AS n FROM trades [RANGE 1 SECOND] AS t "
        "JOIN sectors AS s ON t.symbol = s.symbol GROUP BY s.sector\n"
    )
    assert main(["run", str(table), "--backend", "cpu"]) == 2
    assert "table 'sectors' has no files for `mangonel run` to read" in _one_line_error(capsys)
    explained = _script(tmp_path, query="EXPLAIN " + QUERY)
    assert main(["run", str(explained), "--backend", "cpu", "--tuples", "10"]) == 2
    assert "is an EXPLAIN, which prints the plan and runs nothing, so --tuples" in (
        _one_line_error(capsys)
    )
    assert main(["run", str(explained), "--backend", "cpu"]) == 0  # no flags: the plan
    assert capsys.readouterr().out.startswith("Project:")
    assert main(["run", str(_script(tmp_path)), "--source", "parquet"]) == 2
    assert "--source parquet needs a path: parquet:PATH" in _one_line_error(capsys)


def test_run_reads_a_stream_joined_with_itself_or_with_a_table_of_files(tmp_path: Path) -> None:
    """A join over one stream runs: the stream's batches feed both sides of a self-join, and
    a table declared with its files is read from them; the rows are the Python API's."""
    sectors = tmp_path / "sectors.csv"
    sectors.write_text("symbol,sector\nk1,tech\nk2,bank\nk3,tech\n")
    table = (
        "CREATE TABLE sectors (symbol STRING, sector STRING) "
        f"WITH (source = 'csv', path = '{sectors}');\n"
    )
    queries = {
        "self": "SELECT l.symbol, window_start, COUNT(*) AS pairs FROM trades [RANGE 1 SECOND] "
        "AS l JOIN trades [RANGE 1 SECOND] AS r ON l.symbol = r.symbol AND l.price < r.price "
        "GROUP BY l.symbol\n",
        "table": "SELECT s.sector, window_start, COUNT(*) AS n, SUM(t.volume) AS v FROM trades "
        "[RANGE 1 SECOND] AS t JOIN sectors AS s ON t.symbol = s.symbol GROUP BY s.sector\n",
    }
    for name, query in queries.items():
        script = tmp_path / f"{name}.sql"
        script.write_text(STREAM.format(options="") + (table if name == "table" else "") + query)
        out = tmp_path / f"{name}.parquet"
        assert main(["run", str(script), "--backend", "cpu", "--quiet", *SMALL,
                     "--output", str(out)]) == 0  # fmt: skip
        session = Session(backend="cpu")
        session.execute(STREAM.format(options="").rstrip().rstrip(";"))
        if name == "table":
            session.execute(table.rstrip().rstrip(";"))
        stream = session.catalog.stream("trades")
        config = GeneratorConfig(tuples=50000, rate=20000, keys=7, batch_size=5000)
        batches = list(generate(stream.schema, "ts", config))
        want = session.sql(query).run([("trades", b) for b in batches])
        got = pq.read_table(out)
        assert got.num_rows == want.num_rows > 0, name
        assert sorted(map(str, got.to_pylist())) == sorted(map(str, want.to_pylist())), name


def test_the_printed_table_shows_timestamps_past_year_9999() -> None:
    """Python's datetime ends at 9999 (the table raised OverflowError); Arrow writes them."""
    table = pa.table(
        {
            "t": pa.array([0, 500_000, 253_402_300_800_000_000, None], pa.timestamp("us", "UTC")),
            "n": [1, 2, 3, 4],
        }
    )
    lines = format_table(table, 10).splitlines()
    assert [line.split("|")[0].strip() for line in lines[2:6]] == [
        "1970-01-01 00:00:00+00:00",
        "1970-01-01 00:00:00.500000+00:00",
        "10000-01-01 00:00:00+00:00",
        "NULL",
    ]


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        (["--tuples", "0"], "argument --tuples: must be a positive whole number, got '0'"),
        (["--batch-size", "-5"], "argument --batch-size: must be a positive whole number"),
        (["--limit", "-1"], "argument --limit: must be a whole number >= 0, got '-1'"),
        (["--keys", "many"], "argument --keys: must be a positive whole number, got 'many'"),
        (["--delay", "soon"], "argument --delay: malformed duration 'soon'"),
    ],
)
def test_bad_arguments_are_one_line_errors(
    capsys: pytest.CaptureFixture[str], arguments: list[str], problem: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["run", str(EXAMPLE), "--backend", "cpu", *arguments])
    assert exit_info.value.code == 2
    assert problem in _one_line_error(capsys)


@pytest.mark.parametrize(
    ("output", "problem"),
    [
        ("out.txt", "unknown output format '.txt' of out.txt; use .parquet, .csv or .json"),
        ("/no/such/folder/out.csv", "the folder /no/such/folder does not exist"),
    ],
)
def test_the_output_is_checked_before_the_query_runs(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, output: str, problem: str
) -> None:
    from mangonel.session import Query

    def no_run(*_: object) -> None:
        raise AssertionError("the query ran before its output was checked")

    monkeypatch.setattr(Query, "stream", no_run)
    assert main(["run", str(EXAMPLE), "--backend", "cpu", "--output", output]) == 2
    assert problem in _one_line_error(capsys)


def test_query_file_problems_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["explain", str(tmp_path)]) == 2
    assert _one_line_error(capsys) == f"error: {tmp_path}: is a folder; give a .sql query file"
    assert main(["explain", str(tmp_path / "none.sql")]) == 2
    assert _one_line_error(capsys) == f"error: {tmp_path / 'none.sql'}: no such file"
    two = _script(tmp_path, query=QUERY + ";\n" + QUERY)
    assert main(["run", str(two), "--backend", "cpu"]) == 2
    assert "2 queries (lines 2, 4); a query file holds CREATE statements and then one query" in (
        _one_line_error(capsys)
    )
    only_ddl = _script(tmp_path, query="")
    assert main(["explain", str(only_ddl)]) == 2
    assert "no query" in _one_line_error(capsys)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    import mangonel

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"mangonel {mangonel.__version__}"


def test_gpu_without_a_gpu_is_a_one_line_error_before_any_work(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from mangonel.runtime.gpu.probe import gpu_status

    if gpu_status()[0]:
        pytest.skip("a GPU is usable here")
    assert main(["bench", "--backend", "gpu"]) == 2
    assert "backend='gpu' was requested but no GPU can be used" in _one_line_error(capsys)
    assert main(["run", str(EXAMPLE), "--backend", "gpu"]) == 2
    assert "backend='gpu' was requested but no GPU can be used" in _one_line_error(capsys)


def test_generator_flags_with_a_file_source_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "in.csv").write_text("ts,symbol,price,volume\n")
    source = f"csv:{tmp_path / 'in.csv'}"
    assert main(["run", str(EXAMPLE), "--source", source, "--tuples", "5", "--keys", "2"]) == 2
    assert _one_line_error(capsys) == (
        "error: --tuples, --keys set(s) the generator, but the run reads csv files; drop the "
        "flag(s) or pass --source generator"
    )


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "No such file or directory"),
        ("[{", "not JSON"),
        ('{"range_us": 1}', "expected a JSON list of shapes (range_us, slide_us, keys"),
        ('[{"range_us": 1}]', "shape 1 must have exactly the fields range_us, slide_us"),
    ],
)
def test_bench_config_problems_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, problem: str
) -> None:
    config = tmp_path / "shapes.json"
    if content is not None:
        config.write_text(content)
    assert main(["bench", str(config)]) == 2
    err = _one_line_error(capsys)
    assert err.startswith(f"error: {config}: ") and problem in err


def test_array_and_struct_results_go_to_parquet_and_json_not_csv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "arrays.sql"
    script.write_text(
        EXAMPLE.read_text().split(";")[0]
        + ";\nSELECT window, symbol, PERCENTILE(price, ARRAY(0.25, 0.75)) AS q FROM trades "
        "GROUP BY window(ts, '1 second'), symbol\n"
    )
    csv = tmp_path / "out.csv"
    assert main(["run", str(script), "--backend", "cpu", "--output", str(csv), *SMALL]) == 2
    assert "CSV cannot hold the column 'window' (STRUCT<start: TIMESTAMP, end: TIMESTAMP>)" in (
        capsys.readouterr().err
    )
    assert not csv.exists()  # refused before the run
    parquet = tmp_path / "out.parquet"
    assert (
        main(["run", str(script), "--backend", "cpu", "--quiet", "--output", str(parquet), *SMALL])
        == 0
    )
    table = pq.read_table(parquet)
    assert pa.types.is_struct(table.schema.field("window").type)
    assert table.schema.field("q").type.value_type == pa.float64()
    json_out = tmp_path / "out.json"
    assert (
        main(["run", str(script), "--backend", "cpu", "--quiet", "--output", str(json_out), *SMALL])
        == 0
    )
    first = json.loads(json_out.read_text().splitlines()[0])
    assert set(first["window"]) == {"start", "end"} and len(first["q"]) == 2
