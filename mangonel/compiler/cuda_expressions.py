"""Scalar expressions rendered as CUDA C for the generated kernels (source text only).

The semantics (Spark's, non-ANSI) and the helpers shared with the CPU evaluator are in
`mangonel.compiler.expressions`; `CUDA_OPS` covers exactly the node classes of
`mangonel.runtime.cpu.expressions.CPU_OPS` and `mangonel.compiler.typing.TYPE_RULES` (a test
checks the three key sets are equal).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from sqlglot import exp

from mangonel.catalog.types import TYPE_INFO, SqlType, common_numeric_type
from mangonel.compiler import nodes
from mangonel.compiler.expressions import (
    DOUBLE_INTEGRAL_FROM,
    INTEGER_RANGE,
    case_branches,
    comparison_type,
    log_base_is_ten,
    variadic_operands,
)
from mangonel.compiler.typing import (
    ExpressionError,
    TypeAnnotation,
    TypeEnv,
    aggregate_index,
    annotate_types,
    cast_target,
    is_string_literal,
    numeric_literal_value,
    round_scale,
    timestamp_literal_value,
    unwrap_parens,
)

# ============================================================================================
# CUDA C: one C expression for the value and one for its validity, after the declarations of
# the temporaries they read.
#
# A node's text often uses an operand's text more than once (Kleene AND/OR read each side's
# value and validity several times, GREATEST compares and then selects, x % y tests y for 0
# and -1). Pasting the operand's text each time would make the source grow exponentially with
# nesting (`a OR b OR ...` of 20 terms ran out of memory), so every node's text longer than
# _INLINE_LIMIT is bound to a temporary (`const double e4 = ...;`, `const bool e4_ok = ...;`)
# and its parent reads the name. A parent then sees only short texts, each of its own texts is
# a constant times _INLINE_LIMIT long, and the whole source is linear in the number of nodes.
# Each node is rendered once (a subtree read several times, as IN reads its left side, reuses
# its names). Every operator is total in C (division and x % 0 are guarded, integer arithmetic
# wraps through unsigned, casts saturate), so evaluating every temporary, also those of CASE
# branches not taken and of operands whose result turns out NULL, is safe.

STRING_LITERAL_IDS = "string_literal_ids"  # the device array codegen declares (int32)
_C_NAN = "__longlong_as_double(0x7ff8000000000000LL)"
# What a C fragment handed in by codegen may not contain: nothing that could open a comment,
# a string, a preprocessor line or a statement.
_UNSAFE_C = re.compile(r"""["'\\\n\r#;{}]|//|/\*|\*/""")
_C_NUMBER = re.compile(r"^-?[0-9]+(\.[0-9]+)?(e[-+]?[0-9]+)?(LL)?$")
# A text this short may be written several times (a name, a literal, `((double)(v3))`,
# `(0 < (v0))`); a longer one is bound to a temporary.
_INLINE_LIMIT = 32
_TEMPORARY_PREFIX = "e"  # temporaries are e0, e0_ok, e1, ...; no input fragment may use them
_TEMPORARY_NAME = re.compile(rf"\b{_TEMPORARY_PREFIX}[0-9]+(_ok)?\b")


@dataclass(frozen=True)
class CudaValue:
    """A rendered expression: C expressions for the value and whether it is non-NULL.

    `valid` is "true" when the value can never be NULL; `value` is unspecified (but safe to
    evaluate) when `valid` is false. Both may read temporaries: the declarations the renderer
    appended to `CudaContext.statements` must come first in the C source.
    """

    value: str
    valid: str
    type: SqlType


@dataclass
class CudaContext:
    """The C expressions codegen chose for the inputs of one expression.

    column_values/column_valid: resolved column name -> C expression (e.g. "v3", "m3");
    aggregate_values/aggregate_valid: the same for AggregateRef(i), by index;
    window_start/window_end: C expressions of the window bounds (never NULL);
    string_literals: filled by the renderer; literal k reads `string_literal_ids[k]`;
    statements: filled by the renderer, in evaluation order: the declarations of the
    temporaries (`const double e0 = ...;`) every rendered value and validity may read. The
    caller emits them, in one scope where the inputs are defined, before using any rendering
    made with this context; several renderings may share one context (names never repeat).
    """

    column_values: Mapping[str, str]
    column_valid: Mapping[str, str]
    aggregate_values: Sequence[str] = ()
    aggregate_valid: Sequence[str] = ()
    window_start: str | None = None
    window_end: str | None = None
    string_literals: list[str] = field(default_factory=list)
    statements: list[str] = field(default_factory=list)
    temporaries: int = 0  # how many names were handed out
    bound: dict[tuple[str, str], str] = field(default_factory=dict)  # (ctype, text) -> name

    def string_literal_index(self, text: str) -> int:
        if text not in self.string_literals:
            self.string_literals.append(text)
        return self.string_literals.index(text)

    def bind(self, ctype: str, name: str, text: str) -> str:
        """The temporary that holds `text`: one declared before (every text is a pure function
        of the row's inputs and earlier temporaries), else `name`, declared now."""
        key = (ctype, text)
        if key not in self.bound:
            self.statements.append(f"const {ctype} {name} = {text};")
            self.bound[key] = name
        return self.bound[key]


def render_cuda(expr: exp.Expression, env: TypeEnv, ctx: CudaContext) -> CudaValue:
    """Render `expr` as C expressions over the inputs `ctx` names; the temporaries they read
    are declared by the statements this appends to `ctx.statements`."""
    annotation = annotate_types(expr, env)
    renderer = _CudaRenderer(annotation, ctx)
    root = unwrap_parens(expr)
    if annotation.root_type is None:
        return renderer.null(SqlType.BOOLEAN)
    # The root stays one expression (not bound to a temporary): short expressions read as
    # they did, e.g. `WHERE x > 0` renders `(0 < (v3))`.
    return CUDA_OPS[type(root)](renderer, root)


def _c_input(fragment: str, what: str) -> str:
    if not fragment or _UNSAFE_C.search(fragment):
        raise ValueError(f"unsafe C expression for {what}: {fragment!r}")
    if _TEMPORARY_NAME.search(fragment):
        raise ValueError(f"C expression for {what} uses a temporary's name: {fragment!r}")
    return f"({fragment})"


def _c_and(*terms: str) -> str:
    kept = [t for t in dict.fromkeys(terms) if t != "true"]
    if "false" in kept:
        return "false"
    if not kept:
        return "true"
    return kept[0] if len(kept) == 1 else "(" + " && ".join(kept) + ")"


def _c_or(*terms: str) -> str:
    kept = [t for t in dict.fromkeys(terms) if t != "false"]
    if "true" in kept:
        return "true"
    if not kept:
        return "false"
    return kept[0] if len(kept) == 1 else "(" + " || ".join(kept) + ")"


def _c_not(term: str) -> str:
    return {"true": "false", "false": "true"}.get(term, f"(!{term})")


def _c_select(condition: str, if_true: str, if_false: str) -> str:
    if condition == "true" or if_true == if_false:
        return if_true
    if condition == "false":
        return if_false
    if (if_true, if_false) == ("true", "false"):
        return condition
    if (if_true, if_false) == ("false", "true"):
        return _c_not(condition)
    return f"({condition} ? {if_true} : {if_false})"


def _c_ctype(sql_type: SqlType) -> str:
    return TYPE_INFO[sql_type].cuda


def _c_number(value: int | float, sql_type: SqlType) -> str:
    """A C literal of a validated Python number (the only way SQL numbers reach C)."""
    if sql_type.is_integer:
        value = int(value)
        low, high = INTEGER_RANGE[sql_type]
        if not low <= value <= high:
            raise ValueError(f"{value} out of {sql_type} range")
        suffix = "LL" if sql_type is SqlType.BIGINT else ""
        if value == low:  # -2147483648 is not a C literal: it is -(2147483648)
            return f"({low + 1}{suffix} - 1{suffix})"
        text = f"{value}{suffix}"
    else:
        value = float(value)
        if math.isnan(value) or math.isinf(value):
            raise ValueError("non-finite literal")
        text = repr(value)
    if not _C_NUMBER.match(text):
        raise ValueError(f"not a C number: {text!r}")
    if text.startswith("-"):
        text = f"({text})"
    return f"((float){text})" if sql_type is SqlType.FLOAT else text


def _numeric_literal(node: exp.Expression) -> int | float | None:
    """The value of a (possibly negated) numeric literal, else None."""
    node = unwrap_parens(node)
    sign = 1
    if isinstance(node, exp.Neg):
        sign, node = -1, unwrap_parens(node.this)
    if isinstance(node, exp.Literal) and not node.is_string:
        return sign * numeric_literal_value(node)
    return None


class _CudaRenderer:
    def __init__(self, annotation: TypeAnnotation, ctx: CudaContext) -> None:
        self.annotation = annotation
        self.ctx = ctx
        self.rendered: dict[int, CudaValue] = {}  # node (by identity) -> its shared rendering

    def type_of(self, node: exp.Expression) -> SqlType | None:
        return self.annotation.type_of(node)

    def render(self, node: exp.Expression) -> CudaValue:
        """`node` as short C texts (temporaries for long ones), rendered once per node."""
        rendered = self.rendered.get(id(node))
        if rendered is None:
            rendered = self.share(CUDA_OPS[type(node)](self, node))
            self.rendered[id(node)] = rendered
        return rendered

    def share(self, value: CudaValue) -> CudaValue:
        """`value` with each text longer than _INLINE_LIMIT bound to a temporary: what a text
        that is read more than once (or grows in a loop) goes through."""
        text, valid = value.value, value.valid
        if len(text) <= _INLINE_LIMIT and len(valid) <= _INLINE_LIMIT:
            return value
        name = f"{_TEMPORARY_PREFIX}{self.ctx.temporaries}"  # eN, and eN_ok for its validity
        if len(valid) > _INLINE_LIMIT:
            valid = self.ctx.bind("bool", f"{name}_ok", valid)
        if len(text) > _INLINE_LIMIT:
            text = self.ctx.bind(_c_ctype(value.type), name, text)
        if name in (text, valid.removesuffix("_ok")):
            self.ctx.temporaries += 1
        return CudaValue(text, valid, value.type)

    def render_as(self, node: exp.Expression, to_type: SqlType | None) -> CudaValue:
        """Render `node` converted to `to_type` (implicit widening, or a typed NULL)."""
        to_type = to_type or SqlType.BOOLEAN
        node_type = self.type_of(node)
        if node_type is None:
            return self.null(to_type)
        literal = _numeric_literal(node)
        if (
            literal is not None
            and to_type is not SqlType.FLOAT
            and to_type.is_numeric
            and common_numeric_type(node_type, to_type) is to_type
        ):
            # Spell a widened literal in its target type: 2.0 rather than ((double)2).
            return CudaValue(_c_number(literal, to_type), "true", to_type)
        return _c_convert(self.render(node), to_type)

    def null(self, sql_type: SqlType) -> CudaValue:
        zero = "false" if sql_type is SqlType.BOOLEAN else f"(({_c_ctype(sql_type)})0)"
        return CudaValue(zero, "false", sql_type)


def _c_convert(value: CudaValue, to_type: SqlType) -> CudaValue:
    """CAST semantics in C (also implicit widening, where every case is exact or IEEE)."""
    source, v = value.type, value.value
    if source is to_type:
        return value
    if to_type is SqlType.BOOLEAN:
        text = f"({v} != 0)"
    elif source.is_floating and to_type.is_integer:
        intrinsic = "__double2int_rz" if to_type is SqlType.INT else "__double2ll_rz"
        text = _c_double_to_integer(intrinsic, f"((double){v})", to_type)
    elif source is SqlType.DOUBLE and to_type is SqlType.FLOAT:
        text = f"__double2float_rn({v})"  # a plain C cast is undefined out of float's range
    else:
        text = f"(({_c_ctype(to_type)}){v})"
    return CudaValue(text, value.valid, to_type)


def _c_double_to_integer(intrinsic: str, double: str, to_type: SqlType) -> str:
    """Java's (int)/(long) of a double. The cvt intrinsics saturate as Java does, but turn NaN
    into the type's minimum (checked on an H200), where Java gives 0."""
    zero = f"(({_c_ctype(to_type)})0)"
    return f"(isnan({double}) ? {zero} : {intrinsic}({double}))"


def _c_double(value: CudaValue) -> str:
    return _c_convert(value, SqlType.DOUBLE).value


def _c_wrapping(operator: str, left: str, right: str, sql_type: SqlType) -> str:
    """Integer arithmetic that wraps around: signed overflow is undefined in C, unsigned is
    modular."""
    ctype = _c_ctype(sql_type)
    return f"(({ctype})((unsigned {ctype}){left} {operator} (unsigned {ctype}){right}))"


# --- leaves ---------------------------------------------------------------------------------


def _cuda_column(r: _CudaRenderer, node: exp.Column) -> CudaValue:
    name = node.name
    if name not in r.ctx.column_values or name not in r.ctx.column_valid:
        raise ExpressionError("no C expression for this column", node=node)
    return CudaValue(
        _c_input(r.ctx.column_values[name], "a column value"),
        _c_validity(r.ctx.column_valid[name]),
        r.type_of(node),
    )


def _c_validity(fragment: str) -> str:
    return fragment if fragment in ("true", "false") else _c_input(fragment, "a validity")


def _cuda_window_bound(r: _CudaRenderer, node: nodes.WindowBound) -> CudaValue:
    fragment = r.ctx.window_start if node.reads == "start" else r.ctx.window_end
    if fragment is None:
        raise ExpressionError(f"window_{node.bound} is not available here", node=node)
    value = _c_input(fragment, "a window bound")
    if node.offset_us:  # window_time
        value = f"({value} + ({node.offset_us}LL))"
    return CudaValue(value, "true", SqlType.TIMESTAMP)


def _cuda_aggregate_ref(r: _CudaRenderer, node: nodes.AggregateRef) -> CudaValue:
    index = aggregate_index(node)
    try:
        value, valid = r.ctx.aggregate_values[index], r.ctx.aggregate_valid[index]
    except (IndexError, KeyError):
        raise ExpressionError(f"no C expression for aggregate number {index}", node=node) from None
    return CudaValue(_c_input(value, "an aggregate value"), _c_validity(valid), r.type_of(node))


def _cuda_literal(r: _CudaRenderer, node: exp.Literal) -> CudaValue:
    sql_type = r.type_of(node)
    return CudaValue(_c_number(numeric_literal_value(node), sql_type), "true", sql_type)


def _cuda_boolean(r: _CudaRenderer, node: exp.Boolean) -> CudaValue:
    return CudaValue("true" if node.this else "false", "true", SqlType.BOOLEAN)


def _cuda_null(r: _CudaRenderer, node: exp.Null) -> CudaValue:
    return r.null(SqlType.BOOLEAN)


def _cuda_paren(r: _CudaRenderer, node: exp.Paren) -> CudaValue:
    return r.render(node.this)


# --- arithmetic -----------------------------------------------------------------------------


def _cuda_arithmetic(operator: str) -> Callable:
    def render(r: _CudaRenderer, node: exp.Binary) -> CudaValue:
        result_type = r.type_of(node)
        left = r.render_as(node.this, result_type)
        right = r.render_as(node.expression, result_type)
        if result_type.is_integer:
            text = _c_wrapping(operator, left.value, right.value, result_type)
        else:
            text = f"({left.value} {operator} {right.value})"
        return CudaValue(text, _c_and(left.valid, right.valid), result_type)

    return render


def _cuda_div(r: _CudaRenderer, node: exp.Div) -> CudaValue:
    left = r.render_as(node.this, SqlType.DOUBLE)
    right = r.render_as(node.expression, SqlType.DOUBLE)
    valid = _c_and(left.valid, right.valid, f"({right.value} != 0.0)")
    return CudaValue(f"({left.value} / {right.value})", valid, SqlType.DOUBLE)


def _cuda_mod(r: _CudaRenderer, node: exp.Mod) -> CudaValue:
    result_type = r.type_of(node)
    left = r.render_as(node.this, result_type)
    right = r.render_as(node.expression, result_type)
    a, b = left.value, right.value
    valid = _c_and(left.valid, right.valid, f"({b} != 0)")
    if result_type.is_integer:
        # x % -1 is 0; computing it would trap on INT_MIN % -1. x % 0 is NULL (valid above).
        zero = f"(({_c_ctype(result_type)})0)"
        text = f"(({b} == 0 || {b} == -1) ? {zero} : ({a} % {b}))"
    else:
        function = "fmodf" if result_type is SqlType.FLOAT else "fmod"
        text = f"{function}({a}, {b})"
    return CudaValue(text, valid, result_type)


def _cuda_neg(r: _CudaRenderer, node: exp.Neg) -> CudaValue:
    result_type = r.type_of(node)
    inner = unwrap_parens(node.this)
    if isinstance(inner, exp.Literal):
        return CudaValue(_c_number(-numeric_literal_value(inner), result_type), "true", result_type)
    operand = r.render_as(node.this, result_type)
    return CudaValue(_c_negate(operand.value, result_type), operand.valid, result_type)


def _c_negate(value: str, sql_type: SqlType) -> str:
    if sql_type.is_integer:
        return _c_wrapping("-", "0", value, sql_type)
    return f"(-{value})"


# --- comparisons ----------------------------------------------------------------------------


def _c_nan_equal(a: str, b: str) -> str:
    return f"(({a} == {b}) || (isnan({a}) && isnan({b})))"


def _c_nan_less(a: str, b: str) -> str:
    """Spark's order: NaN is larger than every number."""
    return f"(!isnan({a}) && (isnan({b}) || {a} < {b}))"


def _c_nan_less_equal(a: str, b: str) -> str:
    return f"(isnan({b}) || (!isnan({a}) && {a} <= {b}))"


# comparison -> (C operator, renderer with Spark's NaN order, swap operands)
_CUDA_COMPARISONS: dict[type[exp.Expression], tuple[str, Callable[[str, str], str], bool]] = {
    exp.EQ: ("==", _c_nan_equal, False),
    exp.LT: ("<", _c_nan_less, False),
    exp.LTE: ("<=", _c_nan_less_equal, False),
    exp.GT: ("<", _c_nan_less, True),
    exp.GTE: ("<=", _c_nan_less_equal, True),
}


def _cuda_string_operand(r: _CudaRenderer, node: exp.Expression) -> CudaValue:
    if is_string_literal(node):
        index = r.ctx.string_literal_index(unwrap_parens(node).this)
        return CudaValue(f"{STRING_LITERAL_IDS}[{index}]", "true", SqlType.STRING)
    return r.render_as(node, SqlType.STRING)


def _cuda_compare(
    r: _CudaRenderer,
    kind: type[exp.Expression],
    left: exp.Expression,
    right: exp.Expression,
    among: list[exp.Expression] | None = None,
) -> CudaValue:
    """`left <kind> right` for kind in EQ, NEQ, LT, LTE, GT, GTE, in the common type of
    `among` (IN: the value and every item) or of the two."""
    if kind is exp.NEQ:
        equal = _cuda_compare(r, exp.EQ, left, right, among)
        return CudaValue(_c_not(equal.value), equal.valid, SqlType.BOOLEAN)
    operand_type = comparison_type(r.annotation, among or [left, right])
    if operand_type is None:
        return r.null(SqlType.BOOLEAN)
    if operand_type is SqlType.STRING:
        if is_string_literal(left) and is_string_literal(right):
            same = unwrap_parens(left).this == unwrap_parens(right).this
            return CudaValue("true" if same else "false", "true", SqlType.BOOLEAN)
        a, b = _cuda_string_operand(r, left), _cuda_string_operand(r, right)
        return CudaValue(f"({a.value} == {b.value})", _c_and(a.valid, b.valid), SqlType.BOOLEAN)
    a, b = r.render_as(left, operand_type), r.render_as(right, operand_type)
    operator, nan_aware, swap = _CUDA_COMPARISONS[kind]
    x, y = (b.value, a.value) if swap else (a.value, b.value)
    text = nan_aware(x, y) if operand_type.is_floating else f"({x} {operator} {y})"
    return CudaValue(text, _c_and(a.valid, b.valid), SqlType.BOOLEAN)


def _cuda_comparison(r: _CudaRenderer, node: exp.Binary) -> CudaValue:
    return _cuda_compare(r, type(node), node.this, node.expression)


def _c_kleene_and(left: CudaValue, right: CudaValue) -> CudaValue:
    # FALSE wins over NULL: the result is known when both are known or either is false.
    left_false = _c_and(left.valid, _c_not(left.value))
    right_false = _c_and(right.valid, _c_not(right.value))
    valid = _c_or(_c_and(left.valid, right.valid), left_false, right_false)
    value = _c_and(left.valid, right.valid, left.value, right.value)
    return CudaValue(value, valid, SqlType.BOOLEAN)


def _c_kleene_or(left: CudaValue, right: CudaValue) -> CudaValue:
    # TRUE wins over NULL.
    left_true = _c_and(left.valid, left.value)
    right_true = _c_and(right.valid, right.value)
    valid = _c_or(_c_and(left.valid, right.valid), left_true, right_true)
    return CudaValue(_c_or(left_true, right_true), valid, SqlType.BOOLEAN)


def _cuda_between(r: _CudaRenderer, node: exp.Between) -> CudaValue:
    low = _cuda_compare(r, exp.GTE, node.this, node.args["low"])
    high = _cuda_compare(r, exp.LTE, node.this, node.args["high"])
    return _c_kleene_and(low, high)


def _cuda_in(r: _CudaRenderer, node: exp.In) -> CudaValue:
    result = None
    among = [node.this, *node.expressions]  # one type for all (Spark's IN)
    for item in node.expressions:
        matches = _cuda_compare(r, exp.EQ, node.this, item, among)  # node.this renders once
        result = matches if result is None else _c_kleene_or(r.share(result), matches)
    return result


def _cuda_is(r: _CudaRenderer, node: exp.Is) -> CudaValue:
    target = node.expression
    if isinstance(target, exp.Null):
        if is_string_literal(node.this):
            text = "false"
        elif r.type_of(node.this) is None:
            text = "true"
        else:
            text = _c_not(r.render(node.this).valid)
    else:  # IS TRUE / IS FALSE: never NULL
        operand = r.render_as(node.this, SqlType.BOOLEAN)
        truth = operand.value if target.this else _c_not(operand.value)
        text = _c_and(operand.valid, truth)
    if node.args.get("negate"):
        text = _c_not(text)
    return CudaValue(text, "true", SqlType.BOOLEAN)


# --- logic ----------------------------------------------------------------------------------


def _cuda_and(r: _CudaRenderer, node: exp.And) -> CudaValue:
    left = r.render_as(node.this, SqlType.BOOLEAN)
    return _c_kleene_and(left, r.render_as(node.expression, SqlType.BOOLEAN))


def _cuda_or(r: _CudaRenderer, node: exp.Or) -> CudaValue:
    left = r.render_as(node.this, SqlType.BOOLEAN)
    return _c_kleene_or(left, r.render_as(node.expression, SqlType.BOOLEAN))


def _cuda_not(r: _CudaRenderer, node: exp.Not) -> CudaValue:
    operand = r.render_as(node.this, SqlType.BOOLEAN)
    return CudaValue(_c_not(operand.value), operand.valid, SqlType.BOOLEAN)


# --- conditionals ---------------------------------------------------------------------------


def _cuda_case(r: _CudaRenderer, node: exp.Expression) -> CudaValue:
    result_type = r.type_of(node) or SqlType.BOOLEAN
    pairs, default = case_branches(node)
    operand = node.args.get("this") if isinstance(node, exp.Case) else None
    result = r.null(result_type) if default is None else r.render_as(default, result_type)
    for condition, value in reversed(pairs):
        if operand is not None:
            test = _cuda_compare(r, exp.EQ, operand, condition)
        else:
            test = r.render_as(condition, SqlType.BOOLEAN)
        taken = _c_and(test.valid, test.value)  # a NULL condition is not taken
        branch = r.render_as(value, result_type)
        result = r.share(result)
        result = CudaValue(
            _c_select(taken, branch.value, result.value),
            _c_select(taken, branch.valid, result.valid),
            result_type,
        )
    return result


def _cuda_coalesce(r: _CudaRenderer, node: exp.Coalesce) -> CudaValue:
    result_type = r.type_of(node) or SqlType.BOOLEAN
    values = [r.render_as(operand, result_type) for operand in variadic_operands(node)]
    result = values[-1]
    for value in reversed(values[:-1]):
        result = r.share(result)
        result = CudaValue(
            _c_select(value.valid, value.value, result.value),
            _c_or(value.valid, result.valid),
            result_type,
        )
    return result


def _cuda_greatest_or_least(greatest: bool) -> Callable:
    def render(r: _CudaRenderer, node: exp.Func) -> CudaValue:
        result_type = r.type_of(node) or SqlType.BOOLEAN
        operands = [r.render_as(operand, result_type) for operand in variadic_operands(node)]
        best = operands[0]
        for candidate in operands[1:]:
            best = r.share(best)
            low, high = (best.value, candidate.value)
            if not greatest:
                low, high = high, low
            better = _c_nan_less(low, high) if result_type.is_floating else f"({low} < {high})"
            # NULLs are skipped: take the candidate when nothing is held yet.
            take = _c_or(_c_not(best.valid), _c_and(candidate.valid, better))
            best = CudaValue(
                _c_select(take, candidate.value, best.value),
                _c_or(best.valid, candidate.valid),
                result_type,
            )
        return best

    return render


# --- casts and functions --------------------------------------------------------------------


def _cuda_cast_node(r: _CudaRenderer, node: exp.Cast) -> CudaValue:
    timestamp = timestamp_literal_value(node)
    if timestamp is not None:  # microseconds since the epoch, an int64 like any TIMESTAMP
        return CudaValue(_c_number(timestamp, SqlType.BIGINT), "true", SqlType.TIMESTAMP)
    return r.render_as(node.this, cast_target(node))


def _cuda_abs(r: _CudaRenderer, node: exp.Abs) -> CudaValue:
    result_type = r.type_of(node)
    operand = r.render_as(node.this, result_type)
    v = operand.value
    if result_type.is_integer:
        text = f"({v} < 0 ? {_c_negate(v, result_type)} : {v})"
    else:
        text = f"{'fabsf' if result_type is SqlType.FLOAT else 'fabs'}({v})"
    return CudaValue(text, operand.valid, result_type)


def _cuda_double_function(function: str) -> Callable:
    def render(r: _CudaRenderer, node: exp.Func) -> CudaValue:
        operand = r.render_as(node.this, SqlType.DOUBLE)
        return CudaValue(f"{function}({operand.value})", operand.valid, SqlType.DOUBLE)

    return render


def _cuda_ln(r: _CudaRenderer, node: exp.Ln) -> CudaValue:
    operand = r.render_as(node.this, SqlType.DOUBLE)
    # NULL for x <= 0; NaN stays NaN (NaN <= 0 is false).
    valid = _c_and(operand.valid, f"(!({operand.value} <= 0.0))")
    return CudaValue(f"log({operand.value})", valid, SqlType.DOUBLE)


def _cuda_log(r: _CudaRenderer, node: exp.Log) -> CudaValue:
    if node.expression is None:  # LOG(x) is LN(x), as in Spark
        return _cuda_ln(r, node)
    x = r.render_as(node.expression, SqlType.DOUBLE)
    if log_base_is_ten(node):
        valid = _c_and(x.valid, f"(!({x.value} <= 0.0))")
        return CudaValue(f"log10({x.value})", valid, SqlType.DOUBLE)
    base = r.render_as(node.this, SqlType.DOUBLE)
    valid = _c_and(base.valid, x.valid, f"(!({base.value} <= 0.0))", f"(!({x.value} <= 0.0))")
    return CudaValue(f"(log({x.value}) / log({base.value}))", valid, SqlType.DOUBLE)


def _cuda_pow(r: _CudaRenderer, node: exp.Pow) -> CudaValue:
    base = r.render_as(node.this, SqlType.DOUBLE)
    exponent = r.render_as(node.expression, SqlType.DOUBLE)
    b, e = base.value, exponent.value
    # Java: NaN exponent -> NaN, and (+-1) ** (+-Infinity) -> NaN; C gives 1 for both.
    java_nan = f"(isnan({e}) || (fabs({b}) == 1.0 && isinf({e})))"
    text = f"({java_nan} ? {_C_NAN} : pow({b}, {e}))"
    return CudaValue(text, _c_and(base.valid, exponent.valid), SqlType.DOUBLE)


def _cuda_floor_or_ceil(intrinsic: str) -> Callable:
    def render(r: _CudaRenderer, node: exp.Func) -> CudaValue:
        source = r.type_of(node.this)
        if source is None:
            return r.null(SqlType.BIGINT)
        operand = r.render(node.this)
        if source.is_integer:
            return _c_convert(operand, SqlType.BIGINT)
        # cvt.rmi/rpi round down/up and saturate, as Java's (long)Math.floor does.
        text = _c_double_to_integer(intrinsic, _c_double(operand), SqlType.BIGINT)
        return CudaValue(text, operand.valid, SqlType.BIGINT)

    return render


def _cuda_round(r: _CudaRenderer, node: exp.Round) -> CudaValue:
    result_type = r.type_of(node)
    if result_type is None:
        return r.null(SqlType.BOOLEAN)
    operand = r.render(node.this)
    scale = round_scale(node)
    if result_type.is_floating:
        x = _c_double(operand)
        if scale == 0:
            text = f"round({x})"
        else:
            factor = _c_number(10.0 ** abs(scale), SqlType.DOUBLE)
            scaled = f"({x} * {factor})" if scale > 0 else f"({x} / {factor})"
            back = "/" if scale > 0 else "*"
            # From 2**52 on every double is an integer: keep x (also Infinity and NaN).
            limit = _c_number(DOUBLE_INTEGRAL_FROM, SqlType.DOUBLE)
            text = f"(fabs({scaled}) >= {limit} ? {x} : (round({scaled}) {back} {factor}))"
        return _c_convert(CudaValue(text, operand.valid, SqlType.DOUBLE), result_type)
    if scale >= 0:
        return operand
    step = 10**-scale
    if step > INTEGER_RANGE[result_type][1]:
        return CudaValue(f"(({_c_ctype(result_type)})0)", operand.valid, result_type)
    x, p = operand.value, _c_number(step, result_type)
    remainder = f"({x} % {p})"
    magnitude = f"({remainder} < 0 ? -{remainder} : {remainder})"
    quotient = f"({x} / {p})"
    away = f"({quotient} + ({x} < 0 ? -1 : 1))"
    rounded = f"({magnitude} >= {p} - {magnitude} ? {away} : {quotient})"
    return CudaValue(_c_wrapping("*", rounded, p, result_type), operand.valid, result_type)


def _cuda_sign(r: _CudaRenderer, node: exp.Sign) -> CudaValue:
    operand = r.render_as(node.this, SqlType.DOUBLE)
    v = operand.value
    return CudaValue(f"({v} > 0.0 ? 1.0 : ({v} < 0.0 ? -1.0 : {v}))", operand.valid, SqlType.DOUBLE)


CudaOp = Callable[[_CudaRenderer, exp.Expression], CudaValue]

CUDA_OPS: dict[type[exp.Expression], CudaOp] = {
    exp.Column: _cuda_column,
    nodes.WindowBound: _cuda_window_bound,
    nodes.AggregateRef: _cuda_aggregate_ref,
    exp.Literal: _cuda_literal,
    exp.Boolean: _cuda_boolean,
    exp.Null: _cuda_null,
    exp.Paren: _cuda_paren,
    exp.Add: _cuda_arithmetic("+"),
    exp.Sub: _cuda_arithmetic("-"),
    exp.Mul: _cuda_arithmetic("*"),
    exp.Mod: _cuda_mod,
    exp.Div: _cuda_div,
    exp.Neg: _cuda_neg,
    exp.EQ: _cuda_comparison,
    exp.NEQ: _cuda_comparison,
    exp.LT: _cuda_comparison,
    exp.LTE: _cuda_comparison,
    exp.GT: _cuda_comparison,
    exp.GTE: _cuda_comparison,
    exp.And: _cuda_and,
    exp.Or: _cuda_or,
    exp.Not: _cuda_not,
    exp.Is: _cuda_is,
    exp.Between: _cuda_between,
    exp.In: _cuda_in,
    exp.Case: _cuda_case,
    exp.If: _cuda_case,
    exp.Coalesce: _cuda_coalesce,
    exp.Cast: _cuda_cast_node,
    exp.TryCast: _cuda_cast_node,
    exp.Abs: _cuda_abs,
    exp.Sqrt: _cuda_double_function("sqrt"),
    exp.Ln: _cuda_ln,
    exp.Log: _cuda_log,
    exp.Exp: _cuda_double_function("exp"),
    exp.Pow: _cuda_pow,
    exp.Floor: _cuda_floor_or_ceil("__double2ll_rd"),
    exp.Ceil: _cuda_floor_or_ceil("__double2ll_ru"),
    exp.Round: _cuda_round,
    exp.Greatest: _cuda_greatest_or_least(greatest=True),
    exp.Least: _cuda_greatest_or_least(greatest=False),
    exp.Sign: _cuda_sign,
}
