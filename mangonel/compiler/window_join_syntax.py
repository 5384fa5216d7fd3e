"""Flink's window join, rewritten to the CQL join before binding:

    FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' SECOND)) AS l
    JOIN TABLE(TUMBLE(TABLE views, DESCRIPTOR(ts), INTERVAL '1' SECOND)) AS r
      ON l.ad_id = r.ad_id AND l.window_start = r.window_start AND l.window_end = r.window_end

(each side also as `(SELECT * FROM TABLE(..)) l`, Flink's documented spelling) becomes
`FROM clicks [RANGE 1 SECOND] AS l JOIN views [RANGE 1 SECOND] AS r ON l.ad_id = r.ad_id`:

- each function becomes the clause `window_syntax.flink_window_clause` gives, the one place
  a window table function becomes a window (so a side checks its arguments as one stream's
  function does);
- the two bound equalities leave ON: the clause already pairs the rows of one window;
- `l.window_start`, `r.window_end`, `l.window_time` become the join window's (unqualified)
  bounds, which are both sides' (they are equal);
- with aggregation, GROUP BY must hold both bounds (as for one stream) and drops them.

The join binder (bind_join.py) then binds the CQL join: the same plan and EXPLAIN. Flink's
rules, each a positioned error: both sides are window table functions (not one a clause, a
stream without a window or a table), the same function with the same sizes, TUMBLE or HOP
(the join runs windows of one size, `[k*slide, k*slide + size)`: CUMULATE's grow within
their period and SESSION's are per key), and ON equates both bounds across the two sides
and reads them nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from mangonel.catalog.catalog import Catalog
from mangonel.compiler.nodes import WindowClause, WindowTableFunction
from mangonel.compiler.parse import conjuncts, display_sql, format_duration
from mangonel.compiler.window_syntax import (
    _error,
    drop_window_bounds_from_group,
    flink_window_clause,
)

FLINK_JOIN_HINT = (
    "Flink's window join: FROM TABLE(TUMBLE(TABLE a, DESCRIPTOR(ts), INTERVAL '1' SECOND)) AS l "
    "JOIN TABLE(TUMBLE(TABLE b, DESCRIPTOR(ts), INTERVAL '1' SECOND)) AS r ON l.k = r.k AND "
    "l.window_start = r.window_start AND l.window_end = r.window_end"
)
_EQUATED_BOUNDS = ("window_start", "window_end")
_BOUND_COLUMNS = frozenset({"window_start", "window_end", "window_time"})
_JOINABLE_FUNCTIONS = frozenset({"TUMBLE", "HOP"})


@dataclass
class _FlinkSide:
    """One input written as a window table function: the function (or a SESSION function,
    which the parser reads as a session clause), what errors point at, and the clause it
    becomes."""

    function: WindowTableFunction | WindowClause
    written: exp.Expression
    clause: WindowClause | None = None

    @property
    def alias(self) -> str:
        assert self.clause is not None
        table = self.clause.this
        return table.alias or table.name


def _is_session_function(node: exp.Expression) -> bool:
    return isinstance(node, WindowClause) and "session_tvf" in node.meta


def _function_of(source: exp.Expression) -> WindowTableFunction | WindowClause | None:
    """The window table function a join input is written as: the function itself, or the
    one of `(SELECT * FROM <function>) [AS] alias`; None for other inputs."""
    if isinstance(source, WindowTableFunction) or _is_session_function(source):
        return source
    if not isinstance(source, exp.Subquery) or not isinstance(source.this, exp.Select):
        return None
    inner = source.this
    extra = [
        arg for arg, value in inner.args.items() if value and arg not in ("expressions", "from_")
    ]
    star = len(inner.expressions) == 1 and isinstance(inner.expressions[0], exp.Star)
    inner_source = inner.args["from_"].this if inner.args.get("from_") else None
    if extra or not star or inner_source is None:
        return None  # any other subquery: the binder refuses subqueries
    return _function_of(inner_source)


def _describe(source: exp.Expression, catalog: Catalog) -> str:
    if isinstance(source, WindowClause):
        return f"{source.this.name!r} has a window clause"
    if isinstance(source, exp.Table) and catalog.table(source.name) is not None:
        return f"{source.name!r} is a static table"
    if isinstance(source, exp.Table):
        return f"{source.name!r} has no window"
    if isinstance(source, exp.Subquery):
        return "the other a subquery (only SELECT * FROM TABLE(<function>) reads as one)"
    return f"the other {type(source).__name__.upper()}"


def rewrite_flink_window_join(query: exp.Select, catalog: Catalog) -> exp.Select:
    """`query` (a join) with Flink's window-join form written as the CQL join (a rewritten
    copy); `query` itself when no input is a window table function."""
    if all(_function_of(source) is None for source in _sources(query)):
        return query
    query = query.copy()
    sources = _sources(query)
    sides: list[_FlinkSide] = []
    for source in sources:
        function = _function_of(source)
        if function is None:
            static = isinstance(source, exp.Table) and catalog.table(source.name) is not None
            raise _error(
                f"one input of the join is a window table function and {_describe(source, catalog)}"
                ": Flink's window join reads a window table function on both sides",
                source,
                "a static table joins a stream written with the window clause: FROM s "
                "[RANGE 1 MINUTE] AS l JOIN t AS x ON l.k = x.k"
                if static
                else FLINK_JOIN_HINT + "; or give both the window clause: FROM a "
                "[RANGE 1 SECOND] AS l JOIN b [RANGE 1 SECOND] AS r ON l.k = r.k",
            )
        if isinstance(source, exp.Subquery) and source.args.get("alias") is not None:
            function.set("alias", source.args["alias"])  # the input's name is the subquery's
        sides.append(_FlinkSide(function, source))
    for side, holder in zip(sides, _source_holders(query), strict=True):
        side.clause = _joinable_clause(side, catalog)
        holder.set("this", side.clause)
    _check_same_windows(sides)
    joins = query.args["joins"]
    if len(joins) != 1 or len(sides) != 2:
        return query  # the binder refuses more than two inputs
    left, right = sides
    join = joins[0]
    if join.args.get("on") is not None:
        join.set("on", _without_bound_equalities(join.args["on"], left, right))
    group = query.args.get("group")
    group_text = display_sql(group) if group is not None else None  # as written, qualified
    aggregating = group is not None or _has_aggregate_calls(query)
    _unqualify_bounds(query, sides, catalog, aggregating)
    if aggregating:
        drop_window_bounds_from_group(query, left.function)
        if query.args.get("group") is None and not _has_aggregate_calls(query):
            raise _error(
                "GROUP BY only the window bounds and no aggregate: the window join's rows "
                "would be the windows alone",
                group,
                "aggregate over the joined rows (COUNT(*) AS n, ...) or drop GROUP BY to "
                "output the joined rows",
                construct=group_text,
            )
    return query


def _sources(query: exp.Select) -> list[exp.Expression]:
    return [holder.this for holder in _source_holders(query)]


def _source_holders(query: exp.Select) -> list[exp.Expression]:
    """FROM and each JOIN: the nodes whose `this` is an input."""
    return [query.args["from_"], *query.args["joins"]]


def _joinable_clause(side: _FlinkSide, catalog: Catalog) -> WindowClause:
    function = side.function
    if isinstance(function, WindowClause):  # SESSION(..), read as a session clause
        raise _error(
            "session windows cannot be joined: SESSION's windows are each key's own and "
            "differ between the two streams, and the window join pairs the rows of one "
            "window of one size",
            side.written,
            "join over TUMBLE or HOP windows: " + FLINK_JOIN_HINT,
            construct=f"TABLE(SESSION(TABLE {function.this.name} ..))",
        )
    if function.function not in _JOINABLE_FUNCTIONS:
        raise _error(
            f"{function.function} windows cannot be joined: the window join runs windows of "
            "one size, [k*slide, k*slide + size), and CUMULATE's grow by a step within "
            "their period",
            function,
            "join over TUMBLE or HOP windows: " + FLINK_JOIN_HINT,
        )
    return flink_window_clause(function, catalog)


def _window_text(side: _FlinkSide) -> str:
    assert side.clause is not None and isinstance(side.function, WindowTableFunction)
    size, slide = side.clause.args["size"], side.clause.args.get("slide")
    sizes = (
        [format_duration(size)] if slide is None else [format_duration(s) for s in (slide, size)]
    )
    return f"{side.function.function}({', '.join(sizes)})"


def _check_same_windows(sides: list[_FlinkSide]) -> None:
    first = sides[0]
    assert first.clause is not None
    for other in sides[1:]:
        assert other.clause is not None and isinstance(other.function, WindowTableFunction)
        same = (first.function.function, first.clause.args["size"], first.clause.args.get("slide"))
        if (
            other.function.function,
            other.clause.args["size"],
            other.clause.args.get("slide"),
        ) != same:
            raise _error(
                f"the two sides have different windows: {_window_text(first)} and "
                f"{_window_text(other)}",
                other.function,
                "Flink's window join pairs rows of the same window: give both sides the same "
                f"function with the same sizes, e.g. {_window_text(first)}",
            )


def _bound_references(node: exp.Expression) -> list[exp.Column]:
    return [
        column
        for column in node.find_all(exp.Column)
        if column.name.lower() in _BOUND_COLUMNS and not column.args.get("db")
    ]


def _without_bound_equalities(
    condition: exp.Expression, left: _FlinkSide, right: _FlinkSide
) -> exp.Expression:
    """ON without `l.window_start = r.window_start AND l.window_end = r.window_end` (both
    required; bounds anywhere else in ON are an error)."""
    sides = {left.alias.lower(), right.alias.lower()}
    equated: set[str] = set()
    remaining: list[exp.Expression] = []
    example = (
        f"ON {left.alias}.k = {right.alias}.k AND {left.alias}.window_start = "
        f"{right.alias}.window_start AND {left.alias}.window_end = {right.alias}.window_end"
    )
    for conjunct in conjuncts(condition):
        references = _bound_references(conjunct)
        if not references:
            remaining.append(conjunct)
            continue
        a, b = (
            (conjunct.this, conjunct.expression) if isinstance(conjunct, exp.EQ) else (None, None)
        )
        if (
            isinstance(a, exp.Column)
            and isinstance(b, exp.Column)
            and a.name.lower() == b.name.lower()
            and a.name.lower() in _EQUATED_BOUNDS
            and {a.table.lower(), b.table.lower()} == sides
        ):
            equated.add(a.name.lower())
            continue
        raise _error(
            f"{references[0].sql()} in ON: Flink's window join only equates the window "
            "bounds of the two sides there",
            references[0],
            f"{example}; filter on window bounds with HAVING after aggregating",
        )
    missing = [bound for bound in _EQUATED_BOUNDS if bound not in equated]
    if missing:
        text = " AND ".join(f"{left.alias}.{b} = {right.alias}.{b}" for b in missing)
        raise _error(
            f"ON misses {text}: Flink's window join equates both window bounds of the two sides",
            condition,
            example,
        )
    if not remaining:
        raise _error(
            "a window join needs an equality of a key column of each side in ON, besides "
            "the window bounds",
            condition,
            example + " (INT, BIGINT or STRING keys)",
        )
    predicate = remaining[0]
    for part in remaining[1:]:
        predicate = exp.and_(predicate, part, copy=False)
    return predicate


def _unqualify_bounds(
    query: exp.Select, sides: list[_FlinkSide], catalog: Catalog, aggregating: bool
) -> None:
    """`l.window_start` -> the join window's `window_start`, where `l` is a side whose stream
    has no such column. In the rows of an outer join a side may be missing: there, as in
    Flink, its bounds are NULL (its event time is, and only there: a row without one has no
    window), so `COALESCE(l.window_start, r.window_start)` reads as Flink's does."""
    join = query.args["joins"][0]
    side_word = (join.args.get("side") or "").upper()
    may_miss = {
        sides[0].alias.lower(): side_word in ("RIGHT", "FULL"),
        sides[1].alias.lower(): side_word in ("LEFT", "FULL"),
    }
    renamed: dict[tuple[str, str], str | None] = {}
    for side in sides:
        assert side.clause is not None
        stream = catalog.stream(side.clause.this.name)
        own = {name.lower() for name in stream.schema.names()} if stream is not None else set()
        missing_test = None
        if may_miss[side.alias.lower()] and not aggregating and stream is not None:
            missing_test = stream.event_time
        for bound in _BOUND_COLUMNS - own:
            renamed[(side.alias.lower(), bound)] = missing_test
    for column in list(query.find_all(exp.Column)):
        key = (column.table.lower(), column.name.lower())
        if key not in renamed:
            continue
        bound = exp.Column(this=exp.Identifier(this=column.name, quoted=False))
        bound.meta.update(column.meta)
        bound.this.meta.update(column.this.meta)
        event_time = renamed[key]
        if event_time is None:
            column.replace(bound)
            continue
        present = exp.Not(
            this=exp.Is(this=exp.column(event_time, table=column.table), expression=exp.Null())
        )
        replacement: exp.Expression = exp.Case(ifs=[exp.If(this=present, true=bound)])
        if isinstance(column.parent, exp.Select) and column.arg_key == "expressions":
            # a bare `l.window_start` is output as `window_start`, as the bound itself is
            replacement = exp.Alias(
                this=replacement, alias=exp.Identifier(this=column.name, quoted=False)
            )
        replacement.meta.update(column.meta)
        column.replace(replacement)


def _has_aggregate_calls(query: exp.Select) -> bool:
    return any(
        isinstance(node, exp.AggFunc)
        for part in (*query.expressions, query.args.get("having"))
        if part is not None
        for node in part.walk()
    )
