"""The fuzzer: random cases through the engine (SQL, public API) and the oracle, batch by batch;
a failing case is shrunk greedily and written as a regression file.

The engine side uses only the public surface: `mangonel.Session(backend=...)`, `execute(ddl)`,
`sql(query)`, then the query's standalone runner (`LocalQuery`: process / finish / snapshot /
restore / metrics), so results and metrics are compared after every batch. The oracle side
reads the case's own description (`Case.oracle_query()`), never the engine's plan.
"""

from __future__ import annotations

import json
import random
import re
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pytest
from fuzz_cases import Case, draw_case, without
from fuzz_join_cases import JOIN_EVERY, check_join, draw_join_case, shrink_join
from oracle import Oracle, OracleQuery, first_difference
from oracle_aggregates import Approximate
from oracle_arrays import ArrayOracle, explode

ARROW_TYPES = {
    "timestamp": pa.timestamp("us", tz="UTC"),
    "bigint": pa.int64(),
    "int": pa.int32(),
    "double": pa.float64(),
    "string": pa.string(),
    "boolean": pa.bool_(),
}
METRICS = (
    "tuples_in",
    "late_tuples_dropped",
    "null_event_time_dropped",
    "windows_fired",
    "rows_out",
)
SLOW_CASE_S = 30
ORACLE_METRICS = ("tuples_in", "late", "null_event_time", "windows_fired", "rows_out")


def arrow_batch(rows: list[dict], columns: dict[str, str]) -> pa.RecordBatch:
    schema = pa.schema([pa.field(name, ARROW_TYPES[kind]) for name, kind in columns.items()])
    arrays = [
        pa.array([row[name] for row in rows], field.type)
        for name, field in zip(columns, schema, strict=True)
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def engine_rows(batches: list[pa.RecordBatch]) -> list[dict]:
    """Result rows as dicts, timestamps as int microseconds (the oracle's form)."""
    rows = []
    for b in batches:
        columns = [c.cast(pa.int64()) if pa.types.is_timestamp(c.type) else c for c in b.columns]
        rows += pa.RecordBatch.from_arrays(columns, names=b.schema.names).to_pylist()
    return rows


@dataclass
class Scenario:
    """What one run needs: SQL for the engine, a description for the oracle, the input."""

    ddl: str
    query: str
    oracle: OracleQuery
    batches: list[list[dict]]
    snapshot_before: tuple[int, ...] = ()
    windows_per_batch: int | None = None
    # Python window functions the engine's session registers: (name, function, returns),
    # or (name, function, returns, with_timestamps)
    window_functions: tuple[tuple, ...] = ()
    # the session's approx_percentile option ("exact", "sketch"; None: the planner's rule)
    approx_percentile: str | None = None

    @classmethod
    def from_case(cls, case: Case) -> Scenario:
        return cls(
            case.ddl(),
            case.query(),
            case.oracle_query(),
            case.batches,
            tuple(case.snapshot_before),
            case.windows_per_batch,
        )

    @classmethod
    def from_json(cls, data: dict) -> Scenario:
        return cls(
            data["ddl"],
            data["query"],
            OracleQuery.from_json(data["oracle"]),
            data["batches"],
            tuple(data.get("snapshot_before", ())),
            data.get("windows_per_batch"),
            approx_percentile=data.get("approx_percentile"),
        )


@dataclass
class Failure:
    kind: str  # "mismatch", "metrics", or the class of the exception the engine raised
    where: str  # "planning", "after batch 3", "at end of input"
    detail: str
    subject: str = ""  # the column or metric that differed: shrinking keeps it the same

    def same_as(self, other: Failure) -> bool:
        return (self.kind, self.subject) == (other.kind, other.subject)

    def __str__(self) -> str:
        return f"{self.kind} {self.where}: {self.detail}"


def new_oracle(query: OracleQuery) -> tuple[Oracle | ArrayOracle, set[str]]:
    """The oracle of a query, and the outputs that are lists (a percentile over an ARRAY of
    p): the array oracle (tests/oracle_arrays.py) where there are any, whose rows and the
    engine's are compared `explode`d, element by element."""
    if not any(":[" in function for function, _ in query.aggregates):
        return Oracle(query), set()
    oracle = ArrayOracle(query)
    return oracle, set(oracle.array_outputs)


def oracle_run(scenario: Scenario) -> tuple[list[list[dict]], dict, list[dict]]:
    """The oracle's rows per firing (one per batch, then end of input), final metrics, and
    the tolerance of every row (flat, as the rows of all firings one after another)."""
    oracle, _ = new_oracle(scenario.oracle)
    firings, tolerances = [], []
    for rows in [*scenario.batches, None]:
        firings.append(oracle.finish() if rows is None else oracle.process(rows))
        tolerances.extend(oracle.tolerances)
    metrics = {m: getattr(oracle, o) for m, o in zip(METRICS, ORACLE_METRICS, strict=True)}
    return firings, metrics, tolerances


def engine_run(scenario: Scenario, backend: str) -> tuple[list[list[dict]], dict]:
    """The engine's rows per firing and final metrics (exceptions propagate)."""
    steps = list(_engine_steps(scenario, backend))
    return [rows for rows, _ in steps], steps[-1][1]


def same_with_and_without(
    scenario: Scenario, target: object, name: str, value: object, backend: str = "cpu"
) -> None:
    """The engine on `backend` gives the same rows and metrics with `target.name` set to
    `value` (a fast path switched off) as without: for tests of a path that must change no
    result."""
    from oracle import first_difference

    want, want_metrics = engine_run(scenario, backend)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(target, name, value)
        got, got_metrics = engine_run(scenario, backend)
    for got_rows, want_rows in zip(got, want, strict=True):
        assert first_difference(got_rows, want_rows) is None
    assert got_metrics == want_metrics


def _engine_query(scenario: Scenario, backend: str):
    import mangonel

    session = mangonel.Session(
        backend=backend,
        windows_per_batch=scenario.windows_per_batch,
        approx_percentile=scenario.approx_percentile,
    )
    session.execute(scenario.ddl)
    for name, function, returns, *timed in scenario.window_functions:
        session.register_window_function(
            name, function, returns=returns, with_timestamps=bool(timed and timed[0])
        )
    return session.sql(scenario.query)


def _engine_streamed(scenario: Scenario, backend: str) -> tuple[list[dict], dict]:
    """Every result row of `stream` over the whole input held in memory (the runner reads a
    batch ahead and may fire several batches' windows at once), and the final metrics."""
    from mangonel.runtime.local.query import LocalQuery

    runner = LocalQuery(_engine_query(scenario, backend).plan)
    batches = [arrow_batch(batch, scenario.oracle.columns) for batch in scenario.batches]
    rows = engine_rows(list(runner.stream(batches)))
    m = runner.metrics
    return rows, {name: getattr(m, name) for name in METRICS}


def _engine_steps(scenario: Scenario, backend: str):
    from mangonel.runtime.local.query import LocalQuery

    query = _engine_query(scenario, backend)
    runner = LocalQuery(query.plan)
    for position in range(len(scenario.batches) + 1):
        if position in scenario.snapshot_before:
            saved = runner.snapshot()
            runner = LocalQuery(query.plan)
            runner.restore(saved)
        if position < len(scenario.batches):
            out = runner.process(arrow_batch(scenario.batches[position], scenario.oracle.columns))
        else:
            out = runner.finish()
        m = runner.metrics
        yield engine_rows(out), {name: getattr(m, name) for name in METRICS}


def check(scenario: Scenario, backend: str) -> Failure | None:
    """Engine against oracle after every batch and at end of input: rows, then metrics."""
    oracle, arrays = new_oracle(scenario.oracle)
    steps = _engine_steps(scenario, backend)
    every_row: list[dict] = []  # the oracle's rows of every firing, and their tolerances
    every_tolerance: list[dict] = []
    for position in range(len(scenario.batches) + 1):
        last = position == len(scenario.batches)
        where = "at end of input" if last else f"after batch {position}"
        if position == 0:
            where = "planning or " + where
        try:
            got, metrics = next(steps)
        except Exception as error:  # an engine error on valid input is a failure too
            lines = traceback.format_exception(error)
            return Failure(type(error).__name__, where, "".join(lines[-6:]).strip())
        where = where.removeprefix("planning or ")
        want = oracle.finish() if last else oracle.process(scenario.batches[position])
        if arrays:
            got, want = explode(got, arrays), explode(want, arrays)
        every_row += want
        every_tolerance += oracle.tolerances
        difference = first_difference(got, want, tolerances=oracle.tolerances)
        if difference:
            detail = f"{difference}\n  engine: {_head(got)}\n  oracle: {_head(want)}"
            column = re.search(r"column (\S+):", difference)
            return Failure("mismatch", where, detail, column.group(1) if column else "")
        expected = {m: getattr(oracle, o) for m, o in zip(METRICS, ORACLE_METRICS, strict=True)}
        if metrics != expected:
            differing = ",".join(m for m in METRICS if metrics[m] != expected[m])
            return Failure("metrics", where, f"engine {metrics} != oracle {expected}", differing)
    # the same input through `stream` over batches in memory: every row, in order
    where = "streamed from memory"
    try:
        got, metrics = _engine_streamed(scenario, backend)
    except Exception as error:
        lines = traceback.format_exception(error)
        return Failure(type(error).__name__, where, "".join(lines[-6:]).strip())
    if arrays:
        got = explode(got, arrays)
    difference = first_difference(got, every_row, tolerances=every_tolerance)
    if difference:
        detail = f"{difference}\n  engine: {_head(got)}\n  oracle: {_head(every_row)}"
        column = re.search(r"column (\S+):", difference)
        return Failure("mismatch", where, detail, column.group(1) if column else "")
    if metrics != expected:
        differing = ",".join(m for m in METRICS if metrics[m] != expected[m])
        return Failure("metrics", where, f"engine {metrics} != oracle {expected}", differing)
    return None


def _head(rows: list[dict], most: int = 8) -> str:
    text = ", ".join(str(r) for r in rows[:most])
    return f"[{text}{', ...' if len(rows) > most else ''}] ({len(rows)} rows)"


# ---------------------------------------------------------------------------------------
# Shrinking


def _references(expr: list | None, op: str, value) -> bool:
    if not isinstance(expr, list) or not expr:
        return False
    if expr[0] == op and expr[1] == value:
        return True
    return any(_references(e, op, value) for e in expr[1:] if isinstance(e, list))


def _renumber(expr: list | None, removed: int) -> list | None:
    if not isinstance(expr, list):
        return expr
    if expr[0] == "agg":
        return ["agg", expr[1] - (expr[1] > removed)]
    if expr[0] in ("col", "lit", "bound"):
        return expr
    return [expr[0], *(_renumber(e, removed) for e in expr[1:])]


def _drop_aggregate(case: Case, i: int) -> Case | None:
    outputs = [(n, _renumber(e, i)) for n, e in case.outputs if not _references(e, "agg", i)]
    if not outputs or len(case.aggregates) < 2:
        return None
    having = None if _references(case.having, "agg", i) else _renumber(case.having, i)
    aggregates = [a for j, a in enumerate(case.aggregates) if j != i]
    return without(case, aggregates=aggregates, outputs=outputs, having=having)


def _drop_key(case: Case, key: str) -> Case | None:
    outputs = [(n, e) for n, e in case.outputs if not _references(e, "col", key)]
    if not outputs:
        return None
    having = None if _references(case.having, "col", key) else case.having
    keys = tuple(k for k in case.keys if k != key)
    return without(case, keys=keys, outputs=outputs, having=having)


def _drop_batch(case: Case, b: int) -> Case:
    points = sorted({p - (p > b) for p in case.snapshot_before})
    return without(case, batches=case.batches[:b] + case.batches[b + 1 :], snapshot_before=points)


def _merge_batches(case: Case, b: int) -> Case:
    merged = case.batches[b] + case.batches[b + 1]
    batches = case.batches[:b] + [merged] + case.batches[b + 2 :]
    points = sorted({p - (p > b) for p in case.snapshot_before})
    return without(case, batches=batches, snapshot_before=points)


def _drop_rows(case: Case, start: int, stop: int) -> Case:
    """Without the rows start..stop-1 of the stream (counted across batches)."""
    batches, seen = [], 0
    for batch in case.batches:
        kept = [row for i, row in enumerate(batch, seen) if not start <= i < stop]
        seen += len(batch)
        batches.append(kept)
    return without(case, batches=batches)


def _fewer_keys(case: Case) -> Case:
    """Every key id halved: half as many distinct keys."""

    def halve(row: dict) -> dict:
        row = dict(row)
        if row.get("k") is not None:
            row["k"] //= 2
        if row.get("sk") is not None and row["sk"][1:].isdigit():
            row["sk"] = f"s{int(row['sk'][1:]) // 2}"
        return row

    return without(case, batches=[[halve(r) for r in b] for b in case.batches])


def _null_column(case: Case, column: str) -> Case | None:
    """Every value of a column NULL (fewer values for a person to read)."""
    if all(row.get(column) is None for batch in case.batches for row in batch):
        return None
    batches = [[{**row, column: None} for row in batch] for batch in case.batches]
    return without(case, batches=batches)


def _candidates(case: Case):
    """Smaller variants of a case, most promising first."""
    if case.snapshot_before:
        yield without(case, snapshot_before=[])
    if case.windows_per_batch is not None:
        yield without(case, windows_per_batch=None)
    for b in reversed(range(len(case.batches))):
        yield _drop_batch(case, b)
    for b in range(len(case.batches) - 1):
        yield _merge_batches(case, b)
    total = case.rows
    chunk = total // 2
    while chunk >= 1:
        for start in range(0, total, chunk):
            yield _drop_rows(case, start, start + chunk)
        chunk //= 2
    if case.where is not None:
        yield without(case, where=None)
    if case.having is not None:
        yield without(case, having=None)
    for i in reversed(range(len(case.aggregates))):
        smaller = _drop_aggregate(case, i)
        if smaller is not None:
            yield smaller
    for key in case.keys:
        smaller = _drop_key(case, key)
        if smaller is not None:
            yield smaller
    if case.keys:
        yield _fewer_keys(case)
    for column in case.columns:
        if column != "ts" and column not in case.keys:
            smaller = _null_column(case, column)
            if smaller is not None:
                yield smaller
    for position in reversed(range(len(case.outputs))):
        if len(case.outputs) > 1:
            yield without(case, outputs=case.outputs[:position] + case.outputs[position + 1 :])


def shrink(
    case: Case, backend: str, failure: Failure, budget_s: float = 120.0
) -> tuple[Case, Failure]:
    """Greedily the smallest variant that still fails the same way (same kind of failure, on
    the same output column or metric: else a second bug could take over while shrinking)."""
    deadline = time.monotonic() + budget_s
    progress = True
    while progress and time.monotonic() < deadline:
        progress = False
        for candidate in _candidates(case):
            if time.monotonic() >= deadline:
                break
            found = check(Scenario.from_case(candidate), backend)
            if found is not None and found.same_as(failure):
                case, failure, progress = candidate, found, True
                break  # restart from the smaller case: its candidates differ
    return case, failure


# ---------------------------------------------------------------------------------------
# Regression files


def regression_json(case: Case, name: str, note: str) -> dict:
    """The case as a tests/regressions/*.json file, expected values from the oracle."""
    scenario = Scenario.from_case(case)
    firings, metrics, _ = oracle_run(scenario)
    data = {"name": name}
    data.update(case.to_json())
    data["expected_rows"] = [_json_row(row) for firing in firings for row in firing]
    data["expected_firings"] = [len(firing) for firing in firings]
    data["expected_late"] = metrics["late_tuples_dropped"]
    data["expected_metrics"] = metrics
    data["note"] = note
    return data


def _json_row(row: dict) -> dict:
    """An oracle row as JSON: an approximate answer (also inside an array) as
    {"approximate": exact, "values": [..], "low": .., "high": ..} (`read_json_row` reads it
    back)."""
    return {name: _to_json(value) for name, value in row.items()}


def _to_json(value):  # noqa: ANN001, ANN202
    if isinstance(value, Approximate):
        return {
            "approximate": value.exact,
            "values": list(value.values),
            "low": value.low,
            "high": value.high,
        }
    if isinstance(value, list | tuple):
        return [_to_json(v) for v in value]
    return value


def read_json_row(row: dict) -> dict:
    """A stored expected row with its approximate answers as the oracle's `Approximate`."""
    return {name: _from_json(value) for name, value in row.items()}


def _from_json(value):  # noqa: ANN001, ANN202
    if isinstance(value, dict) and "approximate" in value:
        return Approximate(
            value["approximate"], tuple(value["values"]), value["low"], value["high"]
        )
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    return value


def format_json(data: dict) -> str:
    """One field per line, one row per line: diffable and readable. NaN and +-Infinity are
    written as Python's json module reads them back (NaN, Infinity, -Infinity)."""
    lines = []
    for name, value in data.items():
        if name == "batches":
            batches = [
                "  [" + ",\n   ".join(json.dumps(row) for row in batch) + "]" for batch in value
            ]
            text = "[\n" + ",\n".join(batches) + "\n ]" if batches else "[]"
        elif name == "expected_rows" and value:
            text = "[\n  " + ",\n  ".join(json.dumps(row) for row in value) + "\n ]"
        elif name == "oracle":
            fields = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in value.items()]
            text = "{\n" + ",\n".join(fields) + "\n }"
        else:
            text = json.dumps(value)
        lines.append(f" {json.dumps(name)}: {text}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def write_json(data: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(format_json(data))
    if json.loads(path.read_text()) != json.loads(json.dumps(data)):  # NaN-free equality
        raise AssertionError(f"{path} does not read back as written")


# ---------------------------------------------------------------------------------------
# The fuzz loop


@dataclass
class FuzzResult:
    run_seed: int
    cases: int = 0
    rows: int = 0
    seconds: float = 0.0
    case_seed: int | None = None
    failure: Failure | None = None
    shrunk: Case | None = None
    path: Path | None = None
    kinds: dict = field(default_factory=dict)


def case_seeds(run_seed: int):
    """The case seeds of a run, in order: a run seed reproduces every case of the run."""
    rng = random.Random(run_seed)
    while True:
        yield rng.getrandbits(48)


def fuzz(
    run_seed: int,
    budget_s: float,
    *,
    backend: str = "cpu",
    special_values: bool = True,
    out_dir: Path = Path("fuzz-failures"),
    shrink_s: float = 120.0,
    only_case: int | None = None,
    large_share: float = 0.04,
    report: Callable[[str], None] = print,
) -> FuzzResult:
    """Run fresh cases until the budget is spent or one fails; shrink and write a failure."""
    result = FuzzResult(run_seed)
    special = "on" if special_values else "off"
    report(
        f"fuzz: run seed {run_seed}, backend {backend}, {budget_s:.0f} s, special values {special}"
    )
    started = time.monotonic()
    seeds = iter([only_case]) if only_case is not None else case_seeds(run_seed)
    next_report = started + 60
    for seed in seeds:
        if result.cases and time.monotonic() - started >= budget_s:
            break
        if backend == "cpu" and seed % JOIN_EVERY == 0:  # joins run on the CPU backend only
            if _join_case_fails(seed, run_seed, result, report):
                break
            continue
        case = draw_case(seed, special_values=special_values, large_share=large_share)
        case_started = time.monotonic()
        try:
            failure = check(Scenario.from_case(case), backend)
        except Exception:
            report(
                f"fuzz: the oracle or the harness failed on case seed {seed} (run seed {run_seed})"
            )
            raise
        result.cases += 1
        result.rows += case.rows
        seconds = time.monotonic() - case_started
        if seconds > SLOW_CASE_S:  # not a failure (machines differ), but worth a look
            report(f"fuzz: slow case seed {seed}: {seconds:.0f} s, {case.rows} rows")
        kind = f"{case.kind}/{'+'.join(case.keys) or 'global'}"
        result.kinds[kind] = result.kinds.get(kind, 0) + 1
        if time.monotonic() >= next_report:
            report(f"fuzz: {result.cases} cases, {result.rows} rows so far")
            next_report += 60
        if failure is not None:
            result.case_seed, result.failure = seed, failure
            report(f"fuzz: FAILED case seed {seed} (run seed {run_seed}): {failure}")
            report(f"fuzz: shrinking ({case.rows} rows, {len(case.batches)} batches) ...")
            shrunk, final = shrink(case, backend, failure, shrink_s)
            result.shrunk, result.failure = shrunk, final
            name = f"fuzz-{backend}-seed{seed}"
            note = (
                f"found by the fuzzer: run seed {run_seed}, case seed {seed}, backend {backend}, "
                f"special values {special}; shrunk; expected values from tests/oracle.py"
            )
            result.path = out_dir / f"{name}.json"
            write_json(regression_json(shrunk, name, note), result.path)
            report(
                f"fuzz: minimal case ({shrunk.rows} rows, {len(shrunk.batches)} batches): {final}"
            )
            report(shrunk.describe())
            report(f"fuzz: wrote {result.path} (copy it into tests/regressions/ once understood)")
            break
    result.seconds = time.monotonic() - started
    return result


def _join_case_fails(
    seed: int, run_seed: int, result: FuzzResult, report: Callable[[str], None]
) -> bool:
    """Run join case `seed` (tests/fuzz_join_cases.py); on a failure, shrink it and report
    the minimal case (join cases have no regression file format yet)."""
    case = draw_join_case(seed)
    problem = check_join(case)
    result.cases += 1
    result.rows += case.rows
    result.kinds["join"] = result.kinds.get("join", 0) + 1
    if problem is None:
        return False
    result.case_seed = seed
    result.failure = Failure("join", "over the arrivals", problem)
    report(f"fuzz: FAILED join case seed {seed} (run seed {run_seed}): {problem}")
    shrunk = shrink_join(case, problem)
    report(f"fuzz: minimal join case ({shrunk.rows} rows): {check_join(shrunk)}")
    report(shrunk.describe())
    return True


def fresh_seed() -> int:
    return random.SystemRandom().randrange(1, 10**9)
