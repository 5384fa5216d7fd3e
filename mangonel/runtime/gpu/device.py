"""Device basics every GPU module uses: lazy CuPy, struct arguments, launch geometry, the
alignment of segments in a shared buffer."""

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


def round_up(nbytes: int, alignment: int) -> int:
    """`nbytes` rounded up to a multiple of `alignment`: where the next segment of a buffer
    that several arrays share starts."""
    return (nbytes + alignment - 1) // alignment * alignment
