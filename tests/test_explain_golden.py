"""EXPLAIN is deterministic text: golden files under tests/golden/explain/.

Each NAME.sql holds one query over the streams of _streams.sql; NAME.txt is its EXPLAIN.
Regenerate after an intended change with `python tests/golden/update.py` and review the diff.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_errors_golden import run_with_hash_seed

from mangonel.compiler import physical as ph
from mangonel.compiler.explain import explain_text
from mangonel.compiler.script import split_statements
from mangonel.session import Session

GOLDEN = Path(__file__).parent / "golden" / "explain"
CASES = sorted(p.stem for p in GOLDEN.glob("*.sql") if not p.stem.startswith("_"))


def session() -> Session:
    s = Session(backend="cpu")
    for statement in split_statements((GOLDEN / "_streams.sql").read_text()):
        s.execute(statement.text)
    return s


# gpu_NAME.sql: the plan for the GPU (its placements and `!` lines), whatever this machine has;
# the reason is fixed so the text does not depend on whether CuPy imports here
GPU_REASON = "golden: planned for the GPU"
# gpu_gpujoin_NAME.sql: join queries planned for the GPU (the join there: the default);
# gpu_join_NAME.sql: the same with Session(gpu_join=False), the join kept on the CPU


def explain_case(case: str) -> str:
    """The EXPLAIN text of a golden case (what NAME.txt holds, less the final newline)."""
    query = session().sql((GOLDEN / f"{case}.sql").read_text())
    if case.startswith("gpu_"):
        gpu_join = not case.startswith("gpu_join_")
        return explain_text(ph.with_backend(query.plan, "gpu", GPU_REASON, gpu_join=gpu_join))
    return query.explain()


@pytest.mark.parametrize("case", CASES)
def test_explain_matches_golden(case: str) -> None:
    assert explain_case(case) + "\n" == (GOLDEN / f"{case}.txt").read_text()


@pytest.mark.parametrize("case", CASES)
def test_explain_statement_equals_method(case: str) -> None:
    query = (GOLDEN / f"{case}.sql").read_text()
    s = session()
    assert s.sql("EXPLAIN " + query) == s.sql(query).explain()
    assert s.execute("EXPLAIN " + query) == s.sql(query).explain()


def test_explain_is_stable_across_processes() -> None:
    """EXPLAIN text and JSON must not depend on string hashing (set or dict order of names),
    which changes between processes only: compare two interpreters with different seeds."""
    code = (
        "import json, sys; sys.path.insert(0, 'tests'); import test_explain_golden as t; "
        "s = t.session(); "
        "print(json.dumps({c: [s.sql((t.GOLDEN / f'{c}.sql').read_text()).explain(), "
        "s.sql((t.GOLDEN / f'{c}.sql').read_text()).explain(format='json')] "
        "for c in t.CASES}))"
    )
    first, second = (run_with_hash_seed(seed, code) for seed in ("1", "2"))
    assert first == second
    assert set(json.loads(first)) == set(CASES)


def test_explain_json_has_the_same_operators() -> None:
    plan = session().sql((GOLDEN / "having_two_keys.sql").read_text()).explain(format="json")
    operators = []
    node = plan
    while node:
        operators.append(node["operator"])
        node = node["children"][0] if node["children"] else None
    assert operators == ["Project", "Filter", "WindowAggregate", "Lift", "StreamScan"]
    window = plan["children"][0]["children"][0]["parameters"]
    assert window["pane_length"] == 15 * 60 * 1_000_000  # microseconds, as a number
    json.dumps(plan)  # serialisable as is


def test_explain_json_gives_numbers_as_numbers_and_lists_as_arrays() -> None:
    s = session()
    plan = s.sql((GOLDEN / "readme_vwap.sql").read_text()).explain(format="json")
    window = plan["children"][0]["parameters"]
    assert window["window"] == "time"
    assert (window["range"], window["slide"]) == (1_000_000, 10_000)
    assert (window["panes_per_window"], window["panes_per_slide"]) == (100, 1)
    assert window["windows_per_batch"] == 100 and window["keys"] == ["symbol"]
    assert isinstance(window["aggregates"], list) and not window["reason"].startswith('"')
    lift = plan["children"][0]["children"][0]["parameters"]
    assert lift["predicate"] == "volume > 0"
    scan = plan["children"][0]["children"][0]["children"][0]["parameters"]
    assert scan["columns"][0] == "ts:TIMESTAMP" and isinstance(scan["declared_watermark"], int)
    count = s.sql((GOLDEN / "count_window.sql").read_text()).explain(format="json")
    count_window = count["children"][0]["parameters"]
    assert (count_window["range"], count_window["slide"]) == (1024, 256)  # rows
    assert count["children"][0]["children"][0]["parameters"]["predicate"] is None


def test_windows_per_batch_is_a_session_option() -> None:
    s = Session(backend="cpu", windows_per_batch=7)
    for statement in split_statements((GOLDEN / "_streams.sql").read_text()):
        s.execute(statement.text)
    assert "windows_per_batch=7" in s.sql((GOLDEN / "readme_vwap.sql").read_text()).explain()
