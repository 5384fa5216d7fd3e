"""State kinds: how a partial aggregate is kept, lifted from one tuple and combined.

A state kind is defined once, here as a `StateKind` value registered with `register_state`
(the built-in ones live in `aggregates.builtin`), with every face each backend reads:

- `parts`: the names of the arrays one state cell is made of (MOMENTS: n, mean, m2), all of
  one storage dtype, chosen by `storage` from the accumulator type;
- `neutral`: the identity of the combine per part (never a marker: emptiness is decided by
  the count fields). Every backend and the Spark partials start cells from these values;
- CPU: `lift` (numpy: per-tuple partials from argument values and validity), `combine`
  (numpy, elementwise over whole arrays) and `scalar_combine` (plain Python over scalars, 2P
  arguments -> a P-tuple, which the CPU backend compiles with numba into its scatter and
  aggregation tree; keep it self-contained: numba inlines it, and the on-disk cache of the
  generated kernels is keyed by its own code only);
- CUDA: `cuda`, C fragments the kernel templates paste (lift per part, combine, atomic
  merge), formatted with the C member name of each part;
- Spark stage 1: `arrow`, the Arrow hash aggregations that compute one partial per group;
- flags: algebraic, invertible, holistic, and `layout` (FIXED or VARIABLE).

The model admits variable-size state (sorted runs, sketches, raw rows: the holistic
functions) as `Layout.VARIABLE`: such a kind has no fixed parts, no neutral fill and no
atomic merge, and every backend of this version refuses it with a PlanError (`require_fixed`)
at planning or operator construction, never deep inside a kernel.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mangonel.catalog.types import SqlType
from mangonel.errors import PlanError


class Layout(enum.Enum):
    """How much memory one state cell takes.

    FIXED: `len(parts)` numbers of one dtype per cell, combined in place (every incremental
    aggregate). VARIABLE: a cell of any size (sorted runs, sketches, raw rows), merged by
    concatenation or a kind-specific merge; no backend runs these yet."""

    FIXED = "fixed"
    VARIABLE = "variable"


@dataclass(frozen=True)
class LiftInput:
    """What the CPU lift of one field reads, for every tuple of a batch.

    values: the argument (float64 for a floating argument, else int64; BOOLEAN as 0/1), 0
    where NULL. valid: the argument is not NULL. all_valid: valid.all(), computed once.
    rows: the tuple contributes (has an event time and passes WHERE) as int64 0/1.
    contributes: the same as bool. Partials of rows that do not contribute are never merged,
    so a lift may leave anything there (and skips a masking pass when it can)."""

    values: np.ndarray
    valid: np.ndarray
    all_valid: bool
    rows: np.ndarray
    contributes: np.ndarray


@dataclass(frozen=True)
class CudaFragments:
    """C fragments of a state kind, formatted with one key per part name (the part's C
    struct member) and these:

    lift (one C expression per part): `{ok}` the argument is valid, `{a}` its value,
    `{ctype}` the part's C type, `{neutral}` the part's neutral literal.
    combine (statements): `a.<member> = a (+) b` over structs `a` and `b`.
    atomic (statements): merge struct `s` into the table `t` at cell `j` without a lock (many
    threads at once, any order). A kind with no single-word atomic keeps `aux` device-only
    8-byte words per cell (`{aux0}`, `{aux1}`, ...: C lvalues of cell j's words, zero at rest)
    and may leave the cell in a merge form that only `settle` reads back.
    settle (statements): bring cell `j` of `t` back to the kind's parts (the form every other
    reader, the CPU and the snapshots know) after merges, its aux words to zero; it is also
    applied to cells loaded from outside the device (a snapshot), so it must map a cell
    already at rest to a form `atomic` accepts. Empty: the kind's cells are always at rest.
    locked_atomic (statements): the merge for tables without aux words (the join kernels'
    cells), which may take the cell lock `t.lock[j]`; None: `atomic` needs no aux words."""

    lift: tuple[str, ...]
    combine: str
    atomic: str
    aux: int = 0
    settle: str = ""
    locked_atomic: str | None = None


@dataclass(frozen=True)
class ArrowPartial:
    """Spark stage 1 on the CPU: one partial per (key, pane) group with Arrow's hash
    aggregation.

    requests(source, column, accumulator) -> (derived, aggregations): extra input columns to
    append (name -> array) and the `(column, function[, options])` aggregations to request,
    for an argument column `source` (`column` is its data).
    results(columns, dtype, neutrals) -> one array per part, from the aggregations' output
    columns in request order (Arrow gives NULL for a group without a non-NULL value: those
    must become the neutral)."""

    requests: Callable[[str, Any, SqlType], tuple[dict[str, Any], list[tuple]]]
    results: Callable[[list[Any], np.dtype, tuple[float | int, ...]], list[Any]]


def accumulator_dtype(accumulator: SqlType) -> np.dtype:
    """int64 for integer and TIMESTAMP accumulators (and BOOLEAN as 0/1), else float64."""
    if accumulator.is_integer or accumulator in (SqlType.TIMESTAMP, SqlType.BOOLEAN):
        return np.dtype(np.int64)
    return np.dtype(np.float64)


@dataclass(frozen=True, eq=False)
class StateKind:
    """One state kind (see the module docstring). Compared by identity: a plan's state
    field holds the registered object itself."""

    name: str
    doc: str
    parts: tuple[str, ...]
    storage: Callable[[SqlType], np.dtype]
    neutral: Callable[[np.dtype], tuple[float | int, ...]]
    lift: Callable[[LiftInput, np.dtype, tuple[float | int, ...]], tuple[np.ndarray, ...]] | None
    combine: Callable[..., tuple[np.ndarray, ...]] | None
    scalar_combine: Callable[..., tuple] | None
    cuda: CudaFragments | None
    arrow: ArrowPartial | None
    algebraic: bool = True
    invertible: bool = False
    holistic: bool = False
    layout: Layout = Layout.FIXED
    faces: tuple[str, ...] = field(
        default=("lift", "combine", "scalar_combine", "cuda", "arrow"), repr=False
    )

    @property
    def value(self) -> str:
        """The kind's name as plans, EXPLAIN and snapshots print it (the spelling of the
        enum this type replaced)."""
        return self.name

    def __repr__(self) -> str:
        return f"StateKind({self.name})"

    def __reduce__(self) -> tuple:
        # a plan shipped to another process (Spark's Python workers) names its kinds: the
        # registered object there, so identity checks and per-kind caches hold
        return state_kind, (self.name,)


_STATE_KINDS: dict[str, StateKind] = {}


def register_state(kind: StateKind) -> StateKind:
    """Add a state kind to the registry (its name must be new). A FIXED kind must have every
    face; a VARIABLE one may leave them None (backends refuse it, see `require_fixed`)."""
    if kind.name in _STATE_KINDS:
        raise ValueError(f"state kind {kind.name!r} is already registered")
    if kind.layout is Layout.FIXED:
        missing = [face for face in kind.faces if getattr(kind, face) is None]
        if missing:
            raise ValueError(f"fixed-width state kind {kind.name!r} lacks {missing}")
        if kind.cuda is not None and len(kind.cuda.lift) != len(kind.parts):
            raise ValueError(f"state kind {kind.name!r}: one CUDA lift per part")
    _STATE_KINDS[kind.name] = kind
    return kind


def state_kind(name: str) -> StateKind:
    return _STATE_KINDS[name]


def state_kinds() -> tuple[StateKind, ...]:
    return tuple(_STATE_KINDS.values())


def require_fixed(kind: StateKind, where: str) -> StateKind:
    """The kind, if `where` (a backend or stage, for the message) can run it: every backend
    of this version keeps fixed-width state only."""
    if kind.layout is not Layout.FIXED:
        raise PlanError(
            f"state kind {kind.name!r} has {kind.layout.value}-size state, which {where} "
            "cannot keep: only fixed-width state kinds run in this version"
        )
    return kind
