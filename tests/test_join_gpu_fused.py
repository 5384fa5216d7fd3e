"""The device-fused join + aggregate (`codegen_join.device_fusion`, runtime/gpu/join_fused.py).

Without a GPU: every rendered fused variant compiles with nvcc, and the fused kernel runs on
the host through the g++ CUDA shim (tests/cuda_host.py; the kernel is grid-stride without
block cooperation) inside the join operator, on random join cases whose aggregates read both
sides, grouped by a key of either side, by a non-key column of one side, or not grouped:
the oracle's rows (tests/oracle_join.py) and the CPU operator's. On a GPU host (`-m gpu`) the
same cases run on the device through Session("gpu").
"""

# ruff: noqa: F811 - the tests take test_join_gpu's fixtures, imported by name
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, replace

import pytest
from fuzz_join_cases import AGGREGATED_OUT, JOIN_WORDS, JoinCase, check_join, draw_join_case
from test_join_gpu import gpu_kernels_in_cpu_plans, host_device  # noqa: F401 - fixtures

from mangonel.compiler import physical as ph
from mangonel.compiler.codegen import explain_codegen
from mangonel.compiler.codegen_join import (
    DeviceFusion,
    device_fusion,
    device_fusion_reason,
    render_node_join_kernels,
)
from mangonel.compiler.explain import explain_text
from mangonel.runtime.cpu import operators as _cpu_operators
from mangonel.session import Session

# the CPU operators as imported (the fixtures swap in the GPU join kernels over the shim)
ORIGINAL_CPU_OPERATORS = dict(_cpu_operators.OPERATORS)

# GROUP BY of the fused cases: (SQL, oracle keys, the output column "k" or none)
GROUPINGS = {
    "left key": ("l.k", ("l.k",), ("k", ["col", "l.k"])),
    "right key": ("r.k", ("r.k",), ("k", ["col", "r.k"])),
    "left non-key": ("l.x", ("l.x",), ("k", ["col", "l.x"])),
    "none": (None, (), None),
}


@dataclass(frozen=True)
class FusedCase(JoinCase):
    """A random join case (inner or outer), aggregated with aggregates reading both
    sides (`SUM(l.x * r.y)`, `MAX(r.y - l.x)`): never factorised, fused on the device."""

    grouping: str = "left key"

    def query(self) -> str:
        window = f"[RANGE {self.size} MICROSECONDS SLIDE {self.slide} MICROSECONDS]"
        value = self.right_value  # r.y, or r.x where clicks is joined with itself
        on = "l.k = r.k" + (f" AND {value} > l.x" if self.residual else "")
        where = " WHERE l.x IS NULL OR l.x < 7" if self.where else ""
        group, _, out = GROUPINGS[self.grouping]
        key = "" if out is None else f"{group} AS k, "
        # integers: every field a count or an integer sum, credited by differences when
        # sliding
        calls = (
            f"SUM(l.x * r.k) AS s, COUNT({value}) AS m"
            if self.integers
            else f"SUM(l.x * {value}) AS s, MAX({value} - l.x) AS m"
        )
        select = f"{key}window_start AS start, COUNT(*) AS n, {calls}"
        tail = "" if group is None else f" GROUP BY {group}"
        sources = f"clicks {window} AS l {JOIN_WORDS[self.kind]} {self.right} {window} AS r ON {on}"
        return f"SELECT {select} FROM {sources}{where}{tail}"

    def oracle_query(self):  # noqa: ANN201
        _, keys, out = GROUPINGS[self.grouping]
        value = ["col", self.right_value]
        outputs = tuple(o for o in AGGREGATED_OUT if o[0] != "k")
        return replace(
            super().oracle_query(),
            keys=keys,
            aggregates=(
                ("count_star", None),
                ("sum", ["*", ["col", "l.x"], ["col", "r.k"]])
                if self.integers
                else ("sum", ["*", ["col", "l.x"], value]),
                ("count", value) if self.integers else ("max", ["-", value, ["col", "l.x"]]),
            ),
            outputs=outputs if out is None else (out, *outputs),
        )


def fused_case(seed: int) -> FusedCase:
    case = draw_join_case(seed)
    fields = {name: getattr(case, name) for name in JoinCase.__dataclass_fields__}
    # "auto" too: the plan's module holds both algorithms, chosen per batch
    fields.update(aggregated=True, algorithm=("hash", "sort-merge", "auto")[seed % 3])
    return FusedCase(**fields, grouping=list(GROUPINGS)[seed % len(GROUPINGS)])


def _session(case: JoinCase, backend: str = "cpu") -> Session:
    session = Session(backend, join_algorithm=case.algorithm)
    for statement in case.ddl():
        session.execute(statement)
    return session


def _node(case: JoinCase) -> ph.JoinAggregateExec:
    return ph.find(_session(case).sql(case.query()).plan, ph.JoinAggregateExec)


# -- which aggregations fuse, and EXPLAIN ------------------------------------------------


def test_device_fusion_applies_to_inner_joins_grouped_per_row() -> None:
    for grouping in GROUPINGS:
        case = replace(fused_case(0), grouping=grouping, integers=False)
        fusion = device_fusion(_node(case))
        assert isinstance(fusion, DeviceFusion), (grouping, fusion)
        # the group side: the first whose rows hold every GROUP BY value (r.k: l.k equals it)
        assert fusion.group_side == 0
        assert {c.joined for c in fusion.columns} == {"l.x", case.right_value}
    for kind, kept in (("left", (0,)), ("right", (1,)), ("full", (0, 1)), ("inner", ())):
        fusion = device_fusion(_node(replace(fused_case(0), kind=kind)))
        assert fusion.kept == kept
        # an unmatched row's GROUP BY columns: its own, the other side's NULL
        assert fusion.lonely_group_columns[1] == ((None, ph.SqlType.BIGINT),)
    mixed = _grouped_by_both_sides("")
    node = ph.find(mixed.plan, ph.JoinAggregateExec)
    assert device_fusion_reason(node) == (
        "GROUP BY mixes columns of both sides that are not join keys"
    )


def _grouped_by_both_sides(kind: str):  # noqa: ANN202
    """A join query grouped by non-key columns of both sides (never device-fused)."""
    session = Session("cpu")
    for name in ("a", "b"):
        session.execute(
            f"CREATE STREAM {name} (ts TIMESTAMP, k BIGINT, x BIGINT) WITH (event_time = 'ts')"
        )
    return session.sql(
        "SELECT l.x AS lx, r.x AS rx, window_start, COUNT(*) FROM a [RANGE 1 SECOND] AS l "
        f"{kind}JOIN b [RANGE 1 SECOND] AS r ON l.k = r.k GROUP BY l.x, r.x"
    )


def test_explain_says_which_fused_form_runs() -> None:
    case = replace(fused_case(0), algorithm="auto")
    query = _session(case).sql(case.query())
    assert "fused=probe" in explain_text(query.plan)  # CPU plan: pairs credited on the host
    assert "fused_reason" not in explain_text(query.plan)
    on_gpu = ph.with_backend(query.plan, "gpu", "test")
    text = explain_text(on_gpu)
    assert "fused=device" in text and "fused_reason" not in text
    source = explain_codegen(on_gpu)
    assert "mg_fused_hash_" in source and "mg_fused_merge_" in source  # auto: both
    assert "mg_chain_insert_" in source and "scatter_" not in source
    mixed = _grouped_by_both_sides("LEFT ")
    text = explain_text(ph.with_backend(mixed.plan, "gpu", "test"))
    assert 'fused=probe fused_reason="GROUP BY mixes columns of both sides' in text


def test_fused_kernels_compile_with_nvcc(tmp_path) -> None:
    """Every rendered variant (both algorithms, every grouping, residual and WHERE, sliding
    integer fields credited by differences, a full join's unmatched-row kernels, a state
    kind with a lock: STDDEV's moments) compiles for the device."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH")
    rendered = {}
    for algorithm in ("hash", "sort-merge"):
        for grouping in GROUPINGS:
            # (residual and WHERE, sliding integer fields: differences, outer: unmatched rows)
            for residual, integers, kind in ((False, False, "inner"), (True, True, "full")):
                base = fused_case(0)
                case = replace(
                    base,
                    algorithm=algorithm,
                    grouping=grouping,
                    residual=residual,
                    where=residual,
                    integers=integers,
                    kind=kind,
                    slide=base.size // 4,
                )
                generated = render_node_join_kernels(_node(case))
                rendered[generated.digest] = generated
    session = _session(fused_case(0))
    moments = session.sql(
        "SELECT l.k, window_start, STDDEV_SAMP(l.x * r.y) AS d, BOOL_OR(r.y > 1) AS b "
        "FROM clicks [RANGE 1 SECOND] AS l JOIN views [RANGE 1 SECOND] AS r ON l.k = r.k "
        "GROUP BY l.k"
    )
    generated = render_node_join_kernels(ph.find(moments.plan, ph.JoinAggregateExec))
    assert "mg_lock" in generated.source and "fused_hash" in generated.names
    rendered[generated.digest] = generated
    for i, generated in enumerate(rendered.values()):
        source = tmp_path / f"join{i}.cu"
        source.write_text(generated.source)
        result = subprocess.run(
            ["nvcc", "--ptx", "-arch=sm_90", "-O3", "-std=c++17", "-fmad=false"]
            + ["-o", f"join{i}.ptx", source.name],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, result.stderr[-5000:]
        ptx = (tmp_path / f"join{i}.ptx").read_text()
        fused = [n for r, n in generated.names.items() if r.startswith("fused_")]
        assert fused and all(f".entry {name}(" in ptx for name in fused)
    assert len(rendered) >= 5  # 2 algorithms x the two shapes + moments
    sources = "".join(g.source for g in rendered.values())
    assert "fused_difference(" in sources and "mg_fused_lonely_1_" in sources


# -- the fused kernel on the host (g++ shim) against the oracle --------------------------


@pytest.mark.parametrize("grouping", list(GROUPINGS))
def test_fused_joins_on_the_host_shim_match_the_oracle(gpu_kernels_in_cpu_plans, grouping) -> None:
    """Random inner and outer joins (NULL keys and times, late rows, sliding windows,
    residual and WHERE, both algorithms, snapshot/restore), the aggregates reading both sides: the
    device-fused operator over the shim gives the oracle's rows and late counts."""
    for seed in range(32):
        case = replace(fused_case(seed), grouping=grouping)
        problem = check_join(case)
        assert problem is None, f"seed {seed}: {problem}\n{case.describe()}"
    made = gpu_kernels_in_cpu_plans
    assert any("fused_difference" in k.generated.source for k in made)  # sliding integers
    assert len(made) >= 24
    assert all(any(r.startswith("fused_") for r in k.generated.names) for k in made)
    assert sum(k.fused_launches for k in made) > 24


def test_auto_plans_hold_both_algorithms_on_the_host_shim(gpu_kernels_in_cpu_plans) -> None:
    """An "auto" plan chooses hash or sort-merge per batch: its GPU module has the kernels of
    both (the probe form, outer joins and rows included), and the results are the oracle's."""
    for seed in range(30):
        case = replace(draw_join_case(seed), algorithm="auto")
        problem = check_join(case)
        assert problem is None, f"seed {seed}: {problem}\n{case.describe()}"
    names = [k.generated.names for k in gpu_kernels_in_cpu_plans]
    assert all({"probe_count", "merge_count"} <= set(n) for n in names)


def test_probe_form_on_the_host_shim_still_matches_the_oracle(
    gpu_kernels_in_cpu_plans, monkeypatch
) -> None:
    """The probe form (pairs found on the device, partials scattered by the driver), which
    aggregations that do not fuse keep: the same cases with device fusion declined."""
    from mangonel.compiler import codegen_join
    from mangonel.runtime.gpu import join as gpu_join

    for module in (codegen_join, gpu_join):
        monkeypatch.setattr(module, "device_fusion", lambda node: "test: the probe form")
    for seed in range(24):
        for case in (draw_join_case(seed), fused_case(seed)):
            problem = check_join(case)
            assert problem is None, f"seed {seed}: {problem}\n{case.describe()}"
    assert sum(k.fused_launches for k in gpu_kernels_in_cpu_plans) == 0


def test_downloads_reuse_the_process_pinned_pool(gpu_kernels_in_cpu_plans, monkeypatch) -> None:
    """Results come back through buffers borrowed from the process's pinned pool
    (runtime/gpu/pinned.py) and handed back: a handful of pinned allocations for every
    download of every join of the run, not a buffer per join (joins without aggregation
    keep their rows on the device and lease their result blocks from the same pool)."""
    from cuda_host import HostCupy

    from mangonel.runtime.gpu import pinned

    monkeypatch.setattr(pinned, "_FREE", [])  # this test's buffers only
    allocations, downloads = [], []
    allocate = HostCupy.cuda.alloc_pinned_memory
    monkeypatch.setattr(
        HostCupy.cuda, "alloc_pinned_memory", lambda n: allocations.append(n) or allocate(n)
    )
    original = pinned.download
    monkeypatch.setattr(pinned, "download", lambda a: downloads.append(len(a)) or original(a))
    for seed in range(12):
        for case in (draw_join_case(seed), fused_case(seed)):
            assert check_join(case) is None
    rows_joins = sum(k.rows_form is not None for k in gpu_kernels_in_cpu_plans)
    assert len(downloads) > 40 and len(gpu_kernels_in_cpu_plans) > 12 and rows_joins > 2
    # for the whole run: a run holds its firings' result blocks until it ends, so as many
    # blocks as one run's firings that emit rows are lent at once, then reused by the next
    assert len(allocations) <= pinned.KEEP
    assert 1 <= pinned.free_count() <= pinned.KEEP


# -- on a device -------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("grouping", list(GROUPINGS))
def test_fused_joins_on_a_device_match_the_oracle(monkeypatch, grouping) -> None:
    """On a GPU host: the same cases through Session("gpu") (the aggregation fused on the
    device: EXPLAIN says fused=device) give the oracle's rows."""
    pytest.importorskip("cupy")
    import mangonel

    real = mangonel.Session
    monkeypatch.setattr(mangonel, "Session", lambda backend, **options: real("gpu", **options))
    case = replace(fused_case(0), grouping=grouping)
    plan = _session(case, "gpu").sql(case.query()).plan
    assert "fused=device" in explain_text(plan)
    for seed in range(40):
        case = replace(fused_case(seed), grouping=grouping)
        problem = check_join(case)
        assert problem is None, f"seed {seed}: {problem}\n{case.describe()}"


@pytest.mark.gpu
@pytest.mark.parametrize("algorithm", ["hash", "sort-merge"])
@pytest.mark.parametrize("slide_us", [1_000_000, 100_000])
def test_fused_equals_cpu_at_scale_on_a_device(algorithm: str, slide_us: int) -> None:
    """On a GPU host, many threads contending for the same cells: the bench's aggregate
    reading both sides (SUM(l.value * r.value) per key, 1,000 keys, 400,000 rows) through
    Session("gpu") (fused=device) equals Session("cpu") (sums to 1e-9: atomics add in any
    order), tumbling and sliding."""
    pytest.importorskip("cupy")
    from mangonel.bench_join import JOIN_SCHEMA, JoinShape, make_arrivals, same_rows

    shape = JoinShape("fused", slide_us=slide_us, algorithm=algorithm, both_sides=True)
    # 50,000 rows per second of each stream: 4 s of event time, 50 rows per key and window
    arrivals = make_arrivals(shape, 400_000, 50_000, 5_000, seed=3)
    tables = {}
    for backend in ("cpu", "gpu"):
        session = Session(backend, join_algorithm=algorithm)
        for name in ("lefts", "rights"):
            session.create_stream(name, JOIN_SCHEMA.to_arrow(), event_time="ts", watermark=0)
        query = session.sql(shape.query())
        if backend == "gpu":
            assert "fused=device" in explain_text(query.plan)
        tables[backend] = query.run(arrivals)
    assert tables["cpu"].num_rows >= 4000  # 1,000 keys in each of 4 tumbling windows or more
    assert same_rows(tables["gpu"], tables["cpu"], aggregate=True)


@pytest.mark.parametrize("slide_us", [1_000_000, 100_000])
def test_fused_equals_cpu_on_bench_input_on_the_host_shim(
    gpu_kernels_in_cpu_plans, slide_us: int
) -> None:
    """The bench's aggregate reading both sides on its generated input (batches of 2,000
    rows, 1,000 keys, windows firing as the watermark moves: chains, block growth and
    firing at scale), the fused kernels over the shim against the CPU kernels."""
    from mangonel.bench_join import JOIN_SCHEMA, JoinShape, make_arrivals, same_rows
    from mangonel.runtime.cpu import operators as cpu_operators

    shape = JoinShape("fused", slide_us=slide_us, algorithm="auto", both_sides=True)
    arrivals = make_arrivals(shape, 20_000, 5_000, 2_000, seed=3)
    fused_operators = dict(cpu_operators.OPERATORS)
    tables = []
    for operators in (fused_operators, ORIGINAL_CPU_OPERATORS):
        cpu_operators.OPERATORS = operators
        session = Session("cpu", join_algorithm="auto")
        for name in ("lefts", "rights"):
            session.create_stream(name, JOIN_SCHEMA.to_arrow(), event_time="ts", watermark=0)
        tables.append(session.sql(shape.query()).run(arrivals))
    cpu_operators.OPERATORS = fused_operators  # monkeypatch restores the original
    assert sum(k.fused_launches for k in gpu_kernels_in_cpu_plans) >= 9  # a join per batch
    assert tables[1].num_rows > 1000
    assert same_rows(tables[0], tables[1], aggregate=True)


@pytest.mark.gpu
def test_probe_form_on_a_device_matches_the_oracle(monkeypatch) -> None:
    """On a GPU host: the probe form (what aggregations that do not fuse keep), device fusion
    declined, on the random cases through Session("gpu")."""
    pytest.importorskip("cupy")
    import mangonel
    from mangonel.compiler import codegen_join
    from mangonel.runtime.gpu import join as gpu_join

    for module in (codegen_join, gpu_join):
        monkeypatch.setattr(module, "device_fusion", lambda node: "test: the probe form")
    real = mangonel.Session
    monkeypatch.setattr(mangonel, "Session", lambda backend, **options: real("gpu", **options))
    for seed in range(40):
        for case in (draw_join_case(seed), fused_case(seed)):
            problem = check_join(case)
            assert problem is None, f"seed {seed}: {problem}\n{case.describe()}"


def test_stream_table_aggregates_fuse_on_the_host_shim(gpu_kernels_in_cpu_plans) -> None:
    """A stream joined with a static table (its rows cover every window), grouped by the
    table's STRING column or the stream's key, inner and LEFT: the fused kernels over the
    shim give the CPU kernels' rows."""
    from oracle import rows_of
    from test_join_cpu import ADS, ARRIVALS, batch, session

    from mangonel.runtime.cpu import operators as cpu_operators

    ads = batch(ADS, [{"k": 1, "c": "one"}, {"k": 1, "c": "uno"}, {"k": 2, "c": None}])
    arrivals = [*(a for a in ARRIVALS if a[0] == "clicks"), ("ads", ads)]
    window = "[RANGE 1 SECOND SLIDE 500 MILLISECONDS]"
    queries = [
        f"SELECT a.c, window_start AS start, COUNT(*) AS n, SUM(l.x * 2) AS s FROM clicks "
        f"{window} AS l JOIN ads AS a ON l.k = a.k GROUP BY a.c",
        f"SELECT l.k, window_start AS start, COUNT(*) AS n, MAX(l.x) AS m FROM clicks "
        f"{window} AS l LEFT JOIN ads AS a ON l.k = a.k AND l.x > 0 GROUP BY l.k",
    ]
    fused_operators = dict(cpu_operators.OPERATORS)
    for sql in queries:
        results = []
        for operators in (fused_operators, ORIGINAL_CPU_OPERATORS):
            cpu_operators.OPERATORS = operators
            results.append(sorted(map(str, rows_of(session().sql(sql).run(arrivals)))))
        cpu_operators.OPERATORS = fused_operators
        assert results[1] and results[0] == results[1], sql
    assert sum(k.fused_launches for k in gpu_kernels_in_cpu_plans) > 0
