"""Scalar expressions -> vectorised CPU code (pyarrow.compute) and CUDA C.

Two renderers over the same node classes, each a lookup table (`CPU_OPS`, `CUDA_OPS`), as in
sqlglot's generator: a node class is supported when `mangonel.compiler.typing.TYPE_RULES`
types it and both tables render it (a test checks the three key sets are equal). Typing runs
first, so an expression either target cannot render fails in `infer_type`, for both alike.
Both renderers render each node once (IN, BETWEEN and CASE x WHEN reuse their first operand's
result), and the CUDA text is linear in the expression's size: long sub-expressions become
temporaries declared in `CudaContext.statements` (see the CUDA section below).

Semantics follow Spark in its default (non-ANSI) mode, since results are compared with Spark:

- SQL three-valued logic: AND/OR/NOT use Kleene logic; comparisons and arithmetic with a NULL
  operand are NULL; CASE/IF treat a NULL condition as false; GREATEST/LEAST skip NULLs
  (NULL only when every argument is NULL); COALESCE returns the first non-NULL argument.
- Integer +, -, *, unary - and ABS wrap around in two's complement (ABS(INT_MIN) = INT_MIN).
- `/` converts both operands to DOUBLE. Division and modulo by zero yield NULL, for integers
  and floats alike (Spark's behaviour, and a documented choice: a streaming query must not die
  on one bad row). `%` keeps the operand type and the dividend's sign (C fmod / Java %).
- Floating-point comparisons use Spark's NaN semantics: NaN = NaN is true and NaN is larger
  than every other value (also in GREATEST/LEAST); -0.0 = 0.0.
- SQRT of a negative number is NaN; LN, LOG10, LOG(x) (which is LN(x)) and LOG(b, x) of
  x <= 0 (or b <= 0) are NULL;
  LN(NaN) is NaN; EXP overflows to Infinity; POWER follows Java's Math.pow (POWER(x, NaN) and
  POWER(+-1, +-Infinity) are NaN, where C would give 1). LOG(10, x) and LOG10(x) both use
  log10 (sqlglot parses them alike), so LOG(10, 1000) = 3 exactly, as Spark's LOG10 gives.
- FLOOR and CEIL yield BIGINT; CAST from FLOAT/DOUBLE to INT/BIGINT truncates toward zero and
  saturates at the type's range, NaN -> 0 (Java's conversion); BIGINT -> INT keeps the low 32
  bits; numbers -> BOOLEAN is `x <> 0`; BOOLEAN -> numbers is 1/0.
- ROUND(x, d) rounds half away from zero (Spark's HALF_UP). On FLOAT/DOUBLE it scales by 10^d
  in binary floating point, so values whose decimal spelling ends exactly in 5 at digit d+1
  but whose binary value lies just below (ROUND(1.005, 2)) round down, where Spark, which
  rounds the shortest decimal spelling, rounds up. Integers with d < 0 round exactly; when
  10^-d exceeds the type's range the result is 0.
- SIGN yields DOUBLE (-1.0, 0.0 or 1.0; SIGN(-0.0) = -0.0; SIGN(NaN) = NaN).

STRING values exist only as columns and are only compared for (in)equality. On the CPU they
are Arrow strings or dictionary arrays; in CUDA they are int32 dictionary ids. A string
literal renders as `string_literal_ids[k]`, k its index in `CudaContext.string_literals`; the
runtime fills that device array from the host dictionary (-1 when absent, which equals no
id). Comparing two STRING columns compares their ids, so the runtime must encode both with one
dictionary. No column name and no literal text ever reaches the C source: columns render as
the C expressions codegen chose, numbers render from validated Python numbers only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from mangonel.catalog.types import TYPE_INFO, SqlType, common_numeric_type
from mangonel.compiler import nodes
from mangonel.compiler.typing import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
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

# Every double of magnitude >= 2**52 is an integer.
_DOUBLE_INTEGRAL_FROM = float(2**52)
_INTEGER_RANGE = {SqlType.INT: (INT32_MIN, INT32_MAX), SqlType.BIGINT: (INT64_MIN, INT64_MAX)}


def _log_base_is_ten(node: exp.Log) -> bool:
    base = unwrap_parens(node.this)
    return (
        isinstance(base, exp.Literal) and not base.is_string and numeric_literal_value(base) == 10
    )


def _comparison_type(annotation: TypeAnnotation, operands: Sequence[exp.Expression]):
    """The type operands of one comparison are converted to (None: all NULL)."""
    known = [t for t in (annotation.type_of(o) for o in operands) if t is not None]
    if not known:
        return None
    if all(t.is_numeric for t in known):
        result = known[0]
        for t in known[1:]:
            result = common_numeric_type(result, t)
        return result
    return known[0]


def _operands(node: exp.Expression) -> list[exp.Expression]:
    """The argument list of a variadic function (GREATEST, LEAST, COALESCE)."""
    return [node.this, *node.expressions]


def _case_branches(node: exp.Expression):
    """(condition or WHEN value, result) pairs and the ELSE result of CASE or IF."""
    if isinstance(node, exp.Case):
        pairs = [(branch.this, branch.args["true"]) for branch in node.args["ifs"]]
        return pairs, node.args.get("default")
    return [(node.this, node.args["true"])], node.args.get("false")


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
    low, high = _INTEGER_RANGE[to_type]
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
    if node.bound not in r.window_bounds:
        raise ExpressionError(f"window_{node.bound} is not available here", node=node)
    return r.input_array(r.window_bounds[node.bound], SqlType.TIMESTAMP)


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
    r: _CpuRenderer, kind: type[exp.Expression], left: exp.Expression, right: exp.Expression
) -> pa.Array:
    """`left <kind> right` for kind in EQ, NEQ, LT, LTE, GT, GTE."""
    if kind is exp.NEQ:
        return pc.invert(_cpu_compare(r, exp.EQ, left, right))
    operand_type = _comparison_type(r.annotation, [left, right])
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
    for item in node.expressions:
        matches = _cpu_compare(r, exp.EQ, node.this, item)
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
    pairs, default = _case_branches(node)
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
    return pc.coalesce(*(r.render_as(operand, result_type) for operand in _operands(node)))


def _cpu_greatest_or_least(greatest: bool) -> Callable:
    def render(r: _CpuRenderer, node: exp.Func) -> pa.Array:
        result_type = r.type_of(node)
        is_float = result_type is not None and result_type.is_floating
        operands = _operands(node)
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
    if _log_base_is_ten(node):
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
            exact = pc.greater_equal(pc.abs(scaled), _DOUBLE_INTEGRAL_FROM)
            rounded = pc.if_else(exact, doubles, rounded)
        return rounded.cast(TYPE_INFO[result_type].arrow, safe=False)
    if scale >= 0:
        return values
    step = 10**-scale
    if step > _INTEGER_RANGE[result_type][1]:
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
        low, high = _INTEGER_RANGE[sql_type]
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
    fragment = r.ctx.window_start if node.bound == "start" else r.ctx.window_end
    if fragment is None:
        raise ExpressionError(f"window_{node.bound} is not available here", node=node)
    return CudaValue(_c_input(fragment, "a window bound"), "true", SqlType.TIMESTAMP)


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
    r: _CudaRenderer, kind: type[exp.Expression], left: exp.Expression, right: exp.Expression
) -> CudaValue:
    """`left <kind> right` for kind in EQ, NEQ, LT, LTE, GT, GTE."""
    if kind is exp.NEQ:
        equal = _cuda_compare(r, exp.EQ, left, right)
        return CudaValue(_c_not(equal.value), equal.valid, SqlType.BOOLEAN)
    operand_type = _comparison_type(r.annotation, [left, right])
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
    for item in node.expressions:
        matches = _cuda_compare(r, exp.EQ, node.this, item)  # node.this renders once
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
    pairs, default = _case_branches(node)
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
    values = [r.render_as(operand, result_type) for operand in _operands(node)]
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
        operands = [r.render_as(operand, result_type) for operand in _operands(node)]
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
    if _log_base_is_ten(node):
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
            limit = _c_number(_DOUBLE_INTEGRAL_FROM, SqlType.DOUBLE)
            text = f"(fabs({scaled}) >= {limit} ? {x} : (round({scaled}) {back} {factor}))"
        return _c_convert(CudaValue(text, operand.valid, SqlType.DOUBLE), result_type)
    if scale >= 0:
        return operand
    step = 10**-scale
    if step > _INTEGER_RANGE[result_type][1]:
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
