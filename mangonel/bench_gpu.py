"""`mangonel bench --backend gpu`: the public path on ordinary Arrow batches (issue 12, item 1).

Every shape runs through `Session(backend="gpu").sql(q).run(batches)` over Arrow record
batches in ordinary (pageable) memory, as a Parquet reader or Spark hands them: every
aggregate alone (COUNT, SUM, AVG, MIN, MAX, STDDEV) and the six in one query, 1 and 1000
keys, in order and out of order (delay uniform in [0, 1 s)), batches of 1 M and 4 M rows,
w = 1 s, s = 10 ms, event time advancing 1 s per 100 M tuples; plus output-heavy shapes
(s = 100 us, 1000 keys, event time 1 s per 40 M tuples: about 25 M result rows per 100 M
tuples).

Each row reports tuples/s, result rows/s, and its share of the two bounds measured in the same
run on this machine: the pinned host-to-device copy at the wire's bytes per tuple
(`compiler.wire`: 16 B for (ts, key, value)), and the pageable -> pinned staging pass with
the copy threads the engine uses (`gpu_bench.measure_staging_rate`). With `--harness`, the
SUM shapes at 100 M tuples per second of event time also run on the pinned-source harness
(`runtime.local.gpu_bench`: data generated into pinned memory, the engine handed views of
it), printed as a second, labelled column. Each shape is timed `--repeat` times (default 3)
after a one-batch warm-up; the row gives the median and, under "runs", the slowest and fastest
(a shape's first run in a process is often the slowest: the device memory pool still grows).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from mangonel.bench import BENCH_SCHEMA, WINDOW_FUNCTIONS, Shape, make_batches

AGGREGATES = ("COUNT", "SUM", "AVG", "MIN", "MAX", "STDDEV")
ALL_SIX = "ALL6"  # the six aggregates in one query
THROUGHPUT_RATE = 100_000_000  # tuples per second of event time (the shapes)
OUTPUT_HEAVY_RATE = 40_000_000  # s = 100 us, 1000 keys: ~25 M result rows per 100 M tuples
MILLION = 1_000_000


@dataclass(frozen=True)
class PublicShape:
    """One public-path shape: w = 1 s, slide, keys, aggregate (one of AGGREGATES, ALL6, a
    holistic one such as MEDIAN, or a Python function of `bench.WINDOW_FUNCTIONS`), delay
    (uniform in [0, delay)), rows per Arrow batch, tuples per second of event time."""

    slide_us: int
    keys: int
    aggregate: str
    delay_us: int
    batch_rows: int
    rate: int = THROUGHPUT_RATE
    range_us: int = 1_000_000

    @property
    def name(self) -> str:
        from mangonel.compiler.explain import format_duration

        order = "in-order" if self.delay_us == 0 else f"delay<{format_duration(self.delay_us)}"
        rows = self.batch_rows
        batch = f"{rows // MILLION}M" if rows % MILLION == 0 else f"{rows:,}"
        return (
            f"s={format_duration(self.slide_us)} keys={self.keys} {self.aggregate} {order} "
            f"batch={batch}"
        )

    def query(self) -> str:
        if self.aggregate == ALL_SIX:
            calls = ", ".join(f"{a}(value) AS {a.lower()}_v" for a in AGGREGATES)
        elif "(" in self.aggregate:  # a whole call, e.g. APPROX_PERCENTILE(value, 0.5)
            calls = f"{self.aggregate} AS result"
        else:
            calls = f"{self.aggregate}(value) AS result"
        return (
            f"SELECT key, window_start, window_end, {calls} "
            f"FROM events [RANGE {self.range_us} MICROSECONDS SLIDE {self.slide_us} "
            f"MICROSECONDS] GROUP BY key"
        )


def default_gpu_shapes() -> list[PublicShape]:
    """Every aggregate alone and the six together x 1/1000 keys x in order/1 s delay x
    1 M/4 M-row batches, then the output-heavy shapes (s = 100 us, 1000 keys)."""
    shapes = [
        PublicShape(10_000, keys, aggregate, delay, rows)
        for keys in (1, 1000)
        for delay in (0, 1_000_000)
        for rows in (MILLION, 4 * MILLION)
        for aggregate in (*AGGREGATES, ALL_SIX)
    ]
    shapes += [
        PublicShape(100, 1000, aggregate, delay, MILLION, OUTPUT_HEAVY_RATE)
        for delay in (0, 1_000_000)
        for aggregate in ("SUM", ALL_SIX)
    ]
    return shapes


def quick_gpu_shapes() -> list[PublicShape]:
    """The short subset: SUM (1/1000 keys, in order/delay, 1 M/4 M rows), STDDEV and the six
    (in order, 1 M/4 M rows, 1/1000 keys), one output-heavy SUM."""
    return [
        s
        for s in default_gpu_shapes()
        if (s.slide_us == 10_000 and s.aggregate == "SUM")
        or (s.slide_us == 10_000 and s.aggregate in ("STDDEV", ALL_SIX) and s.delay_us == 0)
        or (s.slide_us == 100 and s.aggregate == "SUM" and s.delay_us == 0)
    ]


@dataclass
class GpuResult:
    shape: str
    tuples: int
    seconds: float
    tuples_per_second: float
    rows_out: int
    rows_per_second: float
    h2d_share: float  # tuples/s over the pinned H2D bound at the wire's bytes per tuple
    staging_share: float  # tuples/s over the measured pageable -> pinned staging rate
    wire_bytes_per_tuple: float | None  # what the run's staging moved per tuple (metrics)
    harness_tuples_per_second: float | None = None  # pinned-source harness, same shape
    slowest_tuples_per_second: float | None = None  # the range of the timed runs
    fastest_tuples_per_second: float | None = None


def dataset(shape: PublicShape, tuples: int, seed: int) -> pa.RecordBatch:
    """The shape's whole input as one Arrow batch in ordinary memory (the generator's: ts,
    key in [0, keys), value uniform); batches are zero-copy slices of it."""
    like = Shape(shape.range_us, shape.slide_us, shape.keys, "SUM", shape.delay_us)
    (whole,) = make_batches(like, tuples, shape.rate, tuples, seed)
    return whole


def batches_of(whole: pa.RecordBatch, rows: int) -> list[pa.RecordBatch]:
    """`whole` cut into batches of `rows` rows (zero-copy slices; the last may be shorter)."""
    return [whole.slice(first, rows) for first in range(0, whole.num_rows, rows)]


def profile_public_shape(
    shape: PublicShape, batches: list[pa.RecordBatch], top: int = 15, backend: str = "gpu"
) -> str:
    """cProfile of one more run of the shape (after the timed one, so the figure is not
    distorted): the `top` functions by own time, as text."""
    import cProfile
    import io
    import pstats

    query = public_query(shape, batches, backend)
    profiler = cProfile.Profile()
    profiler.enable()
    query.run(batches)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def public_query(
    shape: PublicShape,
    batches: list[pa.RecordBatch],
    backend: str = "gpu",
    tuning: Any = None,  # noqa: ANN401 - `Session(tuning=)`: a mode or TuningOptions
):  # noqa: ANN201 - a `Query` (mangonel.session, imported here only)
    """The shape's query through `Session.sql()`, after a one-batch run (compilation kept
    out of any clock that follows)."""
    from mangonel.session import Session

    session = Session(backend=backend, tuning=tuning)
    session.create_stream(
        "events", BENCH_SCHEMA.to_arrow(), event_time="ts", watermark=shape.delay_us
    )
    if shape.aggregate in WINDOW_FUNCTIONS:  # the bench's Python function (trimmed_mean)
        session.register_window_function(shape.aggregate, WINDOW_FUNCTIONS[shape.aggregate])
    query = session.sql(shape.query())
    query.run(batches[:1])
    return query


def _device_timed(step: Any) -> tuple[float, Any]:  # noqa: ANN401
    """Seconds `step()` takes on the GPU (the device's queued work included), and its value."""
    from mangonel.runtime.gpu import device

    gc.collect()  # an earlier runner returns its pinned slots to CuPy's pool first
    cp = device.cupy()
    cp.cuda.Device().synchronize()
    started = time.perf_counter()
    value = step()
    cp.cuda.Device().synchronize()
    return time.perf_counter() - started, value


def timed_run(query: Any, batches: list[pa.RecordBatch]) -> tuple[float, pa.Table]:  # noqa: ANN401
    """Seconds to push every batch through `query.run()` on the GPU (end of input and the
    device's queued work included), and the results."""
    return _device_timed(lambda: query.run(batches))


def timed_stream(query: Any, batches: list[pa.RecordBatch]) -> tuple[float, int]:  # noqa: ANN401
    """As `timed_run`, through `query.stream()`, each result dropped as it comes; (seconds,
    rows out)."""
    return _device_timed(lambda: sum(out.num_rows for out in query.stream(batches)))


def run_public_shape(
    shape: PublicShape, batches: list[pa.RecordBatch]
) -> tuple[float, int, float | None]:
    """Seconds to push every batch through `Session.sql().run()` (end of input included),
    the result rows, and the bytes per tuple that crossed PCIe (the GPU kernels' metrics;
    None where they are not there); a one-batch run first keeps compilation out of the
    clock."""
    query = public_query(shape, batches)
    seconds, table = timed_run(query, batches)
    # the runner of that run (Session keeps the last one): what its staging moved
    metrics = getattr(getattr(query, "_runner", None), "window_operator", None)
    metrics = getattr(getattr(metrics, "kernels", None), "metrics", None)
    wire = (
        metrics.wire_bytes / metrics.staged_rows
        if metrics is not None and getattr(metrics, "staged_rows", 0)
        else None
    )
    return seconds, table.num_rows, wire


def _harness_rate(shape: PublicShape, tuples: int, source) -> float | None:  # noqa: ANN001
    """The pinned-source harness on the same shape, where it has one (SUM, 100 M tuples/s)."""
    from mangonel.runtime.local import gpu_bench

    if shape.aggregate != "SUM" or shape.rate != THROUGHPUT_RATE or source is None:
        return None
    harness = gpu_bench.GpuShape(
        shape.slide_us, shape.keys, shape.delay_us, shape.batch_rows * gpu_bench.BYTES_PER_TUPLE
    )
    gpu_bench.run_shape(harness, source, min(tuples, 4 * shape.batch_rows))  # warm-up
    return gpu_bench.run_shape(harness, source, tuples)["tuples_per_second"]


def run_gpu_public(arguments: argparse.Namespace) -> list[GpuResult]:
    """Every selected shape on the public path, each against the bounds measured here."""
    from mangonel.compiler.options import GpuOptions
    from mangonel.compiler.wire import wire_column
    from mangonel.runtime.local import gpu_bench

    tuples = arguments.tuples
    shapes = quick_gpu_shapes() if arguments.quick else default_gpu_shapes()
    wire_bytes = sum(wire_column(c.name, c.type).bytes for c in BENCH_SCHEMA.columns)
    options = GpuOptions()
    h2d = gpu_bench.measure_h2d_bandwidth()
    h2d_bound = h2d / wire_bytes
    staging_rate, threads = gpu_bench.measure_staging_rate(
        options.staging_threads, options.chunk_rows
    )
    print(
        f"device: {gpu_bench.device_name()}; pinned H2D {h2d / 1e9:.1f} GB/s = "
        f"{h2d_bound / 1e9:.2f} G tuples/s at {wire_bytes} B/tuple on the wire; pageable -> "
        f"pinned staging {staging_rate / 1e9:.2f} G tuples/s ({threads} threads, "
        f"{options.chunk_rows:,}-row chunks); {tuples:,} tuples per shape, public API "
        "(Session.sql().run()) over ordinary Arrow batches",
        flush=True,
    )
    source = gpu_bench.PinnedSource(tuples) if arguments.harness else None
    harness_label = "  pinned-source harness" if source is not None else ""
    print(
        f"{'shape':<46} {'tuples/s':>10} {'rows/s':>10} {'of H2D':>7} {'of staging':>10} "
        f"{'wire':>6} {'runs':>10}{harness_label}",
        flush=True,
    )
    results = []
    whole_key = None
    whole = None
    for shape in sorted(shapes, key=lambda s: (s.keys, s.delay_us, s.rate)):
        key = (shape.keys, shape.delay_us, shape.rate)
        if key != whole_key:
            whole, whole_key = None, key
            gc.collect()
            whole = dataset(shape, tuples, arguments.seed)
        batches = batches_of(whole, shape.batch_rows)
        runs = [run_public_shape(shape, batches) for _ in range(getattr(arguments, "repeat", 1))]
        seconds = statistics.median(run[0] for run in runs)
        rows_out, wire = runs[0][1], runs[0][2]
        rate = tuples / seconds
        result = GpuResult(
            shape.name,
            tuples,
            seconds,
            rate,
            rows_out,
            rows_out / seconds,
            rate / h2d_bound,
            rate / staging_rate,
            wire,
            _harness_rate(shape, tuples, source),
            tuples / max(run[0] for run in runs),
            tuples / min(run[0] for run in runs),
        )
        results.append(result)
        harness = (
            f"  {result.harness_tuples_per_second / 1e6:9.1f} M/s"
            if result.harness_tuples_per_second
            else ""
        )
        profile = (
            profile_public_shape(shape, batches) if getattr(arguments, "profile", False) else ""
        )
        print(
            f"{result.shape:<46} {rate / 1e6:8.1f} M {result.rows_per_second / 1e6:8.2f} M "
            f"{result.h2d_share:7.1%} {result.staging_share:10.1%} "
            f"{'' if wire is None else f'{wire:4.1f} B':>6} "
            f"{result.slowest_tuples_per_second / 1e6:6.0f}-"
            f"{result.fastest_tuples_per_second / 1e6:.0f} M{harness}",
            flush=True,
        )
        if profile:
            print(profile, flush=True)
    return results


__all__ = [
    "ALL_SIX",
    "AGGREGATES",
    "GpuResult",
    "PublicShape",
    "batches_of",
    "dataset",
    "default_gpu_shapes",
    "quick_gpu_shapes",
    "run_gpu_public",
]
