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
count windows span [first tuple's ts, last tuple's ts + 1). Session windows (kind "session",
`size` the gap) keep each key's accepted tuples and, at every firing, regroup them from
scratch: sorted by ts, a tuple joins the session before it when its ts is before that
session's last ts + gap; a session fires when last ts + gap <= W (its tuples are then
forgotten); a tuple with ts + gap <= W on arrival is late.

Special values follow Spark SQL (non-ANSI): BIGINT/INT arithmetic wraps; `/` is in DOUBLE
and division or modulo by zero is NULL; comparisons treat NaN as equal to itself and larger
than every other value; AVG is computed in DOUBLE; MIN/MAX put NaN above everything;
VAR_*/STDDEV_* of data holding an infinity or NaN are NaN; SUM of BIGINT wraps.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

INT_BITS = {"int": 32, "bigint": 64}
NUMERIC_RANK = {"int": 0, "bigint": 1, "double": 2}
INTEGER_AGGREGATES = ("count_star", "count")
AGGREGATE_FUNCTIONS = (
    "count_star",
    "count",
    "sum",
    "min",
    "max",
    "avg",
    "var_pop",
    "var_samp",
    "stddev_pop",
    "stddev_samp",
    "bool_and",
    "bool_or",
    "median",
    "percentile_cont",
    "percentile",
    "percentile_disc",
    "count_distinct",
    "python",
    "approx_count_distinct",
    "approx_percentile",
)
# Holistic aggregates: functions of the window's sorted values. Percentiles are named with
# their fraction, "percentile_cont:0.9" (MEDIAN is percentile_cont at 0.5).
HOLISTIC_AGGREGATES = ("median", "percentile_cont", "percentile", "percentile_disc")
BOOLEAN_AGGREGATES = ("bool_and", "bool_or")
# User window functions written in Python, named "python:<name>": applied to the window's
# non-NULL values in Spark's order (a list) and whether the argument is integral; the test
# that registers one (`register_python_function`) wraps the user's function, which takes a
# NumPy array, so this module imports no NumPy. A window without values is NULL, uncalled.
# Registered `timed`: applied to (values, their event times, integral), the pairs sorted by
# value in Spark's order, equal values by event time.
PYTHON_FUNCTIONS: dict[str, tuple[Callable[..., Any], str, bool]] = {}


def register_python_function(
    name: str, function: Callable[..., Any], result: str, timed: bool = False
) -> None:
    PYTHON_FUNCTIONS[name] = (function, result, timed)


def _python(function: str, present: list, integral: bool, times: list) -> Any:
    if not present:
        return None
    python, result, timed = PYTHON_FUNCTIONS[function.split(":", 1)[1]]
    if timed:
        ordered = _spark_sorted(present)
        # each value's times, earliest first, handed out in that order to equal values
        by_value: dict = defaultdict(list)
        for value, ts in sorted(zip(present, times, strict=True), key=lambda p: p[1]):
            by_value["nan" if value != value else value + 0].append(ts)
        stamps = [by_value["nan" if v != v else v + 0].pop(0) for v in ordered]
        value = python(ordered, stamps, integral)
    else:
        value = python(_spark_sorted(present), integral)
    return float(value) if result == "double" else int(value)


# Approximate aggregates, named with their parameters: "approx_count_distinct:<rsd>",
# "approx_percentile:<p>:<accuracy>". The oracle computes the exact answer and the answers the
# sketch's bound accepts (`Approximate`); `first_difference` checks the engine's against them.
APPROXIMATE_AGGREGATES = ("approx_count_distinct", "approx_percentile")
# Relative error allowed for floating results, on top of an absolute bound the oracle derives
# from the magnitude of what was summed (the engine sums in another order than math.fsum).
REL_TOL = 1e-9

Expr = list  # ["col", name] | ["lit", value] | ["agg", i] | ["bound", "start"|"end"|"time"] | ...


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


# ---------------------------------------------------------------------------------------
# Types and scalar expressions


def function_name(function: str) -> str:
    """The function of an aggregate name without its fraction ("percentile_cont:0.9")."""
    return function.split(":", 1)[0]


def aggregate_type(function: str, argument_type: str | None) -> str:
    if function_name(function) == "python":
        return PYTHON_FUNCTIONS[function.split(":", 1)[1]][1]
    function = function_name(function)
    if function == "count_distinct":
        return "bigint"
    if function in ("percentile_disc", "approx_percentile"):
        assert argument_type is not None
        return argument_type
    if function == "approx_count_distinct":
        return "bigint"
    if function in INTEGER_AGGREGATES:
        return "bigint"
    if function == "sum":
        return "bigint" if argument_type in INT_BITS else "double"
    if function in ("min", "max"):
        assert argument_type is not None
        return argument_type
    if function in BOOLEAN_AGGREGATES:
        return "boolean"
    return "double"


def literal_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "int" if -(2**31) <= value < 2**31 else "bigint"
    if isinstance(value, float):
        return "double"
    return "string"


def _common(types: Iterable[str]) -> str:
    known = [t for t in types if t != "null"]
    if not known:
        return "null"
    if all(t in NUMERIC_RANK for t in known):
        return max(known, key=NUMERIC_RANK.__getitem__)
    if len(set(known)) != 1:
        raise ValueError(f"oracle: no common type of {known}")
    return known[0]


@dataclass
class Scope:
    """Types of what an expression may name: columns, aggregates (by position), bounds."""

    columns: dict[str, str]
    aggregates: list[str] = field(default_factory=list)


def type_of(expr: Expr, scope: Scope) -> str:
    op = expr[0]
    if op == "col":
        return scope.columns[expr[1]]
    if op == "lit":
        return literal_type(expr[1])
    if op == "agg":
        return scope.aggregates[expr[1]]
    if op == "bound":
        return "timestamp"
    args = [type_of(a, scope) for a in expr[1:]]
    if op in ("+", "-", "*", "%", "neg", "abs"):
        return _common(args)
    if op == "/":
        return "double"
    if op in ("coalesce",):
        return _common(args)
    if op == "if":
        return _common(args[1:])
    return "boolean"  # comparisons, and, or, not, is_null, is_not_null


def _wrap(value: int, kind: str) -> int:
    bits = INT_BITS[kind]
    return (value + 2 ** (bits - 1)) % 2**bits - 2 ** (bits - 1)


def _as(value: Any, kind: str) -> Any:
    """A value of a (narrower) numeric type as the wider `kind`."""
    if value is None or kind not in NUMERIC_RANK:
        return value
    return float(value) if kind == "double" else int(value)


def _order_key(value: Any) -> tuple:
    """Spark's ordering of values: NaN equals NaN and is above everything; -0.0 = 0.0."""
    if isinstance(value, float) and math.isnan(value):
        return (1, 0.0)
    return (0, value)


def _arith(op: str, a: Any, b: Any, kind: str) -> Any:
    if kind == "double":
        a, b = float(a), float(b)
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        # % on doubles: Java's remainder (the dividend's sign), NULL for a zero divisor
        if b == 0:
            return None
        if math.isnan(a) or math.isnan(b) or math.isinf(a):
            return math.nan
        if math.isinf(b):
            return a
        return math.fmod(a, b)
    if op == "+":
        return _wrap(a + b, kind)
    if op == "-":
        return _wrap(a - b, kind)
    if op == "*":
        return _wrap(a * b, kind)
    if b == 0:
        return None
    remainder = abs(a) % abs(b)
    return _wrap(-remainder if a < 0 else remainder, kind)


_COMPARE = {
    "=": lambda x, y: x == y,
    "<>": lambda x, y: x != y,
    "<": lambda x, y: x < y,
    "<=": lambda x, y: x <= y,
    ">": lambda x, y: x > y,
    ">=": lambda x, y: x >= y,
}


def compile_expression(expr: Expr, scope: Scope) -> Callable[[dict], Any]:
    """A function of an environment dict (column name -> value, plus "$agg" -> list of
    aggregate values and "$bound" -> {"start", "end"}) giving the expression's value, of the
    expression's type as `type_of` says (ints for INT/BIGINT/TIMESTAMP, floats for DOUBLE)."""
    op = expr[0]
    kind = type_of(expr, scope)
    if op == "col":
        name = expr[1]
        if scope.columns[name] == "double":
            return lambda env: None if env[name] is None else float(env[name])
        return lambda env: env[name]
    if op == "lit":
        value = expr[1]
        return lambda env: value
    if op == "agg":
        position = expr[1]
        return lambda env: env["$agg"][position]
    if op == "bound":
        side = expr[1]
        return lambda env: env["$bound"][side]
    args = [compile_expression(a, scope) for a in expr[1:]]
    if op in ("+", "-", "*", "%"):
        left, right = args

        def arithmetic(env: dict) -> Any:
            a, b = left(env), right(env)
            if a is None or b is None:
                return None
            return _arith(op, a, b, kind)

        return arithmetic
    if op == "/":
        left, right = args

        def divide(env: dict) -> Any:
            a, b = left(env), right(env)
            if a is None or b is None or b == 0:
                return None
            return float(a) / float(b)

        return divide
    if op in ("neg", "abs"):
        (inner,) = args

        def unary(env: dict) -> Any:
            a = inner(env)
            if a is None:
                return None
            a = abs(a) if op == "abs" else -a
            return a if kind == "double" else _wrap(a, kind)

        return unary
    if op == "coalesce":

        def coalesce(env: dict) -> Any:
            for argument in args:
                value = argument(env)
                if value is not None:
                    return _as(value, kind)
            return None

        return coalesce
    if op == "if":
        condition, then, otherwise = args
        return lambda env: _as(then(env) if condition(env) is True else otherwise(env), kind)
    if op in _COMPARE:
        left, right = args
        compare = _COMPARE[op]
        # numbers compare in their common type (BIGINT vs DOUBLE: as doubles, like Spark)
        common = _common(type_of(a, scope) for a in expr[1:])

        def comparison(env: dict) -> Any:
            a, b = left(env), right(env)
            if a is None or b is None:
                return None
            return compare(_order_key(_as(a, common)), _order_key(_as(b, common)))

        return comparison
    if op == "and":

        def conjunction(env: dict) -> Any:
            values = [a(env) for a in args]
            if False in values:
                return False
            return None if None in values else True

        return conjunction
    if op == "or":

        def disjunction(env: dict) -> Any:
            values = [a(env) for a in args]
            if True in values:
                return True
            return None if None in values else False

        return disjunction
    if op == "not":
        (inner,) = args

        def negation(env: dict) -> Any:
            value = inner(env)
            return None if value is None else not value

        return negation
    if op == "is_null":
        (inner,) = args
        return lambda env: inner(env) is None
    if op == "is_not_null":
        (inner,) = args
        return lambda env: inner(env) is not None
    raise ValueError(f"oracle: unknown expression form {op!r}")


# ---------------------------------------------------------------------------------------
# Aggregates


def _float_sum(values: list[float]) -> float:
    """The exact sum, with IEEE's rules for infinities and NaN (fsum raises on those)."""
    if any(math.isnan(v) for v in values):
        return math.nan
    infinities = {v for v in values if math.isinf(v)}
    if len(infinities) == 2:
        return math.nan
    if infinities:
        return infinities.pop()
    return math.fsum(values)


def _spark_sorted(values: list) -> list:
    """Values in Spark's order: NaN above everything (+inf included); -0.0 is 0.0."""
    numbers = sorted(v + 0.0 if isinstance(v, float) else v for v in values if v == v)
    return numbers + [math.nan] * (len(values) - len(numbers))


def _holistic(function: str, present: list) -> Any:
    """MEDIAN, PERCENTILE_CONT/PERCENTILE (Spark's interpolation at p * (n - 1)),
    PERCENTILE_DISC (sorted[max(ceil(p * n) - 1, 0)]), COUNT DISTINCT (NaNs one value)."""
    name = function_name(function)
    if name == "count_distinct":
        return len({"nan" if v != v else v + 0 for v in present})
    if not present:
        return None
    ordered = _spark_sorted(present)
    n = len(ordered)
    fraction = 0.5 if name == "median" else float(function.split(":", 1)[1])
    if name == "percentile_disc":
        return ordered[max(math.ceil(fraction * n) - 1, 0)]
    position = fraction * (n - 1)
    lower, higher = math.floor(position), math.ceil(position)
    low, high = float(ordered[lower]), float(ordered[higher])
    if lower == higher:
        return low
    return (higher - position) * low + (position - lower) * high


@dataclass(frozen=True)
class Approximate:
    """An approximate aggregate's answer as the oracle checks it: `exact` is the true answer
    (shown in failures); the engine's answer must be one of `values` (APPROX_PERCENTILE: the
    values whose rank lies within the GK bound of the requested rank) or lie in [low, high]
    (APPROX_COUNT_DISTINCT: within 3 rsd of the true count, plus 2 for tiny counts)."""

    exact: Any
    values: tuple = ()
    low: float = 0.0
    high: float = -1.0

    def accepts(self, x: Any) -> bool:
        if self.values:
            return any(_same_value(x, v) for v in self.values)
        return isinstance(x, int) and self.low <= x <= self.high

    def __repr__(self) -> str:
        if self.values:
            shown = sorted({repr(v) for v in self.values})
            return f"~{self.exact!r} (one of {shown[:6]}{'...' if len(shown) > 6 else ''})"
        return f"~{self.exact!r} (in [{self.low:g}, {self.high:g}])"


def _same_value(x: Any, v: Any) -> bool:
    if isinstance(x, float) and isinstance(v, float):
        return (math.isnan(x) and math.isnan(v)) or x == v
    return x == v and type(x) is type(v)


def _approximate(function: str, present: list, integral: bool) -> Any:
    """APPROX_COUNT_DISTINCT: HLL++ within 3 rsd of the true count n, plus 2: for counts far
    below the 2^p registers the error is the number of hash collisions (register index) less
    their expectation, which 3 rsd n covers except for its discreteness (5 values into 128
    registers collide twice in 0.3 % of windows: fuzzing meets it); APPROX_PERCENTILE: a
    value whose rank (1-based, any of a tie's ranks) lies within floor(n / accuracy + 1/2)
    of ceil(p * n) (the minimum for p <= 1 / accuracy, the
    maximum for p >= 1 - 1 / accuracy), docs/sketches.md. An integer argument's answer is
    the value through a double and back (Spark's PercentileDigest: Java's saturating cast,
    so 2^63 - 1 stays itself and 2^53 + 1 reads 2^53). No non-NULL value: 0, NULL."""
    parts = function.split(":")
    if parts[0] == "approx_count_distinct":
        n = _holistic("count_distinct", present)
        if n == 0:
            return 0
        slack = 3.0 * float(parts[1]) * n + 2.0
        return Approximate(n, low=n - slack, high=n + slack)
    if not present:
        return None
    fraction, eps = float(parts[1]), 1.0 / float(parts[2])
    ordered = _spark_sorted(present)
    if integral:
        ordered = [min(int(float(v)), 2**63 - 1) for v in ordered]
    else:
        ordered = [float(v) for v in ordered]
    n = len(ordered)
    target = min(max(math.ceil(fraction * n), 1), n)
    error = math.floor(eps * n + 0.5)
    ranks = range(max(target - error, 1), min(target + error, n) + 1)
    values = [ordered[r - 1] for r in ranks]
    if fraction <= eps:
        values.append(ordered[0])
    if fraction >= 1.0 - eps:
        values.append(ordered[-1])
    return Approximate(ordered[target - 1], values=tuple(values))


def aggregate_value(
    function: str, values: list, rows: int, integral: bool, times: list | None = None
) -> tuple[Any, float]:
    """One aggregate over the argument values of the tuples of one (window, key), and an
    absolute tolerance for it (0 when the result is exact); `times`: the tuples' event times
    (a Python function with timestamps reads them)."""
    if function == "count_star":
        return rows, 0.0
    present = [v for v in values if v is not None]
    if function_name(function) == "python":
        stamps = times if times is not None else [None] * len(values)
        stamps = [t for v, t in zip(values, stamps, strict=True) if v is not None]
        return _python(function, present, integral, stamps), 0.0
    if function_name(function) in (*HOLISTIC_AGGREGATES, "count_distinct"):
        return _holistic(function, present), 0.0
    if function_name(function) in APPROXIMATE_AGGREGATES:
        return _approximate(function, present, integral), 0.0
    if function == "count":
        return len(present), 0.0
    if not present:
        return None, 0.0
    if function in ("min", "max"):
        nan = [v for v in present if isinstance(v, float) and math.isnan(v)]
        numbers = [v for v in present if not (isinstance(v, float) and math.isnan(v))]
        if function == "max":
            return (nan[0] if nan else max(numbers)), 0.0
        return (min(numbers) if numbers else nan[0]), 0.0
    if function == "bool_and":
        return all(present), 0.0
    if function == "bool_or":
        return any(present), 0.0
    if function == "sum" and integral:
        return _wrap(sum(present), "bigint"), 0.0
    floats = [float(v) for v in present]
    n = len(floats)
    finite = all(math.isfinite(v) for v in floats)
    magnitude = math.fsum(abs(v) for v in floats) if finite else 0.0
    if function == "sum":
        return _float_sum(floats), REL_TOL * magnitude
    if function == "avg":
        return _float_sum(floats) / n, REL_TOL * magnitude / n
    if function in ("var_samp", "stddev_samp") and n < 2:
        return None, 0.0  # Spark: NULL for one value, whatever the value (also NaN or inf)
    if not finite:
        return math.nan, 0.0  # Spark: variance of data holding inf or NaN is NaN
    mean = math.fsum(floats) / n
    m2 = math.fsum((v - mean) ** 2 for v in floats)
    divisor = n if function in ("var_pop", "stddev_pop") else n - 1
    variance = m2 / divisor
    # The engine's (n, mean, M2) combine loses up to ~n ulps of the mean square.
    variance_tolerance = REL_TOL * math.fsum(v * v for v in floats) / divisor
    if function in ("var_pop", "var_samp"):
        return variance, variance_tolerance
    return math.sqrt(variance), math.sqrt(variance_tolerance)


# ---------------------------------------------------------------------------------------
# The window semantics


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
        # time and cumulate windows: ((start, end), key) -> list of (event time, arguments)
        self.contents: dict[tuple, list] = defaultdict(list)
        # count windows: key -> tuples not final yet / final tuples in order
        self.pending: dict[tuple, list] = defaultdict(list)
        self.final: dict[tuple, list] = defaultdict(list)
        self.next_window: dict[tuple, int] = defaultdict(int)
        self.arrivals = 0
        # session windows: key -> (ts, arguments) of tuples whose session has not fired
        self.session_tuples: dict[tuple, list] = defaultdict(list)

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
            key = tuple(row[k] for k in q.keys)
            args = tuple(None if a is None else a(row) for a in self.arguments)
            if q.kind == "time":
                late = self._add_time(ts, key, args)
            elif q.kind == "cumulate":
                late = self._add_cumulate(ts, key, args)
            elif q.kind == "session":
                late = self._add_session(ts, key, args)
            else:
                late = self._add_count(ts, key, args)
            if late is not None:
                self.late_rows.append(
                    {**row, "late_reason": late, "late_watermark": self.watermark}
                )
        if self.max_ts is not None:
            candidate = self.max_ts - q.delay
            if self.watermark is None or candidate > self.watermark:
                self.watermark = candidate
        return self._fire(final=False)

    def finish(self) -> list[dict]:
        return self._fire(final=True)

    def _add_time(self, ts: int, key: tuple, args: tuple) -> str | None:
        """Adds the tuple to its windows; the reason it is late instead, if it is."""
        size, slide = self.query.size, self.query.slide
        if self.watermark is not None and (ts // slide) * slide + size <= self.watermark:
            self.late += 1
            return "window closed"  # its last window ended at or before W
        self.key_order.setdefault(key, len(self.key_order))
        for k in range((ts - size) // slide + 1, ts // slide + 1):
            if self.watermark is None or k * slide + size > self.watermark:
                self.contents[((k * slide, k * slide + size), key)].append((ts, args))
        return None

    def _add_cumulate(self, ts: int, key: tuple, args: tuple) -> str | None:
        """Period p = floor(ts / max) holds [p*max, p*max + j*step), j = 1 .. max/step; the
        tuple is in those ending after it, late when the whole period has fired."""
        size, step = self.query.size, self.query.slide
        period_start = (ts // size) * size
        if self.watermark is not None and period_start + size <= self.watermark:
            self.late += 1
            return "window closed"  # its period's last window ended at or before W
        self.key_order.setdefault(key, len(self.key_order))
        for j in range(1, size // step + 1):
            end = period_start + j * step
            if end > ts and (self.watermark is None or end > self.watermark):
                self.contents[((period_start, end), key)].append((ts, args))
        return None

    def _add_count(self, ts: int, key: tuple, args: tuple) -> str | None:
        if self.watermark is not None and ts < self.watermark:
            self.late += 1
            return "behind watermark"  # the key's order up to W is final
        self.key_order.setdefault(key, len(self.key_order))
        self.pending[key].append((ts, self.arrivals, args))
        self.arrivals += 1
        return None

    def _add_session(self, ts: int, key: tuple, args: tuple) -> str | None:
        if self.watermark is not None and ts + self.query.size <= self.watermark:
            self.late += 1
            return "window closed"  # its own session [ts, ts + gap) ended at or before W
        self.key_order.setdefault(key, len(self.key_order))
        self.session_tuples[key].append((ts, args))
        return None

    def _fire_sessions(self, final: bool) -> list:
        gap = self.query.size
        fired = []
        for key in list(self.session_tuples):
            sessions: list[list] = []
            for ts, args in sorted(self.session_tuples[key], key=lambda t: t[0]):
                if sessions and ts < sessions[-1][-1][0] + gap:
                    sessions[-1].append((ts, args))
                else:
                    sessions.append([(ts, args)])
            staying = []
            for session in sessions:
                start, end = session[0][0], session[-1][0] + gap
                if final or (self.watermark is not None and end <= self.watermark):
                    order = (start, self.key_order[key])
                    times = [t[0] for t in session]
                    fired.append((order, key, start, end, [t[1] for t in session], times))
                else:
                    staying.extend(session)
            self.session_tuples[key] = staying
        return fired

    def _fire(self, final: bool) -> list[dict]:
        # (order, key, window_start, window_end, argument tuples, their event times)
        fired = []
        q = self.query
        if q.kind == "session":
            fired = self._fire_sessions(final)
        elif q.kind in ("time", "cumulate"):
            # window order: by end (one window ends at each time), then key order
            for ((start, end), key), tuples in list(self.contents.items()):
                if final or (self.watermark is not None and end <= self.watermark):
                    fired.append(
                        (
                            (end, self.key_order[key]),
                            key,
                            start,
                            end,
                            [args for _, args in tuples],
                            [ts for ts, _ in tuples],
                        )
                    )
                    del self.contents[((start, end), key)]
        else:
            n, m = q.size, q.slide
            for key in list(self.pending):
                becoming, staying = [], []
                for t in self.pending[key]:
                    is_final = final or (self.watermark is not None and t[0] < self.watermark)
                    (becoming if is_final else staying).append(t)
                self.pending[key] = staying
                # tuples become final in ts order; ties keep arrival order
                self.final[key].extend(sorted(becoming, key=lambda t: (t[0], t[1])))
                while self.next_window[key] * m + n <= len(self.final[key]):
                    j = self.next_window[key]
                    window = self.final[key][j * m : j * m + n]
                    order = (j, self.key_order[key])
                    start, end = window[0][0], window[-1][0] + 1
                    fired.append(
                        (order, key, start, end, [t[2] for t in window], [t[0] for t in window])
                    )
                    self.next_window[key] += 1
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


def _same_float(x: float, y: float, rel: float, tolerance: float) -> bool:
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    if math.isinf(x) or math.isinf(y):
        return x == y
    return math.isclose(x, y, rel_tol=rel, abs_tol=max(tolerance, rel))


def rows_close(
    actual: list[dict],
    expected: list[dict],
    rel: float = REL_TOL,
    tolerances: Sequence[dict] | None = None,
) -> bool:
    """Same rows in the same order; floats within a relative tolerance (and the absolute one
    the oracle gave for that cell, if any), NaN equal to NaN; the rest exact, same type."""
    return first_difference(actual, expected, rel, tolerances) is None


def first_difference(
    actual: list[dict],
    expected: list[dict],
    rel: float = REL_TOL,
    tolerances: Sequence[dict] | None = None,
) -> str | None:
    """None when `rows_close`, else a sentence saying where the rows first differ."""
    if len(actual) != len(expected):
        return f"{len(actual)} rows where {len(expected)} were expected"
    for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
        if a.keys() != e.keys():
            return f"row {index} has columns {list(a)} where {list(e)} were expected"
        for name in a:
            x, y = a[name], e[name]
            if isinstance(y, Approximate):
                if not y.accepts(x):
                    return f"row {index} column {name}: {x!r} where {y!r} was expected"
            elif isinstance(x, float) and isinstance(y, float):
                tolerance = tolerances[index].get(name, 0.0) if tolerances else 0.0
                if not _same_float(x, y, rel, tolerance):
                    return f"row {index} column {name}: {x!r} where {y!r} was expected"
            elif x != y or type(x) is not type(y):
                return f"row {index} column {name}: {x!r} where {y!r} was expected"
    return None
