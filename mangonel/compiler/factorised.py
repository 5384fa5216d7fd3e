"""Factorised join aggregation, planned: whether an aggregated join qualifies
(`factorised_reason`), and the two window aggregations it runs (`factorised_sides`).

`physical.plan_join` marks a `JoinAggregateExec` factorised with the reason; the join
operator (runtime/operators/join_factor.py) runs the sides and combines their fired cells;
EXPLAIN prints the sides under the join, and `EXPLAIN ... codegen` their GPU kernels.
"""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

from mangonel.catalog.catalog import Column
from mangonel.catalog.types import SqlType
from mangonel.compiler.logical import AggregateFunction, JoinKind
from mangonel.compiler.physical import (
    AggregatePlan,
    JoinAggregateExec,
    LiftExec,
    StateField,
    StreamScanExec,
    WindowAggregateExec,
    WindowJoinExec,
    default_windows_per_batch,
    window_placements,
)

FACTORISED_FUNCTIONS = frozenset({"COUNT_STAR", "COUNT", "SUM", "AVG", "MIN", "MAX"})
FACTORISED_KINDS = frozenset({"count", "sum", "min", "max"})


def factorised_reason(
    join: WindowJoinExec,
    keys: tuple[Column, ...],
    fields: tuple[StateField, ...],
    aggregates: tuple[AggregatePlan, ...],
) -> str | None:
    """Why an aggregated join can be computed from per-(window, key) per-side counts and
    partials instead of per joined pair (None: it cannot): an INNER window join of two
    streams, no residual, no WHERE, grouped by join key columns only, every aggregate a
    COUNT(*) or a COUNT/SUM/AVG/MIN/MAX reading one side only. A key's pairs in a window are
    then the product of its rows on each side: COUNT(*) = n_l * n_r, SUM(x_l) = s_l * n_r,
    MIN/MAX(x_l) = min_l/max_l, whatever the skew."""
    if join.kind is not JoinKind.INNER or join.window is None:
        return None
    if join.residual is not None or join.where is not None:
        return None
    if not all(isinstance(c, StreamScanExec) for c in join.children):
        return None
    join_keys = {k.name for k in (*join.left_keys, *join.right_keys)}
    if not keys or not all(
        k.name in join_keys and (k.type.is_integer or k.type is SqlType.STRING) for k in keys
    ):
        return None
    if not all(a.function.name in FACTORISED_FUNCTIONS for a in aggregates):
        return None
    for f in fields:
        if f.kind.name not in FACTORISED_KINDS:
            return None
        if f.argument is None:
            continue
        sides = {c.name.split(".", 1)[0] for c in f.argument.find_all(exp.Column)}
        if len(sides) != 1 or not sides <= set(join.aliases):
            return None
    return (
        "inner join grouped by join keys, each aggregate reading one side: per (window, key) "
        "per-side counts and partials, combined as products at firing, not per joined pair"
    )


def _unqualified(expression: exp.Expression, alias: str) -> exp.Expression:
    """An expression over one side's joined columns (`alias.column`) as one over the side's
    stream columns."""
    prefix = alias + "."

    def strip(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and node.name.startswith(prefix):
            return exp.column(node.name[len(prefix) :], quoted=True)
        return node

    return expression.copy().transform(strip)


def factorised_sides(node: JoinAggregateExec) -> tuple[WindowAggregateExec, WindowAggregateExec]:
    """The two window aggregations a factorised join aggregation runs (`node.factorised`):
    per side, the side's stream over the join's window grouped by the side's join key
    columns, with fields COUNT(*) (`rows`: the side's row count per (window, key)) and the
    fields of the aggregates reading that side (their arguments over the stream's columns,
    the join's field names kept). The join combines their fired (window, key) cells
    (runtime/operators/join_factor.py). Placements are those of any window aggregation on
    the plan's backend; each side's watermark delay is its stream's, shown only: windows
    fire on the join's watermark (the minimum over both streams)."""
    assert node.factorised is not None, "only a factorised join aggregation has sides"
    join = node.join
    window = join.window
    assert window is not None
    rows = node.fields[0]
    sides = []
    for index, alias in enumerate(join.aliases):
        scan = join.children[index]
        assert isinstance(scan, StreamScanExec)
        prefix = alias + "."
        by_name = {c.name: c for c in scan.columns}
        join_keys = join.left_keys if index == 0 else join.right_keys
        keys = tuple(by_name[k.name[len(prefix) :]] for k in join_keys)

        def reads_side(argument: exp.Expression | None, prefix: str = prefix) -> bool:
            return argument is not None and all(
                c.name.startswith(prefix) for c in argument.find_all(exp.Column)
            )

        fields = (rows,) + tuple(
            replace(f, argument=_unqualified(f.argument, alias))
            for f in node.fields
            if f.argument is not None and reads_side(f.argument)
        )
        count_star = next(
            (a for a in node.aggregates if a.argument is None and a.count_field == rows.name),
            AggregatePlan(AggregateFunction["COUNT_STAR"], None, rows.name, None, SqlType.BIGINT),
        )
        aggregates = (count_star,) + tuple(
            replace(a, argument=_unqualified(a.argument, alias))
            for a in node.aggregates
            if a.argument is not None and reads_side(a.argument)
        )
        delay = join.watermark_delays[index] or 0
        side_window = replace(window, watermark_delay_us=delay)
        lift = LiftExec((scan,), None, keys, fields)
        sides.append(
            WindowAggregateExec(
                children=(lift,),
                window=side_window,
                pane_length=join.pane_length,
                panes_per_window=join.panes_per_window,
                panes_per_slide=join.panes_per_slide,
                windows_per_batch=default_windows_per_batch(
                    join.panes_per_window, join.panes_per_slide
                ),
                aggregates=aggregates,
                backend=join.backend,
                backend_reason=join.backend_reason,
                placements=window_placements(side_window, join.backend, join.backend_reason),
            )
        )
    return sides[0], sides[1]
