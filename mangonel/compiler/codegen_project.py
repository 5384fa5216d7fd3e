"""CUDA source of the Filter and Project operators' kernel, rendered from their expressions.

The Filter (HAVING) and Project (output list) operators run over "window result" batches: the
key columns, the window bounds and the finalized aggregates of fired windows. On the GPU, the
expressions that compute something become one kernel (`kernels_templates/project.cu.j2`):
each row reads the numeric, timestamp and boolean inputs the expressions name, evaluates them
through the same CUDA expression renderer as the lift (`cuda_expressions.render_cuda`, Spark's
semantics), and writes each output's value and validity and the predicate's mask. A bare
reference (a key column of any type, a window bound, an aggregate) is not rendered: it passes
through on the host, where the batch already holds it.

`gpu_unsupported_reason` is what the planner asks to place the filter and project steps: None
when every expression renders in CUDA, else the reason they run on the CPU. STRING values
(only comparisons can read them: no expression yields a STRING) stay on the host, because the
window result holds them as Arrow strings and the kernel would need one dictionary for every
STRING column and literal.

Rendering needs no GPU and imports no CuPy; `runtime/gpu/project.py` compiles and launches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlglot import exp

from mangonel.catalog.types import SqlType
from mangonel.compiler import nodes
from mangonel.compiler.codegen import _device_ctype, _finish
from mangonel.compiler.cuda_expressions import CudaContext, CudaValue, render_cuda
from mangonel.compiler.typing import (
    ExpressionError,
    TypeEnv,
    aggregate_index,
    annotate_types,
    is_string_literal,
    unwrap_parens,
)

PROJECT_TEMPLATES = ("project.cu.j2",)

# A reference of the window-result batch: ("column", key name), ("window_bound", "start" or
# "end"), ("aggregate", number).
Reference = tuple[str, str | int]


@dataclass(frozen=True)
class ProjectInput:
    """An input the kernel reads, in kernel-parameter order: values then validity bytes."""

    reference: Reference
    type: SqlType
    ctype: str  # element type on the device (BOOLEAN: one byte)


@dataclass(frozen=True)
class ProjectOutput:
    """One computed output: a device array of `ctype` and a validity byte array."""

    type: SqlType  # what the expression yields (the host evaluator's result type)
    ctype: str
    numpy: str  # the device array's dtype (BOOLEAN: uint8)


@dataclass(frozen=True)
class GeneratedProject:
    source: str
    digest: str  # hex SHA-256 of the source
    names: dict[str, str]  # {"project": extern "C" name}
    inputs: tuple[ProjectInput, ...]
    outputs: tuple[ProjectOutput, ...]
    has_mask: bool  # the kernel writes the predicate's mask (uint8) after the outputs


def is_bare_reference(expression: exp.Expression) -> bool:
    """A key column, window bound or aggregate as is: the batch holds its values already
    (not `window_time`: it is computed from window_end)."""
    node = unwrap_parens(expression)
    if isinstance(node, nodes.WindowBound):
        return not node.offset_us
    # the window struct: the Project driver builds it from the bounds on the host
    return isinstance(node, exp.Column | nodes.AggregateRef | nodes.WindowStruct)


def references(expressions: Sequence[exp.Expression]) -> tuple[Reference, ...]:
    """The inputs `expressions` read, in first-seen order (each once)."""
    found: dict[Reference, None] = {}
    for expression in expressions:
        for node in expression.walk():
            if isinstance(node, exp.Column):
                found[("column", node.name)] = None
            elif isinstance(node, nodes.WindowBound):
                found[("window_bound", node.reads)] = None
            elif isinstance(node, nodes.AggregateRef):
                found[("aggregate", aggregate_index(node))] = None
    return tuple(found)


def _reference_type(reference: Reference, env: TypeEnv) -> SqlType:
    kind, key = reference
    if kind == "column":
        return env.columns[key]
    if kind == "aggregate":
        return env.aggregates[key]
    return SqlType.TIMESTAMP


def _context(inputs: Sequence[Reference], env: TypeEnv) -> CudaContext:
    """Input k is `x{k}` (value) and `x{k}_ok` (validity) in C."""
    values: dict[str, str] = {}
    valid: dict[str, str] = {}
    aggregate_values = ["0"] * len(env.aggregates)  # never read: only referenced ones render
    aggregate_valid = ["false"] * len(env.aggregates)
    bounds: dict[str, str] = {}
    for k, (kind, key) in enumerate(inputs):
        if kind == "column":
            values[key], valid[key] = f"x{k}", f"x{k}_ok"
        elif kind == "aggregate":
            aggregate_values[key], aggregate_valid[key] = f"x{k}", f"x{k}_ok"
        else:
            bounds[key] = f"x{k}"  # window bounds are never NULL
    return CudaContext(
        column_values=values,
        column_valid=valid,
        aggregate_values=aggregate_values,
        aggregate_valid=aggregate_valid,
        window_start=bounds.get("start"),
        window_end=bounds.get("end"),
    )


def _predicate_mask(rendered: CudaValue) -> dict[str, str]:
    # TRUE rows only; a non-BOOLEAN predicate is true where non-zero (as the host's mask reads)
    value = rendered.value
    if rendered.type is not SqlType.BOOLEAN:
        value = f"(({value}) != 0)"
    return {"value": value, "valid": rendered.valid}


def _render(
    expressions: Sequence[exp.Expression], env: TypeEnv, predicate: exp.Expression | None
) -> tuple[tuple[Reference, ...], CudaContext, list[CudaValue], CudaValue | None]:
    """The inputs read, the context (temporaries) and the C renderings of every expression
    and of the predicate, all sharing one context (one set of temporaries per row)."""
    read = references([*expressions, *([] if predicate is None else [predicate])])
    context = _context(read, env)
    rendered = [render_cuda(expression, env, context) for expression in expressions]
    mask = None if predicate is None else render_cuda(predicate, env, context)
    if context.string_literals:
        # gpu_unsupported_reason keeps STRING values on the host: no literal ids are staged
        raise ValueError("the project kernel compares no STRING values")
    return read, context, rendered, mask


def render_project_kernels(
    expressions: Sequence[exp.Expression],
    env: TypeEnv,
    predicate: exp.Expression | None = None,
) -> GeneratedProject:
    """The kernel computing `expressions` (one output each, none bare) and, when given, the
    mask of `predicate` over window-result rows typed by `env` (key columns, aggregates)."""
    read, context, rendered, mask = _render(expressions, env, predicate)
    outputs, output_code = [], []
    for j, value in enumerate(rendered):
        ctype = _device_ctype(value.type)
        numpy = "uint8" if value.type is SqlType.BOOLEAN else value.type.info.numpy.name
        outputs.append(ProjectOutput(value.type, ctype, numpy))
        output_code.append(
            {
                "ctype": ctype,
                "pointer": f"out{j}",
                "valid_pointer": f"out{j}_valid",
                "value": value.value,
                "valid": value.valid,
            }
        )
    inputs = tuple(
        ProjectInput(r, _reference_type(r, env), _device_ctype(_reference_type(r, env)))
        for r in read
    )
    template_context = {
        "inputs": [
            {
                "ctype": input.ctype,
                "pointer": f"c{k}",
                "valid_pointer": f"n{k}",
                "value": f"x{k}",
                "valid": f"x{k}_ok",
            }
            for k, input in enumerate(inputs)
        ],
        "outputs": output_code,
        "predicate": None if mask is None else _predicate_mask(mask),
        "statements": context.statements,
    }
    source, digest, names = _finish(template_context, PROJECT_TEMPLATES, ("project",))
    return GeneratedProject(source, digest, names, inputs, tuple(outputs), mask is not None)


def gpu_unsupported_reason(expressions: Sequence[exp.Expression], env: TypeEnv) -> str | None:
    """Why these Filter/Project expressions cannot run on the GPU, or None when they can: the
    planner's answer for placing the filter and project steps. Bare references pass through
    on the host and never keep a step off the GPU."""
    from mangonel.compiler.explain import format_expression  # explain imports the plan

    for expression in expressions:
        if is_bare_reference(expression):
            continue
        try:
            annotation = annotate_types(expression, env)
            # every typed node (identifiers and the like carry no type of their own)
            if SqlType.STRING in annotation.types.values() or any(
                is_string_literal(node) for node in expression.walk()
            ):
                return f"{format_expression(expression)} compares STRING values"
            _render([expression], env, None)
        except (ExpressionError, KeyError, IndexError, ValueError) as error:
            return f"{format_expression(expression)} has no CUDA rendering ({error})"
    return None
