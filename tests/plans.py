"""Engine plans for tests, built by hand (logical nodes -> physical.plan, no SQL front end),
and the one bridge from such a plan to the independent oracle (`oracle_for`).

`oracle_for` only reads the plan: it translates the plan's columns, window, keys, aggregates
and sqlglot expressions into the oracle's own description (`oracle.OracleQuery`), which the
oracle evaluates with its own code. Only the few expression forms hand-written tests use are
translated; anything else is an error naming the form.
"""

from __future__ import annotations

from oracle import Oracle, OracleQuery
from sqlglot import exp

from mangonel.catalog.types import SqlType
from mangonel.compiler import logical as lg
from mangonel.compiler.logical import AggregateFunction as F
from mangonel.compiler.nodes import AggregateRef, WindowBound
from mangonel.compiler.physical import (
    FilterExec,
    ProjectExec,
    WindowAggregateExec,
    find,
    plan,
    walk,
)

_BINARY = {
    exp.Add: "+",
    exp.Sub: "-",
    exp.Mul: "*",
    exp.Div: "/",
    exp.Mod: "%",
    exp.EQ: "=",
    exp.NEQ: "<>",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.GT: ">",
    exp.GTE: ">=",
}
_FUNCTIONS = {
    F.COUNT_STAR: "count_star",
    F.COUNT: "count",
    F.SUM: "sum",
    F.MIN: "min",
    F.MAX: "max",
    F.AVG: "avg",
    F.VAR_POP: "var_pop",
    F.VAR_SAMP: "var_samp",
    F.STDDEV_POP: "stddev_pop",
    F.STDDEV_SAMP: "stddev_samp",
    F.BOOL_AND: "bool_and",
    F.BOOL_OR: "bool_or",
}


def _oracle_type(sql_type: SqlType) -> str:
    if sql_type is SqlType.FLOAT:
        raise NotImplementedError("the oracle has no FLOAT (32-bit) arithmetic; use DOUBLE")
    return sql_type.value.lower()


def to_oracle_expression(node: exp.Expression) -> list:
    """A sqlglot expression of a hand-built plan in the oracle's list form."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Column):
        return ["col", node.name]
    if isinstance(node, AggregateRef):
        return ["agg", node.number]
    if isinstance(node, WindowBound):
        return ["bound", node.bound]
    if isinstance(node, exp.Boolean):
        return ["lit", node.this]
    if isinstance(node, exp.Null):
        return ["lit", None]
    if isinstance(node, exp.Literal):
        if node.is_string:
            return ["lit", node.this]
        text = node.this
        return ["lit", float(text) if any(c in text for c in ".eE") else int(text)]
    if type(node) in _BINARY:
        return [
            _BINARY[type(node)],
            to_oracle_expression(node.this),
            to_oracle_expression(node.expression),
        ]
    if isinstance(node, (exp.And, exp.Or)):
        op = "and" if isinstance(node, exp.And) else "or"
        return [op, to_oracle_expression(node.this), to_oracle_expression(node.expression)]
    if isinstance(node, exp.Not):
        inner = node.this
        if isinstance(inner, exp.Is) and isinstance(inner.expression, exp.Null):
            return ["is_not_null", to_oracle_expression(inner.this)]
        return ["not", to_oracle_expression(inner)]
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        return ["is_null", to_oracle_expression(node.this)]
    if isinstance(node, exp.Neg):
        return ["neg", to_oracle_expression(node.this)]
    raise NotImplementedError(f"oracle_for: no oracle form for {type(node).__name__} ({node!r})")


def oracle_query(project: ProjectExec) -> OracleQuery:
    """The oracle's description of a physical plan."""
    window_exec = find(project, WindowAggregateExec)
    window = window_exec.window
    lift = window_exec.lift
    having = next((n for n in walk(project) if isinstance(n, FilterExec)), None)
    return OracleQuery(
        columns={c.name: _oracle_type(c.type) for c in lift.scan.columns},
        event_time=lift.scan.stream.event_time,
        kind=window.kind.value,  # "time", "count" or "session"
        size=window.size,
        slide=window.slide,
        delay=window.watermark_delay_us,
        keys=tuple(k.name for k in lift.keys),
        aggregates=tuple(
            (
                _FUNCTIONS[a.function],
                None if a.argument is None else to_oracle_expression(a.argument),
            )
            for a in window_exec.aggregates
        ),
        where=None if lift.predicate is None else to_oracle_expression(lift.predicate),
        having=None if having is None else to_oracle_expression(having.predicate),
        outputs=tuple((o.name, to_oracle_expression(o.expression)) for o in project.outputs),
    )


def oracle_for(project: ProjectExec) -> Oracle:
    return Oracle(oracle_query(project))


def aggregate_ref(position: int) -> AggregateRef:
    return AggregateRef(this=position)


def _result_type(function: F, argument_type):
    if function in (F.COUNT_STAR, F.COUNT):
        return SqlType.BIGINT
    if function is F.SUM:
        return SqlType.BIGINT if argument_type.is_integer else SqlType.DOUBLE
    if function in (F.MIN, F.MAX):
        return argument_type
    if function in (F.BOOL_AND, F.BOOL_OR):
        return SqlType.BOOLEAN
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
    window_kind = lg.WindowKind(kind)
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
