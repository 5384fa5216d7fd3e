"""Division and modulo by zero in a join's residual, WHERE and aggregate arguments.

docs/semantics.md ("Arithmetic and special values"): `/` yields DOUBLE and division or modulo
by zero is NULL, for integers too (Spark's non-ANSI rule, the one window aggregation's
expressions follow), so `ON l.k = r.k AND l.a / r.b > 1` is not true where r.b = 0 (an
outer join keeps the row unmatched), and `l.a % r.b` is NULL there. Checked against the join
oracle on INT columns holding 0, -1 and INT_MIN: on the CPU, and through the GPU join kernels
run on the host (tests/cuda_host.py) compiled under UndefinedBehaviorSanitizer, in each form
that evaluates the predicates in CUDA (`rows_check`/`rows_lonely_*` of device-resident rows,
the device-fused `fused_hash`/`fused_merge`/`fused_lonely_*`): no kernel divides an integer
by zero or overflows, also for the NULL (zero) columns of an outer join's unmatched rows.
On a GPU host (`-m gpu`) the same queries run on the device.
"""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import pyarrow as pa
import pytest
from cuda_host import HostCupy, host_modules
from oracle import rows_of
from oracle_join import JoinInput, JoinOracle, JoinOracleQuery, canonical
from test_join_gpu import join_operators_over_gpu_kernels

from mangonel.runtime.gpu import device
from mangonel.runtime.gpu import join as gpu_join
from mangonel.session import Session

S = 1_000_000
INT_MIN = -(2**31)
DDL = (
    "CREATE STREAM clicks (ts TIMESTAMP, k BIGINT, a INT) "
    "WITH (event_time = 'ts', watermark = '0 microseconds')",
    "CREATE STREAM views (ts TIMESTAMP, k INT, b INT) "
    "WITH (event_time = 'ts', watermark = '0 microseconds')",
)
SCHEMAS = {
    "clicks": pa.schema([("ts", pa.timestamp("us")), ("k", pa.int64()), ("a", pa.int32())]),
    "views": pa.schema([("ts", pa.timestamp("us")), ("k", pa.int32()), ("b", pa.int32())]),
}
LEFT = JoinInput("l", "clicks", {"ts": "timestamp", "k": "bigint", "a": "int"}, "ts", 0)
RIGHT = JoinInput("r", "views", {"ts": "timestamp", "k": "int", "b": "int"}, "ts", 0)
WORDS = {"inner": "JOIN", "left": "LEFT JOIN", "right": "RIGHT JOIN", "full": "FULL JOIN"}
WINDOW = "[RANGE 2 SECONDS SLIDE 1 SECOND]"
# the residual divides by r.b (0 for some rows); WHERE takes a modulo by r.b, NULL there
RESIDUAL_SQL = "l.a / r.b > 1"
WHERE_SQL = "l.a % r.b IS NULL OR l.a % r.b <> 1"
RESIDUAL = [">", ["/", ["col", "l.a"], ["col", "r.b"]], ["lit", 1]]
MODULO = ["%", ["col", "l.a"], ["col", "r.b"]]
WHERE = ["or", ["is_null", MODULO], ["not", ["=", MODULO, ["lit", 1]]]]


def _arrivals() -> list[tuple[str, pa.RecordBatch]]:
    """Two keys whose every window pairs dividends 0, 7, -5, INT_MIN and NULL with divisors
    0, 2, -1 and NULL (INT_MIN % -1 and INT_MIN / -1 included), a key only one side has,
    and a NULL key."""
    clicks, views = [], []
    for second in range(3):
        base = second * S
        for i, a in enumerate((0, 7, -5, INT_MIN, None)):
            clicks.append({"ts": base + i, "k": 1 + i % 2, "a": a})
        clicks.append({"ts": base + 9, "k": 3, "a": 4})  # no view has key 3
        for i, b in enumerate((0, 2, -1, None, 0)):
            views.append({"ts": base + 100 + i, "k": 1 + i % 2, "b": b})
        views.append({"ts": base + 200, "k": None, "b": 0})
    half = len(clicks) // 2
    batches = [
        ("clicks", clicks[:half]),
        ("views", views[: len(views) // 2]),
        ("clicks", clicks[half:]),
        ("views", views[len(views) // 2 :]),
    ]
    return [
        (name, pa.RecordBatch.from_pylist(rows, schema=SCHEMAS[name])) for name, rows in batches
    ]


def _query(kind: str, aggregated: bool) -> tuple[str, JoinOracleQuery]:
    on = f"l.k = r.k AND {RESIDUAL_SQL}"
    sources = f"clicks {WINDOW} AS l {WORDS[kind]} views {WINDOW} AS r ON {on}"
    if aggregated:
        # the aggregate arguments divide by r.b too (evaluated in the fused kernel)
        select = (
            "l.k, window_start AS start, COUNT(*) AS n, SUM(l.a / r.b) AS q, SUM(l.a % r.b) AS m"
        )
        sql = f"SELECT {select} FROM {sources} WHERE {WHERE_SQL} GROUP BY l.k"
        extra = {
            "keys": ("l.k",),
            "aggregates": (
                ("count_star", None),
                ("sum", ["/", ["col", "l.a"], ["col", "r.b"]]),
                ("sum", MODULO),
            ),
            "outputs": (
                ("k", ["col", "l.k"]),
                ("start", ["bound", "start"]),
                ("n", ["agg", 0]),
                ("q", ["agg", 1]),
                ("m", ["agg", 2]),
            ),
        }
    else:
        sql = f"SELECT l.a, r.b, window_start AS start FROM {sources} WHERE {WHERE_SQL}"
        extra = {
            "outputs": (
                ("a", ["col", "l.a"]),
                ("b", ["col", "r.b"]),
                ("start", ["bound", "start"]),
            )
        }
    oracle = JoinOracleQuery(
        LEFT, RIGHT, kind, 2 * S, S, ("k",), ("k",), residual=RESIDUAL, where=WHERE, **extra
    )
    return sql, oracle


def _oracle_rows(query: JoinOracleQuery) -> list[dict]:
    oracle = JoinOracle(query)
    rows = []
    for name, batch in _arrivals():
        rows += oracle.process(name, rows_of(batch))
    return rows + oracle.finish()


def _engine_rows(sql: str, backend: str = "cpu", algorithm: str = "hash", **options) -> list:  # noqa: ANN003
    session = Session(backend, join_algorithm=algorithm, **options)
    for statement in DDL:
        session.execute(statement)
    return rows_of(session.sql(sql).run(_arrivals()))


def _assert_equal(got: list[dict], want: list[dict]) -> None:
    got, want = canonical(got), canonical(want)
    assert len(got) == len(want), (got, want)
    for a, e in zip(got, want, strict=True):
        for name, y in e.items():
            x = a[name]
            if isinstance(y, float) and isinstance(x, float):
                assert abs(x - y) <= 1e-9 * max(1.0, abs(y)), (a, e)
            else:
                assert x == y, (a, e)


CASES = [(kind, aggregated) for kind in WORDS for aggregated in (False, True)]


def test_the_cases_divide_by_zero_and_still_join() -> None:
    """Not vacuous: pairs with r.b = 0 exist, fail the residual (so no inner row has b = 0),
    and the outer joins keep their rows unmatched."""
    inner = _oracle_rows(_query("inner", False)[1])
    assert inner and all(row["b"] not in (0, None) for row in inner)
    left = _oracle_rows(_query("left", False)[1])
    assert any(row["b"] is None and row["a"] is not None for row in left)
    aggregated = _oracle_rows(_query("full", True)[1])
    assert any(row["q"] is not None for row in aggregated)


@pytest.mark.parametrize("algorithm", ["hash", "sort-merge"])
@pytest.mark.parametrize(("kind", "aggregated"), CASES)
def test_cpu_join_divides_by_zero_as_null(kind: str, aggregated: bool, algorithm: str) -> None:
    sql, oracle = _query(kind, aggregated)
    _assert_equal(_engine_rows(sql, algorithm=algorithm), _oracle_rows(oracle))


# -- the GPU join kernels on the host, under UndefinedBehaviorSanitizer ---------------------

SANITIZE = ("-fsanitize=undefined,float-cast-overflow",)


@pytest.fixture(scope="module")
def sanitized_device(tmp_path_factory):
    """runtime/gpu's join kernels on the host (g++ over the CUDA shim), every module compiled
    with UBSan: a division by zero or a signed overflow prints `runtime error` (and an
    integer division by zero traps on x86)."""
    if shutil.which("g++") is None:
        pytest.skip("g++ not on PATH")
    module = host_modules(tmp_path_factory.mktemp("join_ubsan"), SANITIZE)
    patch = pytest.MonkeyPatch()
    # one stand-in: the process's pinned pool reuses a buffer only for the CuPy that made it
    host = HostCupy()
    patch.setattr(device, "cupy", lambda: host)
    patch.setattr(gpu_join, "shared_context", lambda size: SimpleNamespace(module=module))
    yield module
    patch.undo()


@pytest.fixture
def sanitized_kernels(sanitized_device, monkeypatch):
    """The CPU plan's join operators over GpuJoinKernels on the sanitized host modules."""
    return join_operators_over_gpu_kernels(monkeypatch)


@pytest.mark.parametrize("algorithm", ["hash", "sort-merge"])
@pytest.mark.parametrize(("kind", "aggregated"), CASES)
def test_gpu_join_kernels_divide_by_zero_as_null_without_undefined_behaviour(
    sanitized_kernels, capfd, kind: str, aggregated: bool, algorithm: str
) -> None:
    sql, oracle = _query(kind, aggregated)
    _assert_equal(_engine_rows(sql, algorithm=algorithm), _oracle_rows(oracle))
    (kernels,) = sanitized_kernels
    # the predicates ran in CUDA: the device-rows check or the device-fused kernel
    roles = set(kernels._functions)
    assert (
        ("fused_hash" in roles or "fused_merge" in roles) if aggregated else "rows_check" in roles
    )
    if aggregated:
        assert kernels.fused_launches > 0
    else:
        assert kernels.rows_form is not None and kernels.rows_form.pairs_found > 0
    if kind != "inner" and not aggregated:
        assert any(role.startswith("rows_lonely_") for role in roles)
    errors = capfd.readouterr().err
    assert "runtime error" not in errors, errors[-4000:]


@pytest.mark.gpu
@pytest.mark.parametrize("algorithm", ["hash", "sort-merge"])
@pytest.mark.parametrize(("kind", "aggregated"), CASES)
def test_gpu_join_divides_by_zero_as_null_on_a_device(
    kind: str, aggregated: bool, algorithm: str
) -> None:
    """On a GPU host: the join on the device (device-resident rows, device-fused aggregation)
    gives the oracle's rows."""
    pytest.importorskip("cupy")
    sql, oracle = _query(kind, aggregated)
    got = _engine_rows(sql, backend="gpu", algorithm=algorithm, gpu_join=True)
    _assert_equal(got, _oracle_rows(oracle))


@pytest.mark.parametrize("aggregated", [False, True])
def test_division_kernels_compile_with_nvcc(tmp_path, aggregated: bool) -> None:
    """The FULL join's modules (rows_check and both rows_lonely kernels; the fused pair and
    both fused_lonely kernels) with the division and modulo compile for the device."""
    import subprocess

    from mangonel.compiler import physical as ph
    from mangonel.compiler.codegen_join import render_node_join_kernels

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH")
    session = Session("cpu")
    for statement in DDL:
        session.execute(statement)
    plan = session.sql(_query("full", aggregated)[0]).plan
    node = ph.find(plan, ph.JoinAggregateExec if aggregated else ph.WindowJoinExec)
    generated = render_node_join_kernels(node)
    roles = {"fused_lonely_0", "fused_lonely_1"} if aggregated else {"rows_check"}
    assert roles <= set(generated.names)
    (tmp_path / "join.cu").write_text(generated.source)
    result = subprocess.run(
        ["nvcc", "--ptx", "-arch=sm_90", "-O3", "-std=c++17", "-fmad=false", "join.cu"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    ptx = (tmp_path / "join.ptx").read_text()
    assert all(f".entry {name}(" in ptx for name in generated.names.values())
