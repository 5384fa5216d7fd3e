"""The GPU backend's operators, read by `runtime.operators.registry` (imported by name, only
for plans that place a step on the GPU: importing this loads CuPy)."""

from __future__ import annotations

from mangonel.compiler import physical as ph
from mangonel.compiler.options import GpuOptions
from mangonel.runtime.gpu.kernels import GpuKernels
from mangonel.runtime.gpu.project import GpuProjectEvaluator
from mangonel.runtime.operators.project import registrations
from mangonel.runtime.operators.registry import Registration
from mangonel.runtime.operators.window import make_window_operator


def new_kernels(gpu_options: GpuOptions | None = None) -> GpuKernels:
    return GpuKernels(options=gpu_options)


OPERATORS: dict[type, Registration] = {
    ph.WindowAggregateExec: Registration(make_window_operator, reads_stream=True),
    **registrations(GpuProjectEvaluator),
}
