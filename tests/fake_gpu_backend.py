"""A stand-in "gpu" backend for tests on machines without a GPU: the CPU kernels, less the
steps the real GPU kernels lack (`segment_windows`, `preaggregate`), counting the lifts they
run. `runtime.operators.registry` loads it when a test points BACKEND_MODULES["gpu"] here, so
a test sees which steps the operators send to which backend's kernels."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from mangonel.compiler import physical as ph
from mangonel.runtime.cpu import operators as cpu_operators
from mangonel.runtime.cpu.kernels import CpuKernels
from mangonel.runtime.operators.registry import Registration
from mangonel.runtime.operators.window import make_window_operator

LIFTS = []  # one entry per lift the fake kernels ran (any instance)
SESSION_CALLS = []  # the session kernels' calls ("batch", "assign", "combine"), in order
# set True to stage "in the background" as the GPU's copy worker does: `prefetch` returns a
# call for the extremes, and STAGING logs ("prefetch" | "extremes" | "lift", rows) in order
BACKGROUND = [False]
STAGING: list[tuple[str, int]] = []


class _Staging:
    """A staging still running until its extremes are asked for (as the copy worker's may
    be when the batch before ends)."""

    def __init__(self, event_time: pa.Array, rows: int) -> None:
        self.event_time, self.rows, self.ready = event_time, rows, False

    def __call__(self):  # noqa: ANN204 - the copy pass's measure, asked for later
        STAGING.append(("extremes", self.rows))
        self.ready = True
        if self.event_time.null_count == len(self.event_time):
            return None
        low, high = pc.min_max(self.event_time.cast(pa.int64())).values()
        return low.as_py(), high.as_py()


class FakeGpuKernels(CpuKernels):
    @property
    def stages_in_background(self) -> bool:
        return BACKGROUND[0]

    def prefetch(self, lift, window, batch):  # noqa: ANN001, ANN201
        if not BACKGROUND[0]:
            return super().prefetch(lift, window, batch)
        STAGING.append(("prefetch", batch.num_rows))
        return _Staging(batch.column(lift.scan.stream.event_time), batch.num_rows)

    def lift_tuples(self, lift, batch, key_words=False, extremes=True):  # noqa: ANN001, ANN201
        LIFTS.append(batch.num_rows)
        return super().lift_tuples(lift, batch, key_words, extremes)

    def lift_merge(
        self, lift, window, batch, keys, target, watermark, while_running=None, **options
    ):  # noqa: ANN001, ANN003, ANN201, E501
        LIFTS.append(batch.num_rows)
        STAGING.append(("lift", batch.num_rows))
        return super().lift_merge(
            lift, window, batch, keys, target, watermark, while_running, **options
        )

    def batch_sessions(self, *arguments):  # noqa: ANN002, ANN201
        SESSION_CALLS.append("batch")
        return super().batch_sessions(*arguments)

    def assign_sessions(self, *arguments, **options):  # noqa: ANN002, ANN003, ANN201
        SESSION_CALLS.append("assign")
        return super().assign_sessions(*arguments, **options)

    def combine_sessions(self, *arguments):  # noqa: ANN002, ANN201
        SESSION_CALLS.append("combine")
        return super().combine_sessions(*arguments)

    def segment_windows(self, *arguments):  # noqa: ANN002, ANN201
        raise AssertionError("the count-window tree is placed on the CPU")

    def preaggregate(self, *arguments):  # noqa: ANN002, ANN201
        raise AssertionError("stage 1's pre-aggregation is placed on the CPU")


def new_kernels(gpu_options=None) -> FakeGpuKernels:  # noqa: ANN001
    return FakeGpuKernels()


# Filter and Project evaluate with the CPU's evaluator here (the GPU's needs CuPy)
OPERATORS = {
    ph.WindowAggregateExec: Registration(make_window_operator, reads_stream=True),
    ph.FilterExec: cpu_operators.OPERATORS[ph.FilterExec],
    ph.ProjectExec: cpu_operators.OPERATORS[ph.ProjectExec],
}
