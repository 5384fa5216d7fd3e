"""Binding a query's window clause (`[RANGE ..]`, `[ROWS ..]`, `[SESSION GAP ..]`, and the
CUMULATE of Flink's table function) to its `WindowSpec`: sizes, slides and watermarks checked,
each error pointing at the part of the clause that is wrong. Split from bind.py by concern."""

from __future__ import annotations

import math

from mangonel.compiler.bind import _error
from mangonel.compiler.limits import MAX_PANES_PER_WINDOW, MAX_ROWS_PER_WINDOW
from mangonel.compiler.logical import WindowKind, WindowSpec
from mangonel.compiler.nodes import WindowClause
from mangonel.compiler.parse import format_duration
from mangonel.compiler.session import window_spec as session_window_spec
from mangonel.errors import PlanError, SqlError

# the clause's kind -> the window's (CUMULATE: only from Flink's CUMULATE(..), window_syntax.py)
_WINDOW_KINDS = {
    "RANGE": WindowKind.TIME,
    "ROWS": WindowKind.COUNT,
    "CUMULATE": WindowKind.CUMULATE,
}


def window_spec(clause: WindowClause, stream_delay_us: int) -> WindowSpec:
    """The window of a clause, its sizes checked (each error points at the clause's part:
    size, slide or watermark); `stream_delay_us` is the stream's declared watermark delay,
    the window's unless the clause has its own WATERMARK."""
    kind = clause.args["kind"]
    rows = kind == "ROWS"
    size = clause.args["size"]
    slide = clause.args.get("slide")
    watermark = clause.args.get("watermark")
    parts = clause.meta.get("parts", {})

    def fail(
        part: str, message: str, hint: str, error_class: type[SqlError] = SqlError
    ) -> SqlError:
        position = parts.get(part)
        if position is None:
            return _error(message, clause, hint, error_class=error_class)
        line, column, text = position
        return error_class(message, line=line, column=column, construct=text, hint=hint)

    def show(value: int) -> str:
        return str(value) if rows else format_duration(value)

    if kind == "SESSION":
        return session_window_spec(size, slide, watermark, stream_delay_us, fail)

    if size <= 0:
        raise fail(
            "size",
            f"{kind} must be positive, got {show(size)}",
            "ROWS counts tuples, e.g. [ROWS 100]" if rows else "e.g. [RANGE 1 SECOND]",
        )
    if slide is not None and slide <= 0:
        raise fail(
            "slide",
            f"SLIDE must be positive, got {show(slide)}",
            f"e.g. [{kind} {show(size)} SLIDE {show(max(1, size // 10))}]",
        )
    if slide is not None and slide > size:
        raise fail(
            "slide",
            f"SLIDE {show(slide)} is larger than {kind} {show(size)}: windows would skip tuples",
            f"use SLIDE <= {kind} (omit SLIDE for tumbling windows)",
        )
    if watermark is not None and watermark < 0:
        raise fail(
            "watermark",
            f"WATERMARK must not be negative, got {show(watermark)}",
            "WATERMARK is the out-of-orderness bound, e.g. WATERMARK 500 MILLISECONDS",
        )
    if rows and size > MAX_ROWS_PER_WINDOW:
        raise fail(
            "size",
            f"ROWS {size} is more than the {MAX_ROWS_PER_WINDOW:,} rows a count window may hold",
            "a count window keeps its tuples per key until it fires; for long windows "
            "use [RANGE <duration>]",
            PlanError,
        )
    if not rows:
        pane = math.gcd(size, slide if slide is not None else size)
        if size // pane > MAX_PANES_PER_WINDOW:
            raise fail(
                "slide",
                f"RANGE {show(size)} SLIDE {show(slide)} cuts each window into "
                f"{size // pane:,} panes of {show(pane)} (the panes are gcd(RANGE, "
                f"SLIDE) long); at most {MAX_PANES_PER_WINDOW:,} panes per window",
                f"use a SLIDE that divides RANGE into at most {MAX_PANES_PER_WINDOW:,} "
                "steps: window state holds every pane of a window for every key",
                PlanError,
            )
    delay = watermark if watermark is not None else stream_delay_us
    return WindowSpec(
        kind=_WINDOW_KINDS[kind],
        size=size,
        slide=slide if slide is not None else size,
        watermark_delay_us=delay,
    )
