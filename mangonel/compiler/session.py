"""Session windows in the compiler: the window spec of `[SESSION GAP <duration>]`, Spark's
`GROUP BY session_window(ts, '<gap>')` read as that clause, and the planning checks.

The CQL clause is read by `parse.py` (`WindowClause(kind="SESSION", size=gap)`); Spark's form
parses as a plain SELECT whose GROUP BY holds the call `session_window(ts, '30 seconds')`.
`session_forms` rewrites that SELECT into the CQL shape before binding: the call leaves
GROUP BY, the stream gets the window clause, and `session_window.start` / `.end` become the
window bounds (named `start` / `end` when not aliased, as Spark names the struct's fields).
Flink's `FROM TABLE(SESSION(TABLE s PARTITION BY k, DESCRIPTOR(ts), INTERVAL '30' SECOND))`
is read by the parser as the clause (`session_tvf.py`); here its DESCRIPTOR must be the
event time, GROUP BY must hold `window_start` and `window_end` (taken out: they are the
window's bounds) and its other keys must be the PARTITION BY columns, since sessions are
formed per GROUP BY key. So every form binds, plans and EXPLAINs alike (apart from the
source text).

Semantics: docs/semantics.md, "Session windows".
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from mangonel.catalog.catalog import Catalog
from mangonel.compiler.durations import DurationError, format_duration, parse_duration
from mangonel.compiler.logical import WindowKind, WindowSpec
from mangonel.compiler.nodes import WindowClause
from mangonel.compiler.parse import copy_position, display_sql, position_of
from mangonel.compiler.window_syntax import output_window_struct
from mangonel.errors import SqlError

SESSION_FUNCTION = "SESSION_WINDOW"
SESSION_HINT = (
    "a session window is [SESSION GAP <duration> [WATERMARK <duration>]] after the stream, "
    "or Spark's GROUP BY session_window(<event time>, '<gap>'), e.g. [SESSION GAP 30 SECONDS]"
)


def _error(message: str, node: exp.Expression, hint: str = SESSION_HINT) -> SqlError:
    position = position_of(node)
    line, column = position if position else (None, None)
    return SqlError(message, line=line, column=column, construct=display_sql(node), hint=hint)


def window_spec(
    size: int,
    slide: int | None,
    watermark: int | None,
    stream_delay: int,
    fail: Callable[[str, str, str], SqlError],
) -> WindowSpec:
    """The spec of `[SESSION GAP size [WATERMARK watermark]]`; `fail(part, message, hint)`
    builds the binder's positioned error."""
    if slide is not None:
        raise fail("slide", "a session window has no SLIDE", SESSION_HINT)
    if size <= 0:
        raise fail(
            "size", f"SESSION GAP must be positive, got {format_duration(size)}", SESSION_HINT
        )
    if watermark is not None and watermark < 0:
        raise fail(
            "watermark",
            f"WATERMARK must not be negative, got {format_duration(watermark)}",
            "WATERMARK is the out-of-orderness bound, e.g. WATERMARK 500 MILLISECONDS",
        )
    delay = watermark if watermark is not None else stream_delay
    return WindowSpec(WindowKind.SESSION, size, size, delay)


def _is_session_call(node: exp.Expression) -> bool:
    return isinstance(node, exp.Anonymous) and node.name.upper() == SESSION_FUNCTION


def _is_session_field(node: exp.Expression) -> bool:
    return isinstance(node, exp.Column) and node.table.upper() == SESSION_FUNCTION


def session_forms(query: exp.Expression, catalog: Catalog) -> exp.Expression:
    """`query` with the peers' session windows in the CQL shape: Spark's `GROUP BY
    session_window(ts, 'gap')` turned into the window clause, Flink's `TABLE(SESSION(...))`
    (already a clause, `session_tvf.py`) checked and its window bounds taken out of GROUP BY
    (see the module docstring); any other query unchanged."""
    if not isinstance(query, exp.Select):
        return query
    source = query.args["from_"].this if query.args.get("from_") else None
    if isinstance(source, WindowClause) and "session_tvf" in source.meta:
        return _flink_form(query, source, catalog)
    group = query.args.get("group")
    calls = [item for item in (group.expressions if group else []) if _is_session_call(item)]
    if not calls:
        for node in query.walk():
            if _is_session_call(node) or _is_session_field(node):
                raise _error(
                    "session_window(...) goes in GROUP BY",
                    node,
                    "GROUP BY session_window(ts, '30 seconds'), k and select "
                    "session_window.start, session_window.end",
                )
        return query
    call = calls[0]
    if len(calls) > 1:
        raise _error("GROUP BY holds two session windows", calls[1])
    if isinstance(source, WindowClause):
        raise _error(
            "a query has one window: session_window(...) and a window clause on the stream",
            call,
            "drop the window clause, or GROUP BY the keys alone",
        )
    if not isinstance(source, exp.Table):
        return query  # the binder says what is wrong with the source
    gap = _gap(call, source, catalog)
    query = query.copy()
    group = query.args["group"]
    group.set("expressions", [i for i in group.expressions if not _is_session_call(i)])
    if not group.expressions:
        query.set("group", None)
    table = query.args["from_"].this
    clause = WindowClause(this=table.copy(), kind="SESSION", size=gap)
    copy_position(clause, call)
    query.args["from_"].set("this", clause)
    bare = [
        node
        for node in query.walk()
        if isinstance(node, exp.Column) and not node.table and node.name.upper() == SESSION_FUNCTION
    ]
    for node in bare:  # the struct of the session's bounds, output as it is
        output_window_struct(node, "session_window")
    projections = []
    for projection in query.expressions:
        if _is_session_field(projection):
            bound = projection.name.lower()
            projection = exp.alias_(_bound(projection), bound)
        projections.append(projection)
    query.set("expressions", projections)
    return query.transform(lambda node: _bound(node) if _is_session_field(node) else node)


def _bound(column: exp.Column) -> exp.Expression:
    """`session_window.start` / `.end` as the window bound column."""
    field = column.name.lower()
    if field not in ("start", "end"):
        raise _error(
            f"session_window has no field {column.name!r}",
            column,
            "select session_window.start and session_window.end",
        )
    return copy_position(exp.column(f"window_{field}"), column)


def _gap(call: exp.Anonymous, table: exp.Table, catalog: Catalog) -> int:
    """The gap of `session_window(ts, 'gap')`, checking ts is the stream's event time."""
    arguments = call.expressions
    if len(arguments) != 2:
        raise _error(
            f"session_window takes the event time and a gap, got {len(arguments)} arguments",
            call,
        )
    time_column, gap = arguments
    stream = catalog.stream(table.name)
    if stream is not None and (
        not isinstance(time_column, exp.Column)
        or time_column.name.lower() != stream.event_time.lower()
    ):
        raise _error(
            f"session_window runs over the stream's event time {stream.event_time!r}",
            time_column,
            f"GROUP BY session_window({stream.event_time}, '30 seconds'); the watermark is "
            "the stream's",
        )
    if not (isinstance(gap, exp.Literal) and gap.is_string):
        raise _error(
            "the gap of session_window is a duration string, e.g. '30 seconds'",
            gap,
            "a per-row gap expression is not supported",
        )
    try:
        return parse_duration(gap.this)
    except (DurationError, SqlError, ValueError) as error:
        message = getattr(error, "message", str(error))
        raise _error(f"malformed session gap {gap.this!r}: {message}", gap) from None


def _position_error(message: str, position: tuple[int, int], construct: str, hint: str) -> SqlError:
    return SqlError(message, line=position[0], column=position[1], construct=construct, hint=hint)


def _is_bound(node: exp.Expression) -> bool:
    """A GROUP BY item naming a window bound (`window_start`, `window_end`)."""
    return isinstance(node, exp.Column) and node.name.lower() in ("window_start", "window_end")


def _flink_form(query: exp.Select, clause: WindowClause, catalog: Catalog) -> exp.Select:
    """Flink's SESSION table function: check it against the stream and GROUP BY, and keep
    GROUP BY's keys only (the window bounds are the clause's)."""
    tvf = clause.meta["session_tvf"]
    hint = (
        "GROUP BY window_start, window_end and the PARTITION BY columns: "
        "sessions are formed per key"
    )
    stream = catalog.stream(clause.this.name)
    descriptor, position = tvf["descriptor"]
    if stream is not None and descriptor.lower() != stream.event_time.lower():
        raise _position_error(
            f"DESCRIPTOR({descriptor}) must name the stream's event time {stream.event_time!r}",
            position,
            f"DESCRIPTOR({descriptor})",
            f"DESCRIPTOR({stream.event_time}); the watermark is the stream's",
        )
    group = query.args.get("group")
    items = list(group.expressions) if group else []
    bounds = [item for item in items if _is_bound(item)]
    if {b.name.lower() for b in bounds} != {"window_start", "window_end"}:
        raise _error("a SESSION window query groups by window_start and window_end", clause, hint)
    keys = [item for item in items if item not in bounds]
    partition = {name.lower() for name, _ in tvf["partition"]}
    named = {item.name.lower() for item in keys if isinstance(item, exp.Column)}
    if named != partition or len(keys) != len(named):
        raise _error(
            "the GROUP BY keys of a SESSION window must be its PARTITION BY columns "
            f"({', '.join(n for n, _ in tvf['partition']) or 'none'})",
            keys[0] if keys else clause,
            hint,
        )
    query = query.copy()
    group = query.args["group"]
    group.set("expressions", [item for item in group.expressions if not _is_bound(item)])
    if not query.args["group"].expressions:
        query.set("group", None)
    return query
