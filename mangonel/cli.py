"""The command line: `mangonel explain`, `mangonel run`, `mangonel bench`."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import pyarrow as pa
import pyarrow.compute as pc

from mangonel.catalog.types import result_type_from_arrow
from mangonel.errors import MangonelError

if TYPE_CHECKING:
    from mangonel.catalog.catalog import Stream


def _read_query_file(path: str) -> str:
    """The text of a query file, or a one-line error saying why it cannot be read."""
    file = Path(path)
    if not file.exists():
        raise MangonelError(f"{path}: no such file")
    if file.is_dir():
        raise MangonelError(f"{path}: is a folder; give a .sql query file")
    try:
        return file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise MangonelError(f"{path}: cannot be read ({error})") from None


def _load_script(path: str, backend: str):  # noqa: ANN202
    """Run a script's DDL in a new session; return (session, its one query statement).

    A query file holds CREATE (or DROP) statements and then exactly one query (or EXPLAIN):
    a second query is refused rather than silently ignored."""
    from mangonel.compiler import ddl
    from mangonel.compiler.parse import parse_statement
    from mangonel.compiler.script import split_statements
    from mangonel.errors import SqlError
    from mangonel.session import Session

    session = Session(backend=backend)
    statements = split_statements(_read_query_file(path))
    if not statements:
        raise MangonelError(f"{path}: no statement found")
    queries = []
    for statement in statements:
        try:
            parsed = parse_statement(statement.text)
        except SqlError as error:
            raise _in_file(error, path, statement.line) from None
        if not isinstance(parsed, (ddl.CreateStream, ddl.CreateTable, ddl.Drop, ddl.Show)):
            queries.append(statement)
    if len(queries) > 1:
        lines = ", ".join(str(q.line) for q in queries)
        raise MangonelError(
            f"{path}: {len(queries)} queries (lines {lines}); a query file holds CREATE "
            "statements and then one query"
        )
    if not queries:
        raise MangonelError(f"{path}: no query; the file holds only CREATE/DROP/SHOW statements")
    *definitions, last = statements
    if last is not queries[0]:
        raise MangonelError(
            f"{path}: line {last.line}: a statement after the query (line {queries[0].line}); "
            "the query comes last"
        )
    for statement in definitions:
        try:
            session.execute(statement.text)
        except SqlError as error:
            raise _in_file(error, path, statement.line) from None
    return session, last


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


# `mangonel run`'s flags that act on a run (an EXPLAIN runs nothing)
RUN_FLAGS = ("output", "source", "tuples", "rate", "keys", "skew", "delay", "seed", "batch_size")
# `mangonel run`'s generator settings when neither the flags nor the stream's options set them
RUN_GENERATOR_DEFAULTS = {
    "tuples": "1000000",
    "rate": "100000",
    "keys": "100",
    "rows_per_batch": "100000",
}


def _source_batches(
    arguments: argparse.Namespace, stream: Stream, warnings: list[str]
) -> tuple[Iterable[pa.RecordBatch], int | None]:
    """The batches a run reads, checked before any is read: --source if given, else the
    stream's `WITH (source = ..., path = ..., generator options)` (the Spark sources' options,
    mangonel.catalog.sources.options), else the generator. Flags override the stream's options.
    What the run should tell the user afterwards (CSV values read as NULL) goes to `warnings`."""
    from mangonel.catalog.sources import file_source, generate, generator_source, read_files
    from mangonel.catalog.sources.options import source_of
    from mangonel.compiler.parse import parse_duration

    options = dict(stream.options)
    path = None
    if arguments.source:
        source, _, path = arguments.source.partition(":")
        if source not in ("generator", "parquet", "csv"):
            raise MangonelError(
                f"unknown source {arguments.source!r}; use generator, parquet:PATH or csv:PATH"
            )
        if (source != "generator") != bool(path):
            raise MangonelError(
                f"--source {source} needs a path: {source}:PATH"
                if source != "generator"
                else "--source generator takes no path"
            )
    else:
        source = source_of(options, stream.name) or "generator"
    flags = {
        "tuples": arguments.tuples,
        "rate": arguments.rate,
        "keys": arguments.keys,
        "skew": arguments.skew,
        "delay": arguments.delay,
        "seed": arguments.seed,
    }
    if source == "generator":
        flags["rows_per_batch"] = arguments.batch_size
        if flags["delay"] is not None:  # parsed by the flag: microseconds, given a unit again
            flags["delay"] = f"{flags['delay']} microseconds"
        options.update({key: str(value) for key, value in flags.items() if value is not None})
        generator = generator_source(
            options,
            stream.schema,
            stream.event_time,
            stream.name,
            RUN_GENERATOR_DEFAULTS,
            durations=parse_duration,
        )
        batches = generate(
            stream.schema, stream.event_time, generator.config, generator.key_columns
        )
        return batches, generator.config.tuples
    if source == "kafka":
        raise MangonelError(
            f"stream {stream.name!r} reads Kafka, which runs inside Spark (docs/spark.md); "
            "`mangonel run` reads the generator, parquet:PATH or csv:PATH"
        )
    ignored = [f"--{key}" for key, value in flags.items() if value is not None]
    if ignored:
        raise MangonelError(
            f"{', '.join(ignored)} set(s) the generator, but the run reads {source} files; "
            "drop the flag(s) or pass --source generator"
        )
    if path:
        options["path"] = path
    files = file_source(options, stream.name, source)
    batch_size = arguments.batch_size or int(RUN_GENERATOR_DEFAULTS["rows_per_batch"])

    def malformed(file: Path, count: int) -> None:
        warnings.append(
            f"{file}: {count:,} value(s) did not parse as their column's type and were read as "
            "NULL (Spark's PERMISSIVE CSV mode)"
        )

    if source == "parquet":
        _check_parquet_types(files.path, stream)
    batches = read_files(
        files.path, source, stream.schema, batch_size, header=files.header, on_malformed=malformed
    )
    return batches, None


def _check_parquet_types(path: str, stream: Stream) -> None:
    """Each Parquet file's column types against the stream's, before the first batch: a file
    that cannot be read as declared is named (the query's conformance step found it only
    when its batch came, without the file)."""
    import pyarrow.parquet as pq

    from mangonel.catalog.sources.files import data_files
    from mangonel.runtime.operators.conform import is_readable_as

    for file in data_files(path):
        try:
            fields = {field.name.lower(): field for field in pq.read_schema(file)}
        except (pa.ArrowException, OSError):
            continue  # read_files names an unreadable file
        for column in stream.schema.columns:
            found = fields.get(column.name.lower())
            if found is not None and not is_readable_as(column, found.type):
                raise MangonelError(
                    f"{file}: column {found.name!r} is {found.type}; stream {stream.name!r} "
                    f"declares {column.name} {column.type} ({column.type.info.arrow}), read "
                    "as it is or widened without loss only"
                )


def format_table(table: pa.Table, limit: int) -> str:
    """A plain fixed-width rendering of the first `limit` rows. Timestamps are written by
    Arrow, not through Python's datetime, which ends at year 9999."""
    shown = _printable(table.slice(0, limit)).to_pylist()
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


def _printable(table: pa.Table) -> pa.Table:
    """`table` with each TIMESTAMP column as text, as `datetime.isoformat(sep=" ")` writes
    it (`2026-01-01 00:00:00.500000+00:00`, no fraction when it is zero)."""
    for index, field in enumerate(table.schema):
        if pa.types.is_timestamp(field.type):
            utc = table.column(index).cast(pa.timestamp("us", tz="UTC"))
            text = pc.strftime(utc, "%Y-%m-%d %H:%M:%S", "C")  # %S: with its microseconds
            text = pc.replace_substring_regex(text, r"\.000000$", "")
            joined = pc.binary_join_element_wise(text, pa.scalar("+00:00"), "")
            table = table.set_column(index, field.name, joined)
    return table


def _cell(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.6g}"
    if hasattr(value, "isoformat"):
        return value.isoformat(sep=" ")  # type: ignore[call-arg]
    return str(value)


OUTPUT_FORMATS = {".parquet": "parquet", ".csv": "csv", ".json": "json", ".jsonl": "json"}


def output_format(path: str) -> str:
    """The format an --output path asks for; checked before a run starts."""
    output_kind = OUTPUT_FORMATS.get(Path(path).suffix.lower())
    if output_kind is None:
        raise MangonelError(
            f"unknown output format {Path(path).suffix or '(no suffix)'!r} of {path}; "
            "use .parquet, .csv or .json"
        )
    folder = Path(path).parent
    if not folder.is_dir():
        raise MangonelError(f"{path}: the folder {folder} does not exist")
    return output_kind


def check_output_columns(schema: pa.Schema, path: str) -> None:
    """The output path's format (`output_format`), and that it can hold every result column:
    CSV has no ARRAY or STRUCT cells (checked before the run, not after it)."""
    if output_format(path) != "csv":
        return
    for field in schema:
        if pa.types.is_nested(field.type):
            raise MangonelError(
                f"{path}: CSV cannot hold the column {field.name!r} "
                f"({result_type_from_arrow(field.type)}); write .parquet or .json instead"
            )


def write_table(table: pa.Table, path: str) -> None:
    output_kind = output_format(path)
    if output_kind == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, path)
    elif output_kind == "csv":
        import pyarrow.csv as pcsv

        pcsv.write_csv(table, path)
    else:
        import json

        with open(path, "w") as out:
            for row in table.to_pylist():
                out.write(json.dumps(row, default=str) + "\n")


def command_run(arguments: argparse.Namespace) -> int:
    session, query_text = _load_script(arguments.query, arguments.backend)
    query = _plan(session, query_text, arguments.query)
    flags = [
        f"--{name.replace('_', '-')}" for name in RUN_FLAGS if getattr(arguments, name) is not None
    ]
    if isinstance(query, str):
        if flags:  # the file's statement is EXPLAIN: nothing runs
            raise MangonelError(
                f"{arguments.query}: the query is an EXPLAIN, which prints the plan and runs "
                f"nothing, so {', '.join(flags)} would do nothing; drop the EXPLAIN to run it "
                "(`mangonel explain` prints a plan)"
            )
        print(query)
        return 0
    stream, is_join = _one_stream(query.plan, arguments.query)
    if arguments.output:
        check_output_columns(query.schema, arguments.output)
    if query.backend == "gpu":
        from mangonel.runtime.gpu.probe import require_gpu

        require_gpu()
    warnings: list[str] = []
    batches, total = _source_batches(arguments, stream, warnings)
    progress = Progress(total, enabled=not arguments.quiet and sys.stderr.isatty())
    rows_out = 0

    def counted(source: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in source:
            yield batch
            progress.advance(batch.num_rows, rows_out)

    results = []
    inputs: Iterable = counted(batches)
    if is_join:  # a join reads its inputs by name (the stream's batches feed both sides)
        inputs = ((stream.name, batch) for batch in inputs)
    for result in query.stream(inputs):
        results.append(result)
        rows_out += result.num_rows
    progress.close()
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
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


def _one_stream(plan, path: str) -> tuple[Stream, bool]:  # noqa: ANN001
    """The one stream a run reads, and whether the query is a join: a window query over it,
    the stream joined with itself, or joined with a table declared with its files. A join
    of two streams, or with a table whose rows only the Python API gives, is refused."""
    from mangonel.compiler.physical import StreamScanExec, TableScanExec, WindowJoinExec, walk

    nodes = list(walk(plan))
    scans = [node for node in nodes if isinstance(node, StreamScanExec)]
    if len({scan.stream.name.lower() for scan in scans}) > 1:
        raise MangonelError(
            f"{path}: `mangonel run` reads one stream and this join reads two; a join of two "
            "streams runs from Python (query.run([(name, batch), ...]), docs/semantics.md, "
            '"Joins") or inside Spark (docs/spark.md, "Window joins")'
        )
    for node in nodes:
        if isinstance(node, TableScanExec) and not node.table.options:
            raise MangonelError(
                f"{path}: table {node.table.name!r} has no files for `mangonel run` to read: "
                "declare it WITH (source = 'parquet' | 'csv', path = '<file or folder>'), or "
                "give its rows from Python"
            )
    return scans[0].stream, any(isinstance(node, WindowJoinExec) for node in nodes)


def command_bench(arguments: argparse.Namespace) -> int:
    from mangonel.bench import main as bench_main

    return bench_main(arguments)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line on stderr (what and where to look), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _whole_number(text: str, smallest: int, wanted: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = smallest - 1
    if value < smallest:
        raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: a whole number > 0."""
    return _whole_number(text, 1, "a positive whole number")


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number >= 0."""
    return _whole_number(text, 0, "a whole number >= 0")


def non_negative_float(text: str) -> float:
    """An argparse type: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}")
    return value


def duration_us(text: str) -> int:
    """An argparse type: a duration such as '200 milliseconds', as microseconds."""
    from mangonel.compiler.parse import parse_duration
    from mangonel.errors import SqlError

    try:
        value = parse_duration(text)
    except SqlError as error:
        raise argparse.ArgumentTypeError(error.message) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    from mangonel import __version__

    parser = OneLineParser(
        prog="mangonel", description="Streaming SQL window queries compiled for GPUs."
    )
    parser.add_argument("--version", action="version", version=f"mangonel {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    explain = commands.add_parser("explain", help="print the physical plan of a query file")
    explain.add_argument("query", help="a .sql file: CREATE STREAM statements, then the query")
    explain.add_argument("--codegen", action="store_true", help="add the generated CUDA source")
    explain.add_argument("--json", action="store_true", help="the plan as JSON")
    explain.add_argument("--backend", default="auto", choices=("auto", "cpu", "gpu"))
    explain.set_defaults(handler=command_explain)

    run = commands.add_parser(
        "run",
        help="run a query file on a source",
        description="Run a query file. The source is --source, else the stream's WITH (source "
        "= ..., path = ..., generator options), else the generator; flags override the "
        "stream's options.",
    )
    run.add_argument("query", help="a .sql file: CREATE STREAM statements, then the query")
    run.add_argument(
        "--source", help="generator (default), parquet:PATH or csv:PATH (file or folder)"
    )
    run.add_argument("--backend", default="auto", choices=("auto", "cpu", "gpu"))
    # None = not given: the stream's option or RUN_GENERATOR_DEFAULTS decides
    run.add_argument("--tuples", type=positive_int, help="generator: tuples in all (1,000,000)")
    run.add_argument(
        "--rate", type=positive_int, help="generator: tuples per event-time second (100,000)"
    )
    run.add_argument("--keys", type=positive_int, help="generator: distinct keys (100)")
    run.add_argument("--skew", type=non_negative_float, help="generator: Zipf exponent of keys (0)")
    run.add_argument(
        "--delay", type=duration_us, help="generator: disorder bound, e.g. '200 milliseconds'"
    )
    run.add_argument("--seed", type=non_negative_int, help="generator: random seed (0)")
    run.add_argument("--batch-size", type=positive_int, help="rows per input batch (100,000)")
    run.add_argument("--output", help="write results to FILE.parquet / .csv / .json")
    run.add_argument(
        "--limit", type=non_negative_int, default=20, help="rows to print (table output)"
    )
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
    except OSError as error:  # a file the run writes or reads went away or is not allowed
        print(f"error: {error.filename or ''}: {error.strerror or error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
