"""Generated CUDA run on the host, for tests on machines without a GPU.

A kernel source is compiled with g++ against `CUDA_SHIM` (the few CUDA intrinsics the
renderers use; one thread walks every row, so atomics are plain read-modify-writes), CuPy's
arrays are numpy arrays (`HostArray`, `HostCupy`), and a launch is a ctypes call
(`HostModule`). Faithful for grid-stride kernels without block-level cooperation (the project
and join kernels are written so); what it cannot check is CuPy and the device themselves (the
gpu-marked tests do).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import re
import subprocess
import tempfile
import uuid
from pathlib import Path
from types import SimpleNamespace

import numpy as np

CUDA_SHIM = r"""
#include <cmath>
#include <climits>
#include <cstring>
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
struct mg_dim { long long x; };
static const mg_dim blockIdx = {0}, blockDim = {1}, gridDim = {1}, threadIdx = {0};
using std::isnan; using std::isinf; using std::isfinite;
static inline double __longlong_as_double(long long v) { double d; memcpy(&d, &v, 8); return d; }
static inline long long __double_as_longlong(double v) { long long d; memcpy(&d, &v, 8); return d; }
static inline float __double2float_rn(double x) { return (float)x; }
// the round-to-nearest arithmetic intrinsics (never fused: -ffp-contract=off)
static inline double __ll2double_rn(long long x) { return (double)x; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
// cvt.rzi/rmi/rpi: round, then saturate (NaN -> the minimum, as the renderer expects)
static inline long long mg_saturate(double x, double low, double high, long long lo, long long hi)
{ return std::isnan(x) ? lo : x <= low ? lo : x >= high ? hi : (long long)x; }
#define MG_LL(x) mg_saturate(x, -0x1p63, 0x1p63, LLONG_MIN, LLONG_MAX)
static inline int __double2int_rz(double x)
{ return (int)mg_saturate(std::trunc(x), -0x1p31, 0x1p31 - 1, INT_MIN, INT_MAX); }
static inline long long __double2ll_rz(double x) { return MG_LL(std::trunc(x)); }
static inline long long __double2ll_rd(double x) { return MG_LL(std::floor(x)); }
static inline long long __double2ll_ru(double x) { return MG_LL(std::ceil(x)); }
// one thread: an atomic is a plain read-modify-write
template <class T> static inline T atomicAdd(T* a, T v) { T o = *a; *a = o + v; return o; }
template <class T> static inline T atomicMin(T* a, T v) { T o = *a; if (v < o) *a = v; return o; }
template <class T> static inline T atomicMax(T* a, T v) { T o = *a; if (v > o) *a = v; return o; }
template <class T> static inline T atomicCAS(T* a, T c, T v)
{ T o = *a; if (o == c) *a = v; return o; }
template <class T> static inline T atomicExch(T* a, T v) { T o = *a; *a = v; return o; }
// one lane per warp: a shuffle reads the caller's own value (kernels whose width is
// min(blockDim.x, 32) never shuffle here)
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int, int = 32) { return v; }
template <class T> static inline T __shfl_sync(unsigned, T v, int, int = 32) { return v; }
template <class T> static inline T __shfl_down_sync(unsigned, T v, unsigned, int = 32) { return v; }
template <class T> static inline T __shfl_up_sync(unsigned, T v, unsigned, int = 32) { return v; }
static inline bool __all_sync(unsigned, bool p) { return p; }
static inline bool __any_sync(unsigned, bool p) { return p; }
template <class T> static inline unsigned __match_any_sync(unsigned, T) { return 1u; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b)
{ return (unsigned long long)(((unsigned __int128)a * b) >> 64); }
static inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
static inline unsigned __float_as_uint(float x) { unsigned u; memcpy(&u, &x, 4); return u; }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline unsigned __ballot_sync(unsigned, bool p) { return p ? 1u : 0u; }
template <class T> static inline T __ldcg(const T* p) { return *p; }
static inline void __threadfence() {}
// one thread per block: shared memory is the function's own, a barrier waits for no one
#define __shared__ static
static inline void __syncthreads() {}
static inline void __nanosleep(unsigned) {}
"""


def write_shim(folder: Path) -> None:
    (folder / "shim.h").write_text(CUDA_SHIM)


class HostArray(np.ndarray):
    """A numpy array with CuPy's `get()`."""

    def get(self, out: np.ndarray | None = None) -> np.ndarray:
        if out is None:
            return np.array(self)
        out[...] = self
        return out


class HostCupy:
    """The part of CuPy the GPU kernels' hosts use, over numpy (arrays come back as
    HostArray)."""

    cuda = SimpleNamespace(alloc_pinned_memory=lambda nbytes: bytearray(nbytes))

    @staticmethod
    def asnumpy(array) -> np.ndarray:  # noqa: ANN001
        return np.array(array)

    @staticmethod
    def argsort(array) -> HostArray:  # noqa: ANN001
        # CuPy's argsort is stable (a radix sort); numpy's default is not
        return np.argsort(array, kind="stable").view(HostArray)

    @staticmethod
    def empty(shape, dtype=np.float64) -> HostArray:  # noqa: ANN001
        # zeros, not garbage: a run is the same every time
        return np.zeros(shape, dtype).view(HostArray)

    def __getattr__(self, name: str):  # noqa: ANN204
        found = getattr(np, name)
        if not callable(found) or isinstance(found, type):
            return found

        def wrapped(*args, **kwargs):  # noqa: ANN202
            result = found(*args, **kwargs)
            return result.view(HostArray) if isinstance(result, np.ndarray) else result

        return wrapped


def compile_library(source: str, folder: Path, shim: Path, flags: tuple[str, ...] = ()):  # noqa: ANN201
    """A generated module's source compiled by g++ over `shim` (included first) into a
    shared library, loaded (ctypes.CDLL). -ffp-contract=off: the host rounds every
    operation, as the kernels compiled with -fmad=false do (and as the CPU evaluator does).
    Libraries are kept by content (`_built_library`): the test processes compile many of the
    same sources (every test of a kernel builds its modules again), and g++ is a large share
    of the suite's CPU on CI's two cores."""
    command = ["g++", "-std=c++17", "-O1", "-ffp-contract=off", "-shared", "-fPIC", *flags]
    digest = hashlib.sha256(
        "\0".join([_compiler_version(), *command, shim.read_text(), source]).encode()
    ).hexdigest()[:24]
    library = _built_library(digest)
    if not library.exists():
        path = folder / f"{shim.stem}_module_{digest}.cu"
        path.write_text(source)
        # built beside its final name, then renamed: a process loading it never sees half
        partial = library.with_name(f"{library.stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}.so")
        result = subprocess.run(
            [*command, "-x", "c++", "-include", str(shim), str(path), "-o", str(partial)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, result.stderr[-5000:]
        os.replace(partial, library)
    return ctypes.CDLL(str(library))


@functools.cache
def _compiler_version() -> str:
    return subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout


def _built_library(digest: str) -> Path:
    """Where the library of `digest` lives: one folder per user shared by the test processes
    (MANGONEL_HOST_MODULES names another), keyed by everything that goes into the build
    (compiler version, flags, shim and source), so a stale or foreign file cannot match."""
    folder = Path(
        os.environ.get("MANGONEL_HOST_MODULES")
        or Path(tempfile.gettempdir()) / f"mangonel-host-modules-{os.getuid()}"
    )
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"module_{digest}.so"


# bytes of each scalar parameter type the templates declare
_SCALAR_BYTES = {
    "bool": 1,
    "char": 1,
    "unsigned char": 1,
    "short": 2,
    "int": 4,
    "unsigned": 4,
    "unsigned int": 4,
    "float": 4,
    "i64": 8,
    "u64": 8,
    "long long": 8,
    "unsigned long long": 8,
    "double": 8,
}


def kernel_parameters(source: str, name: str) -> list[str]:
    """The C types of kernel `name`'s parameters as its source declares them ("i64", "int",
    "double", ...; "*" for any pointer), `const` and `__restrict__` dropped."""
    code = re.sub(r"//[^\n]*|/\*.*?\*/", " ", source, flags=re.DOTALL)  # comments hold ")"
    found = re.search(r'extern "C" __global__ void\s+' + re.escape(name) + r"\s*\(([^)]*)\)", code)
    assert found is not None, f"no kernel {name} in the source"
    types = []
    for declaration in found.group(1).split(","):
        words = declaration.replace("*", " * ").split()
        if "*" in words:
            types.append("*")
            continue
        kept = [w for w in words[:-1] if w not in ("const", "__restrict__")]
        types.append(" ".join(kept))
    return types


def check_arguments(name: str, parameters: list[str], arguments) -> None:  # noqa: ANN001
    """Fail where CuPy would pass an argument the kernel reads wrongly. CuPy hands the driver
    a pointer to each argument's own value, and the kernel reads as many bytes as its
    parameter's type: a value narrower than the parameter (an np.int32 or a bool for an
    i64, any float for another width) reads bytes beside it; a wider integer reads its low
    bytes (right on the little-endian GPU). The shim's ctypes call takes any integer width
    alike on x86-64, so this check is what catches a mismatch without a GPU."""
    assert len(arguments) == len(parameters), (name, len(arguments), parameters)
    for position, (parameter, argument) in enumerate(zip(parameters, arguments, strict=True)):
        where = f"{name} argument {position} ({parameter}): {type(argument).__name__}"
        if parameter == "*":
            assert argument is None or isinstance(argument, np.ndarray), where
            continue
        assert parameter in _SCALAR_BYTES, f"{where}: add the type to _SCALAR_BYTES"
        assert not isinstance(argument, np.ndarray), where
        if parameter in ("float", "double"):
            wanted = np.float32 if parameter == "float" else (np.float64, float)
            assert isinstance(argument, wanted), where
        elif parameter == "bool":
            assert isinstance(argument, bool | np.bool_), where
        elif isinstance(argument, bool | np.bool_):
            raise AssertionError(f"{where}: a bool passes one byte")
        elif isinstance(argument, np.integer):
            assert argument.dtype.itemsize >= _SCALAR_BYTES[parameter], where
        else:  # a Python int: CuPy passes 8 bytes
            assert isinstance(argument, int), where


def kernel_arguments(arguments) -> list:  # noqa: ANN001
    """A launch's arguments as C values: arrays by address, floats as doubles, the rest as
    64-bit integers (the shim's kernels take i64 and int the same way on x86-64; the modules
    check each against its parameter's type first, `check_arguments`)."""
    converted = []
    for argument in arguments:
        if argument is None:
            converted.append(ctypes.c_void_p(None))
        elif isinstance(argument, np.ndarray):
            assert argument.flags.c_contiguous
            converted.append(ctypes.c_void_p(argument.ctypes.data))
        elif isinstance(argument, float | np.floating):
            converted.append(ctypes.c_double(float(argument)))
        else:
            converted.append(ctypes.c_longlong(int(argument)))
    return converted


class HostModule:
    """A generated module compiled by g++ over the shim in `folder` (`write_shim`), with
    CuPy's RawModule `get_function(name)(grid, block, arguments)` launch."""

    def __init__(self, source: str, folder: Path, flags: tuple[str, ...] = ()) -> None:
        self.source = source
        self.library = compile_library(source, folder, folder / "shim.h", flags)

    def get_function(self, name: str):  # noqa: ANN201
        function = getattr(self.library, name)
        parameters = kernel_parameters(self.source, name)

        def launch(grid, block, arguments) -> None:  # noqa: ANN001
            check_arguments(name, parameters, arguments)
            function(*kernel_arguments(arguments))

        return launch


def host_modules(folder: Path, flags: tuple[str, ...] = ()):  # noqa: ANN201 - CompileContext.module
    """`CompileContext.module` on the host: the shim written into `folder`, then one
    `HostModule` (g++, with `flags`: e.g. a sanitizer) per generated source, compiled once."""
    write_shim(folder)
    modules: dict[str, HostModule] = {}

    def module(generated, options=()):  # noqa: ANN001, ANN202
        if generated.digest not in modules:
            modules[generated.digest] = HostModule(generated.source, folder, flags)
        return modules[generated.digest]

    return module


def host_key_map(types: tuple, key_words: np.ndarray, strings=None):  # noqa: ANN001, ANN201
    """A `GpuKeyMap` of `types` whose slots hold `key_words` (slots x words: each key
    column's word, then the NULL mask), its "device" copy an array of the patched
    `device.cupy()` (call with it patched): what the finalize kernel reads the result keys
    from, and what `decode` gathers on the host, without a key kernel run."""
    from mangonel.compiler.options import GpuOptions
    from mangonel.runtime.gpu import device
    from mangonel.runtime.gpu.keys import GpuKeyMap
    from mangonel.runtime.host.keys import StringDictionary

    key_map = GpuKeyMap(types, strings or StringDictionary(), None, GpuOptions())
    key_map.host_words = np.ascontiguousarray(key_words, np.int64)
    key_map.n_slots = len(key_words)
    key_map.slot_words_device = device.cupy().asarray(key_map.host_words.reshape(-1))
    return key_map
