"""Filter (HAVING) and Project as operators over window-result batches, on CPU and GPU.

The CPU operators must give what the window operator's emit gave (`results.project`) on random
window results for the corpus of tests/test_expressions_nvcc.py (every expression node, NULLs,
NaN, infinities, integer extremes). The GPU kernels are rendered and compiled with nvcc for the
same corpus; the GPU evaluator runs end to end here with its kernel source compiled for the
host (g++ and a shim of the CUDA intrinsics); on a GPU host (`pytest -m gpu`) the GPU operators
must equal the CPU operators on it.
"""

from __future__ import annotations

import math
import shutil
import struct
import subprocess
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest
from cuda_host import HostCupy, HostModule, write_shim
from sqlglot import exp
from test_expressions_nvcc import ENV, HOSTILE_NUMBER, HOSTILE_STRING, corpus, parse

import mangonel as mg
from mangonel.catalog.types import SqlType
from mangonel.compiler import nodes
from mangonel.compiler import physical as ph
from mangonel.compiler.codegen import COMPILE_OPTIONS, render_kernels
from mangonel.compiler.codegen_project import (
    gpu_unsupported_reason,
    is_bare_reference,
    render_project_kernels,
)
from mangonel.compiler.logical import OutputColumn
from mangonel.compiler.typing import TypeEnv, infer_type
from mangonel.errors import PlanError
from mangonel.runtime.cpu.evaluation import evaluate_expression
from mangonel.runtime.cpu.project import CpuProjectEvaluator
from mangonel.runtime.gpu import device, staging
from mangonel.runtime.gpu import project as gpu_project
from mangonel.runtime.host.arrays import to_mask
from mangonel.runtime.operators.project import (
    WINDOW_END,
    WINDOW_START,
    FilterOperator,
    ProjectOperator,
    RowMetrics,
    WindowResultLayout,
    aggregate_column,
    window_result_schema,
)

T = SqlType
KEYS = tuple(ENV.columns.items())  # every SQL type, STRINGs and hostile names among them
SCHEMA = window_result_schema(KEYS, ENV.aggregates)
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
TRANSCENDENTAL = (exp.Ln, exp.Log, exp.Exp, exp.Pow)  # CUDA's are 1-2 ulp from glibc's

SPECIAL = {
    T.INT: [0, 1, -1, 2, 7, -7, 100, INT_MAX, INT_MIN],
    T.BIGINT: [0, 1, -1, 2, 3, -5, 2**40, 2**62, LONG_MAX, LONG_MIN],
    T.DOUBLE: [0.0, -0.0, 1.5, -2.5, 0.1, math.nan, math.inf, -math.inf, 1e300, -1e-310],
    T.FLOAT: [0.0, -0.0, 0.5, 2.5, -1.0, 3.0, math.nan, math.inf, 1e30, 0.1],
    T.STRING: ["a", "b", "c", "zz", "x", "it's", "\\", '"; abort(); /*\n', "q"],
    T.TIMESTAMP: [0, 10, 15, 16, 44, 45, 50, -1, 10**12],
    T.BOOLEAN: [True, False],
}


def random_values(rng: np.random.Generator, sql_type: SqlType, rows: int, nulls: float) -> list:
    """Specials, random values of the type's range, and NULLs."""
    special = SPECIAL[sql_type]
    values = []
    for _ in range(rows):
        draw = rng.random()
        if draw < nulls:
            values.append(None)
        elif draw < 0.6 or sql_type in (T.STRING, T.BOOLEAN):
            values.append(special[int(rng.integers(len(special)))])
        elif sql_type is T.INT:
            values.append(int(rng.integers(INT_MIN, INT_MAX, endpoint=True)))
        elif sql_type is T.BIGINT:
            values.append(int(rng.integers(LONG_MIN, LONG_MAX, endpoint=True)))
        elif sql_type is T.TIMESTAMP:
            values.append(int(rng.integers(-(10**12), 10**12)))
        elif sql_type is T.FLOAT:
            values.append(float(np.float32(rng.normal() * 10.0 ** rng.integers(-3, 6))))
        else:
            values.append(float(rng.normal() * 10.0 ** rng.integers(-3, 10)))
    return values


def window_results(seed: int, rows: int, nulls: float = 0.15) -> pa.RecordBatch:
    """A random window-result batch of SCHEMA: keys of every type, bounds, two aggregates."""
    rng = np.random.default_rng(seed)
    arrays = [
        pa.array(random_values(rng, sql_type, rows, nulls), sql_type.info.arrow)
        for _, sql_type in KEYS
    ]
    starts = rng.integers(-100, 100, rows) * 10
    timestamp = T.TIMESTAMP.info.arrow
    arrays += [pa.array(starts, timestamp), pa.array(starts + 30, timestamp)]
    arrays += [
        pa.array(random_values(rng, sql_type, rows, nulls), sql_type.info.arrow)
        for sql_type in ENV.aggregates
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA)


_TIMESTAMP_UTC = pa.timestamp("us", tz="UTC")


def _timestamps(micros: np.ndarray) -> pa.Array:
    # a view of the int64 buffer as timestamps (an Arrow cast copies and checks every value)
    micros = np.ascontiguousarray(micros, np.int64)
    return pa.Array.from_buffers(_TIMESTAMP_UTC, len(micros), [None, pa.py_buffer(micros)])


def project(
    pipeline,  # the old WindowPipeline's shape: lift.keys, window.aggregates, having, outputs
    keys: list[pa.Array],
    aggregates: list[pa.Array],
    window_start: np.ndarray,
    window_end: np.ndarray,
) -> pa.RecordBatch:
    """The window operator's emit before Filter and Project were operators (fa452ae's
    `results.project`), kept as the reference the operators must equal."""
    length = len(window_start)
    key_columns = pipeline.lift.keys
    column_types = {c.name: c.type for c in key_columns}
    columns = {c.name: array for c, array in zip(key_columns, keys, strict=True)}
    aggregate_types = [p.result_type for p in pipeline.window.aggregates]
    bounds = {"start": _timestamps(window_start), "end": _timestamps(window_end)}
    if pipeline.having is not None and length:
        keep = to_mask(
            evaluate_expression(
                pipeline.having,
                column_types,
                columns,
                aggregates=aggregates,
                aggregate_types=aggregate_types,
                window_bounds=bounds,
                length=length,
            )
        )
        if not keep.all():
            selection = pa.array(np.nonzero(keep)[0], pa.int64())
            columns = {name: array.take(selection) for name, array in columns.items()}
            aggregates = [array.take(selection) for array in aggregates]
            bounds = {name: array.take(selection) for name, array in bounds.items()}
            length = int(keep.sum())
    arrays, fields = [], []
    for output in pipeline.outputs:
        arrow_type = output.type.info.arrow
        array = evaluate_expression(
            output.expression,
            column_types,
            columns,
            aggregates=aggregates,
            aggregate_types=aggregate_types,
            window_bounds=bounds,
            length=length,
        )
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        if array.type != arrow_type:
            array = array.cast(arrow_type)
        arrays.append(array)
        fields.append(pa.field(output.name, arrow_type))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def outputs_of(expressions: list[exp.Expression]) -> tuple[OutputColumn, ...]:
    return tuple(OutputColumn(f"o{k}", e, infer_type(e, ENV)) for k, e in enumerate(expressions))


def reference(
    batch: pa.RecordBatch, having: exp.Expression | None, outputs: tuple[OutputColumn, ...]
) -> list[pa.RecordBatch]:
    """What the window operator's emit gave: `results.project` over the batch's parts."""
    layout = WindowResultLayout.from_schema(batch.schema)
    columns, aggregates, bounds = layout.split(batch)
    pipeline = SimpleNamespace(
        lift=SimpleNamespace(keys=[SimpleNamespace(name=n, type=t) for n, t in KEYS]),
        window=SimpleNamespace(aggregates=[SimpleNamespace(result_type=t) for t in ENV.aggregates]),
        having=having,
        outputs=outputs,
    )
    micros = [np.asarray(bounds[b].cast(pa.int64())) for b in ("start", "end")]
    result = project(pipeline, list(columns.values()), aggregates, *micros)
    return [result] if result.num_rows else []


def run_operators(
    batch: pa.RecordBatch, having: exp.Expression | None, outputs, evaluator
) -> list[pa.RecordBatch]:
    batches = [batch]
    if having is not None:
        batches = FilterOperator(having, batch.schema, evaluator).process(batch)
    projection = ProjectOperator(outputs, batch.schema, evaluator)
    return [out for b in batches for out in projection.process(b)]


def same_value(got: object, expected: object, close: bool) -> bool:
    if isinstance(expected, float) and isinstance(got, float):
        if math.isnan(expected) or math.isnan(got):
            return math.isnan(expected) and math.isnan(got)
        if close and got != expected:
            return math.isclose(got, expected, rel_tol=1e-14)
        # bit-exact, so -0.0 and 0.0 differ
        return struct.pack("<d", got) == struct.pack("<d", expected)
    return got == expected


def differences(got: list[pa.RecordBatch], expected: list[pa.RecordBatch], labels) -> list:
    """(output, row, got, expected) of every cell that differs; types must be equal."""
    assert len(got) == len(expected)
    found = []
    for g, e in zip(got, expected, strict=True):
        assert g.schema == e.schema
        for k, (column, label) in enumerate(zip(g.columns, labels, strict=True)):
            close = any(isinstance(n, TRANSCENDENTAL) for n in label.walk())
            for row, (a, b) in enumerate(
                zip(column.to_pylist(), e.column(k).to_pylist(), strict=True)
            ):
                if (a is None) != (b is None) or (b is not None and not same_value(a, b, close)):
                    found.append((label.sql() if not has_bound(label) else repr(label), row, a, b))
    return found


def has_bound(expression: exp.Expression) -> bool:
    return any(isinstance(n, nodes.WindowBound | nodes.AggregateRef) for n in expression.walk())


def boolean(expressions: list[exp.Expression]) -> list[exp.Expression]:
    return [e for e in expressions if infer_type(e, ENV) is T.BOOLEAN]


# --- CPU: the operators give what results.project gave ---------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_cpu_project_equals_results_project(seed: int) -> None:
    expressions = corpus()
    outputs = outputs_of(expressions)
    batch = window_results(seed, 97)
    got = run_operators(batch, None, outputs, CpuProjectEvaluator())
    assert differences(got, reference(batch, None, outputs), expressions) == []
    assert got[0].num_rows == 97


def test_cpu_filter_then_project_equals_results_project() -> None:
    expressions = corpus()
    predicates = boolean(expressions)
    assert len(predicates) >= 40
    shown = [*expressions[:12], exp.column("s"), nodes.AggregateRef(this=0)]
    outputs = outputs_of(shown)
    batch = window_results(7, 61)
    kept = set()
    for having in predicates:
        got = run_operators(batch, having, outputs, CpuProjectEvaluator())
        assert differences(got, reference(batch, having, outputs), shown) == []
        kept.add(got[0].num_rows if got else 0)
    assert 0 in kept and len(kept) > 5  # predicates that drop every row, and partial ones


def test_filter_keeps_true_rows_only() -> None:
    batch = window_results(11, 40)
    evaluator = CpuProjectEvaluator()
    # NULL (aggregate 1 is NULL in some rows) and FALSE both drop the row
    having = exp.GT(this=nodes.AggregateRef(this=1), expression=exp.Literal.number(0))
    operator = FilterOperator(having, SCHEMA, evaluator)
    (out,) = operator.process(batch)
    values = batch.column(SCHEMA.get_field_index(aggregate_column(1))).to_pylist()
    expected = [row for row, v in enumerate(values) if v is not None and v > 0]
    assert None in values and 0 < len(expected) < 40
    assert out.schema == SCHEMA
    kept = out.column(SCHEMA.get_field_index(aggregate_column(1))).to_pylist()
    assert kept == [values[row] for row in expected]
    assert operator.metrics() == RowMetrics(rows_in=40, rows_out=len(expected))
    # every row kept: the batch itself, no copy; none kept: no batch
    assert FilterOperator(parse("TRUE"), SCHEMA, evaluator).process(batch)[0] is batch
    assert FilterOperator(parse("FALSE"), SCHEMA, evaluator).process(batch) == []
    boolean_key = FilterOperator(exp.column("b"), SCHEMA, evaluator).process(batch)
    assert boolean_key[0].column(SCHEMA.get_field_index("b")).to_pylist() == (
        [True] * boolean_key[0].num_rows
    )


def test_project_types_outputs_as_the_plan_says() -> None:
    batch = window_results(5, 10)
    # the plan's type wins over the expression's (a wider type, as the binder may ask)
    outputs = (
        OutputColumn("k", exp.column("i"), T.BIGINT),
        OutputColumn("start", nodes.WindowBound(this="start"), T.TIMESTAMP),
        OutputColumn("avg", nodes.AggregateRef(this=0), T.DOUBLE),
        OutputColumn("s", exp.column("s"), T.STRING),
    )
    operator = ProjectOperator(outputs, SCHEMA, CpuProjectEvaluator())
    (out,) = operator.process(batch)
    assert out.schema == operator.schema
    assert out.schema.field("k").type == pa.int64()
    assert out.column(0).to_pylist() == batch.column(SCHEMA.get_field_index("i")).to_pylist()
    assert out.column(1).equals(batch.column(SCHEMA.get_field_index(WINDOW_START)))
    assert out.column(3).equals(batch.column(SCHEMA.get_field_index("s")))


def test_empty_batches_and_the_stateless_protocol() -> None:
    empty = window_results(3, 0)
    evaluator = CpuProjectEvaluator()
    filter_ = FilterOperator(parse("i > 0"), SCHEMA, evaluator)
    projection = ProjectOperator(outputs_of([parse("i + 1")]), SCHEMA, evaluator)
    for operator in (filter_, projection):
        assert operator.process(empty) == []
        assert operator.on_watermark(10**9) == [] and operator.finish() == []
        assert operator.snapshot() == b""
        operator.restore(b"")
        with pytest.raises(ValueError):
            operator.restore(b"state")
        with pytest.raises(ValueError):
            operator.process(empty, input=1)
        assert operator.metrics() == RowMetrics(0, 0)
    assert filter_.schema == SCHEMA
    assert projection.schema == pa.schema([pa.field("o0", pa.int32())])


def test_all_null_inputs() -> None:
    batch = window_results(9, 30, nulls=1.0)
    expressions = corpus()
    outputs = outputs_of(expressions)
    got = run_operators(batch, None, outputs, CpuProjectEvaluator())
    assert differences(got, reference(batch, None, outputs), expressions) == []


def test_layout_reads_the_window_result_schema() -> None:
    layout = WindowResultLayout.from_schema(SCHEMA)
    assert layout.key_names == tuple(ENV.columns)
    assert layout.aggregate_types == ENV.aggregates
    assert SCHEMA.names[layout.bound_positions[1]] == WINDOW_END
    assert layout.position(("aggregate", 1)) == SCHEMA.get_field_index(aggregate_column(1))
    assert layout.position(("column", HOSTILE_STRING)) == SCHEMA.get_field_index(HOSTILE_STRING)
    assert layout.env == ENV


# --- placement: what the GPU kernel can evaluate --------------------------------------------


def test_gpu_unsupported_reason() -> None:
    env = TypeEnv(columns={"k": T.BIGINT, "s": T.STRING, "b": T.BOOLEAN}, aggregates=(T.DOUBLE,))
    first = nodes.AggregateRef(this=0)
    assert gpu_unsupported_reason([], env) is None
    assert gpu_unsupported_reason([parse("k * 2 + 1"), parse("b AND k > 0")], env) is None
    assert gpu_unsupported_reason([exp.GT(this=first, expression=parse("k"))], env) is None
    # bare references of any type pass through on the host
    assert gpu_unsupported_reason([parse("s"), parse("(s)"), first], env) is None
    assert gpu_unsupported_reason([parse("s = 'a'")], env) == "s = 'a' compares STRING values"
    assert "STRING" in gpu_unsupported_reason([parse("k > 0"), parse("s IN ('a', 'b')")], env)
    assert "STRING" in gpu_unsupported_reason([parse("s IS NULL")], env)
    having = exp.And(this=exp.GT(this=first, expression=parse("1")), expression=parse("s = 'x'"))
    assert gpu_unsupported_reason([having], env) == "agg0 > 1 AND s = 'x' compares STRING values"
    # the corpus: every expression without a STRING value renders
    for expression in corpus():
        reason = gpu_unsupported_reason([expression], ENV)
        reads_strings = any(
            isinstance(n, exp.Column) and ENV.columns[n.name] is T.STRING for n in expression.walk()
        ) or any(isinstance(n, exp.Literal) and n.is_string for n in expression.walk())
        assert (reason is not None) == (reads_strings and not is_bare_reference(expression))


def gpu_corpus() -> list[exp.Expression]:
    """The corpus expressions the GPU evaluates (no STRING values)."""
    return [e for e in corpus() if gpu_unsupported_reason([e], ENV) is None]


# --- the rendered kernels compile ------------------------------------------------------------


def nvcc_ptx(source: str, folder, options: tuple[str, ...]) -> str:
    if shutil.which("nvcc") is None:
        print("SKIP REASON: nvcc is not on PATH; project kernels rendered, not compiled")
        pytest.skip("nvcc not on PATH")
    (folder / "project.cu").write_text(source)
    command = ["nvcc", "--ptx", "-arch=sm_90", "-O3", "-std=c++17", *options]
    result = subprocess.run(
        [*command, "-o", "project.ptx", "project.cu"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    return (folder / "project.ptx").read_text()


def test_project_kernels_compile_with_nvcc(tmp_path) -> None:
    computed = [e for e in gpu_corpus() if not is_bare_reference(e)]
    assert len(computed) >= 100
    predicates = boolean(computed)
    kernels = [
        render_project_kernels(computed, ENV, predicates[-1]),  # every output and a mask
        render_project_kernels([], ENV, predicates[0]),  # a filter
        render_project_kernels([parse("1 + 2")], ENV),  # no input at all
        render_project_kernels([exp.column("b"), parse("NOT b")], ENV),  # BOOLEAN in and out
    ]
    assert kernels[0].has_mask and not kernels[2].has_mask and kernels[2].inputs == ()
    assert len(kernels[0].outputs) == len(computed)
    source = "\n".join(k.source for k in kernels)
    for forbidden in [HOSTILE_NUMBER, HOSTILE_STRING, "abort", "rm -rf"]:
        assert forbidden not in source
    ptx = nvcc_ptx(source, tmp_path, COMPILE_OPTIONS)
    for kernel in kernels:
        assert f".entry {kernel.names['project']}(" in ptx


def test_compile_options_keep_multiply_and_add_apart(tmp_path) -> None:
    """The host rounds `d * d + d` twice; nvcc contracts it to one fma unless told not to:
    in the project kernel and in the query module (the lift's WHERE and arguments)."""
    project = render_project_kernels([parse("d * d + d"), parse("f * f - f")], ENV)
    session = mg.Session(backend="cpu")
    session.execute("CREATE STREAM t (ts TIMESTAMP, d DOUBLE) WITH (event_time = 'ts')")
    plan = session.sql("SELECT SUM(d * d + d) FROM t [RANGE 1 SECOND] WHERE d * 3 - 0.3 > 0").plan
    query = render_kernels(ph.find(plan, ph.LiftExec), ph.find(plan, ph.WindowAggregateExec))
    for kernel in (project, query):
        assert " ".join(COMPILE_OPTIONS) in kernel.source.splitlines()[0]  # in the hash
        assert "fma.rn" in nvcc_ptx(kernel.source, tmp_path, ())
        assert "fma.rn" not in nvcc_ptx(kernel.source, tmp_path, COMPILE_OPTIONS)


# --- GPU: the operators equal the CPU operators (GPU hosts only) ----------------------------


@pytest.fixture(scope="module")
def gpu_evaluator():
    pytest.importorskip("cupy")
    from mangonel.runtime.gpu.project import GpuProjectEvaluator

    return GpuProjectEvaluator()


@pytest.mark.gpu
@pytest.mark.parametrize("seed,rows,nulls", [(1, 997, 0.15), (2, 64, 0.0), (3, 33, 1.0)])
def test_gpu_project_equals_cpu(gpu_evaluator, seed: int, rows: int, nulls: float) -> None:
    expressions = gpu_corpus()
    outputs = outputs_of(expressions)
    batch = window_results(seed, rows, nulls)
    got = run_operators(batch, None, outputs, gpu_evaluator)
    expected = run_operators(batch, None, outputs, CpuProjectEvaluator())
    assert differences(got, expected, expressions) == []


@pytest.mark.gpu
def test_gpu_filter_equals_cpu(gpu_evaluator) -> None:
    predicates = boolean(gpu_corpus())
    batch = window_results(4, 500)
    shown = [*gpu_corpus()[:8], exp.column("s"), nodes.AggregateRef(this=1)]
    outputs = outputs_of(shown)
    for having in predicates[:: max(1, len(predicates) // 16)] + [exp.column("b")]:
        got = run_operators(batch, having, outputs, gpu_evaluator)
        expected = run_operators(batch, having, outputs, CpuProjectEvaluator())
        assert differences(got, expected, shown) == [], having


@pytest.mark.gpu
def test_gpu_large_and_empty_batches(gpu_evaluator) -> None:
    expressions = [parse("i + l * 3"), parse("d / f"), parse("CAST(d AS INT)"), parse("NOT b")]
    outputs = outputs_of(expressions)
    having = parse("l % 7 <> 0 OR d IS NULL")
    batch = window_results(8, 300_000)
    got = run_operators(batch, having, outputs, gpu_evaluator)
    expected = run_operators(batch, having, outputs, CpuProjectEvaluator())
    assert got[0].num_rows > 1000
    assert differences(got, expected, expressions) == []
    assert run_operators(window_results(8, 0), having, outputs, gpu_evaluator) == []


@pytest.mark.gpu
def test_gpu_refuses_strings(gpu_evaluator) -> None:
    with pytest.raises(PlanError, match="STRING"):
        FilterOperator(parse("s = 'a'"), SCHEMA, gpu_evaluator)


# --- the GPU evaluator end to end with its kernel compiled for the host ---------------------
# CI has no GPU. The GPU evaluator's own work (choosing the inputs, staging them, the packed
# output buffer, Arrow arrays from device bytes, bare references, the mask) and the rendered
# kernel source still run here: the kernel is compiled with g++ against a shim of the few CUDA
# intrinsics the renderer uses (one thread walks every row), CuPy's arrays are numpy arrays,
# and the launch is a ctypes call. What this cannot check is CuPy and the device themselves
# (the gpu-marked tests above do).

_STAGER = staging.Stager  # the real one (the fixture below replaces it in gpu_project)


class _HostStager:
    """The stager's host half (the device types of each column), no copies."""

    def __init__(self, strings) -> None:
        self.strings = strings

    def stage(self, arrays, columns) -> list:
        return _STAGER.host_columns(self, arrays, columns)


@pytest.fixture
def host_gpu_evaluator(tmp_path, monkeypatch):
    if shutil.which("g++") is None:
        pytest.skip("g++ not on PATH")
    from mangonel.runtime.gpu.project import GpuProjectEvaluator

    write_shim(tmp_path)
    options_seen = []

    def load_module(generated):
        options_seen.append(generated.source.splitlines()[0])
        return HostModule(generated.source, tmp_path)

    monkeypatch.setattr(device, "cupy", lambda: HostCupy())
    monkeypatch.setattr(gpu_project, "Stager", _HostStager)
    context = SimpleNamespace(module=load_module)
    monkeypatch.setattr(gpu_project, "shared_context", lambda: context)
    evaluator = GpuProjectEvaluator()
    yield evaluator
    assert options_seen and all(" ".join(COMPILE_OPTIONS) in line for line in options_seen)


def test_gpu_evaluator_on_the_host_equals_cpu(host_gpu_evaluator) -> None:
    expressions = gpu_corpus()
    assert any(is_bare_reference(e) for e in expressions)
    outputs = outputs_of(expressions)
    for seed, rows, nulls in [(1, 301, 0.15), (2, 64, 0.0), (3, 17, 1.0)]:
        batch = window_results(seed, rows, nulls)
        got = run_operators(batch, None, outputs, host_gpu_evaluator)
        expected = run_operators(batch, None, outputs, CpuProjectEvaluator())
        assert differences(got, expected, expressions) == []
    predicates = boolean(gpu_corpus())
    batch = window_results(4, 200)
    shown = [*expressions[:8], exp.column("s"), nodes.AggregateRef(this=1)]
    outputs = outputs_of(shown)
    for having in predicates[:: max(1, len(predicates) // 12)] + [exp.column("b")]:
        got = run_operators(batch, having, outputs, host_gpu_evaluator)
        expected = run_operators(batch, having, outputs, CpuProjectEvaluator())
        assert differences(got, expected, shown) == [], having
    assert run_operators(window_results(8, 0), predicates[0], outputs, host_gpu_evaluator) == []
    with pytest.raises(PlanError, match="STRING"):
        ProjectOperator(outputs_of([parse("s = 'a'")]), SCHEMA, host_gpu_evaluator)


def test_gpu_bare_references_need_no_kernel(host_gpu_evaluator) -> None:
    from mangonel.runtime.gpu.project import GpuProjectEvaluator

    evaluator = GpuProjectEvaluator()
    bare = [exp.column("s"), exp.Paren(this=exp.column("i")), nodes.WindowBound(this="end")]
    projection = ProjectOperator(outputs_of([*bare, nodes.AggregateRef(this=0)]), SCHEMA, evaluator)
    filter_ = FilterOperator(exp.column("b"), SCHEMA, evaluator)
    assert evaluator._stager is None  # no kernel, no staging: the batch's own columns
    batch = window_results(12, 50)
    (out,) = projection.process(batch)
    for k, name in enumerate(["s", "i", WINDOW_END, aggregate_column(0)]):
        source = batch.column(SCHEMA.get_field_index(name))
        assert out.column(k).buffers()[1].address == source.buffers()[1].address  # no copy
    (kept,) = filter_.process(batch)
    flags = batch.column(SCHEMA.get_field_index("b")).to_pylist()
    assert kept.num_rows == flags.count(True) < 50 and kept.schema == SCHEMA
    assert kept.column(0).to_pylist() == [
        v for v, flag in zip(batch.column(0).to_pylist(), flags, strict=True) if flag
    ]
    # a kernel for the fixture's teardown check (it asserts the project kernels' options)
    ProjectOperator(outputs_of([parse("i + 1")]), SCHEMA, evaluator)
