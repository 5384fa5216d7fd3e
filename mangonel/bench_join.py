"""`mangonel bench --join`: issue 10's join shapes through the public API, with Spark's
native window join as the peer in the same run.

Two streams, `lefts` and `rights`, of 16-byte rows (ts TIMESTAMP, key INT, value FLOAT),
each from the built-in generator (its own seed), arriving alternately one batch at a time
(`Query.run` over `(stream, batch)` arrivals). Rates count both sides' input rows. The peer
(`runtime/spark/join_peer.py`) runs on a smaller input of the same generator; mangonel runs
that input too, untimed, and its rows are checked equal to Spark's. `--backend gpu` runs
mangonel's side on the GPU; the peer is then optional (skipped where pyspark is missing, as
on a GPU machine without Spark).

Materialised shapes (the joined rows as output) are consumed as a streaming consumer does:
`Query.stream`, each result batch counted (rows, bytes) and dropped, so memory holds one
firing's rows, not the whole result (on the GPU their pinned blocks are then reused). GPU
runs print, beside the rate, the result bytes per second over the whole run and over the
output step alone (`metrics.rows_output_seconds`: expansion, gather, copy back, Arrow), each
against the pinned device-to-host bandwidth measured in the same run.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from mangonel.catalog.catalog import Column, Schema
from mangonel.catalog.sources.generator import GeneratorConfig, generate
from mangonel.catalog.types import SqlType
from mangonel.compiler import physical as ph
from mangonel.errors import MangonelError

JOIN_SCHEMA = Schema(
    (
        Column("ts", SqlType.TIMESTAMP),
        Column("key", SqlType.INT),
        Column("value", SqlType.FLOAT),
    )
)
ROW_BYTES = 16


@dataclass(frozen=True)
class JoinShape:
    label: str
    keys: int = 1000
    skew: float = 0.0  # Zipf exponent of key popularity
    range_us: int = 1_000_000
    slide_us: int = 1_000_000
    aggregate: bool = True  # False: the joined rows are materialised
    algorithm: str = "auto"
    share: float = 1.0  # of --tuples: the costly shapes run on a part of the input
    factorised: bool = True  # False: the aggregated join credits every joined pair
    # the aggregate reads both sides, SUM(l.value * r.value): never factorised, on the GPU
    # the device-fused pair path (EXPLAIN fused=device); Spark's peer computes SUM(r.value),
    # so these shapes run without it
    both_sides: bool = False

    def query(self) -> str:
        window = f"[RANGE {self.range_us} MICROSECONDS SLIDE {self.slide_us} MICROSECONDS]"
        source = f"FROM lefts {window} AS l JOIN rights {window} AS r ON l.key = r.key"
        if self.aggregate:
            return (
                "SELECT l.key AS key, window_start, window_end, COUNT(*) AS n, "
                f"SUM({'l.value * r.value' if self.both_sides else 'r.value'}) AS total "
                f"{source} GROUP BY l.key"
            )
        return (
            "SELECT l.key AS key, l.value AS l_value, r.value AS r_value, window_start, "
            f"window_end {source}"
        )


def default_join_shapes() -> list[JoinShape]:
    """The issue's shapes: 1,000 uniform keys, tumbling 1 s, aggregate over the join; Zipf 1
    keys (factorised, and the pair path with both algorithms); sliding w/s = 100 beside
    tumbling on the same input (factorised; the pair path on a smaller one); the join
    materialised. The aggregated shapes are factorised (they group by the join key, each
    aggregate reads one side) unless labelled "pairs"."""
    return [
        JoinShape("uniform, tumbling 1 s, aggregated"),
        JoinShape("uniform, sliding 1 s / 10 ms, aggregated", slide_us=10_000),
        JoinShape("zipf 1, tumbling 1 s, aggregated", skew=1.0),
        JoinShape(
            "zipf 1, tumbling 1 s, aggregated, pairs, hash",
            skew=1.0,
            algorithm="hash",
            share=0.1,
            factorised=False,
        ),
        JoinShape(
            "zipf 1, tumbling 1 s, aggregated, pairs, sort-merge",
            skew=1.0,
            algorithm="sort-merge",
            share=0.1,
            factorised=False,
        ),
        JoinShape("uniform, tumbling 1 s, aggregated, both sides", share=0.1, both_sides=True),
        JoinShape("uniform, tumbling 1 s, aggregated, pairs", share=0.05, factorised=False),
        JoinShape(
            "uniform, sliding 1 s / 10 ms, aggregated, pairs",
            slide_us=10_000,
            share=0.05,
            factorised=False,
        ),
        JoinShape("uniform, tumbling 1 s, materialised", aggregate=False),
    ]


@dataclass
class JoinResult:
    shape: str
    rows_in: int
    seconds: float
    rows_per_second: float
    rows_out: int
    algorithm: str
    peer_rows_in: int | None = None
    peer_rows_per_second: float | None = None
    peer_ratio: float | None = None
    equal_to_peer: bool | None = None
    # GPU runs: the share of the pinned host-to-device bound on the input (16-byte rows), and
    # the result bytes per second against the pinned device-to-host bound
    input_bound_share: float | None = None
    result_bytes_per_second: float | None = None
    result_bound_share: float | None = None
    # materialised shapes: the result bytes per second of the output step alone (the
    # firing's expansion, gather, copy back and Arrow arrays), and its share of D2H
    output_step_bytes_per_second: float | None = None
    output_step_bound_share: float | None = None
    # every timed run's rows/s, ascending (`--repeat`); `rows_per_second` is their median's
    runs_rows_per_second: list[float] = dataclasses.field(default_factory=list)
    # the garbage collector's passes inside the median run's clock
    collector_seconds: float = 0.0
    # --join-pinned's second row: the arrivals' buffers in pinned host memory
    pinned_arrivals: bool = False


def make_arrivals(
    shape: JoinShape, rows: int, rate: int, batch_size: int, seed: int
) -> list[tuple[str, pa.RecordBatch]]:
    """`rows` rows in all, half per stream, each stream at `rate` rows per second of event
    time, in order; arrivals alternate between the streams batch by batch."""
    sides = []
    for offset, name in enumerate(("lefts", "rights")):
        config = GeneratorConfig(
            tuples=rows // 2,
            rate=rate,
            keys=shape.keys,
            skew=shape.skew,
            batch_size=batch_size,
            seed=seed * 2 + offset,
        )
        sides.append([(name, b) for b in generate(JOIN_SCHEMA, "ts", config, key_columns=("key",))])
    arrivals = []
    for pair in zip(*sides, strict=False):
        arrivals.extend(pair)
    longer = max(sides, key=len)
    arrivals.extend(longer[len(min(sides, key=len)) :])
    return arrivals


def make_session(shape: JoinShape, backend: str = "cpu"):  # noqa: ANN201
    from mangonel.session import Session

    session = Session(backend, join_algorithm=shape.algorithm, join_factorised=shape.factorised)
    for name in ("lefts", "rights"):
        session.create_stream(name, JOIN_SCHEMA.to_arrow(), event_time="ts", watermark=0)
    return session


@dataclass
class EngineRun:
    seconds: float  # every arrival through the query, end of input included
    rows_out: int
    result_bytes: int
    algorithm: str  # the join algorithms it ran (what "auto" chose per batch)
    metrics: object  # the query's JoinMetrics
    collector_seconds: float = 0.0  # the garbage collector's passes inside `seconds`


class CollectorTime:
    """The garbage collector's passes while it is in `gc.callbacks`: how long they took in
    all (a pass inside a GPU run of ~0.07 s can double it: the row should say so), and each
    pass's (generation, seconds) to `each` where given (`benchmarks/gpu_public_timers.py`)."""

    def __init__(self, each: Callable[[int, float], None] | None = None) -> None:
        self.seconds = 0.0
        self.each = each
        self._started: float | None = None

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started is not None:
            seconds = time.perf_counter() - self._started
            self.seconds += seconds
            self._started = None
            if self.each is not None:
                self.each(info["generation"], seconds)


def run_engine(shape: JoinShape, arrivals: list, backend: str = "cpu") -> EngineRun:
    """One timed run of the shape's query over the arrivals (aggregated: `Query.run`;
    materialised: `Query.stream`, each batch counted and dropped), after a warm-up."""
    query = make_session(shape, backend).sql(shape.query())
    query.run(arrivals[:4])  # warm-up: JIT compilation stays out of the timing
    # the garbage of the queries before (and of the warm-up) is collected outside the clock,
    # as `bench_gpu` does between datasets: a GPU run of 40 M rows lasts ~0.07 s, and one
    # pass of the collector over a process's objects ~0.1 s
    gc.collect()
    collector = CollectorTime()
    gc.callbacks.append(collector)
    try:
        started = time.perf_counter()
        if shape.aggregate:
            table = query.run(arrivals)
            rows, nbytes = table.num_rows, table.nbytes
            del table
        else:
            rows = nbytes = 0
            for batch in query.stream(arrivals):
                rows += batch.num_rows
                nbytes += batch.nbytes
        seconds = time.perf_counter() - started
    finally:
        gc.callbacks.remove(collector)
    metrics = query.metrics
    if shape.aggregate and ph.find(query.plan, ph.JoinAggregateExec).factorised is not None:
        algorithm = "factorised"  # no pairs formed: no join algorithm ran
    else:
        algorithm = "+".join(name for name, _ in metrics.batches_by_algorithm)
    return EngineRun(seconds, rows, nbytes, algorithm, metrics, collector.seconds)


def same_rows(ours: pa.Table, theirs: pa.Table, aggregate: bool) -> bool:
    """Equal as multisets of rows (sums compared to a relative 1e-9: the engines add in
    different orders; every other value exactly)."""
    names = ["key", "window_start", "window_end"] + (
        ["n", "total"] if aggregate else ["l_value", "r_value"]
    )
    if ours.num_rows != theirs.num_rows:
        return False

    def rows(table: pa.Table) -> list[tuple]:
        columns = []
        for name in names:
            column = table.column(name)
            if pa.types.is_timestamp(column.type):
                column = column.cast(pa.timestamp("us")).cast(pa.int64())
            columns.append(column.to_pylist())
        # (key, window) is unique in aggregated rows, so the inexact sum never decides order;
        # materialised rows carry the inputs' values unchanged and sort on every column
        width = 4 if aggregate else len(names)
        return sorted(zip(*columns, strict=True), key=lambda r: r[:width])

    for a, b in zip(rows(ours), rows(theirs), strict=True):
        for x, y in zip(a, b, strict=True):
            if isinstance(x, float) or isinstance(y, float):
                if not math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9):
                    return False
            elif x != y:
                return False
    return True


def run_join_benchmarks(arguments: argparse.Namespace) -> list[JoinResult]:
    shapes = select_join_shapes(arguments)  # before Spark starts or a bandwidth is measured
    rows = arguments.tuples or 4_000_000
    rate = arguments.join_rate
    batch_size = arguments.join_batch_size
    backend = getattr(arguments, "backend", "cpu")
    repeat = getattr(arguments, "repeat", 1)
    peer = None
    if arguments.peer and not _spark_installed():
        if backend == "cpu":
            raise SystemExit("bench --join: the Spark peer needs pyspark; pass --no-peer")
        print("bench --join: no Spark peer (pyspark is not installed here)")
    elif arguments.peer:
        from mangonel.runtime.spark.bench import start_local_spark
        from mangonel.runtime.spark.join_peer import native_window_join

        spark = start_local_spark()

        def peer(shape: JoinShape, arrivals: list) -> tuple[float, pa.Table]:
            tables = [
                pa.Table.from_batches([b for n, b in arrivals if n == name])
                for name in ("lefts", "rights")
            ]
            return native_window_join(
                spark, *tables, shape.range_us, shape.slide_us, shape.aggregate
            )

        # warm-up of Spark's JVM paths outside every timing
        warm = make_arrivals(JoinShape("warm-up"), 20_000, rate, batch_size, arguments.seed)
        peer(JoinShape("warm-up"), warm)
    bounds = None
    if backend == "gpu":
        from mangonel.runtime.local.gpu_bench import (
            device_name,
            measure_d2h_bandwidth,
            measure_h2d_bandwidth,
        )

        bounds = (measure_h2d_bandwidth(), measure_d2h_bandwidth())
        print(
            f"device: {device_name()}; pinned H2D {bounds[0] / 1e9:.1f} GB/s (input bound "
            f"{bounds[0] / ROW_BYTES / 1e9:.2f} G rows/s at {ROW_BYTES} B/row), pinned D2H "
            f"{bounds[1] / 1e9:.1f} GB/s"
        )
    pinned = backend == "gpu" and getattr(arguments, "join_pinned", False)
    # the arrivals of `cache`'s one entry in pinned memory, with the block they are views of
    pinned_cache: dict[tuple, tuple[list, object]] = {}
    if pinned:
        from mangonel.runtime.local.gpu_bench import pinned_copies

        def pinned_copies_of(arrivals: list) -> tuple[list, object]:
            copies, block = pinned_copies([batch for _, batch in arrivals])
            named = [(name, copy) for (name, _), copy in zip(arrivals, copies, strict=True)]
            return named, block

        print(
            "--join-pinned: each shape again on its arrivals copied into pinned host memory "
            "before the clock, rows labelled [pinned]: what the engine does without the "
            "stager's pageable -> pinned pass, not what a user with ordinary batches gets"
        )
    print(f"backend: {backend}; rates count both streams' input rows")
    print(
        f"{'shape':46s} {'rows in':>11s} {'mangonel':>12s} {'rows out':>12s} {'algorithm':>10s}"
        f" {'Spark':>12s} {'ratio':>8s}  equal"
    )
    results = []
    ran: list[tuple[JoinShape, JoinResult]] = []
    cache: dict[tuple, list] = {}
    for shape in shapes:
        size = max(2 * batch_size, int(rows * shape.share))
        key = (shape.keys, shape.skew, size)
        if key not in cache:
            cache = {key: make_arrivals(shape, size, rate, batch_size, arguments.seed)}
        result = _timed_result(shape, shape.label, cache[key], backend, repeat, bounds)
        if peer is not None and not shape.both_sides:
            small = make_arrivals(shape, arguments.peer_tuples, rate, batch_size, arguments.seed)
            peer_seconds, theirs = peer(shape, small)
            ours = make_session(shape, backend).sql(shape.query()).run(small)
            result.peer_rows_in = arguments.peer_tuples
            result.peer_rows_per_second = arguments.peer_tuples / peer_seconds
            result.peer_ratio = result.rows_per_second / result.peer_rows_per_second
            result.equal_to_peer = same_rows(ours, theirs, shape.aggregate)
        results.append(result)
        _print_join_row(result)
        ran.append((shape, result))
        if pinned:
            # the same arrivals with their buffers in pinned host memory: a second, labelled
            # row (the stager's pageable -> pinned pass left out), never the shape's figure
            if key not in pinned_cache:
                pinned_cache = {key: pinned_copies_of(cache[key])}
            label = f"{shape.label} [pinned]"
            pinned_arrivals = pinned_cache[key][0]
            pinned_result = _timed_result(shape, label, pinned_arrivals, backend, repeat, bounds)
            pinned_result.pinned_arrivals = True
            results.append(pinned_result)
            _print_join_row(pinned_result)
    for line in sliding_against_tumbling(ran):
        print(line)
    return results


def _timed_result(
    shape: JoinShape,
    label: str,
    arrivals: list,
    backend: str,
    repeat: int,
    bounds: tuple[float, float] | None,
) -> JoinResult:
    """The shape timed `repeat` times over the arrivals: its row, the median run's (the lower
    middle one of an even count), with the runs' range and the bounds' shares."""
    size = sum(batch.num_rows for _, batch in arrivals)
    runs = sorted(
        (run_engine(shape, arrivals, backend) for _ in range(repeat)),
        key=lambda run: run.seconds,
    )
    run = runs[(len(runs) - 1) // 2]
    seconds = run.seconds
    result = JoinResult(label, size, seconds, size / seconds, run.rows_out, run.algorithm)
    result.runs_rows_per_second = [size / r.seconds for r in reversed(runs)]
    result.collector_seconds = run.collector_seconds
    if bounds is not None:
        result.input_bound_share = result.rows_per_second * ROW_BYTES / bounds[0]
        result.result_bytes_per_second = run.result_bytes / seconds
        result.result_bound_share = result.result_bytes_per_second / bounds[1]
        output_seconds = getattr(run.metrics, "rows_output_seconds", 0.0)
        if not shape.aggregate and output_seconds > 0:
            output_bytes = run.metrics.rows_output_bytes
            result.output_step_bytes_per_second = output_bytes / output_seconds
            result.output_step_bound_share = result.output_step_bytes_per_second / bounds[1]
    return result


def sliding_against_tumbling(ran: list[tuple[JoinShape, JoinResult]]) -> list[str]:
    """Issue 10's "sliding w/s = 100 within 2x of tumbling": one line per sliding shape that
    ran beside the tumbling shape of the same input and query (same keys, skew, rows, path
    and algorithm), with how many times slower it ran."""
    lines = []
    for shape, result in ran:
        if shape.slide_us == shape.range_us:
            continue
        for other, tumbling in ran:
            same = dataclasses.replace(other, label=shape.label, slide_us=shape.slide_us)
            if (
                other.slide_us == other.range_us
                and same == shape
                and tumbling.rows_in == result.rows_in
            ):
                slower = tumbling.rows_per_second / result.rows_per_second
                lines.append(
                    f"sliding vs tumbling: {shape.label!r} runs {slower:.1f}x slower than "
                    f"{other.label!r} on the same input (target: within 2x)"
                )
    return lines


def _spark_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("pyspark") is not None


def select_join_shapes(arguments: argparse.Namespace) -> list[JoinShape]:
    """The join shapes to run (--quick, --join-shapes), or a one-line error."""
    shapes = default_join_shapes()
    if arguments.quick:
        shapes = shapes[:1]
    # an empty --join-shapes selects nothing: refused below, not read as "all"
    if arguments.join_shapes is not None:
        # labels hold commas: the parts are separated by semicolons
        wanted = [part.strip() for part in arguments.join_shapes.split(";") if part.strip()]
        shapes = [s for s in shapes if s.label in wanted]
        if not shapes:
            labels = "; ".join(s.label for s in default_join_shapes())
            raise MangonelError(
                f"--join-shapes {arguments.join_shapes!r} matches none of: {labels}"
            )
    return shapes


def _print_join_row(result: JoinResult) -> None:
    peer = (
        f"{result.peer_rows_per_second / 1e6:8.3f} M/s x{result.peer_ratio:7.1f}  "
        f"{'yes' if result.equal_to_peer else 'NO'}"
        if result.peer_ratio
        else ""
    )
    bounds = (
        f" H2D {result.input_bound_share:6.1%}, results {result.result_bytes_per_second / 1e9:.2f}"
        f" GB/s = {result.result_bound_share:6.2%} of D2H"
        if result.input_bound_share is not None
        else ""
    )
    if result.output_step_bytes_per_second is not None:
        bounds += (
            f" (output step {result.output_step_bytes_per_second / 1e9:.2f} GB/s ="
            f" {result.output_step_bound_share:6.2%} of D2H)"
        )
    runs = result.runs_rows_per_second
    if len(runs) > 1:
        bounds += f" (runs {runs[0] / 1e6:.1f}-{runs[-1] / 1e6:.1f} M/s)"
    if result.collector_seconds * 100 >= result.seconds:  # 1 % of the run or more
        bounds += (
            f" (the garbage collector {result.collector_seconds * 1e3:.1f} ms of "
            f"{result.seconds * 1e3:.1f})"
        )
    print(
        f"{result.shape:46s} {result.rows_in:>11,} {result.rows_per_second / 1e6:8.2f} M/s "
        f"{result.rows_out:>12,} {result.algorithm:>10s} {peer}{bounds}",
        flush=True,
    )


__all__ = ["JoinShape", "default_join_shapes", "run_join_benchmarks", "same_rows"]
