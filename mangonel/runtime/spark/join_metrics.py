"""The join operator's metrics inside Spark, reported through Spark's own progress API.

A join query's buckets run in Python workers, each with its own join operator; the query's
metrics are the sum over the buckets. Each bucket call emits, besides its result rows, one
metrics row: how much each of its operator's counters grew during the call (the operator's
counters are cumulative and live in the bucket's snapshot, so the growth is exact across
restarts). The rows are summed by Spark's `DataFrame.observe` (an observation named
`OBSERVATION`) and then filtered out of the results, so every micro-batch's
`StreamingQueryProgress.observedMetrics["mangonel_join"]` holds that micro-batch's counts:

- `rows_in_<alias>`, `late_<alias>`: rows read and late rows dropped, per stream side (by the
  query's alias of the side, which is unique where stream names may not be: a self-join);
- `null_event_time_dropped`, `windows_fired`, `rows_out`;
- `state_bytes`: how much the join state grew (negative: shrank) in the micro-batch; summed
  from a query's first micro-batch, the state's size;
- `batches_hash`, `batches_sort_merge`: batches joined by each algorithm.

Result rows carry NULL in the metric columns and the metrics row NULL in the result columns;
`windows_fired IS NULL` tells them apart.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from mangonel.catalog.types import SqlType
from mangonel.compiler import physical as ph
from mangonel.runtime.operators.join import JoinMetrics
from mangonel.runtime.spark.schema import quote

OBSERVATION = "mangonel_join"
METRIC_PREFIX = "__mangonel_metric_"
MARKER = "windows_fired"  # never NULL in a metrics row, always NULL in a result row


def metric_names(join: ph.WindowJoinExec) -> list[str]:
    """The observed metrics of a join query, in column order."""
    names: list[str] = []
    for alias in _stream_aliases(join):
        names += [f"rows_in_{alias}", f"late_{alias}"]
    names += ["null_event_time_dropped", MARKER, "rows_out", "state_bytes"]
    names += [_algorithm_metric(algorithm) for algorithm in ph.JOIN_ALGORITHMS]
    return names


def metric_columns(join: ph.WindowJoinExec) -> list[tuple[str, SqlType]]:
    """The metric columns the bucket callback adds to its output (BIGINT each)."""
    return [(METRIC_PREFIX + name, SqlType.BIGINT) for name in metric_names(join)]


def metric_values(join: ph.WindowJoinExec, metrics: JoinMetrics | None) -> dict[str, int]:
    """The counters of one bucket's operator by metric name (None: a bucket with no state)."""
    names = metric_names(join)
    if metrics is None:
        return dict.fromkeys(names, 0)
    values: dict[str, int] = {}
    # tuples_by_input / late_by_input are in side order over the stream sides (the aliases)
    for alias, (_, rows), (_, late) in zip(
        _stream_aliases(join), metrics.tuples_by_input, metrics.late_by_input, strict=True
    ):
        values[f"rows_in_{alias}"] = rows
        values[f"late_{alias}"] = late
    values["null_event_time_dropped"] = metrics.null_event_time_dropped
    values[MARKER] = metrics.windows_fired
    values["rows_out"] = metrics.rows_out
    values["state_bytes"] = metrics.state_bytes
    batches = dict(metrics.batches_by_algorithm)
    for algorithm in ph.JOIN_ALGORITHMS:
        values[_algorithm_metric(algorithm)] = batches.get(algorithm, 0)
    return values


def metric_row(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """One bucket call's metrics row: each counter's growth during the call, by column."""
    return {METRIC_PREFIX + name: after[name] - before[name] for name in after}


def observed(frame: DataFrame, join: ph.WindowJoinExec, outputs: list[str]) -> DataFrame:
    """The callback's output with the metrics rows summed into the `OBSERVATION` of each
    micro-batch's progress, then dropped: the query's results, columns `outputs`."""
    sums = [
        F.coalesce(F.sum(quote(METRIC_PREFIX + name)), F.lit(0)).alias(name)
        for name in metric_names(join)
    ]
    watched = frame.observe(OBSERVATION, *sums)
    results = watched.where(F.col(quote(METRIC_PREFIX + MARKER)).isNull())
    return results.select(*[F.col(quote(name)) for name in outputs])


def progress_totals(progresses: Iterable[Any]) -> dict[str, int]:
    """The join metrics summed over streaming progress reports (`StreamingQuery.
    recentProgress`: Spark keeps the last `spark.sql.streaming.numRecentProgressUpdates`).
    Empty when no report holds the join's observation."""
    totals: dict[str, int] = {}
    for progress in progresses:
        row = (progress.observedMetrics or {}).get(OBSERVATION)
        if row is None:
            continue
        for name, value in row.asDict().items():
            totals[name] = totals.get(name, 0) + int(value or 0)
    return totals


def _stream_aliases(join: ph.WindowJoinExec) -> list[str]:
    return [
        alias
        for alias, scan in zip(join.aliases, join.children, strict=True)
        if isinstance(scan, ph.StreamScanExec)
    ]


def _algorithm_metric(algorithm: str) -> str:
    return "batches_" + algorithm.replace("-", "_")


__all__ = [
    "OBSERVATION",
    "metric_columns",
    "metric_names",
    "metric_row",
    "metric_values",
    "observed",
    "progress_totals",
]
