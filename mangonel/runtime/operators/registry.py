"""(plan node type, backend) -> operator factory, and the kernels of each backend.

Backend packages list their operators in a module this registry imports by name, lazily
(`mangonel.runtime.<backend>.operators`, attributes `OPERATORS` and `new_kernels`): the driver
package imports no backend, and CuPy loads only when a plan places a step on the GPU. To add
an operator, write it (a driver under runtime/operators, or backend code) and add its node
type to `OPERATORS` of every backend that runs it; to add a backend, add its module name to
`BACKEND_MODULES`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pyarrow as pa

from mangonel.compiler import physical as ph
from mangonel.compiler.options import GpuOptions
from mangonel.errors import BackendUnavailableError
from mangonel.runtime.operators.kernels import WindowKernels
from mangonel.runtime.operators.protocol import Operator

BACKEND_MODULES = {
    "cpu": "mangonel.runtime.cpu.operators",
    "gpu": "mangonel.runtime.gpu.operators",
}


class StepKernels:
    """The kernels of each step of one operator, as the node's placements say: a step placed
    on the CPU gets the CPU kernels even in a GPU plan. A step without a placement (the split
    form's stage-1 steps outside Spark's planner) runs on the node's backend. One kernels
    object per backend is shared by every operator of a tree (`kernels_of`)."""

    def __init__(
        self,
        placements: tuple[ph.Placement, ...],
        backend: str,
        kernels_of: Callable[[str], WindowKernels],
    ) -> None:
        self.placements = {p.step: p for p in placements}
        self.backend = backend
        self.kernels_of = kernels_of

    def backend_of(self, step: str) -> str:
        placement = self.placements.get(step)
        return self.backend if placement is None else placement.backend

    def __call__(self, step: str) -> WindowKernels:
        return self.kernels_of(self.backend_of(step))


Factory = Callable[[Any, pa.Schema | None, StepKernels], Operator]


@dataclass(frozen=True)
class Registration:
    """How a backend builds the operator of one node type. `reads_stream`: the operator fuses
    the node's subtree and reads the stream's batches itself (the window operator runs the
    Lift and StreamScan below it in its own pass)."""

    factory: Factory
    reads_stream: bool = False


def _module(backend: str) -> ModuleType:
    name = BACKEND_MODULES.get(backend)
    if name is None:
        raise BackendUnavailableError(f"unknown backend {backend!r}; use 'cpu' or 'gpu'")
    try:
        return importlib.import_module(name)
    except (ImportError, AttributeError) as error:
        raise _unavailable(backend, error) from error


def _unavailable(backend: str, error: Exception) -> BackendUnavailableError:
    if backend == "gpu":
        hint = "plan the query with backend='cpu' or install CuPy on a machine with an NVIDIA GPU"
    else:
        hint = "the installation is incomplete: reinstall mangonel (make install)"
    return BackendUnavailableError(
        f"the {backend.upper()} backend cannot be loaded here ({error}); {hint}"
    )


def new_kernels(backend: str, gpu_options: GpuOptions | None = None) -> WindowKernels:
    """A new kernels object of a backend ("cpu" or "gpu"); the GPU module loads lazily.
    `gpu_options` tune the GPU kernels (the CPU has none)."""
    module = _module(backend)
    try:
        return module.new_kernels(gpu_options)
    except (ImportError, AttributeError) as error:
        raise _unavailable(backend, error) from error


def new_join_kernels(backend: str) -> Any:  # noqa: ANN401 - the backend's JoinKernels
    """A new JoinKernels of a backend (`new_join_kernels` of its operators module): the GPU
    join kernels take the CPU's for their host faces (key maps, expressions over joined
    rows), since one backend package may not import another."""
    module = _module(backend)
    try:
        return module.new_join_kernels()
    except (ImportError, AttributeError) as error:
        raise _unavailable(backend, error) from error


def node_backend(node: ph.PhysicalNode) -> str:
    """The backend whose operator runs a node: the plan's backend for the window operator
    (its steps may still be placed apart), the one step's backend for Filter and Project."""
    if isinstance(node, ph.WindowAggregateExec):
        return node.backend
    placements = getattr(node, "placements", ())
    if not placements:
        raise TypeError(f"{type(node).__name__} has no placement: no operator runs it alone")
    return placements[0].backend


def registration(node_type: type, backend: str) -> Registration:
    operators: dict[type, Registration] = _module(backend).OPERATORS
    found = operators.get(node_type)
    if found is None:
        raise BackendUnavailableError(
            f"the {backend} backend has no operator for {node_type.__name__}"
        )
    return found
