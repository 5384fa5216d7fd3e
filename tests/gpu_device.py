"""Whether this machine has a CUDA device CuPy can see: the GPU test modules skip without one."""

from __future__ import annotations


def gpu_available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False
