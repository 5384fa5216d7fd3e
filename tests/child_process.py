"""The environment of a test's child interpreter: the project first on its path, then
whatever the caller's PYTHONPATH held (on the GPU machine the carried packages live there:
a child given the project alone cannot import sqlglot)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def child_environment(**variables: str) -> dict[str, str]:
    """os.environ with `variables` set and the project put first on PYTHONPATH."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, **variables, "PYTHONPATH": path}
