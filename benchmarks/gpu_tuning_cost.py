"""What the holistic firing's online tuner costs a run (docs/performance/holistic-gpu.md, "GPU
MEDIAN above 300 M/s"): the public path's MEDIAN shape (w = 1 s, s = 10 ms, 1000 keys, 1 M-row Arrow
batches, 10 M tuples a second) with the tuner online, off, and with the GPU form fixed (only
the windows per launch tuned), interleaved, three runs each; the last round prints each
tuner's state and the configurations it compared.

`python benchmarks/gpu_tuning_cost.py [aggregate] [tuples]` (default MEDIAN, 100 M). Each run
is a new query (a new tuner), after a one-batch warm-up, as `mangonel bench` times it. Needs
CuPy and a GPU.
"""

from __future__ import annotations

import sys

from mangonel.bench_gpu import PublicShape, batches_of, dataset, public_query, timed_run
from mangonel.compiler.options import TuningOptions

ROUNDS = 3
VARIANTS = {
    "online": "online",
    "off": "off",
    "form fixed": TuningOptions(gpu_form="warp-per-window"),
}


def main() -> None:
    aggregate = sys.argv[1] if len(sys.argv) > 1 else "MEDIAN"
    tuples = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000_000
    shape = PublicShape(10_000, 1000, aggregate, 0, 1_000_000, 10_000_000)
    whole = dataset(shape, tuples, 1)
    batches = batches_of(whole, shape.batch_rows)
    for round_number in range(ROUNDS):
        for name, tuning in VARIANTS.items():
            query = public_query(shape, batches, tuning=tuning)
            seconds, _ = timed_run(query, batches)
            print(f"round {round_number} {name:10s} {tuples / seconds / 1e6:7.1f} M/s", flush=True)
            tuner = query.metrics.tuning
            if round_number == ROUNDS - 1 and tuner is not None:
                print(f"    {tuner.state}, {tuner.config}, {tuner.steps} steps")
                for config, cost, centre in tuner.tried:
                    print(f"    tried {config}: {cost:.3g} s a value read, centre {centre:.3g}")


if __name__ == "__main__":
    main()
