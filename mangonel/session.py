"""The standalone session: DDL, queries, EXPLAIN. Batches in, results out; no Spark.

Statements and planning are `mangonel.compiler.statements.StatementRunner`'s; this layer adds
what needs the runtime: the GPU probe and running a planned query on Arrow batches.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from mangonel.compiler import physical
from mangonel.compiler.options import TuningOptions
from mangonel.compiler.statements import PlannedQuery, QueryOptions, StatementRunner
from mangonel.runtime.cpu.python_window import compile_window_function
from mangonel.runtime.gpu.probe import gpu_status
from mangonel.runtime.gpu.python_window import cuda_problem


class Query(PlannedQuery):
    """A planned window query. Runs on batches of Arrow data; explains itself."""

    def __init__(self, text: str, plan: physical.ProjectExec, logical: Any) -> None:
        super().__init__(text, plan, logical)
        self._runner: Any = None

    def _new_runner(self, keep_late_rows: bool = False) -> Any:
        from mangonel.runtime.local.query import LocalQuery

        return LocalQuery(self.plan, keep_late_rows=keep_late_rows)

    def run(self, batches: Iterable[pa.RecordBatch | pa.Table] | Any) -> pa.Table:  # noqa: ANN401
        """Run the query over a finite sequence of batches; every window fires at the end.
        A join query takes its inputs by name: `(name, batch)` pairs in arrival order, or a
        dict name -> batches interleaved round-robin (docs/semantics.md, "Joins"). The rows
        judged late are kept for `late_rows()`."""
        # the last run's runner goes first: its pinned buffers return to CuPy's pool, and the
        # new one takes them instead of allocating (cudaHostAlloc: ~13 ms a buffer on the H100)
        self._runner = None
        self._runner = self._new_runner(keep_late_rows=True)
        return self._runner.run(batches)

    def stream(
        self, batches: Iterable[pa.RecordBatch | pa.Table] | Any, late_rows: bool = False
    ) -> Iterator[Any]:  # noqa: ANN401
        """Results as windows fire, batch by batch (a join query: its arrivals, as `run`).
        With `late_rows=True` it yields `(kind, batch)` pairs instead: `("late", rows)` with
        the late rows of each input batch right after it, `("result", batch)` for results;
        nothing is kept (docs/semantics.md, "Late rows as data")."""
        self._runner = None  # as in run(): the last runner's buffers go back first
        self._runner = self._new_runner()
        if late_rows:
            return self._runner.stream_with_late_rows(batches)
        return self._runner.stream(batches)

    def late_rows(self, stream: str | None = None) -> pa.Table:
        """The rows the latest `run()` judged late, not taken yet, and forget them: the
        batch's columns as given, `late_reason`, `late_watermark` (and `late_stream` for a
        join); `stream`: one stream's rows only (docs/semantics.md, "Late rows as data")."""
        if self._runner is None:
            raise RuntimeError("the query has not run yet: call run() first")
        return self._runner.late_rows(stream)

    def explain(
        self, codegen: bool = False, format: str = "text", analyze: bool = False
    ) -> str | dict:
        """The physical plan (see `PlannedQuery.explain`); with analyze=True also each
        operator's runtime metrics of the latest run, the online auto-tuner's state and the
        configurations it tried (EXPLAIN ANALYZE; json: under "analyze")."""
        plan = super().explain(codegen=codegen, format=format)
        if not analyze:
            return plan
        if self._runner is None:
            raise RuntimeError(
                "explain(analyze=True) reports the latest run: call run() or stream() first"
            )
        from mangonel.runtime.local.query import analyze_text

        operators = self._runner.analyze()
        if isinstance(plan, dict):
            return {**plan, "analyze": operators}
        return plan + "\n" + analyze_text(operators)

    @property
    def metrics(self) -> Any:
        """Metrics of the latest run (tuples in, late tuples dropped, windows fired, ...)."""
        if self._runner is None:
            raise RuntimeError("the query has not run yet: call run() or stream() first")
        return self._runner.metrics


class Session(StatementRunner):
    """A catalog of streams and tables, and the compiler bound to it.

    backend: "cpu", "gpu" or "auto" (GPU when CuPy sees a device, else CPU).
    join_algorithm: the algorithm of join queries, "hash" or "sort-merge" (None or "auto":
    the planner's choice, which EXPLAIN prints with its reason).
    gpu_join: in GPU plans, run the join's matching, crediting and fused aggregation on the
    GPU (runtime/gpu/join.py; the default). False keeps the join on the CPU (EXPLAIN says so).
    join_factorised: aggregated joins whose shape allows it (INNER, grouped by join keys,
    each aggregate reading one side) are computed from per-side counts and partials, never
    per joined pair (EXPLAIN: fused=factorised); False keeps the pair path.
    tuning: the online auto-tuner of holistic aggregates' firing (windows per launch, the
    GPU selection form; `runtime/operators/tuner.py`): "online" (the default), "off" (the
    plan's values), or `TuningOptions(windows_per_launch=..., gpu_form=...)` to fix knobs.
    EXPLAIN shows it; `query.explain(analyze=True)` and `query.metrics.tuning` its choices.
    approx_percentile: how APPROX_PERCENTILE is answered: "auto" (the default: exact
    selection over raw values where they are kept anyway or the accuracy is 1000 or more,
    the GK sketch per pane below; docs/semantics.md), "exact" or "sketch" (forced). EXPLAIN
    prints each call's path and why (`approx_percentile=[...]`).
    """

    def __init__(
        self,
        backend: str = "auto",
        *,
        windows_per_batch: int | None = None,
        join_algorithm: str | None = None,
        gpu_join: bool = True,
        join_factorised: bool = True,
        tuning: str | TuningOptions | None = None,
        approx_percentile: str | None = None,
    ) -> None:
        super().__init__(
            backend,
            tuning=tuning,
            approx_percentile=approx_percentile,
            windows_per_batch=windows_per_batch,
            join_algorithm=join_algorithm,
            gpu_join=gpu_join,
            join_factorised=join_factorised,
            gpu_probe=gpu_status,
            compile_window_function=compile_window_function,
            cuda_window_function=cuda_problem,
        )

    def _query(self, text: str, plan: physical.ProjectExec, logical: Any) -> Query:
        return Query(text, plan, logical)


__all__ = ["Query", "QueryOptions", "Session", "TuningOptions"]
