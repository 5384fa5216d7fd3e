"""Random join cases for the fuzzer (tests/fuzzer.py draws one in every `JOIN_EVERY` case
seeds) and tests/test_join_cpu.py: two streams with a random arrival interleaving,
disordered and NULL times, NULL and skewed keys, sliding and tumbling windows, inner and
outer joins, a residual predicate and WHERE or not, aggregated or joined rows, both join
algorithms, per-stream watermark delays, a snapshot/restore at a random arrival. Checked
against tests/oracle_join.py; a failing case shrinks by dropping arrivals, then rows."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

import pyarrow as pa
from oracle import rows_of
from oracle_join import JoinInput, JoinOracle, JoinOracleQuery, canonical

S = 1_000_000
JOIN_EVERY = 5  # the fuzzer draws a join case for case seeds divisible by this
SCHEMAS = {
    "clicks": pa.schema([("ts", pa.timestamp("us")), ("k", pa.int64()), ("x", pa.int64())]),
    "views": pa.schema([("ts", pa.timestamp("us")), ("k", pa.int32()), ("y", pa.float64())]),
}
COLUMNS = {
    "clicks": {"ts": "timestamp", "k": "bigint", "x": "bigint"},
    "views": {"ts": "timestamp", "k": "int", "y": "double"},
}
ROWS_OUT = (("x", ["col", "l.x"]), ("y", ["col", "r.y"]), ("start", ["bound", "start"]))
AGGREGATED_OUT = (
    ("k", ["col", "l.k"]),
    ("start", ["bound", "start"]),
    ("n", ["agg", 0]),
    ("s", ["agg", 1]),
    ("m", ["agg", 2]),
)
JOIN_WORDS = {"inner": "JOIN", "left": "LEFT JOIN", "right": "RIGHT JOIN", "full": "FULL JOIN"}
# how the query is written: the CQL clause, Flink's window join (window_join_syntax.py) of
# two table functions, or of `(SELECT * FROM TABLE(..))` subqueries (Flink's docs' form)
FORMS = ("clause", "flink", "flink-subquery")


@dataclass(frozen=True)
class JoinCase:
    seed: int | None
    size: int
    slide: int
    kind: str
    delays: tuple[int, int]
    residual: bool
    where: bool
    aggregated: bool
    integers: bool  # aggregates: COUNT(*), COUNT(l.x), SUM(l.x) (credited by differences)
    algorithm: str
    arrivals: tuple[tuple[str, tuple[dict, ...]], ...]
    restore_at: int | None  # arrivals before the snapshot/restore; None: none
    form: str = "clause"  # one of FORMS; Flink's only where SLIDE divides RANGE (as HOP's)
    self_join: bool = False  # clicks joined with itself (every arrival is of clicks)

    @property
    def right(self) -> str:
        """The right side's stream."""
        return "clicks" if self.self_join else "views"

    @property
    def right_value(self) -> str:
        """The right side's value column, qualified."""
        return "r.x" if self.self_join else "r.y"

    @property
    def right_delay(self) -> int:
        """Which of `delays` the right side takes (a self-join's sides share one)."""
        return 0 if self.self_join else 1

    @property
    def rows(self) -> int:
        return sum(len(rows) for _, rows in self.arrivals)

    def ddl(self) -> list[str]:
        return [
            f"CREATE STREAM {name} (ts TIMESTAMP, k {'BIGINT' if name == 'clicks' else 'INT'}, "
            f"{'x BIGINT' if name == 'clicks' else 'y DOUBLE'}) WITH (event_time = 'ts', "
            f"watermark = '{delay} microseconds')"
            for name, delay in zip(("clicks", "views"), self.delays, strict=True)
        ]

    def query(self) -> str:
        if self.form != "clause":
            return self._flink_query()
        window = f"[RANGE {self.size} MICROSECONDS SLIDE {self.slide} MICROSECONDS]"
        value = self.right_value
        on = "l.k = r.k" + (f" AND {value} > l.x" if self.residual else "")
        where = " WHERE l.x IS NULL OR l.x < 7" if self.where else ""
        if self.aggregated:
            calls = (
                "COUNT(l.x) AS s, SUM(l.x) AS m"
                if self.integers
                else f"SUM({value}) AS s, MIN(l.x) AS m"
            )
            select = f"l.k, window_start AS start, COUNT(*) AS n, {calls}"
            tail = " GROUP BY l.k"
        else:
            select, tail = f"l.x, {value} AS y, window_start AS start", ""
        sources = f"clicks {window} AS l {JOIN_WORDS[self.kind]} {self.right} {window} AS r ON {on}"
        return f"SELECT {select} FROM {sources}{where}{tail}"

    def _flink_query(self) -> str:
        """The query as Flink's window join: the bounds equated in ON (in the middle, so the
        key equality and the residual are on both sides of them), `l.window_start` outputs
        `start` (the bound of a side present in every output row, as Flink's would be NULL
        where the side is missing; the FULL join's COALESCEs both), GROUP BY with both
        bounds."""
        us = "MICROSECOND"
        if self.slide == self.size:
            function = f"TUMBLE(TABLE {{}}, DESCRIPTOR(ts), INTERVAL '{self.size}' {us})"
        else:
            function = (
                f"HOP(TABLE {{}}, DESCRIPTOR(ts), INTERVAL '{self.slide}' {us}, "
                f"INTERVAL '{self.size}' {us})"
            )

        def side(name: str, alias: str) -> str:
            text = f"TABLE({function.format(name)})"
            return (
                f"(SELECT * FROM {text}) {alias}"
                if self.form == "flink-subquery"
                else (f"{text} AS {alias}")
            )

        value = self.right_value
        on = "l.k = r.k AND l.window_start = r.window_start AND r.window_end = l.window_end" + (
            f" AND {value} > l.x" if self.residual else ""
        )
        where = " WHERE l.x IS NULL OR l.x < 7" if self.where else ""
        start = {
            "inner": "l.window_start",
            "left": "l.window_start",
            "right": "r.window_start",
            "full": "COALESCE(l.window_start, r.window_start)",
        }[self.kind]
        if self.aggregated:
            calls = (
                "COUNT(l.x) AS s, SUM(l.x) AS m"
                if self.integers
                else f"SUM({value}) AS s, MIN(l.x) AS m"
            )
            select = f"l.k, l.window_start AS start, COUNT(*) AS n, {calls}"
            tail = " GROUP BY l.k, l.window_start, r.window_end"
        else:
            select, tail = f"l.x, {value} AS y, {start} AS start", ""
        sources = f"{side('clicks', 'l')} {JOIN_WORDS[self.kind]} {side(self.right, 'r')} ON {on}"
        return f"SELECT {select} FROM {sources}{where}{tail}"

    def oracle_query(self) -> JoinOracleQuery:
        value = ["col", self.right_value]
        extra: dict = {"outputs": (*ROWS_OUT[:1], ("y", value), *ROWS_OUT[2:])}
        if self.aggregated:
            extra = {
                "keys": ("l.k",),
                "aggregates": (
                    ("count_star", None),
                    ("count", ["col", "l.x"]) if self.integers else ("sum", value),
                    ("sum", ["col", "l.x"]) if self.integers else ("min", ["col", "l.x"]),
                ),
                "outputs": AGGREGATED_OUT,
            }
        where = ["or", ["is_null", ["col", "l.x"]], ["<", ["col", "l.x"], ["lit", 7]]]
        return JoinOracleQuery(
            JoinInput("l", "clicks", COLUMNS["clicks"], "ts", self.delays[0]),
            JoinInput("r", self.right, COLUMNS[self.right], "ts", self.delays[self.right_delay]),
            self.kind,
            self.size,
            self.slide,
            ("k",),
            ("k",),
            residual=[">", value, ["col", "l.x"]] if self.residual else None,
            where=where if self.where else None,
            **extra,
        )

    def batches(self) -> list[tuple[str, pa.RecordBatch]]:
        return [
            (name, pa.RecordBatch.from_pylist(list(rows), schema=SCHEMAS[name]))
            for name, rows in self.arrivals
        ]

    def describe(self) -> str:
        lines = [
            f"-- join case seed {self.seed}, {self.algorithm}, restore_at {self.restore_at}, "
            f"form {self.form}, self_join {self.self_join}"
        ]
        lines += [*self.ddl(), self.query()]
        lines += [f"-- {name}: {list(rows)}" for name, rows in self.arrivals]
        return "\n".join(lines)


def _rows(rng: random.Random, name: str, n: int, base: int, skew: bool) -> tuple[dict, ...]:
    rows = []
    for _ in range(n):
        ts = None if rng.random() < 0.03 else base + rng.randrange(-2 * S, S)
        key = 0 if skew and rng.random() < 0.7 else rng.choice([None, *range(6)])
        row = {"ts": ts, "k": key}
        if name == "clicks":
            row["x"] = None if rng.random() < 0.1 else rng.randrange(-5, 10)
        else:
            row["y"] = None if rng.random() < 0.1 else round(rng.uniform(-3, 30), 2)
        rows.append(row)
    return tuple(rows)


def draw_join_case(seed: int) -> JoinCase:
    rng = random.Random(seed)
    size = rng.choice([S, S // 2, 2 * S, 3 * S // 10])
    arrivals = []
    clock = 0
    skew = rng.random() < 0.3
    for _ in range(rng.randrange(2, 9)):
        name = rng.choice(["clicks", "views"])
        clock += rng.randrange(0, S)
        arrivals.append((name, _rows(rng, name, rng.randrange(0, 12), clock, skew)))
    case = JoinCase(
        seed=seed,
        size=size,
        slide=rng.choice(
            [size, size // 2, size // 4, size * 2 // 5]
        ),  # 2/5: SLIDE not dividing RANGE
        kind=rng.choice(list(JOIN_WORDS)),
        delays=(rng.choice([0, S // 4, S]), rng.choice([0, S // 2])),
        residual=rng.random() < 0.4,
        where=rng.random() < 0.3,
        aggregated=rng.random() < 0.5,
        integers=rng.random() < 0.5,
        algorithm=rng.choice(["hash", "sort-merge"]),
        arrivals=tuple(arrivals),
        restore_at=rng.randrange(len(arrivals) + 1) if rng.random() < 0.4 else None,
    )
    # drawn last, so every other draw of a seed is what it was before the Flink form
    if case.size % case.slide == 0:
        case = replace(case, form=rng.choice(["clause", "clause", *FORMS[1:]]))
    if rng.random() < 0.2:  # clicks joined with itself: every arrival becomes one of clicks
        arrivals = [
            (name, rows if name == "clicks" else _as_clicks(rows)) for name, rows in arrivals
        ]
        case = replace(
            case, self_join=True, arrivals=tuple(("clicks", rows) for _, rows in arrivals)
        )
    return case


def _as_clicks(rows: tuple[dict, ...]) -> tuple[dict, ...]:
    """Rows of views as rows of clicks (y to a small whole x)."""
    return tuple(
        {"ts": r["ts"], "k": r["k"], "x": None if r["y"] is None else int(r["y"]) % 15 - 5}
        for r in rows
    )


def engine_join_rows(case: JoinCase) -> tuple[list[dict], dict]:
    """The engine's rows (and its late counts by input) over the case's arrivals, with the
    snapshot/restore where the case says."""
    import mangonel
    from mangonel.runtime.local.query import LocalQuery

    session = mangonel.Session("cpu", join_algorithm=case.algorithm)
    for statement in case.ddl():
        session.execute(statement)
    query = session.sql(case.query())
    runner = LocalQuery(query.plan)
    out = []
    for position, (name, batch) in enumerate(case.batches()):
        if position == case.restore_at:
            saved = runner.snapshot()
            runner = LocalQuery(query.plan)
            runner.restore(saved)
        out += runner.process(batch, name)  # by name: a self-join's arrivals feed both sides
    if case.restore_at == len(case.arrivals):
        saved = runner.snapshot()
        runner = LocalQuery(query.plan)
        runner.restore(saved)
    out += runner.finish()
    rows = rows_of(pa.Table.from_batches(out, schema=runner.schema))
    return rows, dict(runner.metrics.late_by_input)


def oracle_join_rows(case: JoinCase) -> tuple[list[dict], dict]:
    oracle = JoinOracle(case.oracle_query())
    rows = []
    for name, batch in case.arrivals:
        rows += oracle.process(name, list(batch))
    rows += oracle.finish()
    return rows, oracle.late


def check_join(case: JoinCase) -> str | None:
    """None when the engine gives the oracle's rows (row order within a window aside, windows
    in order) and late counts, else what differs."""
    try:
        got, late = engine_join_rows(case)
    except Exception as error:  # an engine error on valid input is a failure too
        return f"{type(error).__name__}: {error}"
    want, want_late = oracle_join_rows(case)
    starts = [row["start"] for row in got]
    if starts != sorted(starts):
        return "windows out of order"
    got_sorted, want_sorted = canonical(got), canonical(want)
    if len(got_sorted) != len(want_sorted):
        return f"{len(got_sorted)} rows where {len(want_sorted)} were expected"
    for a, e in zip(got_sorted, want_sorted, strict=True):
        for name in e:
            x, y = a.get(name), e[name]
            if isinstance(y, float) and isinstance(x, float):
                if abs(x - y) > 1e-9 * max(1.0, abs(y)):
                    return f"row {a} where {e} was expected"
            elif x != y:
                return f"row {a} where {e} was expected"
    if late != want_late:
        return f"late rows {late} where {want_late} were expected"
    return None


def shrink_join(case: JoinCase, failure: str, budget: int = 400) -> JoinCase:
    """A smaller case that still fails: drop arrivals, then single rows, while it fails."""
    changed = True
    while changed and budget > 0:
        changed = False
        candidates = [_without_arrival(case, i) for i in range(len(case.arrivals))]
        candidates += [
            _without_row(case, i, j)
            for i, (_, rows) in enumerate(case.arrivals)
            for j in range(len(rows))
        ]
        for candidate in candidates:
            budget -= 1
            if budget <= 0:
                break
            if check_join(candidate) is not None:
                case, changed = candidate, True
                break
    return case


def _without_arrival(case: JoinCase, i: int) -> JoinCase:
    arrivals = case.arrivals[:i] + case.arrivals[i + 1 :]
    restore = case.restore_at
    if restore is not None:
        restore = min(restore - (i < restore), len(arrivals))
    return replace(case, arrivals=arrivals, restore_at=restore)


def _without_row(case: JoinCase, i: int, j: int) -> JoinCase:
    name, rows = case.arrivals[i]
    arrivals = list(case.arrivals)
    arrivals[i] = (name, rows[:j] + rows[j + 1 :])
    return replace(case, arrivals=tuple(arrivals))
