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
from mangonel.catalog.catalog import Column, Stream, Table
from mangonel.catalog.types import ResultType


class WindowKind(enum.Enum):
    TIME = "time"
    COUNT = "count"
    CUMULATE = "cumulate"
    SESSION = (
        "session"  # per key, rows at most the gap apart; `size` is the gap (compiler/session.py)
    )

    @property
    def over_time(self) -> bool:
        """Windows of event time (bounds in microseconds), not of rows."""
        return self is not WindowKind.COUNT


@dataclass(frozen=True)
class WindowSpec:
    """size/slide in microseconds (TIME, CUMULATE, SESSION) or rows (COUNT).

    TIME: windows [k*slide, k*slide + size); tumbling when size == slide.
    CUMULATE (Flink's): size is the max size, slide the step (size a multiple of it); the
    windows [k*size, k*size + j*slide) for j = 1 .. size/slide (docs/semantics.md).
    SESSION: size is the gap in microseconds and slide equals it (sessions have no slide).
    """

    kind: WindowKind
    size: int
    slide: int
    watermark_delay_us: int

    @property
    def outer_shape(self) -> tuple[int, int]:
        """(slide, size) of the windows whose bounds enclose every window of this spec and
        whose last window holding a time is the spec's last one: the spec itself, or for
        CUMULATE the tumbling windows of its max size (each period's windows grow inside
        it, the last one equals it). Lateness and the event-time range read it."""
        if self.kind is WindowKind.CUMULATE:
            return self.size, self.size
        return self.slide, self.size


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
    """One aggregate call. `argument` is None only for COUNT(*). `fraction`: p of a
    percentile call (PERCENTILE_CONT(p), PERCENTILE(x, p), PERCENTILE_DISC(p); MEDIAN's 0.5),
    None for every other function. `python`: the user's function of a PYTHON call
    (`aggregates.python`), None for every other function.
    `parameter`: the sketch parameter of an approximate call
    (APPROX_COUNT_DISTINCT's rsd, APPROX_PERCENTILE's accuracy), its default when omitted.
    `fractions`: the ps of a percentile over an array of p (`PERCENTILE(x, ARRAY(0.25,
    0.75))`), in the order given, with `fraction` None and an ARRAY `result_type`."""

    function: AggregateFunction
    argument: exp.Expression | None
    result_type: ResultType
    fraction: float | None = None
    python: aggregates.python.WindowFunction | None = None
    parameter: float | None = None
    fractions: tuple[float, ...] | None = None


@dataclass(frozen=True)
class OutputColumn:
    name: str
    expression: exp.Expression
    type: ResultType


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


# -- joins ---------------------------------------------------------------------------------


class JoinKind(enum.Enum):
    """Which unmatched rows a join keeps (with the other side NULL): none, the left side's,
    the right side's, both."""

    INNER = "inner"
    LEFT = "left"
    RIGHT = "right"
    FULL = "full"

    @property
    def keeps_left(self) -> bool:
        return self in (JoinKind.LEFT, JoinKind.FULL)

    @property
    def keeps_right(self) -> bool:
        return self in (JoinKind.RIGHT, JoinKind.FULL)


@dataclass(frozen=True)
class TableScan:
    """A static table, read as it is when the query starts."""

    table: Table
    columns: tuple[Column, ...]  # only the columns the query reads, in schema order


@dataclass(frozen=True)
class JoinSide:
    """One input of a join: its alias (the qualifier of its columns), what it reads, and
    (a stream) its watermark delay: the clause's WATERMARK, else the stream's declared one."""

    alias: str
    scan: StreamScan | TableScan
    watermark_delay_us: int | None

    @property
    def name(self) -> str:
        return self.scan.stream.name if isinstance(self.scan, StreamScan) else self.scan.table.name


@dataclass(frozen=True)
class WindowJoin:
    """The rows of two inputs that share a window (or, stream-static without a window, the
    stream row's table matches) with equal keys and a true residual predicate.

    The joined row's columns are `joined_name(alias, column)` of both sides, left first
    (`columns`); `window` is the one window of both streams (None: stream-static without a
    window clause). `left_keys[i]` equals `right_keys[i]`; NULL never equals NULL."""

    left: JoinSide
    right: JoinSide
    kind: JoinKind
    window: WindowSpec | None
    left_keys: tuple[Column, ...]
    right_keys: tuple[Column, ...]
    residual: exp.Expression | None
    columns: tuple[Column, ...]


def joined_name(alias: str, column: str) -> str:
    """The name of a side's column in the joined row: `alias.column` (one identifier)."""
    return f"{alias}.{column}"


LogicalNode = StreamScan | TableScan | Filter | WindowAggregate | WindowJoin | Project
