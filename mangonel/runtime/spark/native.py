"""Spark's own window aggregation as a plan choice: the query transpiled to Spark SQL.

For windows where each tuple belongs to one window (tumbling, w/s = 1), Spark's native
`GROUP BY window(ts, w, s), keys` has nothing to expand (its Expand is one row per tuple) and
keeps every row in the JVM, while mangonel's two stages move every row into Python for the
pane pre-aggregation (Arrow copy ~0.5 us a row on 2 cores) before any work is saved: there
native Spark is the faster plan (measured: docs/performance/spark.md, "Inside Spark"), and results
are Spark's by construction. The planner picks it by cost (`choose_native`) and EXPLAIN says
so with the reason. Session windows run here by default (`SESSION_NATIVE`): Spark's
`session_window` over the same rows; `native=False` or `late_rows=` runs them as the per-tuple
two stages instead (`SESSION_STAGES`).

The transpiled query is mangonel's plan, not the user's text: WHERE and aggregate arguments
(sqlglot expressions) as Spark SQL that cannot raise under ANSI mode (`runtime.spark.sql`), one
Spark aggregate per `AggregatePlan`, HAVING and the SELECT list with `window_start` /
`window_end` and aggregate references resolved to the aggregation's columns, each output cast
to the type mangonel's schema declares."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from sqlglot import exp

from mangonel.compiler import physical as ph
from mangonel.compiler.logical import WindowKind
from mangonel.compiler.nodes import AggregateRef, WindowBound, WindowStruct
from mangonel.errors import PlanError
from mangonel.runtime.spark.schema import quote
from mangonel.runtime.spark.sql import aggregate_sql, lift_sql, output_sql

# Largest windows-per-tuple (w / s) planned as native Spark aggregation. Measured on 2 cores,
# 10 M tuples (docs/performance/spark.md, "Inside Spark"): native wins at w/s = 1 (1.8 vs 0.96 M
# tuples/s); the two-stage plan wins at w/s = 10 (1.4x) and w/s = 100 (14.7x).
NATIVE_MAX_WINDOWS_PER_TUPLE = 1

WINDOW = "__mangonel_window"
WINDOW_START = "__mangonel_window_start"
WINDOW_END = "__mangonel_window_end"


@dataclass(frozen=True)
class NativeChoice:
    """Whether a query runs as Spark's native window aggregation, and why (for EXPLAIN)."""

    native: bool
    reason: str


def windows_per_tuple(window: ph.WindowAggregateExec) -> float:
    return window.window.size / window.window.slide


# Session windows inside Spark: Spark's own `session_window` aggregation by default. Sessions
# have no panes, so mangonel's two stages ship every tuple (as for count windows) and save
# nothing before the shuffle; they run only where asked (native=False) or where Spark's plan
# cannot give what is asked (late_rows=: Spark drops late rows unseen).
SESSION_NATIVE = (
    "session windows: Spark's own session_window aggregation (sessions have no panes to "
    "pre-aggregate; native=False or late_rows= runs mangonel's per-tuple stages)"
)
SESSION_STAGES = (
    "session windows in mangonel's two stages: stage 1 ships each tuple's partials, stage 2 "
    "merges them into sessions per key with the standalone rules"
)


def per_tuple(window: ph.WindowAggregateExec) -> bool:
    """Whether stage 1 ships one partial per tuple (count and session windows: no panes)."""
    return window.window.kind in (WindowKind.COUNT, WindowKind.SESSION)


def choose_native(window: ph.WindowAggregateExec, forced: bool | None = None) -> NativeChoice:
    """The cost-based choice between Spark's native window aggregation and mangonel's two
    stages; `forced` (the session's `native=` argument) overrides it. Session windows run
    natively unless forced off (`SESSION_STAGES`); CUMULATE windows never do."""
    if window.window.kind is WindowKind.SESSION:
        if forced is False:
            return NativeChoice(False, SESSION_STAGES)
        return NativeChoice(True, SESSION_NATIVE)
    if window.window.kind is WindowKind.CUMULATE:
        if forced is True:
            raise PlanError("native=True: Spark has no CUMULATE windows; use native=None")
        return NativeChoice(False, "CUMULATE windows: Spark's window() has no such form")
    per_tuple = windows_per_tuple(window)
    shape = f"w/s = {per_tuple:g}"
    if forced is True:
        return NativeChoice(True, f"native=True requested ({shape})")
    if forced is False:
        return NativeChoice(False, f"native=False requested ({shape})")
    if per_tuple <= NATIVE_MAX_WINDOWS_PER_TUPLE:
        return NativeChoice(
            True,
            f"{shape}, nothing to expand: Spark keeps rows in the JVM, mangonel's stage 1 "
            "would copy every row into Python",
        )
    return NativeChoice(
        False,
        f"{shape} > {NATIVE_MAX_WINDOWS_PER_TUPLE}: Spark would copy every row into "
        f"{per_tuple:g} windows; panes of {window.pane_length} us are pre-aggregated once",
    )


def aggregate_column(number: int) -> str:
    return f"__mangonel_agg{number}"


def resolve_outputs(expression: exp.Expression, window: ph.WindowAggregateExec) -> str:
    """Spark SQL of a HAVING or SELECT expression over the native aggregation's columns."""

    def column(node: exp.Expression) -> str:
        if isinstance(node, WindowStruct):  # Spark's own `window` struct, as Spark builds it
            return f"named_struct('start', {WINDOW_START}, 'end', {WINDOW_END})"
        if isinstance(node, WindowBound):
            column = WINDOW_START if node.reads == "start" else WINDOW_END
            if node.offset_us:  # window_time
                return f"({column} - INTERVAL {-node.offset_us} MICROSECONDS)"
            return column
        assert isinstance(node, AggregateRef)
        return aggregate_column(node.number)

    return output_sql(expression, window, column)


def native_query(plan: ph.ProjectExec, watermarked: DataFrame) -> DataFrame:
    """The query as Spark's streaming window aggregation (append mode); `watermarked` is the
    stream's DataFrame with Spark's watermark on the event time."""
    window = ph.find(plan, ph.WindowAggregateExec)
    scan = window.lift.scan
    event_time = scan.stream.event_time
    rows = watermarked
    if window.lift.predicate is not None:
        rows = rows.where(lift_sql(window.lift.predicate, scan))
    size = f"{window.window.size} microseconds"
    slide = f"{window.window.slide} microseconds"
    if window.window.kind is WindowKind.SESSION:  # size is the gap
        grouping = F.session_window(quote(event_time), size)
    else:
        grouping = F.window(quote(event_time), size, slide)
    keys = [F.col(quote(k.name)) for k in window.keys]
    aggregates = [
        F.expr(aggregate_sql(aggregate, scan)).alias(aggregate_column(number))
        for number, aggregate in enumerate(window.aggregates)
    ]
    grouped = rows.groupBy(grouping.alias(WINDOW), *keys).agg(*aggregates)
    return project_outputs(plan, grouped)


def project_outputs(plan: ph.ProjectExec, grouped: DataFrame) -> DataFrame:
    """HAVING and the SELECT list over a window aggregation's columns (the `WINDOW` struct,
    the keys, `aggregate_column(i)` holding each aggregate's result), each output cast to
    the type mangonel's schema declares."""
    window = ph.find(plan, ph.WindowAggregateExec)
    flat = grouped.select(
        "*",
        F.col(f"{WINDOW}.start").alias(WINDOW_START),
        F.col(f"{WINDOW}.end").alias(WINDOW_END),
    )
    for having in (node for node in ph.walk(plan) if isinstance(node, ph.FilterExec)):
        flat = flat.where(resolve_outputs(having.predicate, window))
    return flat.select(
        *[
            F.expr(resolve_outputs(output.expression, window))
            .cast(output.type.info.spark)
            .alias(output.name)
            for output in plan.outputs
        ]
    )
