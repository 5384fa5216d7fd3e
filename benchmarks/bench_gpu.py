"""GPU benchmark on the SPRINGALD shapes, the pinned-source harness (a source that generates
into pinned memory; the engine's `LocalQuery` over views of it):
`python benchmarks/bench_gpu.py [tuples [budget_s [slides_us]]] [--batch-mib 4,32]
[--narrow]`. `slides_us` is a comma-separated filter of the slides to run (e.g. `10000` for
the s = 10 ms shapes; default: all); `--batch-mib` the batch sizes in MiB of source bytes
(default 4 and 32); `--narrow` runs the shapes on a source that declares the key INT and the
value FLOAT, 16 bytes a tuple (issue 12's "pinned source, 16 B/tuple"), instead of 24.

Prints the machine's pinned host-to-device bandwidth and one row per shape (tuples/s, share
of the H2D bound at the shape's bytes per tuple); the full rows go to bench_gpu.json beside
the working directory."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from mangonel.runtime.local.gpu_bench import default_gpu_shapes, run_gpu_benchmarks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tuples", nargs="?", type=int, default=150_000_000)
    parser.add_argument("budget_s", nargs="?", type=float, default=None)
    parser.add_argument("slides_us", nargs="?", default=None)
    parser.add_argument("--batch-mib", default=None, help="comma-separated, e.g. 32,256")
    parser.add_argument("--narrow", action="store_true", help="INT keys, FLOAT values: 16 B")
    arguments = parser.parse_args()
    shapes = default_gpu_shapes()
    if arguments.slides_us:
        slides = {int(slide) for slide in arguments.slides_us.split(",")}
        shapes = [shape for shape in shapes if shape.slide_us in slides]
    if arguments.batch_mib:
        sizes = [int(mib) << 20 for mib in arguments.batch_mib.split(",")]
        shapes = list(
            {replace(shape, batch_bytes=size): None for shape in shapes for size in sizes}
        )
    if arguments.narrow:
        shapes = [replace(shape, narrow=True) for shape in shapes]
    rows = run_gpu_benchmarks(shapes, tuples=arguments.tuples, budget_s=arguments.budget_s)
    with open("bench_gpu.json", "w") as handle:
        json.dump(rows, handle, indent=1)


if __name__ == "__main__":
    main()
