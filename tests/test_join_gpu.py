"""The GPU join kernels (runtime/gpu/join.py, compiler/codegen_join.py, join.cu.j2).

Without a GPU: every rendered join module compiles with nvcc (`--ptx -arch=sm_90`), and the
GPU kernels run end to end on the host, their CUDA source compiled with g++ over a shim of
the CUDA intrinsics (blockIdx 0, one thread: a grid-stride kernel becomes a sequential loop;
atomics are plain updates), numpy standing in for CuPy. They must equal the CPU kernels on
random inputs, and the join operator over them must give the oracle's rows on the random
join cases. On a GPU host (`pytest -m gpu`) the same comparisons run on the device.
"""

from __future__ import annotations

import shutil
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest
from cuda_host import HostCupy, host_modules
from fuzz_join_cases import check_join, draw_join_case
from oracle import rows_of

from mangonel.aggregates import state_kinds
from mangonel.aggregates.state import Layout
from mangonel.catalog.types import SqlType
from mangonel.compiler import physical as ph
from mangonel.compiler.codegen import explain_codegen
from mangonel.compiler.codegen_join import JoinScatter, render_join_kernels, scatter_role
from mangonel.compiler.explain import explain_text
from mangonel.runtime.cpu import operators as cpu_operators
from mangonel.runtime.cpu.join import CpuJoinKernels
from mangonel.runtime.gpu import device
from mangonel.runtime.gpu import join as gpu_join
from mangonel.runtime.operators import registry
from mangonel.runtime.operators.join import JoinOperator
from mangonel.runtime.operators.registry import Registration
from mangonel.session import Session

FIXED_KINDS = tuple(k for k in state_kinds() if k.layout is Layout.FIXED and k.cuda is not None)
ALL_SCATTERS = tuple(
    JoinScatter(kind, ctype, scatter_role(kind, ctype))
    for kind in FIXED_KINDS
    for ctype in sorted(
        {
            "long long" if kind.storage(t) == np.dtype(np.int64) else "double"
            for t in (SqlType.BIGINT, SqlType.DOUBLE)
        }
    )
)


# -- every rendered module compiles with nvcc ---------------------------------------------


def test_join_kernels_compile_with_nvcc(tmp_path) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH")
    for algorithm in ("hash", "sort-merge"):
        for scatters in ((), ALL_SCATTERS):
            generated = render_join_kernels(algorithm, scatters)
            source = tmp_path / "join.cu"
            source.write_text(generated.source)
            result = subprocess.run(
                ["nvcc", "--ptx", "-arch=sm_90", "-O3", "-std=c++17", "-o", "join.ptx", "join.cu"],
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert result.returncode == 0, result.stderr[-5000:]
            ptx = (tmp_path / "join.ptx").read_text()
            for name in generated.names.values():
                assert f".entry {name}(" in ptx
    assert render_join_kernels("hash").names.keys() >= {"bucket_count", "probe_write", "mark"}
    assert "merge_count" not in render_join_kernels("hash").names
    with pytest.raises(ValueError, match="algorithm"):
        render_join_kernels("nested-loops")


# -- the kernels on the host: g++ over a CUDA shim, numpy for CuPy ------------------------


@pytest.fixture(scope="module")
def host_device(tmp_path_factory):
    """Patches runtime/gpu so GpuJoinKernels run on the host; yields the host module loader."""
    if shutil.which("g++") is None:
        pytest.skip("g++ not on PATH")
    folder = tmp_path_factory.mktemp("join_shim")
    module = host_modules(folder)

    patch = pytest.MonkeyPatch()
    # one stand-in: the process's pinned pool reuses a buffer only for the CuPy that made it
    host = HostCupy()
    patch.setattr(device, "cupy", lambda: host)
    patch.setattr(gpu_join, "shared_context", lambda size: SimpleNamespace(module=module))
    yield module
    patch.undo()


def kernels_of(algorithm: str, scatters: tuple = ()) -> gpu_join.GpuJoinKernels:
    kernels = gpu_join.GpuJoinKernels.__new__(gpu_join.GpuJoinKernels)
    kernels.options = gpu_join.GpuOptions()
    kernels.host = CpuJoinKernels()
    kernels.generated = render_join_kernels(algorithm, scatters)
    module = gpu_join.shared_context(64).module(kernels.generated)
    kernels._functions = {r: module.get_function(n) for r, n in kernels.generated.names.items()}
    kernels.launches = 0
    return kernels


def _rows(rng: np.random.Generator, n: int, keys: int, skew: bool) -> tuple[np.ndarray, ...]:
    slots = (rng.zipf(1.3, n) % keys) if skew else rng.integers(0, keys, n)
    slots = np.where(rng.random(n) < 0.1, -1, slots).astype(np.int64)
    first = rng.integers(0, 20, n).astype(np.int64)
    last = first + rng.integers(0, 6, n)
    return slots, first, last


def _pairs(i: np.ndarray, j: np.ndarray) -> list[tuple[int, int]]:
    return list(zip(i.tolist(), j.tolist(), strict=True))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("algorithm", ["hash", "sort-merge"])
def test_match_equals_cpu(host_device, algorithm: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    gpu, cpu = kernels_of(algorithm), CpuJoinKernels()
    for n_a, n_b in [(50, 300), (300, 50), (1, 1), (0, 5), (200, 200)]:
        a, b = _rows(rng, n_a, 12, seed % 2 == 1), _rows(rng, n_b, 12, seed % 2 == 1)
        got, want = gpu.match(algorithm, *a, *b), cpu.match(algorithm, *a, *b)
        # the same pairs; their order differs (the device's build side is sorted by window
        # too, and row order inside a window is unspecified: docs/semantics.md)
        assert sorted(_pairs(*got)) == sorted(_pairs(*want))
    assert gpu.launches > 0


@pytest.mark.parametrize("algorithm", ["hash", "sort-merge"])
def test_match_narrows_by_window_and_keeps_unbounded_rows(host_device, algorithm: str) -> None:
    """Build rows sorted by (slot, first window) let a probe row search only the rows whose
    range can overlap its own; rows spanning every window (a static table's) and ranges of
    very different widths must still find every overlapping pair."""
    rng = np.random.default_rng(7)
    gpu, cpu = kernels_of(algorithm), CpuJoinKernels()
    everything = (-(2**62), 2**62)  # the driver's ALL_FIRST, ALL_LAST: a table's rows
    n = 120
    slots = rng.integers(0, 5, n).astype(np.int64)
    first = rng.integers(-50, 50, n).astype(np.int64)
    last = first + np.where(rng.random(n) < 0.1, 40, rng.integers(0, 3, n))
    table = (slots[:30], np.full(30, everything[0]), np.full(30, everything[1]))
    for a, b in [((slots, first, last), table), (table, (slots, first, last))]:
        for a_, b_ in [(a, b), (b, a)]:
            got, want = gpu.match(algorithm, *a_, *b_), cpu.match(algorithm, *a_, *b_)
            assert sorted(_pairs(*got)) == sorted(_pairs(*want))
    half = n // 2
    a = (slots[:half], first[:half], last[:half])
    b = (slots[half:], first[half:], last[half:])
    got, want = gpu.match(algorithm, *a, *b), cpu.match(algorithm, *a, *b)
    assert sorted(_pairs(*got)) == sorted(_pairs(*want)) and len(want[0])


def test_match_finds_pairs(host_device) -> None:
    """Not vacuous: a hand-made case with its pairs written out."""
    gpu = kernels_of("hash")
    slots_a, first_a, last_a = np.array([0, 1, -1, 0]), np.array([0, 0, 0, 5]), np.array([2] * 4)
    slots_b, first_b, last_b = np.array([0, 0, 1]), np.array([1, 3, 0]), np.array([1, 3, 0])
    got = gpu.match("hash", slots_a, first_a, last_a, slots_b, first_b, last_b)
    assert sorted(_pairs(*got)) == [(0, 0), (1, 2)]


@pytest.mark.parametrize("seed", range(4))
def test_expand_and_mark_equal_cpu(host_device, seed: int) -> None:
    rng = np.random.default_rng(seed)
    gpu, cpu = kernels_of("hash"), CpuJoinKernels()
    _, first, last = _rows(rng, 400, 1, False)
    for lo, hi in [(0, 30), (5, 9), (7, 7), (9, 5)]:
        got, want = gpu.expand(first, last, lo, hi), cpu.expand(first, last, lo, hi)
        assert _pairs(*got) == _pairs(*want)
    origin = first.copy()
    rows = rng.integers(0, 400, 300)
    lo = first[rows] + rng.integers(0, 2, 300)
    hi = np.minimum(last[rows], lo + rng.integers(0, 3, 300))
    matched_gpu, matched_cpu = np.zeros((400, 8), np.uint8), np.zeros((400, 8), np.uint8)
    gpu.mark_matched(matched_gpu, rows, lo, hi, origin)
    cpu.mark_matched(matched_cpu, rows, lo, hi, origin)
    assert matched_cpu.any() and np.array_equal(matched_gpu, matched_cpu)


@pytest.mark.parametrize("scatter", ALL_SCATTERS, ids=lambda s: s.role)
def test_scatter_equals_cpu(host_device, scatter: JoinScatter) -> None:
    """The kinds' CUDA atomic fragments, combined into cells, equal the kinds' CPU scatter."""
    rng = np.random.default_rng(7)
    gpu, cpu = kernels_of("hash", (scatter,)), CpuJoinKernels()
    dtype = np.dtype(np.int64 if scatter.ctype == "long long" else np.float64)
    parts = len(scatter.kind.parts)
    cells, rows = 40, 500
    index = np.where(rng.random(rows) < 0.1, -1, rng.integers(0, cells, rows)).astype(np.int64)
    if dtype == np.int64:
        values = [rng.integers(-1000, 1000, rows).astype(dtype) for _ in range(parts)]
    else:
        values = [rng.normal(size=rows) * 100 for _ in range(parts)]
    if scatter.kind.name == "moments":
        values[0] = rng.integers(0, 3, rows).astype(dtype)  # n of a lifted tuple: 0 or 1..
        values[2] = np.abs(values[2])
    if scatter.kind.name in ("bool_and", "bool_or"):
        values = [rng.integers(0, 2, rows).astype(dtype) for _ in range(parts)]
    neutrals = scatter.kind.neutral(dtype)
    got = [np.full(cells, v, dtype) for v in neutrals]
    want = [np.full(cells, v, dtype) for v in neutrals]
    gpu.scatter(scatter.kind)(*got, index, *values)
    cpu_scatter = cpu.scatter(scatter.kind)
    cpu_scatter(*want, np.where(index >= 0, index, -1), *values)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, equal_nan=True)
    assert any(
        not np.array_equal(g, np.full(cells, v, dtype)) for g, v in zip(got, neutrals, strict=True)
    )


@pytest.mark.parametrize("seed", range(6))
def test_prefix_windows_equals_cpu(host_device, seed: int) -> None:
    rng = np.random.default_rng(seed)
    gpu, cpu = kernels_of("hash"), CpuJoinKernels()
    groups, cells, parts = 7, 60, 2
    lo, hi = 10, 10 + int(rng.integers(0, 25))
    cell_k = np.sort(rng.integers(lo, hi + 1, cells)).astype(np.int64)
    cell_g = rng.integers(0, groups, cells).astype(np.int64)
    # +1/-1 credits: a group's count never goes negative
    sign = np.where(rng.random(cells) < 0.6, 1, -1)
    deltas = np.stack([sign, sign * rng.integers(1, 50, cells)]).astype(np.int64)
    running = np.zeros((parts, groups), np.int64)
    running[0] = rng.integers(0, 3, groups)
    running[1] = running[0] * 5
    running_gpu, running_cpu = running.copy(), running.copy()
    got = gpu.prefix_windows(cell_k, cell_g, deltas, running_gpu, lo, hi)
    want = cpu.prefix_windows(cell_k, cell_g, deltas, running_cpu, lo, hi)
    for g, w in zip(got, want, strict=True):
        assert np.array_equal(g, w)
    assert np.array_equal(running_gpu, running_cpu)
    empty = (np.empty(0, np.int64),) * 2 + (np.empty((parts, 0), np.int64),)
    got = gpu.prefix_windows(*empty, running_gpu, hi + 1, hi + 4)
    want = cpu.prefix_windows(*empty, running_cpu, hi + 1, hi + 4)
    for g, w in zip(got, want, strict=True):
        assert np.array_equal(g, w)


@pytest.fixture
def gpu_kernels_in_cpu_plans(host_device, monkeypatch):
    """The CPU plan's join operators run over GpuJoinKernels (on the host shim); yields the
    kernels made."""
    return join_operators_over_gpu_kernels(monkeypatch)


def join_operators_over_gpu_kernels(monkeypatch) -> list:  # noqa: ANN001
    """Make the CPU plan's join operators run over GpuJoinKernels (on whatever device
    stand-in the caller installed); returns the list of the kernels made, as they are."""
    made: list[gpu_join.GpuJoinKernels] = []

    def factory(node, input_schema, step_kernels):  # noqa: ANN001, ANN202
        made.append(gpu_join.GpuJoinKernels(node, CpuJoinKernels()))
        return JoinOperator(node, made[-1])

    operators = dict(cpu_operators.OPERATORS)
    for node_type in list(operators):
        if node_type.__name__ in ("WindowJoinExec", "JoinAggregateExec"):
            operators[node_type] = Registration(factory, reads_stream=True)
    monkeypatch.setattr(cpu_operators, "OPERATORS", operators)
    return made


def test_random_joins_over_gpu_kernels_match_the_oracle(gpu_kernels_in_cpu_plans) -> None:
    """The join cases of tests/test_join_cpu.py (and more), every join operator over the
    GPU kernels: the oracle's rows and late counts."""
    for seed in range(40):
        case = draw_join_case(seed)
        problem = check_join(case)
        assert problem is None, f"seed {seed}: {problem}\n{case.describe()}"
    assert len(gpu_kernels_in_cpu_plans) >= 40
    # (device-fused aggregations launch about one kernel per batch, the probe form several)
    assert sum(k.launches for k in gpu_kernels_in_cpu_plans) > 400


# -- placement: the join on the GPU unless gpu_join=False --------------------------------------

JOIN_SQL = """SELECT l.k, window_start, COUNT(*) AS n, SUM(l.x) AS s
FROM clicks [RANGE 4 SECONDS SLIDE 1 SECOND] AS l
LEFT JOIN views [RANGE 4 SECONDS SLIDE 1 SECOND] AS r ON l.k = r.k
GROUP BY l.k"""


def join_session(**options) -> Session:  # noqa: ANN003
    session = Session("cpu", **options)
    for statement in draw_join_case(0).ddl():
        session.execute(statement)
    return session


def test_gpu_plans_put_the_join_on_the_gpu_unless_gpu_join_is_off() -> None:
    query = join_session().sql(JOIN_SQL)
    on_gpu = ph.with_backend(query.plan, "gpu", "test")
    join, aggregate = ph.find(on_gpu, ph.WindowJoinExec), ph.find(on_gpu, ph.JoinAggregateExec)
    assert ph.placement(join, "join").backend == "gpu"
    assert ph.placement(aggregate, "aggregate").backend == "gpu"
    assert ph.placement(aggregate, "finalize") == ph.Placement(
        "finalize", "cpu", ph.JOIN_FINALIZE_ON_CPU
    )
    assert "join runs on cpu" not in explain_text(on_gpu)
    source = explain_codegen(on_gpu)
    assert source.startswith("// mangonel GPU join kernels (hash)")
    # device-fused (LEFT JOIN grouped by l.k): the pair kernels of both algorithms ("auto")
    # and the kept left side's unmatched-row kernel, no scatters
    assert "mg_fused_hash_" in source and "mg_fused_lonely_0_" in source
    assert "scatter_" not in source
    off = ph.with_backend(query.plan, "gpu", "test", gpu_join=False)
    join = ph.find(off, ph.WindowJoinExec)
    assert ph.placement(join, "join") == ph.Placement("join", "cpu", ph.JOIN_ON_CPU)
    assert "join runs on cpu because the gpu_join=False option" in explain_text(off)
    assert "none; the join steps run on the cpu" in explain_codegen(off)
    # the option reaches the planner through the session; CPU plans ignore it
    planned = join_session(gpu_join=False).sql(JOIN_SQL).plan
    assert ph.placement(ph.find(planned, ph.WindowJoinExec), "join").backend == "cpu"


def test_gpu_operators_register_the_join(host_device, monkeypatch) -> None:
    """A gpu_join plan runs through runtime/gpu/operators.py's registrations (on the host
    shim) and gives the CPU plan's rows."""
    from mangonel.runtime.gpu import operators as gpu_operators
    from mangonel.runtime.local.query import LocalQuery

    assert {ph.WindowJoinExec, ph.JoinAggregateExec} <= set(gpu_operators.OPERATORS)
    case = draw_join_case(3)
    session = join_session()
    query = session.sql(JOIN_SQL)
    gpu_plan = ph.with_backend(query.plan, "gpu", "test", gpu_join=True)

    # the GPU window kernels (CuPy streams) are not needed by the join: only their options
    original = registry.new_kernels
    stub = SimpleNamespace(options=gpu_join.GpuOptions(threads=64))
    monkeypatch.setattr(
        registry,
        "new_kernels",
        lambda backend, options=None: stub if backend == "gpu" else original(backend, options),
    )
    runner = LocalQuery(gpu_plan)
    made = [op for op in runner.operator.operators if isinstance(op, JoinOperator)]
    assert made and isinstance(made[0].kernels, gpu_join.GpuJoinKernels)
    assert made[0].kernels.options.threads == 64
    got = runner.run(list(case.batches()))
    want = LocalQuery(query.plan).run(list(case.batches()))
    assert got.num_rows > 0
    assert rows_of(got) == rows_of(want)


@pytest.mark.gpu
def test_gpu_join_equals_the_oracle_on_a_device(monkeypatch) -> None:
    """On a GPU host: the random join cases with the join on the GPU (Session(gpu_join=True))
    give the oracle's rows, as the CPU's do."""
    pytest.importorskip("cupy")
    import mangonel

    real = mangonel.Session
    monkeypatch.setattr(
        mangonel, "Session", lambda backend, **options: real("gpu", gpu_join=True, **options)
    )
    for seed in range(40):
        case = draw_join_case(seed)
        problem = check_join(case)
        assert problem is None, f"seed {seed}: {problem}\n{case.describe()}"


@pytest.mark.gpu
@pytest.mark.parametrize("algorithm", ["hash", "sort-merge"])
def test_gpu_kernels_equal_cpu_on_a_device(algorithm: str) -> None:
    pytest.importorskip("cupy")
    rng = np.random.default_rng(11)
    gpu = gpu_join.GpuJoinKernels(
        SimpleNamespace(algorithm=algorithm, window=None), CpuJoinKernels()
    )
    cpu = CpuJoinKernels()
    for n_a, n_b in [(5_000, 200_000), (200_000, 5_000), (1, 1)]:
        a, b = _rows(rng, n_a, 1000, algorithm == "sort-merge"), _rows(rng, n_b, 1000, False)
        got, want = gpu.match(algorithm, *a, *b), cpu.match(algorithm, *a, *b)
        assert sorted(_pairs(*got)) == sorted(_pairs(*want))
    _, first, last = _rows(rng, 100_000, 1, False)
    assert _pairs(*gpu.expand(first, last, 3, 17)) == _pairs(*cpu.expand(first, last, 3, 17))
