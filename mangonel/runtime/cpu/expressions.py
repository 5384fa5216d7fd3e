"""Scalar expressions evaluated on the host CPU with pyarrow.compute over whole columns.

The semantics (Spark's, non-ANSI) and the helpers shared with the CUDA renderer are in
`mangonel.compiler.expressions`; `CPU_OPS` covers exactly the node classes of
`mangonel.compiler.cuda_expressions.CUDA_OPS` and `mangonel.compiler.typing.TYPE_RULES` (a test
checks the three key sets are equal).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from mangonel.catalog.types import TYPE_INFO, SqlType
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
# CPU: pyarrow.compute over whole columns.


def evaluate(
    expr: exp.Expression,
    env: TypeEnv,
    columns: Mapping[str, pa.Array],
    *,
    aggregates: Sequence[pa.Array] = (),
    window_bounds: Mapping[str, pa.Array] | None = None,
    length: int,
) -> pa.Array:
    """Evaluate `expr` over `length` rows; an array of the inferred type's Arrow type.

    `columns` maps resolved column names to arrays (STRING columns may be string or dictionary
    arrays); `aggregates[i]` holds AggregateRef(i); `window_bounds` maps "start"/"end" to
    TIMESTAMP arrays. Literals are broadcast to `length` rows.
    """
    annotation = annotate_types(expr, env)
    renderer = _CpuRenderer(annotation, columns, aggregates, window_bounds or {}, length)
    result_type = annotation.root_type
    result = renderer.render(expr)
    if result_type is SqlType.STRING:
        result = _decode_strings(result)
    arrow_type = TYPE_INFO[result_type].arrow
    if result.type != arrow_type:
        result = result.cast(arrow_type)
    return result


class _CpuRenderer:
    def __init__(
        self,
        annotation: TypeAnnotation,
        columns: Mapping[str, pa.Array],
        aggregates: Sequence[pa.Array],
        window_bounds: Mapping[str, pa.Array],
        length: int,
    ) -> None:
        self.annotation = annotation
        self.columns = columns
        self.aggregates = aggregates
        self.window_bounds = window_bounds
        self.length = length
        # Node (by identity) -> its array. IN, BETWEEN and CASE x WHEN read their first
        # operand once per comparison; evaluating it each time would make nested ones
        # exponential in their depth.
        self.rendered: dict[int, pa.Array] = {}

    def type_of(self, node: exp.Expression) -> SqlType | None:
        return self.annotation.type_of(node)

    def render(self, node: exp.Expression) -> pa.Array:
        result = self.rendered.get(id(node))
        if result is not None:
            return result
        result = CPU_OPS[type(node)](self, node)
        node_type = self.type_of(node)
        if node_type is not None and node_type is not SqlType.STRING:
            # Every value travels as its type's one Arrow type, so integer kernels wrap at
            # the type's width; a kernel that widened its output is narrowed back here.
            arrow_type = TYPE_INFO[node_type].arrow
            if result.type != arrow_type:
                result = result.cast(arrow_type, safe=False)
        self.rendered[id(node)] = result
        return result

    def render_as(self, node: exp.Expression, to_type: SqlType | None) -> pa.Array:
        """Render `node` and convert it to `to_type` (implicit widening, or a typed NULL)."""
        node_type = self.type_of(node)
        if node_type is None or to_type is None:
            return self.nulls(to_type)
        return _cpu_cast(self.render(node), node_type, to_type)

    def nulls(self, sql_type: SqlType | None) -> pa.Array:
        arrow_type = TYPE_INFO[sql_type or SqlType.BOOLEAN].arrow
        return pa.nulls(self.length, arrow_type)

    def constant(self, value: object, sql_type: SqlType) -> pa.Array:
        return pa.repeat(pa.scalar(value, TYPE_INFO[sql_type].arrow), self.length)

    def input_array(self, array: pa.Array | pa.ChunkedArray, sql_type: SqlType) -> pa.Array:
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        if len(array) != self.length:
            raise ValueError(f"input array has {len(array)} rows, expected {self.length}")
        if sql_type is SqlType.STRING:
            return array  # string, large_string or dictionary: the comparisons handle each
        arrow_type = TYPE_INFO[sql_type].arrow
        return array if array.type == arrow_type else array.cast(arrow_type)


def _decode_strings(array: pa.Array) -> pa.Array:
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    return array if array.type == pa.string() else array.cast(pa.string())


def _null_scalar(sql_type: SqlType) -> pa.Scalar:
    return pa.scalar(None, TYPE_INFO[sql_type].arrow)


def _cpu_float_to_integer(values: pa.Array, to_type: SqlType) -> pa.Array:
    """Java's (int)/(long) of a double: toward zero after `values` were rounded, saturating,
    NaN -> 0."""
    low, high = INTEGER_RANGE[to_type]
    doubles = pc.trunc(values.cast(pa.float64()))
    doubles = pc.if_else(pc.is_nan(doubles), 0.0, doubles)
    # The largest double below 2**63 is 2**63 - 1024; 2**31 - 1 is exact.
    highest_exact = float(high) if to_type is SqlType.INT else float(2**63 - 1024)
    clipped = pc.min_element_wise(
        pc.max_element_wise(doubles, float(low), skip_nulls=False),
        highest_exact,
        skip_nulls=False,
    )
    converted = clipped.cast(TYPE_INFO[to_type].arrow, safe=False)
    too_big = pc.greater(doubles, highest_exact)
    return pc.if_else(too_big, pa.scalar(high, TYPE_INFO[to_type].arrow), converted)


def _cpu_cast(values: pa.Array, from_type: SqlType, to_type: SqlType) -> pa.Array:
    """CAST semantics (also used for implicit widening, where every case is exact or IEEE)."""
    if from_type is to_type:
        return values
    if values.null_count == len(values):
        return pa.nulls(len(values), TYPE_INFO[to_type].arrow)
    if to_type is SqlType.BOOLEAN:
        return pc.not_equal(values, pa.scalar(0, values.type))
    if from_type.is_floating and to_type.is_integer:
        return _cpu_float_to_integer(values, to_type)
    return values.cast(TYPE_INFO[to_type].arrow, safe=False)


# --- leaves ---------------------------------------------------------------------------------


def _cpu_column(r: _CpuRenderer, node: exp.Column) -> pa.Array:
    if node.name not in r.columns:
        raise ExpressionError("no data for this column", node=node)
    return r.input_array(r.columns[node.name], r.type_of(node))


def _cpu_window_bound(r: _CpuRenderer, node: nodes.WindowBound) -> pa.Array:
    if node.reads not in r.window_bounds:
        raise ExpressionError(f"window_{node.bound} is not available here", node=node)
    array = r.input_array(r.window_bounds[node.reads], SqlType.TIMESTAMP)
    if node.offset_us:  # window_time: window bounds never wrap (conform.event_time_range)
        array = pc.add(array, pa.scalar(node.offset_us, pa.duration("us")))
    return array


def _cpu_aggregate_ref(r: _CpuRenderer, node: nodes.AggregateRef) -> pa.Array:
    index = aggregate_index(node)
    if index >= len(r.aggregates):
        raise ExpressionError(f"no values for aggregate number {index}", node=node)
    return r.input_array(r.aggregates[index], r.type_of(node))


def _cpu_literal(r: _CpuRenderer, node: exp.Literal) -> pa.Array:
    return r.constant(numeric_literal_value(node), r.type_of(node))


def _cpu_boolean(r: _CpuRenderer, node: exp.Boolean) -> pa.Array:
    return r.constant(bool(node.this), SqlType.BOOLEAN)


def _cpu_null(r: _CpuRenderer, node: exp.Null) -> pa.Array:
    return r.nulls(SqlType.BOOLEAN)


def _cpu_paren(r: _CpuRenderer, node: exp.Paren) -> pa.Array:
    return r.render(node.this)


# --- arithmetic -----------------------------------------------------------------------------


def _cpu_binary_operands(r: _CpuRenderer, node: exp.Binary, operand_type: SqlType | None):
    return r.render_as(node.this, operand_type), r.render_as(node.expression, operand_type)


def _cpu_arithmetic(function: Callable) -> Callable:
    def render(r: _CpuRenderer, node: exp.Binary) -> pa.Array:
        result_type = r.type_of(node)
        left, right = _cpu_binary_operands(r, node, result_type)
        return function(left, right)  # the non-checked kernels wrap integers around

    return render


def _cpu_div(r: _CpuRenderer, node: exp.Div) -> pa.Array:
    left, right = _cpu_binary_operands(r, node, SqlType.DOUBLE)
    by_zero = pc.equal(right, 0.0)
    return pc.if_else(by_zero, _null_scalar(SqlType.DOUBLE), pc.divide(left, right))


def _cpu_mod(r: _CpuRenderer, node: exp.Mod) -> pa.Array:
    result_type = r.type_of(node)
    left, right = _cpu_binary_operands(r, node, result_type)
    by_zero = pc.equal(right, pa.scalar(0, right.type))
    valid = pc.invert(pc.fill_null(pc.or_(by_zero, pc.is_null(left)), True))
    dividends = pc.fill_null(left, pa.scalar(0, left.type)).to_numpy(zero_copy_only=False)
    divisors = pc.fill_null(right, pa.scalar(1, right.type)).to_numpy(zero_copy_only=False)
    if result_type.is_integer:
        # x % 0 is NULL below; x % -1 is 0, and replacing -1 by 1 also spares INT_MIN % -1
        # from the hardware's overflow trap.
        divisors = np.where((divisors == 0) | (divisors == -1), 1, divisors)
        remainders = np.fmod(dividends, divisors)
    else:
        with np.errstate(invalid="ignore", divide="ignore"):
            remainders = np.fmod(dividends, divisors)
    mask = ~valid.to_numpy(zero_copy_only=False)
    return pa.array(remainders, type=TYPE_INFO[result_type].arrow, mask=mask)


def _cpu_neg(r: _CpuRenderer, node: exp.Neg) -> pa.Array:
    result_type = r.type_of(node)
    inner = unwrap_parens(node.this)
    if isinstance(inner, exp.Literal):
        return r.constant(-numeric_literal_value(inner), result_type)
    return pc.negate(r.render_as(node.this, result_type))


# --- comparisons ----------------------------------------------------------------------------


def _cpu_string_operand(r: _CpuRenderer, node: exp.Expression) -> str | pa.Array | None:
    """A string literal's text, a STRING array, or None for NULL."""
    if is_string_literal(node):
        return unwrap_parens(node).this
    if r.type_of(node) is None:
        return None
    return r.render(node)


def _cpu_string_equal(r: _CpuRenderer, left: exp.Expression, right: exp.Expression) -> pa.Array:
    left_value, right_value = _cpu_string_operand(r, left), _cpu_string_operand(r, right)
    if left_value is None or right_value is None:
        return r.nulls(SqlType.BOOLEAN)
    if isinstance(left_value, str) and isinstance(right_value, str):
        return r.constant(left_value == right_value, SqlType.BOOLEAN)
    if isinstance(left_value, str):
        left_value, right_value = right_value, left_value
    if isinstance(right_value, str):
        if pa.types.is_dictionary(left_value.type):
            # Compare the dictionary once, then gather by index.
            matches = pc.equal(left_value.dictionary, pa.scalar(right_value, pa.string()))
            return pc.take(matches, left_value.indices)
        return pc.equal(_decode_strings(left_value), pa.scalar(right_value, pa.string()))
    return pc.equal(_decode_strings(left_value), _decode_strings(right_value))


def _cpu_nan_equal(left: pa.Array, right: pa.Array) -> pa.Array:
    both_nan = pc.and_(pc.is_nan(left), pc.is_nan(right))
    return pc.or_(pc.equal(left, right), both_nan)


def _cpu_nan_less(left: pa.Array, right: pa.Array) -> pa.Array:
    """Spark's order: NaN is larger than every number."""
    less = pc.or_(pc.is_nan(right), pc.less(left, right))
    return pc.and_(pc.invert(pc.is_nan(left)), less)


def _cpu_nan_less_equal(left: pa.Array, right: pa.Array) -> pa.Array:
    less_equal = pc.and_(pc.invert(pc.is_nan(left)), pc.less_equal(left, right))
    return pc.or_(pc.is_nan(right), less_equal)


# comparison -> (plain kernel, kernel with Spark's NaN order, swap operands)
_CPU_COMPARISONS: dict[type[exp.Expression], tuple[Callable, Callable, bool]] = {
    exp.EQ: (pc.equal, _cpu_nan_equal, False),
    exp.LT: (pc.less, _cpu_nan_less, False),
    exp.LTE: (pc.less_equal, _cpu_nan_less_equal, False),
    exp.GT: (pc.less, _cpu_nan_less, True),
    exp.GTE: (pc.less_equal, _cpu_nan_less_equal, True),
}


def _cpu_compare(
    r: _CpuRenderer,
    kind: type[exp.Expression],
    left: exp.Expression,
    right: exp.Expression,
    among: list[exp.Expression] | None = None,
) -> pa.Array:
    """`left <kind> right` for kind in EQ, NEQ, LT, LTE, GT, GTE, in the common type of
    `among` (IN: the value and every item) or of the two."""
    if kind is exp.NEQ:
        return pc.invert(_cpu_compare(r, exp.EQ, left, right, among))
    operand_type = comparison_type(r.annotation, among or [left, right])
    if operand_type is None:
        return r.nulls(SqlType.BOOLEAN)
    if operand_type is SqlType.STRING:
        return _cpu_string_equal(r, left, right)
    plain, nan_aware, swap = _CPU_COMPARISONS[kind]
    left_values, right_values = r.render_as(left, operand_type), r.render_as(right, operand_type)
    if swap:
        left_values, right_values = right_values, left_values
    kernel = nan_aware if operand_type.is_floating else plain
    return kernel(left_values, right_values)


def _cpu_comparison(r: _CpuRenderer, node: exp.Binary) -> pa.Array:
    return _cpu_compare(r, type(node), node.this, node.expression)


def _cpu_between(r: _CpuRenderer, node: exp.Between) -> pa.Array:
    low = _cpu_compare(r, exp.GTE, node.this, node.args["low"])
    high = _cpu_compare(r, exp.LTE, node.this, node.args["high"])
    return pc.and_kleene(low, high)


def _cpu_in(r: _CpuRenderer, node: exp.In) -> pa.Array:
    result = None
    among = [node.this, *node.expressions]  # one type for all (Spark's IN)
    for item in node.expressions:
        matches = _cpu_compare(r, exp.EQ, node.this, item, among)
        result = matches if result is None else pc.or_kleene(result, matches)
    return result


def _cpu_is(r: _CpuRenderer, node: exp.Is) -> pa.Array:
    target = node.expression
    if isinstance(target, exp.Null):
        if is_string_literal(node.this):
            result = r.constant(False, SqlType.BOOLEAN)
        elif r.type_of(node.this) is None:
            result = r.constant(True, SqlType.BOOLEAN)
        else:
            result = pc.is_null(r.render(node.this))
    else:  # IS TRUE / IS FALSE: never NULL
        values = r.render_as(node.this, SqlType.BOOLEAN)
        if not target.this:
            values = pc.invert(values)
        result = pc.fill_null(values, False)
    return pc.invert(result) if node.args.get("negate") else result


# --- logic ----------------------------------------------------------------------------------


def _cpu_and(r: _CpuRenderer, node: exp.And) -> pa.Array:
    left, right = _cpu_binary_operands(r, node, SqlType.BOOLEAN)
    return pc.and_kleene(left, right)


def _cpu_or(r: _CpuRenderer, node: exp.Or) -> pa.Array:
    left, right = _cpu_binary_operands(r, node, SqlType.BOOLEAN)
    return pc.or_kleene(left, right)


def _cpu_not(r: _CpuRenderer, node: exp.Not) -> pa.Array:
    return pc.invert(r.render_as(node.this, SqlType.BOOLEAN))


# --- conditionals ---------------------------------------------------------------------------


def _cpu_case(r: _CpuRenderer, node: exp.Expression) -> pa.Array:
    result_type = r.type_of(node)
    pairs, default = case_branches(node)
    operand = node.args.get("this") if isinstance(node, exp.Case) else None
    result = r.nulls(result_type) if default is None else r.render_as(default, result_type)
    for condition, value in reversed(pairs):
        if operand is not None:
            taken = _cpu_compare(r, exp.EQ, operand, condition)
        else:
            taken = r.render_as(condition, SqlType.BOOLEAN)
        result = pc.if_else(pc.fill_null(taken, False), r.render_as(value, result_type), result)
    return result


def _cpu_coalesce(r: _CpuRenderer, node: exp.Coalesce) -> pa.Array:
    result_type = r.type_of(node)
    return pc.coalesce(*(r.render_as(operand, result_type) for operand in variadic_operands(node)))


def _cpu_greatest_or_least(greatest: bool) -> Callable:
    def render(r: _CpuRenderer, node: exp.Func) -> pa.Array:
        result_type = r.type_of(node)
        is_float = result_type is not None and result_type.is_floating
        operands = variadic_operands(node)
        best = r.render_as(operands[0], result_type)
        for operand in operands[1:]:
            candidate = r.render_as(operand, result_type)
            if is_float:
                better = (
                    _cpu_nan_less(best, candidate) if greatest else _cpu_nan_less(candidate, best)
                )
            else:
                better = pc.less(best, candidate) if greatest else pc.less(candidate, best)
            # NULLs are skipped: take the candidate when nothing is held yet.
            take = pc.or_(pc.is_null(best), pc.fill_null(better, False))
            best = pc.if_else(take, candidate, best)
        return best

    return render


# --- casts and functions --------------------------------------------------------------------


def _cpu_cast_node(r: _CpuRenderer, node: exp.Cast) -> pa.Array:
    timestamp = timestamp_literal_value(node)
    if timestamp is not None:
        return r.constant(timestamp, SqlType.TIMESTAMP)
    target = cast_target(node)
    source = r.type_of(node.this)
    if source is None:
        return r.nulls(target)
    return _cpu_cast(r.render(node.this), source, target)


def _cpu_abs(r: _CpuRenderer, node: exp.Abs) -> pa.Array:
    return pc.abs(r.render_as(node.this, r.type_of(node)))


def _cpu_double_function(function: Callable) -> Callable:
    def render(r: _CpuRenderer, node: exp.Func) -> pa.Array:
        return function(r.render_as(node.this, SqlType.DOUBLE))

    return render


def _cpu_ln(r: _CpuRenderer, node: exp.Ln) -> pa.Array:
    values = r.render_as(node.this, SqlType.DOUBLE)
    return pc.if_else(pc.less_equal(values, 0.0), _null_scalar(SqlType.DOUBLE), pc.ln(values))


def _cpu_log(r: _CpuRenderer, node: exp.Log) -> pa.Array:
    if node.expression is None:  # LOG(x) is LN(x), as in Spark
        return _cpu_ln(r, node)
    values = r.render_as(node.expression, SqlType.DOUBLE)
    if log_base_is_ten(node):
        logs = pc.log10(values)
        undefined = pc.less_equal(values, 0.0)
    else:
        bases = r.render_as(node.this, SqlType.DOUBLE)
        logs = pc.divide(pc.ln(values), pc.ln(bases))
        undefined = pc.or_(pc.less_equal(values, 0.0), pc.less_equal(bases, 0.0))
    return pc.if_else(undefined, _null_scalar(SqlType.DOUBLE), logs)


def _cpu_pow(r: _CpuRenderer, node: exp.Pow) -> pa.Array:
    bases = r.render_as(node.this, SqlType.DOUBLE)
    exponents = r.render_as(node.expression, SqlType.DOUBLE)
    # Java: NaN exponent -> NaN, and (+-1) ** (+-Infinity) -> NaN; C gives 1 for both.
    java_nan = pc.or_(
        pc.is_nan(exponents),
        pc.and_(pc.equal(pc.abs(bases), 1.0), pc.is_inf(exponents)),
    )
    return pc.if_else(java_nan, math.nan, pc.power(bases, exponents))


def _cpu_floor_or_ceil(rounding: Callable) -> Callable:
    def render(r: _CpuRenderer, node: exp.Func) -> pa.Array:
        source = r.type_of(node.this)
        if source is None:
            return r.nulls(SqlType.BIGINT)
        values = r.render(node.this)
        if source.is_integer:
            return _cpu_cast(values, source, SqlType.BIGINT)
        return _cpu_float_to_integer(rounding(values.cast(pa.float64())), SqlType.BIGINT)

    return render


def _cpu_round(r: _CpuRenderer, node: exp.Round) -> pa.Array:
    result_type = r.type_of(node)
    if result_type is None:
        return r.nulls(None)
    values = r.render(node.this)
    scale = round_scale(node)
    if result_type.is_floating:
        doubles = values.cast(pa.float64())
        factor = 10.0 ** abs(scale)
        if scale == 0:
            rounded = pc.round(doubles, round_mode="half_towards_infinity")
        else:
            if scale > 0:
                scaled = pc.multiply(doubles, factor)
            else:
                scaled = pc.divide(doubles, factor)
            rounded = pc.round(scaled, round_mode="half_towards_infinity")
            rounded = pc.divide(rounded, factor) if scale > 0 else pc.multiply(rounded, factor)
            # From 2**52 on every double is an integer: scaling back and forth could only
            # change x by rounding error, so x is kept (also Infinity and NaN).
            exact = pc.greater_equal(pc.abs(scaled), DOUBLE_INTEGRAL_FROM)
            rounded = pc.if_else(exact, doubles, rounded)
        return rounded.cast(TYPE_INFO[result_type].arrow, safe=False)
    if scale >= 0:
        return values
    step = 10**-scale
    if step > INTEGER_RANGE[result_type][1]:
        return pc.if_else(pc.is_null(values), _null_scalar(result_type), pa.scalar(0, values.type))
    step_scalar = pa.scalar(step, values.type)
    quotients = pc.divide(values, step_scalar)  # integer division truncates toward zero
    remainders = pc.abs(pc.subtract(values, pc.multiply(quotients, step_scalar)))
    away = pc.greater_equal(remainders, pc.subtract(step_scalar, remainders))
    signs = pc.if_else(
        pc.less(values, pa.scalar(0, values.type)),
        pa.scalar(-1, values.type),
        pa.scalar(1, values.type),
    )
    quotients = pc.if_else(away, pc.add(quotients, signs), quotients)
    return pc.multiply(quotients, step_scalar)


def _cpu_sign(r: _CpuRenderer, node: exp.Sign) -> pa.Array:
    values = r.render_as(node.this, SqlType.DOUBLE)
    negative = pc.if_else(pc.less(values, 0.0), -1.0, values)
    return pc.if_else(pc.greater(values, 0.0), 1.0, negative)


CpuOp = Callable[[_CpuRenderer, exp.Expression], pa.Array]

CPU_OPS: dict[type[exp.Expression], CpuOp] = {
    exp.Column: _cpu_column,
    nodes.WindowBound: _cpu_window_bound,
    nodes.AggregateRef: _cpu_aggregate_ref,
    exp.Literal: _cpu_literal,
    exp.Boolean: _cpu_boolean,
    exp.Null: _cpu_null,
    exp.Paren: _cpu_paren,
    exp.Add: _cpu_arithmetic(pc.add),
    exp.Sub: _cpu_arithmetic(pc.subtract),
    exp.Mul: _cpu_arithmetic(pc.multiply),
    exp.Mod: _cpu_mod,
    exp.Div: _cpu_div,
    exp.Neg: _cpu_neg,
    exp.EQ: _cpu_comparison,
    exp.NEQ: _cpu_comparison,
    exp.LT: _cpu_comparison,
    exp.LTE: _cpu_comparison,
    exp.GT: _cpu_comparison,
    exp.GTE: _cpu_comparison,
    exp.And: _cpu_and,
    exp.Or: _cpu_or,
    exp.Not: _cpu_not,
    exp.Is: _cpu_is,
    exp.Between: _cpu_between,
    exp.In: _cpu_in,
    exp.Case: _cpu_case,
    exp.If: _cpu_case,
    exp.Coalesce: _cpu_coalesce,
    exp.Cast: _cpu_cast_node,
    exp.TryCast: _cpu_cast_node,
    exp.Abs: _cpu_abs,
    exp.Sqrt: _cpu_double_function(pc.sqrt),
    exp.Ln: _cpu_ln,
    exp.Log: _cpu_log,
    exp.Exp: _cpu_double_function(pc.exp),
    exp.Pow: _cpu_pow,
    exp.Floor: _cpu_floor_or_ceil(pc.floor),
    exp.Ceil: _cpu_floor_or_ceil(pc.ceil),
    exp.Round: _cpu_round,
    exp.Greatest: _cpu_greatest_or_least(greatest=True),
    exp.Least: _cpu_greatest_or_least(greatest=False),
    exp.Sign: _cpu_sign,
}
