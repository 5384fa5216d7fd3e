"""CUDA source of the window join's kernels (`kernels_templates/join.cu.j2`), rendered per query.

A query's join module holds the kernels of its algorithm only (hash: bucket count, probe
count/write; sort-merge: merge count/write), pane-pair crediting (expand count/write), the
outer joins' matched flags (mark) and, for an aggregated join, one scatter kernel per
(state kind, storage type) of its fields, pasted from the kind's CUDA atomic fragment: the
state is combined into (window, group) cells where the pairs are found. Rendering needs no
GPU and imports no CuPy; `runtime/gpu/join.py` compiles and launches.
"""

from __future__ import annotations

from dataclasses import dataclass

from mangonel.aggregates import require_fixed
from mangonel.aggregates.state import StateKind
from mangonel.compiler import physical as ph
from mangonel.compiler.codegen import GeneratedModule, _finish

JOIN_TEMPLATES = ("prelude.cu.j2", "join.cu.j2")
ALGORITHM_ROLES = {
    "hash": ("bucket_count", "probe_count", "probe_write"),
    "sort-merge": ("merge_count", "merge_write"),
}
COMMON_ROLES = ("expand_count", "expand_write", "mark")


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


def render_join_kernels(algorithm: str, scatters: tuple[JoinScatter, ...] = ()) -> GeneratedModule:
    """The join module of one query: its algorithm's kernels, crediting, marking, and the
    scatter kernels of its aggregation."""
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
                "atomic": scatter.kind.cuda.atomic.format(**bound),
            }
        )
    roles = (*ALGORITHM_ROLES[algorithm], *COMMON_ROLES, *(s.role for s in scatters))
    context = {"algorithm": algorithm, "scatters": rendered}
    source, digest, names = _finish(context, JOIN_TEMPLATES, roles)
    return GeneratedModule(source, digest, names, (), (), (), 0)


def render_node_join_kernels(node: ph.WindowJoinExec | ph.JoinAggregateExec) -> GeneratedModule:
    """The join module of a plan node (EXPLAIN CODEGEN and the GPU join kernels)."""
    aggregate = node if isinstance(node, ph.JoinAggregateExec) else None
    join = node.join if aggregate is not None else node
    return render_join_kernels(join.algorithm, join_scatters(aggregate))


__all__ = [
    "JoinScatter",
    "join_scatters",
    "render_join_kernels",
    "render_node_join_kernels",
    "scatter_role",
]
