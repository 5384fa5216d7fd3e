"""CUDA source of the window join's kernels (`kernels_templates/join.cu.j2`), rendered per query.

A query's join module holds the kernels of its algorithm only (hash: bucket count, probe
count/write; sort-merge: merge count/write), pane-pair crediting (expand count/write), the
outer joins' matched flags (mark) and, for an aggregated join, one scatter kernel per
(state kind, storage type) of its fields, pasted from the kind's CUDA atomic fragment: the
state is combined into (window, group) cells where the pairs are found. Rendering needs no
GPU and imports no CuPy; `runtime/gpu/join.py` compiles and launches.

Device-fused join + aggregate (`device_fusion`, issue 10 item 3): where an aggregated join's
group is known per row of one side and every predicate and aggregate argument renders in CUDA,
the module instead holds the fused kernel of its algorithm (hash: `fused_hash`, each row of a
new batch walks the chain of its key slot through the other side's stored rows, kept on the
device by `chain_insert`; sort-merge: `fused_merge`, each stored row of the other side finds
the run of its slot in the batch sorted by slot; "auto" plans get both), evaluates the
residual, WHERE and the aggregate arguments over the two rows (`cuda_expressions`, the joined
columns of both sides on the device) and combines the lifted state into the dense (window,
group) cells of every window both rows share with the kinds' atomic fragments. No pair is
written anywhere. Outer joins: the pair kernel marks the kept rows matched (after the
residual, before WHERE), and `fused_lonely_<side>` credits a kept side's unmatched rows at
firing with the other side's columns NULL.

Device-resident rows (`device_rows`, a join without aggregation, issue 10's materialised
output): both sides' joined columns are mirrored on the device, the pairs of each batch are
found there and stay there until their windows fire; a firing expands them to (pair, window)
entries, gathers the output columns on the device and copies only those back (a STRING
column is not mirrored: it is taken from the host's rows at the fired pairs' row numbers). A
residual or
WHERE is the `rows_check` kernel over the pairs (a matched flag after the residual, a keep flag
after WHERE); outer joins mark their kept rows matched on the device (the `mark` kernel) and
add the unmatched ones at firing, through `rows_lonely_<side>` when there is a WHERE.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sqlglot import exp

from mangonel.aggregates import require_fixed
from mangonel.aggregates.state import Layout, StateKind
from mangonel.catalog.types import SqlType
from mangonel.compiler import physical as ph
from mangonel.compiler.codegen import (
    GeneratedModule,
    _device_ctype,
    _field_fragments,
    _finish,
    column_context,
)
from mangonel.compiler.typing import ExpressionError, TypeEnv

JOIN_TEMPLATES = ("prelude.cu.j2", "join.cu.j2")
ALGORITHM_ROLES = {
    "hash": ("bucket_count", "probe_count", "probe_write"),
    "sort-merge": ("merge_count", "merge_write"),
}
# "auto" plans choose the algorithm per batch (`WindowJoinExec.adaptive`): both are rendered
ALGORITHM_ROLES["auto"] = ALGORITHM_ROLES["hash"] + ALGORITHM_ROLES["sort-merge"]
COMMON_ROLES = ("expand_count", "expand_write", "mark")
FUSED_ROLES = {
    "hash": ("fused_hash", "chain_insert"),
    "sort-merge": ("fused_merge",),
    "auto": ("fused_hash", "chain_insert", "fused_merge"),
}
FUSED_KERNEL_ROLES = {"hash": "fused_hash", "sort-merge": "fused_merge"}


@dataclass(frozen=True)
class JoinScatter:
    """One scatter kernel: the kind's parts as C members of one storage type."""

    kind: StateKind
    ctype: str  # "long long" or "double"
    role: str  # the kernel's role in `names`


def scatter_role(kind: StateKind, ctype: str) -> str:
    return f"scatter_{kind.name}_{'i64' if ctype == 'long long' else 'f64'}"


def join_scatters(node: ph.JoinAggregateExec | None) -> tuple[JoinScatter, ...]:
    """The scatter kernels an aggregated join needs, one per (kind, storage type)."""
    if node is None:
        return ()
    seen: dict[str, JoinScatter] = {}
    for field in node.fields:
        kind = require_fixed(field.kind, "the GPU join")
        ctype = "long long" if ph.is_integer_state(field) else "double"
        role = scatter_role(kind, ctype)
        seen.setdefault(role, JoinScatter(kind, ctype, role))
    return tuple(seen.values())


@dataclass(frozen=True)
class FusedColumn:
    """A joined column the fused kernel reads: side 0 (left) or 1 (right), its bare name in
    the side's stored rows, its SQL type and device element type."""

    side: int
    name: str  # the stored column's name (without the alias)
    joined: str  # `alias.name`
    type: SqlType
    ctype: str


@dataclass(frozen=True)
class DeviceRowsPlan:
    """How a join without aggregation keeps its pairs and builds its output on the device:
    the joined columns mirrored per side (`columns`: the non-STRING ones emitted and those
    the predicates read, in the joined row's order), per emitted column (`outputs`, the
    output's order) its position in `columns` or None for a STRING column, which is gathered
    on the host from the driver's stored rows at the fired pairs' row numbers (the device
    holds no dictionary for joined rows), and the `rows_check` kernel's context when there is
    a residual or WHERE (None: every pair with equal keys and overlapping windows is kept)."""

    columns: tuple[FusedColumn, ...]
    emitted: tuple[int | None, ...]
    check: dict | None
    # outer joins: the stream sides whose unmatched rows are emitted (matched flags on the
    # device; `rows_lonely_<side>` applies WHERE to them when there is one)
    kept: tuple[int, ...] = ()
    outputs: tuple[FusedColumn, ...] = ()

    @property
    def host_columns(self) -> tuple[FusedColumn, ...]:
        """The emitted columns gathered on the host (STRING)."""
        return tuple(c for c, p in zip(self.outputs, self.emitted, strict=True) if p is None)


@dataclass(frozen=True)
class DeviceFusion:
    """How an aggregated join is fused on the device: the side whose rows carry the group
    slot (`group_side`; each GROUP BY column is its own column or a join key equal to one),
    the columns read, and the kernel's C fragments (`render_join_kernels`)."""

    group_side: int
    group_columns: tuple[tuple[str, SqlType], ...]  # per GROUP BY column: group side's column
    columns: tuple[FusedColumn, ...]
    context: dict
    # outer joins: the sides whose unmatched rows are credited (matched flags on the device),
    # and per side the GROUP BY columns of an unmatched row of it (None: NULL, other side's)
    kept: tuple[int, ...] = ()
    lonely_group_columns: tuple[tuple[tuple[str | None, SqlType], ...], ...] = ((), ())


def _group_columns(node: ph.JoinAggregateExec, side: int) -> tuple[tuple[str, SqlType], ...] | None:
    """Per GROUP BY column, the column of `side`'s rows that holds its value (itself, or the
    join key of `side` that the ON clause equates to it), or None when one is on neither."""
    join = node.join
    alias = join.aliases[side] + "."
    mine = join.left_keys if side == 0 else join.right_keys
    theirs = join.right_keys if side == 0 else join.left_keys
    found = []
    for key in node.keys:
        if key.name.startswith(alias):
            found.append((key.name[len(alias) :], key.type))
            continue
        match = [m for m, t in zip(mine, theirs, strict=True) if t.name == key.name]
        if not match or not (key.type.is_integer or key.type is SqlType.STRING):
            return None
        found.append((match[0].name[len(alias) :], key.type))
    return tuple(found)


def device_fusion(node: ph.JoinAggregateExec) -> DeviceFusion | str:
    """The device-fused form of an aggregated join, or why it keeps the probe form (pairs
    found on the device, their partials computed and scattered by the driver)."""
    join = node.join
    if node.factorised is not None:
        return "the aggregation is factorised"
    if join.window is None:
        return "no window"
    for field in node.fields:
        if field.kind.layout is not Layout.FIXED or field.kind.cuda is None:
            return f"the {field.kind.name} state has no CUDA atomic fragment"
    group_side = next((side for side in (0, 1) if _group_columns(node, side) is not None), None)
    if group_side is None:
        return "GROUP BY mixes columns of both sides that are not join keys"
    types = {c.name: c.type for c in join.columns}
    predicates = [p for p in (join.residual, join.where) if p is not None]
    arguments = [f.argument for f in node.fields if f.argument is not None]
    read: dict[str, None] = {}
    for expression in (*predicates, *arguments):
        for column in expression.find_all(exp.Column):
            read[column.name] = None
    for name in read:
        if types[name] is SqlType.STRING:
            return f"it reads the STRING column {name} (no device dictionary for joined rows)"
    columns = _joined_columns(join, read)
    kept = tuple(
        side
        for side, keeps in enumerate((join.kind.keeps_left, join.kind.keeps_right))
        if keeps and isinstance(join.children[side], ph.StreamScanExec)
    )
    try:
        context = _fused_context(node, tuple(columns), kept)
    except (ExpressionError, ValueError) as error:
        return f"an expression does not render in CUDA: {error}"
    lonely = tuple(
        tuple(
            (
                k.name[len(join.aliases[side]) + 1 :]
                if k.name.startswith(join.aliases[side] + ".")
                else None,
                k.type,
            )
            for k in node.keys
        )
        for side in (0, 1)
    )
    return DeviceFusion(
        group_side, _group_columns(node, group_side), tuple(columns), context, kept, lonely
    )


def _joined_columns(join: ph.WindowJoinExec, names) -> tuple[FusedColumn, ...]:  # noqa: ANN001
    """The joined columns `names` (`alias.column`) as the device mirrors hold them."""
    types = {c.name: c.type for c in join.columns}
    columns = []
    for name in names:
        side = 0 if name.startswith(join.aliases[0] + ".") else 1
        bare = name[len(join.aliases[side]) + 1 :]
        columns.append(FusedColumn(side, bare, name, types[name], _device_ctype(types[name])))
    return tuple(columns)


def _render_checks(join: ph.WindowJoinExec, columns: tuple[FusedColumn, ...]):  # noqa: ANN202
    """(checks, CUDA context) of the residual and WHERE over the joined columns `v{i}`/`m{i}`
    (column i of `columns`): per predicate its C value and validity and whether it is the
    residual; the context's statements declare what they read."""
    from mangonel.compiler.cuda_expressions import CudaContext, render_cuda

    env = TypeEnv(columns={c.joined: c.type for c in columns})
    context = CudaContext(
        column_values={c.joined: f"v{i}" for i, c in enumerate(columns)},
        column_valid={c.joined: f"m{i}" for i, c in enumerate(columns)},
    )
    checks = []
    for residual, predicate in ((True, join.residual), (False, join.where)):
        if predicate is None:
            continue
        rendered = render_cuda(predicate, env, context)
        value = rendered.value
        if rendered.type is not SqlType.BOOLEAN:
            value = f"(({value}) != 0)"
        checks.append({"value": value, "valid": rendered.valid, "residual": residual})
    return checks, context


def device_rows(join: ph.WindowJoinExec) -> DeviceRowsPlan | str:
    """The device-resident rows form of a join without aggregation, or why its pairs come
    back to the host (EXPLAIN's `rows_reason`)."""
    if join.window is None:
        return "no window: each stream row is joined with the table as its batch arrives"
    emitted = ph.join_row_columns(join)[:-2]  # less window_start, window_end
    predicates = [p for p in (join.residual, join.where) if p is not None]
    read = {c.name for p in predicates for c in p.find_all(exp.Column)}
    types = {c.name: c.type for c in join.columns}
    for name in sorted(read):
        if types[name] is SqlType.STRING:
            return f"a predicate reads the STRING column {name} (no device dictionary)"
    # STRING columns are emitted from the host's rows, not mirrored
    wanted = {name for name, t in emitted if t is not SqlType.STRING} | read
    columns = _joined_columns(join, [c.name for c in join.columns if c.name in wanted])
    names = [c.joined for c in columns]
    positions = tuple(names.index(name) if name in names else None for name, _ in emitted)
    outputs = _joined_columns(join, [name for name, _ in emitted])
    kept = tuple(
        side
        for side, keeps in enumerate((join.kind.keeps_left, join.kind.keeps_right))
        if keeps and isinstance(join.children[side], ph.StreamScanExec)
    )
    if not predicates:
        return DeviceRowsPlan(columns, positions, None, kept, outputs)
    try:
        checks, context = _render_checks(join, columns)
    except (ExpressionError, ValueError) as error:
        return f"a predicate does not render in CUDA: {error}"
    if context.string_literals:
        return "a predicate reads a STRING literal (not staged for joined rows)"
    check = {
        "columns": [
            {
                **column_context(i, c.ctype),
                "row": "l" if c.side == 0 else "r",
                "read": c.joined in read,
                "side": c.side,
            }
            for i, c in enumerate(columns)
        ],
        "checks": checks,
        # a kept side's unmatched rows go through WHERE (the other side NULL)
        "lonely": [
            {"role": f"rows_lonely_{side}", "side": side} for side in kept if join.where is not None
        ],
        "statements": list(context.statements),
    }
    return DeviceRowsPlan(columns, positions, check, kept, outputs)


def credits_by_difference(node: ph.JoinAggregateExec) -> bool:
    """Whether an aggregated join credits by differences (the fused kernels and the probe
    form's `JoinCells`): sliding windows and every field an int64 state whose combine is
    addition mod 2^64 (counts, integer sums: the kinds flagged invertible)."""
    window = node.window
    if window.slide == window.size:
        return False  # tumbling: one window per pair already
    return all(f.kind.invertible and ph.field_dtype(f) == np.dtype(np.int64) for f in node.fields)


def device_fusion_reason(node: ph.JoinAggregateExec) -> str | None:
    """None when `device_fusion` applies, else why not (EXPLAIN's `fused_reason`)."""
    fusion = device_fusion(node)
    return fusion if isinstance(fusion, str) else None


def _fused_context(
    node: ph.JoinAggregateExec, columns: tuple[FusedColumn, ...], kept: tuple[int, ...]
) -> dict:
    """The template context of the fused kernels: the joined columns as `v{i}`/`m{i}` read at
    the pair's left row `l` or right row `r` (an unmatched row's kernel: the other side's
    NULL), the residual (a pair failing it is no match) and WHERE checks, the distinct
    aggregate arguments, the lifted parts and every field's atomic fragment; `kept`: the
    sides whose matched flags the pair kernel sets and whose unmatched rows a kernel each
    credits."""
    from mangonel.compiler.cuda_expressions import render_cuda

    env = TypeEnv(columns={c.joined: c.type for c in columns})
    checks, context = _render_checks(node.join, columns)
    arguments: list[dict[str, str]] = []
    argument_of: dict[int, int] = {}
    seen: list = []
    for position, field in enumerate(node.fields):
        if field.argument is None:
            continue
        if field.argument in seen:
            argument_of[position] = seen.index(field.argument)
            continue
        rendered = render_cuda(field.argument, env, context)
        k = len(seen)
        seen.append(field.argument)
        arguments.append(
            {
                "value": rendered.value,
                "valid": rendered.valid,
                "ctype": "double" if rendered.type.is_floating else "long long",
                "value_name": f"a{k}",
                "valid_name": f"a{k}_ok",
            }
        )
        argument_of[position] = k
    if context.string_literals:
        raise ValueError("STRING literals are not staged for joined rows")
    parts, field_code, part_code = _field_fragments(node.fields, argument_of)
    return {
        "columns": [
            {**column_context(i, c.ctype), "row": "l" if c.side == 0 else "r"}
            for i, c in enumerate(columns)
        ],
        "checks": checks,
        "statements": list(context.statements),
        "arguments": arguments,
        "parts": part_code,
        # the join's cells keep no aux words: each kind's merge for such tables
        "fields": [{**code, "atomic": code["locked_atomic"]} for code in field_code],
        "n_parts": len(parts),
        "differences": credits_by_difference(node),
        "marks": [{"row": "lr"[side], "side": side} for side in kept],
        "lonely": [
            {
                "role": f"fused_lonely_{side}",
                "columns": [
                    {"index": i, "ctype": c.ctype, "mine": c.side == side}
                    for i, c in enumerate(columns)
                ],
            }
            for side in kept
        ],
    }


def render_join_kernels(
    algorithm: str,
    scatters: tuple[JoinScatter, ...] = (),
    fusion: DeviceFusion | None = None,
    rows: DeviceRowsPlan | None = None,
) -> GeneratedModule:
    """The join module of one query: its algorithm's kernels, crediting, marking, and the
    scatter kernels of its aggregation; with `fusion`, the fused probe + aggregate kernel
    instead of the scatters; with `rows` (device-resident rows) and a predicate, the
    `rows_check` kernel."""
    if algorithm not in ALGORITHM_ROLES:
        raise ValueError(f"unknown join algorithm {algorithm!r}")
    rendered = []
    for scatter in scatters:
        members = tuple(f"p{i}" for i in range(len(scatter.kind.parts)))
        bound = dict(zip(scatter.kind.parts, members, strict=True))
        rendered.append(
            {
                "kind": scatter.kind.name,
                "ctype": scatter.ctype,
                "role": scatter.role,
                "members": members,
                "atomic": (scatter.kind.cuda.locked_atomic or scatter.kind.cuda.atomic).format(
                    **bound
                ),
            }
        )
    roles = (*ALGORITHM_ROLES[algorithm], *COMMON_ROLES, *(s.role for s in scatters))
    if fusion is not None:
        lonely = (f"fused_lonely_{side}" for side in fusion.kept)
        roles = tuple(dict.fromkeys((*roles, *FUSED_ROLES[algorithm], *lonely)))
    check = None if rows is None else rows.check
    if check is not None:
        roles = (*roles, "rows_check", *(lonely["role"] for lonely in check["lonely"]))
    fused = None
    if fusion is not None:
        variants = [r for r in FUSED_ROLES[algorithm] if r != "chain_insert"]
        group_row = "l" if fusion.group_side == 0 else "r"
        fused = {**fusion.context, "group_row": group_row, "variants": variants}
    context = {"algorithm": algorithm, "scatters": rendered, "fused": fused, "rows": check}
    source, digest, names = _finish(context, JOIN_TEMPLATES, roles)
    return GeneratedModule(source, digest, names, (), (), (), 0)


def render_node_join_kernels(node: ph.WindowJoinExec | ph.JoinAggregateExec) -> GeneratedModule:
    """The join module of a plan node (EXPLAIN CODEGEN and the GPU join kernels): the fused
    kernel where `device_fusion` applies, else the scatter kernels of the probe form."""
    aggregate = node if isinstance(node, ph.JoinAggregateExec) else None
    join = node.join if aggregate is not None else node
    fusion = None if aggregate is None else device_fusion(aggregate)
    algorithm = "auto" if getattr(join, "adaptive", False) else join.algorithm
    if isinstance(fusion, DeviceFusion):
        return render_join_kernels(algorithm, (), fusion)
    rows = device_rows(join) if aggregate is None else None
    if isinstance(rows, DeviceRowsPlan):
        return render_join_kernels(algorithm, (), None, rows)
    return render_join_kernels(algorithm, join_scatters(aggregate))


__all__ = [
    "DeviceFusion",
    "DeviceRowsPlan",
    "credits_by_difference",
    "device_rows",
    "FusedColumn",
    "JoinScatter",
    "device_fusion",
    "device_fusion_reason",
    "join_scatters",
    "render_join_kernels",
    "render_node_join_kernels",
    "scatter_role",
]
