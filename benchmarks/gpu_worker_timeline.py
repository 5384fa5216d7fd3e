"""The copy worker against the driver on the GPU public path, job by job (docs/performance/gpu.md,
"Tried, not kept: the copy pass's threads, the switch interval, ...").

`python benchmarks/gpu_worker_timeline.py TUPLES SHAPE... [--copy-threads N]`, each SHAPE
`slide_us:keys:aggregate:delay_us:batch_rows:rate` as in `gpu_public_timers.py`. Per shape,
two untimed runs of `bench_gpu.run_public_shape` (the public API over ordinary Arrow batches),
then one timed run whose copy-worker jobs (`wire.CopyWorker.submit`: when each was submitted,
when the worker's thread began it, when its loop returned, the GIL in hand again) and the
driver's waits for them (`wire.Pending.result`) are summarised: how long a job queued behind
the one before, how long it ran, how long the worker sat between jobs, and how long the driver
waited a batch. `--copy-threads N` runs the copy pass in N slices instead of one per core.
Needs CuPy and a GPU.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from gpu_public_timers import parse

from mangonel.bench_gpu import batches_of, dataset, run_public_shape

JOBS: list[tuple[float, float, float]] = []  # (submitted, begun, returned), perf_counter s
WAITS: list[tuple[float, float, bool]] = []  # (called, returned, already done)
EDGE = 2  # jobs and waits left out at each end (the run's start and its end of input)


def instrument() -> None:
    """Record every copy-worker job and every wait for one (call before the first job: the
    worker's thread is made on first use)."""
    from mangonel.runtime.gpu import wire

    submit, result = wire.CopyWorker.submit, wire.Pending.result

    def timed_submit(
        self: Any,  # noqa: ANN401
        loop: Callable[..., Any],
        arguments: tuple,
        finish: Callable[[Any], Any],
    ) -> Any:  # noqa: ANN401
        submitted = time.perf_counter()

        def timed_loop(*values: Any) -> Any:  # noqa: ANN401
            begun = time.perf_counter()
            try:
                return loop(*values)
            finally:
                JOBS.append((submitted, begun, time.perf_counter()))

        return submit(self, timed_loop, arguments, finish)

    def timed_result(self: Any) -> Any:  # noqa: ANN401
        called, done = time.perf_counter(), self.ready
        try:
            return result(self)
        finally:
            WAITS.append((called, time.perf_counter(), done))

    wire.CopyWorker.submit = timed_submit
    wire.Pending.result = timed_result


def summarize(
    jobs: list[tuple[float, float, float]], waits: list[tuple[float, float, bool]], batches: int
) -> dict[str, float]:
    """ms figures of a run's jobs and waits (EDGE of each left out at both ends)."""
    kept = np.array(jobs[EDGE:-EDGE] or [(0.0, 0.0, 0.0)], dtype=float) * 1e3
    queued = kept[:, 1] - kept[:, 0]
    ran = kept[:, 2] - kept[:, 1]
    between = kept[1:, 1] - kept[:-1, 2] if len(kept) > 1 else np.zeros(1)
    waited = np.array([(end - start) * 1e3 for start, end, _ in waits[EDGE:-EDGE]] or [0.0])
    done = [already for _, _, already in waits[EDGE:-EDGE]] or [False]
    return {
        "jobs": float(len(jobs)),
        "queued_median": float(np.median(queued)),
        "ran_median": float(np.median(ran)),
        "ran_p10": float(np.percentile(ran, 10)),
        "ran_p90": float(np.percentile(ran, 90)),
        "between_median": float(np.median(between)),
        "between_mean": float(between.mean()),
        "wait_mean": float(waited.mean()),
        "already_done": float(np.mean(done)),
        "waited_a_batch": float(waited.sum() / max(batches, 1)),
    }


def report(title: str, tuples: int, seconds: float, batches: int, figures: dict) -> None:
    print(
        f"== {title}: {tuples / seconds / 1e6:.1f} M tuples/s, "
        f"{seconds / batches * 1e3:.3f} ms a batch, {int(figures['jobs'])} jobs\n"
        f"   a job queued {figures['queued_median']:.3f} ms (median), ran "
        f"{figures['ran_median']:.3f} ms (p10 {figures['ran_p10']:.3f}, p90 "
        f"{figures['ran_p90']:.3f}); the worker between jobs {figures['between_median']:.3f} "
        f"ms (median), {figures['between_mean']:.3f} (mean)\n"
        f"   the driver waited {figures['wait_mean']:.3f} ms a wait ("
        f"{figures['already_done'] * 100:.0f} % already done), {figures['waited_a_batch']:.3f} "
        f"ms a batch"
    )


def main() -> None:
    arguments = sys.argv[1:]
    if "--copy-threads" in arguments:
        at = arguments.index("--copy-threads")
        threads = int(arguments[at + 1])
        del arguments[at : at + 2]
        from mangonel.runtime.gpu import wire

        wire.default_threads = lambda: threads
    instrument()
    tuples = int(arguments[0])
    for text in arguments[1:]:
        shape = parse(text)
        batches = batches_of(dataset(shape, tuples, 7), shape.batch_rows)
        for _ in range(2):
            run_public_shape(shape, batches)
        JOBS.clear()
        WAITS.clear()
        seconds, rows, _ = run_public_shape(shape, batches)
        figures = summarize(list(JOBS), list(WAITS), len(batches))
        report(
            f"{shape.name} rate={shape.rate}, rows {rows}", tuples, seconds, len(batches), figures
        )


if __name__ == "__main__":
    main()
