"""`mangonel bench`: the benchmark shapes of DESIGN section 6, printed as one table.

Each row states tuples/s, the ratio to the physical limit measured in the same run (memory
bandwidth on the CPU: bytes the query must read per tuple x tuples/s over a measured copy
bandwidth; host-to-device bandwidth on the GPU) and, where the peer runs here, the ratio to
Spark's native `GROUP BY window(...)` aggregation measured in the same run.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from mangonel.catalog.catalog import Column, Schema
from mangonel.catalog.sources.generator import GeneratorConfig, generate
from mangonel.catalog.types import SqlType
from mangonel.errors import MangonelError, SqlError

BENCH_SCHEMA = Schema(
    (
        Column("ts", SqlType.TIMESTAMP),
        Column("key", SqlType.BIGINT),
        Column("value", SqlType.DOUBLE),
    )
)
BYTES_PER_TUPLE = 8 + 8 + 8  # ts, key, value: what every shape must read once


@dataclass(frozen=True)
class Shape:
    range_us: int
    slide_us: int
    keys: int
    # SUM | AVG | MEDIAN (any one-argument aggregate of the value column), or a whole call
    # over `value` (APPROX_PERCENTILE(value, 0.5))
    aggregate: str
    delay_us: int  # disorder: uniform in [0, delay)
    # the session's approx_percentile option ("exact", "sketch"; None: the planner's rule)
    approx_percentile: str | None = None

    @property
    def name(self) -> str:
        from mangonel.compiler.explain import format_duration

        order = "in-order" if self.delay_us == 0 else f"delay<{format_duration(self.delay_us)}"
        path = "" if self.approx_percentile is None else f" [{self.approx_percentile}]"
        return (
            f"w={format_duration(self.range_us)} s={format_duration(self.slide_us)} "
            f"keys={self.keys} {self.aggregate}{path} {order}"
        )

    def query(self) -> str:
        call = self.aggregate if "(" in self.aggregate else f"{self.aggregate}(value)"
        return (
            f"SELECT key, window_start, window_end, {call} AS result "
            f"FROM events [RANGE {self.range_us} MICROSECONDS SLIDE {self.slide_us} "
            f"MICROSECONDS] GROUP BY key"
        )


def default_shapes() -> list[Shape]:
    """w = 1 s; s = 10 ms and 100 us; 1 and 1000 keys; SUM and AVG; in order and 1 s delay."""
    return [
        Shape(1_000_000, slide, keys, aggregate, delay)
        for slide in (10_000, 100)
        for keys in (1, 1000)
        for aggregate in ("SUM", "AVG")
        for delay in (0, 1_000_000)
    ]


def holistic_shapes() -> list[Shape]:
    """Issue 11's CPU shapes: w = 1 s, 1000 keys, MEDIAN beside SUM on the same input;
    s = 10 ms in order and with a 1 s delay, and tumbling (s = 1 s)."""
    return [
        Shape(1_000_000, slide, 1000, aggregate, delay)
        for slide, delay in ((10_000, 0), (10_000, 1_000_000), (1_000_000, 0))
        for aggregate in ("MEDIAN", "SUM")
    ]


def trimmed_mean(values: np.ndarray) -> float:
    """The benchmark's Python window function (issue 11): the mean of the window's sorted
    values without the lowest and highest tenth. Registered by name in `run_engine`. A loop,
    not `ndarray.mean`: numba's CUDA target has no array reductions, and the same function
    runs on both backends (on the GPU as a CUDA device function)."""
    n = values.shape[0]
    k = n // 10
    total = 0.0
    for i in range(k, n - k):
        total += values[i]
    return total / (n - 2 * k)


WINDOW_FUNCTIONS = {"trimmed_mean": trimmed_mean}


def window_function_shapes() -> list[Shape]:
    """A Python window function (trimmed mean) beside MEDIAN on the same input: w = 1 s,
    s = 10 ms, 1000 keys, in order; and tumbling (s = 1 s)."""
    return [
        Shape(1_000_000, slide, 1000, aggregate, 0)
        for slide in (10_000, 1_000_000)
        for aggregate in ("trimmed_mean", "MEDIAN")
    ]


def sketch_shapes() -> list[Shape]:
    """Issue 11's sketch target: w = 1 s, s = 10 ms, 1000 keys, in order,
    APPROX_COUNT_DISTINCT and APPROX_PERCENTILE (their defaults; APPROX_PERCENTILE on both
    of its paths, exact selection and the GK sketch) beside SUM."""
    calls = (
        ("APPROX_COUNT_DISTINCT", None),
        ("APPROX_PERCENTILE(value, 0.5)", "exact"),
        ("APPROX_PERCENTILE(value, 0.5)", "sketch"),
        ("SUM", None),
    )
    return [Shape(1_000_000, 10_000, 1000, call, 0, path) for call, path in calls]


@dataclass
class Result:
    shape: str
    backend: str
    tuples: int
    seconds: float
    tuples_per_second: float
    rows_out: int
    limit_ratio: float  # achieved bytes/s over the measured physical limit
    peer_tuples_per_second: float | None = None
    peer_ratio: float | None = None
    runs_per_second: tuple[float, ...] = ()  # every timed run's rate (the row: their median)


def measure_memory_bandwidth(megabytes: int = 512) -> float:
    """Bytes/s of a large in-memory copy, counting bytes read plus bytes written."""
    source = np.ones(megabytes * (1 << 20) // 8)
    target = np.empty_like(source)
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        np.copyto(target, source)
        best = min(best, time.perf_counter() - started)
    return 2 * source.nbytes / best


def make_batches(shape: Shape, tuples: int, rate: int, batch_size: int, seed: int) -> list:
    config = GeneratorConfig(
        tuples=tuples,
        rate=rate,
        keys=shape.keys,
        delay_us=shape.delay_us,
        batch_size=batch_size,
        seed=seed,
    )
    return list(generate(BENCH_SCHEMA, "ts", config, key_columns=("key",)))


def make_session(shape: Shape, backend: str):  # noqa: ANN201
    """A session holding the shape's `events` stream (and its Python window function)."""
    from mangonel.session import Session

    session = Session(backend=backend, approx_percentile=shape.approx_percentile)
    session.create_stream(
        "events", BENCH_SCHEMA.to_arrow(), event_time="ts", watermark=shape.delay_us
    )
    if shape.aggregate in WINDOW_FUNCTIONS:
        session.register_window_function(shape.aggregate, WINDOW_FUNCTIONS[shape.aggregate])
    return session


def run_engine(shape: Shape, batches: list, backend: str) -> tuple[float, int]:
    """Seconds to push every batch through the query (end of input included), rows out."""
    query = make_session(shape, backend).sql(shape.query())
    query.run(batches[:1])  # warm-up: JIT compilation stays out of the timing
    started = time.perf_counter()
    table = query.run(batches)
    return time.perf_counter() - started, table.num_rows


def run_public(arguments: argparse.Namespace, shapes: list[Shape]) -> list[Result]:
    """The shapes (checked by `check_arguments`) through the public API (`Session.sql().run()`
    over the generator's Arrow batches) on `arguments.backend`, each against the physical
    limit measured in this run: memory copy bandwidth on the CPU, pinned host-to-device
    bandwidth on the GPU."""
    backend = arguments.backend
    if backend == "gpu":
        from mangonel.runtime.local.gpu_bench import device_name, measure_h2d_bandwidth

        bandwidth = measure_h2d_bandwidth()
        print(
            f"device: {device_name()}; pinned H2D bandwidth {bandwidth / 1e9:.1f} GB/s "
            f"(bound {bandwidth / BYTES_PER_TUPLE / 1e9:.2f} G tuples/s at "
            f"{BYTES_PER_TUPLE} B/tuple); public API over ordinary Arrow batches of "
            f"{arguments.batch_size:,} rows"
        )
    else:
        bandwidth = measure_memory_bandwidth()
        print(f"measured memory copy bandwidth: {bandwidth / 1e9:.1f} GB/s (read + write)")
    spark_peer = None
    if arguments.peer:
        import importlib.util

        if importlib.util.find_spec("pyspark") is not None:
            spark_peer = _spark_peer(arguments)
        elif backend == "cpu":
            raise SystemExit("bench: the Spark peer needs pyspark; pass --no-peer")
        else:
            print("bench: no Spark peer (pyspark is not installed here)")
    results = []
    cache: dict[tuple[int, int], list] = {}
    for shape in shapes:
        key = (shape.keys, shape.delay_us)
        if key not in cache:
            cache = {
                key: make_batches(
                    shape, arguments.tuples, arguments.rate, arguments.batch_size, arguments.seed
                )
            }
        # the median of `repeat` runs: a process's first run of a shape runs at about half
        # the speed of the later ones (numba and CuPy compile what the warm-up batch missed)
        timed = [run_engine(shape, cache[key], backend) for _ in range(arguments.repeat)]
        seconds = sorted(s for s, _ in timed)[len(timed) // 2]
        rows = timed[0][1]
        rate = arguments.tuples / seconds
        result = Result(
            shape.name,
            backend,
            arguments.tuples,
            seconds,
            rate,
            rows,
            rate * BYTES_PER_TUPLE / bandwidth,
            runs_per_second=tuple(arguments.tuples / s for s, _ in timed),
        )
        if spark_peer is not None:
            peer = spark_peer(shape)
            if peer:
                result.peer_tuples_per_second = peer
                result.peer_ratio = rate / peer
        results.append(result)
        _print_row(result)
    return results


def run_standalone_like_spark(
    text: str, backend: str, batches: list[pa.RecordBatch]
) -> tuple[float, pa.Table]:
    """`mangonel bench --spark`'s standalone run: the query on mangonel's own engine (the
    public API's planner and runner, `Session.sql()`), each batch as one of Spark's
    micro-batches; windows fire as the watermark passes them, and the end of input fires
    nothing more, as in Spark's streaming run (its last, no-data micro-batch fires what the
    last watermark closed). (seconds, result table)."""
    from mangonel.runtime.local.query import LocalQuery
    from mangonel.session import Session

    session = Session(backend=backend)
    session.create_stream("events", batches[0].schema, event_time="ts", watermark=0)
    runner = LocalQuery(session.sql(text).plan)
    started = time.perf_counter()
    results = [result for batch in batches for result in runner.process(batch)]
    seconds = time.perf_counter() - started
    return seconds, pa.Table.from_batches(results, schema=runner.schema)


def _spark_peer(arguments: argparse.Namespace):  # noqa: ANN202
    """Spark's native window aggregation (batch mode, local Spark) on the same kind of data,
    fewer tuples (it is orders of magnitude slower), same generator. Returns tuples/s."""
    from mangonel.runtime.spark.bench import native_window_aggregate, start_local_spark

    spark = start_local_spark()

    def peer(shape: Shape) -> float | None:
        if shape.slide_us < 10_000:
            return None  # 10,000 windows per row: Spark's Expand would run for hours
        if shape.aggregate in WINDOW_FUNCTIONS:
            return None  # no Spark twin of a mangonel Python window function
        batches = make_batches(
            shape, arguments.peer_tuples, arguments.rate, arguments.batch_size, arguments.seed
        )
        table = pa.Table.from_batches(batches)
        seconds, _ = native_window_aggregate(
            spark, table, shape.range_us, shape.slide_us, "key", shape.aggregate
        )
        return table.num_rows / seconds

    return peer


def load_shapes(path: str, backend: str = "cpu") -> list[Shape]:
    """The shapes of a JSON config file (a list of objects with Shape's fields), each
    checked (`check_shape`), or a one-line error naming the file and what is wrong."""
    try:
        with open(path, encoding="utf-8") as config:
            entries = json.load(config)
    except OSError as error:
        raise MangonelError(f"{path}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise MangonelError(
            f"{path}: not UTF-8 text ({error.reason} at byte {error.start})"
        ) from None
    except json.JSONDecodeError as error:
        raise MangonelError(f"{path}: not JSON ({error})") from None
    fields = ", ".join(f.name for f in dataclasses.fields(Shape))
    if not isinstance(entries, list):
        raise MangonelError(f"{path}: expected a JSON list of shapes ({fields})")
    if not entries:
        raise MangonelError(f"{path}: CONFIG holds no shapes; list at least one ({fields})")
    shapes = []
    for number, entry in enumerate(entries, 1):
        try:
            shape = Shape(**entry)
        except TypeError:
            raise MangonelError(
                f"{path}: shape {number} must have exactly the fields {fields}"
            ) from None
        try:
            check_shape(shape, backend)
        except MangonelError as error:
            raise MangonelError(f"{path}: shape {number}: {error}") from None
        shapes.append(shape)
    return shapes


# Shape's whole-number fields and the least each may be: a window is never empty, the
# generator needs a key, a delay of 0 is in order
WHOLE_NUMBER_FIELDS = {"range_us": 1, "slide_us": 1, "keys": 1, "delay_us": 0}


def check_shape(shape: Shape, backend: str) -> None:
    """A one-line error naming the field of a shape that cannot run, and why: its values,
    then its query planned (no data needed: milliseconds), so that nothing is measured
    before a later shape fails."""
    for field, smallest in WHOLE_NUMBER_FIELDS.items():
        value = getattr(shape, field)
        # bool is an int to Python, but `true` in a config is no number
        if isinstance(value, bool) or not isinstance(value, int) or value < smallest:
            # the words of the CLI's own flags (cli.positive_int, cli.non_negative_int)
            wanted = "a positive whole number" if smallest else "a whole number >= 0"
            raise MangonelError(f"{field} must be {wanted}, got {value!r}")
    if not isinstance(shape.aggregate, str) or not shape.aggregate.strip():
        raise MangonelError(
            f"aggregate must name an aggregate (SUM) or be a call over value "
            f"(APPROX_PERCENTILE(value, 0.5)), got {shape.aggregate!r}"
        )
    if shape.approx_percentile is not None and not isinstance(shape.approx_percentile, str):
        raise MangonelError(
            f"approx_percentile must be a path name or null, got {shape.approx_percentile!r}"
        )
    for field, plan in _planning_steps(shape, backend):
        try:
            plan()
        except MangonelError as error:
            raise MangonelError(f"{field}: {_one_line(error)}") from None


def _planning_steps(shape: Shape, backend: str) -> list[tuple[str, Callable[[], object]]]:
    """Planning the shape's query part by part, each with the field its failure blames:
    the watermark, the session's APPROX_PERCENTILE path, the window alone (with SUM), and
    last the aggregate."""
    window_only = dataclasses.replace(shape, aggregate="SUM", approx_percentile=None)
    return [
        ("delay_us", lambda: make_session(window_only, backend)),
        ("approx_percentile", lambda: make_session(shape, backend)),
        ("range_us, slide_us", lambda: make_session(window_only, backend).sql(window_only.query())),
        ("aggregate", lambda: make_session(shape, backend).sql(shape.query())),
    ]


def _one_line(error: MangonelError) -> str:
    """A planning error on one line: a SqlError's message and hint, without its position in
    the bench's own query text (which the user never wrote)."""
    if isinstance(error, SqlError):
        return f"{error.message} ({error.hint})" if error.hint else error.message
    return " ".join(str(error).split())


def _generic_shapes(arguments: argparse.Namespace) -> bool:
    """Shapes from a config file or a named family (holistic, window function, sketches):
    run through `run_public` on either backend; otherwise the GPU runs `bench_gpu`'s."""
    return bool(
        arguments.config
        or getattr(arguments, "holistic", False)
        or getattr(arguments, "window_function", False)
        or getattr(arguments, "sketches", False)
    )


def _selected(arguments: argparse.Namespace) -> list[Shape]:
    if arguments.config:
        shapes = load_shapes(arguments.config, arguments.backend)
    elif getattr(arguments, "holistic", False):
        shapes = holistic_shapes()
    elif getattr(arguments, "window_function", False):
        shapes = window_function_shapes()
    elif getattr(arguments, "sketches", False):
        shapes = sketch_shapes()
    else:
        shapes = default_shapes()
    if arguments.quick:
        shapes = [s for s in shapes if s.slide_us == 10_000 and s.aggregate == "SUM"]
    return shapes


def _print_row(result: Result) -> None:
    peer = (
        f"{result.peer_tuples_per_second / 1e6:9.3f} M/s  x{result.peer_ratio:8.1f}"
        if result.peer_ratio
        else " " * 25
    )
    runs = result.runs_per_second
    spread = (
        f"  (median of {len(runs)}: {min(runs) / 1e6:.2f}-{max(runs) / 1e6:.2f} M/s)"
        if len(runs) > 1
        else ""
    )
    print(
        f"{result.shape:45s} {result.backend:4s} {result.tuples_per_second / 1e6:9.2f} M/s "
        f"{result.limit_ratio:7.1%} of limit  {result.rows_out:>10,} rows  {peer}{spread}",
        flush=True,
    )


def spark_setting(text: str) -> tuple[str, str]:
    """One `--spark-conf KEY=VALUE` as (key, value)."""
    key, equals, value = text.partition("=")
    if not equals or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE")
    return key.strip(), value.strip()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from mangonel.cli import non_negative_int, positive_int

    parser.add_argument("config", nargs="?", help="JSON list of shapes (fields of Shape)")
    parser.add_argument("--backend", default="cpu", choices=("cpu", "gpu"))
    parser.add_argument(
        "--spark",
        action="store_true",
        help="end to end inside local Spark Structured Streaming vs Spark",
    )
    parser.add_argument(
        "--spark-state",
        choices=("hdfs", "rocksdb"),
        default="hdfs",
        help="--spark: Spark's state store provider for the run (HDFS-backed or RocksDB)",
    )
    parser.add_argument(
        "--spark-conf",
        action="append",
        metavar="KEY=VALUE",
        type=spark_setting,
        default=[],
        help="--spark: a Spark SQL setting for the whole run (repeatable), e.g. "
        "spark.sql.streaming.checkpoint.fileChecksum.enabled=false; applies to both engines",
    )
    parser.add_argument(
        "--spark-rate",
        type=positive_int,
        help="--spark: tuples per second of event time (default 1 M: w = 1 s windows hold "
        "up to 1 M tuples, and fire only once the stream has run 1 s of event time)",
    )
    parser.add_argument(
        "--tuples", type=positive_int, help="tuples per shape (CPU 20 M, GPU 100 M)"
    )
    parser.add_argument(
        "--rate", type=positive_int, default=10_000_000, help="tuples per second of event time"
    )
    parser.add_argument("--batch-size", type=positive_int, default=1_000_000)
    parser.add_argument("--seed", type=non_negative_int, default=1)
    parser.add_argument(
        "--harness",
        action="store_true",
        help="GPU: also run the SUM shapes on the pinned-source engine harness (data generated "
        "into pinned memory, the engine handed views of it), printed as a second, labelled "
        "column beside the public API on ordinary Arrow batches",
    )
    parser.add_argument(
        "--peer",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time Spark's native window() aggregation (CPU runs)",
    )
    parser.add_argument("--peer-tuples", type=positive_int, default=200_000)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a short subset: the s = 10 ms SUM shapes (GPU: also STDDEV and all six in order, "
        "and one output-heavy SUM)",
    )
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument(
        "--repeat",
        type=positive_int,
        default=3,
        help="timed runs per shape of the public path and of the joins (both backends; not "
        "the Spark runs); the row gives their median and range (a process's first run is the "
        "slowest, and a single run of 40-100 M tuples on the GPU lasts ~0.1 s and moves by up "
        "to 2x)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="GPU public path: after each shape's timed run, one more run under cProfile "
        "(the top functions by own time printed under the row)",
    )
    parser.add_argument(
        "--holistic",
        action="store_true",
        help="the holistic shapes (issue 11): MEDIAN beside SUM, w = 1 s, 1000 keys; with "
        "--spark: MEDIAN inside Spark against Spark's native median, w = 1 s, s = 10 ms",
    )
    parser.add_argument(
        "--window-function",
        action="store_true",
        help="a Python window function (trimmed mean) beside MEDIAN, w = 1 s, 1000 keys",
    )
    parser.add_argument(
        "--sketches",
        action="store_true",
        help="the sketch shapes (issue 11): APPROX_COUNT_DISTINCT, APPROX_PERCENTILE (its exact "
        "and its sketch path) beside SUM, w = 1 s, s = 10 ms, 1000 keys",
    )
    parser.add_argument(
        "--join",
        action="store_true",
        help="the join shapes (issue 10) vs Spark's native window join (--tuples: both "
        "streams' rows, default 4 M; --peer-tuples for Spark)",
    )
    parser.add_argument(
        "--join-rate",
        type=positive_int,
        default=20_000,
        help="join shapes: rows per second of event time of each stream",
    )
    parser.add_argument(
        "--join-batch-size", type=positive_int, default=20_000, help="join shapes: rows per batch"
    )
    parser.add_argument(
        "--join-pinned",
        action="store_true",
        help="--join --backend gpu: each shape again on its arrivals copied into pinned host "
        "memory, a second row labelled [pinned] (the engine without the pageable -> pinned "
        "pass; not a user's figure)",
    )
    parser.add_argument(
        "--join-shapes",
        help="--join: only the join shapes of these labels, separated by semicolons",
    )


# the arguments that each choose the shapes to run (CONFIG: the positional config file)
SHAPE_CHOICES = {
    "CONFIG": "config",
    "--holistic": "holistic",
    "--window-function": "window_function",
    "--sketches": "sketches",
    "--join": "join",
}


def check_arguments(arguments: argparse.Namespace) -> list[Shape] | None:
    """Every problem of the arguments as a one-line error, before anything is measured (a
    problem found after a shape ran would cost its results). Returns the shapes `run_public`
    runs, checked; None where another runner's shapes run (join, Spark, the GPU's own)."""
    chosen = _shape_choice(arguments)
    if arguments.json:
        check_writable(arguments.json)
    if arguments.join:
        from mangonel.bench_join import select_join_shapes

        select_join_shapes(arguments)
    if arguments.join or arguments.spark:
        return None
    if arguments.backend == "gpu" and not _generic_shapes(arguments):
        return None
    shapes = _selected(arguments)
    if not shapes:
        family = chosen[0] if chosen else "the default"
        raise MangonelError(f"--quick keeps only the s = 10 ms SUM shapes; {family} has none")
    return shapes


def _shape_choice(arguments: argparse.Namespace) -> list[str]:
    """The flags given that choose the shapes (at most one), refused where they contradict
    each other or a flag that would ignore them."""
    chosen = [flag for flag, name in SHAPE_CHOICES.items() if getattr(arguments, name)]
    if len(chosen) > 1:
        raise MangonelError(
            f"{' and '.join(chosen)} each choose the shapes to run; "
            f"choose one of {', '.join(SHAPE_CHOICES)}"
        )
    if arguments.spark and chosen and chosen != ["--holistic"]:
        raise MangonelError(f"--spark runs its own shapes or --holistic's, not {chosen[0]}'s")
    if arguments.join_shapes is not None and not arguments.join:
        raise MangonelError("--join-shapes needs --join")
    if arguments.join_pinned and not (arguments.join and arguments.backend == "gpu"):
        raise MangonelError("--join-pinned needs --join --backend gpu (pinned memory is CUDA's)")
    return chosen


def check_writable(path: str) -> None:
    """The --json file can be written, checked before the run rather than after it (the
    results would be lost). Not `cli.output_format`: that one asks for a .parquet, .csv or
    .json suffix, and --json writes JSON whatever the name."""
    file = Path(path)
    if not file.parent.is_dir():
        raise MangonelError(f"{path}: the folder {file.parent} does not exist")
    if file.is_dir():
        raise MangonelError(f"{path}: is a folder; give a file name for the JSON results")
    writable = file if file.exists() else file.parent
    if not os.access(writable, os.W_OK):
        raise MangonelError(f"{path}: cannot be written (no permission on {writable})")


def main(arguments: argparse.Namespace) -> int:
    # everything that can be wrong is checked before the first measurement
    shapes = check_arguments(arguments)
    if arguments.backend == "gpu":
        from mangonel.runtime.gpu.probe import require_gpu

        require_gpu()
    print(
        f"mangonel bench  {dt.date.today().isoformat()}  {platform.node()}  "
        f"{platform.processor() or platform.machine()}"
    )
    if arguments.join:
        from mangonel.bench_join import run_join_benchmarks

        rows = [asdict(result) for result in run_join_benchmarks(arguments)]
    elif arguments.spark:
        from mangonel.runtime.spark.bench import run_spark_benchmarks

        # MEDIAN: mangonel's own engine on the same files beside Spark (issue 11)
        standalone = run_standalone_like_spark if arguments.holistic else None
        rows = run_spark_benchmarks(arguments, standalone=standalone)
    elif shapes is None:  # the GPU's own shapes
        from mangonel.bench_gpu import run_gpu_public

        arguments.tuples = arguments.tuples or 100_000_000
        rows = [asdict(result) for result in run_gpu_public(arguments)]
    else:
        arguments.tuples = arguments.tuples or (
            100_000_000 if arguments.backend == "gpu" else 20_000_000
        )
        rows = [asdict(result) for result in run_public(arguments, shapes)]
    if arguments.json:
        with open(arguments.json, "w") as out:
            json.dump(rows, out, indent=2, default=str)
    return 0
