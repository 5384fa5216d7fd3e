"""The command line: `mangonel explain`, `mangonel run`, `mangonel bench`."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa

from mangonel.errors import MangonelError


def _load_script(path: str, backend: str):  # noqa: ANN202
    """Run a script's DDL in a new session; return (session, query text, its line)."""
    from mangonel.compiler.script import split_statements
    from mangonel.errors import SqlError
    from mangonel.session import Session

    session = Session(backend=backend)
    statements = split_statements(Path(path).read_text())
    if not statements:
        raise MangonelError(f"{path}: no statement found")
    *ddl, query = statements
    for statement in ddl:
        try:
            session.execute(statement.text)
        except SqlError as error:
            raise _in_file(error, path, statement.line) from None
    return session, query


def _in_file(error, path: str, first_line: int):  # noqa: ANN001, ANN202
    """The same error with its line counted from the top of the file."""
    from mangonel.errors import SqlError

    line = None if error.line is None else error.line + first_line - 1
    shifted = SqlError(
        error.message, line=line, column=error.column, construct=error.construct, hint=error.hint
    )
    return MangonelError(f"{path}: {shifted}")


def _plan(session, query, path: str):  # noqa: ANN001, ANN202
    from mangonel.errors import SqlError

    try:
        return session.sql(query.text)
    except SqlError as error:
        raise _in_file(error, path, query.line) from None


def command_explain(arguments: argparse.Namespace) -> int:
    session, query = _load_script(arguments.query, arguments.backend)
    result = _plan(session, query, arguments.query)
    if isinstance(result, str):  # the file holds an EXPLAIN statement itself
        print(result)
        return 0
    if arguments.json:
        import json

        print(json.dumps(result.explain(format="json"), indent=2))
    else:
        print(result.explain(codegen=arguments.codegen))
    return 0


class Progress:
    """A one-line progress bar on stderr, redrawn at most ten times a second."""

    def __init__(self, total: int | None, enabled: bool) -> None:
        self.total = total
        self.enabled = enabled
        self.done = 0
        self.started = time.perf_counter()
        self._last_draw = 0.0

    def advance(self, count: int, windows: int) -> None:
        self.done += count
        now = time.perf_counter()
        if self.enabled and (now - self._last_draw > 0.1 or self.done == self.total):
            self._last_draw = now
            self._draw(now, windows)

    def _draw(self, now: float, windows: int) -> None:
        elapsed = max(now - self.started, 1e-9)
        rate = self.done / elapsed
        if self.total:
            share = min(self.done / self.total, 1.0)
            filled = int(share * 30)
            bar = f"[{'#' * filled}{'.' * (30 - filled)}] {share:6.1%} "
        else:
            bar = ""
        sys.stderr.write(
            f"\r{bar}{self.done:,} tuples  {rate / 1e6:.2f} M tuples/s  "
            f"{windows:,} rows out  {elapsed:.1f}s"
        )
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def _source_batches(
    arguments: argparse.Namespace, stream
) -> tuple[Iterable[pa.RecordBatch], int | None]:  # noqa: ANN001,E501
    from mangonel.catalog.sources import GeneratorConfig, generate, read_files
    from mangonel.compiler.parse import parse_duration

    source = arguments.source or stream.option("source", "generator")
    if source == "generator":
        config = GeneratorConfig(
            tuples=arguments.tuples,
            rate=arguments.rate,
            keys=arguments.keys,
            skew=arguments.skew,
            delay_us=parse_duration(arguments.delay) if arguments.delay else 0,
            batch_size=arguments.batch_size,
            seed=arguments.seed,
        )
        return generate(stream.schema, stream.event_time, config), config.tuples
    kind, _, path = source.partition(":")
    if kind not in ("parquet", "csv") or not path:
        raise MangonelError(f"unknown source {source!r}; use generator, parquet:PATH or csv:PATH")
    return read_files(path, kind, stream.schema, arguments.batch_size), None


def format_table(table: pa.Table, limit: int) -> str:
    """A plain fixed-width rendering of the first `limit` rows."""
    shown = table.slice(0, limit).to_pylist()
    names = table.column_names
    cells = [[_cell(row[name]) for name in names] for row in shown]
    widths = [max([len(name)] + [len(row[i]) for row in cells]) for i, name in enumerate(names)]
    lines = [" | ".join(name.ljust(widths[i]) for i, name in enumerate(names))]
    lines.append("-+-".join("-" * width for width in widths))
    lines.extend(" | ".join(value.rjust(widths[i]) for i, value in enumerate(row)) for row in cells)
    if table.num_rows > limit:
        lines.append(f"... {table.num_rows - limit:,} more rows")
    lines.append(f"({table.num_rows:,} rows)")
    return "\n".join(lines)


def _cell(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.6g}"
    if hasattr(value, "isoformat"):
        return value.isoformat(sep=" ")  # type: ignore[call-arg]
    return str(value)


def write_table(table: pa.Table, path: str) -> None:
    suffix = Path(path).suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, path)
    elif suffix == ".csv":
        import pyarrow.csv as pcsv

        pcsv.write_csv(table, path)
    elif suffix in (".json", ".jsonl"):
        import json

        with open(path, "w") as out:
            for row in table.to_pylist():
                out.write(json.dumps(row, default=str) + "\n")
    else:
        raise MangonelError(f"unknown output format {suffix!r}; use .parquet, .csv or .json")


def command_run(arguments: argparse.Namespace) -> int:
    session, query_text = _load_script(arguments.query, arguments.backend)
    query = _plan(session, query_text, arguments.query)
    if isinstance(query, str):
        print(query)
        return 0
    from mangonel.compiler.physical import unpack

    stream = unpack(query.plan).scan.stream
    batches, total = _source_batches(arguments, stream)
    progress = Progress(total, enabled=not arguments.quiet and sys.stderr.isatty())
    rows_out = 0

    def counted(source: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in source:
            yield batch
            progress.advance(batch.num_rows, rows_out)

    results = []
    for result in query.stream(counted(batches)):
        results.append(result)
        rows_out += result.num_rows
    progress.close()
    table = pa.Table.from_batches(results, schema=query.schema)
    metrics = query.metrics
    if not arguments.quiet:
        print(
            f"tuples in: {metrics.tuples_in:,}  late dropped: {metrics.late_tuples_dropped:,}  "
            f"windows fired: {metrics.windows_fired:,}  rows out: {table.num_rows:,}",
            file=sys.stderr,
        )
    if arguments.output:
        write_table(table, arguments.output)
        print(f"wrote {table.num_rows:,} rows to {arguments.output}", file=sys.stderr)
    else:
        print(format_table(table, arguments.limit))
    return 0


def command_bench(arguments: argparse.Namespace) -> int:
    from mangonel.bench import main as bench_main

    return bench_main(arguments)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mangonel", description="Streaming SQL window queries compiled for GPUs."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    explain = commands.add_parser("explain", help="print the physical plan of a query file")
    explain.add_argument("query", help="a .sql file: CREATE STREAM statements, then the query")
    explain.add_argument("--codegen", action="store_true", help="add the generated CUDA source")
    explain.add_argument("--json", action="store_true", help="the plan as JSON")
    explain.add_argument("--backend", default="auto", choices=("auto", "cpu", "gpu"))
    explain.set_defaults(handler=command_explain)

    run = commands.add_parser("run", help="run a query file on a source")
    run.add_argument("query", help="a .sql file: CREATE STREAM statements, then the query")
    run.add_argument(
        "--source", help="generator (default), parquet:PATH or csv:PATH (file or folder)"
    )
    run.add_argument("--backend", default="auto", choices=("auto", "cpu", "gpu"))
    run.add_argument("--tuples", type=int, default=1_000_000, help="generator: tuples in all")
    run.add_argument(
        "--rate", type=int, default=100_000, help="generator: tuples per event-time second"
    )
    run.add_argument("--keys", type=int, default=100, help="generator: distinct keys")
    run.add_argument("--skew", type=float, default=0.0, help="generator: Zipf exponent of keys")
    run.add_argument("--delay", help="generator: disorder bound, e.g. '200 milliseconds'")
    run.add_argument("--seed", type=int, default=0, help="generator: random seed")
    run.add_argument("--batch-size", type=int, default=100_000, help="rows per input batch")
    run.add_argument("--output", help="write results to FILE.parquet / .csv / .json")
    run.add_argument("--limit", type=int, default=20, help="rows to print (table output)")
    run.add_argument("--quiet", action="store_true", help="no progress bar or metrics")
    run.set_defaults(handler=command_run)

    bench = commands.add_parser("bench", help="run the benchmark shapes and print one table")
    from mangonel.bench import add_arguments

    add_arguments(bench)
    bench.set_defaults(handler=command_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    # Behave like other command-line tools when piped into `head`: stop quietly.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    arguments = build_parser().parse_args(argv)
    try:
        return arguments.handler(arguments)
    except MangonelError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
