"""Compile rendered CUDA source into CuPy modules, with a bounded cache.

Rendering (source text) is the compiler's (`compiler.codegen`); compiling and loading is
this module's: `CompileContext.module(generated)` compiles `generated.source` with nvcc to a
cubin (disk cache under `cache_directory()`, keyed by source hash and device architecture) or,
without nvcc, with NVRTC through `cupy.RawModule` (CuPy keeps its own disk cache), and keeps
the last `capacity` modules in memory, keyed by the source's SHA-256 (`generated.digest`).

The context also renders and keeps the kernels that depend only on plan data (the key table
kernels of a key width, the state kernels of a set of state fields), keyed by that data, so
two operators of the same shape share one module. One shared context serves every
`GpuKernels` that is not given its own (`shared_context(options.module_cache_size)`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, Generic, TypeVar

from mangonel.compiler import codegen
from mangonel.compiler.codegen import COMPILE_OPTIONS, GeneratedModule
from mangonel.compiler.options import GpuOptions
from mangonel.compiler.physical import StateField
from mangonel.runtime.gpu import device

V = TypeVar("V")


def cache_directory() -> Path:
    """Where compiled cubins are kept: `$MANGONEL_CACHE`, else `~/.cache/mangonel`."""
    root = os.environ.get("MANGONEL_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "mangonel"


def nvcc_command(source_path: Path, output_path: Path, *, ptx: bool, arch: str) -> list[str]:
    """The nvcc command line that compiles one generated source (`--ptx` or `--cubin`) with
    `codegen.COMPILE_OPTIONS`."""
    kind = "--ptx" if ptx else "--cubin"
    return [
        "nvcc",
        kind,
        f"-arch={arch}",
        "-O3",
        "-std=c++17",
        "-diag-suppress",
        "177",
        *COMPILE_OPTIONS,
        "-o",
        str(output_path),
        str(source_path),
    ]


class _Lru(Generic[V]):
    """A dict that keeps its `capacity` most recently used entries."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[Hashable, V] = OrderedDict()

    def get(self, key: Hashable) -> V | None:
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
        return found

    def put(self, key: Hashable, value: V) -> None:
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


class CompileContext:
    """Owns compiled modules (by source hash) and plan-keyed rendered kernels, both bounded
    to `capacity` entries, least recently used dropped first. A module dropped here stays
    alive as long as a `GpuKernels` still holds it."""

    def __init__(self, capacity: int = GpuOptions().module_cache_size) -> None:
        self.capacity = capacity
        self._modules: _Lru[Any] = _Lru(capacity)
        self._rendered: _Lru[tuple[GeneratedModule, Any]] = _Lru(capacity)
        self.compiles = 0  # modules built (from source or a disk cubin): misses of the cache

    def module(self, generated: GeneratedModule) -> Any:
        """A `cupy.RawModule` of the generated source (memory cache, then disk, then build),
        compiled with `codegen.COMPILE_OPTIONS`, which the source names in its first line:
        every cache is keyed by the source's hash alone."""
        module = self._modules.get(generated.digest)
        if module is None:
            module = _build(generated)
            self.compiles += 1
            self._modules.put(generated.digest, module)
        return module

    def rendered(
        self, key: Hashable, render: Callable[[], GeneratedModule]
    ) -> tuple[GeneratedModule, Any]:
        """(kernels, module) of plan data `key`; `render` makes the source on a miss."""
        found = self._rendered.get(key)
        if found is None:
            generated = render()
            found = (generated, self.module(generated))
            self._rendered.put(key, found)
        return found

    def key_module(self, words: int) -> tuple[GeneratedModule, Any]:
        """The key hash table kernels for keys of `words` 64-bit words."""
        return self.rendered(("keys", words), lambda: codegen.render_key_kernels(words))

    def state_module(self, fields: tuple[StateField, ...]) -> tuple[GeneratedModule, Any]:
        """Merge and window kernels of a set of state fields alone (restored state)."""
        return self.rendered(("state", fields), lambda: codegen.render_state_kernels(fields))


def _build(generated: GeneratedModule) -> Any:
    """Compile or load one module. With nvcc on the PATH the disk cache holds a cubin per
    hash under cache_directory(); without it NVRTC compiles (CuPy keeps its own disk cache)."""
    cp = device.cupy()
    arch = f"sm_{cp.cuda.Device().compute_capability}"
    directory = cache_directory()
    cubin = directory / f"{generated.digest}.{arch}.cubin"
    if not cubin.exists() and shutil.which("nvcc"):
        directory.mkdir(parents=True, exist_ok=True)
        source_path = directory / f"{generated.digest}.cu"
        source_path.write_text(generated.source)
        partial = cubin.with_suffix(f".{os.getpid()}.tmp")
        subprocess.run(
            nvcc_command(source_path, partial, ptx=False, arch=arch),
            check=True,
            capture_output=True,
            text=True,
        )
        partial.replace(cubin)  # atomic: concurrent processes never read half a file
    if cubin.exists():
        return cp.RawModule(path=str(cubin))
    return cp.RawModule(code=generated.source, options=("-std=c++17", *COMPILE_OPTIONS))


_SHARED: dict[int, CompileContext] = {}


def shared_context(capacity: int = GpuOptions().module_cache_size) -> CompileContext:
    """The process's context of that cache size, created on first use (every `GpuKernels`
    not given its own shares it, so a second query of the same plan compiles nothing)."""
    context = _SHARED.get(capacity)
    if context is None:
        context = _SHARED[capacity] = CompileContext(capacity)
    return context


__all__ = ["CompileContext", "cache_directory", "nvcc_command", "shared_context"]
