"""Stage 2 as Spark's own (JVM) streaming aggregation over the reader's pane partials.

The reader path (reader.py) hands Spark one partial row per (key, pane): keys, `__pane`, the
state fields' parts and the partition's watermark time. Where every aggregate of the query
merges with a Spark aggregate function (COUNT, SUM, MIN, MAX, AVG as sum + count, BOOL_AND,
BOOL_OR), stage 2 need not be mangonel's Python operator (`applyInPandasWithState`, whose
fixed cost per micro-batch bounds the inside-Spark rate: docs/performance/spark.md): Spark's
`GROUP BY window(pane_start, w, s), keys` does the pane-to-window expansion (a pane lies in
exactly the windows that cover its start, since windows start at multiples of s and
gcd(w, s) divides both), merges the partials with `sum`/`min`/`max` and fires in append
mode, and the final projection is the native plan's (`native.project_outputs`).

Watermark. Spark's `withWatermark` sits on the partials' watermark time (the largest event
time of the partition's rows that Spark's watermark counts, pane_reader.py), so W_N is the
DataFrame path's. The window is computed from the pane start, a column tagged with Spark's
watermark-delay metadata (as stage2.py tags its never-late column): Spark then evicts a
(window, key) once window.end <= W_N and drops a partial's contribution to a window with
window.end <= W_{N-1}, per window: exactly Spark's rule over the rows, since all tuples of a
pane belong to the same windows. Late contributions are dropped and counted by Spark
(`numRowsDroppedByWatermark`, in partial rows, not tuples).

Carrier rows. A reader partition always sends one row with no tuples (row count 0) so that
its watermark time reaches Spark even when WHERE kept none of its rows. It is filtered out
after the watermark; the filter reads the watermark column so that Spark's optimizer keeps it
above `EventTimeWatermark` (it pushes a conjunct below the watermark only when it does not
read the event-time column).

STDDEV/VARIANCE keep the Python stage 2: their (n, mean, m2) partials merge exactly only with
Chan's update, which Spark SQL has no aggregate for; the sum-of-squares form
(sum(m2 + n mean^2) - sum(n mean)^2 / N) cancels catastrophically when mean^2 >> variance.
Holistic functions (raw values per pane) keep it too.
"""

from __future__ import annotations

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from mangonel.catalog.types import SqlType
from mangonel.compiler import physical as ph
from mangonel.runtime.operators.base import partial_column_name
from mangonel.runtime.spark import native as native_module
from mangonel.runtime.spark.pane_reader import EVENT_TIME
from mangonel.runtime.spark.schema import quote, spark_interval
from mangonel.runtime.spark.stage1 import PANE, spark_name
from mangonel.runtime.spark.stage2 import WATERMARK_DELAY_KEY

PANE_START = "__mangonel_pane_start"
# Spark's merge of each state kind's one part (partials of one (key, pane) -> a window's)
MERGES = {"count": "sum", "sum": "sum", "min": "min", "max": "max"}
MERGES |= {"bool_and": "min", "bool_or": "max"}  # 0/1 values: AND is min, OR is max
_LOW_32 = 4294967295


def unmergeable(window: ph.WindowAggregateExec) -> str | None:
    """Why Spark's own aggregation cannot merge this window's partials (None: it can)."""
    holistic = [a.call_name for a in window.aggregates if a.holistic]
    if holistic:
        return f"holistic functions ({', '.join(holistic)}) keep their values per pane"
    kinds = sorted({f.kind.name for f in window.fields if f.kind.name not in MERGES})
    if kinds:
        return (
            f"state kind {', '.join(kinds)} has no exact merge in Spark SQL (moments merge "
            "with Chan's update)"
        )
    return None


def _merged(field: ph.StateField) -> str:
    """Spark SQL of one field's merged value over a window's partials."""
    column = quote(spark_name(partial_column_name(field, 0)))
    merge = MERGES[field.kind.name]
    if merge == "sum" and field.type.is_integer and field.kind.name == "sum":
        # an integer SUM wraps around like standalone (partials are already wrapped): the
        # sums of the high and the low 32-bit halves cannot overflow, and the shifts
        # recombine them modulo 2^64 (sql.py's rule for Spark's own sum under ANSI)
        high = f"sum(shiftright({column}, 32))"
        low = f"sum({column} & {_LOW_32})"
        return f"(shiftleft({high} + shiftright({low}, 32), 32) | ({low} & {_LOW_32}))"
    return f"{merge}({column})"


def finalize_sql(plan: ph.AggregatePlan, fields: dict[str, ph.StateField]) -> str:
    """Spark SQL of one aggregate's result from the merged fields: the function's `finalize`
    (`mangonel.aggregates`) as SQL, typed as the plan's result type."""
    key = plan.function.definition.key
    count = _merged(fields[plan.count_field])
    if key in ("COUNT", "COUNT_STAR"):
        return count
    assert plan.value_field is not None
    value = _merged(fields[plan.value_field])
    result = plan.result_type
    if key == "AVG":
        data = f"try_divide(CAST({value} AS DOUBLE), CAST({count} AS DOUBLE))"
    elif key in ("BOOL_AND", "BOOL_OR"):
        data = f"({value} <> 0)"
    elif result is SqlType.TIMESTAMP:
        data = f"timestamp_micros({value})"
    else:
        assert isinstance(result, SqlType)
        data = f"CAST({value} AS {result.info.spark})"
    return f"CASE WHEN {count} = 0 THEN NULL ELSE {data} END"


def merge_calls(window: ph.WindowAggregateExec) -> list[str]:
    """Each aggregate's Spark SQL over the partials (EXPLAIN prints them)."""
    fields = {f.name: f for f in window.fields}
    return [finalize_sql(a, fields) for a in window.aggregates]


def pane_start(window: ph.WindowAggregateExec) -> SparkColumn:
    """A partial's pane start as a timestamp, tagged as Spark's watermarked column so that
    `window()` over it carries the watermark (module docstring)."""
    delay_ms = window.window.watermark_delay_us // 1000
    start = F.expr(f"timestamp_micros({PANE} * {window.pane_length})")
    return start.alias(PANE_START, metadata={WATERMARK_DELAY_KEY: delay_ms})


def carrier_filter(window: ph.WindowAggregateExec) -> str:
    """Keeps partial rows (row count > 0), written to read the watermark column so that it
    stays above `EventTimeWatermark` (module docstring): `unix_micros(t) * 0` is 0 or NULL,
    and coalesce makes it 0."""
    rows = quote(spark_name(window.fields[0].name))
    return f"{rows} + coalesce(unix_micros({EVENT_TIME}) * 0, 0) > 0"


def native_stage2(plan: ph.ProjectExec, partials: DataFrame) -> DataFrame:
    """The query's results from the reader's partials (with their watermark time column,
    not yet watermarked) as Spark's streaming window aggregation, append mode."""
    window = ph.find(plan, ph.WindowAggregateExec)
    delay = spark_interval(window.window.watermark_delay_us)
    watermarked = partials.withWatermark(EVENT_TIME, delay).where(carrier_filter(window))
    keys = [F.col(quote(k.name)) for k in window.keys]
    rows = watermarked.select(*keys, pane_start(window), *_field_columns(window))
    size = f"{window.window.size} microseconds"
    slide = f"{window.window.slide} microseconds"
    grouping = F.window(PANE_START, size, slide).alias(native_module.WINDOW)
    aggregates = [
        F.expr(call).alias(native_module.aggregate_column(number))
        for number, call in enumerate(merge_calls(window))
    ]
    grouped = rows.groupBy(grouping, *keys).agg(*aggregates)
    return native_module.project_outputs(plan, grouped)


def _field_columns(window: ph.WindowAggregateExec) -> list[SparkColumn]:
    return [F.col(quote(spark_name(partial_column_name(f, 0)))) for f in window.fields]
