"""Factorised joins over two side window aggregations (runtime/operators/join_factor.py,
compiler/factorised.py): sliding windows (w/s = 10 and 100), late rows, snapshot/restore
mid-stream, two-column keys of mixed types (INT = BIGINT, STRING), GROUP BY part of a
composite key, against the join oracle (tests/oracle_join.py); the GPU plan's sides on the
"gpu" backend's kernels (tests/fake_gpu_backend.py here; `-m gpu`: on a device)."""

from __future__ import annotations

import fake_gpu_backend
import numpy as np
import pyarrow as pa
import pytest
from fake_gpu_backend import FakeGpuKernels
from fuzz_join_cases import check_join, draw_join_case
from oracle_join import JoinInput, JoinOracleQuery
from test_join_cpu import assert_same, batch, run_engine, run_oracle
from test_join_factorised import arrivals, oracle_query, session, sql

from mangonel.compiler import physical as ph
from mangonel.compiler.codegen import explain_codegen
from mangonel.compiler.explain import explain_text
from mangonel.compiler.factorised import factorised_sides
from mangonel.runtime.local.query import LocalQuery
from mangonel.runtime.operators import registry
from mangonel.runtime.operators.join import JoinOperator
from mangonel.runtime.operators.join_factor import FactorisedSide
from mangonel.session import Session

S = 1_000_000


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("size_ms", "slide_ms"), [(1000, 100), (1000, 10), (600, 60)])
def test_sliding_factorised_joins_match_the_oracle(seed: int, size_ms: int, slide_ms: int) -> None:
    """w/s = 10 and 100, out-of-order rows (some late), NULL keys and values, Zipf-like keys
    on odd seeds, per-stream watermark delays on even ones; a snapshot/restore mid-stream."""
    delays = (0, 0) if seed % 2 else (300_000, 700_000)
    cases = arrivals(seed, 1.2 if seed % 2 else 0.0, batches=10)
    expected, oracle = run_oracle(oracle_query(size_ms * 1000, slide_ms * 1000, delays), cases)
    assert len(expected) > 20
    query = session(delays=delays).sql(sql(size_ms, slide_ms))
    assert ph.find(query.plan, ph.JoinAggregateExec).factorised is not None
    for restore_at in (None, 3 + seed):
        assert_same(run_engine(query, cases, restore_at), expected)
    assert dict(query.metrics.late_by_input) == oracle.late


def test_sparse_and_dense_firings_match_the_oracle(monkeypatch) -> None:
    """More keys than rows a window: most fired (window, key) cells are empty, so the
    sides keep only the cells with rows (sparse chunks, `SPARSE_CHUNK`); few keys: dense
    chunks read in place. Both forms, and firings mixing them, equal the oracle."""
    from mangonel.runtime.operators import join_factor

    forms: list[bool] = []
    of = join_factor.FiredGrid.of

    def recording(chunks, fields):  # noqa: ANN001, ANN202
        forms.extend(chunk.slots is not None for chunk in chunks)
        return of(chunks, fields)

    monkeypatch.setattr(join_factor.FiredGrid, "of", staticmethod(recording))
    for keys in (60, 3):
        cases = arrivals(7, 0.0, keys=keys)
        expected, _ = run_oracle(oracle_query(S, S // 10), cases)
        assert len(expected) > 10
        assert_same(run_engine(session().sql(sql(1000, 100)), cases), expected)
    assert any(forms) and not all(forms)


def test_sliding_late_rows_are_counted_per_stream() -> None:
    """A row whose every window ended at or before the join's watermark (the minimum over
    both streams) is late; one with a window left contributes to it only."""
    clicks = pa.schema([("ts", pa.timestamp("us")), ("k", pa.int64()), ("x", pa.int64())])
    views = pa.schema([("ts", pa.timestamp("us")), ("k", pa.int32()), ("y", pa.float64())])
    cases = [
        ("clicks", batch(clicks, [{"ts": 5 * S, "k": 1, "x": 1}])),
        ("views", batch(views, [{"ts": 5 * S, "k": 1, "y": 1.0}])),  # W = 5 s
        # every window of 3.95 s ends by 4.95 s: late; 4.5 s still has windows ending > 5 s
        (
            "clicks",
            batch(clicks, [{"ts": 3_950_000, "k": 1, "x": 2}, {"ts": 4_500_000, "k": 1, "x": 3}]),
        ),
        (
            "views",
            batch(
                views, [{"ts": 3_900_000, "k": 1, "y": 2.0}, {"ts": 4_600_000, "k": 1, "y": 3.0}]
            ),
        ),
    ]
    expected, oracle = run_oracle(oracle_query(S, S // 10), cases)
    query = session().sql(sql(1000, 100))
    assert_same(run_engine(query, cases), expected)
    assert oracle.late == {"clicks": 1, "views": 1}
    assert dict(query.metrics.late_by_input) == oracle.late


def test_a_chunked_merge_fires_early_only_what_the_join_closes(monkeypatch) -> None:
    """A batch whose dense block would pass MAX_SEGMENT_BYTES is merged in pane chunks, and
    the windows the join's watermark after the batch closes fire between chunks; their cells
    wait for the join's combine (the other side reaches them in the same firing)."""
    from mangonel.runtime.operators import window

    monkeypatch.setattr(window, "MAX_SEGMENT_BYTES", 1)  # every multi-window batch chunks
    chunked = []
    original = window.TimeWindowOperator._chunk_panes

    def chunk_panes(self, host_panes, fire_until):  # noqa: ANN001, ANN202
        chunk = original(self, host_panes, fire_until)
        chunked.append(chunk)
        return chunk

    monkeypatch.setattr(window.TimeWindowOperator, "_chunk_panes", chunk_panes)
    early = []  # the join fires sides through fire_cells: advance_watermark is the merge's
    advance = FactorisedSide.advance_watermark

    def advance_watermark(self, watermark):  # noqa: ANN001, ANN202
        early.append(watermark)
        return advance(self, watermark)

    monkeypatch.setattr(FactorisedSide, "advance_watermark", advance_watermark)
    clicks = pa.schema([("ts", pa.timestamp("us")), ("k", pa.int64()), ("x", pa.int64())])
    views = pa.schema([("ts", pa.timestamp("us")), ("k", pa.int32()), ("y", pa.float64())])
    lagging = [  # views lag: a clicks batch over 8 s may close only what views reached
        ("views", batch(views, [{"ts": t, "k": t % 3, "y": 1.0} for t in range(0, S, S // 7)])),
        ("clicks", batch(clicks, [{"ts": t, "k": t % 3, "x": 2} for t in range(0, 8 * S, S // 9)])),
        ("views", batch(views, [{"ts": t, "k": t % 3, "y": 2.0} for t in range(S, 9 * S, S // 5)])),
        ("clicks", batch(clicks, [{"ts": 9 * S, "k": 0, "x": 1}])),
    ]
    for seed in range(4):
        cases = arrivals(seed, 0.0, batches=12) if seed < 3 else lagging
        expected, oracle = run_oracle(oracle_query(S, S // 10), cases)
        query = session().sql(sql(1000, 100))
        for restore_at in (None, 5):
            assert_same(run_engine(query, cases, restore_at), expected)
        assert dict(query.metrics.late_by_input) == oracle.late
    assert any(chunk is not None for chunk in chunked) and early


# -- two-column keys of mixed types ------------------------------------------------------

LEFT2 = JoinInput("l", "a", {"ts": "timestamp", "k": "bigint", "g": "string", "x": "bigint"}, "ts")
RIGHT2 = JoinInput("r", "b", {"ts": "timestamp", "k": "int", "g": "string", "y": "double"}, "ts")
A = pa.schema(
    [("ts", pa.timestamp("us")), ("k", pa.int64()), ("g", pa.string()), ("x", pa.int64())]
)
B = pa.schema(
    [("ts", pa.timestamp("us")), ("k", pa.int32()), ("g", pa.string()), ("y", pa.float64())]
)


def two_key_session() -> Session:
    s = Session("cpu")
    s.execute(
        "CREATE STREAM a (ts TIMESTAMP, k BIGINT, g STRING, x BIGINT) WITH (event_time = 'ts')"
    )
    s.execute("CREATE STREAM b (ts TIMESTAMP, k INT, g STRING, y DOUBLE) WITH (event_time = 'ts')")
    return s


def two_key_arrivals(seed: int) -> list:
    rng = np.random.default_rng(seed)
    out, now = [], 0
    for i in range(10):
        now += int(rng.integers(100_000, 500_000))
        rows = []
        for _ in range(int(rng.integers(1, 30))):
            row = {
                "ts": max(0, now - int(rng.integers(0, 1_200_000))),
                "k": None if rng.random() < 0.05 else int(rng.integers(0, 4)),
                "g": None if rng.random() < 0.05 else str(rng.choice(["p", "q", "r"])),
            }
            if i % 2 == 0:
                row["x"] = None if rng.random() < 0.1 else int(rng.integers(-9, 9))
            else:
                row["y"] = None if rng.random() < 0.1 else float(rng.normal())
            rows.append(row)
        out.append(("a", batch(A, rows)) if i % 2 == 0 else ("b", batch(B, rows)))
    return out


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("group_by", [("l.k",), ("r.g", "l.k")])
def test_two_column_keys_of_mixed_types(seed: int, group_by: tuple[str, ...]) -> None:
    """ON l.k = r.k (BIGINT = INT) AND l.g = r.g (STRING), sliding w/s = 10: GROUP BY
    every key column, and GROUP BY part of it (the keys of one group combined)."""
    outputs = tuple((name.replace(".", "_"), ["col", name]) for name in group_by)
    query_oracle = JoinOracleQuery(
        LEFT2,
        RIGHT2,
        "inner",
        S,
        S // 10,
        ("k", "g"),
        ("k", "g"),
        keys=group_by,
        aggregates=(("count_star", None), ("sum", ["col", "l.x"]), ("max", ["col", "r.y"])),
        outputs=(
            *outputs,
            ("start", ["bound", "start"]),
            ("n", ["agg", 0]),
            ("sx", ["agg", 1]),
            ("my", ["agg", 2]),
        ),
    )
    cases = two_key_arrivals(seed)
    expected, oracle = run_oracle(query_oracle, cases)
    assert len(expected) > 10
    select = ", ".join(f"{name} AS {name.replace('.', '_')}" for name in group_by)
    query = two_key_session().sql(
        f"SELECT {select}, window_start AS start, COUNT(*) AS n, SUM(l.x) AS sx, "
        "MAX(r.y) AS my FROM a [RANGE 1 SECOND SLIDE 100 MILLISECONDS] AS l "
        "JOIN b [RANGE 1 SECOND SLIDE 100 MILLISECONDS] AS r ON l.k = r.k AND l.g = r.g "
        f"GROUP BY {', '.join(group_by)}"
    )
    assert ph.find(query.plan, ph.JoinAggregateExec).factorised is not None
    for restore_at in (None, 4):
        assert_same(run_engine(query, cases, restore_at), expected)
    assert dict(query.metrics.late_by_input) == oracle.late


# -- plan -----------------------------------------------------------------------------


def test_each_side_is_a_window_aggregation_placed_as_one() -> None:
    """The sides group by their join key columns, count their rows and keep the fields of
    the aggregates reading them; a GPU plan puts their lift, merge and tree on the GPU and
    the combine on the host, and EXPLAIN ... codegen prints both sides' kernels."""
    plan = session().sql(sql(1000, 10)).plan
    node = ph.find(plan, ph.JoinAggregateExec)
    left, right = factorised_sides(node)
    assert [k.name for k in left.keys] == ["k"] and [k.name for k in right.keys] == ["k"]
    assert left.fields[0].name == right.fields[0].name == "rows"
    assert {f.name for f in left.fields[1:]} | {f.name for f in right.fields[1:]} == {
        f.name for f in node.fields[1:]
    }
    assert (left.pane_length, left.panes_per_window) == (10_000, 100)
    on_gpu = ph.with_backend(plan, "gpu", "test")
    gpu_node = ph.find(on_gpu, ph.JoinAggregateExec)
    for side in factorised_sides(gpu_node):
        assert [ph.placement(side, s).backend for s in ("lift", "merge", "tree")] == ["gpu"] * 3
    assert ph.placement(gpu_node, "aggregate").backend == "cpu"
    text = explain_text(on_gpu)
    assert text.count("WindowAggregate:") == 2 and "fused=factorised" in text
    assert "windowing=side-panes" in text
    assert f"because {ph.JOIN_FACTORISED_COMBINE_ON_CPU}" in text
    source = explain_codegen(on_gpu)
    assert "GPU kernels of side l" in source and "GPU kernels of side r" in source
    assert "GPU kernels of side l: none" in explain_codegen(plan)


# -- the GPU plan ---------------------------------------------------------------------


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The "gpu" backend is `fake_gpu_backend` (CPU kernels, counting lifts)."""
    monkeypatch.setitem(registry.BACKEND_MODULES, "gpu", "fake_gpu_backend")
    fake_gpu_backend.LIFTS.clear()
    return fake_gpu_backend.LIFTS


def test_a_gpu_plan_runs_the_sides_on_the_gpu_kernels(fake_gpu: list[int]) -> None:
    query = session(delays=(300_000, 0)).sql(sql(1000, 100))
    cases = arrivals(5, 1.2)
    gpu_plan = ph.with_backend(query.plan, "gpu", "test")
    runner = LocalQuery(gpu_plan)
    join = runner.operator.find(JoinOperator)
    assert all(isinstance(side.kernels, FakeGpuKernels) for side in join.cells.sides)
    assert not isinstance(join.kernels, FakeGpuKernels)  # the combine: the host's
    got = runner.run(cases)
    # the state is both sides' window state (segments, key maps) and the combine's
    state = sum(side.state_bytes() for side in join.cells.sides)
    assert state > 0 and runner.metrics.state_bytes >= state
    assert sum(fake_gpu) >= sum(b.num_rows for _, b in cases)  # every row lifted there
    want = LocalQuery(query.plan).run(cases)
    assert got.num_rows > 20 and got.equals(want)


def test_the_next_arrival_is_conformed_while_the_current_one_merges(fake_gpu, monkeypatch):
    """Arrivals in memory: each arrival after the first is conformed (on a GPU: staged) by
    the side it belongs to while the arrival before it, on either side, is in its fused
    pass, so `process` finds it ready (`FactorisedJoin.prefetch`)."""
    query = session(delays=(300_000, 0)).sql(sql(1000, 100))
    cases = arrivals(5, 1.2)
    runner = LocalQuery(ph.with_backend(query.plan, "gpu", "test"))
    join = runner.operator.find(JoinOperator)
    staged_during = []  # (side staging, side merging) per staging
    merging = []
    for index, side in enumerate(join.cells.sides):
        original = side._process

        def process(batch, index=index, original=original):  # noqa: ANN001, ANN202
            merging.append(index)
            try:
                return original(batch)
            finally:
                merging.pop()

        monkeypatch.setattr(side, "_process", process)
        stage = side._stage_input

        def staging(batch, index=index, stage=stage):  # noqa: ANN001, ANN202
            staged_during.append((index, merging[-1] if merging else None))
            return stage(batch)

        monkeypatch.setattr(side, "_stage_input", staging)
    got = runner.run(cases)
    assert got.equals(LocalQuery(query.plan).run(cases))
    during = [pair for pair in staged_during if pair[1] is not None]
    assert len(during) == len(cases) - 1  # every arrival but the first, once
    assert {pair for pair in during} >= {(0, 1), (1, 0)}  # across sides too


def test_with_a_copy_worker_two_arrivals_are_named_ahead(fake_gpu, monkeypatch):
    """Where the sides' kernels stage in the background (the GPU's copy worker), the runner
    names two arrivals ahead of the one processed, as a window aggregation's does, and each
    goes to the kernels when named (not while the arrival before merges): before the first
    arrival's lift it and the two after it are staging; every arrival is staged once, in
    order (so the kernels' three kept prefetches are the arrival processed and the two named
    after it: none is dropped and staged again)."""
    monkeypatch.setattr(fake_gpu_backend, "BACKGROUND", [True])
    fake_gpu_backend.STAGING.clear()
    query = session(delays=(300_000, 0)).sql(sql(1000, 100))
    cases = arrivals(5, 1.2)
    runner = LocalQuery(ph.with_backend(query.plan, "gpu", "test"))
    join = runner.operator.find(JoinOperator)
    assert join.prefetch_depth == 2
    got = runner.run(cases)
    assert got.equals(LocalQuery(query.plan).run(cases))
    log = fake_gpu_backend.STAGING
    # arrivals 0, 1 and 2 named before 0 is processed, then one more per arrival
    staged = [n for what, n in log if what == "prefetch"]
    assert staged == [b.num_rows for _, b in cases]
    steps = [what for what, _ in log if what != "extremes"]
    assert steps[: steps.index("lift")] == ["prefetch"] * 3
    fake_gpu_backend.STAGING.clear()


# -- the fuzzer -----------------------------------------------------------------------


def test_the_fuzzers_join_cases_reach_the_factorised_plan_with_sliding_windows() -> None:
    reached = []
    for seed in range(400):
        case = draw_join_case(seed)
        if not (case.aggregated and case.kind == "inner" and case.slide != case.size):
            continue
        if case.residual or case.where:
            continue
        reached.append(case)
    assert len(reached) >= 10
    s = Session("cpu")
    for statement in reached[0].ddl():
        s.execute(statement)
    for case in reached[:10]:
        assert ph.find(s.sql(case.query()).plan, ph.JoinAggregateExec).factorised is not None
        problem = check_join(case)
        assert problem is None, f"{problem}\n{case.describe()}"


# -- on a device ----------------------------------------------------------------------


def _device_cases(skew: float, disorder: int, seed: int) -> list:
    """Two streams of 1,000 keys (Zipf `skew`), rows up to `disorder` us out of order."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, 1001) ** skew
    weights /= weights.sum()
    clicks = pa.schema([("ts", pa.timestamp("us")), ("k", pa.int64()), ("x", pa.int64())])
    views = pa.schema([("ts", pa.timestamp("us")), ("k", pa.int32()), ("y", pa.float64())])
    out = []
    for i in range(40):
        n = 20_000
        ts = (i // 2) * 250_000 + rng.integers(0, 250_000, n) - rng.integers(0, disorder + 1, n)
        keys = rng.choice(1000, n, p=weights)
        columns = {"ts": pa.array(np.maximum(ts, 0), pa.timestamp("us"))}
        if i % 2 == 0:
            columns["k"] = pa.array(keys, pa.int64())
            columns["x"] = pa.array(rng.integers(-100, 100, n), pa.int64())
            out.append(("clicks", pa.RecordBatch.from_pydict(columns, schema=clicks)))
        else:
            columns["k"] = pa.array(keys.astype(np.int32), pa.int32())
            columns["y"] = pa.array(rng.normal(size=n), pa.float64())
            out.append(("views", pa.RecordBatch.from_pydict(columns, schema=views)))
    return out


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("slide_ms", "skew", "disorder"),
    [(1000, 0.0, 0), (10, 0.0, 0), (100, 0.0, 600_000), (10, 1.0, 300_000), (1000, 1.0, 0)],
    ids=["tumbling", "sliding", "out-of-order", "zipf-sliding", "zipf-tumbling"],
)
def test_factorised_join_on_a_device_equals_the_cpu(
    slide_ms: int, skew: float, disorder: int
) -> None:
    """On a GPU host: the sides' lift/merge/tree on the device (GpuKernels), the rows equal
    the CPU plan's (sums to 1e-9: the device adds in another order)."""
    pytest.importorskip("cupy")
    cases = _device_cases(skew, disorder, seed=slide_ms)
    text = sql(1000, slide_ms)
    results = []
    for backend in ("gpu", "cpu"):
        s = Session(backend)
        s.execute(
            "CREATE STREAM clicks (ts TIMESTAMP, k BIGINT, x BIGINT) WITH (event_time = 'ts')"
        )
        s.execute("CREATE STREAM views (ts TIMESTAMP, k INT, y DOUBLE) WITH (event_time = 'ts')")
        query = s.sql(text)
        node = ph.find(query.plan, ph.JoinAggregateExec)
        assert node.factorised is not None
        if backend == "gpu":
            sides = factorised_sides(node)
            assert all(ph.placement(side, "merge").backend == "gpu" for side in sides)
            runner = LocalQuery(query.plan)
            results.append((runner.run(cases), runner.metrics))
            # every arrival but the first was staged while the one before it merged
            distinct = {
                id(s.kernels): s.kernels for s in runner.operator.find(JoinOperator).cells.sides
            }
            hits = sum(kernels.metrics.prefetch_hits for kernels in distinct.values())
            assert hits >= len(cases) - 1
            continue
        results.append((query.run(cases), query.metrics))
    (got, got_metrics), (want, want_metrics) = results
    # within a window, groups come in first-seen order of each backend's key map: compare
    # in (window, key) order
    got, want = (t.sort_by([("start", "ascending"), ("k", "ascending")]) for t in (got, want))
    assert got.num_rows == want.num_rows > 1000
    assert got_metrics.late_by_input == want_metrics.late_by_input
    assert got.column_names == want.column_names
    for name in got.column_names:
        a, b = got.column(name).to_pylist(), want.column(name).to_pylist()
        if pa.types.is_floating(got.schema.field(name).type):
            np.testing.assert_allclose(
                np.array(a, dtype=float), np.array(b, dtype=float), rtol=1e-9, atol=1e-9
            )
        else:
            assert a == b, name


def test_a_snapshot_without_the_side_aggregations_is_refused() -> None:
    """The first factorised state (per-window cells, no side snapshots) cannot be restored
    into the side aggregations: a clear DataError, not a KeyError."""
    from mangonel.errors import DataError
    from mangonel.runtime.operators.snapshot import pack, unpack

    query = session().sql(sql(1000, 100))
    runner = LocalQuery(query.plan)
    for name, b in arrivals(1, 0.0)[:4]:
        runner.process(b, runner.inputs[name])
    header, arrays = unpack(runner.snapshot())
    old = {k: v for k, v in arrays.items() if not k.startswith("factorised_side")}
    with pytest.raises(DataError, match="predates the side window aggregations"):
        LocalQuery(query.plan).restore(pack(header, old))
