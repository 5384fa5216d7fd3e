"""Every kernel of a public-API run, timed by Nsight Compute (docs/performance/holistic-gpu.md, "The
GPU path's kernels timed one by one"): how much of a batch the device works.

    ncu --clock-control none --metrics gpu__time_duration.sum --csv --log-file K.csv \\
        python benchmarks/gpu_kernel_times.py run "APPROX_PERCENTILE(value, 0.5)" 10000 6000000
    python benchmarks/gpu_kernel_times.py summarize K.csv

`run AGGREGATE SLIDE_US TUPLES`: the bench's public shape (w = 1 s, 1000 keys, 1 M-row
Arrow batches, 10 M tuples a second) through `Session.sql().run()` after its one-batch
warm-up (the warm-up's kernels are counted too: ncu sees the whole process). `summarize
CSV`: the kernels' summed durations and launch counts by name, largest first. `run` needs
CuPy and a GPU; `summarize` needs neither.
"""

from __future__ import annotations

import collections
import csv
import sys

METRIC = "gpu__time_duration.sum"
_TO_MS = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0}


def kernel_times(lines: list[str]) -> tuple[dict[str, float], collections.Counter]:
    """(ms by kernel name, launches by kernel name) of ncu's CSV log (its `==PROF==` lines
    and anything before the header are skipped)."""
    totals: dict[str, float] = collections.defaultdict(float)
    launches: collections.Counter = collections.Counter()
    header = None
    for row in csv.reader(lines):
        if "Kernel Name" in row and "Metric Value" in row:
            header = row
            continue
        if header is None or len(row) != len(header):
            continue
        record = dict(zip(header, row, strict=True))
        if record.get("Metric Name") != METRIC:
            continue
        unit = record.get("Metric Unit", "nsecond")
        if unit not in _TO_MS:
            raise ValueError(f"unknown unit {unit!r} for {METRIC}")
        value = float(record["Metric Value"].replace(",", ""))
        totals[record["Kernel Name"]] += value * _TO_MS[unit]
        launches[record["Kernel Name"]] += 1
    return dict(totals), launches


def summary(lines: list[str], top: int = 30) -> str:
    totals, launches = kernel_times(lines)
    total, count = sum(totals.values()), sum(launches.values())
    out = [f"total kernel time {total:.3f} ms over {count} launches"]
    for name, ms in sorted(totals.items(), key=lambda item: -item[1])[:top]:
        out.append(f"{ms:9.3f} ms {launches[name]:6d}x  {name[:100]}")
    return "\n".join(out)


def run(aggregate: str, slide_us: int, tuples: int) -> None:
    from mangonel.bench_gpu import PublicShape, batches_of, dataset, public_query, timed_run

    shape = PublicShape(slide_us, 1000, aggregate, 0, 1_000_000, 10_000_000)
    batches = batches_of(dataset(shape, tuples, 1), shape.batch_rows)
    query = public_query(shape, batches)
    seconds, table = timed_run(query, batches)
    rate = tuples / seconds / 1e6
    print(f"{shape.name}: {rate:.2f} M/s (under the profiler), {table.num_rows} rows")


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "summarize":
        with open(sys.argv[2]) as log:
            print(summary(log.read().splitlines()))
    elif len(sys.argv) == 5 and sys.argv[1] == "run":
        run(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
