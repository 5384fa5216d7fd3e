"""The CPU backend's operators, read by `runtime.operators.registry` (imported by name):
which operator runs each plan node on the CPU, and the CPU kernels they call."""

from __future__ import annotations

from mangonel.compiler import physical as ph
from mangonel.compiler.options import GpuOptions
from mangonel.runtime.cpu.join import CpuJoinKernels
from mangonel.runtime.cpu.kernels import CpuKernels
from mangonel.runtime.cpu.project import CpuProjectEvaluator
from mangonel.runtime.operators.join import make_join_operator
from mangonel.runtime.operators.project import registrations
from mangonel.runtime.operators.registry import Registration
from mangonel.runtime.operators.window import make_window_operator


def new_kernels(gpu_options: GpuOptions | None = None) -> CpuKernels:
    return CpuKernels()  # the CPU kernels have no options


def new_join_kernels() -> CpuJoinKernels:
    return CpuJoinKernels()


OPERATORS: dict[type, Registration] = {
    ph.WindowAggregateExec: Registration(make_window_operator, reads_stream=True),
    ph.WindowJoinExec: Registration(make_join_operator(CpuJoinKernels), reads_stream=True),
    ph.JoinAggregateExec: Registration(make_join_operator(CpuJoinKernels), reads_stream=True),
    **registrations(CpuProjectEvaluator),
}
