"""Whether this process can use a GPU: probing CuPy and the CUDA driver, once."""

from __future__ import annotations

import functools

from mangonel.errors import BackendUnavailableError


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


def require_gpu() -> None:
    """Raise a clear error when a GPU plan is about to run where no GPU can be used."""
    available, why = gpu_status()
    if not available:
        raise BackendUnavailableError(
            f"backend='gpu' was requested but no GPU can be used: {why}. "
            "Install mangonel[gpu] on a machine with an NVIDIA GPU, or use backend='cpu' "
            "(or 'auto', which falls back to the CPU)."
        )


__all__ = ["gpu_status", "require_gpu"]
