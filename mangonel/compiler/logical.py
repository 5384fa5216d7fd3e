"""Logical plan: what the query computes, independent of how.

A closed set of small frozen nodes. Expressions inside them are sqlglot expressions whose
columns are resolved to the schema's spelling (exp.Column with one identifier), plus the
nodes of `mangonel.compiler.nodes` (WindowBound, AggregateRef).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from sqlglot import exp

from mangonel import aggregates
from mangonel.catalog.catalog import Column, Stream
from mangonel.catalog.types import SqlType


class WindowKind(enum.Enum):
    TIME = "time"
    COUNT = "count"


@dataclass(frozen=True)
class WindowSpec:
    """size/slide in microseconds (TIME) or rows (COUNT); tumbling when size == slide."""

    kind: WindowKind
    size: int
    slide: int
    watermark_delay_us: int


class _AggregateFunctionBase(enum.Enum):
    """An aggregate function of the registry, as an enum member (value: its display name)."""

    @property
    def definition(self) -> aggregates.Aggregate:
        """Everything the compiler and the runtime know about the function."""
        return aggregates.aggregate(self.name)


# Derived from the registry (`mangonel.aggregates.builtin`): COUNT_STAR ("COUNT(*)"), COUNT,
# SUM, MIN, MAX, AVG, VAR_POP, ... in registration order; never listed here.
AggregateFunction = _AggregateFunctionBase(
    "AggregateFunction", [(a.key, a.display) for a in aggregates.aggregates()]
)


@dataclass(frozen=True)
class Aggregate:
    """One aggregate call. `argument` is None only for COUNT(*)."""

    function: AggregateFunction
    argument: exp.Expression | None
    result_type: SqlType


@dataclass(frozen=True)
class OutputColumn:
    name: str
    expression: exp.Expression
    type: SqlType


@dataclass(frozen=True)
class StreamScan:
    stream: Stream
    columns: tuple[Column, ...]  # only the columns the query reads, in schema order


@dataclass(frozen=True)
class Filter:
    child: LogicalNode
    predicate: exp.Expression


@dataclass(frozen=True)
class WindowAggregate:
    child: LogicalNode
    window: WindowSpec
    keys: tuple[Column, ...]
    aggregates: tuple[Aggregate, ...]


@dataclass(frozen=True)
class Project:
    child: LogicalNode
    outputs: tuple[OutputColumn, ...]


LogicalNode = StreamScan | Filter | WindowAggregate | Project
