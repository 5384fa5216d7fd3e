"""CUDA source for the GPU window operator, rendered from the physical plan.

Render, compile and run are three steps (tinygrad's habit):

- `render_kernels(lift, window)` returns a `GeneratedModule`: the CUDA source of every kernel
  the GPU backend launches for one query (lift, pane merge, fused lift+merge, tree levels,
  window compute, key hash table), specialised per query: column types, state fields,
  predicate and aggregate arguments (through `cuda_expressions.render_cuda`), pane/slide/size.
  Rendering needs no GPU and never imports CuPy. Templates (`kernels_templates/*.cu.j2`) only
  loop over plan parameters; every C fragment that depends on a state kind is that kind's
  `cuda` face in the aggregate registry (`mangonel.aggregates`).
- `mangonel.runtime.gpu.compile.CompileContext` compiles (nvcc or NVRTC through CuPy) and
  keeps the modules by source hash, in a bounded memory cache and on disk (`$MANGONEL_CACHE`
  or `~/.cache/mangonel`); this module never compiles and never imports CuPy.
- The runtime (`mangonel.runtime.gpu`) launches.

Kernel names carry the first 12 hex digits of the SHA-256 of their module's source, so two
queries with different plans never share a name and a cache entry is found by name alone.
`MANGONEL_DEBUG=codegen` prints each rendered source to stderr.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from sqlglot import exp

from mangonel.aggregates import require_fixed
from mangonel.catalog.types import SqlType
from mangonel.compiler import physical as ph
from mangonel.compiler.factorised import factorised_sides
from mangonel.compiler.holistic import PYTHON_GPU_FORM, incremental_part
from mangonel.compiler.options import GpuOptions
from mangonel.compiler.physical import LiftExec, StateField, WindowAggregateExec
from mangonel.compiler.wire import describe_wire, wire_columns

TEMPLATE_DIR = Path(__file__).resolve().parent.parent / "kernels_templates"
# nvcc contracts `a * b + c` into one fused multiply-add (one rounding instead of two), even
# across the renderer's temporaries, and no pragma stops it: results would then differ from
# the host evaluator's (Arrow rounds each operation) and Spark's by an ulp, or entirely where
# a product cancels a sum (`x * 3 - 0.3` for x = 0.1). Every module is compiled without
# contraction (`runtime.gpu.compile`); `_finish` writes the options into the source's first
# line, so they are part of its hash and no cache holds a module built otherwise.
COMPILE_OPTIONS = ("-fmad=false",)
# keys before fused: the fused kernel probes the key hash table (mg_find_slot)
TEMPLATES = (
    "prelude.cu.j2",
    "state.cu.j2",
    "lift.cu.j2",
    "merge.cu.j2",
    "keys.cu.j2",
    "fused.cu.j2",
    "windows.cu.j2",
)
# the lift alone needs only the State struct (no merge, no warp combine)
LIFT_TEMPLATES = ("prelude.cu.j2", "state_struct.cu.j2", "lift.cu.j2")
STATE_TEMPLATES = ("prelude.cu.j2", "state.cu.j2", "merge.cu.j2", "windows.cu.j2")
KEY_TEMPLATES = ("prelude.cu.j2", "keys.cu.j2")
KERNEL_ROLES = (
    "lift",
    "merge",
    "settle",
    "fused",
    "tree_levels",
    "window_compute",
    "window_prefix",
    "map_keys",
    "renumber",
)


@dataclass(frozen=True)
class StatePart:
    """One device array of a state field (one per part of its kind; MOMENTS has three)."""

    field: str
    part: int
    member: str  # C identifier in the generated structs
    ctype: str  # "long long" or "double"
    numpy: str  # "int64" or "float64"


@dataclass(frozen=True)
class InputColumn:
    """A column the lift reads: what the runtime copies to the device, in this order."""

    name: str
    type: SqlType
    ctype: str  # element type on the device (STRING: int32 dictionary ids; BOOLEAN: uint8)
    offset: bool = False  # travels as int32 offsets from a per-chunk base (`compiler.wire`)


@dataclass(frozen=True)
class GeneratedModule:
    """The CUDA source of one module (a compilation unit of several kernels) and what the
    runtime needs to launch it; `runtime.gpu.compile` compiles it."""

    source: str
    digest: str  # hex SHA-256 of the source
    names: dict[str, str]  # kernel role -> extern "C" name
    columns: tuple[InputColumn, ...]
    parts: tuple[StatePart, ...]
    string_literals: tuple[str, ...]  # literal k is compared through string_literal_ids[k]
    key_words: int  # 64-bit words per key in the hash table (key columns + NULL mask)
    block_cells: int = 0  # buckets of the fused and merge kernels' shared-memory block table
    aux_words: int = 0  # device-only words per state cell (`aux_words`)


def aux_words(fields: tuple[StateField, ...]) -> int:
    """Device-only 8-byte words per state cell: the sum of the fields' kinds' `cuda.aux`
    (MOMENTS: its shifted sum), kept interleaved in one array, cell j's at j * total."""
    return sum(f.kind.cuda.aux for f in fields if f.kind.cuda is not None)


def block_table_cells(
    parts: tuple[StatePart, ...], budget_bytes: int = 24 << 10, aux: int = 0
) -> int:
    """Buckets of the fused and merge kernels' per-block (key, pane) table: the largest power
    of two up to 1024 whose cells (cell id, one word per state part and per aux word) fit
    `budget_bytes` of shared memory (the kernel's other shared arrays and a second resident
    block need the rest)."""
    per_cell = 8 + 8 * len(parts) + 8 * aux
    cells = 1024
    while cells > 32 and cells * per_cell > budget_bytes:
        cells //= 2
    return cells


# ---------------------------------------------------------------------------------------
# State fragments: each state kind's `cuda` face (`mangonel.aggregates`); the templates never
# branch on a kind.


def _c_neutral(value: float | int, ctype: str) -> str:
    """C literal of a neutral element (`physical.neutral`, shared with the CPU and the
    state arrays' initial fill)."""
    if ctype == "long long":
        # INT64_MIN has no literal of its own in C (the minus applies to an out-of-range 2^63)
        return "(-0x7fffffffffffffffLL - 1LL)" if value == -(2**63) else f"{int(value)}LL"
    if math.isnan(value):
        return "__longlong_as_double(0x7ff8000000000000LL)"
    if math.isinf(value):
        bits = "0x7ff0000000000000LL" if value > 0 else "0xfff0000000000000LL"
        return f"__longlong_as_double({bits})"
    return repr(float(value))


def state_parts(fields: tuple[StateField, ...], lift_only: bool = False) -> tuple[StatePart, ...]:
    """The device arrays of every state field, in field order (same as the CPU backend):
    one per part of the field's kind, of the kind's storage dtype. `lift_only`: the parts
    are only lifted per tuple (`render_lift_kernels`), so variable-size kinds with a CUDA
    lift (the holistic VALUES) are allowed."""
    parts = []
    for index, field in enumerate(fields):
        if not (lift_only and field.kind.cuda is not None):
            require_fixed(field.kind, "the GPU backend")
        integer = ph.is_integer_state(field)
        ctype, numpy = ("long long", "int64") if integer else ("double", "float64")
        for part in range(len(field.kind.parts)):
            parts.append(StatePart(field.name, part, f"f{index}_{part}", ctype, numpy))
    return tuple(parts)


def column_context(index: int, ctype: str, offset: bool = False) -> dict[str, Any]:
    """The template names of input column `index`: its C type, the kernel parameters of its
    values and validity, and the locals that hold one row's value and validity. An `offset`
    column (`compiler.wire`: a 64-bit integer narrowed per chunk) also takes its chunk's base
    `b<index>` and wide flag `w<index>`: its values are int32 offsets from the base, or, when
    the flag is set, the 64-bit values themselves."""
    return {
        "ctype": ctype,
        "pointer": f"c{index}",
        "valid_pointer": f"n{index}",
        "value": f"v{index}",
        "valid": f"m{index}",
        "offset": offset,
        "base": f"b{index}",
        "wide": f"w{index}",
    }


def _device_ctype(sql_type: SqlType) -> str:
    if sql_type is SqlType.BOOLEAN:
        return "unsigned char"
    return sql_type.info.cuda


def _column_types(lift: LiftExec) -> dict[str, SqlType]:
    return {column.name: column.type for column in lift.scan.columns}


def _render_expressions(lift: LiftExec):
    """C expressions of the WHERE predicate and of every distinct aggregate argument, and the
    declarations of the temporaries they read (emitted once per row, before all of them)."""
    from mangonel.compiler.cuda_expressions import CudaContext, render_cuda
    from mangonel.compiler.typing import TypeEnv

    columns = lift.scan.columns
    values = {c.name: f"v{i}" for i, c in enumerate(columns)}
    valid = {c.name: f"m{i}" for i, c in enumerate(columns)}
    env = TypeEnv(columns=_column_types(lift))
    context = CudaContext(column_values=values, column_valid=valid)
    predicate = []
    if lift.predicate is not None:
        rendered = render_cuda(lift.predicate, env, context)
        predicate.append({"value": rendered.value, "valid": rendered.valid})
    arguments: list[dict[str, str]] = []
    argument_of: dict[int, int] = {}
    seen: list[exp.Expression] = []
    for position, field in enumerate(lift.fields):
        if field.argument is None:
            continue
        for k, earlier in enumerate(seen):
            if earlier == field.argument:
                argument_of[position] = k
                break
        else:
            rendered = render_cuda(field.argument, env, context)
            ctype = "double" if rendered.type.is_floating else "long long"
            k = len(seen)
            seen.append(field.argument)
            arguments.append(
                {
                    "value": rendered.value,
                    "valid": rendered.valid,
                    "ctype": ctype,
                    "value_name": f"a{k}",
                    "valid_name": f"a{k}_ok",
                }
            )
            argument_of[position] = k
    return predicate, arguments, argument_of, context.statements, tuple(context.string_literals)


def _field_fragments(
    fields: tuple[StateField, ...], argument_of: dict[int, int], lift_only: bool = False
):
    """The C fragments of every field: its kind's `cuda` face with the part names bound to
    the C members of the field's parts."""
    parts = state_parts(fields, lift_only)
    by_field: dict[str, list[StatePart]] = {}
    for part in parts:
        by_field.setdefault(part.field, []).append(part)
    field_code, part_code = [], []
    total_aux, aux_at = aux_words(fields), 0
    for position, field in enumerate(fields):
        cuda = field.kind.cuda
        field_parts = by_field[field.name]
        members = {name: p.member for name, p in zip(field.kind.parts, field_parts, strict=True)}
        if field.argument is None:
            ok, a = "contributes", "1"
        else:
            k = argument_of[position]
            ok, a = f"a{k}_ok", f"a{k}"
        aux = {f"aux{w}": f"t.aux[j * {total_aux} + {aux_at + w}]" for w in range(cuda.aux)}
        aux_at += cuda.aux
        field_code.append(
            {
                "combine": cuda.combine.format(**members),
                "atomic": cuda.atomic.format(**members, **aux),
                "settle": cuda.settle.format(**members, **aux),
                "locked_atomic": (cuda.locked_atomic or cuda.atomic).format(**members),
            }
        )
        # a lift-only field may be variable-size (no pane cell, so no `physical.neutral`):
        # its parts still start from the kind's neutral for rows without a value
        neutrals = field.kind.neutral(ph.field_dtype(field)) if lift_only else ph.neutral(field)[1]
        for part, neutral_value, lift in zip(field_parts, neutrals, cuda.lift, strict=True):
            neutral = _c_neutral(neutral_value, part.ctype)
            part_code.append(
                {
                    "member": part.member,
                    "ctype": part.ctype,
                    "neutral": neutral,
                    "lift": lift.format(ok=ok, a=a, ctype=part.ctype, neutral=neutral, **members),
                }
            )
    return parts, field_code, part_code


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def _render(context: dict[str, Any], templates: tuple[str, ...]) -> str:
    environment = _environment()
    return "\n".join(environment.get_template(name).render(**context) for name in templates)


def _finish(context: dict[str, Any], templates: tuple[str, ...], roles: tuple[str, ...]):
    """(source, digest, names): names carry the hash of the source rendered with neutral
    names, so a name identifies the code; rendering twice keeps hashing out of templates."""
    draft = _render({**context, "suffix": "q", "names": {r: f"mg_{r}" for r in roles}}, templates)
    tag = hashlib.sha256(draft.encode()).hexdigest()[:12]
    names = {role: f"mg_{role}_{tag}" for role in roles}
    source = f"// compile with {' '.join(COMPILE_OPTIONS)}: every operation rounds alone\n"
    source += _render({**context, "suffix": tag, "names": names}, templates)
    if "codegen" in os.environ.get("MANGONEL_DEBUG", "").split(","):
        print(f"// ---- mangonel codegen {tag} ----\n{source}", file=sys.stderr)
    return source, hashlib.sha256(source.encode()).hexdigest(), names


def render_kernels(lift: LiftExec, window: WindowAggregateExec | None = None) -> GeneratedModule:
    """Render every kernel of one query. `window` bakes pane/slide/size into the fused kernel
    (without it, the fused kernel is rendered for a 1-microsecond tumbling window)."""
    return _render_query(lift, window, TEMPLATES, KERNEL_ROLES)


def render_lift_kernels(lift: LiftExec) -> GeneratedModule:
    """Only the lift kernel of `lift` (per-tuple partials, no merge): the holistic step lifts
    the raw values of its VALUES fields with it, which no pane cell ever combines."""
    return _render_query(lift, None, LIFT_TEMPLATES, ("lift",), lift_only=True)


def _render_query(
    lift: LiftExec,
    window: WindowAggregateExec | None,
    templates: tuple[str, ...],
    roles: tuple[str, ...],
    lift_only: bool = False,
) -> GeneratedModule:
    predicate, arguments, argument_of, statements, literals = _render_expressions(lift)
    parts, field_code, part_code = _field_fragments(lift.fields, argument_of, lift_only)
    scan = lift.scan
    columns = tuple(
        InputColumn(c.name, c.type, _device_ctype(c.type), w.offset)
        for c, w in zip(scan.columns, wire_columns(lift), strict=True)
    )
    event_index = next(
        i for i, c in enumerate(scan.columns) if c.name.lower() == scan.stream.event_time.lower()
    )
    if window is None or window.window.kind is ph.WindowKind.COUNT:
        pane_length, slide, size = 1, 1, 1
    else:
        # lateness: the end of the last window holding a pane (CUMULATE: its period's end)
        pane_length, (slide, size) = window.pane_length, window.window.outer_shape
    key_words = len(lift.keys) + 1
    column_index = {c.name: i for i, c in enumerate(scan.columns)}
    key_columns = [
        {"value": f"v{column_index[k.name]}", "valid": f"m{column_index[k.name]}"}
        for k in lift.keys
    ]
    context: dict[str, Any] = {
        "parts": part_code,
        "fields": field_code,
        "columns": [column_context(i, c.ctype, c.offset) for i, c in enumerate(columns)],
        "event_time": {"value": f"v{event_index}", "valid": f"m{event_index}"},
        "predicate": predicate,
        "expression_statements": statements,
        "arguments": arguments,
        "pane_length": int(pane_length),
        "slide": int(slide),
        "size": int(size),
        "words": key_words,
        "key_columns": key_columns,
        "aux_words": aux_words(lift.fields),
    }
    context["block_cells"] = block_table_cells(parts, aux=context["aux_words"])
    source, digest, names = _finish(context, templates, roles)
    return GeneratedModule(
        source,
        digest,
        names,
        columns,
        parts,
        literals,
        key_words,
        context["block_cells"],
        context["aux_words"],
    )


def render_state_kernels(fields: tuple[StateField, ...]) -> GeneratedModule:
    """Merge and window kernels of a set of state fields alone (no lift: restored state,
    stage 2 of the split form)."""
    parts, field_code, part_code = _field_fragments(
        tuple(StateField(f.name, f.kind, None, f.type) for f in fields), {}
    )
    aux = aux_words(fields)
    context = {
        "parts": part_code,
        "fields": field_code,
        "aux_words": aux,
        "block_cells": block_table_cells(parts, aux=aux),
    }
    source, digest, names = _finish(
        context,
        STATE_TEMPLATES,
        ("merge", "settle", "tree_levels", "window_compute", "window_prefix"),
    )
    return GeneratedModule(source, digest, names, (), parts, (), 0, context["block_cells"], aux)


FINALIZE_TEMPLATES = ("prelude.cu.j2", "finalize.cu.j2")


def finalize_ctypes(
    fields: tuple[StateField, ...], plans: tuple[ph.AggregatePlan, ...]
) -> tuple[str, ...] | None:
    """The C type of each aggregate's device finalize result ("long long" or "double"), or
    None when one of them has no `cuda_finalize` (holistic and user functions: finalized on
    the host)."""
    if any(p.holistic or p.function.definition.cuda_finalize is None for p in plans):
        return None
    parts = {(p.field, p.part): p for p in state_parts(fields)}
    ctypes = []
    for plan in plans:
        cuda = plan.function.definition.cuda_finalize
        if cuda.ctype is not None:
            ctypes.append(cuda.ctype)
        else:
            ctypes.append(parts[(plan.value_field, 0)].ctype)
    return tuple(ctypes)


def render_finalize_kernels(
    fields: tuple[StateField, ...], plans: tuple[ph.AggregatePlan, ...]
) -> GeneratedModule:
    """The window finalize kernel of aggregates `plans` over state `fields` (every plan has a
    `cuda_finalize`: `finalize_ctypes` is not None)."""
    ctypes = finalize_ctypes(fields, plans)
    if ctypes is None:
        raise ValueError("an aggregate without a device finalize")
    parts = state_parts(fields)
    members = {(p.field, p.part): f"o_{p.member}[c]" for p in parts}
    results = []
    for plan, ctype in zip(plans, ctypes, strict=True):
        values = {}
        if plan.value_field is not None:
            kind_parts = next(f for f in fields if f.name == plan.value_field).kind.parts
            values = {f"v{k}": members[(plan.value_field, k)] for k in range(len(kind_parts))}
        code = plan.function.definition.cuda_finalize.code.format(
            out="value", null="null", count=members[(plan.count_field, 0)], **values
        )
        results.append({"ctype": ctype, "code": code})
    context = {"parts": [{"member": p.member, "ctype": p.ctype} for p in parts], "results": results}
    source, digest, names = _finish(context, FINALIZE_TEMPLATES, ("window_finalize",))
    return GeneratedModule(source, digest, names, (), parts, (), 0)


def render_key_kernels(words: int) -> GeneratedModule:
    """The key hash table kernels for keys of `words` 64-bit words."""
    source, digest, names = _finish({"words": int(words)}, KEY_TEMPLATES, ("map_keys", "renumber"))
    return GeneratedModule(source, digest, names, (), (), (), int(words))


SESSION_TEMPLATES = ("prelude.cu.j2", "session.cu.j2")
SESSION_ROLES = (
    "session_cells",
    "session_heads",
    "session_bounds",
    "session_breaks",
    "session_walk",
    "session_two_sets",
    "session_two_set_ends",
)


def render_session_kernels() -> GeneratedModule:
    """The session-window kernels (`session.cu.j2`, launched by `runtime.gpu.sessions`): a
    batch's rows into sessions per key (the bucket table, or rows sorted by (slot, ts)) and
    sessions merged with the open ones. They read slots and event times only (the gap is an
    argument), so one module serves every query; partial states combine through each query's
    state module (`render_state_kernels`' merge kernel)."""
    source, digest, names = _finish({}, SESSION_TEMPLATES, SESSION_ROLES)
    return GeneratedModule(source, digest, names, (), (), (), 0)


HOLISTIC_TEMPLATES = ("prelude.cu.j2", "holistic.cu.j2")
HOLISTIC_EVALUATIONS = ("percentile_cont", "percentile_disc", "count_distinct")
# lanes per window of each form of the holistic selection kernel (`holistic.cu.j2`)
# (a block is the runtime's THREADS_PER_BLOCK threads: the kernel reads blockDim.x)
HOLISTIC_FORM_LANES = {"thread-per-window": 1, "warp-per-window": 32, "block-per-window": 128}


def render_holistic_kernels(evaluation: str, form: str) -> GeneratedModule:
    """The selection kernel of one holistic evaluation (`Holistic.evaluation`) in one form
    (`HOLISTIC_FORM_LANES`): many windows per launch over runs of sorted order keys."""
    if evaluation not in HOLISTIC_EVALUATIONS or form not in HOLISTIC_FORM_LANES:
        raise ValueError(f"no holistic kernel for {evaluation!r} in form {form!r}")
    context = {
        "evaluation": evaluation,
        "form": form,
        "lanes": HOLISTIC_FORM_LANES[form],
        "block": form == "block-per-window",
    }
    source, digest, names = _finish(context, HOLISTIC_TEMPLATES, ("select",))
    return GeneratedModule(source, digest, names, (), (), (), 0)


# values a (pane, key slot) group of a batch's split may hold for the block sort
# (`holistic_runs.cu.j2` `sort_groups`: 8 KB of shared memory a block)
GROUP_SORT_VALUES = 1024


def render_holistic_runs_kernel() -> GeneratedModule:
    """The kernels building a holistic firing's runs from its span's pane offsets and
    splitting a batch by (pane, key slot) group (`kernels_templates/holistic_runs.cu.j2`):
    one module for every query."""
    source, digest, names = _finish(
        {"group_sort": GROUP_SORT_VALUES},
        ("prelude.cu.j2", "holistic_runs.cu.j2"),
        ("runs", "count_groups", "group_bounds", "scatter_groups", "sort_groups"),
    )
    return GeneratedModule(source, digest, names, (), (), (), 0)


SKETCH_HLL_TEMPLATES = ("prelude.cu.j2", "sketch_hll.cu.j2")


def render_hll_kernels() -> GeneratedModule:
    """The HyperLogLog++ kernels of APPROX_COUNT_DISTINCT (update, merge, histogram, the
    ring table's update and window answer, and the estimate of the cells past Ertl's band;
    `kernels_templates/sketch_hll.cu.j2`): one module
    for every query (the precision and the argument's hash mode are launch arguments)."""
    roles = (
        "update",
        "merge",
        "histogram",
        "ring_update",
        "ring_window",
        "ring_scan",
        "ring_window_scans",
        "estimate",
    )
    source, digest, names = _finish({}, SKETCH_HLL_TEMPLATES, roles)
    return GeneratedModule(source, digest, names, (), (), (), 0)


EXTREMES_TEMPLATES = ("prelude.cu.j2", "extremes.cu.j2")
EXTREMES_THREADS = 256  # a power of two: the blocks' shared-memory tree halves it


def render_extremes_kernels() -> GeneratedModule:
    """The (min, max) of an int64 device column in two launches (the parts, then one block
    over them; `kernels_templates/extremes.cu.j2`): the stager measures a pinned batch's
    event times with it. One module for every query."""
    roles = ("part_extremes", "extremes")
    source, digest, names = _finish({"threads": EXTREMES_THREADS}, EXTREMES_TEMPLATES, roles)
    return GeneratedModule(source, digest, names, (), (), (), 0)


def render_plan(plan: ph.ProjectExec) -> GeneratedModule:
    # holistic aggregates run on the CPU: the kernels compute the incremental part
    window = incremental_part(ph.find(plan, ph.WindowAggregateExec))
    return render_kernels(window.lift, window)


def _explain_join_codegen(plan: ph.ProjectExec, join: ph.WindowJoinExec) -> str:
    """The join module of a join plan whose join runs on the GPU (`gpu_join`), else why none."""
    aggregate = next((n for n in ph.walk(plan) if isinstance(n, ph.JoinAggregateExec)), None)
    if aggregate is not None and aggregate.factorised is not None:
        return _explain_factorised_codegen(aggregate)
    step = ph.placement(join, "join")
    if step.backend != "gpu":
        return f"// mangonel GPU kernels: none; the join steps run on the cpu ({ph.JOIN_ON_CPU})"
    from mangonel.compiler.codegen_join import render_node_join_kernels  # imports this module

    generated = render_node_join_kernels(aggregate if aggregate is not None else join)
    header = [
        f"// mangonel GPU join kernels ({join.algorithm})",
        f"// module sha256: {generated.digest}",
        "// kernels: " + ", ".join(generated.names.values()),
    ]
    return "\n".join(header) + "\n" + generated.source


def _explain_factorised_codegen(node: ph.JoinAggregateExec) -> str:
    """A factorised join aggregation's GPU kernels: those of its two side window
    aggregations (`factorised.factorised_sides`) where their lift runs on the GPU."""
    out = []
    for alias, side in zip(node.join.aliases, factorised_sides(node), strict=True):
        if ph.placement(side, "lift").backend != "gpu":
            out.append(f"// mangonel GPU kernels of side {alias}: none; it runs on the cpu")
            continue
        generated = render_kernels(side.lift, side)
        header = [
            f"// mangonel GPU kernels of side {alias} (factorised join: "
            f"{side.lift.scan.stream.name} grouped by its join keys)",
            f"// strategy: {side.strategy}",
            f"// module sha256: {generated.digest}",
            "// kernels: " + ", ".join(generated.names[role] for role in KERNEL_ROLES),
            "// inputs: " + ", ".join(f"c{i}:{c.ctype}" for i, c in enumerate(generated.columns)),
            "// state arrays: " + ", ".join(f"{p.member}:{p.numpy}" for p in generated.parts),
        ]
        out.append("\n".join(header) + "\n" + generated.source)
    return "\n".join(out)


def explain_codegen(plan: ph.ProjectExec, options: GpuOptions | None = None) -> str:
    """The CUDA source of a plan's GPU kernels, with a header naming them and the launch
    options they run with (`options`, default: `GpuOptions()`; no GPU needed)."""
    join = next((n for n in ph.walk(plan) if isinstance(n, ph.WindowJoinExec)), None)
    if join is not None:
        return _explain_join_codegen(plan, join)
    generated = render_plan(plan)
    window = ph.find(plan, ph.WindowAggregateExec)
    header = [
        "// mangonel GPU kernels",
        f"// strategy: {window.strategy}",
        f"// module sha256: {generated.digest}",
        f"// gpu options: {(options or GpuOptions()).describe()}",
        f"// window tree: {_tree_note(window)}",
        f"// finalize: {_finalize_note(window)}",
        "// kernels: " + ", ".join(generated.names[role] for role in KERNEL_ROLES),
        "// inputs: " + ", ".join(f"c{i}:{c.ctype}" for i, c in enumerate(generated.columns)),
        f"// wire: {describe_wire(window.lift)}",
        "// state arrays: " + ", ".join(f"{p.member}:{p.numpy}" for p in generated.parts),
    ]
    return (
        "\n".join(header)
        + "\n"
        + generated.source
        + _explain_finalize_codegen(window)
        + _explain_holistic_codegen(window)
        + _explain_session_codegen(window)
    )


def _explain_session_codegen(window: WindowAggregateExec) -> str:
    """The session kernels where a session window forms its sessions on the GPU."""
    if window.window.kind is not ph.WindowKind.SESSION:
        return ""
    if ph.placement(window, "session").backend != "gpu":
        return ""
    generated = render_session_kernels()
    header = [
        "// mangonel GPU session kernels (a batch's sessions: the bucket table, or rows "
        "sorted by (slot, ts); merged with the open sessions of the keys they touch; partial "
        "states combined by the merge kernel above)",
        f"// module sha256: {generated.digest}",
        "// kernels: " + ", ".join(generated.names[role] for role in SESSION_ROLES),
    ]
    return "\n" + "\n".join(header) + "\n" + generated.source


def _tree_note(window: WindowAggregateExec) -> str:
    """How a GPU time window keeps its pane aggregation tree (`gpu.state.GpuPaneState`)."""
    if window.window.kind is ph.WindowKind.COUNT:
        return "none on the GPU (count windows: the tree runs on the cpu)"
    if window.window.kind is ph.WindowKind.SESSION:
        return (
            "none (session windows: each batch's rows form their sessions on the device, "
            "kernels below; the open sessions are kept on the host)"
        )
    if window.window.kind is ph.WindowKind.CUMULATE:
        return (
            "none: CUMULATE windows are a prefix combine over the state's columns "
            "(window_prefix: each window of a period is the one before it and one more pane)"
        )
    return (
        "kept across firings: each firing rebuilds only the nodes over the panes merged "
        "since the last one (SPRINGALD's incremental B-PAT update), while its levels take "
        "at most the state's bytes or 1 GiB; windows outside the state's columns build "
        "their own"
    )


def _finalize_note(window: WindowAggregateExec) -> str:
    """Where a GPU plan's fired cells are finalized (`physical.device_finalize`)."""
    step = ph.placement(window, "finalize")
    if step.backend == "gpu":
        return (
            "on the device (window_finalize kernel), the cells with rows packed and copied "
            "once per firing through a reused pinned buffer"
        )
    return f"on the {step.backend} ({step.reason})"


def _explain_finalize_codegen(window: WindowAggregateExec) -> str:
    """The window finalize kernel where the plan finalizes on the GPU."""
    if ph.placement(window, "finalize").backend != "gpu":
        return ""
    incremental = incremental_part(window)
    generated = render_finalize_kernels(incremental.fields, incremental.aggregates)
    header = [
        "// mangonel GPU finalize kernel",
        f"// module sha256: {generated.digest}",
        f"// kernels: {generated.names['window_finalize']}",
    ]
    return "\n" + "\n".join(header) + "\n" + generated.source


def _explain_holistic_codegen(window: WindowAggregateExec) -> str:
    """The selection kernels of a window's holistic aggregates where they run on the GPU."""
    plan = window.holistic
    if plan is None or plan.gpu_form is None:
        return ""
    evaluations = []
    for aggregate in window.aggregates:
        evaluation = aggregate.evaluation  # an exact APPROX_PERCENTILE's: percentile_disc
        if evaluation is not None and evaluation not in evaluations:
            evaluations.append(evaluation)
    out = []
    for evaluation in evaluations:
        if evaluation == "python":  # compiled by numba's CUDA target, not rendered here
            names = ", ".join(plan.python)
            out.append(
                f"// Python window functions ({names}): numba CUDA device functions, "
                f"{PYTHON_GPU_FORM} over the window's merged runs "
                "(runtime/gpu/python_window.py)"
            )
            continue
        generated = render_holistic_kernels(evaluation, plan.gpu_form)
        header = [
            f"// mangonel GPU holistic kernel ({evaluation}, {plan.gpu_form}, "
            f"up to {plan.windows_per_launch} windows per launch)",
            f"// module sha256: {generated.digest}",
            f"// kernels: {generated.names['select']}",
        ]
        out.append("\n".join(header) + "\n" + generated.source)
    return "\n" + "\n".join(out)
