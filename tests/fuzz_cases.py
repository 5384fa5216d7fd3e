"""Random window-query cases for the fuzzer, each drawn from one integer seed.

A case is structured (stream columns, window, keys, aggregates with argument expressions,
WHERE, HAVING, outputs, batches of rows, snapshot points); `ddl()` and `query()` render it as
SQL for the engine, and `oracle_query()` describes it to the oracle, which never sees the SQL.
`Case.to_json()` is the regression format of tests/regressions/*.json.

The space is wider than CI's derandomised set and leans toward the shapes that found bugs
before: gaps of a window or more in event time, key counts crossing a power of two between
batches, 1-pane tumbling windows, many batches.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field, replace

from oracle import OracleQuery, Scope, aggregate_type, type_of
from oracle_arrays import array_name

STREAM = "s"
COLUMNS = {
    "ts": "timestamp",
    "k": "bigint",
    "sk": "string",
    "x": "bigint",
    "n": "int",
    "v": "double",
    "ok": "boolean",
}
KEY_CHOICES = {"int": ("k",), "string": ("sk",), "two": ("sk", "k"), "none": ()}
SPARSE_LIMIT = 2_000
CELL_LIMIT = 4_000_000  # (key x pane) cells of the engine's dense state, see _bound_dense_state
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
# Aggregates whose value is exact (no rounding), so HAVING and expressions over them compare
# exactly between the engine and the oracle.
EXACT = ("count_star", "count", "min", "max")
SQL_FUNCTION = {
    "count": "COUNT",
    "sum": "SUM",
    "min": "MIN",
    "max": "MAX",
    "avg": "AVG",
    "var_pop": "VAR_POP",
    "var_samp": "VAR_SAMP",
    "stddev_pop": "STDDEV_POP",
    "stddev_samp": "STDDEV_SAMP",
    "bool_and": "BOOL_AND",
    "bool_or": "BOOL_OR",
}
BOOLEAN_FUNCTIONS = ("bool_and", "bool_or")
# holistic functions, drawn in some cases (`_aggregates`): the oracle's names (fractions after
# a colon) and how each is spelled in SQL
HOLISTIC_FUNCTIONS = ("median", "percentile_cont", "percentile", "percentile_disc")
HOLISTIC_CASE_SHARE = 0.15
# share of cases drawn as session windows ([SESSION GAP g]; the rest time or count windows)
SESSION_SHARE = 0.1
FRACTIONS = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
# the approximate ones (named "approx_count_distinct:<rsd>", "approx_percentile:<p>:<accuracy>";
# the oracle checks them within their sketch's bound: `oracle.Approximate`). Small accuracies
# make GK summaries compress within a fuzz case's windows; rsd 0.02 and below are left out of
# the draws (4 KiB and more per (key, pane) with 10,000 keys is the engine's memory, not a
# case worth the time).
APPROXIMATE = ("approx_count_distinct", "approx_percentile")
APPROXIMATE_RSDS = (0.05, 0.1, 0.3)
APPROXIMATE_ACCURACIES = (10000, 100, 10, 3)
# share of the percentiles (not MEDIAN) drawn over an ARRAY of p (`PERCENTILE_CONT(ARRAY(0.1,
# 0.5)) WITHIN GROUP ...`, `APPROX_PERCENTILE(x, ARRAY(..), a)`), of 1 to ARRAY_MOST ps
# (repeated and descending ones too); the oracle side is tests/oracle_arrays.py
ARRAY_SHARE = 0.35
ARRAY_MOST = 4


def _fraction_sql(fraction: str) -> str:
    """A p as SQL: a number, or an ARRAY of them (the oracle's "[0.1,0.5]")."""
    if not fraction.startswith("["):
        return fraction
    return "ARRAY(" + ", ".join(repr(float(p)) for p in json.loads(fraction)) + ")"


def holistic_sql(function: str, argument: str) -> str | None:
    """The SQL of a holistic aggregate over an argument already in SQL; None for others."""
    name, _, fraction = function.partition(":")
    if name == "median":
        return f"MEDIAN({argument})"
    if name == "count_distinct":
        return f"COUNT(DISTINCT {argument})"
    if name == "percentile":
        return f"PERCENTILE({argument}, {_fraction_sql(fraction)})"
    if name in ("percentile_cont", "percentile_disc"):
        return f"{name.upper()}({_fraction_sql(fraction)}) WITHIN GROUP (ORDER BY {argument})"
    if name == "approx_count_distinct":
        return f"APPROX_COUNT_DISTINCT({argument}, {fraction})"
    if name == "approx_percentile":
        p, accuracy = fraction.split(":")
        return f"APPROX_PERCENTILE({argument}, {_fraction_sql(p)}, {accuracy})"
    return None


_SQL_OPS = {"+", "-", "*", "/", "%", "=", "<>", "<", "<=", ">", ">="}


@dataclass
class Case:
    """One fuzz case. Times in microseconds; `snapshot_before` lists batch positions before
    which the runner snapshots the query state and restores it into a fresh query
    (len(batches) means before end of input)."""

    seed: int | None
    kind: str
    size: int
    slide: int
    declared_delay: int  # CREATE STREAM ... WITH (watermark = ...)
    query_delay: int | None  # [... WATERMARK d] in the query, which overrides it
    keys: tuple[str, ...]
    aggregates: list[tuple[str, list | None]]
    where: list | None
    having: list | None
    outputs: list[tuple[str, list]]
    batches: list[list[dict]]
    snapshot_before: list[int] = field(default_factory=list)
    windows_per_batch: int | None = None
    columns: dict[str, str] = field(default_factory=lambda: dict(COLUMNS))
    special_values: bool = False

    @property
    def delay(self) -> int:
        return self.declared_delay if self.query_delay is None else self.query_delay

    @property
    def rows(self) -> int:
        return sum(len(b) for b in self.batches)

    def oracle_query(self) -> OracleQuery:
        return OracleQuery(
            columns=dict(self.columns),
            event_time="ts",
            kind=self.kind,
            size=self.size,
            slide=self.slide,
            delay=self.delay,
            keys=tuple(self.keys),
            aggregates=tuple((f, a) for f, a in self.aggregates),
            where=self.where,
            having=self.having,
            outputs=tuple((n, e) for n, e in self.outputs),
        )

    def ddl(self) -> str:
        columns = ", ".join(f"{name} {kind.upper()}" for name, kind in self.columns.items())
        return (
            f"CREATE STREAM {STREAM} ({columns}) WITH (event_time = 'ts', "
            f"watermark = '{self.declared_delay} microseconds')"
        )

    def query(self) -> str:
        if self.kind == "time":
            window = f"RANGE {self.size} MICROSECONDS"
            # tumbling windows both ways: without SLIDE, and (odd sizes) with SLIDE = RANGE
            if self.slide != self.size or self.size % 2:
                window += f" SLIDE {self.slide} MICROSECONDS"
        elif self.kind == "session":
            window = f"SESSION GAP {self.size} MICROSECONDS"
        else:
            window = f"ROWS {self.size} SLIDE {self.slide}"
        if self.query_delay is not None:
            window += f" WATERMARK {self.query_delay} MICROSECONDS"
        select = ", ".join(f"{self.sql(e)} AS {n}" for n, e in self.outputs)
        text = f"SELECT {select} FROM {STREAM} [{window}]"
        if self.where is not None:
            text += f" WHERE {self.sql(self.where)}"
        if self.keys:
            text += " GROUP BY " + ", ".join(self.keys)
        if self.having is not None:
            text += f" HAVING {self.sql(self.having)}"
        return text

    def sql(self, expr: list) -> str:
        """An expression in SQL, fully parenthesised (the oracle's list form is the truth)."""
        op = expr[0]
        if op == "col":
            return expr[1]
        if op == "lit":
            value = expr[1]
            if value is None:
                return "NULL"
            if isinstance(value, bool):
                return "TRUE" if value else "FALSE"
            if isinstance(value, str):
                return "'" + value.replace("'", "''") + "'"
            return f"({value})" if value < 0 else str(value)
        if op == "agg":
            function, argument = self.aggregates[expr[1]]
            if function == "count_star":
                return "COUNT(*)"
            return holistic_sql(function, self.sql(argument)) or (
                f"{SQL_FUNCTION[function]}({self.sql(argument)})"
            )
        if op == "bound":
            return f"window_{expr[1]}"
        args = [self.sql(a) for a in expr[1:]]
        if op in _SQL_OPS:
            return f"({args[0]} {op} {args[1]})"
        if op in ("and", "or"):
            return "(" + f" {op.upper()} ".join(args) + ")"
        if op == "not":
            return f"(NOT {args[0]})"
        if op == "neg":
            return f"(-{args[0]})"
        if op == "is_null":
            return f"({args[0]} IS NULL)"
        if op == "is_not_null":
            return f"({args[0]} IS NOT NULL)"
        return f"{op.upper()}({', '.join(args)})"  # abs, coalesce, if

    def describe(self) -> str:
        """DDL, query and batches: what a person needs to reproduce the case by hand."""
        lines = [self.ddl() + ";", self.query() + ";"]
        if self.windows_per_batch is not None:
            lines.append(f"-- Session(windows_per_batch={self.windows_per_batch})")
        if self.snapshot_before:
            lines.append(f"-- snapshot + restore before batches {self.snapshot_before}")
        for position, batch in enumerate(self.batches):
            lines.append(f"-- batch {position} ({len(batch)} rows)")
            lines.extend(f"--   {row}" for row in batch)
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {
            "seed": self.seed,
            "ddl": self.ddl(),
            "query": self.query(),
            "batches": self.batches,
            "snapshot_before": self.snapshot_before,
            "windows_per_batch": self.windows_per_batch,
            "oracle": self.oracle_query().to_json(),
            "special_values": self.special_values,
        }


# ---------------------------------------------------------------------------------------
# Drawing a case


def _int_literal(rng: random.Random, low: int, high: int) -> list:
    return ["lit", rng.randint(low, high)]


def _argument(rng: random.Random, function: str) -> list:
    """An aggregate argument: mostly a column, sometimes arithmetic over columns; for
    BOOL_AND/BOOL_OR the boolean column or a predicate."""
    if function in BOOLEAN_FUNCTIONS:
        return ["col", "ok"] if rng.random() < 0.4 else _predicate(rng, 1)
    if function in ("min", "max") and rng.random() < 0.15:
        return ["col", "ts"]
    if function == "count" and rng.random() < 0.2:  # COUNT takes any type
        return ["col", rng.choice(["sk", "ok", "ts"])]
    column = ["col", rng.choice(["x", "n", "v", "v", "x"])]
    roll = rng.random()
    if roll < 0.55:
        return column
    forms = [
        lambda: ["+", ["col", "x"], ["col", "n"]],
        lambda: ["*", ["col", "v"], ["col", "n"]],
        lambda: ["-", ["col", "v"], _int_literal(rng, -5, 5)],
        lambda: ["*", ["col", "x"], _int_literal(rng, -3, 3)],
        lambda: ["/", ["col", "x"], ["col", "n"]],
        lambda: ["%", ["col", "x"], _int_literal(rng, -7, 7)],
        lambda: ["%", ["col", "v"], _int_literal(rng, 1, 7)],
        lambda: ["neg", ["col", rng.choice(["v", "n"])]],
        lambda: ["abs", ["col", rng.choice(["x", "v"])]],
        lambda: ["coalesce", ["col", "v"], ["col", "x"]],
        lambda: ["if", ["col", "ok"], ["col", "x"], ["col", "n"]],
        lambda: ["+", ["col", "n"], _int_literal(rng, 1, 9)],
    ]
    return rng.choice(forms)()


def _predicate(rng: random.Random, depth: int = 0) -> list:
    """A WHERE predicate over the stream's columns (NULLs included)."""
    roll = rng.random()
    if depth < 1 and roll < 0.25:
        op = rng.choice(["and", "or"])
        return [op, _predicate(rng, depth + 1), _predicate(rng, depth + 1)]
    if depth < 1 and roll < 0.3:
        return ["not", _predicate(rng, depth + 1)]
    forms = [
        lambda: ["col", "ok"],
        lambda: [rng.choice([">", "<=", "<>"]), ["col", "x"], _int_literal(rng, -500, 500)],
        lambda: [rng.choice(["<", ">="]), ["col", "v"], _int_literal(rng, -50, 50)],
        lambda: [rng.choice(["=", "<>"]), ["col", "sk"], ["lit", f"s{rng.randint(0, 5)}"]],
        lambda: ["is_not_null", ["col", rng.choice(["k", "v", "x"])]],
        lambda: ["=", ["%", ["col", "x"], _int_literal(rng, 2, 4)], ["lit", 0]],
        lambda: [">", ["col", "v"], ["col", "x"]],
    ]
    return rng.choice(forms)()


def _having(rng: random.Random, aggregates: list, keys: tuple[str, ...]) -> list | None:
    """A HAVING predicate over exact aggregates and keys (rounding cannot flip it)."""
    exact = _exact_numeric(aggregates)
    forms = []
    if exact:
        forms.append(
            lambda: [
                rng.choice([">", "<=", "<>"]),
                ["agg", rng.choice(exact)],
                ["lit", rng.randint(-5, 5)],
            ]
        )
    if "k" in keys:
        forms.append(lambda: [">", ["col", "k"], _int_literal(rng, 0, 30)])
    if "sk" in keys:
        forms.append(lambda: ["<>", ["col", "sk"], ["lit", f"s{rng.randint(0, 5)}"]])
    if not forms:
        return None
    first = rng.choice(forms)()
    if rng.random() < 0.3:
        return [rng.choice(["and", "or"]), first, rng.choice(forms)()]
    return first


def _exact_numeric(aggregates: list) -> list[int]:
    """Positions of the numeric aggregates whose values are exact (no rounding)."""
    return [
        i
        for i, (f, a) in enumerate(aggregates)
        if (f in EXACT or _integral_sum(f, a)) and _aggregate_type(f, a) != "timestamp"
    ]


def _integral_sum(function: str, argument: list | None) -> bool:
    if function != "sum" or argument is None:
        return False
    return type_of(argument, Scope(dict(COLUMNS))) in ("int", "bigint")


def _outputs(rng: random.Random, aggregates: list, keys: tuple[str, ...]) -> list:
    outputs: list[tuple[str, list]] = []
    shown_keys = [k for k in keys if rng.random() < 0.9]
    for k in shown_keys:
        outputs.append((k, ["col", k]))
    for bound in ("start", "end"):
        if rng.random() < 0.8:
            outputs.append((f"window_{bound}", ["bound", bound]))
    shown = [i for i in range(len(aggregates)) if rng.random() < 0.85] or [0]
    outputs.extend((f"a{i}", ["agg", i]) for i in shown)
    numeric = _exact_numeric(aggregates)
    for e in range(rng.choice([0, 0, 1, 2])):
        if not numeric:
            break
        i, j = rng.choice(numeric), rng.choice(numeric)
        op = rng.choice(["+", "-", "/", "*"])
        outputs.append((f"e{e}", [op, ["agg", i], ["agg", j]]))
    rng.shuffle(outputs)
    return outputs


def _aggregate_type(function: str, argument: list | None) -> str:
    return aggregate_type(
        function, None if argument is None else type_of(argument, Scope(dict(COLUMNS)))
    )


def _aggregates(rng: random.Random, count: int) -> list:
    functions = ["count_star", "count", "sum", "min", "max", "avg"]
    functions += ["var_pop", "var_samp", "stddev_pop", "stddev_samp"]
    functions += list(BOOLEAN_FUNCTIONS)
    # some cases mix holistic functions (MEDIAN, percentiles, COUNT DISTINCT) in
    holistic = rng.random() < HOLISTIC_CASE_SHARE
    chosen = []
    for _ in range(count):
        function = rng.choice(functions)
        if holistic and rng.random() < 0.5:
            function = rng.choice([*HOLISTIC_FUNCTIONS, "count_distinct", *APPROXIMATE])
            percentile = function.startswith("percentile") or function == "approx_percentile"
            if percentile and rng.random() < ARRAY_SHARE:
                ps = [rng.choice(FRACTIONS) for _ in range(rng.randint(1, ARRAY_MOST))]
                accuracy = (
                    rng.choice(APPROXIMATE_ACCURACIES) if function == "approx_percentile" else None
                )
                function = array_name(function, ps, accuracy)
            elif function.startswith("percentile"):
                function += f":{rng.choice(FRACTIONS)}"
            elif function == "approx_count_distinct":
                function += f":{rng.choice(APPROXIMATE_RSDS)}"
            elif function == "approx_percentile":
                function += f":{rng.choice(FRACTIONS)}:{rng.choice(APPROXIMATE_ACCURACIES)}"
        chosen.append((function, None if function == "count_star" else _argument(rng, function)))
    return chosen


def _window(rng: random.Random, kind: str) -> tuple[int, int]:
    if kind == "count":
        size = rng.choice([1, 2, 3, rng.randint(1, 16), rng.randint(1, 64)])
        return size, rng.choice([size, rng.randint(1, size)])
    if kind == "session":  # the gap; sessions have no slide
        gap = rng.choice([1, 2, 10, 1000, rng.randint(1, 50), rng.randint(1, 5000)])
        return gap, gap
    pane = rng.choice([1, 1, 2, 5, 10, 1000, rng.randint(1, 50)])
    shape = rng.random()
    if shape < 0.35:  # tumbling, one pane per window
        return pane, pane
    if shape < 0.65:  # the slide divides the window: size/slide panes
        per_window = rng.choice([2, 3, 4, rng.randint(2, 10), rng.randint(2, 40)])
        return pane * per_window, pane
    # slide and window on a finer pane grid: up to 1000 panes per window
    panes_per_window = rng.choice([rng.randint(2, 20), rng.randint(2, 200), rng.randint(2, 1000)])
    panes_per_slide = rng.randint(max(1, panes_per_window // 8), panes_per_window)
    return pane * panes_per_window, pane * panes_per_slide


@dataclass(frozen=True)
class SizeClass:
    rows: int
    keys: int
    batches: int
    cost: int  # rows x windows per tuple, what the oracle's time grows with


SMALL = SizeClass(rows=300, keys=1100, batches=30, cost=60_000)
MEDIUM = SizeClass(rows=5_000, keys=3_000, batches=100, cost=200_000)
LARGE = SizeClass(rows=100_000, keys=10_000, batches=200, cost=400_000)


def _size_class(rng: random.Random, large_share: float) -> SizeClass:
    roll = rng.random()
    if roll < large_share:
        return LARGE
    if roll < 4 * large_share:
        return MEDIUM
    return SMALL


def _key_ids(rng: random.Random, rows: int, limit: int) -> list[int]:
    """Key ids per row. Biased to a distinct count just past a power of two, with new keys
    arriving over time (so the key count crosses the power of two between batches)."""
    if rng.random() < 0.5:
        power = 2 ** rng.randint(0, max(0, int(math.log2(max(limit, 2)))))
        distinct = max(1, min(limit, power + rng.randint(-1, 3)))
    else:
        distinct = rng.choice([1, 2, rng.randint(1, 10), rng.randint(1, limit)])
    mode = rng.choice(["growing", "growing", "uniform", "skewed"])
    ids = []
    for i in range(rows):
        if mode == "growing":
            reach = max(1, math.ceil(distinct * (i + 1) / rows))
            ids.append(rng.randrange(reach) if rng.random() < 0.5 else reach - 1)
        elif mode == "uniform":
            ids.append(rng.randrange(distinct))
        else:
            ids.append(min(int(rng.expovariate(1.0) * distinct / 8), distinct - 1))
    return ids


def _timestamps(rng: random.Random, rows: int, size: int, kind: str) -> list[int | None]:
    """Event times: a base pace, random disorder up to several windows, gaps of a window or
    more, far outliers, NULLs."""
    scale = size if kind in ("time", "session") else rng.choice([1, 10, 1000])
    steps = [0, 1, scale // 10 or 1, scale // 2 or 1]
    # Each window-wide gap opens a pane segment. The engine's merge is quadratic in the
    # segments one batch opens (20,000 took minutes), so a case holds at most SPARSE_LIMIT
    # gaps: sparse streams (tuples a window or more apart) only in cases that small.
    if rows <= SPARSE_LIMIT:
        steps += [scale, 3 * scale]
    step = rng.choice(steps)
    disorder = rng.choice([0, 0, scale // 4, scale, 3 * scale, rng.randint(0, 6 * scale)])
    gap_rate = min(rng.choice([0.0, 0.0, 0.02, 0.1, 0.3]), SPARSE_LIMIT / max(rows, 1))
    start = rng.randint(-3 * scale, 3 * scale) + rng.choice([0, 0, 10**12])
    now, ts = start, []
    for _ in range(rows):
        now += rng.randint(0, step) if step else 0
        if rng.random() < gap_rate:
            now += rng.randint(1, 5) * max(size, 1) + rng.randint(0, scale)
        ts.append(now + (rng.randint(0, disorder) if disorder else 0))
    if rows and rng.random() < 0.15:
        ts[rng.randrange(rows)] += rng.choice([1, -1]) * 10**8
    null_rate = rng.choice([0.0, 0.0, 0.0, 0.05, 0.5])
    return [None if rng.random() < null_rate else t for t in ts]


def _nullable(rng: random.Random, values: list) -> list:
    rate = rng.choice([0.0, 0.0, 0.1, 0.3, 1.0])
    return [None if rng.random() < rate else v for v in values]


def _special(rng: random.Random, values: list, choices: list, rate: float) -> list:
    return [rng.choice(choices) if v is not None and rng.random() < rate else v for v in values]


def _rows(
    rng: random.Random, rows: int, keys: str, key_limit: int, size: int, kind: str, special: bool
) -> list[dict]:
    ids = _key_ids(rng, rows, key_limit)
    ts = _timestamps(rng, rows, size, kind)
    strings = max(1, int(math.sqrt(max(ids, default=0) + 1)))
    if keys == "two":
        k = [i // strings for i in ids]
        sk = [f"s{i % strings}" for i in ids]
    else:
        k = list(ids) if keys != "string" else [rng.randint(0, 50) for _ in ids]
        sk = [f"s{i}" for i in ids] if keys == "string" else [f"s{rng.randint(0, 5)}" for _ in ids]
    k, sk = _nullable(rng, k), _nullable(rng, sk)
    x = _nullable(rng, [rng.randint(-1000, 1000) for _ in range(rows)])
    n = _nullable(rng, [rng.randint(-100, 100) for _ in range(rows)])
    v = _nullable(rng, [rng.randint(-400, 400) / 4 for _ in range(rows)])
    ok = [rng.choice([True, True, False, None]) for _ in range(rows)]
    if special and rng.random() < 0.5:
        rate = rng.choice([0.01, 0.1, 0.5])
        v = _special(rng, v, [math.nan, math.inf, -math.inf, -0.0], rate)
        x = _special(rng, x, [INT64_MIN, INT64_MAX], rate)
        n = _special(rng, n, [INT32_MIN, INT32_MAX], rate)
    names = ("ts", "k", "sk", "x", "n", "v", "ok")
    return [
        dict(zip(names, values, strict=True)) for values in zip(ts, k, sk, x, n, v, ok, strict=True)
    ]


def _split(rng: random.Random, rows: list[dict], most: int) -> list[list[dict]]:
    count = rng.choice([1, 2, rng.randint(1, 8), rng.randint(1, most), most])
    cuts = sorted(rng.randint(0, len(rows)) for _ in range(count - 1))
    bounds = [0, *cuts, len(rows)]
    return [rows[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def draw_case(seed: int, *, special_values: bool = True, large_share: float = 0.04) -> Case:
    """The case of one seed (the same seed and options always give the same case)."""
    rng = random.Random(seed)
    limits = _size_class(rng, large_share)
    roll = rng.random()
    kind = "count" if roll < 0.25 else "session" if roll < 0.25 + SESSION_SHARE else "time"
    size, slide = _window(rng, kind)
    per_tuple = math.ceil(size / slide)
    rows = rng.choice([rng.randint(0, 20), rng.randint(1, 100), rng.randint(1, limits.rows)])
    rows = min(rows, max(1, limits.cost // per_tuple))
    keys = rng.choice(sorted(KEY_CHOICES))
    scale = size if kind in ("time", "session") else 1000
    delay = rng.choice(
        [0, 0, rng.randint(0, 3 * scale), slide * rng.randint(0, 3) if kind == "time" else 0]
    )
    override = rng.random() < 0.3
    aggregates = _aggregates(rng, rng.choice([1, 2, rng.randint(1, 4), rng.randint(1, 12)]))
    key_columns = KEY_CHOICES[keys]
    case = Case(
        seed=seed,
        kind=kind,
        size=size,
        slide=slide,
        declared_delay=rng.randint(0, 2 * scale) if override else delay,
        query_delay=delay if override else None,
        keys=key_columns,
        aggregates=aggregates,
        where=_predicate(rng) if rng.random() < 0.4 else None,
        having=_having(rng, aggregates, key_columns) if rng.random() < 0.3 else None,
        outputs=_outputs(rng, aggregates, key_columns),
        batches=[],
        windows_per_batch=rng.choice([None, None, 1, 2, 3, 8]),
        special_values=special_values,
    )
    # count windows fire only once a key has `size` tuples: fewer keys per row there
    key_limit = limits.keys if kind == "time" else max(1, min(limits.keys, rows // (2 * size)))
    data = _rows(rng, rows, keys, key_limit, size, kind, special_values)
    case.batches = _split(rng, data, limits.batches)
    if kind == "time":
        _bound_dense_state(case)
    if rng.random() < 0.3:
        points = rng.randint(1, 3)
        case.snapshot_before = sorted({rng.randint(0, len(case.batches)) for _ in range(points)})
    return case


def dense_cells(case: Case) -> int:
    """The most (key x pane) cells the engine's dense pane state covers for one batch: every
    key seen so far times the panes of each run of the batch's data without a window-wide
    gap (the engine splits its state at such gaps)."""
    pane = math.gcd(case.size, case.slide)
    per_window = case.size // pane
    keys: set = set()
    worst = 0
    for batch in case.batches:
        keys.update(tuple(row[k] for k in case.keys) for row in batch)
        panes = sorted({row["ts"] // pane for row in batch if row["ts"] is not None})
        if not panes:
            continue
        cells, first = 0, panes[0]
        for before, after in zip(panes, panes[1:] + [None], strict=True):
            if after is None or after - before >= per_window:
                cells += before - first + 2 * per_window
                first = after
        worst = max(worst, cells * max(len(keys), 1))
    return worst


def _bound_dense_state(case: Case) -> None:
    """Fewer distinct keys, then compressed time, until the engine's dense state stays under
    CELL_LIMIT. Without it, one batch of 15,000 rows spanning 162,000 panes with 5,545 keys
    needed more than 4.5 GB (the engine sizes its state by keys x panes spanned, not by the
    data; reported as an engine issue), which a fuzz run on a shared machine cannot afford."""
    for step in ("keys", "time", "one key"):
        for _ in range(8):  # each round divides keys or time by the excess factor
            cells = dense_cells(case)
            if cells <= CELL_LIMIT:
                return
            factor = math.ceil(cells / CELL_LIMIT)
            for batch in case.batches:
                for row in batch:
                    _shrink_row(row, step, factor)
            if dense_cells(case) >= cells:
                break  # no progress this way: the next step


def _shrink_row(row: dict, step: str, factor: int) -> None:
    if step == "keys":
        if row["k"] is not None:
            row["k"] //= factor
        if row["sk"] is not None:
            row["sk"] = f"s{int(row['sk'][1:]) // factor}"
    elif step == "time":
        if row["ts"] is not None:
            row["ts"] //= factor
    else:
        row["k"] = None if row["k"] is None else 0
        row["sk"] = None if row["sk"] is None else "s0"


def without(case: Case, **changes) -> Case:
    """A copy of the case with some fields replaced (for the shrinker)."""
    return replace(case, **changes)
