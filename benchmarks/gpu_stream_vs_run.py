"""The output-heavy GPU shape (w = 1 s, s = 100 us, 1000 keys) through `Query.run()` (every
result kept) and `Query.stream()` (each result dropped as it comes, so its memory is free for
the next), alternating in one process, three runs each, SUM and the six aggregates
(docs/performance/gpu.md, "Tried, not kept: result memory faulted in ahead on background
threads"). `python benchmarks/gpu_stream_vs_run.py`; needs CuPy and a GPU.
"""

from __future__ import annotations

import statistics

from mangonel.bench_gpu import (
    MILLION,
    OUTPUT_HEAVY_RATE,
    PublicShape,
    batches_of,
    dataset,
    public_query,
    timed_run,
    timed_stream,
)


def main() -> None:
    tuples = 40_000_000
    for aggregate in ("SUM", "ALL6"):
        shape = PublicShape(100, 1000, aggregate, 0, MILLION, OUTPUT_HEAVY_RATE)
        batches = batches_of(dataset(shape, tuples, 7), shape.batch_rows)
        runs, streams = [], []
        for _ in range(3):
            query = public_query(shape, batches)
            seconds, table = timed_run(query, batches)
            rows = table.num_rows
            del table
            runs.append(tuples / seconds / 1e6)
            seconds, streamed = timed_stream(public_query(shape, batches), batches)
            streams.append(tuples / seconds / 1e6)
            assert streamed == rows, (streamed, rows)
        print(
            f"{shape.name}: run() {statistics.median(runs):.1f} M/s "
            f"({', '.join(f'{r:.1f}' for r in runs)}); stream() {statistics.median(streams):.1f} "
            f"M/s ({', '.join(f'{r:.1f}' for r in streams)}); rows {rows}"
        )


if __name__ == "__main__":
    main()
