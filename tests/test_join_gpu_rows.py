"""Device-resident rows of a join without aggregation (`codegen_join.device_rows`,
runtime/gpu/join_rows.py): pairs kept on the device, the fired rows' columns gathered there
and copied into pinned blocks that the Arrow results are built over.

Without a GPU: the rows module (with its `rows_check` kernel) compiles with nvcc, and the
device-rows operator runs on the host through the g++ CUDA shim (tests/cuda_host.py, numpy
for CuPy) on the random join cases (oracle) and on the bench's materialised input (the CPU
operator's rows, in window order). On a GPU host (`-m gpu`) the same run on the device.
"""

# ruff: noqa: F811 - the tests take test_join_gpu's fixtures, imported by name
from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest
from fuzz_join_cases import check_join, draw_join_case
from test_join_gpu import gpu_kernels_in_cpu_plans, host_device  # noqa: F401 - fixtures

from mangonel.compiler import physical as ph
from mangonel.compiler.codegen_join import (
    DeviceRowsPlan,
    device_rows,
    render_node_join_kernels,
)
from mangonel.compiler.explain import explain_text
from mangonel.runtime.cpu import operators as _cpu_operators
from mangonel.runtime.gpu import join_rows, pinned
from mangonel.runtime.gpu.join_rows import DeviceJoinRows, lease
from mangonel.session import Session

ORIGINAL_CPU_OPERATORS = dict(_cpu_operators.OPERATORS)
DDL = (
    "CREATE STREAM clicks (ts TIMESTAMP, k BIGINT, x BIGINT, b BOOLEAN, n INT) "
    "WITH (event_time = 'ts', watermark = '0 microseconds')",
    "CREATE STREAM views (ts TIMESTAMP, k INT, y DOUBLE, s STRING) "
    "WITH (event_time = 'ts', watermark = '0 microseconds')",
)
WINDOW = "[RANGE 4 SECONDS SLIDE 1 SECOND]"


def same_rows(got: pa.Table, want: pa.Table) -> bool:
    """The same rows, window by window in window order: docs/semantics.md leaves the order
    of rows within a window open, and the forms differ there (the CPU's inner joins are
    joined at the firing, rows=firing: left-row-major; the device's match orders a window's
    pairs by window range; the host pair form keeps build-row order)."""
    for table in (got, want):
        for name in ("__window_start", "window_start"):
            if name in table.column_names:
                starts = table.column(name).cast(pa.int64()).to_numpy(zero_copy_only=False)
                assert (np.diff(starts) >= 0).all(), "windows out of order"
    order = [(name, "ascending") for name in want.column_names]
    return got.schema == want.schema and got.sort_by(order).equals(want.sort_by(order))


def _session(backend: str = "cpu", **options) -> Session:  # noqa: ANN003
    session = Session(backend, **options)
    for statement in DDL:
        session.execute(statement)
    return session


def _join(sql: str) -> ph.WindowJoinExec:
    return ph.find(_session().sql(sql).plan, ph.WindowJoinExec)


def _rows_case(seed: int):  # noqa: ANN202
    """A random join case without aggregation (inner or outer as drawn, every other seed
    inner; residual, WHERE, sliding, restore as drawn)."""
    case = replace(draw_join_case(seed), aggregated=False)
    return case if seed % 2 else replace(case, kind="inner")


def _device_rows_made(made: list) -> list[DeviceJoinRows]:
    return [k.rows_form for k in made if getattr(k, "rows_form", None) is not None]


# -- which joins keep their rows on the device, EXPLAIN, nvcc ------------------------------


def test_device_rows_apply_to_inner_windowed_joins_without_strings() -> None:
    on = f"FROM clicks {WINDOW} AS l JOIN views {WINDOW} AS r ON l.k = r.k"
    plan = device_rows(_join(f"SELECT l.x, l.b, l.n, r.y, window_start {on}"))
    assert isinstance(plan, DeviceRowsPlan) and plan.check is None
    # only what the SELECT list reads is mirrored and emitted (no event times, no keys)
    assert [c.joined for c in plan.columns] == ["l.x", "l.b", "l.n", "r.y"]
    assert plan.emitted == (0, 1, 2, 3)
    checked = device_rows(_join(f"SELECT l.x, r.y {on} AND r.y > l.x WHERE l.x < 7"))
    assert isinstance(checked, DeviceRowsPlan) and len(checked.check["checks"]) == 2
    assert [c.joined for c in checked.columns] == ["l.x", "r.y"]
    # a predicate's columns are mirrored for the check, not emitted
    where_b = device_rows(_join(f"SELECT r.y {on} WHERE l.b"))
    assert [c.joined for c in where_b.columns] == ["l.b", "r.y"] and where_b.emitted == (1,)
    full = device_rows(
        _join(f"SELECT l.x FROM clicks {WINDOW} AS l FULL JOIN views {WINDOW} AS r ON l.k = r.k")
    )
    assert isinstance(full, DeviceRowsPlan) and full.kept == (0, 1)
    where = device_rows(
        _join(
            f"SELECT l.x FROM clicks {WINDOW} AS l LEFT JOIN views {WINDOW} AS r ON l.k = r.k "
            "WHERE r.y IS NULL"
        )
    )
    assert where.kept == (0,) and [x["role"] for x in where.check["lonely"]] == ["rows_lonely_0"]
    # a STRING column is emitted from the host's rows, not mirrored; a predicate reading one
    # keeps the pairs on the host
    strings = device_rows(_join(f"SELECT l.x, r.s, window_start {on}"))
    assert isinstance(strings, DeviceRowsPlan) and strings.emitted == (0, None)
    assert [c.joined for c in strings.columns] == ["l.x"]
    assert [c.joined for c in strings.host_columns] == ["r.s"]
    assert "STRING column r.s" in device_rows(_join(f"SELECT l.x {on} WHERE r.s IS NULL"))


def test_explain_says_where_rows_are_built() -> None:
    """GPU plans: `rows=device` on a windowed inner rows join, `rows=host` with the reason
    otherwise; nothing on aggregated joins, CPU plans or gpu_join=False."""
    on = f"FROM clicks {WINDOW} AS l JOIN views {WINDOW} AS r ON l.k = r.k"
    session = _session()

    def gpu(sql: str, **options) -> str:  # noqa: ANN003
        return explain_text(ph.with_backend(session.sql(sql).plan, "gpu", "test", **options))

    assert "rows=device" in gpu(f"SELECT l.x, r.y, window_start {on}")
    outer = gpu(f"SELECT l.x FROM clicks {WINDOW} AS l LEFT JOIN views {WINDOW} AS r ON l.k = r.k")
    assert "rows=device" in outer
    assert "rows=device rows_host_columns=[r.s]" in gpu(f"SELECT l.x, r.s {on}")
    reason = (
        'rows=host rows_reason="a predicate reads the STRING column r.s (no device dictionary)"'
    )
    assert reason in gpu(f"SELECT l.x {on} WHERE r.s IS NULL")
    assert " rows=" not in gpu(f"SELECT l.k, COUNT(*) AS c {on} GROUP BY l.k")
    # joins placed on the CPU say where the CPU joins (docs/explain.md: rows=firing|arrival)
    assert " rows=firing" in gpu(f"SELECT l.x, r.y {on}", gpu_join=False)
    assert " rows=firing" in session.sql(f"SELECT l.x, r.y {on}").explain()  # a CPU plan


def test_rows_check_compiles_with_nvcc(tmp_path) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH")
    on = f"FROM clicks {WINDOW} AS l JOIN views {WINDOW} AS r ON l.k = r.k"
    for sql in (
        f"SELECT l.x, l.b, r.y {on} AND r.y > l.x WHERE l.x IS NULL OR l.x < 7",
        f"SELECT l.x, r.y {on} WHERE l.b AND l.n + r.k > 3",
        f"SELECT l.x, r.y {on}",
        f"SELECT l.x, r.y FROM clicks {WINDOW} AS l FULL JOIN views {WINDOW} AS r "
        "ON l.k = r.k AND r.y > l.x WHERE l.x IS NULL OR r.y < 2",
    ):
        join = _join(sql)
        for algorithm in ("hash", "sort-merge"):
            generated = render_node_join_kernels(replace(join, algorithm=algorithm))
            (tmp_path / "rows.cu").write_text(generated.source)
            result = subprocess.run(
                ["nvcc", "--ptx", "-arch=sm_90", "-fmad=false", "-o", "rows.ptx", "rows.cu"],
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert result.returncode == 0, result.stderr[-5000:]
            ptx = (tmp_path / "rows.ptx").read_text()
            assert all(f".entry {name}(" in ptx for name in generated.names.values())
            assert ("rows_check" in generated.names) == ("WHERE" in sql or "AND r.y" in sql)
            lonely = {"rows_lonely_0", "rows_lonely_1"} <= set(generated.names)
            assert lonely == ("FULL" in sql)


# -- the device-rows operator on the host shim ----------------------------------------------


def test_device_rows_on_the_host_shim_match_the_oracle(gpu_kernels_in_cpu_plans) -> None:
    """Random joins without aggregation, inner and outer (NULL keys and values, late rows,
    sliding windows, residual and WHERE, both algorithms, snapshot/restore): the device-rows
    operator over the shim gives the oracle's rows, windows in order."""
    for seed in range(60):
        case = _rows_case(seed)
        problem = check_join(case)
        assert problem is None, f"seed {seed}: {problem}\n{case.describe()}"
    made = _device_rows_made(gpu_kernels_in_cpu_plans)
    assert len(made) >= 60
    assert any("rows_check" in m.kernels.generated.names for m in made)
    assert any(m.plan.kept and "rows_lonely_0" in m.kernels._functions for m in made)
    assert sum(m.pairs_found for m in made) > 100 and sum(m.rows_out for m in made) > 100


def test_snapshots_move_between_the_host_and_device_forms(host_device) -> None:
    """A snapshot of the host form (pending pairs on the host) restores into the device
    form and the other way round, and the run goes on to the same rows."""
    from mangonel.runtime.cpu.join import CpuJoinKernels
    from mangonel.runtime.gpu import join as gpu_join
    from mangonel.runtime.operators.join import JoinOperator

    for seed in range(12):
        case = replace(_rows_case(seed), restore_at=None)
        plan = _case_session(case).sql(case.query()).plan
        node = ph.find(plan, ph.WindowJoinExec)
        batches = list(case.batches())
        half = len(batches) // 2
        results = []
        for first, second in (("host", "device"), ("device", "host"), ("host", "host")):
            operators = []
            for form in (first, second):
                kernels = CpuJoinKernels()
                if form == "device":
                    kernels = gpu_join.GpuJoinKernels(node, CpuJoinKernels())
                operators.append(JoinOperator(node, kernels))
                assert (operators[-1].device_rows is not None) == (form == "device")
            inputs = {child.stream.name: i for i, child in enumerate(node.children)}
            out = []
            for name, batch in batches[:half]:
                out += operators[0].process(batch, inputs[name])
            operators[1].restore(operators[0].snapshot())
            for name, batch in batches[half:]:
                out += operators[1].process(batch, inputs[name])
            out += operators[1].finish()
            results.append(pa.Table.from_batches(out, schema=operators[1].schema))
        assert same_rows(results[0], results[2]) and same_rows(results[1], results[2]), seed


def _case_session(case) -> Session:  # noqa: ANN001
    session = Session("cpu", join_algorithm=case.algorithm)
    for statement in case.ddl():
        session.execute(statement)
    return session


@pytest.mark.parametrize("slide_us", [1_000_000, 250_000])
def test_device_rows_equal_cpu_on_bench_input_on_the_host_shim(
    gpu_kernels_in_cpu_plans, monkeypatch, slide_us: int
) -> None:
    """The bench's materialised shape (1,000 keys, 2,000-row batches, windows firing as the
    watermark moves): the device-rows operator over the shim gives the CPU operator's rows in
    the same order, and its results lie in pinned blocks that are reused once released."""
    from mangonel.bench_join import JoinShape, make_arrivals, make_session
    from mangonel.runtime.cpu import operators as cpu_operators

    shape = JoinShape("rows", slide_us=slide_us, aggregate=False, algorithm="auto")
    arrivals = make_arrivals(shape, 24_000, 4_000, 2_000, seed=3)
    monkeypatch.setattr(pinned, "_FREE", [])  # this test's buffers only (none trimmed)
    leased = []  # the pool's buffers the results were built over
    original = join_rows.lease
    monkeypatch.setattr(
        join_rows, "lease", lambda n: (block := original(n), leased.append(block.pinned))[0]
    )
    device_operators = dict(cpu_operators.OPERATORS)
    tables = []
    for operators in (device_operators, ORIGINAL_CPU_OPERATORS):
        cpu_operators.OPERATORS = operators
        batches = list(make_session(shape).sql(shape.query()).stream(arrivals))
        tables.append(pa.Table.from_batches(batches))
    cpu_operators.OPERATORS = device_operators  # monkeypatch restores the original
    (made,) = _device_rows_made(gpu_kernels_in_cpu_plans)
    assert tables[1].num_rows > 5000 and made.rows_out == tables[1].num_rows
    assert same_rows(tables[0], tables[1])
    starts = tables[0].column("window_start").cast(pa.int64()).to_numpy()
    assert (np.diff(starts) >= 0).all()
    # the results lie over blocks of the process's pinned pool, back in it once dropped
    blocks = {id(block) for block in leased}
    assert blocks and not blocks & {id(b) for b in pinned._FREE}
    del batches, tables
    assert blocks & {id(b) for b in pinned._FREE}


def _typed_arrivals(seed: int) -> list[tuple[str, pa.RecordBatch]]:
    """Batches of both DDL streams with NULLs in every column but the event time."""
    rng = np.random.default_rng(seed)
    arrivals = []
    clock = 0
    for i in range(8):
        n = int(rng.integers(1, 40))
        ts = pa.array(clock + rng.integers(0, 3_000_000, n), pa.timestamp("us"))
        clock += 1_000_000

        def nullable(values, type_):  # noqa: ANN001, ANN202
            return pa.array(values, type_, mask=rng.random(len(values)) < 0.15)

        keys = nullable(rng.integers(0, 4, n), pa.int64())
        if i % 2 == 0:
            columns = {
                "ts": ts,
                "k": keys,
                "x": nullable(rng.integers(-5, 9, n), pa.int64()),
                "b": nullable(rng.random(n) < 0.5, pa.bool_()),
                "n": nullable(rng.integers(-100, 100, n), pa.int32()),
            }
            arrivals.append(("clicks", pa.record_batch(columns)))
        else:
            columns = {
                "ts": ts,
                "k": keys.cast(pa.int32()),
                "y": nullable(rng.normal(size=n), pa.float64()),
                "s": nullable([f"v{v}" * int(v % 3) for v in rng.integers(0, 50, n)], pa.string()),
            }
            arrivals.append(("views", pa.record_batch(columns)))
    return arrivals


@pytest.mark.parametrize(
    "select",
    [
        "l.ts, l.b, l.n, r.y, r.ts AS r_ts, window_start, window_end",
        "window_start",
        "l.n, r.y",
    ],
)
def test_device_rows_emit_every_fixed_width_type_on_the_host_shim(
    gpu_kernels_in_cpu_plans, select: str
) -> None:
    """TIMESTAMP, BOOLEAN (bit-packed), INT and DOUBLE columns with NULLs, only window
    bounds, or no bound at all: the device rows over the shim equal the CPU operator's,
    as multisets (`same_rows`), with WHERE reading a column that is not emitted."""
    from mangonel.runtime.cpu import operators as cpu_operators

    sql = (
        f"SELECT {select} FROM clicks {WINDOW} AS l JOIN views {WINDOW} AS r "
        "ON l.k = r.k WHERE l.x IS NULL OR l.x < 6"
    )
    device_operators = dict(cpu_operators.OPERATORS)
    for seed in range(4):
        tables = []
        for operators in (device_operators, ORIGINAL_CPU_OPERATORS):
            cpu_operators.OPERATORS = operators
            tables.append(_session().sql(sql).run(_typed_arrivals(seed)))
        cpu_operators.OPERATORS = device_operators  # monkeypatch restores the original
        assert tables[1].num_rows > 20, seed
        assert same_rows(tables[0], tables[1]), seed
    made = _device_rows_made(gpu_kernels_in_cpu_plans)
    assert len(made) == 4 and all(m.rows_out for m in made)


@pytest.mark.parametrize(
    ("kind", "select"),
    [
        ("JOIN", "l.x, r.s, window_start"),
        ("JOIN", "r.s"),
        ("LEFT JOIN", "r.s, l.n, r.s AS again, window_end"),
        ("RIGHT JOIN", "l.b, r.s, r.y"),
        ("FULL JOIN", "r.s, l.x"),
    ],
)
def test_device_rows_emit_string_columns_gathered_on_the_host_shim(
    gpu_kernels_in_cpu_plans, kind: str, select: str
) -> None:
    """STRING columns (NULLs, empty strings, the NULL side of outer rows) are taken on the
    host at the fired pairs' row numbers while the other columns stay on the device: the
    device rows over the shim equal the CPU operator's (as multisets), with a residual and
    WHERE (outer joins: over rows_lonely_*) and a snapshot/restore half way."""
    from mangonel.runtime.cpu import operators as cpu_operators
    from mangonel.runtime.local.query import LocalQuery

    sql = (
        f"SELECT {select} FROM clicks {WINDOW} AS l {kind} views {WINDOW} AS r "
        "ON l.k = r.k AND r.y > -1.5 WHERE l.x IS NULL OR l.x < 6"
    )
    device_operators = dict(cpu_operators.OPERATORS)
    for seed in range(3):
        tables = []
        for operators in (device_operators, ORIGINAL_CPU_OPERATORS):
            cpu_operators.OPERATORS = operators
            plan = _session().sql(sql).plan
            arrivals = _typed_arrivals(seed)
            runner = LocalQuery(plan)
            out = []
            for position, (name, batch) in enumerate(arrivals):
                if position == len(arrivals) // 2:
                    saved = runner.snapshot()
                    runner = LocalQuery(plan)
                    runner.restore(saved)
                out += runner.process(batch, runner.inputs[name])
            out += runner.finish()
            tables.append(pa.Table.from_batches(out, schema=runner.schema))
        cpu_operators.OPERATORS = device_operators  # monkeypatch restores the original
        strings = tables[1].column("s").to_pylist()
        assert tables[1].num_rows > 20 and None in strings and "" in strings, seed
        assert any(s and len(s) > 2 for s in strings), seed
        assert same_rows(tables[0], tables[1]), seed
    made = _device_rows_made(gpu_kernels_in_cpu_plans)
    assert len(made) == 6 and all(m.plan.host_columns for m in made)
    assert sum(m.rows_out for m in made) > 0


def test_a_predicate_reading_a_string_keeps_rows_on_the_host_shim(gpu_kernels_in_cpu_plans) -> None:
    """WHERE reading a STRING column: the pairs are gathered on the host (the device mirrors
    no strings; mirroring them as int32 used to fail), the CPU operator's rows."""
    from mangonel.runtime.cpu import operators as cpu_operators

    sql = (
        f"SELECT l.x, r.s, window_start FROM clicks {WINDOW} AS l JOIN views {WINDOW} AS r "
        "ON l.k = r.k WHERE r.s IS NULL OR r.s <> 'v1v1'"
    )
    device_operators = dict(cpu_operators.OPERATORS)
    tables = []
    for operators in (device_operators, ORIGINAL_CPU_OPERATORS):
        cpu_operators.OPERATORS = operators
        tables.append(_session().sql(sql).run(_typed_arrivals(1)))
    cpu_operators.OPERATORS = device_operators  # monkeypatch restores the original
    assert tables[1].num_rows > 20 and same_rows(tables[0], tables[1])
    assert gpu_kernels_in_cpu_plans and not _device_rows_made(gpu_kernels_in_cpu_plans)


def test_stream_table_rows_emit_the_table_strings_on_the_host_shim(
    gpu_kernels_in_cpu_plans,
) -> None:
    """A windowed stream joined with a static table emits the table's STRING column (every
    window's rows hold the table's) from the host, the rest from the device."""
    from mangonel.runtime.cpu import operators as cpu_operators

    sql = (
        f"SELECT c.x, a.campaign, window_start FROM clicks {WINDOW} AS c "
        "LEFT JOIN ads AS a ON c.k = a.k"
    )
    ads = pa.record_batch(
        {"k": pa.array([0, 1, 2, None], pa.int64()), "campaign": ["zero", None, "two", "none"]}
    )
    arrivals = [("ads", ads)] + [a for a in _typed_arrivals(2) if a[0] == "clicks"]
    device_operators = dict(cpu_operators.OPERATORS)
    tables = []
    for operators in (device_operators, ORIGINAL_CPU_OPERATORS):
        cpu_operators.OPERATORS = operators
        session = _session()
        session.execute("CREATE TABLE ads (k BIGINT, campaign STRING)")
        tables.append(session.sql(sql).run(arrivals))
    cpu_operators.OPERATORS = device_operators  # monkeypatch restores the original
    assert tables[1].num_rows > 20 and same_rows(tables[0], tables[1])
    assert {"zero", "two", None} <= set(tables[1].column("campaign").to_pylist())
    (made,) = _device_rows_made(gpu_kernels_in_cpu_plans)
    assert made.rows_out == tables[1].num_rows


def test_result_blocks_come_from_the_process_pinned_pool(host_device, monkeypatch) -> None:
    """A block lent to Arrow buffers is a buffer of the process's pinned pool (gpu.pinned),
    handed back when the last Arrow buffer over it is released; the next lease of its size
    takes it instead of a new allocation; the buffers read the block's memory (no copy)."""
    from cuda_host import HostCupy

    monkeypatch.setattr(pinned, "_FREE", [])  # this test's buffers only
    allocations = []
    allocate = HostCupy.cuda.alloc_pinned_memory
    monkeypatch.setattr(
        HostCupy.cuda, "alloc_pinned_memory", lambda n: allocations.append(n) or allocate(n)
    )
    block = lease(5000)
    assert block.nbytes >= 5000 and len(allocations) == 1
    block.host[:8] = np.arange(8, dtype=np.uint8)
    buffer = block.buffer(0, 8)
    array = pa.Array.from_buffers(pa.uint8(), 8, [None, buffer])
    del block, buffer
    assert not pinned.free_count()  # the array still holds the block
    assert array.to_pylist() == list(range(8))
    del array
    assert pinned.free_count() == 1
    again = lease(3000)
    assert len(allocations) == 1 and not pinned.free_count()
    # sizes asked for in powers of two: a block serves the firings a little larger too
    big = lease((4 << 20) + 1)
    assert len(allocations) == 2 and big.nbytes == 8 << 20
    del big
    assert lease(6 << 20).nbytes == 8 << 20 and len(allocations) == 2
    del again
    # the download path shares the pool: a free block serves it
    assert pinned.free_count() == 2


# -- on a device -------------------------------------------------------------------------


@pytest.mark.gpu
def test_device_rows_on_a_device_match_the_oracle(monkeypatch) -> None:
    """On a GPU host: random inner rows joins through Session("gpu") (EXPLAIN: rows=device)
    give the oracle's rows."""
    pytest.importorskip("cupy")
    import mangonel

    real = mangonel.Session
    monkeypatch.setattr(mangonel, "Session", lambda backend, **options: real("gpu", **options))
    assert "rows=device" in explain_text(_gpu_plan(_rows_case(0)))
    for seed in range(60):
        case = _rows_case(seed)
        problem = check_join(case)
        assert problem is None, f"seed {seed}: {problem}\n{case.describe()}"


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["JOIN", "FULL JOIN"])
def test_device_rows_emit_strings_on_a_device(kind: str) -> None:
    """On a GPU host: a join emitting a STRING column runs rows=device (the string taken on
    the host at the fired pairs' rows, the other columns from the device) and equals the
    CPU's rows (as multisets, `same_rows`)."""
    pytest.importorskip("cupy")
    sql = (
        f"SELECT l.x, r.s, r.y, window_start FROM clicks {WINDOW} AS l {kind} views {WINDOW} "
        "AS r ON l.k = r.k AND r.y > -1.5 WHERE l.x IS NULL OR l.x < 6"
    )
    query = _session("gpu").sql(sql)
    assert "rows=device rows_host_columns=[r.s]" in explain_text(query.plan)
    for seed in range(3):
        got = query.run(_typed_arrivals(seed))
        want = _session().sql(sql).run(_typed_arrivals(seed))
        assert want.num_rows > 20 and None in want.column("s").to_pylist()
        assert same_rows(got, want), seed


def _gpu_plan(case):  # noqa: ANN001, ANN202
    session = Session("gpu", join_algorithm=case.algorithm)
    for statement in case.ddl():
        session.execute(statement)
    return session.sql(case.query()).plan


@pytest.mark.gpu
@pytest.mark.parametrize("algorithm", ["hash", "sort-merge"])
@pytest.mark.parametrize("slide_us", [1_000_000, 250_000])
def test_device_rows_equal_cpu_at_scale_on_a_device(algorithm: str, slide_us: int) -> None:
    """On a GPU host: the bench's materialised shape (1,000 keys, 200,000 rows at 20,000
    rows per second of each stream, 5,000-row batches: 2-8 M joined rows) through
    Session("gpu") (rows=device) equals Session("cpu") as a multiset, windows in order; and
    streamed (each batch dropped as it comes, its pinned block back to the pool) gives as
    many rows."""
    pytest.importorskip("cupy")
    from mangonel.bench_join import JOIN_SCHEMA, JoinShape, make_arrivals

    shape = JoinShape("rows", slide_us=slide_us, algorithm=algorithm, aggregate=False)
    arrivals = make_arrivals(shape, 200_000, 20_000, 5_000, seed=3)
    tables = {}
    for backend in ("cpu", "gpu"):
        session = Session(backend, join_algorithm=algorithm)
        for name in ("lefts", "rights"):
            session.create_stream(name, JOIN_SCHEMA.to_arrow(), event_time="ts", watermark=0)
        query = session.sql(shape.query())
        if backend == "gpu":
            assert "rows=device" in explain_text(query.plan)
        tables[backend] = query.run(arrivals)
    assert tables["cpu"].num_rows > 1_000_000
    starts = tables["gpu"].column("window_start").cast(pa.int64()).to_numpy()
    assert (np.diff(starts) >= 0).all()
    order = [(name, "ascending") for name in tables["cpu"].column_names]
    assert tables["gpu"].sort_by(order).equals(tables["cpu"].sort_by(order))
    session = Session("gpu", join_algorithm=algorithm)
    for name in ("lefts", "rights"):
        session.create_stream(name, JOIN_SCHEMA.to_arrow(), event_time="ts", watermark=0)
    query = session.sql(shape.query())
    rows = sum(batch.num_rows for batch in query.stream(arrivals))
    assert rows == tables["cpu"].num_rows
    assert 0 < query.metrics.rows_output_bytes


def test_bench_reports_the_output_step_against_d2h(capsys) -> None:
    """A materialised join's metrics time its output step (rows_output_seconds, bytes: what
    its fired batches hold), and the bench prints it beside the whole run's result rate,
    each against the measured device-to-host bandwidth."""
    from mangonel.bench_join import (
        JoinResult,
        JoinShape,
        _print_join_row,
        make_arrivals,
        run_engine,
    )

    shape = JoinShape("rows", aggregate=False)
    arrivals = make_arrivals(shape, 8000, 2000, 1000, seed=1)
    run = run_engine(shape, arrivals)
    assert run.rows_out > 1000 and run.result_bytes > 0
    assert run.metrics.rows_output_bytes == run.result_bytes
    assert 0 < run.metrics.rows_output_seconds < run.seconds
    result = JoinResult("rows", 8000, 1.0, 8000.0, run.rows_out, run.algorithm)
    result.input_bound_share, result.result_bytes_per_second = 0.01, 2e9
    result.result_bound_share = 0.04
    result.output_step_bytes_per_second, result.output_step_bound_share = 30e9, 0.55
    _print_join_row(result)
    printed = capsys.readouterr().out
    assert "results 2.00 GB/s =  4.00% of D2H (output step 30.00 GB/s = 55.00% of D2H)" in printed


def test_bench_compares_sliding_with_tumbling_on_the_same_input() -> None:
    """The bench prints how many times slower each sliding shape ran than the tumbling shape
    of the same input and query (issue 10: within 2x), and pairs no other shapes."""
    from mangonel.bench_join import JoinResult, JoinShape, sliding_against_tumbling

    tumbling = JoinShape("t")
    sliding = JoinShape("s", slide_us=10_000)
    pairs = JoinShape("p", slide_us=10_000, factorised=False)
    ran = [
        (tumbling, JoinResult("t", 100, 1.0, 12.0e6, 5, "factorised")),
        (sliding, JoinResult("s", 100, 1.0, 3.0e6, 5, "factorised")),
        (pairs, JoinResult("p", 100, 1.0, 1.0e6, 5, "hash")),
    ]
    assert sliding_against_tumbling(ran) == [
        "sliding vs tumbling: 's' runs 4.0x slower than 't' on the same input (target: within 2x)"
    ]


def test_rows_joins_emit_only_what_the_select_list_reads() -> None:
    """A join without aggregation emits the joined columns its SELECT list reads (WHERE's
    are gathered, not emitted); one that reads none still emits one, so a stream-static join
    without a window keeps its row count."""
    session = _session()
    session.execute("CREATE TABLE ads (k BIGINT, campaign STRING)")
    on = f"FROM clicks {WINDOW} AS l JOIN views {WINDOW} AS r ON l.k = r.k"
    join = _join(f"SELECT r.y, l.n {on} WHERE l.x > 1")
    assert join.emitted == ("l.n", "r.y")
    assert [n for n, _ in ph.join_row_columns(join)] == [
        "l.n",
        "r.y",
        "__window_start",
        "__window_end",
    ]
    query = session.sql("SELECT 1 AS one FROM clicks AS c JOIN ads AS a ON c.k = a.k")
    assert ph.find(query.plan, ph.WindowJoinExec).emitted == ("c.ts",)
    clicks = pa.record_batch(
        {
            "ts": pa.array([0, 10, 20], pa.timestamp("us")),
            "k": pa.array([1, 2, 1], pa.int64()),
            "x": pa.array([0, 0, 0], pa.int64()),
            "b": pa.array([True] * 3),
            "n": pa.array([0] * 3, pa.int32()),
        }
    )
    ads = pa.record_batch({"k": pa.array([1, 2], pa.int64()), "campaign": ["a", "b"]})
    assert query.run([("ads", ads), ("clicks", clicks)]).column("one").to_pylist() == [1, 1, 1]


def test_stream_table_rows_on_the_device_on_the_host_shim(gpu_kernels_in_cpu_plans) -> None:
    """A windowed stream joined with a static table (its rows cover every window) keeps its
    rows on the device (rows=device) and gives the CPU operator's rows, row for row."""
    from mangonel.runtime.cpu import operators as cpu_operators

    sql = (
        f"SELECT c.x, p.price, window_start FROM clicks {WINDOW} AS c "
        "JOIN prices AS p ON c.k = p.k WHERE p.price > 0.5 OR c.x IS NULL"
    )
    prices = pa.record_batch(
        {"k": pa.array([0, 1, 2, 2, None], pa.int64()), "price": [0.25, 1.5, 2.0, 0.75, 9.0]}
    )
    arrivals = [("prices", prices)] + [a for a in _typed_arrivals(5) if a[0] == "clicks"]
    device_operators = dict(cpu_operators.OPERATORS)
    tables = []
    for operators in (device_operators, ORIGINAL_CPU_OPERATORS):
        cpu_operators.OPERATORS = operators
        session = _session()
        session.execute("CREATE TABLE prices (k BIGINT, price DOUBLE)")
        tables.append(session.sql(sql).run(arrivals))
    cpu_operators.OPERATORS = device_operators  # monkeypatch restores the original
    assert tables[1].num_rows > 20 and same_rows(tables[0], tables[1])
    (made,) = _device_rows_made(gpu_kernels_in_cpu_plans)
    assert made.rows_out == tables[1].num_rows
