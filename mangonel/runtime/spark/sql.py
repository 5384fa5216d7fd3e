"""Spark SQL text of plan expressions: the one place mangonel writes expressions for Spark.

Every expression mangonel hands to Spark (WHERE, aggregate arguments and the aggregate calls of
stage 1 and of the native plan, HAVING and SELECT of the native plan) is rendered here, so that
it gives mangonel's standalone results (Spark's non-ANSI semantics, `compiler.expressions`)
whatever `spark.sql.ansi.enabled` says (Spark 4 turns it on by default; mangonel never changes
the user's session). Under ANSI a single bad row would raise and kill the whole streaming
query, so no generated form can raise:

- `a / b` -> `try_divide(a, b)`, `a % b` -> `try_mod(a, b)`: NULL when b = 0;
- a number written with a decimal point (`0.1`) gets the `D` suffix: a DOUBLE, as mangonel
  types it, where Spark would read a DECIMAL;
- CAST of INT/BIGINT to FLOAT is wrapped in a no-op `nanvl`, which Spark's optimizer cannot
  fold away inside a cast to DOUBLE (it did: the FLOAT rounding was lost), and an integer
  operand of an operation mangonel computes in FLOAT gets that cast explicitly (under ANSI
  Spark widens FLOAT and an integer to DOUBLE); `CASE x WHEN v` is written `CASE WHEN x = v`
  and a BETWEEN over a FLOAT and an integer `(x >= low AND x <= high)` so that the rule
  reaches each comparison;
- integer `+`, `-`, `*`, unary `-`, ABS and ROUND to a negative scale wrap around in two's
  complement: INT operands are computed exactly in BIGINT and the low 32 bits kept
  (`shiftleft`/`shiftright` never raise); BIGINT operands are computed exactly in
  DECIMAL(38, 0) and reduced modulo 2^64;
- CAST of FLOAT/DOUBLE to INT/BIGINT truncates and saturates at the type's range, NaN -> 0
  (Java's conversion, Spark's non-ANSI cast), and so do FLOOR and CEIL of FLOAT/DOUBLE (to
  BIGINT); CAST of BIGINT to INT keeps the low 32 bits;
  TRY_CAST is rendered the same way (mangonel gives it CAST's semantics on every path);
- `SUM` of an integer argument wraps around like standalone (Spark's non-ANSI sum of longs)
  instead of failing on overflow: it is summed as two halves that cannot overflow (the high
  32 bits and the low 32 bits of each value) and recombined with shifts. Exact as long as one
  (window, key) has fewer than 2^31 rows. (Aggregate spellings, this one included, are each
  function's `spark` face in `mangonel.aggregates.builtin`.)

Nodes are typed with the same rules the compiler uses (`compiler.typing.annotate_types`), and
the renderer is sqlglot's Spark generator with the raising node forms overridden.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from sqlglot import exp
from sqlglot.dialects.spark import Spark

from mangonel.catalog.types import SqlType
from mangonel.compiler import physical as ph
from mangonel.compiler.nodes import AggregateRef, WindowBound, WindowStruct
from mangonel.compiler.typing import TypeEnv, annotate_types, round_scale

_FLOATING = (SqlType.FLOAT, SqlType.DOUBLE)
_INTEGER_MAX = {SqlType.INT: 2**31 - 1, SqlType.BIGINT: 2**63 - 1}


def wrap_int(bigint_sql: str) -> str:
    """The low 32 bits of a BIGINT as a (sign-extended) INT: never raises."""
    return f"CAST(shiftright(shiftleft({bigint_sql}, 32), 32) AS INT)"


def wrap_bigint(decimal_sql: str) -> str:
    """An exact integer DECIMAL reduced modulo 2^64 into BIGINT's range: never raises while the
    value fits DECIMAL(38, 0) (a product of two BIGINTs does)."""
    return (
        f"CAST(pmod({decimal_sql} + 9223372036854775808, 18446744073709551616) "
        "- 9223372036854775808 AS BIGINT)"
    )


def _saturating(value: str, to_type: SqlType, converted: str | None = None) -> str:
    """Java's double -> int/long conversion of `value` (truncate, saturate at the range,
    NaN -> 0); `converted` is the Spark conversion used inside the range (default: CAST)."""
    spark_type = to_type.info.spark
    value = f"({value})"  # compared below: keep a low-precedence child in one piece
    if to_type is SqlType.BIGINT:
        high, low = "9.223372036854775807E18", "-9.223372036854775808E18"
        high_value, low_value = "9223372036854775807L", "(-9223372036854775807L - 1L)"
    else:
        high, low = "2.147483647E9", "-2.147483648E9"
        high_value, low_value = "2147483647", "(-2147483647 - 1)"
    return (
        f"CASE WHEN isnan({value}) THEN CAST(0 AS {spark_type}) "
        f"WHEN {value} >= {high} THEN CAST({high_value} AS {spark_type}) "
        f"WHEN {value} <= {low} THEN CAST({low_value} AS {spark_type}) "
        f"ELSE {converted or f'CAST({value} AS {spark_type})'} END"
    )


class _NonRaisingSpark(Spark.Generator):  # type: ignore[misc,name-defined]
    """Spark's generator with every ANSI-raising form mangonel supports made total."""

    # sqlglot dispatches through TRANSFORMS before `<key>_sql` methods: name every override
    TRANSFORMS = {
        **Spark.Generator.TRANSFORMS,
        exp.Add: lambda self, e: self.add_sql(e),
        exp.Sub: lambda self, e: self.sub_sql(e),
        exp.Mul: lambda self, e: self.mul_sql(e),
        exp.Div: lambda self, e: self.div_sql(e),
        exp.Mod: lambda self, e: self.mod_sql(e),
        exp.Neg: lambda self, e: self.neg_sql(e),
        exp.Abs: lambda self, e: self.abs_sql(e),
        exp.Round: lambda self, e: self.round_sql(e),
        exp.Floor: lambda self, e: self.floor_or_ceil_sql(e, "FLOOR"),
        exp.Ceil: lambda self, e: self.floor_or_ceil_sql(e, "CEIL"),
        exp.Cast: lambda self, e: self.cast_sql(e),
        exp.TryCast: lambda self, e: self.trycast_sql(e),
        exp.Literal: lambda self, e: self.literal_sql(e),
        WindowBound: lambda self, e: self.resolved_sql(e),
        AggregateRef: lambda self, e: self.resolved_sql(e),
        WindowStruct: lambda self, e: self.resolved_sql(e),
    }

    def __init__(
        self,
        types: Mapping[int, SqlType | None],
        names: Callable[[exp.Expression], str] | None,
    ) -> None:
        super().__init__(dialect=Spark())
        self._types = types
        self._names = names

    def literal_sql(self, expression: exp.Literal) -> str:
        """A number written with a decimal point is a DOUBLE in mangonel (`compiler.typing`)
        and a DECIMAL in Spark: with the `D` suffix Spark reads it as mangonel does (else
        `i * 0.1 = 0.7` held inside Spark for i = 7 and not standalone)."""
        text = expression.this or ""
        if expression.is_number and not expression.is_int and "e" not in text.lower():
            return f"{text}D"
        return super().literal_sql(expression)

    def _type(self, node: exp.Expression) -> SqlType | None:
        return self._types.get(id(node))

    def _integer_arithmetic(self, node: exp.Binary, operator: str) -> str | None:
        result = self._type(node)
        if result not in (SqlType.INT, SqlType.BIGINT):
            return None
        left, right = self.sql(node, "this"), self.sql(node, "expression")
        if result is SqlType.INT:
            return wrap_int(f"(CAST({left} AS BIGINT) {operator} CAST({right} AS BIGINT))")
        return wrap_bigint(
            f"(CAST({left} AS DECIMAL(20, 0)) {operator} CAST({right} AS DECIMAL(20, 0)))"
        )

    def add_sql(self, expression: exp.Add) -> str:
        return self._integer_arithmetic(expression, "+") or super().add_sql(expression)

    def sub_sql(self, expression: exp.Sub) -> str:
        return self._integer_arithmetic(expression, "-") or super().sub_sql(expression)

    def mul_sql(self, expression: exp.Mul) -> str:
        return self._integer_arithmetic(expression, "*") or super().mul_sql(expression)

    def div_sql(self, expression: exp.Div) -> str:
        left, right = self.sql(expression, "this"), self.sql(expression, "expression")
        return f"try_divide({left}, {right})"

    def mod_sql(self, expression: exp.Mod) -> str:
        left, right = self.sql(expression, "this"), self.sql(expression, "expression")
        return f"try_mod({left}, {right})"

    def neg_sql(self, expression: exp.Neg) -> str:
        result = self._type(expression)
        if isinstance(expression.this, exp.Literal):
            return super().neg_sql(expression)  # a negative literal cannot overflow
        if result is SqlType.INT:
            return wrap_int(f"(0 - CAST({self.sql(expression, 'this')} AS BIGINT))")
        if result is SqlType.BIGINT:
            return wrap_bigint(f"(0 - CAST({self.sql(expression, 'this')} AS DECIMAL(20, 0)))")
        return super().neg_sql(expression)

    def abs_sql(self, expression: exp.Abs) -> str:
        result = self._type(expression)
        if result is SqlType.INT:
            return wrap_int(f"abs(CAST({self.sql(expression, 'this')} AS BIGINT))")
        if result is SqlType.BIGINT:
            return wrap_bigint(f"abs(CAST({self.sql(expression, 'this')} AS DECIMAL(20, 0)))")
        return self.func("ABS", expression.this)

    def floor_or_ceil_sql(self, expression: exp.Func, name: str) -> str:
        # BIGINT of a FLOAT/DOUBLE: Spark's conversion raises out of range under ANSI; inside
        # (-2^63, 2^63) FLOOR/CEIL of a double cannot leave BIGINT's range
        if self._type(expression.this) in _FLOATING:
            value = self.sql(expression, "this")
            return _saturating(value, SqlType.BIGINT, f"{name}({value})")
        return self.func(name, expression.this)

    def round_sql(self, expression: exp.Round) -> str:
        result = self._type(expression)
        scale = round_scale(expression)
        if result not in (SqlType.INT, SqlType.BIGINT) or scale >= 0:
            return self.func("ROUND", expression.this, expression.args.get("decimals"))
        value = self.sql(expression, "this")
        if 10**-scale > _INTEGER_MAX[result]:
            return f"(({value}) * 0)"  # compiler.expressions' rule: every value rounds to 0
        # rounded exactly in a wider type, then wrapped (Spark's non-ANSI intValue/longValue)
        if result is SqlType.INT:
            return wrap_int(f"ROUND(CAST({value} AS BIGINT), {scale})")
        return wrap_bigint(f"ROUND(CAST({value} AS DECIMAL(20, 0)), {scale})")

    def _numeric_cast(self, expression: exp.Cast) -> str | None:
        target, source = self._type(expression), self._type(expression.this)
        if source in _FLOATING and target in (SqlType.INT, SqlType.BIGINT):
            return _saturating(self.sql(expression, "this"), target)
        if source is SqlType.BIGINT and target is SqlType.INT:
            return wrap_int(self.sql(expression, "this"))
        if source in (SqlType.INT, SqlType.BIGINT) and target is SqlType.FLOAT:
            # Spark's optimizer (SimplifyCasts) drops an integer's cast to FLOAT inside a
            # cast to DOUBLE as a widening, so `CAST(i AS FLOAT) + d` skipped the FLOAT
            # rounding (2147483647 stayed exact): nanvl, a no-op on a number, keeps it
            return f"nanvl(CAST({self.sql(expression, 'this')} AS FLOAT), CAST('NaN' AS FLOAT))"
        return None

    def cast_sql(self, expression: exp.Cast, safe_prefix: str | None = None) -> str:
        return self._numeric_cast(expression) or super().cast_sql(expression, safe_prefix)

    def trycast_sql(self, expression: exp.TryCast) -> str:
        # mangonel gives TRY_CAST CAST's (non-ANSI) semantics on every path
        if (rendered := self._numeric_cast(expression)) is not None:
            return rendered
        return super().cast_sql(expression)

    def resolved_sql(self, expression: exp.Expression) -> str:
        """A window bound or aggregate reference: the column that holds it."""
        if self._names is None:
            raise ValueError("window bounds and aggregate results only exist after stage 2")
        return self._names(expression)


# operations whose numeric operands are converted to one type before they are combined
_SHARED_OPERAND_TYPE = (
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Mod,
    exp.EQ,
    exp.NEQ,
    exp.LT,
    exp.LTE,
    exp.GT,
    exp.GTE,
    exp.NullSafeEQ,
    exp.Greatest,
    exp.Least,
    exp.Coalesce,
    exp.Between,
    exp.In,
    exp.If,
    exp.Case,
)


def _operands(node: exp.Expression) -> list[exp.Expression]:
    """The operands `node` converts to one type (a CASE's and an IF's results)."""
    if isinstance(node, exp.If):  # a CASE's branch (no `false`) is the CASE's operand
        otherwise = node.args.get("false")
        return [node.args["true"], otherwise] if otherwise is not None else []
    if isinstance(node, exp.Case):
        results = [branch.args["true"] for branch in node.args["ifs"]]
        return results + ([node.args["default"]] if node.args.get("default") else [])
    if isinstance(node, exp.Between):
        return [node.this, node.args["low"], node.args["high"]]
    found = [node.this, node.args.get("expression"), *node.args.get("expressions", [])]
    return [operand for operand in found if isinstance(operand, exp.Expression)]


def _searched_cases(expression: exp.Expression) -> exp.Expression:
    """`expression` with each `CASE x WHEN v THEN ...` written `CASE WHEN x = v THEN ...`:
    mangonel compares x with each v on its own (as `x = v`), and an equality is where the
    FLOAT rule below can reach an integer operand (x is shared by every WHEN, so it could not
    be cast for one of them). x is repeated; expressions have no side effects. Innermost
    first: a CASE inside x is rewritten before x is copied into each WHEN."""
    for case in reversed(list(expression.find_all(exp.Case))):
        subject = case.args.get("this")
        if subject is None:
            continue
        for branch in case.args["ifs"]:
            branch.set("this", exp.EQ(this=subject.copy(), expression=branch.this))
        case.set("this", None)
    return expression


_INTEGERS = frozenset({SqlType.INT, SqlType.BIGINT})


def _float_with_integer(kinds: set[SqlType | None]) -> bool:
    """Do operands of these types hold a FLOAT and an integer (where the FLOAT rule may
    apply)?"""
    return SqlType.FLOAT in kinds and bool(kinds & _INTEGERS)


def _bounds_apart(
    expression: exp.Expression, types: Mapping[int, SqlType | None]
) -> exp.Expression | None:
    """`expression` with each `x BETWEEN low AND high` over a FLOAT and an integer written
    `(x >= low AND x <= high)`, or None where there is none. x meets each bound on its own
    (standalone and in Spark's own rewrite of BETWEEN), so the FLOAT rule below must reach each
    comparison apart: as one group, a DOUBLE bound kept an integer bound from its FLOAT cast
    (found by the random predicates, seed 306461054)."""
    found = False
    # innermost first (descendants after ancestors breadth-first): one inside an x is
    # rewritten before x is copied
    for node in reversed(list(expression.find_all(exp.Between))):
        kinds = {types.get(id(operand)) for operand in _operands(node)}
        if not _float_with_integer(kinds):
            continue
        subject, low, high = node.this, node.args["low"], node.args["high"]
        apart = exp.And(
            this=exp.GTE(this=subject.copy(), expression=low),
            expression=exp.LTE(this=subject, expression=high),
        )
        grouped = exp.Paren(this=apart)
        if node is expression:
            expression = grouped
        else:
            node.replace(grouped)
        found = True
    return expression if found else None


def _integers_as_float(
    expression: exp.Expression, env: TypeEnv
) -> tuple[exp.Expression, Mapping[int, SqlType | None]]:
    """`expression` (a copy) with an explicit CAST to FLOAT on each integer operand of an
    operation mangonel computes in FLOAT (a FLOAT with an INT or BIGINT, no DOUBLE), and its
    nodes' types: under ANSI (Spark 4's default) Spark widens FLOAT and an integer to
    DOUBLE, so `CAST(x AS FLOAT) % i` kept i exact inside Spark and rounded it standalone."""
    expression = _searched_cases(expression.copy())
    types = dict(annotate_types(expression, env).types)
    apart = _bounds_apart(expression, types)
    if apart is not None:  # no casts yet: the tree types again
        expression = apart
        types = dict(annotate_types(expression, env).types)
    for node in reversed(list(expression.walk())):  # operands before their operation
        if not isinstance(node, _SHARED_OPERAND_TYPE):
            continue
        operands = _operands(node)
        kinds = {types.get(id(operand)) for operand in operands}
        if not _float_with_integer(kinds) or SqlType.DOUBLE in kinds:
            continue
        for operand in operands:
            if types.get(id(operand)) in _INTEGERS:
                # the operand itself moves under the cast (its type stays known); typing the
                # tree again would refuse a cast literal in an IN list
                cast = exp.Cast(to=exp.DataType.build("FLOAT"))
                operand.replace(cast)
                cast.set("this", operand)
                types[id(cast)] = SqlType.FLOAT
    return expression, types


def _render(
    expression: exp.Expression,
    env: TypeEnv,
    names: Callable[[exp.Expression], str] | None = None,
) -> str:
    expression, types = _integers_as_float(expression, env)
    return _NonRaisingSpark(types, names).generate(expression, copy=False)


def _lift_env(scan: ph.StreamScanExec) -> TypeEnv:
    return TypeEnv(columns={column.name: column.type for column in scan.columns})


def lift_sql(expression: exp.Expression, scan: ph.StreamScanExec) -> str:
    """Spark SQL of a lift-side expression (WHERE, aggregate arguments) over the stream."""
    return _render(expression, _lift_env(scan))


def output_sql(
    expression: exp.Expression,
    window: ph.WindowAggregateExec,
    names: Callable[[exp.Expression], str],
) -> str:
    """Spark SQL of a HAVING or SELECT expression (over keys, window bounds and aggregate
    results); `names` gives the column that holds a window bound or an aggregate result."""
    env = TypeEnv(
        columns=_lift_env(window.lift.scan).columns,  # key columns keep their names
        aggregates=tuple(plan.result_type for plan in window.aggregates),
    )
    return _render(expression, env, names)


def aggregate_sql(plan: ph.AggregatePlan, scan: ph.StreamScanExec) -> str:
    """Spark SQL of one aggregate call (Spark's own aggregation, the native plan): the
    function's Spark spelling (`mangonel.aggregates`) over its argument as Spark SQL."""
    definition = plan.function.definition
    argument = lift_sql(plan.argument, scan) if plan.argument is not None else ""
    return definition.spark_sql(argument, plan.result_type)
