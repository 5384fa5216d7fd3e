"""The standalone session: DDL, queries, EXPLAIN. Batches in, results out; no Spark.

Statements and planning are `mangonel.compiler.statements.StatementRunner`'s; this layer adds
what needs the runtime: the GPU probe and running a planned query on Arrow batches.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from mangonel.compiler import physical
from mangonel.compiler.statements import PlannedQuery, QueryOptions, StatementRunner
from mangonel.runtime.cpu.python_window import compile_window_function
from mangonel.runtime.gpu.probe import gpu_status
from mangonel.runtime.gpu.python_window import cuda_problem


class Query(PlannedQuery):
    """A planned window query. Runs on batches of Arrow data; explains itself."""

    def __init__(self, text: str, plan: physical.ProjectExec, logical: Any) -> None:
        super().__init__(text, plan, logical)
        self._runner: Any = None

    def _new_runner(self) -> Any:
        from mangonel.runtime.local.query import LocalQuery

        return LocalQuery(self.plan)

    def run(self, batches: Iterable[pa.RecordBatch | pa.Table] | Any) -> pa.Table:  # noqa: ANN401
        """Run the query over a finite sequence of batches; every window fires at the end.
        A join query takes its inputs by name: `(name, batch)` pairs in arrival order, or a
        dict name -> batches interleaved round-robin (docs/semantics.md, "Joins")."""
        self._runner = self._new_runner()
        return self._runner.run(batches)

    def stream(
        self, batches: Iterable[pa.RecordBatch | pa.Table] | Any
    ) -> Iterator[pa.RecordBatch]:  # noqa: ANN401, E501
        """Results as windows fire, batch by batch (a join query: its arrivals, as `run`)."""
        self._runner = self._new_runner()
        return self._runner.stream(batches)

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
    """

    def __init__(
        self,
        backend: str = "auto",
        *,
        windows_per_batch: int | None = None,
        join_algorithm: str | None = None,
        gpu_join: bool = True,
        join_factorised: bool = True,
    ) -> None:
        super().__init__(
            backend,
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


__all__ = ["Query", "QueryOptions", "Session"]
