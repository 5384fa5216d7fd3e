"""Warnings a user would see on every micro-batch are handled where they arise."""

from __future__ import annotations

import subprocess
import sys

CONCAT = "The behavior of DataFrame concatenation with empty or all-NA entries is deprecated."


def _warnings_printed(module: str) -> str:
    """stderr of a fresh interpreter (all warnings shown) that imports mangonel's Spark
    package, as every Python worker running a mangonel stage does, and then sees pandas'
    concat FutureWarning raised from `module`."""
    code = (
        "import warnings, mangonel.runtime.spark\n"
        f"warnings.warn_explicit({CONCAT!r}, FutureWarning, 'worker.py', 3771, {module!r})\n"
    )
    return subprocess.run(
        [sys.executable, "-W", "default", "-c", code], capture_output=True, text=True, check=True
    ).stderr


def test_pysparks_worker_concat_warning_is_silenced_there_only() -> None:
    assert _warnings_printed("pyspark.worker") == ""
    assert "FutureWarning" in _warnings_printed("someone_elses_code")
