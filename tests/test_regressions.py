"""Every tests/regressions/*.json case on the CPU (and the GPU, `pytest -m gpu`): compared with
the rows and metrics stored in the file, and with the oracle run now, after every batch.

A file is a case the fuzzer (or a person) found; the format is described in docs/testing.md.
A file with an "xfail" field (the reason) is expected to fail until its bug is fixed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fuzzer import Scenario, check, engine_run, oracle_run, read_json_row
from gpu_device import gpu_available
from oracle import first_difference

FILES = sorted((Path(__file__).parent / "regressions").glob("*.json"))


def _cases():
    for path in FILES:
        reason = json.loads(path.read_text()).get("xfail")
        marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
        yield pytest.param(path, id=path.stem, marks=marks)


@pytest.mark.parametrize("backend", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("path", list(_cases()))
def test_regression_case(path: Path, backend: str) -> None:
    if backend == "gpu" and not gpu_available():
        pytest.skip("no CUDA device visible to CuPy")
    data = json.loads(path.read_text())
    scenario = Scenario.from_json(data)
    failure = check(scenario, backend)
    assert failure is None, f"{path.name}: engine against the oracle: {failure}"

    firings, metrics = engine_run(scenario, backend)
    rows = [row for firing in firings for row in firing]
    _, _, tolerances = oracle_run(scenario)
    expected = [read_json_row(row) for row in data["expected_rows"]]
    difference = first_difference(rows, expected, tolerances=tolerances)
    assert difference is None, f"{path.name}: engine against the stored rows: {difference}"
    if "expected_firings" in data:
        assert [len(f) for f in firings] == data["expected_firings"]
    if "expected_late" in data:
        assert metrics["late_tuples_dropped"] == data["expected_late"]
    for name, value in data.get("expected_metrics", {}).items():
        assert metrics[name] == value, f"{path.name}: metric {name}"


def test_the_regression_corpus_is_well_formed() -> None:
    assert FILES, "tests/regressions/ holds no case"
    required = {"name", "ddl", "query", "batches", "oracle", "expected_rows"}
    for path in FILES:
        data = json.loads(path.read_text())
        assert required <= data.keys(), f"{path.name} lacks {sorted(required - data.keys())}"
        assert data["name"] == path.stem, f"{path.name}: name {data['name']!r} != file name"
