"""GPU benchmark on the SPRINGALD shapes:
`python benchmarks/bench_gpu.py [tuples [budget_s [slides_us]]]`, slides_us a comma-separated
filter of the slides to run (e.g. `10000` for the eight s = 10 ms shapes; default: all).

Prints the machine's pinned host-to-device bandwidth and one row per shape (tuples/s, share
of the H2D bound); the full rows go to bench_gpu.json beside the working directory."""

from __future__ import annotations

import json
import sys

from mangonel.runtime.local.gpu_bench import default_gpu_shapes, run_gpu_benchmarks


def main() -> None:
    tuples = int(sys.argv[1]) if len(sys.argv) > 1 else 150_000_000
    budget = float(sys.argv[2]) if len(sys.argv) > 2 else None
    shapes = default_gpu_shapes()
    if len(sys.argv) > 3:
        slides = {int(slide) for slide in sys.argv[3].split(",")}
        shapes = [shape for shape in shapes if shape.slide_us in slides]
    rows = run_gpu_benchmarks(shapes, tuples=tuples, budget_s=budget)
    with open("bench_gpu.json", "w") as handle:
        json.dump(rows, handle, indent=1)


if __name__ == "__main__":
    main()
