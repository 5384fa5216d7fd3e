"""Options of the fuzzer (tests/test_fuzz.py) and the line that prints its seed.

`make fuzz` passes these; where make cannot run (the GPU machine), call pytest directly:
    python -m pytest -q tests/test_fuzz.py::test_random_cases_match_the_oracle --fuzz \\
        --fuzz-minutes=10 --backend=gpu [--fuzz-seed=N] [--fuzz-case=N]
Nothing here may import pyspark (the GPU machine has none).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The helper modules (oracle, plans, fuzz_cases, fuzzer) live beside the tests.
sys.path.insert(0, str(Path(__file__).parent))

# Under pytest-xdist (`make test` runs -n 4) the workers share one numba cache, so that a
# kernel is compiled once for the run, not once per worker (a clean clone starts empty).
# Processes compiling side by side are safe there since `mangonel.runtime.cpu.numba_cache`
# names each cached file uniquely (numba's own numbering let one overload load another's
# code: a segfault, docs/performance/gpu.md). Set before anything imports numba, which reads it
# once; Spark's Python workers inherit it from the worker that started Spark.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("NUMBA_CACHE_DIR", str(Path(__file__).parent.parent / ".numba-cache"))
    import mangonel.runtime.cpu.numba_cache  # noqa: E402, F401  (before any test compiles)

FUZZ_SUMMARY = pytest.StashKey[list]()
FUZZ_PROPERTY = "fuzz_summary"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fuzz", "mangonel fuzzer (see docs/testing.md)")
    group.addoption(
        "--fuzz",
        action="store_true",
        help="run the fuzzer for --fuzz-minutes instead of CI's short slice",
    )
    group.addoption(
        "--fuzz-minutes",
        type=float,
        default=10.0,
        help="time budget of --fuzz (default 10)",
    )
    group.addoption(
        "--fuzz-seed",
        type=int,
        default=None,
        help="run seed (default: fresh each run); the run prints it",
    )
    group.addoption(
        "--fuzz-case",
        type=int,
        default=None,
        help="replay one case seed (printed with a failure) instead of a run",
    )
    group.addoption(
        "--backend",
        choices=("cpu", "gpu"),
        default="cpu",
        help="engine backend the fuzzer drives (default cpu)",
    )
    group.addoption(
        "--fuzz-special",
        choices=("on", "off"),
        default=os.environ.get("MANGONEL_FUZZ_SPECIAL") or "on",
        help="NaN, +-inf, -0.0 in DOUBLE and INT64/INT32 min/max in integer columns "
        "(default on, or $MANGONEL_FUZZ_SPECIAL)",
    )
    group.addoption(
        "--fuzz-slice-seconds",
        type=float,
        default=float(os.environ.get("MANGONEL_FUZZ_SLICE_S") or 60),
        help="time budget of the slice that runs with every test run (default 60)",
    )
    group.addoption(
        "--fuzz-out",
        default="fuzz-failures",
        help="directory the minimal failing case is written to (default fuzz-failures/)",
    )


class _FuzzLines:
    """Collects the fuzz lines from test reports into the config of the process that
    prints the summary (the controller under pytest-xdist, this process otherwise)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "teardown":
            self.config.stash[FUZZ_SUMMARY] += [
                value for name, value in report.user_properties if name == FUZZ_PROPERTY
            ]


def pytest_configure(config: pytest.Config) -> None:
    config.stash[FUZZ_SUMMARY] = []
    config.pluginmanager.register(_FuzzLines(config), "mangonel-fuzz-lines")


@pytest.fixture
def fuzz_summary(request: pytest.FixtureRequest) -> Iterator[list]:
    """Lines for the end of the test run's output (the fuzz slice's seed). They travel in
    the test's report (`user_properties`), so the process that prints the summary gets them
    also when the test ran in a pytest-xdist worker."""
    lines: list[str] = []
    yield lines
    request.node.user_properties += [(FUZZ_PROPERTY, line) for line in lines]


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    # printed whatever -r/-q say, so every CI log shows the seed its fuzz slice used
    for line in config.stash.get(FUZZ_SUMMARY, []):
        terminalreporter.write_line(line)
