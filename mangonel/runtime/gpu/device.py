"""Device basics every GPU module uses: lazy CuPy, struct arguments, launch geometry."""

from __future__ import annotations

from typing import Any


def cupy() -> Any:
    """CuPy, imported on first use (nothing outside runtime/gpu imports it)."""
    import cupy as cp

    return cp


def struct(values: list) -> list:
    """Kernel arguments of a generated struct: its members, in order (CuPy passes pointers)."""
    return list(values)


def grid(n: int, threads: int) -> int:
    """Blocks of a grid-stride launch over n rows (at most 65,535: the loop covers the rest)."""
    return max(1, min((n + threads - 1) // threads, 65_535))


def fused_grid(n: int, threads: int) -> int:
    """Blocks of the fused pass: four rows per thread, so the status totals cost one set of
    atomics per block."""
    return max(1, min((n + 4 * threads - 1) // (4 * threads), 65_535))


def block_threads(function: Any, requested: int) -> int:  # noqa: ANN401 - a CuPy kernel
    """Threads per block for a launch of `function`: the requested ones (`GpuOptions.threads`),
    fewer where the compiled kernel cannot launch that many (its registers per thread times
    the block exceed the SM's: the combine kernels at 1024), in whole warps. Every launch is
    grid-stride and sizes its shared arrays for 32 warps, so fewer threads change only the
    geometry, never which rows combine."""
    limit = int(getattr(function, "max_threads_per_block", requested))
    return max(32, min(requested, limit) // 32 * 32)
