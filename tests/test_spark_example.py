"""`make run`'s waiting loop (examples/spark_generator.py) with a scripted query and clock: it
waits for the first results however long the first micro-batch takes, says what it waits
for, and gives up at the timeout. No Spark needed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).parent.parent / "examples" / "spark_generator.py"


def _example():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location("spark_generator_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class ScriptedQuery:
    """A streaming query whose micro-batch `n` finishes at `finishes[n]` seconds."""

    def __init__(self, clock: list[float], finishes: list[float]) -> None:
        self.clock = clock
        self.finishes = finishes
        self.isActive = True
        self.status = {"message": "Processing new data"}

    @property
    def done(self) -> int:
        return sum(1 for t in self.finishes if t <= self.clock[0])

    @property
    def lastProgress(self) -> dict | None:
        if not self.done:
            return None
        return {"batchId": self.done - 1, "numInputRows": 1000, "eventTime": {}}


def _run(finishes: list[float], seconds: float, timeout: float, rows_per_batch: int = 7):
    clock = [0.0]
    query = ScriptedQuery(clock, finishes)

    def sleep(step: float) -> None:
        clock[0] += step

    rows = _example().wait_for_results(
        query,
        lambda: rows_per_batch * max(query.done - 1, 0),  # the first batch emits no windows
        seconds,
        timeout,
        clock=lambda: clock[0],
        sleep=sleep,
    )
    return rows, clock[0]


def test_waits_past_seconds_until_results_arrive(capsys: pytest.CaptureFixture[str]) -> None:
    # the first micro-batch takes 22 s of a 25 s budget, the second ends at 31 s
    rows, stopped = _run([22.0, 31.0, 32.0], seconds=25.0, timeout=300.0)
    assert rows == 7 and stopped == 31.0
    out = capsys.readouterr().out
    assert "[  5.0s] waiting for micro-batch 0 (the first starts Spark's Python workers): " in out
    assert "[ 22.0s] batch   0:" in out and "[ 30.0s] waiting for micro-batch 2" not in out
    assert "[ 27.0s] waiting for micro-batch 1: Processing new data" in out


def test_stops_at_seconds_when_results_came_early() -> None:
    assert _run([2.0, 3.0, 4.0, 5.0], seconds=10.0, timeout=300.0)[1] == 10.0


def test_gives_up_at_the_timeout_with_no_rows(capsys: pytest.CaptureFixture[str]) -> None:
    rows, stopped = _run([], seconds=25.0, timeout=40.0)
    assert (rows, stopped) == (0, 40.0)
    assert capsys.readouterr().out.count("waiting for micro-batch 0") == 8
