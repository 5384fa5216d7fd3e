"""A plain, obviously correct evaluator of DESIGN section 3, for tests only.

It shares no code with the engine: nothing here imports mangonel (a test checks), so a bug in
the engine's expression evaluator, type rules or aggregation cannot hide by appearing on both
sides. The oracle reads its own description of a query (`OracleQuery`: columns, window,
keys, aggregates with argument expressions, WHERE, HAVING, outputs), where expressions are
small JSON-friendly lists (`["+", ["col", "x"], ["lit", 1]]`, see `compile_expression`).
The fuzzer (tests/fuzz_cases.py) writes that description directly; tests/plans.py translates
a hand-built engine plan into it for the older hand-written tests.

Per-tuple loops over Python lists and dicts. Decisions it encodes (the engine documents the
same in mangonel.runtime.operators.window and docs/semantics.md): NULL event times are dropped
and counted whatever WHERE says; late tuples are counted only if they passed WHERE; rows of
one firing are ordered by window, then key in the order keys first contributed a tuple;
count windows span [first tuple's ts, last tuple's ts + 1). Each window kind's membership,
lateness and firing (time, CUMULATE, count, session) is in tests/oracle_windows.py.

Special values follow Spark SQL (non-ANSI): BIGINT/INT arithmetic wraps; `/` is in DOUBLE
and division or modulo by zero is NULL; comparisons treat NaN as equal to itself and larger
than every other value; AVG is computed in DOUBLE; MIN/MAX put NaN above everything;
VAR_*/STDDEV_* of data holding an infinity or NaN are NaN; SUM of BIGINT wraps.

Modules: tests/oracle_expressions.py (types, scalar expressions), tests/oracle_aggregates.py
(aggregates over a window's values), tests/oracle_windows.py (the window kinds),
tests/oracle_compare.py (engine rows against the oracle's); this one holds the query, the
driver `Oracle`, and re-exports what tests import from `oracle`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oracle_aggregates import (
    AGGREGATE_FUNCTIONS,
    APPROXIMATE_AGGREGATES,
    BOOLEAN_AGGREGATES,
    HOLISTIC_AGGREGATES,
    INTEGER_AGGREGATES,
    PYTHON_FUNCTIONS,
    REL_TOL,
    Approximate,
    aggregate_type,
    aggregate_value,
    function_name,
    register_python_function,
)
from oracle_compare import first_difference, rows_close
from oracle_expressions import (
    INT_BITS,
    NUMERIC_RANK,
    Expr,
    Scope,
    compile_expression,
    literal_type,
    type_of,
)
from oracle_windows import window_kind

__all__ = [
    "AGGREGATE_FUNCTIONS",
    "APPROXIMATE_AGGREGATES",
    "BOOLEAN_AGGREGATES",
    "HOLISTIC_AGGREGATES",
    "INTEGER_AGGREGATES",
    "INT_BITS",
    "NUMERIC_RANK",
    "PYTHON_FUNCTIONS",
    "REL_TOL",
    "Approximate",
    "Expr",
    "Oracle",
    "OracleQuery",
    "Scope",
    "aggregate_type",
    "aggregate_value",
    "compile_expression",
    "first_difference",
    "function_name",
    "literal_type",
    "register_python_function",
    "rows_close",
    "rows_of",
    "type_of",
]


@dataclass(frozen=True)
class OracleQuery:
    """What the oracle needs to know of a window query; types are lower-case SQL names
    (timestamp, bigint, int, double, string, boolean). Times and sizes in microseconds
    (time windows) or tuples (count windows); `delay` is the effective watermark delay."""

    columns: dict[str, str]
    event_time: str
    # "time" | "count" | "cumulate" (size: the max size, slide: the step) | "session"
    # (size = slide = the gap)
    kind: str
    size: int
    slide: int
    delay: int
    keys: tuple[str, ...] = ()
    aggregates: tuple[tuple[str, Expr | None], ...] = ()
    where: Expr | None = None
    having: Expr | None = None
    outputs: tuple[tuple[str, Expr], ...] = ()

    def to_json(self) -> dict:
        return {
            "columns": dict(self.columns),
            "event_time": self.event_time,
            "kind": self.kind,
            "size": self.size,
            "slide": self.slide,
            "delay": self.delay,
            "keys": list(self.keys),
            "aggregates": [[f, a] for f, a in self.aggregates],
            "where": self.where,
            "having": self.having,
            "outputs": [[n, e] for n, e in self.outputs],
        }

    @classmethod
    def from_json(cls, data: dict) -> OracleQuery:
        return cls(
            columns=dict(data["columns"]),
            event_time=data["event_time"],
            kind=data["kind"],
            size=int(data["size"]),
            slide=int(data["slide"]),
            delay=int(data["delay"]),
            keys=tuple(data.get("keys", ())),
            aggregates=tuple((f, a) for f, a in data.get("aggregates", ())),
            where=data.get("where"),
            having=data.get("having"),
            outputs=tuple((n, e) for n, e in data.get("outputs", ())),
        )


def rows_of(batch: Any) -> list[dict]:
    """Rows of a pyarrow RecordBatch/Table (timestamps as int microseconds), or the list of
    row dicts itself."""
    if isinstance(batch, list):
        return batch
    import pyarrow as pa

    columns = [c.cast(pa.int64()) if pa.types.is_timestamp(c.type) else c for c in batch.columns]
    return pa.table(columns, names=batch.schema.names).to_pylist()


class Oracle:
    """Feed batches with `process` (returns the rows that fire after it), then `finish`.
    After each call, `tolerances` holds one dict per returned row: column -> absolute
    tolerance, for floating results that the engine may round differently."""

    def __init__(self, query: OracleQuery) -> None:
        self.query = query
        aggregate_types = []
        self.arguments = []
        self.integral = []
        row_scope = Scope(dict(query.columns))
        for function, argument in query.aggregates:
            if function_name(function) not in AGGREGATE_FUNCTIONS:
                raise ValueError(f"oracle: unknown aggregate {function!r}")
            argument_type = None if argument is None else type_of(argument, row_scope)
            aggregate_types.append(aggregate_type(function, argument_type))
            self.integral.append(argument_type in INT_BITS)
            self.arguments.append(
                None if argument is None else compile_expression(argument, row_scope)
            )
        self.where = None if query.where is None else compile_expression(query.where, row_scope)
        group_scope = Scope({k: query.columns[k] for k in query.keys}, aggregate_types)
        self.having = (
            None if query.having is None else compile_expression(query.having, group_scope)
        )
        self.outputs = [(n, compile_expression(e, group_scope), e) for n, e in query.outputs]
        self.windows = window_kind(query.kind, query.size, query.slide)
        self.watermark: int | None = None
        self.max_ts: int | None = None
        self.tuples_in = 0
        self.late = 0
        # every late row: its columns, `late_reason` and `late_watermark` (the engine's
        # `late_rows()` must return exactly these, in this order)
        self.late_rows: list[dict] = []
        self.null_event_time = 0
        self.windows_fired = 0  # (window, key) results, before HAVING
        self.rows_out = 0  # rows emitted, after HAVING
        self.tolerances: list[dict] = []
        self.key_order: dict[tuple, int] = {}

    def process(self, batch: Any) -> list[dict]:
        q = self.query
        for row in rows_of(batch):
            self.tuples_in += 1
            ts = row[q.event_time]
            if ts is None:
                self.null_event_time += 1
                continue
            self.max_ts = ts if self.max_ts is None else max(self.max_ts, ts)
            if self.where is not None and self.where(row) is not True:
                continue
            late = self.windows.late(ts, self.watermark)
            if late is not None:
                self.late += 1
                self.late_rows.append(
                    {**row, "late_reason": late, "late_watermark": self.watermark}
                )
                continue
            key = tuple(row[k] for k in q.keys)
            self.key_order.setdefault(key, len(self.key_order))
            args = tuple(None if a is None else a(row) for a in self.arguments)
            self.windows.add(ts, key, args, self.watermark)
        if self.max_ts is not None:
            candidate = self.max_ts - q.delay
            if self.watermark is None or candidate > self.watermark:
                self.watermark = candidate
        return self._fire(final=False)

    def finish(self) -> list[dict]:
        return self._fire(final=True)

    def _fire(self, final: bool) -> list[dict]:
        fired = self.windows.fire(self.watermark, final, self.key_order)
        fired.sort(key=lambda entry: entry[0])
        return self._rows([entry[:5] for entry in fired], [entry[5] for entry in fired])

    def _rows(self, fired: list, times: list | None = None) -> list[dict]:
        """Result rows of fired (order, key, start, end, argument tuples) entries; `times`:
        per entry its tuples' event times (None: unknown, as for the join oracle's groups)."""
        rows, self.tolerances = [], []
        self.windows_fired += len(fired)
        functions = [f for f, _ in self.query.aggregates]
        for number, (_, key, start, end, tuples) in enumerate(fired):
            aggregates, tolerances = [], []
            for position, function in enumerate(functions):
                value, tolerance = aggregate_value(
                    function,
                    [args[position] for args in tuples],
                    len(tuples),
                    self.integral[position],
                    None if times is None else times[number],
                )
                aggregates.append(value)
                tolerances.append(tolerance)
            env = dict(zip(self.query.keys, key, strict=True))
            env["$agg"] = aggregates
            # window_time: the last microsecond inside the window (Spark's and Flink's)
            env["$bound"] = {"start": start, "end": end, "time": end - 1}
            if self.having is not None and self.having(env) is not True:
                continue
            row, tolerance = {}, {}
            for name, output, expr in self.outputs:
                row[name] = output(env)
                if expr[0] == "agg" and tolerances[expr[1]]:
                    tolerance[name] = tolerances[expr[1]]
            rows.append(row)
            self.tolerances.append(tolerance)
        self.rows_out += len(rows)
        return rows
