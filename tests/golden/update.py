"""Rewrite the golden files from what the code does now: `python tests/golden/update.py`.

- tests/golden/errors.expected: the error of every case in tests/golden/errors.sql;
- tests/golden/explain/NAME.txt: the EXPLAIN of every tests/golden/explain/NAME.sql.

Run it after an intended change to a message or to EXPLAIN, then read `git diff tests/golden`
line by line before committing: the tests compare against these files, so whatever this
writes becomes the expected behaviour.
"""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(TESTS.parent), str(TESTS)]

import test_errors_golden as errors  # noqa: E402
import test_explain_golden as explain  # noqa: E402


def main() -> None:
    errors.EXPECTED_FILE.write_text(errors.render_expected(errors.CASES))
    print(f"wrote {errors.EXPECTED_FILE.relative_to(TESTS.parent)} ({len(errors.CASES)} cases)")
    for case in explain.CASES:
        path = explain.GOLDEN / f"{case}.txt"
        path.write_text(explain.explain_case(case) + "\n")
        print(f"wrote {path.relative_to(TESTS.parent)}")


if __name__ == "__main__":
    main()
