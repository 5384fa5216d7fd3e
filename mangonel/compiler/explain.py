"""EXPLAIN: the physical plan as deterministic text (one operator per line, indented by
depth, parameters as key=value) and as JSON-ready dictionaries. Both read the same nodes."""

from __future__ import annotations

import re
from typing import Any

from sqlglot import exp

from mangonel.compiler import parse
from mangonel.compiler import physical as ph
from mangonel.compiler.logical import WindowKind
from mangonel.compiler.nodes import AggregateRef, WindowBound


def format_duration(microseconds: int) -> str:
    """Durations in EXPLAIN: the largest unit that divides exactly (1s, 10ms, 100us)."""
    return parse.format_duration(microseconds, compact=True)


# Names printed without quotes; anything else keeps Spark's backquotes so EXPLAIN stays exact.
_PLAIN_NAME = re.compile(r"[a-z_][a-z0-9_]*")


def format_expression(expression: exp.Expression | None) -> str:
    """SQL text of a plan expression; window bounds and aggregate references spelled out."""
    if expression is None:
        return "none"

    def spell(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Identifier) and _PLAIN_NAME.fullmatch(node.name):
            return exp.to_identifier(node.name, quoted=False)
        if isinstance(node, WindowBound):
            return exp.column(f"window_{node.bound}")
        if isinstance(node, AggregateRef):
            return exp.column(f"agg{node.number}")
        return node

    return expression.transform(spell, copy=True).sql(dialect="spark")


def _columns(columns) -> str:
    return "[" + ", ".join(f"{c.name}:{c.type}" for c in columns) + "]"


def _field(field: ph.StateField) -> str:
    argument = "*" if field.argument is None else format_expression(field.argument)
    return f"{field.name}={field.kind.value.upper()}({argument}):{field.type}"


def _aggregate(aggregate: ph.AggregatePlan) -> str:
    argument = "" if aggregate.argument is None else format_expression(aggregate.argument)
    call = "COUNT(*)" if aggregate.argument is None else f"{aggregate.function.value}({argument})"
    reads = (
        aggregate.count_field
        if aggregate.value_field is None
        else (f"{aggregate.value_field}/{aggregate.count_field}")
    )
    return f"{call}<-{reads}:{aggregate.result_type}"


def _window_size(node: ph.WindowAggregateExec, value: int) -> str:
    if node.window.kind is WindowKind.TIME:
        return format_duration(value)
    return f"{value}rows"


def operator_parameters(node: ph.PhysicalNode) -> tuple[str, list[tuple[str, str]]]:
    """The operator's name and its parameters, in a fixed order."""
    if isinstance(node, ph.ProjectExec):
        outputs = ", ".join(
            f"{o.name}:{o.type}={format_expression(o.expression)}" for o in node.outputs
        )
        return "Project", [("outputs", f"[{outputs}]")]
    if isinstance(node, ph.FilterExec):
        return "Filter", [("having", format_expression(node.predicate))]
    if isinstance(node, ph.WindowAggregateExec):
        window = node.window
        return "WindowAggregate", [
            ("window", window.kind.value),
            ("range", _window_size(node, window.size)),
            ("slide", _window_size(node, window.slide)),
            ("watermark", format_duration(window.watermark_delay_us)),
            ("pane_length", _window_size(node, node.pane_length)),
            ("panes_per_window", str(node.panes_per_window)),
            ("panes_per_slide", str(node.panes_per_slide)),
            ("windows_per_batch", str(node.windows_per_batch)),
            ("keys", "[" + ", ".join(k.name for k in node.keys) + "]"),
            ("aggregates", "[" + ", ".join(_aggregate(a) for a in node.aggregates) + "]"),
            ("strategy", node.strategy),
            ("backend", node.backend),
            ("reason", f'"{node.backend_reason}"'),
        ]
    if isinstance(node, ph.LiftExec):
        return "Lift", [
            ("predicate", format_expression(node.predicate)),
            ("keys", _columns(node.keys)),
            ("fields", "[" + ", ".join(_field(f) for f in node.fields) + "]"),
        ]
    if isinstance(node, ph.StreamScanExec):
        stream = node.stream
        return "StreamScan", [
            ("stream", stream.name),
            ("columns", _columns(node.columns)),
            ("event_time", stream.event_time),
            ("declared_watermark", format_duration(stream.watermark_delay_us)),
        ]
    raise TypeError(f"not a physical plan node: {type(node).__name__}")


def explain_text(root: ph.PhysicalNode) -> str:
    lines = []
    node: ph.PhysicalNode | None = root
    depth = 0
    while node is not None:
        name, parameters = operator_parameters(node)
        rendered = " ".join(f"{key}={value}" for key, value in parameters)
        lines.append(f"{'  ' * depth}{name}: {rendered}")
        found = ph.children(node)
        node = found[0] if found else None
        depth += 1
    return "\n".join(lines)


def explain_json(root: ph.PhysicalNode) -> dict[str, Any]:
    name, parameters = operator_parameters(root)
    found = ph.children(root)
    return {
        "operator": name,
        "parameters": dict(parameters),
        "children": [explain_json(child) for child in found],
    }
