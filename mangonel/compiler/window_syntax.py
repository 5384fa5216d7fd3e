"""Spark's and Flink's window syntax, turned into the CQL window clause before binding.

    Spark:  SELECT window.start, window.end, k, SUM(v) FROM s
            GROUP BY window(ts, '1 second', '10 milliseconds'), k
    Flink:  SELECT window_start, window_end, k, SUM(v)
            FROM TABLE(HOP(TABLE s, DESCRIPTOR(ts), INTERVAL '10' MILLISECOND, INTERVAL '1' SECOND))
            GROUP BY window_start, window_end, k

`rewrite_window_syntax` returns the query as the CQL clause would have written it
(`FROM s [RANGE 1 SECOND SLIDE 10 MILLISECONDS]`, `window.start` -> `window_start`, the
window items dropped from GROUP BY), so every form binds and plans through the one path of
`bind.py` and gives the CQL form's plan. What only these forms can get wrong (their
arguments, a window() outside GROUP BY, window columns without a window) is checked here,
each error at its construct. Neither form names a watermark: the stream's declared one
applies (`create_stream(..., watermark=...)`).

A windowing function is a row of `window_tvf.WINDOW_TABLE_FUNCTIONS` (its parameters) and a
builder in `WINDOW_BUILDERS` (its arguments -> the clause); Spark's group-by functions are
`GROUP_BY_WINDOW_FUNCTIONS`. Session windows plug in as one more row of each.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from mangonel.catalog.catalog import Catalog, Stream
from mangonel.compiler.durations import format_duration, parse_duration
from mangonel.compiler.nodes import (
    Descriptor,
    Duration,
    WindowArgument,
    WindowClause,
    WindowStruct,
    WindowTableFunction,
)
from mangonel.compiler.parse import display_sql, position_of
from mangonel.compiler.typing import AGGREGATE_FUNCTIONS
from mangonel.compiler.window_tvf import TVF_HINT, WINDOW_TABLE_FUNCTIONS
from mangonel.errors import SqlError

SPARK_HINT = (
    "Spark's form: GROUP BY window(<event-time column>, '<size>'[, '<slide>']), e.g. "
    "window(ts, '1 second', '10 milliseconds'); select window.start and window.end"
)
FLINK_GROUP_HINT = (
    "Flink's window aggregation groups by both bounds: GROUP BY window_start, window_end[, keys]"
)
_SPARK_FIELDS = {"start": "window_start", "end": "window_end"}


def _error(message: str, node: exp.Expression | None, hint: str, construct: str | None = None):  # noqa: ANN202
    position = position_of(node) if node is not None else None
    line, column = position if position else (None, None)
    if construct is None and node is not None:
        construct = node.meta.get("text") or display_sql(node)
    return SqlError(message, line=line, column=column, construct=construct, hint=hint)


def _part(node: exp.Expression) -> tuple[int, int, str] | None:
    """(line, column, text) of a clause part (what the binder's clause errors point at)."""
    position = position_of(node)
    if position is None:
        return None
    return position[0], position[1], node.meta.get("text") or display_sql(node)


def _clause(
    table: exp.Table,
    kind: str,
    size: tuple[int, exp.Expression],
    slide: tuple[int, exp.Expression] | None,
) -> WindowClause:
    """The CQL clause of a window: sizes in microseconds and the nodes they were read from
    (their positions become the clause's parts)."""
    clause = WindowClause(
        this=table, kind=kind, size=size[0], slide=None if slide is None else slide[0]
    )
    parts = {"size": _part(size[1])}
    if slide is not None:
        parts["slide"] = _part(slide[1])
    clause.meta["parts"] = {name: part for name, part in parts.items() if part is not None}
    return clause


def _check_event_time(column: exp.Expression, stream: Stream | None, form: str, hint: str) -> None:
    if not isinstance(column, exp.Column) or not isinstance(column.this, exp.Identifier):
        raise _error(f"{form} takes the stream's event-time column", column, hint)
    if stream is not None and column.name.lower() != stream.event_time.lower():
        raise _error(
            f"{form} windows the event-time column {stream.event_time!r} of {stream.name!r}, "
            f"not {column.name!r}",
            column,
            f"windows are over the stream's event time (CREATE STREAM .. WITH (event_time = "
            f"...)): use {stream.event_time}",
        )


def _check_positive(value: int, node: exp.Expression, what: str, hint: str) -> None:
    if value <= 0:
        raise _error(f"{what} must be positive, got {format_duration(value)}", node, hint)


def _group_by_window_calls(query: exp.Select) -> list[exp.Anonymous]:
    group = query.args.get("group")
    return [
        item
        for item in (group.expressions if group is not None else [])
        if isinstance(item, exp.Anonymous) and item.name.upper() in GROUP_BY_WINDOW_FUNCTIONS
    ]


def rewrite_window_syntax(query: exp.Expression, catalog: Catalog) -> exp.Expression:
    """`query` with a Spark or Flink window written as the CQL clause (a rewritten copy;
    `query` itself when it uses neither)."""
    if not isinstance(query, exp.Select) or query.args.get("from_") is None:
        return query
    source = query.args["from_"].this
    calls = _group_by_window_calls(query)
    if query.args.get("joins"):
        if calls:
            raise _error(
                "Spark's window syntax over joins is not supported yet",
                calls[0],
                "give each stream of the join the window clause: FROM a [RANGE 1 SECOND] AS l "
                "JOIN b [RANGE 1 SECOND] AS r ON ..., or write Flink's window join "
                '(docs/sql.md, "Joins")',
            )
        # Flink's window join: the join of two window table functions (window_join_syntax.py)
        from mangonel.compiler.window_join_syntax import rewrite_flink_window_join

        return rewrite_flink_window_join(query, catalog)
    if isinstance(source, WindowTableFunction):
        query = query.copy()
        return _FlinkWindow(query.args["from_"].this, catalog).rewrite(query)
    if calls:
        query = query.copy()
        return _SparkWindow(query, _group_by_window_calls(query), catalog).rewrite()
    _refuse_window_references(query)
    return query


def _window_references(query: exp.Select) -> list[exp.Expression]:
    """window.<field>, window_time(..), a bare `window` column and window() calls outside
    GROUP BY, in the query's SELECT, WHERE and HAVING."""
    found = []
    for arg in ("expressions", "where", "having"):
        value = query.args.get(arg)
        for part in value if isinstance(value, list) else [value] if value is not None else []:
            for node in part.walk():
                in_window_time = (
                    isinstance(node.parent, exp.Anonymous)
                    and node.parent.name.lower() == "window_time"
                )
                if isinstance(node, exp.Column) and in_window_time:
                    continue  # window_time(window) is one reference
                if isinstance(node, exp.Column) and (
                    node.table.lower() == "window"
                    or (not node.table and node.name.lower() == "window")
                ):
                    found.append(node)
                elif isinstance(node, exp.Anonymous) and (
                    node.name.upper() in GROUP_BY_WINDOW_FUNCTIONS
                    or node.name.lower() == "window_time"
                ):
                    found.append(node)
    return found


def _refuse_window_references(query: exp.Select) -> None:
    for node in _window_references(query):
        if isinstance(node, exp.Anonymous) and node.name.upper() in GROUP_BY_WINDOW_FUNCTIONS:
            raise _error(
                f"{node.name}(...) defines the window: it belongs in GROUP BY",
                node,
                SPARK_HINT,
            )
        if isinstance(node, exp.Anonymous):  # window_time(...)
            raise _error("window_time(...) needs a window", node, SPARK_HINT)
        source = query.args["from_"].this
        if isinstance(source, WindowClause):
            hint = "with the window clause, select window_start and window_end"
        else:
            hint = SPARK_HINT
        raise _error(f"{display_sql(node)} needs a window: the query has none", node, hint)


# -- Spark: GROUP BY window(ts, size[, slide[, start]]) ----------------------------------


def _spark_duration(node: exp.Expression, what: str) -> int:
    """A Spark interval argument: a string ('1 second', '10 milliseconds') or an interval
    literal (INTERVAL 1 SECOND, INTERVAL '1' SECOND)."""
    if isinstance(node, exp.Literal) and node.is_string:
        text = node.this
    elif isinstance(node, exp.Interval) and isinstance(node.this, exp.Literal):
        unit = node.args.get("unit")
        text = f"{node.this.this} {unit.name}" if unit is not None else node.this.this
    else:
        raise _error(
            f"window()'s {what} is an interval string, e.g. '1 second'",
            node,
            SPARK_HINT,
        )
    try:
        return parse_duration(text)
    except SqlError as error:
        raise _error(
            f"window()'s {what} {display_sql(node)} is not a duration: {error.message}",
            node,
            error.hint or SPARK_HINT,
        ) from None


class _SparkWindow:
    def __init__(self, query: exp.Select, calls: list[exp.Anonymous], catalog: Catalog) -> None:
        self.query = query
        self.calls = calls
        self.catalog = catalog

    def rewrite(self) -> exp.Select:
        query = self.query
        call = self.calls[0]
        if len(self.calls) > 1:
            raise _error("GROUP BY has two window() calls", self.calls[1], SPARK_HINT)
        source = query.args["from_"].this
        if isinstance(source, WindowClause):
            raise _error(
                "GROUP BY window(...) and a window clause on the stream: one window per query",
                call,
                "drop the window clause [RANGE ..] or the window() call",
            )
        table = source if isinstance(source, exp.Table) else None
        stream = self.catalog.stream(table.name) if table is not None else None
        clause = GROUP_BY_WINDOW_FUNCTIONS[call.name.upper()](call, stream, table)
        query.args["from_"].set("this", clause)
        group = query.args["group"]
        remaining = [item for item in group.expressions if item is not call]
        if remaining:
            group.set("expressions", remaining)
        else:
            query.set("group", None)
        self._rewrite_references(query)
        return query

    def _rewrite_references(self, query: exp.Select) -> None:
        for node in _window_references(query):
            if isinstance(node, exp.Anonymous):
                if node.name.lower() == "window_time":
                    self._window_time(node)
                    continue
                raise _error(f"{node.name}(...) belongs in GROUP BY", node, SPARK_HINT)
            if not node.table:  # the bare `window` struct: an output column as it is
                output_window_struct(node, "window")
                continue
            bound = _SPARK_FIELDS.get(node.name.lower())
            if bound is None:
                raise _error(
                    f"the window has the fields start and end, not {node.name!r}",
                    node,
                    "select window.start and window.end",
                )
            replacement = exp.Column(this=exp.Identifier(this=bound, quoted=False))
            replacement.meta.update(node.meta)
            replacement.this.meta.update(node.this.meta)
            parent = node.parent
            if isinstance(parent, exp.Select) and node.arg_key == "expressions":
                # Spark names the output after the field (`start`, `end`)
                replacement = exp.Alias(
                    this=replacement, alias=exp.Identifier(this=node.name, quoted=False)
                )
            node.replace(replacement)

    def _window_time(self, call: exp.Anonymous) -> None:
        """`window_time(window)`: the window_time pseudo-column (window.end - 1 microsecond)."""
        argument = call.expressions[0] if len(call.expressions) == 1 else None
        if not (
            isinstance(argument, exp.Column)
            and not argument.table
            and argument.name.lower() == "window"
        ):
            raise _error(
                "window_time takes the window column: window_time(window)", call, SPARK_HINT
            )
        replacement = exp.Column(this=exp.Identifier(this="window_time", quoted=False))
        replacement.meta.update(call.meta)
        replacement.this.meta.update(call.meta)
        call.replace(replacement)


def output_window_struct(node: exp.Column, name: str) -> None:
    """Replace Spark's bare `window` / `session_window` column by the window struct
    (`nodes.WindowStruct`, STRUCT<start, end>): only as a whole SELECT item, named `name`
    unless aliased (Spark's name); anywhere else an error (structs are output as they
    are)."""
    parent = node.parent
    struct = WindowStruct()
    struct.meta.update(node.meta)
    if isinstance(parent, exp.Select) and node.arg_key == "expressions":
        node.replace(exp.Alias(this=struct, alias=exp.Identifier(this=name, quoted=False)))
        return
    if isinstance(parent, exp.Alias) and isinstance(parent.parent, exp.Select):
        node.replace(struct)
        return
    raise _error(
        f"the {name} struct is output as a column as it is, not computed with",
        node,
        f"SELECT {name}, ... outputs STRUCT<start: TIMESTAMP, end: TIMESTAMP>; compute with "
        f"its fields: {name}.start, {name}.end",
    )


def _spark_window(call: exp.Anonymous, stream: Stream | None, table: exp.Table | None):  # noqa: ANN202
    """window(timeColumn, windowDuration[, slideDuration[, startTime]]) -> the clause."""
    arguments = call.expressions
    if not 2 <= len(arguments) <= 4:
        raise _error(
            f"window() takes 2 to 4 arguments (time column, window duration, slide duration, "
            f"start time), got {len(arguments)}",
            call,
            SPARK_HINT,
        )
    if table is None:
        raise _error("GROUP BY window(...) needs FROM <stream>", call, SPARK_HINT)
    _check_event_time(arguments[0], stream, "window()", SPARK_HINT)
    size = _spark_duration(arguments[1], "window duration")
    _check_positive(size, arguments[1], "window()'s window duration", SPARK_HINT)
    slide = None
    if len(arguments) >= 3:
        slide = _spark_duration(arguments[2], "slide duration")
        _check_positive(slide, arguments[2], "window()'s slide duration", SPARK_HINT)
        if slide > size:
            raise _error(
                f"window()'s slide duration {format_duration(slide)} is longer than its window "
                f"duration {format_duration(size)}: windows would skip rows",
                arguments[2],
                "use a slide at most the window duration (omit it for tumbling windows)",
            )
    if len(arguments) == 4 and _spark_duration(arguments[3], "start time") != 0:
        raise _error(
            "window()'s startTime (windows offset from the epoch) is not supported",
            arguments[3],
            "mangonel's windows start at whole multiples of the slide since the epoch; drop "
            "the start time (or give '0 seconds')",
        )
    return _clause(
        table,
        "RANGE",
        (size, arguments[1]),
        None if slide is None else (slide, arguments[2]),
    )


# Spark's group-by window functions: name -> (call, stream, table) -> the clause
GROUP_BY_WINDOW_FUNCTIONS: dict[
    str, Callable[[exp.Anonymous, Stream | None, exp.Table | None], WindowClause]
] = {"WINDOW": _spark_window}


# -- Flink: FROM TABLE(TUMBLE | HOP | CUMULATE (...)) GROUP BY window_start, window_end ----


@dataclass
class FlinkArguments:
    """The arguments of a window table function by parameter name (upper case); `node`
    is the function (errors about a missing argument point at it)."""

    node: WindowTableFunction
    values: dict[str, WindowArgument]

    def table(self) -> exp.Table:
        argument = self.values.get("DATA")
        if argument is None or not isinstance(argument.this, exp.Table):
            raise _error(
                f"{self.node.function} needs the stream: TABLE <stream> as its first argument",
                argument or self.node,
                TVF_HINT,
            )
        return argument.this

    def duration(self, name: str, what: str) -> tuple[int, exp.Expression]:
        argument = self.values.get(name)
        if argument is None:
            raise _error(f"{self.node.function} needs its {what} ({name})", self.node, TVF_HINT)
        if not isinstance(argument.this, Duration):
            raise _error(
                f"{self.node.function}'s {name} is a duration, e.g. INTERVAL '1' SECOND",
                argument,
                TVF_HINT,
            )
        value = argument.this.microseconds
        _check_positive(value, argument, f"{self.node.function}'s {name}", TVF_HINT)
        return value, argument


class _FlinkWindow:
    def __init__(self, source: WindowTableFunction, catalog: Catalog) -> None:
        self.source = source
        self.catalog = catalog

    def arguments(self) -> FlinkArguments:
        function = self.source.function
        parameters = WINDOW_TABLE_FUNCTIONS[function]
        values: dict[str, WindowArgument] = {}
        named = False
        for position, argument in enumerate(self.source.expressions):
            name = argument.args.get("name")
            if name is None:
                if named:
                    raise _error(
                        "a positional argument after a named one",
                        argument,
                        f"name every argument after the first named one: "
                        f"{', '.join(p + ' => ..' for p in parameters)}",
                    )
                if position >= len(parameters):
                    raise _error(
                        f"{function} takes at most {len(parameters)} arguments "
                        f"({', '.join(parameters)})",
                        argument,
                        TVF_HINT,
                    )
                name = parameters[position]
            else:
                named = True
                if name not in parameters:
                    raise _error(
                        f"{function} has no parameter {name}",
                        argument,
                        f"its parameters: {', '.join(parameters)}",
                    )
            if name in values:
                raise _error(f"{function}'s {name} is given twice", argument, TVF_HINT)
            values[name] = argument
        arguments = FlinkArguments(self.source, values)
        table = arguments.table()
        partition = values["DATA"].args.get("partition")
        if partition and function in _UNPARTITIONED:
            raise _error(
                f"{function} takes no PARTITION BY: its windows are the same for every key",
                partition[0],
                "drop PARTITION BY and GROUP BY the keys: GROUP BY window_start, window_end, k",
            )
        stream = self.catalog.stream(table.name)
        timecol = values.get("TIMECOL")
        if timecol is None or not isinstance(timecol.this, Descriptor):
            raise _error(
                f"{function} needs the time column: DESCRIPTOR(<event-time column>)",
                timecol or self.source,
                TVF_HINT,
            )
        _check_event_time(timecol.this.this, stream, function, TVF_HINT)
        offset = values.get("OFFSET")
        if offset is not None and (
            not isinstance(offset.this, Duration) or offset.this.microseconds != 0
        ):
            raise _error(
                f"{function}'s OFFSET is not supported",
                offset,
                "mangonel's windows start at whole multiples of the slide since the epoch; "
                "drop OFFSET",
            )
        return arguments

    def clause(self) -> WindowClause:
        """The CQL clause of the function, on its stream with the function's alias: the one
        place a window table function becomes a window (joins too, window_join_syntax.py)."""
        arguments = self.arguments()
        table = arguments.table().copy()
        alias = self.source.args.get("alias")
        if alias is not None:
            table.set("alias", alias)
        return WINDOW_BUILDERS[self.source.function](arguments, table)

    def rewrite(self, query: exp.Select) -> exp.Select:
        clause = self.clause()
        if clause.args["kind"] == "CUMULATE":
            self._refuse_holistic(query)
        query.args["from_"].set("this", clause)
        drop_window_bounds_from_group(query, self.source)
        return query

    def _refuse_holistic(self, query: exp.Select) -> None:
        """CUMULATE windows run the incremental aggregates only (the holistic drivers keep
        values per pane for the sliding windows' geometry)."""
        for arg in ("expressions", "having"):
            value = query.args.get(arg)
            for part in value if isinstance(value, list) else [value] if value else []:
                for node in part.walk():
                    function = AGGREGATE_FUNCTIONS.get(type(node))
                    if (
                        isinstance(node, exp.WithinGroup)
                        or (isinstance(node, exp.Count) and isinstance(node.this, exp.Distinct))
                        or (function is not None and function.definition.holistic is not None)
                        or (
                            isinstance(node, exp.Anonymous)
                            and node.name.lower() in self.catalog.window_functions
                        )
                    ):
                        raise _error(
                            "holistic, approximate and Python window functions do not run over "
                            "CUMULATE windows yet",
                            node,
                            "use the incremental aggregates (COUNT, SUM, MIN, MAX, AVG, VAR_*, "
                            "STDDEV_*, BOOL_*), or HOP/TUMBLE windows",
                        )


def flink_window_clause(source: WindowTableFunction, catalog: Catalog) -> WindowClause:
    """The CQL clause a window table function stands for (its arguments checked)."""
    return _FlinkWindow(source, catalog).clause()


def drop_window_bounds_from_group(query: exp.Select, source: exp.Expression) -> None:
    """Drop `window_start` and `window_end` (both required, as Flink requires) from GROUP BY:
    the window clause groups by the window. `source` is what a GROUP BY-less error points at."""
    group = query.args.get("group")
    items = group.expressions if group is not None else []
    bounds = [
        item
        for item in items
        if isinstance(item, exp.Column) and item.name.lower() in ("window_start", "window_end")
    ]
    missing = {"window_start", "window_end"} - {item.name.lower() for item in bounds}
    if missing:
        raise _error(
            f"GROUP BY misses {' and '.join(sorted(missing))}: a window table function's "
            "rows are aggregated per window",
            group if group is not None else source,
            FLINK_GROUP_HINT,
        )
    remaining = [item for item in items if all(item is not b for b in bounds)]
    if remaining:
        group.set("expressions", remaining)
    else:
        query.set("group", None)


def _tumble(arguments: FlinkArguments, table: exp.Table) -> WindowClause:
    return _clause(table, "RANGE", arguments.duration("SIZE", "window size"), None)


def _hop(arguments: FlinkArguments, table: exp.Table) -> WindowClause:
    slide = arguments.duration("SLIDE", "slide")
    size = arguments.duration("SIZE", "window size")
    if size[0] % slide[0]:
        raise _error(
            f"HOP's SIZE {format_duration(size[0])} is not a whole multiple of its SLIDE "
            f"{format_duration(slide[0])} (Flink requires it)",
            size[1],
            "HOP(TABLE s, DESCRIPTOR(ts), <slide>, <size>): the slide comes first; or the "
            "window clause [RANGE <size> SLIDE <slide>], which takes any slide <= size",
        )
    return _clause(table, "RANGE", size, slide)


def _cumulate(arguments: FlinkArguments, table: exp.Table) -> WindowClause:
    step = arguments.duration("STEP", "step")
    size = arguments.duration("SIZE", "max window size")
    if size[0] % step[0]:
        raise _error(
            f"CUMULATE's max SIZE {format_duration(size[0])} is not a whole multiple of its "
            f"STEP {format_duration(step[0])}",
            size[1],
            "CUMULATE(TABLE s, DESCRIPTOR(ts), <step>, <max size>): the step comes first and "
            "divides the max size",
        )
    return _clause(table, "CUMULATE", size, step)


# name -> (its arguments, the stream's table with the query's alias) -> the clause; the
# parameters of each are `window_tvf.WINDOW_TABLE_FUNCTIONS`
WINDOW_BUILDERS: dict[str, Callable[[FlinkArguments, exp.Table], WindowClause]] = {
    "TUMBLE": _tumble,
    "HOP": _hop,
    "CUMULATE": _cumulate,
}
# the functions whose windows do not depend on the key (PARTITION BY is SESSION's)
_UNPARTITIONED = frozenset({"TUMBLE", "HOP", "CUMULATE"})
