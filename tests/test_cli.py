"""The command line as a user runs it: explain, run on the generator and on files, outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mangonel.catalog.sources import GeneratorConfig, generate
from mangonel.cli import main
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
