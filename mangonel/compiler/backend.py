"""Choosing the backend a plan runs on, with the reason EXPLAIN prints."""

from __future__ import annotations

import functools

from mangonel.errors import BackendUnavailableError

BACKENDS = ("auto", "cpu", "gpu")


@functools.lru_cache(maxsize=1)
def gpu_status() -> tuple[bool, str]:
    """(available, why): whether CuPy sees a CUDA device. Imports CuPy lazily, once."""
    try:
        import cupy  # noqa: F401  (optional dependency: the `gpu` extra)
    except Exception as error:  # ImportError, or a CUDA library that fails to load
        return False, f"CuPy is not importable ({type(error).__name__})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:
        return False, f"CuPy sees no CUDA driver ({type(error).__name__})"
    if count == 0:
        return False, "CuPy sees no CUDA device"
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    if isinstance(name, bytes):
        name = name.decode()
    return True, f"CUDA device 0 is {name}"


def choose_backend(requested: str) -> tuple[str, str]:
    """The backend to plan for and why.

    Planning for the GPU needs no GPU (EXPLAIN CODEGEN works anywhere); running a GPU plan
    without one raises `require_gpu`'s error. 'gpu' never falls back to the CPU silently.
    """
    if requested not in BACKENDS:
        raise BackendUnavailableError(
            f"unknown backend {requested!r}; choose one of {', '.join(BACKENDS)}"
        )
    if requested == "cpu":
        return "cpu", "backend='cpu' requested"
    available, why = gpu_status()
    if requested == "gpu":
        return "gpu", f"backend='gpu' requested; {why}"
    if available:
        return "gpu", f"auto: {why}"
    return "cpu", f"auto: {why}"


def require_gpu() -> None:
    """Raise a clear error when a GPU plan is about to run where no GPU can be used."""
    available, why = gpu_status()
    if not available:
        raise BackendUnavailableError(
            f"backend='gpu' was requested but no GPU can be used: {why}. "
            "Install mangonel[gpu] on a machine with an NVIDIA GPU, or use backend='cpu' "
            "(or 'auto', which falls back to the CPU)."
        )
