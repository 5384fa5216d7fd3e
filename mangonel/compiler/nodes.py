"""Expression nodes mangonel adds to sqlglot's, shared by every compiler stage.

They follow sqlglot's convention (`arg_types` declares the children), so walking,
comparing and hashing them needs no per-node code.
"""

from __future__ import annotations

from sqlglot import exp


class WindowClause(exp.Expression):
    """`[RANGE r SLIDE s WATERMARK d]` or `[ROWS n SLIDE m WATERMARK d]` after a stream name.

    kind: "RANGE" | "ROWS"; size/slide: microseconds (RANGE) or rows (ROWS);
    watermark: microseconds or None. `this` is the exp.Table it applies to.
    """

    arg_types = {"this": True, "kind": True, "size": True, "slide": False, "watermark": False}


# bound -> (the window-result column it reads, microseconds added): `window_time` is the
# last instant inside the window (Spark's `window_time(window)`, Flink's `window_time`)
WINDOW_BOUNDS: dict[str, tuple[str, int]] = {
    "start": ("start", 0),
    "end": ("end", 0),
    "time": ("end", -1),
}


class WindowBound(exp.Expression):
    """The pseudo-columns `window_start` (this="start"), `window_end` (this="end") and
    `window_time` (this="time": window_end - 1 microsecond)."""

    arg_types = {"this": True}

    @property
    def bound(self) -> str:
        return self.args["this"]

    @property
    def reads(self) -> str:
        """The window-result bound its value is computed from: "start" or "end"."""
        return WINDOW_BOUNDS[self.bound][0]

    @property
    def offset_us(self) -> int:
        """Microseconds added to the bound it reads."""
        return WINDOW_BOUNDS[self.bound][1]


class WindowStruct(exp.Expression):
    """Spark's `window` (and `session_window`) column as an output: the STRUCT<start:
    TIMESTAMP, end: TIMESTAMP> of the window's bounds (`catalog.types.WINDOW_STRUCT`). Only
    ever a whole SELECT item (`compiler/window_syntax.py`, `compiler/session.py` put it
    there); the Project driver builds it from the bounds (`runtime.operators.project`)."""

    arg_types = {"this": False}


class AggregateRef(exp.Expression):
    """The finalized value of aggregate number `this` of a WindowAggregate."""

    arg_types = {"this": True}

    @property
    def number(self) -> int:
        # Not `index`: sqlglot keeps each node's position in its parent's list there.
        return int(self.args["this"])


class Explain(exp.Expression):
    """`EXPLAIN [CODEGEN] <query>`."""

    arg_types = {"this": True, "codegen": False}


class WindowTableFunction(exp.Expression):
    """Flink's windowing table function in FROM: `TABLE(TUMBLE(TABLE s, DESCRIPTOR(ts),
    INTERVAL '1' SECOND)) [AS alias]` (`compiler/window_tvf.py` reads it,
    `compiler/window_syntax.py` turns it into a WindowClause).

    this: the function's name, upper case; expressions: its WindowArgument list;
    alias: the exp.TableAlias after it, or None.
    """

    arg_types = {"this": True, "expressions": True, "alias": False}

    @property
    def function(self) -> str:
        return self.args["this"]


class WindowArgument(exp.Expression):
    """One argument of a WindowTableFunction: `this` is an exp.Table (`TABLE s`, its
    `PARTITION BY` columns in `partition`), a Descriptor, or a Duration; `name` is the
    parameter it names (`SIZE => ...`, upper case), else None. meta["text"]: as written."""

    arg_types = {"this": True, "name": False, "partition": False}


class Descriptor(exp.Expression):
    """`DESCRIPTOR(column)`: this is the exp.Column."""

    arg_types = {"this": True}


class Duration(exp.Expression):
    """A duration read by `durations.read_duration`: this is its microseconds."""

    arg_types = {"this": True}

    @property
    def microseconds(self) -> int:
        return int(self.args["this"])
