"""`python -m mangonel.bench_tuner`: the online auto-tuner of the holistic firing against fixed
configurations, through the public API (issue 11, item 3).

One shape (default: w = 1 s, s = 10 ms, 1000 keys, MEDIAN of a DOUBLE, in order; the
generator of `mangonel bench`), run once per configuration of the tuner's space
(`TuningOptions(windows_per_launch=...)`, and on the GPU each selection form), once with
tuning off (the plan's default) and once tuned online. Each run: a fresh query, one warm-up
run of the first batch outside the clock (JIT and kernel compilation), then every batch
through `Query.run`. The tuned run's rate includes its exploration; its time to converge and
the configurations it tried come from `query.metrics.tuning`.
"""

from __future__ import annotations

import argparse
import itertools
import math
import time
from dataclasses import dataclass

from mangonel.bench import BENCH_SCHEMA, Shape, make_batches
from mangonel.compiler.holistic import windows_per_launch
from mangonel.compiler.options import HOLISTIC_GPU_FORMS, TuningOptions
from mangonel.runtime.operators.holistic import chunk_ladder


@dataclass
class Run:
    name: str
    seconds: float
    tuples_per_second: float
    rows_out: int
    tuning: object = None  # the tuned run's TunerMetrics


def run_once(shape: Shape, batches: list, backend: str, tuning: TuningOptions | str) -> Run:
    from mangonel.session import Session

    session = Session(backend=backend, tuning=tuning)
    session.create_stream(
        "events", BENCH_SCHEMA.to_arrow(), event_time="ts", watermark=shape.delay_us
    )
    session.sql(shape.query()).run(batches[:1])  # warm-up: compilation outside the clock
    query = session.sql(shape.query())
    started = time.perf_counter()
    table = query.run(batches)
    seconds = time.perf_counter() - started
    tuples = sum(b.num_rows for b in batches)
    name = tuning if isinstance(tuning, str) else _name(tuning)
    return Run(name, seconds, tuples / seconds, table.num_rows, query.metrics.tuning)


def _name(options: TuningOptions) -> str:
    parts = [f"windows_per_launch={options.windows_per_launch}"]
    if options.gpu_form is not None:
        parts.append(options.gpu_form)
    return "fixed " + " ".join(parts)


def configurations(shape: Shape, backend: str) -> list[TuningOptions]:
    """Every configuration the tuner may pick for the shape."""
    panes_per_window = shape.range_us // math.gcd(shape.range_us, shape.slide_us)
    largest = windows_per_launch(panes_per_window)
    chunks = chunk_ladder(largest, largest)
    forms: tuple[str | None, ...] = HOLISTIC_GPU_FORMS if backend == "gpu" else (None,)
    return [
        TuningOptions(mode="off", windows_per_launch=c, gpu_form=f)
        for c, f in itertools.product(chunks, forms)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="cpu", choices=("cpu", "gpu"))
    parser.add_argument("--tuples", type=int, default=8_000_000)
    parser.add_argument("--batch-size", type=int, default=500_000)
    parser.add_argument("--rate", type=int, default=10_000_000, help="tuples per event second")
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--slide-us", type=int, default=10_000)
    parser.add_argument("--aggregate", default="MEDIAN")
    arguments = parser.parse_args(argv)
    shape = Shape(1_000_000, arguments.slide_us, arguments.keys, arguments.aggregate, 0)
    batches = make_batches(shape, arguments.tuples, arguments.rate, arguments.batch_size, seed=1)
    print(f"shape: {shape.name}, {arguments.tuples} tuples in batches of {arguments.batch_size}")
    runs = [
        run_once(shape, batches, arguments.backend, c)
        for c in configurations(shape, arguments.backend)
    ]
    runs.append(run_once(shape, batches, arguments.backend, "off"))
    runs.append(run_once(shape, batches, arguments.backend, "online"))
    rows = {r.rows_out for r in runs}
    best = max(r.tuples_per_second for r in runs[:-2])
    print("| configuration | M tuples/s | of the best fixed | rows out |")
    print("|---|---|---|---|")
    for run in runs:
        print(
            f"| {run.name} | {run.tuples_per_second / 1e6:.2f} | "
            f"{run.tuples_per_second / best:.2f} | {run.rows_out} |"
        )
    tuned = runs[-1].tuning
    if tuned is not None:
        print(tuned.describe())
        print("\n".join(tuned.tried_lines()))
    if len(rows) != 1:
        print(f"ROWS DIFFER between configurations: {sorted(rows)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
