"""The GPU backend's operators, read by `runtime.operators.registry` (imported by name, only
for plans that place a step on the GPU: importing this loads CuPy)."""

from __future__ import annotations

import pyarrow as pa

from mangonel.compiler import physical as ph
from mangonel.compiler.options import GpuOptions
from mangonel.runtime.gpu.kernels import GpuKernels
from mangonel.runtime.gpu.project import GpuProjectEvaluator
from mangonel.runtime.operators.project import FilterOperator, ProjectOperator
from mangonel.runtime.operators.registry import Registration, StepKernels
from mangonel.runtime.operators.window import make_window_operator


def new_kernels(gpu_options: GpuOptions | None = None) -> GpuKernels:
    return GpuKernels(options=gpu_options)


def _filter(node: ph.FilterExec, schema: pa.Schema, kernels: StepKernels) -> FilterOperator:
    return FilterOperator(node.predicate, schema, GpuProjectEvaluator())


def _project(node: ph.ProjectExec, schema: pa.Schema, kernels: StepKernels) -> ProjectOperator:
    return ProjectOperator(node.outputs, schema, GpuProjectEvaluator())


# Filter and Project run here when the planner placed them on the GPU (every expression has
# a CUDA rendering: `codegen_project.gpu_unsupported_reason`); otherwise on the CPU's.
OPERATORS: dict[type, Registration] = {
    ph.WindowAggregateExec: Registration(make_window_operator, reads_stream=True),
    ph.FilterExec: Registration(_filter),
    ph.ProjectExec: Registration(_project),
}
