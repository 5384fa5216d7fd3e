"""The CPU backend's operators, read by `runtime.operators.registry` (imported by name):
which operator runs each plan node on the CPU, and the CPU kernels they call."""

from __future__ import annotations

from mangonel.compiler import physical as ph
from mangonel.runtime.cpu.backend import CpuKernels
from mangonel.runtime.operators.project import FilterOperator, ProjectOperator
from mangonel.runtime.operators.registry import Registration
from mangonel.runtime.operators.window import make_window_operator


def new_kernels() -> CpuKernels:
    return CpuKernels()


OPERATORS: dict[type, Registration] = {
    ph.WindowAggregateExec: Registration(make_window_operator, reads_stream=True),
    ph.FilterExec: Registration(FilterOperator),
    ph.ProjectExec: Registration(ProjectOperator),
}
