"""The binder of join queries: two inputs, `FROM a [RANGE ..] AS l [LEFT|RIGHT|FULL] JOIN
b [RANGE ..] AS r ON <key equalities> [AND <residual>]`, or a stream joined with a static
table (`JOIN t AS x ON ..`, the table without a window clause).

Shapes (docs/sql.md, "Joins"):

    Project(outputs) <- Filter(WHERE)? <- WindowJoin(left, right)             (rows)
    Project(outputs) <- Filter(HAVING)? <- WindowAggregate(keys, aggregates)
                     <- Filter(WHERE)? <- WindowJoin(left, right)             (aggregated)

Every column is qualified by its side's alias (the stream's or table's name without AS) and
resolves to the joined row's column `alias.column` (`logical.joined_name`); `window_start`
and `window_end` are the join window's, unqualified. The ON condition is split at AND: each
equality of a column of one side with a column of the other (INT/BIGINT or STRING) is a key
pair, the rest is the residual predicate, evaluated on pairs with equal keys.

Flink's window-join form (`TABLE(TUMBLE(..)) AS l JOIN TABLE(TUMBLE(..)) AS r ON l.k = r.k
AND l.window_start = r.window_start AND l.window_end = r.window_end`) reaches this binder as
the CQL join it stands for (window_join_syntax.py): each side's window is a clause here,
whichever way it was written.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from mangonel.catalog.catalog import Catalog, Column, Schema, Stream, Table
from mangonel.catalog.types import SqlType
from mangonel.compiler import logical as lg
from mangonel.compiler.bind import (
    _BOUND_NAMES,
    _KEY_TYPES,
    BoundQuery,
    _Binder,
    _error,
    _infer,
)
from mangonel.compiler.bind_window import window_spec
from mangonel.compiler.logical import JoinKind, WindowSpec, joined_name
from mangonel.compiler.nodes import WindowBound, WindowClause
from mangonel.compiler.parse import (
    conjuncts,
    copy_position,
    display_sql,
    double_quote_hint,
    format_duration,
)
from mangonel.errors import CatalogError

JOIN_HINT = (
    "FROM a [RANGE ..] AS l [LEFT|RIGHT|FULL] JOIN b [RANGE ..] AS r ON l.k = r.k [AND ..], "
    "or a stream joined with a table: FROM a [RANGE ..] AS l JOIN t AS x ON l.k = x.k"
)
_JOIN_KINDS = {
    None: JoinKind.INNER,
    "": JoinKind.INNER,
    "LEFT": JoinKind.LEFT,
    "RIGHT": JoinKind.RIGHT,
    "FULL": JoinKind.FULL,
}


@dataclass
class _Side:
    """One input while binding: its alias as written, what it reads, its window clause."""

    alias: str
    table_node: exp.Table
    source: Stream | Table
    clause: WindowClause | None
    window: WindowSpec | None = None

    @property
    def is_stream(self) -> bool:
        return isinstance(self.source, Stream)

    @property
    def schema(self) -> Schema:
        return self.source.schema

    @property
    def kind_word(self) -> str:
        return "stream" if self.is_stream else "table"


def _side_key_type(sql_type: SqlType) -> str:
    """Key columns of both sides compare when they have the same key class: integers
    (INT, BIGINT) or strings."""
    return "string" if sql_type is SqlType.STRING else "integer"


class JoinBinder(_Binder):
    joins_allowed = True

    def __init__(self, query: exp.Expression, catalog: Catalog) -> None:
        super().__init__(query, catalog)
        self.sides: list[_Side] = []
        self.side_reads: dict[str, set[str]] = {}
        self.join_window: WindowSpec | None = None

    # -- the query's shape ------------------------------------------------------------

    def bind(self) -> BoundQuery:
        select = self._check_shape(self.query)
        joins = select.args["joins"]
        if len(joins) > 1:
            raise _error(
                "a query joins two inputs; this one joins more",
                joins[1],
                "join two inputs per query: " + JOIN_HINT,
                fallback=select,
            )
        join = joins[0]
        kind = self._join_kind(join)
        left = self._side(select.args["from_"].this, select)
        right = self._side(join.this, select)
        self.sides = [left, right]
        self._check_sides(left, right, kind, join)
        self.side_reads = {left.alias.lower(): set(), right.alias.lower(): set()}
        self.stream = left.source if left.is_stream else right.source  # for messages
        joined = tuple(
            Column(joined_name(side.alias, c.name), c.type, True)
            for side in self.sides
            for c in side.schema.columns
        )
        self.schema = Schema(joined)
        self.column_side = {
            joined_name(side.alias, c.name): number
            for number, side in enumerate(self.sides)
            for c in side.schema.columns
        }
        self.join_window = self._common_window(left, right, select)
        left_keys, right_keys, residual = self._on(join, left, right)

        where = self._where(select.args.get("where"))
        aggregating = bool(select.args.get("group")) or any(
            isinstance(node, exp.AggFunc)
            for part in (*select.expressions, select.args.get("having"))
            if part is not None
            for node in part.walk()
        )
        if aggregating:
            if self.join_window is None:
                stream_side = left if left.is_stream else right
                raise self._missing_window(select, stream_side.table_node)
            self._group_by(select.args.get("group"))
            outputs = self._outputs(select)
            having = self._having(select.args.get("having"))
        else:
            if select.args.get("having") is not None:
                having_node = select.args["having"]
                raise _error(
                    "HAVING filters aggregated windows; this join query does not aggregate",
                    having_node,
                    "filter joined rows with WHERE, or GROUP BY and aggregate",
                )
            # a row-level output may read any column of the joined row
            self.keys = list(joined)
            outputs = self._outputs(select)
            self.keys = []
            having = None

        node: lg.LogicalNode = lg.WindowJoin(
            left=self._join_side(left),
            right=self._join_side(right),
            kind=kind,
            window=self.join_window,
            left_keys=left_keys,
            right_keys=right_keys,
            residual=residual,
            columns=joined,
        )
        if where is not None:
            node = lg.Filter(node, where)
        if aggregating:
            assert self.join_window is not None
            node = lg.WindowAggregate(
                node, self.join_window, tuple(self.keys), tuple(self.aggregates)
            )
            if having is not None:
                node = lg.Filter(node, having)
        project = lg.Project(node, outputs)
        stream = left.source if left.is_stream else right.source
        assert isinstance(stream, Stream)
        return BoundQuery(project, dict(self.argument_types), stream, self.join_window)

    def _join_kind(self, join: exp.Join) -> JoinKind:
        if join.args.get("method"):
            raise _error(
                f"{join.args['method'].upper()} JOIN is not supported",
                join,
                "name the key columns: " + JOIN_HINT,
            )
        kind_word = (join.args.get("kind") or "").upper()
        if kind_word in ("CROSS", "SEMI", "ANTI"):
            raise _error(
                f"{kind_word} JOIN is not supported",
                join,
                "join on key equality: " + JOIN_HINT,
            )
        if join.args.get("using"):
            raise _error(
                "JOIN ... USING is not supported",
                join.args["using"][0],
                "write the key equality with ON: ON l.k = r.k",
                fallback=join,
            )
        side = (join.args.get("side") or "").upper()
        if not join.args.get("on"):
            raise _error("a join needs ON with an equality of key columns", join, JOIN_HINT)
        return _JOIN_KINDS[side]

    def _side(self, source: exp.Expression, select: exp.Select) -> _Side:
        clause, table = self._checked_source(source, select)
        found: Stream | Table | None = self.catalog.stream(table.name) or self.catalog.table(
            table.name
        )
        if found is None:
            known = sorted(self.catalog.known_names())
            raise _error(
                f"unknown stream or table {table.name!r}",
                table.this,
                ("known streams and tables: " + ", ".join(known))
                if known
                else "CREATE STREAM (or CREATE TABLE) first",
                error_class=CatalogError,
            )
        alias = table.alias or found.name
        return _Side(alias, table, found, clause)

    def _check_sides(self, left: _Side, right: _Side, kind: JoinKind, join: exp.Join) -> None:
        if left.alias.lower() == right.alias.lower():
            raise _error(
                f"both sides of the join are named {left.alias!r}",
                right.table_node,
                "give each side its own alias: FROM a [RANGE ..] AS l JOIN b [RANGE ..] AS r",
            )
        for side in (left, right):
            if not side.is_stream and side.clause is not None:
                raise _error(
                    f"a window clause on the static table {side.source.name!r}",
                    side.clause,
                    "a static table has no time: drop its window clause; the stream's "
                    "window applies",
                    construct=display_sql(side.clause),
                )
        if not left.is_stream and not right.is_stream:
            raise _error(
                f"both sides of the join are static tables ({left.source.name!r} and "
                f"{right.source.name!r})",
                right.table_node,
                "join a stream with a table, or two streams: " + JOIN_HINT,
            )
        for table_side, keeps in ((left, kind.keeps_left), (right, kind.keeps_right)):
            if not table_side.is_stream and keeps:
                word = {JoinKind.LEFT: "LEFT", JoinKind.RIGHT: "RIGHT", JoinKind.FULL: "FULL"}
                raise _error(
                    f"{word[kind]} JOIN would keep the unmatched rows of the static table "
                    f"{table_side.source.name!r}, which have no time to be emitted at",
                    join,
                    "keep the stream's unmatched rows instead: FROM <stream> .. LEFT JOIN "
                    "<table> ..",
                )

    def _common_window(self, left: _Side, right: _Side, select: exp.Select) -> WindowSpec | None:
        """The join's window: the same RANGE and SLIDE on both streams (each keeps its own
        WATERMARK); a stream joined with a table may have none."""
        for side in (left, right):
            if side.clause is None:
                continue
            if side.clause.args["kind"] == "ROWS":
                raise _error(
                    "count windows (ROWS) cannot be joined",
                    side.clause,
                    "join over time windows: [RANGE <duration> [SLIDE <duration>]]",
                    construct=display_sql(side.clause),
                )
            if side.clause.args["kind"] == "SESSION":
                # the join's state and firing are per window of one size, for all keys
                raise _error(
                    "session windows cannot be joined: sessions are each key's own and "
                    "differ between the two streams, and the window join pairs the rows of "
                    "one window of one size",
                    side.clause,
                    "join over time windows: [RANGE <duration> [SLIDE <duration>]]",
                    construct=display_sql(side.clause),
                )
            self.stream = side.source  # messages name the last windowed side from here on
            side.window = window_spec(side.clause, side.source.watermark_delay_us)
        if left.is_stream and right.is_stream:
            for side, other in ((left, right), (right, left)):
                if side.clause is None:
                    example = self._window_text(other) if other.clause else "[RANGE 1 SECOND]"
                    raise _error(
                        f"stream {side.source.name!r} has no window clause; a join of two "
                        "streams pairs the rows of one window",
                        side.table_node,
                        f"give both streams the same window clause, e.g. {example}",
                    )
            assert left.window is not None and right.window is not None
            if (left.window.size, left.window.slide) != (right.window.size, right.window.slide):
                raise _error(
                    f"the two streams have different windows: {self._window_text(left)} "
                    f"and {self._window_text(right)}",
                    right.clause,
                    "a window join pairs rows of the same window: give both streams the "
                    f"same RANGE and SLIDE, e.g. {self._window_text(left)} (WATERMARK may "
                    "differ)",
                    construct=display_sql(right.clause),
                )
            if left.source.name == right.source.name:
                self._check_self_join(left, right)
            return left.window
        stream_side = left if left.is_stream else right
        return stream_side.window

    @staticmethod
    def _check_self_join(left: _Side, right: _Side) -> None:
        """A stream joined with itself: each of its batches arrives on both sides, which
        must judge its rows against one watermark (docs/semantics.md, "A stream joined with
        itself"), so the two sides take the same WATERMARK."""
        assert left.window is not None and right.window is not None
        delays = (left.window.watermark_delay_us, right.window.watermark_delay_us)
        if delays[0] != delays[1]:
            raise _error(
                f"the stream {left.source.name!r} is joined with itself with two "
                f"watermarks ({format_duration(delays[0])} as {left.alias!r}, "
                f"{format_duration(delays[1])} as {right.alias!r})",
                right.clause,
                "each batch of the stream arrives on both sides, so both judge its rows "
                "against one watermark: give both sides the same WATERMARK (or none, to "
                "take the stream's)",
                construct=display_sql(right.clause),
            )

    @staticmethod
    def _window_text(side: _Side) -> str:
        window = side.window
        assert window is not None
        text = f"RANGE {format_duration(window.size)}"
        if window.slide != window.size:
            text += f" SLIDE {format_duration(window.slide)}"
        return f"[{text}]"

    def _join_side(self, side: _Side) -> lg.JoinSide:
        reads = self.side_reads[side.alias.lower()]
        if isinstance(side.source, Stream):
            reads.add(side.source.event_time)
            columns = tuple(c for c in side.schema.columns if c.name in reads)
            delay = (
                side.window.watermark_delay_us
                if side.window is not None
                else side.source.watermark_delay_us
            )
            return lg.JoinSide(side.alias, lg.StreamScan(side.source, columns), delay)
        columns = tuple(c for c in side.schema.columns if c.name in reads)
        return lg.JoinSide(side.alias, lg.TableScan(side.source, columns), None)

    # -- ON ---------------------------------------------------------------------------

    def _on(
        self, join: exp.Join, left: _Side, right: _Side
    ) -> tuple[tuple[Column, ...], tuple[Column, ...], exp.Expression | None]:
        """(left keys, right keys, residual) of the ON condition."""
        condition = join.args["on"]
        left_keys: list[Column] = []
        right_keys: list[Column] = []
        residual: list[exp.Expression] = []
        env = self._tuple_env()
        for conjunct in conjuncts(condition):
            resolved = self._scalar(conjunct, "ON")
            conjunct_type = _infer(resolved, env, conjunct)
            if conjunct_type is not SqlType.BOOLEAN:
                raise _error(
                    f"ON needs BOOLEAN conditions, got {conjunct_type}",
                    conjunct,
                    "compare columns: ON l.k = r.k AND r.price > 10",
                )
            pair = self._key_pair(resolved, left, right)
            if pair is None:
                residual.append(resolved)
            else:
                left_keys.append(pair[0])
                right_keys.append(pair[1])
        if not left_keys:
            raise _error(
                "a join needs an equality of a key column of each side in ON",
                condition,
                f"e.g. ON {left.alias}.k = {right.alias}.k (INT, BIGINT or STRING columns); "
                "other conditions may follow with AND",
            )
        predicate = None
        for part in residual:
            predicate = part if predicate is None else exp.and_(predicate, part, copy=False)
        return tuple(left_keys), tuple(right_keys), predicate

    def _key_pair(
        self, resolved: exp.Expression, left: _Side, right: _Side
    ) -> tuple[Column, Column] | None:
        if not isinstance(resolved, exp.EQ):
            return None
        a, b = resolved.this, resolved.expression
        if not (isinstance(a, exp.Column) and isinstance(b, exp.Column)):
            return None
        columns = {c.name: c for c in self.schema.columns}
        first, second = columns[a.name], columns[b.name]
        if self.column_side[first.name] == 1 and self.column_side[second.name] == 0:
            first, second = second, first
        if (self.column_side[first.name], self.column_side[second.name]) != (0, 1):
            return None  # both columns of one side: a residual condition
        if first.type not in _KEY_TYPES or second.type not in _KEY_TYPES:
            return None  # e.g. DOUBLE = DOUBLE: compared on pairs, not a join key
        if _side_key_type(first.type) != _side_key_type(second.type):
            return None  # the typing of the equality already refused mixed classes
        return first, second

    # -- names ------------------------------------------------------------------------

    def _column_names_hint(self, with_bounds: bool) -> str:
        parts = [
            f"{side.alias}: " + ", ".join(f"{side.alias}.{n}" for n in side.schema.names())
            for side in self.sides
        ]
        if with_bounds and self.join_window is not None:
            parts.append("window_start, window_end")
        return "columns: " + "; ".join(parts)

    def _resolve_column(self, column: exp.Column, clause: str) -> exp.Expression:
        if column.args.get("db") or column.args.get("catalog"):
            raise _error(
                "qualified column names have at most one qualifier",
                column,
                "write alias.column",
            )
        qualifier, name = column.table, column.name
        bound = _BOUND_NAMES.get(name.lower())
        if not qualifier:
            if bound is not None:
                return self._window_bound(column, bound, clause)
            if clause == "HAVING" and name.lower() in self.outputs_by_alias:
                return self.outputs_by_alias[name.lower()].copy()
            owners = [side for side in self.sides if side.schema.find(name) is not None]
            if not owners:
                raise _error(
                    f"unknown column {name!r}",
                    column,
                    self._unknown_column_hint(column, clause),
                    error_class=CatalogError,
                )
            spelled = " or ".join(f"{side.alias}.{name}" for side in owners)
            raise _error(
                f"column {name!r} is not qualified: a join query names each column by "
                "its side's alias",
                column,
                f"write {spelled}",
            )
        side = next((s for s in self.sides if s.alias.lower() == qualifier.lower()), None)
        if side is None:
            aliases = " or ".join(s.alias for s in self.sides)
            raise _error(
                f"unknown qualifier {qualifier!r} in {column.sql()}",
                column,
                f"qualify columns with {aliases}",
                error_class=CatalogError,
            )
        found = side.schema.find(name)
        if found is None:
            if bound is not None:
                return self._window_bound(column, bound, clause)
            raise _error(
                f"unknown column {name!r} in {side.kind_word} {side.source.name!r}",
                column,
                f"{double_quote_hint(column)}columns of {side.alias}: "
                + ", ".join(f"{side.alias}.{n}" for n in side.schema.names()),
                error_class=CatalogError,
            )
        self.side_reads[side.alias.lower()].add(found.name)
        identifier = exp.Identifier(this=joined_name(side.alias, found.name), quoted=True)
        identifier.meta["joined"] = True  # messages print it as written (`display_sql`)
        return copy_position(exp.Column(this=identifier), column)

    def _window_bound(self, column: exp.Column, bound: str, clause: str) -> exp.Expression:
        name = f"window_{bound}"
        if self.join_window is None:
            raise _error(
                f"{name}: the query has no window",
                column,
                "give the stream a window clause: FROM s [RANGE 1 MINUTE] AS l JOIN t ..",
            )
        if clause == "ON":
            # the clause form; Flink's form has its bound equalities out of ON before binding
            raise _error(
                f"{name} in ON: both streams already join within one window",
                column,
                "drop the window condition; the window clause pairs rows of the same window",
            )
        if clause not in ("SELECT", "HAVING"):
            where = "an aggregate" if clause == "aggregate" else clause
            raise _error(
                f"{name} cannot be used in {where}",
                column,
                f"{name} is a property of a window: use it in SELECT or HAVING",
            )
        if column.table:
            raise _error(
                f"{name} is the join window's, not one side's",
                column,
                f"write {name} without a qualifier",
            )
        return copy_position(WindowBound(this=bound), column)

    def _column_output_name(self, column: exp.Column) -> str:
        # `l.ad_id` is output as `ad_id`, as Spark names a qualified column
        return column.name.split(".", 1)[1]
