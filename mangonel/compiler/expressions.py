"""Scalar expressions: their semantics, and what the CPU evaluator and the CUDA renderer share.

Two renderers over the same node classes, each a lookup table, as in sqlglot's generator:
`mangonel.runtime.cpu.expressions.CPU_OPS` evaluates with pyarrow.compute over whole columns
(execution, so it lives in the runtime) and `mangonel.compiler.cuda_expressions.CUDA_OPS`
renders CUDA C (source text for codegen). This module holds the semantics both follow and the
operand helpers both use; a node class is supported when `mangonel.compiler.typing.TYPE_RULES`
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

from collections.abc import Sequence

from sqlglot import exp

from mangonel.catalog.types import SqlType, common_numeric_type
from mangonel.compiler.typing import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    TypeAnnotation,
    numeric_literal_value,
    unwrap_parens,
)

# Every double of magnitude >= 2**52 is an integer.
DOUBLE_INTEGRAL_FROM = float(2**52)
INTEGER_RANGE = {SqlType.INT: (INT32_MIN, INT32_MAX), SqlType.BIGINT: (INT64_MIN, INT64_MAX)}


def log_base_is_ten(node: exp.Log) -> bool:
    base = unwrap_parens(node.this)
    return (
        isinstance(base, exp.Literal) and not base.is_string and numeric_literal_value(base) == 10
    )


def comparison_type(annotation: TypeAnnotation, operands: Sequence[exp.Expression]):
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


def variadic_operands(node: exp.Expression) -> list[exp.Expression]:
    """The argument list of a variadic function (GREATEST, LEAST, COALESCE)."""
    return [node.this, *node.expressions]


def case_branches(node: exp.Expression):
    """(condition or WHEN value, result) pairs and the ELSE result of CASE or IF."""
    if isinstance(node, exp.Case):
        pairs = [(branch.this, branch.args["true"]) for branch in node.args["ifs"]]
        return pairs, node.args.get("default")
    return [(node.this, node.args["true"])], node.args.get("false")
