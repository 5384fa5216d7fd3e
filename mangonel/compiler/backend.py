"""Choosing the backend a plan runs on, with the reason EXPLAIN prints.

Pure: the caller probes the machine (`mangonel.runtime.gpu.probe.gpu_status`, which imports
CuPy) and passes the result, so the compiler imports no runtime module and no CuPy.
"""

from __future__ import annotations

from mangonel.errors import BackendUnavailableError

BACKENDS = ("auto", "cpu", "gpu")


def needs_probe(requested: str) -> bool:
    """Whether `choose_backend(requested, ...)` reads the GPU probe (not for 'cpu')."""
    return requested != "cpu"


def choose_backend(requested: str, gpu: tuple[bool, str] | None) -> tuple[str, str]:
    """The backend to plan for and why, given `gpu` = (available, why) from the probe (None
    is accepted only where `needs_probe(requested)` is False).

    Planning for the GPU needs no GPU (EXPLAIN CODEGEN works anywhere); running a GPU plan
    without one raises `require_gpu`'s error. 'gpu' never falls back to the CPU silently.
    """
    if requested not in BACKENDS:
        raise BackendUnavailableError(
            f"unknown backend {requested!r}; choose one of {', '.join(BACKENDS)}"
        )
    if requested == "cpu":
        return "cpu", "backend='cpu' requested"
    if gpu is None:
        raise ValueError(f"backend={requested!r} needs the GPU probe's result")
    available, why = gpu
    if requested == "gpu":
        return "gpu", f"backend='gpu' requested; {why}"
    if available:
        return "gpu", f"auto: {why}"
    return "cpu", f"auto: {why}"
