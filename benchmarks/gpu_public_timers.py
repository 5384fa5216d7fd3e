"""Wall-clock timers around the GPU public path's pieces, per batch, for several shapes
(docs/performance/gpu.md, "Public path: where a batch's time goes, by timers").

`python benchmarks/gpu_public_timers.py TUPLES SHAPE...`, each SHAPE
`slide_us:keys:aggregate:delay_us:batch_rows:rate` (e.g. `10000:1000:MEDIAN:0:1000000:10000000`;
the aggregate may be the bench's Python function, `1000000:1000:trimmed_mean:0:1000000:10000000`).
`python benchmarks/gpu_public_timers.py --join TUPLES LABEL...` times `mangonel bench
--join`'s shapes by label (both streams' rows, 1 M-row arrivals, 10 M rows a second of event
time a stream; `bench_join.run_engine`, ms an arrival).
`python benchmarks/gpu_public_timers.py --harness TUPLES SHAPE...` times the labelled
pinned-source harness instead (`gpu_bench.run_shape`, SUM), each SHAPE
`slide_us:keys:delay_us:batch_mib[:narrow]` (e.g. `10000:1000:0:32:narrow`).
Every method of the driver, operator, kernel, staging and holistic classes listed in TARGETS,
and each function in IMPORTED where the module that imported it calls it, is wrapped with an
inclusive wall-clock timer (not cProfile, which inflates every small call); per shape, two
untimed runs of `bench_gpu.run_public_shape` (the public API over ordinary Arrow batches),
then one timed run, whose pieces (and the garbage collector's passes) print as ms a batch,
calls a batch and the longest single call, largest first (the first 28, or
MANGONEL_TIMER_LINES), then the device time of the DEVICE_TARGETS calls (CUDA events). Times
nest (a caller's includes its callees'), and the run counted includes
`run_public_shape`'s one-batch warm-up. Needs CuPy and a GPU.
"""

from __future__ import annotations

import functools
import gc
import importlib
import inspect
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from mangonel.bench_gpu import PublicShape, batches_of, dataset, run_public_shape
from mangonel.bench_join import CollectorTime

TOTALS: dict[str, float] = defaultdict(float)
CALLS: dict[str, int] = defaultdict(int)
# the longest single call: a piece whose total is one slow call (a module loaded at the first
# firing, a garbage collection) reads apart from one that is slow every batch
LONGEST: dict[str, float] = defaultdict(float)
TARGETS = [
    ("mangonel.runtime.local.query", "LocalQuery"),
    ("mangonel.runtime.operators.window", "TimeWindowOperator"),
    ("mangonel.runtime.operators.base", "OperatorBase"),
    ("mangonel.runtime.operators.project", "ProjectOperator"),
    ("mangonel.runtime.operators.project", "FilterOperator"),
    ("mangonel.runtime.operators.holistic", "HolisticTimeWindows"),
    ("mangonel.runtime.operators.results", None),
    ("mangonel.runtime.gpu.kernels", "GpuKernels"),
    ("mangonel.runtime.gpu.state", "GpuPaneState"),
    ("mangonel.runtime.gpu.keys", "GpuKeyMap"),
    ("mangonel.runtime.gpu.staging", "Stager"),
    ("mangonel.runtime.gpu.staging", "PendingBatch"),
    ("mangonel.runtime.gpu.holistic", "GpuHolistic"),
    ("mangonel.runtime.gpu.sketches", "GpuSketches"),
    ("mangonel.runtime.gpu.project", None),
    ("mangonel.runtime.operators.sketch_panes", None),
    ("mangonel.runtime.operators.sketch_ring", None),
    ("mangonel.runtime.operators.holistic_firing", None),
    ("mangonel.runtime.operators.holistic_evaluate", None),
    # the window join (`--join`): its operator, the factorised plan's sides and firing
    ("mangonel.runtime.operators.join", "JoinOperator"),
    ("mangonel.runtime.operators.join_factor", None),
]
# functions a module imported by name (`from x import f`): wrapped where they are called
IMPORTED = [
    ("mangonel.runtime.operators.holistic", name)
    for name in ("pane_span", "sort_panes", "evaluate_later", "in_row_order", "finalize")
] + [
    # the output path's pieces inside `GpuPaneState._finalize_cells`
    ("mangonel.runtime.gpu.state", "parallel_copy"),
    ("mangonel.runtime.gpu.state", "array_with_nulls"),
    ("mangonel.runtime.gpu.pinned", "borrow"),
    # every read of the sketch kernels (a firing's answer ends in one): the copy and its wait
    # apart from the rest of `GpuSketches._estimates`, and the host's finish of the estimates
    ("mangonel.runtime.gpu.sketches", "_host"),
    ("mangonel.runtime.gpu.sketches", "hll_estimate_of_sums"),
]
# methods whose device work is timed too: CUDA events on the current stream before and after
# each call (the stream's time between them: the work the call enqueued, and any time the
# stream waits for the call's host side; work queued before the call is done before the
# first event is), summed once the timed run is done
DEVICE_TARGETS = (
    [
        ("mangonel.runtime.gpu.holistic", "GpuHolistic", name)
        for name in (
            "split_panes",
            "sort_panes",
            "window_runs",
            "holistic_select_later",
            "python_window",
        )
    ]
    + [
        # the HLL ring's calls (APPROX_COUNT_DISTINCT): a firing's answer ends in one read, which
        # waits for whatever these queued (the timers of 2026-12-07 put that wait at ~4 ms a firing)
        ("mangonel.runtime.gpu.sketches", "GpuSketches", name)
        for name in ("ring_update", "ring_scan", "ring_answer_scans", "ring_clear")
    ]
    + [
        ("mangonel.runtime.gpu.kernels", "GpuKernels", name)
        for name in ("lift_merge", "lift_tuples")
    ]
)
EVENTS: dict[str, list[tuple[Any, Any]]] = defaultdict(list)
TIMING = [False]  # only the timed run counts
LINES = 28  # pieces printed per shape (MANGONEL_TIMER_LINES)


def _wrap(owner: type, name: str, function: Callable, label: str) -> None:
    @functools.wraps(function)
    def timed(*arguments: Any, **keywords: Any) -> Any:  # noqa: ANN401
        if not TIMING[0]:
            return function(*arguments, **keywords)
        started = time.perf_counter()
        try:
            return function(*arguments, **keywords)
        finally:
            _count(label, time.perf_counter() - started)

    setattr(owner, name, timed)


def _count(label: str, seconds: float) -> None:
    TOTALS[label] += seconds
    CALLS[label] += 1
    LONGEST[label] = max(LONGEST[label], seconds)


def _wrap_device(owner: type, name: str, label: str) -> None:
    import cupy

    function = getattr(owner, name)

    @functools.wraps(function)
    def timed(*arguments: Any, **keywords: Any) -> Any:  # noqa: ANN401
        if not TIMING[0]:
            return function(*arguments, **keywords)
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        try:
            return function(*arguments, **keywords)
        finally:
            end.record()
            EVENTS[label].append((start, end))

    setattr(owner, name, timed)


def device_totals() -> dict[str, float]:
    """Seconds of device time per DEVICE_TARGETS label in the timed run."""
    if not EVENTS:
        return {}
    import cupy

    cupy.cuda.Device().synchronize()
    return {
        label: sum(cupy.cuda.get_elapsed_time(a, b) for a, b in pairs) / 1e3
        for label, pairs in EVENTS.items()
    }


def instrument() -> None:
    """Wrap every plain method of the TARGETS classes (a None class: all of the module's)."""
    for module_name, class_name in TARGETS:
        module = importlib.import_module(module_name)
        owners = (
            [getattr(module, class_name)]
            if class_name
            else [
                owner
                for _, owner in inspect.getmembers(module, inspect.isclass)
                if owner.__module__ == module_name
            ]
        )
        for owner in owners:
            for name, function in list(vars(owner).items()):
                static = isinstance(inspect.getattr_static(owner, name), staticmethod | classmethod)
                if inspect.isfunction(function) and not name.startswith("__") and not static:
                    _wrap(owner, name, function, f"{owner.__name__}.{name}")
    for module_name, name in IMPORTED:
        module = importlib.import_module(module_name)
        _wrap(module, name, getattr(module, name), name)
    for module_name, class_name, name in DEVICE_TARGETS:  # outside the wall-clock timer
        _wrap_device(getattr(importlib.import_module(module_name), class_name), name, name)


def parse(text: str) -> PublicShape:
    """slide_us:keys:aggregate:delay_us:batch_rows:rate"""
    slide, keys, aggregate, delay, batch_rows, rate = text.split(":")
    return PublicShape(int(slide), int(keys), aggregate, int(delay), int(batch_rows), int(rate))


def parse_harness(text: str):  # noqa: ANN201 - a gpu_bench.GpuShape
    """slide_us:keys:delay_us:batch_mib[:narrow] (the pinned-source harness's shape; `narrow`:
    INT keys and FLOAT values, 16 bytes a tuple at the source)"""
    from mangonel.runtime.local.gpu_bench import GpuShape

    slide, keys, delay, mib, *rest = text.split(":")
    if rest not in ([], ["narrow"]):
        raise ValueError(
            f"a harness shape is slide_us:keys:delay_us:batch_mib[:narrow], not {text}"
        )
    return GpuShape(int(slide), int(keys), int(delay), int(mib) << 20, narrow=rest == ["narrow"])


def report(title: str, tuples: int, seconds: float, count: int, untimed: list[float]) -> None:
    """The timed run's pieces, ms a batch, calls a batch and the longest call, largest first;
    then device time."""
    lines = int(os.environ.get("MANGONEL_TIMER_LINES", LINES))
    print(
        f"== {title}: untimed {[round(x, 1) for x in untimed]} M/s; "
        f"timed {tuples / seconds / 1e6:.1f} M/s, {seconds / count * 1e3:.3f} ms/batch"
    )
    for label, total in sorted(TOTALS.items(), key=lambda item: -item[1])[:lines]:
        print(
            f"   {total / count * 1e3:8.3f} ms/b {CALLS[label] / count:7.2f} calls/b "
            f"{LONGEST[label] * 1e3:8.3f} ms longest  {label}"
        )
    for label, total in sorted(device_totals().items(), key=lambda item: -item[1]):
        calls = len(EVENTS[label]) / count
        print(f"   {total / count * 1e3:8.3f} ms/b {calls:7.2f} calls/b  device: {label}")


def _collection(generation: int, seconds: float) -> None:
    """A pass of the garbage collector in the timed run, as one more piece (a pass inside a
    timed call is in that call's time too)."""
    _count(f"garbage collection (generation {generation})", seconds)


def timed(run: Callable[[], tuple[float, int, int]]) -> tuple[float, int, int, list[float]]:
    """Two untimed runs, then one timed: (seconds, batches, result rows, untimed seconds)."""
    untimed = [run()[0] for _ in range(2)]
    TOTALS.clear()
    CALLS.clear()
    LONGEST.clear()
    EVENTS.clear()
    TIMING[0] = True
    collections = CollectorTime(_collection)
    gc.callbacks.append(collections)
    try:
        seconds, count, rows = run()
    finally:
        TIMING[0] = False
        gc.callbacks.remove(collections)
    return seconds, count, rows, untimed


def main() -> None:
    arguments = sys.argv[1:]
    harness = arguments[:1] == ["--harness"]
    join = arguments[:1] == ["--join"]
    if harness or join:
        arguments = arguments[1:]
    tuples = int(arguments[0])
    instrument()
    if join:  # `mangonel bench --join`'s shapes by label, 1 M-row arrivals, 10 M rows/s a stream
        from mangonel.bench_join import default_join_shapes, make_arrivals, run_engine

        known = {shape.label: shape for shape in default_join_shapes()}
        for label in arguments[1:]:
            shape = known[label]
            arrivals = make_arrivals(shape, tuples, 10_000_000, 1_000_000, 1)

            def run_join(shape=shape, arrivals=arrivals) -> tuple[float, int, int]:  # noqa: ANN001
                run = run_engine(shape, arrivals, "gpu")
                return run.seconds, len(arrivals), run.rows_out

            seconds, count, rows, untimed = timed(run_join)
            rates = [tuples / s / 1e6 for s in untimed]
            report(f"join {label!r}, rows {rows} (per arrival)", tuples, seconds, count, rates)
        return
    if harness:  # the labelled pinned-source harness: `gpu_bench.run_shape` over views of it
        from mangonel.runtime.local.gpu_bench import PinnedSource, run_shape

        shapes = [parse_harness(text) for text in arguments[1:]]
        source = PinnedSource(tuples, narrow=any(shape.narrow for shape in shapes))
        for shape in shapes:

            def run_harness(shape=shape) -> tuple[float, int, int]:  # noqa: ANN001
                row = run_shape(shape, source, tuples)
                return row["seconds"], row["batches"], row["rows_out"]

            seconds, count, rows, untimed = timed(run_harness)
            rates = [tuples / s / 1e6 for s in untimed]
            report(
                f"{shape.name} (pinned-source harness), rows {rows}", tuples, seconds, count, rates
            )
        return
    for text in arguments[1:]:
        shape = parse(text)
        batches = batches_of(dataset(shape, tuples, 7), shape.batch_rows)

        def run_public(shape=shape, batches=batches) -> tuple[float, int, int]:  # noqa: ANN001
            seconds, rows, _ = run_public_shape(shape, batches)
            return seconds, len(batches), rows

        seconds, count, rows, untimed = timed(run_public)
        rates = [tuples / s / 1e6 for s in untimed]
        report(f"{shape.name} rate={shape.rate}, rows {rows}", tuples, seconds, count, rates)


if __name__ == "__main__":
    main()
