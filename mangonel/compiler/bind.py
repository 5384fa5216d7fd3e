"""Semantic analysis: a parsed window query + the catalog -> the logical plan.

The one shape of a window query is

    Project(outputs) <- Filter(HAVING)? <- WindowAggregate(window, keys, aggregates)
                     <- Filter(WHERE)? <- StreamScan(stream, columns read)

Columns resolve case-insensitively to the schema's spelling (one quoted identifier, no
qualifier); in SELECT and HAVING each distinct aggregate call becomes `AggregateRef(i)` and
`window_start` / `window_end` become `WindowBound`. Everything the binder cannot accept is a
SqlError (CatalogError for unknown names) pointing at the construct, with a hint saying what
is supported instead; nothing is silently ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from mangonel.catalog.catalog import Catalog, Column, Schema, Stream
from mangonel.catalog.types import ArrayType, SqlType
from mangonel.compiler import logical as lg
from mangonel.compiler.logical import AggregateFunction, WindowSpec
from mangonel.compiler.nodes import AggregateRef, WindowBound, WindowClause
from mangonel.compiler.parse import (
    copy_position,
    display_sql,
    double_quote_hint,
    output_text,
    position_of,
)
from mangonel.compiler.session import session_forms
from mangonel.compiler.streams import stream_from_ddl as stream_from_ddl  # re-exported
from mangonel.compiler.timestamp_literals import utc_timestamp_literal
from mangonel.compiler.typing import (
    AGGREGATE_FUNCTION_NAMES,
    AGGREGATE_FUNCTIONS,
    ExpressionError,
    TypeEnv,
    aggregate_result_type,
    infer_type,
    timestamp_literal_value,
    unsupported_function,
)
from mangonel.errors import CatalogError, SqlError

AGGREGATES_HINT = (
    "supported aggregates: " + ", ".join(AGGREGATE_FUNCTION_NAMES) + ", COUNT(*), COUNT(DISTINCT x)"
)
WINDOW_HINT = "e.g. FROM trades [RANGE 1 SECOND SLIDE 10 MILLISECONDS] or FROM trades [ROWS 100]"
_BOUND_NAMES = {"window_start": "start", "window_end": "end", "window_time": "time"}
_KEY_TYPES = (SqlType.INT, SqlType.BIGINT, SqlType.STRING)


@dataclass(frozen=True)
class BoundQuery:
    """A bound window query. argument_types: aggregate position -> its argument's type
    (every aggregate but COUNT(*)). A join query's `stream` is its left stream and its
    `window` the one window of both sides (None: a stream joined with a table, no window)."""

    logical: lg.Project
    argument_types: dict[int, SqlType]
    stream: Stream
    window: WindowSpec | None

    @property
    def outputs(self) -> tuple[lg.OutputColumn, ...]:
        return self.logical.outputs


def bind(query: exp.Expression, catalog: Catalog) -> BoundQuery:
    """Resolve `query` (a parsed SELECT) against `catalog` into its logical plan."""
    # Spark's GROUP BY window(..) and Flink's TABLE(TUMBLE(..)) become the CQL clause
    from mangonel.compiler.window_syntax import rewrite_window_syntax

    query = rewrite_window_syntax(query, catalog)
    if isinstance(query, exp.Select) and query.args.get("joins"):
        # the join binder extends this module's binder
        from mangonel.compiler.bind_join import JoinBinder

        return JoinBinder(query, catalog).bind()
    # Spark's GROUP BY session_window(ts, 'gap') and Flink's TABLE(SESSION(...)) bind as
    # [SESSION GAP gap] (compiler/session.py)
    return _Binder(session_forms(query, catalog), catalog).bind()


# ---------------------------------------------------------------------------------------
# Errors


def _error(
    message: str,
    node: exp.Expression | None,
    hint: str | None = None,
    *,
    fallback: exp.Expression | None = None,
    construct: str | None = None,
    error_class: type[SqlError] = SqlError,
) -> SqlError:
    position = (position_of(node) if node is not None else None) or (
        position_of(fallback) if fallback is not None else None
    )
    line, column = position if position else (None, None)
    if construct is None and node is not None:
        construct = _shorten(display_sql(node))
    return error_class(message, line=line, column=column, construct=construct, hint=hint)


def _shorten(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _from_expression_error(
    error: ExpressionError, fallback: exp.Expression, name_aggregates: bool = False
) -> SqlError:
    """`error` as a positioned SqlError; `name_aggregates`: its hint also lists the
    aggregates (a function the query names is not supported: it may be meant as one)."""
    hint = error.hint
    if name_aggregates:
        hint = f"{hint}; {AGGREGATES_HINT}" if hint else AGGREGATES_HINT
    return _error(error.message, error.node, hint, fallback=fallback)


def _check_function(node: exp.Expression) -> None:
    error = unsupported_function(node)
    if error is not None:
        raise _from_expression_error(
            error,
            node,
            name_aggregates=isinstance(error.node, (exp.Anonymous, exp.Func))
            and not isinstance(error.node, (exp.AggFunc, exp.Cast)),
        )


def _utc_timestamp_literal(node: exp.Expression) -> exp.Expression | None:
    """A TIMESTAMP literal spelt with its UTC time and `Z` (None for any other node): the
    WHERE clause also runs as Spark SQL, whose session time zone need not be UTC."""
    try:
        microseconds = timestamp_literal_value(node)
    except ExpressionError as error:
        raise _from_expression_error(error, node) from None
    if microseconds is None:
        return None
    return copy_position(utc_timestamp_literal(microseconds), node)


def _infer(expr: exp.Expression, env: TypeEnv, original: exp.Expression) -> SqlType:
    try:
        return infer_type(expr, env)
    except ExpressionError as error:
        raise _from_expression_error(error, original) from None


# ---------------------------------------------------------------------------------------
# The binder


# Select arguments a window query has no meaning for, and what to say about each.
_UNSUPPORTED_CLAUSES: tuple[tuple[str, str, str], ...] = (
    (
        "with_",
        "WITH (common table expressions) is not supported",
        "write the window query directly: SELECT ... FROM <stream> [RANGE ..]",
    ),
    (
        "joins",
        "JOIN is not supported: a window query reads one stream",
        "query one stream: SELECT ... FROM <stream> [RANGE ..]",
    ),
    ("laterals", "LATERAL VIEW is not supported", "query one stream"),
    (
        "distinct",
        "SELECT DISTINCT is not supported",
        "a window query already returns one row per key and window: drop DISTINCT",
    ),
    (
        "order",
        "ORDER BY is not supported: windows are emitted in window order as they fire",
        "drop ORDER BY; sort the result table afterwards if needed",
    ),
    ("limit", "LIMIT is not supported on a stream", "drop LIMIT"),
    ("offset", "OFFSET is not supported on a stream", "drop OFFSET"),
    ("qualify", "QUALIFY is not supported", "filter windows with HAVING"),
    (
        "windows",
        "named WINDOW definitions are not supported",
        "use the window clause: " + WINDOW_HINT,
    ),
    ("sort", "SORT BY is not supported", "drop SORT BY"),
    ("distribute", "DISTRIBUTE BY is not supported", "drop DISTRIBUTE BY"),
    ("cluster", "CLUSTER BY is not supported", "drop CLUSTER BY"),
)
_ALLOWED_SELECT_ARGS = frozenset({"expressions", "from_", "where", "group", "having"})
_AGGREGATE_IN_CLAUSE_HINTS = {
    "WHERE": "WHERE filters tuples before aggregation; filter windows with HAVING",
    "ON": "ON pairs the rows of both sides; filter windows with HAVING",
}


class _Binder:
    # the join binder (bind_join.py) reads JOIN; this one refuses it
    joins_allowed = False

    def __init__(self, query: exp.Expression, catalog: Catalog) -> None:
        self.query = query
        self.catalog = catalog
        self.aggregates: list[lg.Aggregate] = []
        self.argument_types: dict[int, SqlType] = {}
        self.read_columns: set[str] = set()
        self.keys: list[Column] = []
        self.outputs_by_alias: dict[str, exp.Expression] = {}

    # -- the query's shape ------------------------------------------------------------

    def bind(self) -> BoundQuery:
        select = self._check_shape(self.query)
        self.stream, clause = self._resolve_from(select)
        self.schema: Schema = self.stream.schema
        self.qualifiers = {self.stream.name.lower()}
        table = clause.this if clause is not None else select.args["from_"].this
        if table.alias:
            self.qualifiers.add(table.alias.lower())
        if clause is None:
            raise self._missing_window(select, table)
        # bind_window reads this module's errors
        from mangonel.compiler.bind_window import window_spec

        window = window_spec(clause, self.stream.watermark_delay_us)

        where = self._where(select.args.get("where"))
        self._group_by(select.args.get("group"))
        outputs = self._outputs(select)
        having = self._having(select.args.get("having"))

        self.read_columns.add(self.stream.event_time)
        scan_columns = tuple(c for c in self.schema.columns if c.name in self.read_columns)
        node: lg.LogicalNode = lg.StreamScan(self.stream, scan_columns)
        if where is not None:
            node = lg.Filter(node, where)
        node = lg.WindowAggregate(node, window, tuple(self.keys), tuple(self.aggregates))
        if having is not None:
            node = lg.Filter(node, having)
        project = lg.Project(node, outputs)
        return BoundQuery(project, dict(self.argument_types), self.stream, window)

    def _check_shape(self, query: exp.Expression) -> exp.Select:
        if not isinstance(query, exp.Select):
            raise _error(
                f"{type(query).__name__.upper()} is not a query mangonel can run",
                query,
                "mangonel runs window queries: SELECT ... FROM <stream> [RANGE ..] ...",
            )
        for arg, message, hint in _UNSUPPORTED_CLAUSES:
            if arg == "joins" and self.joins_allowed:
                continue
            value = query.args.get(arg)
            if value:
                node = value[0] if isinstance(value, list) else value
                raise _error(message, node, hint, fallback=query)
        for arg, value in query.args.items():
            if (
                value
                and arg not in _ALLOWED_SELECT_ARGS
                and not (arg == "joins" and self.joins_allowed)
            ):
                raise _error(
                    f"{arg.rstrip('_').upper().replace('_', ' ')} is not supported",
                    value[0] if isinstance(value, list) else value,
                    "mangonel runs window queries: SELECT ... FROM <stream> [RANGE ..] "
                    "[WHERE ..] [GROUP BY ..] [HAVING ..]",
                    fallback=query,
                )
        for node in query.walk():
            if node is query:
                continue
            if isinstance(node, (exp.Subquery, exp.Select, exp.SetOperation)):
                join_side = self.joins_allowed and isinstance(node.parent, (exp.Join, exp.From))
                raise _error(
                    "subqueries are not supported",
                    node,
                    "a join side is a stream with a window clause (clicks [RANGE 1 SECOND] AS l), "
                    "a table, or Flink's (SELECT * FROM TABLE(TUMBLE(TABLE clicks, "
                    "DESCRIPTOR(ts), INTERVAL '1' SECOND))) AS l"
                    if join_side
                    else "write one window query over one stream",
                )
            if isinstance(node, exp.Window):
                raise _error(
                    "window functions (OVER ...) are not supported",
                    node,
                    "aggregate over a window clause with GROUP BY instead: " + WINDOW_HINT,
                )
        for projection in query.expressions:
            target = projection.this if isinstance(projection, exp.Alias) else projection
            if isinstance(target, exp.Star) or (
                isinstance(target, exp.Column) and isinstance(target.this, exp.Star)
            ):
                raise _error(
                    "SELECT * is not supported: a window query names its outputs",
                    target,
                    "select GROUP BY columns, window_start, window_end and aggregates",
                )
        if not query.args.get("from_"):
            raise _error(
                "a query needs FROM <stream> with a window clause",
                query,
                "SELECT ... FROM <stream> [RANGE ..]; " + WINDOW_HINT,
                construct=_shorten(display_sql(query)),
            )
        return query

    def _resolve_from(self, select: exp.Select) -> tuple[Stream, WindowClause | None]:
        clause, table = self._checked_source(select.args["from_"].this, select)
        name = table.name
        stream = self.catalog.stream(name)
        if stream is not None:
            return stream, clause
        if self.catalog.table(name) is not None:
            if clause is not None:
                raise _error(
                    f"a window clause on the static table {name!r}",
                    clause,
                    "window clauses apply to streams (CREATE STREAM); queries cannot read "
                    "static tables",
                    construct=display_sql(clause),
                )
            raise _error(
                f"{name!r} is a static table; queries read streams",
                table,
                "query a stream (CREATE STREAM ... WITH (event_time = ...)); queries "
                "cannot read static tables",
            )
        raise self._unknown_source(table)

    def _unknown_source(self, table: exp.Table) -> SqlError:
        streams = sorted(s.name for s in self.catalog.streams.values())
        return _error(
            f"unknown stream {table.name!r}",
            table.this,
            ("known streams: " + ", ".join(streams))
            if streams
            else "no streams yet: CREATE STREAM name (cols) WITH (event_time = 'col') first",
            error_class=CatalogError,
        )

    def _checked_source(
        self, source: exp.Expression, select: exp.Select
    ) -> tuple[WindowClause | None, exp.Table]:
        """The window clause (if any) and the table of a FROM or JOIN source: one plain
        name, at most an alias."""
        clause = source if isinstance(source, WindowClause) else None
        table = clause.this if clause is not None else source
        if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
            raise _error(
                f"FROM {type(table).__name__.upper()} is not supported",
                table,
                "read from a stream: FROM <stream> [RANGE ..]",
                fallback=select,
            )
        for arg, value in table.args.items():
            if not value or arg in ("this", "alias"):
                continue
            if arg in ("db", "catalog"):
                raise _error(
                    "qualified stream names are not supported",
                    table,
                    "name the stream alone: FROM trades",
                )
            raise _error(
                f"{arg.upper()} after a table name is not supported",
                table,
                "FROM <stream> [RANGE ..] [AS alias]",
            )
        alias = table.args.get("alias")
        if alias is not None and alias.args.get("columns"):
            raise _error(
                "column aliases on the stream are not supported",
                alias,
                "alias the stream alone (FROM trades [RANGE 1 SECOND] AS t) and name "
                "outputs in SELECT",
            )
        return clause, table

    def _missing_window(self, select: exp.Select, table: exp.Table) -> SqlError:
        name = self.stream.name
        has_aggregates = any(
            isinstance(node, exp.AggFunc)
            for part in (*select.expressions, select.args.get("having"))
            if part is not None
            for node in part.walk()
        )
        if has_aggregates:
            message = f"stream {name!r} needs a window clause to aggregate over"
            hint = f"add [RANGE ..] or [ROWS ..] after the stream name, {WINDOW_HINT}"
        else:
            message = (
                f"a query over stream {name!r} must aggregate over a window: "
                "it has no window clause and no aggregate"
            )
            hint = (
                f"add [RANGE ..] after the stream name and aggregate, e.g. "
                f"SELECT COUNT(*) FROM {name} [RANGE 1 SECOND]"
            )
        return _error(message, table, hint)

    # -- names ------------------------------------------------------------------------

    def _column_names_hint(self, with_bounds: bool) -> str:
        names = list(self.schema.names())
        if with_bounds:
            names += ["window_start", "window_end"]
        return f"columns of {self.stream.name}: " + ", ".join(names)

    def _unknown_column_hint(self, column: exp.Column, clause: str) -> str:
        """The hint of an unknown column: the names it could have been (the window bounds
        where SELECT and HAVING can read them), after a word on double quotes if it had
        them."""
        names = self._column_names_hint(with_bounds=clause in ("SELECT", "HAVING"))
        return f"{double_quote_hint(column)}{names}"

    def _resolve_column(self, column: exp.Column, clause: str) -> exp.Expression:
        """A schema column (resolved), a WindowBound, or (HAVING) a SELECT alias."""
        if column.args.get("db") or column.args.get("catalog"):
            raise _error(
                "qualified column names have at most one qualifier",
                column,
                "write stream.column or alias.column",
            )
        qualifier = column.table
        if qualifier and qualifier.lower() not in self.qualifiers:
            raise _error(
                f"unknown qualifier {qualifier!r} in {column.sql()}",
                column,
                "qualify columns with " + " or ".join(sorted(self.qualifiers)),
                error_class=CatalogError,
            )
        name = column.name
        found = self.schema.find(name)
        if found is not None:
            resolved = exp.Column(this=exp.Identifier(this=found.name, quoted=True))
            return copy_position(resolved, column)
        bound = _BOUND_NAMES.get(name.lower())
        if bound is not None:
            if clause not in ("SELECT", "HAVING"):
                where = "an aggregate" if clause == "aggregate" else clause
                raise _error(
                    f"{name} cannot be used in {where}",
                    column,
                    f"{name} is a property of a window: use it in SELECT or HAVING",
                )
            return copy_position(WindowBound(this=bound), column)
        if clause == "HAVING" and not qualifier and name.lower() in self.outputs_by_alias:
            return self.outputs_by_alias[name.lower()].copy()
        raise _error(
            f"unknown column {name!r} in stream {self.stream.name!r}",
            column,
            self._unknown_column_hint(column, clause),
            error_class=CatalogError,
        )

    def _rewrite(
        self, expression: exp.Expression, visit: Callable[[exp.Expression], exp.Expression | None]
    ) -> exp.Expression:
        """Copy `expression`, replacing each node `visit` returns a replacement for
        (top-down; a replaced node's children are not visited)."""

        def transform(node: exp.Expression) -> exp.Expression:
            replacement = visit(node)
            return node if replacement is None else replacement

        return expression.transform(transform, copy=True)

    # -- WHERE, GROUP BY --------------------------------------------------------------

    def _scalar(self, expression: exp.Expression, clause: str) -> exp.Expression:
        """Resolve a per-tuple expression (WHERE, GROUP BY, aggregate arguments)."""

        def visit(node: exp.Expression) -> exp.Expression | None:
            python = self._python_function(node) is not None
            if not python:
                _check_function(node)
            timestamp = _utc_timestamp_literal(node)
            if timestamp is not None:
                return timestamp
            if isinstance(node, exp.AggFunc) or python:
                if clause == "aggregate":
                    raise _error(
                        "nested aggregates are not supported",
                        node,
                        "an aggregate's argument is a per-tuple expression; aggregate "
                        "once, and combine aggregates around them: SUM(x) / COUNT(x)",
                    )
                name = node.name if isinstance(node, exp.Anonymous) else node.sql_name()
                raise _error(
                    f"aggregate {name} in {clause}",
                    node,
                    _AGGREGATE_IN_CLAUSE_HINTS.get(clause, "GROUP BY takes columns of the stream"),
                )
            if isinstance(node, exp.Column):
                resolved = self._resolve_column(node, clause)
                if isinstance(resolved, exp.Column):
                    self.read_columns.add(resolved.name)
                return resolved
            return None

        return self._rewrite(expression, visit)

    def _tuple_env(self) -> TypeEnv:
        return TypeEnv({c.name: c.type for c in self.schema.columns})

    def _where(self, where: exp.Where | None) -> exp.Expression | None:
        if where is None:
            return None
        predicate = self._scalar(where.this, "WHERE")
        predicate_type = _infer(predicate, self._tuple_env(), where.this)
        if predicate_type is not SqlType.BOOLEAN:
            raise _error(
                f"WHERE needs a BOOLEAN condition, got {predicate_type}",
                where.this,
                "compare values: WHERE volume > 0",
            )
        return predicate

    def _group_by(self, group: exp.Group | None) -> None:
        if group is None:
            return
        for arg in ("grouping_sets", "cube", "rollup", "totals", "all"):
            if group.args.get(arg):
                raise _error(
                    f"GROUP BY {arg.upper().replace('_', ' ')} is not supported",
                    group,
                    "GROUP BY one or more columns",
                )
        for item in group.expressions:
            key = self._group_key(item)
            if all(existing.name != key.name for existing in self.keys):
                self.keys.append(key)

    def _group_key(self, item: exp.Expression) -> Column:
        if isinstance(item, exp.Literal) and not item.is_string:
            raise _error(
                "GROUP BY by position is not supported",
                item,
                "name the column: GROUP BY symbol",
            )
        if isinstance(item, exp.Anonymous) and item.name.upper() in ("TUMBLE", "HOP"):
            raise _error(
                f"GROUP BY {item.name.upper()}(...) windows are not supported",
                item,
                "use FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(ts), ..)) or the clause: " + WINDOW_HINT,
            )
        if not isinstance(item, exp.Column):
            self._scalar(item, "GROUP BY")  # unknown names and aggregates first
            raise _error(
                "GROUP BY takes columns, not expressions",
                item,
                "group by columns of the stream (INT, BIGINT or STRING); expressions as "
                "keys are not supported",
            )
        resolved = self._resolve_column(item, "GROUP BY")
        column = self.schema.find(resolved.name)
        assert column is not None  # _resolve_column found it
        if column.type not in _KEY_TYPES:
            raise _error(
                f"GROUP BY column {column.name!r} has type {column.type}",
                item,
                "group by INT, BIGINT or STRING columns",
            )
        self.read_columns.add(column.name)
        return column

    # -- aggregates -------------------------------------------------------------------

    def _aggregate(self, node: exp.Expression) -> AggregateRef:
        """Register one aggregate call (sharing identical ones) and refer to it."""
        call = node.this if isinstance(node, exp.WithinGroup) else node
        python = self._python_function(call)
        function = (
            AGGREGATE_FUNCTIONS.get(type(call)) if python is None else AggregateFunction.PYTHON
        )
        if function is None:
            raise _error(
                f"aggregate {call.sql_name()} is not supported",
                call,
                AGGREGATES_HINT,
            )
        # bind_calls reads this module's errors
        from mangonel.compiler.bind_calls import call_shape, python_argument_error

        argument, function, fraction, parameter = call_shape(node, call, function)
        resolved_argument: exp.Expression | None
        if function is AggregateFunction.COUNT and (
            argument is None or isinstance(argument, exp.Star)
        ):
            function, resolved_argument, argument_type = AggregateFunction.COUNT_STAR, None, None
        else:
            if argument is None:
                raise _error(f"{node.sql_name()} needs an argument", node, AGGREGATES_HINT)
            resolved_argument = self._scalar(argument, "aggregate")
            argument_type = _infer(resolved_argument, self._tuple_env(), argument)
        try:
            result_type = aggregate_result_type(function, argument_type, node=node)
        except ExpressionError as error:
            if python is not None:
                raise python_argument_error(python, argument_type, node) from None
            raise _from_expression_error(error, node) from None
        if python is not None:
            result_type = python.returns
        fractions = fraction if isinstance(fraction, tuple) else None
        if fractions is not None:  # an ARRAY of p: one result per p, in the order given
            result_type, fraction = ArrayType(result_type), None
        aggregate = lg.Aggregate(
            function,
            resolved_argument,
            result_type,
            fraction,
            python=python,
            parameter=parameter,
            fractions=fractions,
        )
        if aggregate in self.aggregates:
            index = self.aggregates.index(aggregate)
        else:
            index = len(self.aggregates)
            self.aggregates.append(aggregate)
            if argument_type is not None:
                self.argument_types[index] = argument_type
        reference = AggregateRef(this=index)
        copy_position(reference, node)
        reference.meta["sql"] = display_sql(node)
        return reference

    def _python_function(self, node: exp.Expression):  # noqa: ANN202 - WindowFunction | None
        """The session's Python window function a call names (None: not one)."""
        if not isinstance(node, exp.Anonymous):
            return None
        return self.catalog.window_functions.get(node.name.lower())

    def _windowed(self, expression: exp.Expression, clause: str) -> exp.Expression:
        """Resolve a per-window expression (SELECT item, HAVING): aggregates become
        AggregateRefs; bare columns must be GROUP BY keys."""
        key_names = {key.name for key in self.keys}

        def visit(node: exp.Expression) -> exp.Expression | None:
            if self._python_function(node) is not None:
                return self._aggregate(node)
            _check_function(node)
            timestamp = _utc_timestamp_literal(node)
            if timestamp is not None:
                return timestamp
            if isinstance(node, exp.Filter) and isinstance(node.this, exp.AggFunc):
                raise _error(
                    "FILTER (WHERE ...) on aggregates is not supported",
                    node.this,
                    "aggregate a CASE instead: SUM(CASE WHEN cond THEN x END)",
                )
            if isinstance(node, (exp.IgnoreNulls, exp.RespectNulls)):
                raise _error(
                    f"{type(node).__name__} is not supported",
                    node.this,
                    "aggregates always skip NULLs",
                )
            if isinstance(node, (exp.AggFunc, exp.WithinGroup)):
                return self._aggregate(node)
            if isinstance(node, exp.Column):
                resolved = self._resolve_column(node, clause)
                if isinstance(resolved, exp.Column) and resolved.name not in key_names:
                    alias = self.outputs_by_alias.get(node.name.lower())
                    if clause == "HAVING" and not node.table and alias is not None:
                        # a SELECT alias shadowing a column neither grouped nor aggregated
                        # (`MIN(n) AS n .. HAVING n < 0`) is the alias, as in Spark; a
                        # grouped column keeps its name
                        return alias.copy()
                    if self.keys:
                        hint = (
                            f"add {resolved.name} to GROUP BY, or aggregate it, e.g. "
                            f"MAX({resolved.name})"
                        )
                    else:
                        hint = (
                            f"the query has no GROUP BY: aggregate it, e.g. "
                            f"MAX({resolved.name}), or GROUP BY {resolved.name}"
                        )
                    raise _error(
                        f"column {resolved.name!r} in {clause} is neither grouped nor aggregated",
                        node,
                        hint,
                    )
                return resolved
            return None

        return self._rewrite(expression, visit)

    def _window_env(self) -> TypeEnv:
        return TypeEnv(
            {key.name: key.type for key in self.keys},
            tuple(aggregate.result_type for aggregate in self.aggregates),
        )

    # -- SELECT, HAVING ---------------------------------------------------------------

    def _outputs(self, select: exp.Select) -> tuple[lg.OutputColumn, ...]:
        outputs: list[lg.OutputColumn] = []
        seen: dict[str, tuple[int, exp.Expression]] = {}
        for number, projection in enumerate(select.expressions, start=1):
            if isinstance(projection, exp.Alias):
                original, name = projection.this, projection.alias
            else:
                original, name = projection, None
            expression = self._windowed(original, "SELECT")
            if name is None:
                if isinstance(expression, exp.Column):
                    name = self._column_output_name(expression)
                elif isinstance(expression, WindowBound):
                    name = f"window_{expression.bound}"
                else:
                    # As Spark does, an unnamed output is named after what the user wrote
                    # (comments dropped, whitespace runs made one space), not after
                    # sqlglot's normalised node (which spells VARIANCE for VAR_SAMP).
                    name = output_text(projection)
            output_type = _infer(expression, self._window_env(), original)
            if name.lower() in seen:
                first_number, first = seen[name.lower()]
                raise _error(
                    f"SELECT items {first_number} ({_shorten(output_text(first))}) and "
                    f"{number} ({_shorten(output_text(projection))}) are both named {name!r}",
                    projection,
                    "give each output its own name with AS (output names are case-insensitive)",
                    construct=_shorten(output_text(projection)),
                )
            seen[name.lower()] = (number, projection)
            self.outputs_by_alias[name.lower()] = expression
            outputs.append(lg.OutputColumn(name, expression, output_type))
        return tuple(outputs)

    def _column_output_name(self, column: exp.Column) -> str:
        """The name of an output that is a bare column: the column's."""
        return column.name

    def _having(self, having: exp.Having | None) -> exp.Expression | None:
        if having is None:
            return None
        predicate = self._windowed(having.this, "HAVING")
        predicate_type = _infer(predicate, self._window_env(), having.this)
        if predicate_type is not SqlType.BOOLEAN:
            raise _error(
                f"HAVING needs a BOOLEAN condition, got {predicate_type}",
                having.this,
                "compare aggregates: HAVING COUNT(*) > 10",
            )
        return predicate
