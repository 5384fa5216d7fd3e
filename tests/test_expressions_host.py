"""The rendered CUDA expressions, compiled as host C++ and run: their rows equal the CPU's.

tests/test_expressions_nvcc.py compiles its corpus with nvcc and compares it with the CPU on a
GPU host only. This runs the same kernels, unchanged, on the CPU: g++ compiles them with
host stand-ins for the few CUDA intrinsics they call (the float-to-integer conversions, which
saturate and turn NaN into the type's minimum as the hardware does, and a bit cast), under
UndefinedBehaviorSanitizer. So without a GPU it checks that the C text means what the CPU
renderer computes (Kleene logic, NULLs, CASE, the temporaries of deep expressions) and that
no row, also not through a CASE branch it does not take, divides an integer by zero,
overflows a signed integer or converts an out-of-range double. Device math (log, exp, pow)
may differ from glibc's by an ulp or two; same_value allows that.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mangonel.catalog.types import TYPE_INFO

sys.path.insert(0, str(Path(__file__).parent))
import test_expressions_nvcc as nvcc_corpus  # noqa: E402
from random_expressions import run_seed  # noqa: E402

HOST_PRELUDE = r"""
#include <cmath>
#include <cstdio>
#include <cstring>
#include <climits>
using std::isnan; using std::isinf; using std::fabs; using std::log; using std::log10;
using std::sqrt; using std::exp; using std::pow; using std::round; using std::fmod;
#define __global__
#define __restrict__
struct Dim { int x; };
static Dim blockIdx = {0}, blockDim = {1}, threadIdx = {0};
static inline double __longlong_as_double(long long v) { double d; memcpy(&d, &v, 8); return d; }
template <typename I> static inline I mg_saturate(double x, I low, I high) {
    if (isnan(x) || x <= (double)low) return low;  // cvt: NaN -> the minimum
    if (x >= (double)high) return high;
    return (I)x;
}
static inline int __double2int_rz(double x) {
    return mg_saturate<int>(std::trunc(x), INT_MIN, INT_MAX);
}
static inline long long __double2ll_rz(double x) {
    return mg_saturate<long long>(std::trunc(x), LLONG_MIN, LLONG_MAX);
}
static inline long long __double2ll_rd(double x) {
    return mg_saturate<long long>(std::floor(x), LLONG_MIN, LLONG_MAX);
}
static inline long long __double2ll_ru(double x) {
    return mg_saturate<long long>(std::ceil(x), LLONG_MIN, LLONG_MAX);
}
static inline float __double2float_rn(double x) {  // out of float's range: +-Infinity
    if (isnan(x) || fabs(x) <= 3.4028234663852886e38) return (float)x;
    return x > 0 ? INFINITY : -INFINITY;
}
"""


def host_program(kernels: list[nvcc_corpus.Kernel], inputs: list[np.ndarray]) -> str:
    """main(): read the inputs from argv[1], run every kernel on every row, write each
    kernel's values then validity to argv[2]."""
    rows = nvcc_corpus.ROWS
    lines = ["int main(int argc, char** argv) {", '    FILE* in = fopen(argv[1], "rb");']
    for k, array in enumerate(inputs):
        ctype = "bool" if array.dtype == np.bool_ else _ctype(array.dtype)
        lines.append(f"    static {ctype} input{k}[{rows}];")
        lines.append(f"    if (fread(input{k}, sizeof(input{k}), 1, in) != 1) return 2;")
    lines.append('    FILE* out = fopen(argv[2], "wb");')
    names = ", ".join(f"input{k}" for k in range(len(inputs)))
    for kernel in kernels:
        ids = ", ".join(str(i) for i in nvcc_corpus.literal_ids(kernel.ctx))
        ctype = TYPE_INFO[kernel.rendered.type].cuda
        lines += [
            "    {",
            f"        static const int ids[] = {{{ids}}};",
            f"        static {ctype} values[{rows}];",
            f"        static bool valid[{rows}];",
            f"        for (int row = 0; row < {rows}; ++row) {{",
            "            threadIdx.x = row;",
            f"            {kernel.name}({names}, {nvcc_corpus.WINDOW[0]}LL, "
            f"{nvcc_corpus.WINDOW[1]}LL, ids, values, valid, {rows});",
            "        }",
            "        fwrite(values, sizeof(values), 1, out);",
            "        fwrite(valid, sizeof(valid), 1, out);",
            "    }",
        ]
    lines += ["    fclose(out);", "    return 0;", "}"]
    return "\n".join(lines) + "\n"


def _ctype(dtype: np.dtype) -> str:
    return {
        np.dtype("int32"): "int",
        np.dtype("int64"): "long long",
        np.dtype("float32"): "float",
        np.dtype("float64"): "double",
    }[dtype]


def host_mismatches(expressions: list, folder: Path) -> list[tuple]:
    """Each expression rendered as CUDA (test_expressions_nvcc's kernels), compiled by g++
    under UndefinedBehaviorSanitizer and run on the corpus's rows: every row where its value
    or validity differs from the CPU evaluator's (a sanitizer report fails at once)."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not on PATH")
    source, kernels = nvcc_corpus.build_source(expressions)
    inputs = [array for pair in nvcc_corpus.device_inputs() for array in pair]
    program = folder / "expressions.cpp"
    program.write_text(HOST_PRELUDE + source + host_program(kernels, inputs))
    binary = folder / "expressions"
    sanitize = "-fsanitize=undefined,float-cast-overflow"
    built = subprocess.run(
        [gxx, "-O1", "-w", sanitize, "-fno-sanitize-recover=all", "-o", str(binary), str(program)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    (folder / "inputs.bin").write_bytes(b"".join(array.tobytes() for array in inputs))
    ran = subprocess.run(
        [str(binary), str(folder / "inputs.bin"), str(folder / "outputs.bin")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0 and "runtime error" not in ran.stderr, ran.stderr[-4000:]
    output = (folder / "outputs.bin").read_bytes()
    offset, found = 0, []
    rows = nvcc_corpus.ROWS
    for kernel in kernels:
        dtype = TYPE_INFO[kernel.rendered.type].numpy
        values = np.frombuffer(output, dtype, rows, offset).tolist()
        offset += rows * dtype.itemsize
        valid = np.frombuffer(output, np.bool_, rows, offset).tolist()
        offset += rows
        found += nvcc_corpus.mismatches(kernel, values, valid)
    assert offset == len(output)
    return found


def test_rendered_cuda_runs_on_the_host_like_the_cpu(tmp_path: Path) -> None:
    found = host_mismatches(nvcc_corpus.corpus(), tmp_path)
    assert not found, "\n".join(map(str, found))


def test_random_expressions_run_on_the_host_like_the_cpu(tmp_path, request, fuzz_summary):
    """Random numeric expressions (a fresh seed each run, or --fuzz-seed; printed at the end
    of the run) over the corpus's edge rows: the CUDA mangonel renders gives the CPU
    evaluator's value in every row, with no undefined behaviour on any path."""
    seed = run_seed(request, fuzz_summary, "host CUDA expressions")
    expressions = nvcc_corpus.random_corpus(random.Random(seed), 150)
    found = host_mismatches(expressions, tmp_path)
    assert not found, (seed, "\n".join(map(str, found)))
