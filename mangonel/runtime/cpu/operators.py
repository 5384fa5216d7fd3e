"""The CPU backend's operators, read by `runtime.operators.registry` (imported by name):
which operator runs each plan node on the CPU, and the CPU kernels they call."""

from __future__ import annotations

import pyarrow as pa

from mangonel.compiler import physical as ph
from mangonel.compiler.options import GpuOptions
from mangonel.runtime.cpu.backend import CpuKernels
from mangonel.runtime.cpu.project import CpuProjectEvaluator
from mangonel.runtime.operators.project import FilterOperator, ProjectOperator
from mangonel.runtime.operators.registry import Registration, StepKernels
from mangonel.runtime.operators.window import make_window_operator


def new_kernels(gpu_options: GpuOptions | None = None) -> CpuKernels:
    return CpuKernels()  # the CPU kernels have no options


def _filter(node: ph.FilterExec, schema: pa.Schema, kernels: StepKernels) -> FilterOperator:
    return FilterOperator(node.predicate, schema, CpuProjectEvaluator())


def _project(node: ph.ProjectExec, schema: pa.Schema, kernels: StepKernels) -> ProjectOperator:
    return ProjectOperator(node.outputs, schema, CpuProjectEvaluator())


OPERATORS: dict[type, Registration] = {
    ph.WindowAggregateExec: Registration(make_window_operator, reads_stream=True),
    ph.FilterExec: Registration(_filter),
    ph.ProjectExec: Registration(_project),
}
