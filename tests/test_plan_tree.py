"""The plan as a tree, placement as plan data, the operator registry and `OperatorTree`."""

from __future__ import annotations

import dataclasses

import fake_gpu_backend
import pyarrow as pa
import pytest
from fuzzer import engine_rows as as_rows
from plans import make_plan
from sqlglot import exp
from test_window_cpu import COLUMNS, batch

from mangonel.catalog.types import SqlType as T
from mangonel.compiler import physical as ph
from mangonel.compiler.explain import explain_json, explain_text
from mangonel.compiler.logical import AggregateFunction as F
from mangonel.errors import BackendUnavailableError
from mangonel.runtime.local.query import LocalQuery
from mangonel.runtime.operators import registry
from mangonel.runtime.operators.count_window import CountWindowOperator
from mangonel.runtime.operators.project import FilterOperator, ProjectOperator
from mangonel.runtime.operators.tree import OperatorTree
from mangonel.runtime.operators.window import TimeWindowOperator

AGGREGATES = [(F.COUNT_STAR, None), (F.SUM, exp.column("v")), (F.VAR_SAMP, exp.column("v"))]
HAVING = exp.GT(this=exp.column("k"), expression=exp.Literal.number(1))


def _plan(kind: str = "time", having: exp.Expression | None = None) -> ph.ProjectExec:
    return make_plan(
        COLUMNS, keys=["k"], kind=kind, size=4, slide=2, aggregates=AGGREGATES, having=having
    )


BATCHES = [
    batch([1, 2, 3, 5], k=[1, 2, 1, 2], v=[1.0, 2.0, 3.0, 4.0]),
    batch([6, 7, 9, 11], k=[2, 1, 1, 2], v=[5.0, None, 7.0, 8.0]),
]


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The "gpu" backend is `fake_gpu_backend` (CPU kernels less the GPU-missing steps)."""
    monkeypatch.setitem(registry.BACKEND_MODULES, "gpu", "fake_gpu_backend")
    fake_gpu_backend.LIFTS.clear()
    return fake_gpu_backend.LIFTS


def test_the_plan_is_a_tree_of_frozen_nodes_with_children() -> None:
    plan = _plan(having=HAVING)
    names = [type(node).__name__ for node in ph.walk(plan)]
    assert names == [
        "ProjectExec",
        "FilterExec",
        "WindowAggregateExec",
        "LiftExec",
        "StreamScanExec",
    ]
    for node in ph.walk(plan):
        assert isinstance(node.children, tuple) and not hasattr(node, "child")
    window = ph.find(plan, ph.WindowAggregateExec)
    assert window.lift is ph.find(plan, ph.LiftExec)
    with pytest.raises(LookupError):
        ph.find(_plan(), ph.FilterExec)


def test_window_result_columns_are_keys_bounds_then_aggregates() -> None:
    window = ph.find(_plan(), ph.WindowAggregateExec)
    assert ph.window_result_columns(window) == (
        ("k", T.BIGINT),
        ("__window_start", T.TIMESTAMP),
        ("__window_end", T.TIMESTAMP),
        ("__aggregate_0", T.BIGINT),
        ("__aggregate_1", T.DOUBLE),
        ("__aggregate_2", T.DOUBLE),
    )
    tree = OperatorTree(_plan())
    operator = tree.leaf()
    assert [f.name for f in operator.schema] == [n for n, _ in ph.window_result_columns(window)]
    results = operator.process(BATCHES[0]) + operator.finish()
    assert results and all(r.schema == operator.schema for r in results)


def test_placements_of_cpu_and_gpu_plans() -> None:
    cpu = ph.find(_plan("count"), ph.WindowAggregateExec)
    assert [p.step for p in cpu.placements] == ["lift", "tree", "finalize"]
    assert {p.backend for p in cpu.placements} == {"cpu"}
    gpu_plan = ph.with_backend(_plan("time", HAVING), "gpu", "test")
    window = ph.find(gpu_plan, ph.WindowAggregateExec)
    assert [(p.step, p.backend) for p in window.placements] == [
        ("lift", "gpu"),
        ("merge", "gpu"),
        ("tree", "gpu"),
        ("finalize", "gpu"),  # the device finalize kernel (`physical.device_finalize`)
    ]
    assert window.strategy == "hash-preaggregate+tree"
    count = ph.find(ph.with_backend(_plan("count"), "gpu", "test"), ph.WindowAggregateExec)
    assert ph.placement(count, "tree").backend == "cpu"
    assert ph.placement(count, "finalize").backend == "cpu"  # after the CPU tree
    assert ph.placement(count, "lift").backend == "gpu"


def test_explain_prints_steps_placed_off_the_plans_backend() -> None:
    assert "!" not in explain_text(_plan("count", HAVING))  # a CPU plan has none
    text = explain_text(ph.with_backend(_plan("count", HAVING), "gpu", "test"))
    lines = text.splitlines()
    tree = "      ! tree runs on cpu because " + ph.COUNT_TREE_ON_CPU  # WindowAggregate + 1
    assert tree in lines
    assert lines.index(tree) == 1 + next(
        i for i, line in enumerate(lines) if line.lstrip().startswith("WindowAggregate:")
    )
    # HAVING k > 1 and the outputs have CUDA renderings: Filter and Project stay on the GPU
    assert "! project" not in text and "! filter" not in text
    assert "! lift" not in text and "! merge" not in text
    # count windows print no pane parameters (the count operator uses none)
    assert "pane_length" not in text and "panes_per" not in text
    tree_json = explain_json(ph.with_backend(_plan("count"), "gpu", "test"))
    window = tree_json["children"][0]
    assert "pane_length" not in window["parameters"]
    assert {"step": "lift", "backend": "gpu", "reason": "test"} in window["placements"]
    assert len(window["placements"]) == 3


def test_the_registry_builds_the_operators_bottom_up() -> None:
    tree = OperatorTree(_plan(having=HAVING))
    kinds = [type(operator) for operator in tree.operators]
    assert kinds == [TimeWindowOperator, FilterOperator, ProjectOperator]
    assert tree.schema == tree.operators[-1].schema
    assert type(OperatorTree(_plan("count")).leaf()) is CountWindowOperator
    with pytest.raises(BackendUnavailableError, match="unknown backend"):
        registry.new_kernels("tpu")


def test_having_and_projection_run_as_operators_after_the_window() -> None:
    query = LocalQuery(_plan(having=HAVING))
    rows = [row for b in BATCHES for row in as_rows(query.process(b))]
    rows += as_rows(query.finish())
    everything = [row for row in as_rows(LocalQuery(_plan()).run(BATCHES).to_batches())]
    assert rows == [row for row in everything if row["k"] > 1]
    metrics = query.metrics
    assert metrics.windows_fired == len(everything)  # before HAVING
    assert metrics.rows_out == len(rows) < len(everything)  # after it


@pytest.mark.parametrize("kind", ["time", "count"])
def test_operators_obey_placement(fake_gpu: list[int], kind: str) -> None:
    """A GPU plan's steps placed on the CPU get the CPU kernels: the fake GPU kernels raise
    in the count-window tree and in pre-aggregation, and results equal the CPU plan's."""
    plan = _plan(kind, HAVING)
    want = as_rows(LocalQuery(plan).run(BATCHES).to_batches())
    got = as_rows(LocalQuery(ph.with_backend(plan, "gpu", "test")).run(BATCHES).to_batches())
    assert got == want and fake_gpu  # the lift ran on the "gpu" kernels


def test_stage_one_preaggregation_obeys_its_placement(fake_gpu: list[int]) -> None:
    plan = ph.with_backend(_plan(), "gpu", "test")
    window = ph.find(plan, ph.WindowAggregateExec)
    with pytest.raises(AssertionError, match="placed on the CPU"):
        OperatorTree(window).leaf().preaggregate(BATCHES[0])  # unplaced: the plan's backend
    placed = (ph.Placement("preaggregate", "cpu", "test"),)
    partials = OperatorTree(window, extra_placements=placed).leaf().preaggregate(BATCHES[0])
    assert partials.equals(LocalQuery(_plan()).window_operator.preaggregate(BATCHES[0]))


def test_time_windows_refuse_a_tree_placed_apart_from_the_merge() -> None:
    plan = _plan()
    window = ph.find(plan, ph.WindowAggregateExec)
    apart = tuple(
        ph.Placement(p.step, "gpu", "test") if p.step == "tree" else p for p in window.placements
    )
    with pytest.raises(Exception, match="one backend"):
        OperatorTree(dataclasses.replace(window, placements=apart))


def test_snapshot_of_a_tree_with_several_stateful_operators() -> None:
    """Two stateful operators: the tree packs both snapshots and restores each to its own."""
    plan = _plan()
    first = OperatorTree(plan)
    first.operators = [OperatorTree(plan).leaf(), OperatorTree(_plan("count")).leaf()]
    for operator in first.operators:
        operator.process(BATCHES[0])
    saved = first.snapshot()
    second = OperatorTree(plan)
    second.operators = [OperatorTree(plan).leaf(), OperatorTree(_plan("count")).leaf()]
    second.restore(saved)
    for a, b in zip(first.operators, second.operators, strict=True):
        assert a.snapshot() == b.snapshot()
    with pytest.raises(Exception, match="operator is tree"):
        OperatorTree(plan).operators[0].restore(saved)  # one operator cannot read two


def test_a_tree_of_one_stateful_operator_keeps_its_snapshot_format() -> None:
    query = LocalQuery(_plan(having=HAVING))
    query.process(BATCHES[0])
    assert query.snapshot() == query.window_operator.snapshot()
    assert isinstance(query.snapshot(), bytes) and pa.py_buffer(query.snapshot()).size > 0


def test_background_staging_stages_each_batch_beside_the_whole_batch_before(
    fake_gpu: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the kernels stage in the background (the GPU's copy worker), the runner names
    two batches ahead and the time window stages batch k + 2 when the runner names it, before
    batch k is lifted (not during batch k's fused pass), asks for each batch's measured
    extremes once, and gives the results of the plain CPU plan, late rows, NULL event times
    and combined firings included."""
    monkeypatch.setattr(fake_gpu_backend, "BACKGROUND", [True])
    fake_gpu_backend.STAGING.clear()
    plan = _plan()
    batches = [
        batch([1, 2, 3, 5], k=[1, 2, 1, 2], v=[1.0, 2.0, 3.0, 4.0]),
        batch([6, 7, 9, 11], k=[2, 1, 1, 2], v=[5.0, None, 7.0, 8.0]),
        batch([0, 12, 13], k=[1, 1, 3], v=[1.0, 1.0, 1.0]),  # 0 is late
        batch([None, 14, 20], k=[2, 2, 2], v=[2.0, 3.0, 4.0]),
        batch([21, 22, 40], k=[1, 3, 1], v=[9.0, 9.0, 9.0]),
    ]
    want = as_rows(LocalQuery(plan).run(batches).to_batches())
    got = as_rows(LocalQuery(ph.with_backend(plan, "gpu", "test")).run(batches).to_batches())
    assert got == want
    log = fake_gpu_backend.STAGING
    prefetched = [i for i, (what, _) in enumerate(log) if what == "prefetch"]
    lifted = [i for i, (what, _) in enumerate(log) if what == "lift"]
    assert len(prefetched) == len(batches) and len(lifted) >= len(batches)
    for k in range(1, len(batches)):  # batch k is staged before batch k - 1's lift
        assert prefetched[k] < lifted[k - 1]
    for k in range(2, len(batches)):  # two batches named ahead: before batch k - 2's lift too
        assert prefetched[k] < lifted[k - 2]
    assert [rows for what, rows in log if what == "extremes"] == [len(b) for b in batches]


@pytest.mark.parametrize("background", [False, True])
def test_batches_named_ahead_are_kept_at_most_prefetch_depth(
    fake_gpu: list[int], monkeypatch: pytest.MonkeyPatch, background: bool
) -> None:
    """A caller that names batches (`prefetch`) and never processes them does not grow what
    the time window keeps; the next batch it decides firings by is the first named after
    the one processed."""
    monkeypatch.setattr(fake_gpu_backend, "BACKGROUND", [background])
    query = LocalQuery(ph.with_backend(_plan(), "gpu", "test"))
    operator = query.window_operator
    assert operator.prefetch_depth == (2 if background else 1)
    named = [batch([t], k=[1], v=[1.0]) for t in range(6)]
    for b in named:
        operator.prefetch(b)
    assert operator._next_batches == named[-operator.prefetch_depth :]
    query.process(named[-2])
    assert operator._next_batches == [named[-1]]  # the batch after the one processed


def test_background_staging_defers_a_bad_batchs_error_to_its_turn(
    fake_gpu: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mangonel.errors import DataError

    monkeypatch.setattr(fake_gpu_backend, "BACKGROUND", [True])
    plan = ph.with_backend(_plan(), "gpu", "test")
    bad = pa.RecordBatch.from_pydict({"ts": ["soon"], "k": [1], "v": [1.0]})
    query = LocalQuery(plan)
    steps = query.stream([BATCHES[0], bad, BATCHES[1]])
    assert next(steps) is not None  # batch 0's step: the bad batch was named, not processed
    with pytest.raises(DataError, match="ts"):
        list(steps)


@pytest.mark.parametrize("aggregate", [F.MEDIAN, F.PERCENTILE_DISC])
def test_background_staging_keeps_a_waited_firings_holistic_values_apart(
    fake_gpu: list[int], monkeypatch: pytest.MonkeyPatch, aggregate: F
) -> None:
    """A firing that waited for the next batch and fires before it (its rows reach the
    waited windows' panes) completes its holistic columns from the values before that
    batch: the holistic driver fires it before keeping the batch's values."""
    monkeypatch.setattr(fake_gpu_backend, "BACKGROUND", [True])
    plan = make_plan(
        COLUMNS, keys=["k"], kind="time", size=4, slide=2, aggregates=[(aggregate, exp.column("v"))]
    )
    batches = [
        batch([1, 2, 3, 5], k=[1, 1, 1, 1], v=[1.0, 2.0, 3.0, 4.0]),
        batch([6, 7, 9], k=[1, 1, 1], v=[5.0, 6.0, 7.0]),
        batch([7, 8, 12], k=[1, 1, 1], v=[100.0, 200.0, 300.0]),  # 7 reaches [4, 8): not late
        batch([13, 20], k=[1, 1], v=[8.0, 9.0]),
    ]
    want = as_rows(LocalQuery(plan).run(batches).to_batches())
    got = as_rows(LocalQuery(ph.with_backend(plan, "gpu", "test")).run(batches).to_batches())
    assert got == want
