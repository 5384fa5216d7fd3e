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


class WindowBound(exp.Expression):
    """The pseudo-columns `window_start` (this="start") and `window_end` (this="end")."""

    arg_types = {"this": True}

    @property
    def bound(self) -> str:
        return self.args["this"]


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
