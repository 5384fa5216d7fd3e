"""EXPLAIN: the physical plan as deterministic text (one operator per line, indented by
depth, parameters as key=value) and as JSON-ready dictionaries (numbers as numbers, lists as
arrays). Both read the same `Parameter`s."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from mangonel.compiler import parse
from mangonel.compiler import physical as ph
from mangonel.compiler.factorised import factorised_sides
from mangonel.compiler.holistic import sketch_parameter
from mangonel.compiler.logical import WindowKind
from mangonel.compiler.nodes import AggregateRef, WindowBound, WindowStruct
from mangonel.compiler.wire import describe_wire


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
        if isinstance(node, WindowStruct):
            return exp.column("window")
        return node

    return expression.transform(spell, copy=True).sql(dialect="spark")


def _column(column) -> str:  # noqa: ANN001 - a catalog Column
    return f"{column.name}:{column.type}"


def _field(field: ph.StateField) -> str:
    argument = "*" if field.argument is None else format_expression(field.argument)
    return f"{field.name}={field.kind.value.upper()}({argument}):{field.type}"


def _fraction(aggregate: ph.AggregatePlan) -> str:
    """p of a percentile call, or its array of ps (`ARRAY(0.25, 0.5)`)."""
    if aggregate.fractions is not None:
        return "ARRAY(" + ", ".join(f"{p:g}" for p in aggregate.fractions) + ")"
    return f"{aggregate.fraction:g}"


def _aggregate(aggregate: ph.AggregatePlan) -> str:
    argument = "" if aggregate.argument is None else format_expression(aggregate.argument)
    call = "COUNT(*)" if aggregate.argument is None else f"{aggregate.function.value}({argument})"
    holistic = aggregate.function.definition.holistic
    if holistic is not None and holistic.evaluation == "count_distinct":
        call = f"COUNT(DISTINCT {argument})"
    elif aggregate.python is not None:
        call = f"{aggregate.python.name}({argument}) [python]"
    elif holistic is not None and holistic.evaluation == "approx_count_distinct":
        call = f"{aggregate.function.value}({argument}, {sketch_parameter(aggregate):g})"
    elif holistic is not None and holistic.evaluation == "approx_percentile":
        call = (
            f"{aggregate.function.value}({argument}, {_fraction(aggregate)}, "
            f"{sketch_parameter(aggregate):g})"
        )
    elif holistic is not None and holistic.takes_fraction:
        call = f"{aggregate.function.value}({argument}, {_fraction(aggregate)})"
    reads = (
        aggregate.count_field
        if aggregate.value_field is None
        else (f"{aggregate.value_field}/{aggregate.count_field}")
    )
    return f"{call}<-{reads}:{aggregate.result_type}"


def _percentile_paths(node: ph.WindowAggregateExec) -> list[str]:
    """Per APPROX_PERCENTILE call, its path and why (`holistic.percentile_paths`):
    `APPROX_PERCENTILE(price, 0.5, 10000): exact because "accuracy 10000 >= 1000: ..."`."""
    assert node.holistic is not None
    out = []
    for position, reason in node.holistic.percentile_reasons:
        aggregate = node.aggregates[position]
        call = _aggregate(aggregate).split("<-")[0]
        path = "exact" if aggregate.exact else "sketch"
        out.append(f'{call}: {path} because "{reason}"')
    return out


@dataclass(frozen=True)
class Parameter:
    """One operator parameter: `text` is how EXPLAIN prints it, `value` what JSON holds
    (integers as numbers: durations in microseconds, count-window sizes in rows; lists as
    arrays; text as strings; an absent predicate as null)."""

    key: str
    text: str
    value: int | str | list[str] | None


def _number(key: str, value: int) -> Parameter:
    return Parameter(key, str(value), value)


def _duration(key: str, microseconds: int) -> Parameter:
    return Parameter(key, format_duration(microseconds), microseconds)


def _list(key: str, items: list[str]) -> Parameter:
    return Parameter(key, "[" + ", ".join(items) + "]", items)


def _window_size(key: str, node: ph.WindowAggregateExec, value: int) -> Parameter:
    if node.window.kind.over_time:
        return _duration(key, value)
    return Parameter(key, f"{value}rows", value)


@dataclass(frozen=True)
class PlanNode:
    """An operator outside mangonel's physical plan that EXPLAIN prints the same way (the
    Spark side of a query, from `runtime.spark.planner`): name, parameters, placements of its
    steps (printed when off the plan's backend), children (top, sink side, first)."""

    name: str
    parameters: tuple[Parameter, ...]
    children: tuple[PlanNode, ...] = ()
    placements: tuple[ph.Placement, ...] = ()


def operator_parameters(node: ph.PhysicalNode | PlanNode) -> tuple[str, list[Parameter]]:
    """The operator's name and its parameters, in a fixed order."""
    if isinstance(node, PlanNode):
        return node.name, list(node.parameters)
    if isinstance(node, ph.ProjectExec):
        outputs = [f"{o.name}:{o.type}={format_expression(o.expression)}" for o in node.outputs]
        return "Project", [_list("outputs", outputs)]
    if isinstance(node, ph.FilterExec):
        having = format_expression(node.predicate)
        return "Filter", [Parameter("having", having, having)]
    if isinstance(node, ph.WindowAggregateExec):
        window = node.window
        parameters = [Parameter("window", window.kind.value, window.kind.value)]
        if window.kind is WindowKind.SESSION:  # a gap, no range, slide or panes
            parameters.append(_window_size("gap", node, window.size))
        else:
            parameters += [
                _window_size("range", node, window.size),
                _window_size("slide", node, window.slide),
            ]
        parameters.append(_duration("watermark", window.watermark_delay_us))
        # count windows keep per-tuple partials and sessions their rows: no panes
        if window.kind in (WindowKind.TIME, WindowKind.CUMULATE):
            parameters += [
                _window_size("pane_length", node, node.pane_length),
                _number("panes_per_window", node.panes_per_window),
                _number("panes_per_slide", node.panes_per_slide),
            ]
        return "WindowAggregate", [
            *parameters,
            # sessions have no tree of windows
            *(
                [_number("windows_per_batch", node.windows_per_batch)]
                if window.kind is not WindowKind.SESSION
                else []
            ),
            _list("keys", [k.name for k in node.keys]),
            _list("aggregates", [_aggregate(a) for a in node.aggregates]),
            Parameter("strategy", node.strategy, node.strategy),
            # holistic aggregates (MEDIAN, PERCENTILE_*, COUNT DISTINCT): compiler/holistic.py
            *(
                [Parameter("holistic", node.holistic.describe(), node.holistic.describe())]
                if node.holistic is not None
                else []
            ),
            # approximate ones: each sketch and its parameters (HLL(p=9), GK(accuracy=...))
            *(
                [_list("sketches", list(node.holistic.sketches))]
                if node.holistic is not None and node.holistic.sketches
                else []
            ),
            # APPROX_PERCENTILE: exact selection or the sketch, and why
            *(
                [_list("approx_percentile", _percentile_paths(node))]
                if node.holistic is not None and node.holistic.percentile_reasons
                else []
            ),
            Parameter("backend", node.backend, node.backend),
            Parameter("reason", f'"{node.backend_reason}"', node.backend_reason),
        ]
    if isinstance(node, ph.WindowJoinExec):
        return "WindowJoin", _join_parameters(node)
    if isinstance(node, ph.JoinAggregateExec):
        return "JoinAggregate", [
            _list("keys", [_column(k) for k in node.keys]),
            _list("fields", [_field(f) for f in node.fields]),
            _list("aggregates", [_aggregate(a) for a in node.aggregates]),
            *_fused_parameters(node),
        ]
    if isinstance(node, ph.TableScanExec):
        return "TableScan", [
            Parameter("table", node.table.name, node.table.name),
            _list("columns", [_column(c) for c in node.columns]),
        ]
    if isinstance(node, ph.LiftExec):
        predicate = format_expression(node.predicate)
        return "Lift", [
            # no WHERE: `none` in the text, null in JSON
            Parameter("predicate", predicate, None if node.predicate is None else predicate),
            _list("keys", [_column(k) for k in node.keys]),
            _list("fields", [_field(f) for f in node.fields]),
        ]
    if isinstance(node, ph.StreamScanExec):
        stream = node.stream
        return "StreamScan", [
            Parameter("stream", stream.name, stream.name),
            _list("columns", [_column(c) for c in node.columns]),
            Parameter("event_time", stream.event_time, stream.event_time),
            _duration("declared_watermark", stream.watermark_delay_us),
        ]
    raise TypeError(f"not a physical plan node: {type(node).__name__}")


def _fused_parameters(node: ph.JoinAggregateExec) -> list[Parameter]:
    """How the aggregation is fused with the join. device: on the GPU, the fused kernel
    aggregates each match into (window, group) cells kept on the device, no pair leaves it;
    probe: pairs are found (on the GPU too with gpu_join) and their partials combined into
    cells on the host, with `fused_reason` why not device where the aggregation is on the GPU;
    factorised: pairs are never formed, per-side counts and partials multiply."""
    if node.factorised is not None:
        return [
            Parameter("fused", "factorised", "factorised"),
            Parameter("factorised_reason", f'"{node.factorised}"', node.factorised),
        ]
    if ph.placement(node, "aggregate").backend != "gpu":
        return [Parameter("fused", "probe", "probe")]
    from mangonel.compiler.codegen_join import device_fusion_reason  # imports codegen

    reason = device_fusion_reason(node)
    if reason is None:
        return [Parameter("fused", "device", "device")]
    return [
        Parameter("fused", "probe", "probe"),
        Parameter("fused_reason", f'"{reason}"', reason),
    ]


def _join_parameters(node: ph.WindowJoinExec) -> list[Parameter]:
    parameters = [Parameter("kind", node.kind.value, node.kind.value)]
    window = node.window
    if window is None:
        parameters.append(Parameter("window", "none", None))
    else:
        windowing = "pane-pairs" if node.pane_pairs else "per-window"
        parameters += [
            Parameter("window", window.kind.value, window.kind.value),
            _duration("range", window.size),
            _duration("slide", window.slide),
            _duration("pane_length", node.pane_length),
            _number("panes_per_window", node.panes_per_window),
            _number("panes_per_slide", node.panes_per_slide),
            # pane-pairs: each pair of panes joined once, credited to every window covering
            # both; per-window: tumbling, a pane is a window
            Parameter("windowing", windowing, windowing),
        ]
    delays = [
        f"{alias}:{'static' if delay is None else format_duration(delay)}"
        for alias, delay in zip(node.aliases, node.watermark_delays, strict=True)
    ]
    residual = format_expression(node.residual)
    where = format_expression(node.where)
    return [
        *parameters,
        _list("watermarks", delays),
        _list("left_keys", [k.name for k in node.left_keys]),
        _list("right_keys", [k.name for k in node.right_keys]),
        Parameter("residual", residual, None if node.residual is None else residual),
        Parameter("where", where, None if node.where is None else where),
        Parameter("algorithm", node.algorithm, node.algorithm),
        Parameter("algorithm_reason", f'"{node.algorithm_reason}"', node.algorithm_reason),
        Parameter("backend", node.backend, node.backend),
        Parameter("reason", f'"{node.backend_reason}"', node.backend_reason),
    ]


def _placements(node: ph.PhysicalNode | PlanNode) -> tuple[ph.Placement, ...]:
    return getattr(node, "placements", ())


def explain_text(
    root: ph.PhysicalNode | PlanNode, backend: str | None = None, depth: int = 0
) -> str:
    """One line per operator, children indented under their parent; under an operator, one
    `! <step> runs on <backend> because <reason>` line per step placed off the plan's backend
    (as spark-rapids prints its CPU fallbacks). `backend`: the plan's (default: read from the
    physical plan's window operator); `depth`: the indentation of the root."""
    if backend is None and not isinstance(root, PlanNode):
        backend = ph.plan_backend(root)
    return "\n".join(_lines(root, depth, backend))


def _wire(parent: ph.PhysicalNode | PlanNode | None, node: ph.PhysicalNode | PlanNode):
    """A GPU lift's wire format (`compiler.wire`: bytes per tuple over PCIe and each column's
    form) as a parameter of its Lift line; None for a lift that runs on the CPU."""
    if not isinstance(node, ph.LiftExec) or not isinstance(parent, ph.WindowAggregateExec):
        return None
    try:
        if ph.placement(parent, "lift").backend != "gpu":
            return None
    except LookupError:
        return None
    text = describe_wire(node)
    return Parameter("wire", f'"{text}"', text)


ROWS_AT_FIRING = (
    f"an inner join, at most {ph.FIRING_WINDOWS_PER_ROW} windows a row: each firing joins the"
    " stored rows of its windows, window by window, by key slot (the algorithm and"
    " windowing above are those of pairs found as rows arrive)"
)


def _rows_form(parent: ph.PhysicalNode | PlanNode | None, node: ph.PhysicalNode | PlanNode):
    """Where a join without aggregation keeps its pairs and builds its output. On the CPU:
    `rows=firing` or `rows=arrival` with `rows_reason` (`ph.rows_at_arrival_reason`). On the
    GPU: `rows=device` (`codegen_join.device_rows`: pairs, gather and output columns on
    the device; `rows_host_columns`: the STRING columns taken on the host at the fired
    pairs' rows), else `rows=host` with `rows_reason`; [] for other nodes."""
    if not isinstance(node, ph.WindowJoinExec) or isinstance(parent, ph.JoinAggregateExec):
        return []
    if ph.placement(node, "join").backend != "gpu":
        # the CPU: `rows=firing` (each firing joins its windows' stored rows, no pair kept)
        # or `rows=arrival` (pairs found as rows arrive, kept until their windows fire)
        arrival = ph.rows_at_arrival_reason(node)
        if arrival is None:
            return [
                Parameter("rows", "firing", "firing"),
                Parameter("rows_reason", f'"{ROWS_AT_FIRING}"', ROWS_AT_FIRING),
            ]
        return [
            Parameter("rows", "arrival", "arrival"),
            Parameter("rows_reason", f'"{arrival}"', arrival),
        ]
    from mangonel.compiler.codegen_join import device_rows  # imports codegen

    plan = device_rows(node)
    if not isinstance(plan, str):
        on_host = [c.joined for c in plan.host_columns]
        if not on_host:
            return [Parameter("rows", "device", "device")]
        listed = "[" + ", ".join(on_host) + "]"
        return [
            Parameter("rows", "device", "device"),
            Parameter("rows_host_columns", listed, on_host),
        ]
    reason = plan
    return [Parameter("rows", "host", "host"), Parameter("rows_reason", f'"{reason}"', reason)]


def _node_parameters(
    node: ph.PhysicalNode | PlanNode, parent: ph.PhysicalNode | PlanNode | None
) -> tuple[str, list[Parameter]]:
    name, parameters = operator_parameters(node)
    parameters = [*parameters, *_rows_form(parent, node)]
    wire = _wire(parent, node)
    return name, parameters if wire is None else [*parameters, wire]


def _lines(
    node: ph.PhysicalNode | PlanNode,
    depth: int,
    backend: str | None,
    parent: ph.PhysicalNode | PlanNode | None = None,
) -> list[str]:
    name, parameters = _node_parameters(node, parent)
    rendered = " ".join(f"{p.key}={p.text}" for p in parameters)
    lines = [f"{'  ' * depth}{name}: {rendered}"]
    lines += [
        f"{'  ' * (depth + 1)}! {p.step} runs on {p.backend} because {p.reason}"
        for p in _placements(node)
        if backend is not None and p.backend != backend
    ]
    for child in _shown_children(node):
        lines += _lines(child, depth + 1, backend, node)
    return lines


def _shown_children(node: ph.PhysicalNode | PlanNode) -> tuple[ph.PhysicalNode | PlanNode, ...]:
    """The children EXPLAIN prints: a factorised join aggregation's join reads its two side
    window aggregations (`factorised.factorised_sides`), each over its stream's scan."""
    if isinstance(node, ph.JoinAggregateExec) and node.factorised is not None:
        join = node.join
        # no pairs are formed: no join algorithm runs, and windows are the sides' panes
        shown = {
            "windowing": Parameter("windowing", "side-panes", "side-panes"),
            "algorithm": Parameter("algorithm", "none", None),
        }
        parameters = tuple(
            shown.get(p.key, p) for p in _join_parameters(join) if p.key != "algorithm_reason"
        )
        return (PlanNode("WindowJoin", parameters, factorised_sides(node), join.placements),)
    return node.children


def explain_json(
    root: ph.PhysicalNode, parent: ph.PhysicalNode | PlanNode | None = None
) -> dict[str, Any]:
    """The plan as nested dictionaries: operator, parameters, placements (every step, on the
    plan's backend or not), children."""
    name, parameters = _node_parameters(root, parent)
    tree: dict[str, Any] = {
        "operator": name,
        "parameters": {p.key: p.value for p in parameters},
    }
    placements = _placements(root)
    if placements:
        tree["placements"] = [
            {"step": p.step, "backend": p.backend, "reason": p.reason} for p in placements
        ]
    tree["children"] = [explain_json(child, root) for child in _shown_children(root)]  # type: ignore[arg-type]
    return tree
