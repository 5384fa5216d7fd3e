"""The GPU backend's operators, read by `runtime.operators.registry` (imported by name, only
for plans that place a step on the GPU: importing this loads CuPy)."""

from __future__ import annotations

from mangonel.compiler import physical as ph
from mangonel.runtime.gpu.backend import GpuKernels
from mangonel.runtime.operators.registry import Registration
from mangonel.runtime.operators.window import make_window_operator


def new_kernels() -> GpuKernels:
    return GpuKernels()


# Filter and Project are placed on the CPU in GPU plans (host evaluation) until their GPU
# operators are registered here.
OPERATORS: dict[type, Registration] = {
    ph.WindowAggregateExec: Registration(make_window_operator, reads_stream=True),
}
