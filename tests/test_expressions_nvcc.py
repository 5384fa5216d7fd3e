"""Every rendered CUDA expression compiles: a corpus of expressions, one tiny kernel each.

All kernels go in one .cu file and one `nvcc --ptx -arch=sm_90` run, to keep CI fast. On a
GPU host (`pytest -m gpu`, CuPy installed) the same kernels also run, and their results must
equal the CPU renderer's.
"""

from __future__ import annotations

import math
import random
import shutil
import subprocess
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pytest
import sqlglot
from random_expressions import random_sql, run_seed
from sqlglot import exp
from test_expressions import ENV as EXPRESSION_ENV

from mangonel.catalog.types import TYPE_INFO, SqlType
from mangonel.compiler import nodes
from mangonel.compiler.codegen import COMPILE_OPTIONS
from mangonel.compiler.cuda_expressions import (
    STRING_LITERAL_IDS,
    CudaContext,
    CudaValue,
    render_cuda,
)
from mangonel.compiler.typing import TypeEnv
from mangonel.runtime.cpu.expressions import evaluate

T = SqlType
HOSTILE_NUMBER = 'a"; system("rm -rf /"); //'
HOSTILE_STRING = "x*/int y;/*\nz\\"
# test_expressions.py's columns, plus two whose names would break generated source
ENV = TypeEnv(
    columns={**EXPRESSION_ENV.columns, HOSTILE_NUMBER: T.BIGINT, HOSTILE_STRING: T.STRING},
    aggregates=(T.DOUBLE, T.BIGINT),
)

CORPUS_SQL = [
    # arithmetic on every numeric type
    "i + l",
    "i - 1",
    "i * i",
    "f * f + f",
    "d - f",
    "i / l",
    "i % l",
    "i % 0",
    "f % 2",
    "d % 1.5",
    "-i",
    "-d",
    "-l",
    "-2147483648 + i",
    "l + -9223372036854775808",
    "d * 1e300",
    "d * 3 - 0.3",  # 5.55e-17 for d = 0.1 rounded twice, 2.78e-17 as one fused multiply-add
    "l IN (9223372036854775806, 0.5)",  # one type for the value and every item: DOUBLE
    "f BETWEEN 0.5 AND l",  # each bound its own: f >= 0.5 in DOUBLE, f <= l in FLOAT
    # comparisons
    "i = l",
    "d <> f",
    "d < 1",
    "f <= d",
    "i > 0",
    "l >= 2",
    "b = TRUE",
    "ts < window_end",
    "ts >= window_start",
    "s = 'a'",
    "s <> s2",
    "s IN ('a', 'c', NULL)",
    "'a' = 'b'",
    # logic, IS, BETWEEN, IN
    "b AND i > 0",
    "b OR d > 1",
    "NOT b",
    "i IS NULL",
    "s IS NOT NULL",
    "b IS TRUE",
    "b IS NOT FALSE",
    "i BETWEEN -1 AND 5",
    "d NOT BETWEEN 0 AND 1",
    "i IN (1, -7, 3)",
    "d IN (1.5, 0)",
    # conditionals
    "CASE WHEN b THEN i ELSE d END",
    "CASE i WHEN 1 THEN 'x' = s ELSE b END",
    "CASE WHEN i > 0 THEN ts END",
    "IF(b, l, i)",
    "COALESCE(i, l, 0)",
    "COALESCE(f, d)",
    # casts
    "CAST(d AS INT)",
    "CAST(d AS BIGINT)",
    "CAST(l AS INT)",
    "CAST(i AS FLOAT)",
    "CAST(d AS FLOAT)",
    "CAST(i AS BOOLEAN)",
    "CAST(b AS DOUBLE)",
    "CAST(NULL AS BIGINT)",
    # functions
    "ABS(i)",
    "ABS(f)",
    "ABS(d)",
    "SQRT(d)",
    "LN(f)",
    "LOG10(i)",
    "LOG(2, d)",
    "EXP(d)",
    "POWER(d, f)",
    "FLOOR(d)",
    "CEIL(f)",
    "CEILING(i)",
    "ROUND(d)",
    "ROUND(f, 2)",
    "ROUND(d, -1)",
    "ROUND(i, -2)",
    "ROUND(l, -3)",
    "GREATEST(i, l, d)",
    "LEAST(f, d)",
    "GREATEST(ts, window_start)",
    "LEAST(b, FALSE)",
    "SIGN(i)",
    "SIGN(f)",
    # bare inputs and a composite
    "ts",
    "s",
    "b",
    "(i + 1) * 2 > l AND NOT b OR s = 'zz'",
]


def parse(sql: str) -> exp.Expression:
    def resolve(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and node.name in ("window_start", "window_end"):
            return nodes.WindowBound(this=node.name.removeprefix("window_"))
        return node

    return sqlglot.parse_one(sql, read="spark").transform(resolve)


def hostile_expressions() -> list[exp.Expression]:
    number = exp.column(HOSTILE_NUMBER, quoted=True)
    text = exp.column(HOSTILE_STRING, quoted=True)
    return [
        exp.Mul(this=number, expression=exp.Literal.number(3)),
        exp.EQ(this=text, expression=exp.Literal.string('"; abort(); /*\n')),
        exp.In(this=text, expressions=[exp.Literal.string("it's"), exp.Literal.string("\\")]),
        exp.And(
            this=exp.Is(this=text, expression=exp.Null()),
            expression=exp.GT(this=number, expression=exp.column("l")),
        ),
    ]


def aggregate_expressions() -> list[exp.Expression]:
    first, second = nodes.AggregateRef(this=0), nodes.AggregateRef(this=1)
    return [
        exp.Div(this=first, expression=second),
        exp.GT(this=nodes.AggregateRef(this=1), expression=exp.column("l")),
        exp.Coalesce(this=nodes.AggregateRef(this=0), expressions=[exp.column("d")]),
    ]


def corpus() -> list[exp.Expression]:
    """CORPUS_SQL, the hostile and aggregate expressions, every case of
    tests/test_expressions.py (whose CPU results are checked there against expected rows) and
    the deep expressions of tests/test_expressions_size.py (their C reads temporaries)."""
    from test_expressions import CASES
    from test_expressions_size import deep_sql

    cases = [parse(sql) for sql, _ in CASES]
    deep = [parse(sql) for sql in deep_sql(6).values()]
    return (
        [parse(sql) for sql in CORPUS_SQL]
        + hostile_expressions()
        + aggregate_expressions()
        + cases
        + deep
    )


def random_corpus(rng: random.Random, count: int) -> list[exp.Expression]:
    """`count` random expressions over the numeric columns (`random_expressions`), one in
    four a predicate."""
    return [parse(sql) for sql in random_sql(rng, ["i", "l", "d", "f"], count)]


@dataclass
class Kernel:
    name: str
    expression: exp.Expression
    rendered: CudaValue
    ctx: CudaContext


def input_names() -> list[str]:
    return list(ENV.columns)


def build_source(expressions: list[exp.Expression]) -> tuple[str, list[Kernel]]:
    """One .cu file with one kernel per expression (column k is `v{k}`/`m{k}`)."""
    names = input_names()
    parameters = []
    loads = []
    for k, name in enumerate(names):
        ctype = TYPE_INFO[ENV.columns[name]].cuda
        parameters.append(f"const {ctype}* __restrict__ values{k}")
        parameters.append(f"const bool* __restrict__ valid{k}")
        loads.append(f"    const {ctype} v{k} = values{k}[row];")
        loads.append(f"    const bool m{k} = valid{k}[row];")
    for k, sql_type in enumerate(ENV.aggregates):
        ctype = TYPE_INFO[sql_type].cuda
        parameters.append(f"const {ctype}* __restrict__ aggregate_values{k}")
        parameters.append(f"const bool* __restrict__ aggregate_valid{k}")
        loads.append(f"    const {ctype} a{k} = aggregate_values{k}[row];")
        loads.append(f"    const bool n{k} = aggregate_valid{k}[row];")
    kernels = []
    parts = []
    for number, expression in enumerate(expressions):
        ctx = CudaContext(
            column_values={name: f"v{k}" for k, name in enumerate(names)},
            column_valid={name: f"m{k}" for k, name in enumerate(names)},
            aggregate_values=[f"a{k}" for k in range(len(ENV.aggregates))],
            aggregate_valid=[f"n{k}" for k in range(len(ENV.aggregates))],
            window_start="window_start",
            window_end="window_end",
        )
        rendered = render_cuda(expression, ENV, ctx)
        kernel = Kernel(f"expression_{number}", expression, rendered, ctx)
        kernels.append(kernel)
        out_type = TYPE_INFO[rendered.type].cuda
        signature = ",\n    ".join(
            [
                *parameters,
                "const long long window_start",
                "const long long window_end",
                f"const int* __restrict__ {STRING_LITERAL_IDS}",
                f"{out_type}* __restrict__ out",
                "bool* __restrict__ out_valid",
                "const int n",
            ]
        )
        body = "\n".join(loads + [f"    {statement}" for statement in ctx.statements])
        parts.append(
            f'extern "C" __global__ void {kernel.name}(\n    {signature})\n{{\n'
            "    const int row = blockIdx.x * blockDim.x + threadIdx.x;\n"
            "    if (row >= n) return;\n"
            f"{body}\n"
            f"    const bool is_valid = {rendered.valid};\n"
            f"    out_valid[row] = is_valid;\n"
            f"    out[row] = is_valid ? ({out_type})({rendered.value}) : ({out_type})0;\n"
            "}\n"
        )
    return "\n".join(parts), kernels


def test_corpus_covers_every_node_class() -> None:
    from mangonel.compiler.typing import TYPE_RULES

    seen = {type(node) for expression in corpus() for node in expression.walk()}
    # exp.TryCast is what Spark's dialect parses CAST to; exp.Cast comes from other dialects
    # and renders through the same function.
    missing = set(TYPE_RULES) - seen - {exp.Cast}
    assert not missing, missing
    assert len(corpus()) >= 30


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> tuple[str, list[Kernel]]:
    source, kernels = build_source(corpus())
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        print("nvcc not on PATH: CUDA expression corpus not compiled")
        pytest.skip("nvcc not on PATH")
    folder = tmp_path_factory.mktemp("expressions_nvcc")
    (folder / "expressions.cu").write_text(source)
    result = subprocess.run(
        [nvcc, "--ptx", "-arch=sm_90", *COMPILE_OPTIONS, "-o", "expressions.ptx", "expressions.cu"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    return (folder / "expressions.ptx").read_text(), kernels


def test_corpus_compiles_with_nvcc(compiled) -> None:
    ptx, kernels = compiled
    for kernel in kernels:
        assert f".entry {kernel.name}(" in ptx


def test_no_name_or_literal_text_in_source() -> None:
    source, kernels = build_source(corpus())
    for forbidden in [HOSTILE_NUMBER, HOSTILE_STRING, "abort", "it's", "rm -rf"]:
        assert forbidden not in source
    assert '"' not in source.replace('extern "C"', "")
    assert "//" not in source and "/*" not in source and "\\" not in source
    literal_counts = [len(kernel.ctx.string_literals) for kernel in kernels]
    assert max(literal_counts) == 2


# --- running the kernels (GPU hosts only) ---------------------------------------------------

INT_MAX, INT_MIN = 2**31 - 1, -(2**31)
ROWS = 10
NAN = math.nan
DATA = {
    "i": [1, -7, None, INT_MAX, 0, INT_MIN, 5, -1, 3, 100],
    "l": [0, 2, 3, None, -1, 2**62, -(2**63), 7, 3, -5],
    "d": [1.5, NAN, -2.0, None, 0.0, -0.0, 1e300, -2.5, math.inf, 0.1],
    "f": [0.5, None, 2.5, -1.0, 3.0, NAN, -0.0, 1e30, 2.0, -0.5],
    "s": ["a", "b", None, "a", "c", "it's", "zz", "x", "\\", "c"],
    "s2": ["a", "a", "b", None, "c", "c", "zz", "y", "a", None],
    "ts": [10, 20, 30, 40, 50, 15, 45, 44, 16, 0],
    "b": [True, False, None, True, False, None, True, True, False, None],
    HOSTILE_NUMBER: [1, None, -3, 4, 2**40, -(2**62), 0, 9, 8, 7],
    HOSTILE_STRING: ['"; abort(); /*\n', None, "it's", "a", "\\", "it's", "q", "c", None, "a"],
}
WINDOW = (15, 45)
AGGREGATE_DATA = [
    [10.0, None, -1.5, NAN, 0.0, 2.0, 1e300, -0.0, 3.0, 4.0],
    [4, 0, None, -2, 5, 2**62, 1, 0, -(2**63), 3],
]


def arrow_inputs() -> dict[str, pa.Array]:
    return {
        name: pa.array(values, TYPE_INFO[ENV.columns[name]].arrow) for name, values in DATA.items()
    }


def cpu_result(expression: exp.Expression) -> pa.Array:
    bounds = {
        "start": pa.array([WINDOW[0]] * ROWS, pa.timestamp("us", tz="UTC")),
        "end": pa.array([WINDOW[1]] * ROWS, pa.timestamp("us", tz="UTC")),
    }
    aggregates = [
        pa.array(values, TYPE_INFO[sql_type].arrow)
        for values, sql_type in zip(AGGREGATE_DATA, ENV.aggregates, strict=True)
    ]
    return evaluate(
        expression,
        ENV,
        arrow_inputs(),
        aggregates=aggregates,
        window_bounds=bounds,
        length=ROWS,
    )


def string_dictionary() -> list[str]:
    """One dictionary for every STRING column, as the runtime must use to compare columns."""
    texts = {t for name, t_type in ENV.columns.items() if t_type is T.STRING for t in DATA[name]}
    return sorted(t for t in texts if t is not None)


def device_inputs() -> list[tuple[np.ndarray, np.ndarray]]:
    """(values, valid) host arrays per input column (STRINGs as dictionary ids), then per
    aggregate."""
    dictionary = {text: k for k, text in enumerate(string_dictionary())}
    arrays = []
    for name in input_names():
        sql_type = ENV.columns[name]
        raw = DATA[name]
        valid = np.array([v is not None for v in raw], dtype=np.bool_)
        if sql_type is T.STRING:
            values = np.array([dictionary.get(v, 0) for v in raw], dtype=np.int32)
        else:
            filled = [0 if v is None else v for v in raw]
            values = np.array(filled, dtype=TYPE_INFO[sql_type].numpy)
        arrays.append((values, valid))
    for raw, sql_type in zip(AGGREGATE_DATA, ENV.aggregates, strict=True):
        valid = np.array([v is not None for v in raw], dtype=np.bool_)
        values = np.array([0 if v is None else v for v in raw], dtype=TYPE_INFO[sql_type].numpy)
        arrays.append((values, valid))
    return arrays


def literal_ids(ctx: CudaContext) -> np.ndarray:
    dictionary = {text: k for k, text in enumerate(string_dictionary())}
    ids = [dictionary.get(text, -1) for text in ctx.string_literals] or [-1]
    return np.array(ids, dtype=np.int32)


def label(expression: exp.Expression) -> str:
    try:
        return expression.sql()
    except ValueError:  # WindowBound has no SQL spelling in the default dialect
        return repr(expression)


def same_value(gpu: object, cpu: object) -> bool:
    if isinstance(cpu, float):
        if math.isnan(cpu):
            return math.isnan(gpu)
        # CUDA's log/exp/pow are within 1-2 ulp of glibc's
        return gpu == cpu or math.isclose(gpu, cpu, rel_tol=1e-14)
    return gpu == cpu


def mismatches(kernel: Kernel, values: list, valid: list) -> list[tuple]:
    """(expression, row, C result, CPU result) of every row where a kernel's output (values,
    validity) differs from the CPU renderer's; STRING results compare dictionary ids."""
    expected = cpu_result(kernel.expression)
    if pa.types.is_timestamp(expected.type):
        expected = expected.cast(pa.int64())
    rows = expected.to_pylist()
    if kernel.rendered.type is T.STRING:
        dictionary = {text: k for k, text in enumerate(string_dictionary())}
        rows = [None if v is None else dictionary[v] for v in rows]
    found = []
    for row, cpu in enumerate(rows):
        got = values[row] if valid[row] else None
        if (got is None) != (cpu is None) or (cpu is not None and not same_value(got, cpu)):
            found.append((label(kernel.expression), row, got, cpu))
    return found


def gpu_mismatches(expressions: list[exp.Expression]) -> list[tuple]:
    """Each expression's kernel (build_source) compiled as the runtime compiles its modules
    and run on the GPU over the corpus's rows: every row that differs from the CPU's."""
    cupy = pytest.importorskip("cupy")
    source, kernels = build_source(expressions)
    module = cupy.RawModule(code=source, options=("-std=c++17", *COMPILE_OPTIONS))
    inputs = [cupy.asarray(array) for values, valid in device_inputs() for array in (values, valid)]
    found = []
    for kernel in kernels:
        result_type = kernel.rendered.type
        out = cupy.zeros(ROWS, dtype=TYPE_INFO[result_type].numpy)
        out_valid = cupy.zeros(ROWS, dtype=cupy.bool_)
        arguments = (
            *inputs,
            np.int64(WINDOW[0]),
            np.int64(WINDOW[1]),
            cupy.asarray(literal_ids(kernel.ctx)),
            out,
            out_valid,
            np.int32(ROWS),
        )
        module.get_function(kernel.name)((1,), (32,), arguments)
        found += mismatches(kernel, out.get().tolist(), out_valid.get().tolist())
    return found


@pytest.mark.gpu
def test_gpu_results_equal_cpu_results(compiled) -> None:
    found = gpu_mismatches(corpus())
    assert not found, "\n".join(map(str, found))


@pytest.mark.gpu
def test_random_expressions_on_the_gpu_equal_cpu_results(request, fuzz_summary) -> None:
    """tests/test_expressions_host.py's random expressions (a fresh seed, or --fuzz-seed),
    run on the device: its math, its float conversions and the compiler's options."""
    seed = run_seed(request, fuzz_summary, "GPU expressions")
    found = gpu_mismatches(random_corpus(random.Random(seed), 200))
    assert not found, (seed, "\n".join(map(str, found)))
