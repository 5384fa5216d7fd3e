"""The GPU backend's operators, read by `runtime.operators.registry` (imported by name, only
for plans that place a step on the GPU: importing this loads CuPy)."""

from __future__ import annotations

from mangonel.compiler import physical as ph
from mangonel.compiler.options import GpuOptions
from mangonel.runtime.gpu.join import GpuJoinKernels
from mangonel.runtime.gpu.kernels import GpuKernels
from mangonel.runtime.gpu.project import GpuProjectEvaluator
from mangonel.runtime.operators.join import JoinOperator
from mangonel.runtime.operators.project import registrations
from mangonel.runtime.operators.registry import Registration, StepKernels, new_join_kernels
from mangonel.runtime.operators.window import make_window_operator


def new_kernels(gpu_options: GpuOptions | None = None) -> GpuKernels:
    return GpuKernels(options=gpu_options)


def _join_operator(
    node: ph.WindowJoinExec | ph.JoinAggregateExec, input_schema: object, kernels: StepKernels
) -> JoinOperator:
    """The join driver over the GPU join kernels (placed here only with `gpu_join`), their
    host faces the CPU's, their launch options the plan's GPU kernels'."""
    if isinstance(node, ph.JoinAggregateExec) and node.factorised is not None:
        # factorised: the sides are window aggregations (on the GPU kernels where placed
        # there), their cells combined on the host with the CPU's join kernels
        return JoinOperator(node, new_join_kernels("cpu"), kernels)
    options = getattr(kernels("join"), "options", None)
    return JoinOperator(node, GpuJoinKernels(node, new_join_kernels("cpu"), options), kernels)


OPERATORS: dict[type, Registration] = {
    ph.WindowAggregateExec: Registration(make_window_operator, reads_stream=True),
    ph.WindowJoinExec: Registration(_join_operator, reads_stream=True),
    ph.JoinAggregateExec: Registration(_join_operator, reads_stream=True),
    **registrations(GpuProjectEvaluator),
}
