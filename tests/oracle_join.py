"""A plain evaluator of join queries (docs/semantics.md, "Joins"), for tests only.

The join half of tests/oracle.py, in its style and with its expressions, types and
aggregates (`compile_expression`, `aggregate_value` through `Oracle._rows`); it imports
nothing from mangonel (tests/test_join_oracle.py checks). A separate file only to keep
tests/oracle.py under the size the project allows.

Per row, per window, per pair: every window keeps the rows of both sides that contributed
to it, and fires by joining them with two nested loops, so nothing here knows of panes, hash
tables or sort order. Decisions it encodes, as the docs state them: each stream keeps its
own watermark and the query's is their minimum (None, minus infinity, until every stream
has had a batch); a row contributes to each of its windows with `window_end > W` at its
arrival, and is late (counted per input) when none is left (rows without a time are
dropped and counted apart); NULL keys match nothing; an
unmatched row of a kept side is emitted once per window it contributed to; WHERE filters
joined rows after the join; a table's rows belong to every window and are all read before
the first stream batch.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from oracle import Expr, Oracle, OracleQuery, Scope, compile_expression, rows_of


@dataclass(frozen=True)
class JoinInput:
    """One side: its alias, its input name, its columns (lower-case SQL types), its event
    time and watermark delay (None for a static table)."""

    alias: str
    name: str
    columns: dict[str, str]
    event_time: str | None = None
    delay: int = 0

    @property
    def is_table(self) -> bool:
        return self.event_time is None


@dataclass(frozen=True)
class JoinOracleQuery:
    """A join query: `kind` inner | left | right | full; `size`/`slide` in microseconds
    (None: a stream and a table without a window); key pairs by column name of each side;
    `residual` and `where` over the joined row (`alias.column` names); with `keys` or
    `aggregates` the query aggregates the joined rows (keys are joined names), else it
    outputs one row per joined row (outputs may use ["bound", "start" | "end"])."""

    left: JoinInput
    right: JoinInput
    kind: str
    size: int | None
    slide: int | None
    left_keys: tuple[str, ...]
    right_keys: tuple[str, ...]
    residual: Expr | None = None
    where: Expr | None = None
    keys: tuple[str, ...] = ()
    aggregates: tuple[tuple[str, Expr | None], ...] = ()
    having: Expr | None = None
    outputs: tuple[tuple[str, Expr], ...] = ()

    @property
    def aggregating(self) -> bool:
        return bool(self.keys or self.aggregates)

    def joined_columns(self) -> dict[str, str]:
        columns = {}
        for side in (self.left, self.right):
            for name, kind in side.columns.items():
                columns[f"{side.alias}.{name}"] = kind
        return columns


@dataclass
class _Window:
    rows: tuple[list, list] = field(default_factory=lambda: ([], []))


class JoinOracle:
    """Feed arrivals with `process(name, batch)` (returns the rows that fire after it), then
    `finish`. `late` counts late rows per input name, `null_time` rows without a time."""

    def __init__(self, query: JoinOracleQuery) -> None:
        self.query = query
        self.sides = (query.left, query.right)
        joined = query.joined_columns()
        scope = Scope(dict(joined))
        self.residual = (
            None if query.residual is None else compile_expression(query.residual, scope)
        )
        self.where = None if query.where is None else compile_expression(query.where, scope)
        if query.aggregating:
            # the window oracle finalizes groups: same aggregates, HAVING and outputs
            self.groups = Oracle(
                OracleQuery(
                    columns=joined,
                    event_time="",
                    kind="time",
                    size=1,
                    slide=1,
                    delay=0,
                    keys=query.keys,
                    aggregates=query.aggregates,
                    having=query.having,
                    outputs=query.outputs,
                )
            )
        else:
            self.outputs = [(n, compile_expression(e, scope)) for n, e in query.outputs]
        self.watermarks: list[int | None] = [None, None]
        self.max_ts: list[int | None] = [None, None]
        self.seen = [side.is_table for side in self.sides]
        self.late = {side.name: 0 for side in self.sides}
        # every late row: its columns, `late_reason`, `late_watermark`, `late_stream`
        self.late_rows: list[dict] = []
        self.null_time = {side.name: 0 for side in self.sides}
        self.table: tuple[list, list] = ([], [])
        self.windows: dict[int, _Window] = defaultdict(_Window)
        self.tolerances: list[dict] = []

    # -- arrivals -------------------------------------------------------------------

    def load_table(self, name: str, batch: Any) -> None:
        """A static table's rows (before the first stream batch)."""
        index = self._index(name)
        assert self.sides[index].is_table
        self.table[index].extend(rows_of(batch))

    def _index(self, name: str) -> int:
        return self._indices(name)[0]

    def _indices(self, name: str) -> list[int]:
        """The sides reading input `name`: both for a stream joined with itself."""
        found = [i for i, side in enumerate(self.sides) if side.name.lower() == name.lower()]
        if not found:
            raise KeyError(name)
        return found

    def query_watermark(self) -> int | None:
        streams = [i for i, side in enumerate(self.sides) if not side.is_table]
        if not all(self.seen[i] for i in streams):
            return None
        values = [self.watermarks[i] for i in streams]
        if any(v is None for v in values):
            return None
        return min(values)

    def process(self, name: str, batch: Any) -> list[dict]:
        """One arrival. A stream joined with itself: its rows arrive on both sides at once,
        judged against the watermark before them and counted (late, no time) once."""
        indices = self._indices(name)
        index = indices[0]
        side = self.sides[index]
        if side.is_table:
            self.load_table(name, batch)
            return []
        q = self.query
        rows = rows_of(batch)
        if q.size is None:  # stream and table, no window: join each row as it arrives
            fired = []
            for row in rows:
                if row[side.event_time] is None:
                    self.null_time[side.name] += 1
                    continue
                pair = ([row], []) if index == 0 else ([], [row])
                pair[1 - index].extend(self.table[1 - index])
                fired.append((None, self._join(pair)))
            return self._emit(fired)
        watermark = self.query_watermark()
        for row in rows:
            ts = row[side.event_time]
            if ts is None:
                self.null_time[side.name] += 1
                continue
            windows = [
                k
                for k in range((ts - q.size) // q.slide + 1, ts // q.slide + 1)
                if watermark is None or k * q.slide + q.size > watermark
            ]
            for i in indices:
                self.max_ts[i] = ts if self.max_ts[i] is None else max(self.max_ts[i], ts)
            if not windows:
                self.late[side.name] += 1
                self.late_rows.append(
                    {
                        **row,
                        "late_reason": "window closed",
                        "late_watermark": watermark,
                        "late_stream": side.name,
                    }
                )
                continue
            for k in windows:
                for i in indices:
                    self.windows[k].rows[i].append(row)
        for i in indices:
            self.seen[i] = True
            if self.max_ts[i] is not None:
                candidate = self.max_ts[i] - self.sides[i].delay
                if self.watermarks[i] is None or candidate > self.watermarks[i]:
                    self.watermarks[i] = candidate
        return self._fire(final=False)

    def finish(self) -> list[dict]:
        if self.query.size is None:
            self.tolerances = []
            return []
        return self._fire(final=True)

    # -- firing ---------------------------------------------------------------------

    def _fire(self, final: bool) -> list[dict]:
        q = self.query
        watermark = self.query_watermark()
        fired = []
        for k in sorted(self.windows):
            end = k * q.slide + q.size
            if final or (watermark is not None and end <= watermark):
                window = self.windows.pop(k)
                rows = tuple(
                    window.rows[i] + (self.table[i] if self.sides[i].is_table else [])
                    for i in (0, 1)
                )
                fired.append(((k * q.slide, end), self._join(rows)))
        return self._emit(fired)

    def _matches(self, left: dict, right: dict) -> bool:
        q = self.query
        for a, b in zip(q.left_keys, q.right_keys, strict=True):
            if left[a] is None or right[b] is None or left[a] != right[b]:
                return False
        if self.residual is None:
            return True
        return self.residual(self._joined(left, right)) is True

    def _joined(self, left: dict | None, right: dict | None) -> dict:
        row = {}
        for side, values in zip(self.sides, (left, right), strict=True):
            for name in side.columns:
                row[f"{side.alias}.{name}"] = None if values is None else values[name]
        return row

    def _join(self, rows: tuple[list, list]) -> list[dict]:
        left_rows, right_rows = rows
        kind = self.query.kind
        joined = []
        right_matched = [False] * len(right_rows)
        for left in left_rows:
            matched = False
            for j, right in enumerate(right_rows):
                if self._matches(left, right):
                    matched = right_matched[j] = True
                    joined.append(self._joined(left, right))
            if not matched and kind in ("left", "full"):
                joined.append(self._joined(left, None))
        if kind in ("right", "full"):
            for j, right in enumerate(right_rows):
                if not right_matched[j]:
                    joined.append(self._joined(None, right))
        if self.where is not None:
            joined = [row for row in joined if self.where(row) is True]
        return joined

    def _emit(self, fired: list[tuple[tuple[int, int] | None, list[dict]]]) -> list[dict]:
        """Rows of the fired windows, window by window: one per joined row, or one per group
        (the window oracle's `_rows` over each group's aggregate arguments)."""
        out: list[dict] = []
        self.tolerances = []
        for bounds, joined in fired:
            if not self.query.aggregating:
                for row in joined:
                    env = dict(row)
                    if bounds is not None:
                        env["$bound"] = {"start": bounds[0], "end": bounds[1]}
                    out.append({name: output(env) for name, output in self.outputs})
                    self.tolerances.append({})
                continue
            assert bounds is not None
            groups: dict[tuple, list] = {}
            for row in joined:
                key = tuple(row[k] for k in self.query.keys)
                args = tuple(None if a is None else a(row) for a in self.groups.arguments)
                groups.setdefault(key, []).append(args)
            entries = [(0, key, bounds[0], bounds[1], tuples) for key, tuples in groups.items()]
            out += self.groups._rows(entries)
            self.tolerances += self.groups.tolerances
        return out


def canonical(rows: list[dict], tolerances: list[dict] | None = None) -> list:
    """Rows in a fixed order: row order inside one window is unspecified, so tests compare
    rows sorted by (window bounds if output, then every value, NULL first)."""

    def value_key(value: Any) -> tuple:
        if value is None:
            return (0, "")
        if isinstance(value, float):
            return (1, f"{value:.9g}")
        return (2, repr(value))

    order = sorted(
        range(len(rows)),
        key=lambda i: tuple(value_key(v) for v in rows[i].values()),
    )
    if tolerances is None:
        return [rows[i] for i in order]
    return [rows[i] for i in order], [tolerances[i] for i in order]
