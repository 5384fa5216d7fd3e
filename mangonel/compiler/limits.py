"""The limits mangonel puts on queries, in one place (docs/sql.md states each).

Each keeps a query that parses from failing later with a Python error (RecursionError,
MemoryError, OverflowError) instead of a message that says what to change.
"""

from __future__ import annotations

import sys

# Expressions. sqlglot's parser recurses about twenty Python frames per nested parenthesis,
# and typing, binding and rendering a few frames per level of the expression tree; a
# 350-term `a + b + ...` chain is 350 levels deep. Both bounds are far beyond hand-written
# SQL, and RECURSION_FLOOR leaves room for them.
MAX_PARENTHESIS_NESTING = 100
MAX_EXPRESSION_DEPTH = 1000
RECURSION_FLOOR = 10_000  # a 1000-deep expression needs about 4,000 (bind, type, run)

# Windows. Durations are int64 microseconds everywhere; bounding every duration (RANGE,
# SLIDE, WATERMARK, watermark options) by 10,000 years keeps event time +- any of them inside
# int64 for every TIMESTAMP Spark can hold (years 0001 to 9999).
MAX_DURATION_DAYS = 3_650_000
MAX_DURATION_US = MAX_DURATION_DAYS * 86_400_000_000
# A time window spans RANGE / gcd(RANGE, SLIDE) panes, and its state holds several windows'
# worth of panes per key: [RANGE 1 DAY SLIDE 1 MICROSECOND] would be 8.64e10 panes per key.
MAX_PANES_PER_WINDOW = 100_000
# A count window keeps up to ROWS per-tuple partials per key until it fires.
MAX_ROWS_PER_WINDOW = 10_000_000


def ensure_recursion_headroom() -> None:
    """Raise Python's recursion limit to RECURSION_FLOOR (never lower it): the compiler's
    recursive passes over an expression of MAX_EXPRESSION_DEPTH need about 4 frames a level,
    and 100 nested parentheses about 2,000 frames of sqlglot's parser."""
    if sys.getrecursionlimit() < RECURSION_FLOOR:
        sys.setrecursionlimit(RECURSION_FLOOR)
