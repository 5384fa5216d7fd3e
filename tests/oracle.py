"""A plain, obviously correct evaluator of DESIGN section 3, for tests only.

Per-tuple loops over Python lists and dicts; it shares nothing with the engine except the
scalar expression evaluator (`mangonel.compiler.expressions.evaluate`), and bare column /
aggregate / window-bound references it answers itself.

Decisions it encodes (the engine documents the same in mangonel.runtime.operators.window):
NULL event times are dropped and counted whatever WHERE says; late tuples are counted only if
they passed WHERE; rows of one firing are ordered by window, then key in the order keys first
contributed a tuple; count windows span [first tuple's ts, last tuple's ts + 1).
"""

from __future__ import annotations

import math
from collections import defaultdict

import pyarrow as pa
from sqlglot import exp

from mangonel.compiler.logical import AggregateFunction as F
from mangonel.compiler.logical import WindowKind
from mangonel.compiler.nodes import AggregateRef, WindowBound
from mangonel.compiler.physical import ProjectExec, unpack


def _eval(expression, column_types, columns, aggregates, aggregate_types, bounds, length):
    while isinstance(expression, exp.Paren):
        expression = expression.this
    if isinstance(expression, exp.Column) and expression.name in columns:
        return columns[expression.name]
    if isinstance(expression, AggregateRef):
        return aggregates[int(expression.args["this"])]
    if isinstance(expression, WindowBound):
        return bounds[expression.args["this"]]
    from mangonel.compiler.expressions import evaluate
    from mangonel.compiler.typing import TypeEnv

    env = TypeEnv(columns=dict(column_types), aggregates=tuple(aggregate_types))
    return evaluate(
        expression, env, columns, aggregates=aggregates, window_bounds=bounds, length=length
    )


def _column_list(array) -> list:
    if pa.types.is_timestamp(array.type):
        return array.cast(pa.int64()).to_pylist()
    return array.to_pylist()


def aggregate_value(function: F, values: list, rows: int):
    """One aggregate over the argument values of the tuples of one (window, key)."""
    if function is F.COUNT_STAR:
        return rows
    present = [v for v in values if v is not None]
    if function is F.COUNT:
        return len(present)
    if not present:
        return None
    if function is F.SUM:
        if all(isinstance(v, int) for v in present):
            total = sum(present)
            return (total + 2**63) % 2**64 - 2**63  # BIGINT wraps
        return math.fsum(present)
    if function is F.MIN:
        return min(present)
    if function is F.MAX:
        return max(present)
    n = len(present)
    mean = math.fsum(present) / n
    if function is F.AVG:
        return mean
    m2 = math.fsum((v - mean) ** 2 for v in present)
    if function in (F.VAR_POP, F.STDDEV_POP):
        variance = m2 / n
    else:
        if n < 2:
            return None
        variance = m2 / (n - 1)
    return math.sqrt(variance) if function in (F.STDDEV_POP, F.STDDEV_SAMP) else variance


class Oracle:
    """Feed batches with `process` (returns the rows that fire after it), then `finish`."""

    def __init__(self, plan: ProjectExec) -> None:
        self.pipeline = unpack(plan)
        self.window = self.pipeline.window.window
        self.scan_types = {c.name: c.type for c in self.pipeline.scan.columns}
        self.watermark = None
        self.max_ts = None
        self.tuples_in = 0
        self.late = 0
        self.null_event_time = 0
        self.key_order: dict[tuple, int] = {}
        # time windows: (window number, key) -> list of argument tuples
        self.contents: dict[tuple, list] = defaultdict(list)
        # count windows
        self.pending: dict[tuple, list] = defaultdict(list)
        self.final: dict[tuple, list] = defaultdict(list)
        self.next_window: dict[tuple, int] = defaultdict(int)
        self.arrivals = 0

    def _tuples(self, batch: pa.RecordBatch):
        n = batch.num_rows
        columns = dict(zip(batch.schema.names, batch.columns, strict=True))
        ts = _column_list(columns[self.pipeline.scan.stream.event_time])
        lift = self.pipeline.lift
        if lift.predicate is not None and n:
            where = _eval(lift.predicate, self.scan_types, columns, [], [], {}, n).to_pylist()
        else:
            where = [True] * n
        keys = [columns[k.name].to_pylist() for k in lift.keys]
        arguments = []
        for plan in self.pipeline.window.aggregates:
            if plan.argument is None or not n:
                arguments.append([None] * n)
            else:
                value = _eval(plan.argument, self.scan_types, columns, [], [], {}, n)
                arguments.append(_column_list(value))
        for i in range(n):
            key = tuple(column[i] for column in keys)
            yield ts[i], where[i] is True, key, tuple(a[i] for a in arguments)

    def process(self, batch: pa.RecordBatch) -> list[dict]:
        for ts, passed, key, args in self._tuples(batch):
            self.tuples_in += 1
            if ts is None:
                self.null_event_time += 1
                continue
            self.max_ts = ts if self.max_ts is None else max(self.max_ts, ts)
            if not passed:
                continue
            if self.window.kind is WindowKind.TIME:
                self._add_time(ts, key, args)
            else:
                self._add_count(ts, key, args)
        if self.max_ts is not None:
            candidate = self.max_ts - self.window.watermark_delay_us
            if self.watermark is None or candidate > self.watermark:
                self.watermark = candidate
        return self._fire(final=False)

    def finish(self) -> list[dict]:
        return self._fire(final=True)

    def _add_time(self, ts, key, args) -> None:
        size, slide = self.window.size, self.window.slide
        if self.watermark is not None and (ts // slide) * slide + size <= self.watermark:
            self.late += 1
            return
        self.key_order.setdefault(key, len(self.key_order))
        for k in range((ts - size) // slide + 1, ts // slide + 1):
            if self.watermark is None or k * slide + size > self.watermark:
                self.contents[(k, key)].append(args)

    def _add_count(self, ts, key, args) -> None:
        if self.watermark is not None and ts < self.watermark:
            self.late += 1
            return
        self.key_order.setdefault(key, len(self.key_order))
        self.pending[key].append((ts, self.arrivals, args))
        self.arrivals += 1

    def _fire(self, final: bool) -> list[dict]:
        fired = []  # (order, key, window_start, window_end, list of argument tuples)
        if self.window.kind is WindowKind.TIME:
            size, slide = self.window.size, self.window.slide
            for (k, key), tuples in list(self.contents.items()):
                if final or (self.watermark is not None and k * slide + size <= self.watermark):
                    fired.append(
                        ((k, self.key_order[key]), key, k * slide, k * slide + size, tuples)
                    )
                    del self.contents[(k, key)]
        else:
            n, m = self.window.size, self.window.slide
            for key in list(self.pending):
                becoming = [
                    t
                    for t in self.pending[key]
                    if final or (self.watermark is not None and t[0] < self.watermark)
                ]
                self.pending[key] = [t for t in self.pending[key] if t not in becoming]
                self.final[key].extend(sorted(becoming, key=lambda t: (t[0], t[1])))
                while self.next_window[key] * m + n <= len(self.final[key]):
                    j = self.next_window[key]
                    window = self.final[key][j * m : j * m + n]
                    fired.append(
                        (
                            (j, self.key_order[key]),
                            key,
                            window[0][0],
                            window[-1][0] + 1,
                            [t[2] for t in window],
                        )
                    )
                    self.next_window[key] += 1
        fired.sort(key=lambda entry: entry[0])
        return self._rows(fired)

    def _rows(self, fired) -> list[dict]:
        if not fired:
            return []
        pipeline = self.pipeline
        plans = pipeline.window.aggregates
        aggregates = []
        for position, plan in enumerate(plans):
            values = [
                aggregate_value(plan.function, [args[position] for args in tuples], len(tuples))
                for _, _, _, _, tuples in fired
            ]
            arrow_type = plan.result_type.info.arrow
            if pa.types.is_timestamp(arrow_type):
                aggregates.append(pa.array(values, pa.int64()).cast(arrow_type))
            else:
                aggregates.append(pa.array(values, arrow_type))
        key_columns = pipeline.lift.keys
        columns = {}
        for position, column in enumerate(key_columns):
            values = [entry[1][position] for entry in fired]
            columns[column.name] = pa.array(values, column.type.info.arrow)
        stamp = pa.timestamp("us", tz="UTC")
        bounds = {
            "start": pa.array([e[2] for e in fired], pa.int64()).cast(stamp),
            "end": pa.array([e[3] for e in fired], pa.int64()).cast(stamp),
        }
        column_types = {c.name: c.type for c in key_columns}
        aggregate_types = [p.result_type for p in plans]
        length = len(fired)
        if pipeline.having is not None:
            keep = _eval(
                pipeline.having, column_types, columns, aggregates, aggregate_types, bounds, length
            ).to_pylist()
            selection = pa.array([i for i, k in enumerate(keep) if k is True], pa.int64())
            columns = {name: array.take(selection) for name, array in columns.items()}
            aggregates = [array.take(selection) for array in aggregates]
            bounds = {name: array.take(selection) for name, array in bounds.items()}
            length = len(selection)
        outputs = {}
        for output in pipeline.outputs:
            value = _eval(
                output.expression,
                column_types,
                columns,
                aggregates,
                aggregate_types,
                bounds,
                length,
            )
            outputs[output.name] = _column_list(value.cast(output.type.info.arrow))
        return [{name: outputs[name][i] for name in outputs} for i in range(length)]


# ---------------------------------------------------------------------------------------
# Plans for tests, built by hand (logical nodes -> physical.plan), no SQL front end needed


def _allow_sqlglot_index() -> None:
    """nodes.AggregateRef.index is a read-only property in the skeleton, which clashes with the
    `index` attribute sqlglot 30 sets on every node (in __init__ and when a node gets a
    parent). Until nodes.py renames it, give the property a no-op setter (tests only)."""
    try:
        exp.Paren(this=AggregateRef(this=0))
    except AttributeError:
        getter = AggregateRef.__dict__["index"].fget
        AggregateRef.index = property(getter, lambda self, value: None)  # type: ignore


def aggregate_ref(position: int) -> AggregateRef:
    _allow_sqlglot_index()
    return AggregateRef(this=position)


def _result_type(function: F, argument_type):
    from mangonel.catalog.types import SqlType

    if function in (F.COUNT_STAR, F.COUNT):
        return SqlType.BIGINT
    if function is F.SUM:
        return SqlType.BIGINT if argument_type.is_integer else SqlType.DOUBLE
    if function in (F.MIN, F.MAX):
        return argument_type
    return SqlType.DOUBLE


def make_plan(
    columns,
    *,
    keys=(),
    aggregates=(),
    size=10,
    slide=None,
    delay=0,
    kind="time",
    where=None,
    having=None,
    outputs=None,
    windows_per_batch=None,
    event_time="ts",
) -> ProjectExec:
    """columns: [(name, SqlType)]; aggregates: [(AggregateFunction, argument expr | None)];
    outputs: [(name, expression, SqlType)] (default: keys, window bounds, a0, a1, ...)."""
    from mangonel.catalog.catalog import Column, Schema, Stream
    from mangonel.catalog.types import SqlType
    from mangonel.compiler import logical as lg
    from mangonel.compiler.physical import plan

    schema = Schema(tuple(Column(name, t) for name, t in columns))
    stream = Stream("s", schema, event_time, delay)
    types = {name: t for name, t in columns}

    def type_of(expression):
        if isinstance(expression, exp.Column):
            return types[expression.name]
        from mangonel.compiler.typing import TypeEnv, infer_type

        return infer_type(expression, TypeEnv(columns=types))

    logical_aggregates = []
    argument_types = {}
    for position, (function, argument) in enumerate(aggregates):
        argument_type = None if argument is None else type_of(argument)
        if argument_type is not None:
            argument_types[position] = argument_type
        logical_aggregates.append(
            lg.Aggregate(function, argument, _result_type(function, argument_type))
        )
    window_kind = lg.WindowKind.TIME if kind == "time" else lg.WindowKind.COUNT
    spec = lg.WindowSpec(window_kind, size, slide or size, delay)
    node = lg.StreamScan(stream, schema.columns)
    if where is not None:
        node = lg.Filter(node, where)
    key_columns = tuple(schema.find(k) for k in keys)
    node = lg.WindowAggregate(node, spec, key_columns, tuple(logical_aggregates))
    if having is not None:
        node = lg.Filter(node, having)
    if outputs is None:
        outputs = [(k, exp.column(k), types[k]) for k in keys]
        outputs += [
            ("window_start", WindowBound(this="start"), SqlType.TIMESTAMP),
            ("window_end", WindowBound(this="end"), SqlType.TIMESTAMP),
        ]
        outputs += [
            (f"a{i}", aggregate_ref(i), a.result_type) for i, a in enumerate(logical_aggregates)
        ]
    node = lg.Project(node, tuple(lg.OutputColumn(n, e, t) for n, e, t in outputs))
    return plan(
        node,
        argument_types=argument_types,
        backend="cpu",
        backend_reason="test",
        windows_per_batch=windows_per_batch,
    )


def rows_close(actual: list[dict], expected: list[dict], rel: float = 1e-9) -> bool:
    """Same rows in the same order; floats within a relative tolerance, the rest exact."""
    if len(actual) != len(expected):
        return False
    for a, e in zip(actual, expected, strict=True):
        if a.keys() != e.keys():
            return False
        for name in a:
            x, y = a[name], e[name]
            if isinstance(x, float) and isinstance(y, float):
                if not math.isclose(x, y, rel_tol=rel, abs_tol=rel):
                    return False
            elif x != y or type(x) is not type(y):
                return False
    return True
