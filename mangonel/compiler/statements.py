"""Statements against a catalog: DDL, SHOW, query planning and EXPLAIN (no execution).

What both sessions share: the standalone `mangonel.session.Session` (which adds running
queries on Arrow batches) and `mangonel.runtime.spark.session.SparkMangonelSession` (which
turns planned queries into Spark DataFrames). It sits at the compiler's layer, so the Spark
runner uses it without importing the session layer above it.
"""

from __future__ import annotations

import datetime as dt
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from sqlglot import exp

from mangonel.aggregates.python import WindowFunction
from mangonel.catalog.catalog import (
    Catalog,
    Column,
    Schema,
    Stream,
    Table,
    stream_column_problem,
)
from mangonel.catalog.options import check_stream_options, check_table_options
from mangonel.catalog.types import SqlType, type_from_arrow
from mangonel.compiler import ddl, physical, window_functions
from mangonel.compiler.backend import BACKENDS, choose_backend, needs_probe
from mangonel.compiler.bind import bind
from mangonel.compiler.explain import explain_json, explain_text
from mangonel.compiler.holistic import check_percentile_path
from mangonel.compiler.limits import MAX_DURATION_DAYS, MAX_DURATION_US
from mangonel.compiler.nodes import Explain
from mangonel.compiler.options import TuningOptions
from mangonel.compiler.parse import parse_duration, parse_statement
from mangonel.compiler.streams import stream_from_ddl
from mangonel.errors import BackendUnavailableError, CatalogError, PlanError


@dataclass(frozen=True)
class QueryOptions:
    windows_per_batch: int | None = None
    join_algorithm: str | None = None  # join queries: "hash", "sort-merge"; None: auto
    gpu_join: bool = True  # GPU plans of join queries: the join on the GPU (else the CPU)
    join_factorised: bool = True  # aggregated joins: factorised where the shape allows
    tuning: TuningOptions = TuningOptions()  # the holistic firing's online auto-tuner
    approx_percentile: str = "auto"  # APPROX_PERCENTILE: "auto", "exact" or "sketch"


def _windows_per_batch(value: object) -> int | None:
    """The session's windows_per_batch: None (chosen from each window) or a whole number >= 1
    (PlanError otherwise: 0 or a negative count once hung the firing loop)."""
    if value is None:
        return None
    try:
        count = operator.index(value)  # ints and NumPy integers, not floats, strings or bools
    except TypeError:
        count = None
    if count is None or isinstance(value, bool) or count < 1:
        raise PlanError(
            f"windows_per_batch must be a whole number >= 1, not {value!r}",
            hint="leave it out (None) to have it chosen from each window's panes",
        )
    return count


class PlannedQuery:
    """A planned window query: its text, logical and physical plan; explains itself.
    (`mangonel.session.Query` adds running it on batches of Arrow data.)"""

    def __init__(self, text: str, plan: physical.ProjectExec, logical: Any) -> None:
        self.text = text
        self.plan = plan
        self.logical = logical

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of the results."""
        return pa.schema([pa.field(o.name, o.type.info.arrow) for o in self.plan.outputs])

    @property
    def backend(self) -> str:
        return physical.plan_backend(self.plan)

    def explain(self, codegen: bool = False, format: str = "text") -> str | dict:
        """The physical plan as text (or a dict with format='json'); codegen=True appends the
        CUDA source of the query's GPU plan (rendered on any machine, no GPU needed)."""
        if format == "json":
            return explain_json(self.plan)
        text = explain_text(self.plan)
        if codegen:
            from mangonel.compiler.codegen import explain_codegen

            text += "\n" + explain_codegen(self.plan)
        return text


class StatementRunner:
    """A catalog of streams and tables, and the compiler bound to it: runs DDL, plans queries.

    The standalone `mangonel.session.Session` and the Spark session both are (or hold) one;
    it imports no runtime module. `gpu_probe` answers whether a GPU can be used (the runtime's
    `gpu_status`); it is called only when the backend is not 'cpu'.

    backend: "cpu", "gpu" or "auto" (GPU when CuPy sees a device, else CPU).
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
        gpu_probe: Callable[[], tuple[bool, str]] | None = None,
        compile_window_function: window_functions.Compile | None = None,
        cuda_window_function: window_functions.CudaCheck | None = None,
    ) -> None:
        if backend not in BACKENDS:
            raise BackendUnavailableError(
                f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}"
            )
        self.backend = backend
        if join_algorithm not in (None, "auto", *physical.JOIN_ALGORITHMS):
            raise PlanError(
                f"unknown join_algorithm {join_algorithm!r}",
                hint="choose 'auto', " + " or ".join(repr(a) for a in physical.JOIN_ALGORITHMS),
            )
        self.options = QueryOptions(
            windows_per_batch=_windows_per_batch(windows_per_batch),
            join_algorithm=join_algorithm,
            gpu_join=gpu_join,
            join_factorised=join_factorised,
            tuning=_tuning(tuning),
            approx_percentile=check_percentile_path(approx_percentile),
        )
        self.catalog = Catalog()
        self.gpu_probe = gpu_probe
        self.compile_window_function = compile_window_function
        self.cuda_window_function = cuda_window_function

    # -- DDL -------------------------------------------------------------------------

    def execute(self, statement: str) -> pa.Table | str | PlannedQuery | None:
        """Run one statement: CREATE STREAM/TABLE and DROP return None, SHOW returns a
        table, EXPLAIN returns the plan text, a query returns a PlannedQuery (as `sql`)."""
        parsed = parse_statement(statement)
        if isinstance(parsed, ddl.CreateStream):
            self.catalog.add_stream(
                stream_from_ddl(parsed), replace=getattr(parsed, "or_replace", False)
            )
            return None
        if isinstance(parsed, ddl.CreateTable):
            problem = check_table_options(parsed.name, parsed.options)
            if problem is not None:
                raise CatalogError(problem.message, hint=problem.hint)
            table = Table(parsed.name, Schema(parsed.columns), parsed.options)
            self.catalog.add_table(table, replace=getattr(parsed, "or_replace", False))
            return None
        if isinstance(parsed, ddl.Drop):
            self.catalog.drop(parsed.kind, parsed.name, if_exists=parsed.if_exists)
            return None
        if isinstance(parsed, ddl.Show):
            return self._show(parsed.kind)
        return self._query_or_explain(statement, parsed)

    def create_stream(
        self,
        name: str,
        schema: pa.Schema,
        *,
        event_time: str,
        watermark: str | int | dt.timedelta = 0,
        replace: bool = False,
        **options: str,
    ) -> Stream:
        """Declare a stream from an Arrow schema (the API twin of CREATE STREAM): the same
        column rules (names case-insensitively distinct) and the same options (`source` and
        its options, see docs/sql.md); `watermark` is a duration text, a `timedelta` or
        whole microseconds."""
        _check_stream_arguments(name, schema, event_time, watermark)
        if isinstance(watermark, dt.timedelta):
            watermark = watermark // dt.timedelta(microseconds=1)
        columns = []
        for field in schema:
            sql_type = type_from_arrow(field.type)
            if sql_type is None:
                raise CatalogError(
                    f"column {field.name!r} has Arrow type {field.type}, which mangonel does "
                    "not support",
                    hint="supported: " + ", ".join(t.value for t in SqlType),
                )
            columns.append(Column(field.name, sql_type, field.nullable))
        problem = stream_column_problem(columns)
        if problem is not None:
            raise CatalogError(
                f"stream {name!r}: {problem[1]}", hint=f"{problem[2]} (rename the Arrow field)"
            )
        options = {key.lower(): str(value) for key, value in options.items()}
        for keyword in ("event_time", "watermark"):
            if keyword in options:  # in another case than the keyword argument's
                raise CatalogError(
                    f"stream {name!r}: {keyword!r} given as an option",
                    hint=f"pass it as the keyword argument {keyword}=..., in lower case",
                )
        problem = check_stream_options(name, options.items())
        if problem is not None:
            raise CatalogError(problem.message, hint=problem.hint)
        delay = watermark if isinstance(watermark, int) else parse_duration(watermark)
        if not 0 <= delay <= MAX_DURATION_US:
            raise CatalogError(
                f"stream {name!r}: watermark {delay} microseconds is out of range",
                hint=f"the watermark is a duration from 0 to {MAX_DURATION_DAYS} days, e.g. "
                "'500 milliseconds' or 500000 (microseconds)",
            )
        event = Schema(tuple(columns)).find(event_time)
        if event is None or event.type is not SqlType.TIMESTAMP:
            raise CatalogError(
                f"event_time {event_time!r} must name a TIMESTAMP column of the stream",
                hint="columns: " + ", ".join(c.name for c in columns),
            )
        stream = Stream(
            name, Schema(tuple(columns)), event.name, delay, tuple(sorted(options.items()))
        )
        self.catalog.add_stream(stream, replace=replace)
        return stream

    def _show(self, kind: str) -> pa.Table:
        if kind == "STREAMS":
            streams = sorted(self.catalog.streams.values(), key=lambda s: s.name.lower())
            return pa.table(
                {
                    "name": [s.name for s in streams],
                    "columns": [_columns_text(s.schema) for s in streams],
                    "event_time": [s.event_time for s in streams],
                    "watermark_us": pa.array([s.watermark_delay_us for s in streams], pa.int64()),
                }
            )
        tables = sorted(self.catalog.tables.values(), key=lambda t: t.name.lower())
        return pa.table(
            {
                "name": [t.name for t in tables],
                "columns": [_columns_text(t.schema) for t in tables],
            }
        )

    # -- Python window functions ------------------------------------------------------

    def register_window_function(
        self,
        name: str,
        function: Callable[..., Any],
        *,
        returns: str | SqlType = "DOUBLE",
        replace: bool = False,
        with_timestamps: bool = False,
    ) -> WindowFunction:
        """Make `function` callable in SQL as the aggregate `name(x)`: a Python function of
        one NumPy array (the window's non-NULL values of x, sorted ascending; float64 for a
        floating x, int64 for an integer one) returning one number of type `returns`
        (DOUBLE, FLOAT, BIGINT or INT). `with_timestamps=True`: a function of two arrays,
        the values and their tuples' event times (int64 microseconds since the epoch,
        aligned with the values; equal values in event-time order). It is compiled with
        numba now (for float64 values) and at planning (for the call's argument type);
        either raises an error naming the function and numba's reason when it does not
        compile."""
        return window_functions.register(
            self.catalog,
            name,
            function,
            returns,
            replace,
            self.compile_window_function,
            with_timestamps,
        )

    def window_function(
        self,
        name: str | None = None,
        *,
        returns: str | SqlType = "DOUBLE",
        replace: bool = False,
        with_timestamps: bool = False,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator form of `register_window_function` (the name defaults to the function's):

        @session.window_function(returns="DOUBLE")
        def trimmed_mean(values): ...
        """

        def register(function: Callable[..., Any]) -> Callable[..., Any]:
            registered = name if name is not None else getattr(function, "__name__", None)
            self.register_window_function(
                registered,  # type: ignore[arg-type]
                function,
                returns=returns,
                replace=replace,
                with_timestamps=with_timestamps,
            )
            return function

        return register

    # -- queries ---------------------------------------------------------------------

    def sql(self, query: str) -> PlannedQuery | str:
        """Plan a window query (returns a PlannedQuery), or answer `EXPLAIN [CODEGEN] <query>`
        with the plan text."""
        parsed = parse_statement(query)
        if isinstance(parsed, (ddl.CreateStream, ddl.CreateTable, ddl.Drop, ddl.Show)):
            raise CatalogError(
                "sql() plans queries; DDL goes to execute()",
                line=1,
                column=1,
                construct=query.strip().splitlines()[0] if query.strip() else query,
                hint='session.execute("CREATE STREAM ...")',
            )
        return self._query_or_explain(query, parsed)

    def _query_or_explain(self, text: str, parsed: exp.Expression) -> PlannedQuery | str:
        if isinstance(parsed, Explain):
            query = self._plan(text, parsed.this)
            return query.explain(codegen=bool(parsed.args.get("codegen")))
        return self._plan(text, parsed)

    def _plan(self, text: str, select: exp.Expression) -> PlannedQuery:
        bound = bind(select, self.catalog)
        probe = self.gpu_probe if needs_probe(self.backend) else None
        backend, reason = choose_backend(self.backend, probe() if probe is not None else None)
        window_functions.check_calls(
            bound.logical,
            bound.argument_types,
            self.compile_window_function,
            self.cuda_window_function if backend == "gpu" else None,
        )
        plan = physical.plan(
            bound.logical,
            argument_types=bound.argument_types,
            backend=backend,
            backend_reason=reason,
            windows_per_batch=self.options.windows_per_batch,
            join_algorithm=self.options.join_algorithm,
            gpu_join=self.options.gpu_join,
            join_factorised=self.options.join_factorised,
            tuning=self.options.tuning,
            approx_percentile=self.options.approx_percentile,
        )
        return self._query(text, plan, bound.logical)

    def _query(self, text: str, plan: physical.ProjectExec, logical: Any) -> PlannedQuery:
        """The object a planned query is returned as (the standalone session's runs)."""
        return PlannedQuery(text, plan, logical)


def _tuning(tuning: str | TuningOptions | None) -> TuningOptions:
    """A session's `tuning` argument as options; a clear error for a bad one."""
    try:
        return TuningOptions.of(tuning)
    except ValueError as error:
        raise PlanError(
            str(error),
            hint="tuning='online' (the default), 'off', or "
            "TuningOptions(windows_per_launch=..., gpu_form=...) to fix knobs",
        ) from None


def _check_stream_arguments(
    name: object, schema: object, event_time: object, watermark: object
) -> None:
    """`create_stream`'s arguments of the wrong Python type, named (a TypeError, as Python's
    own); a bool is not a watermark, though Python counts it an int."""
    if not isinstance(name, str) or not name.strip():
        raise TypeError(f"the stream's name is a non-empty str, got {name!r}")
    if not isinstance(schema, pa.Schema):
        raise TypeError(
            f"stream {name!r}: the schema is a pyarrow.Schema, got {type(schema).__name__} "
            "(e.g. pa.schema([('ts', pa.timestamp('us')), ('k', pa.int64())]))"
        )
    if not isinstance(event_time, str):
        raise TypeError(f"stream {name!r}: event_time is a column name, got {event_time!r}")
    if isinstance(watermark, bool) or not isinstance(watermark, str | int | dt.timedelta):
        raise TypeError(
            f"stream {name!r}: watermark is a duration ('500 milliseconds'), a timedelta or "
            f"whole microseconds, got {watermark!r}"
        )


def _columns_text(schema: Schema) -> str:
    """`ts TIMESTAMP NOT NULL, symbol STRING`: the columns as CREATE STREAM/TABLE declares them."""
    return ", ".join(
        f"{c.name} {c.type}" + ("" if c.nullable else " NOT NULL") for c in schema.columns
    )


__all__ = ["PlannedQuery", "QueryOptions", "StatementRunner"]
