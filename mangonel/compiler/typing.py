"""Type inference for scalar expressions and the aggregate-function name table.

Expressions are sqlglot expressions already resolved by the binder: columns are `exp.Column`
with one identifier holding the schema spelling, plus `nodes.WindowBound` (TIMESTAMP) and
`nodes.AggregateRef` (the type of aggregate number i, from `TypeEnv.aggregates`).

Typing is a lookup table (`TYPE_RULES`) over the same node classes both renderers
(`mangonel.runtime.cpu.expressions`, `mangonel.compiler.cuda_expressions`) handle, so an
expression one target cannot render fails here, for both targets alike. The rules follow
Spark (non-ANSI mode):

- numeric widening INT < BIGINT < FLOAT < DOUBLE (`catalog.types.common_numeric_type`);
- `/` always yields DOUBLE; SQRT, LN, LOG, LOG10, EXP, POWER and SIGN yield DOUBLE (LOG(x)
  with one argument is LN(x), as in Spark);
  FLOOR and CEIL yield BIGINT; ABS and ROUND keep their argument's type;
- integer literals are INT when they fit 32 bits, else BIGINT; decimal literals are DOUBLE;
- STRING values only come from columns, and are only compared for (in)equality, IN and
  IS [NOT] NULL, against string literals or other STRING columns (on the GPU a STRING is a
  dictionary id, which has no order and no text);
- TIMESTAMP values are only compared with TIMESTAMP values (columns, window bounds and
  literals `TIMESTAMP '2026-01-01 00:00:00'`, read as UTC); no arithmetic;
- NULL literals take the type their context asks for; an expression whose type is decided by
  NULLs alone is rejected (write `CAST(NULL AS <type>)`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sqlglot import exp

from mangonel import aggregates
from mangonel.catalog.types import (
    WINDOW_STRUCT,
    ResultType,
    SqlType,
    common_numeric_type,
    type_from_name,
)
from mangonel.compiler import nodes
from mangonel.compiler.limits import ensure_recursion_headroom
from mangonel.compiler.logical import AggregateFunction
from mangonel.compiler.timestamp_literals import (
    TIMESTAMP_FORMAT_HINT,
    TIMESTAMP_TYPES,
    timestamp_text_microseconds,
)
from mangonel.errors import MangonelError

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# ROUND(x, d): the scale d must be an integer literal in this range (10**30 overflows no double,
# and beyond it rounding cannot change any value of our types).
ROUND_SCALE_LIMIT = 30


@dataclass(frozen=True)
class TypeEnv:
    """What names mean while typing one expression.

    columns: exact resolved column name -> type; aggregates: type of AggregateRef(i).
    """

    columns: Mapping[str, SqlType]
    aggregates: tuple[ResultType, ...] = ()


class ExpressionError(MangonelError):
    """An expression mangonel cannot type or evaluate. `node` is the offending sqlglot node."""

    def __init__(self, message: str, *, node: exp.Expression | None, hint: str | None = None):
        self.node = node
        self.message = message
        self.hint = hint
        text = message
        if node is not None:
            text += f"\n  in: {_node_sql(node)}"
        if hint:
            text += f"\n  hint: {hint}"
        super().__init__(text)


def _node_sql(node: exp.Expression) -> str:
    try:
        return node.sql()
    except ValueError:  # a mangonel node (AggregateRef, ...) the default generator lacks
        return type(node).__name__


# Scalar functions, by the SQL names a user may write, and the sqlglot class each parses to.
_FUNCTION_CLASSES: dict[str, type[exp.Expression]] = {
    "ABS": exp.Abs,
    "CEIL": exp.Ceil,
    "CEILING": exp.Ceil,
    "COALESCE": exp.Coalesce,
    "EXP": exp.Exp,
    "FLOOR": exp.Floor,
    "GREATEST": exp.Greatest,
    "IF": exp.If,
    "LEAST": exp.Least,
    "LN": exp.Ln,
    "LOG": exp.Log,
    "LOG10": exp.Log,
    "POW": exp.Pow,
    "POWER": exp.Pow,
    "ROUND": exp.Round,
    "SIGN": exp.Sign,
    "SIGNUM": exp.Sign,
    "SQRT": exp.Sqrt,
}
SUPPORTED_FUNCTIONS: tuple[str, ...] = tuple(sorted(_FUNCTION_CLASSES))
_FUNCTIONS_HINT = "supported functions: " + ", ".join(SUPPORTED_FUNCTIONS)

# Aggregate functions: sqlglot class -> logical aggregate, and the names a query may use, both
# derived from the registry (`mangonel.aggregates`). COUNT(*) is exp.Count over exp.Star; the
# binder turns that into AggregateFunction.COUNT_STAR.
AGGREGATE_FUNCTIONS: dict[type[exp.Expression], AggregateFunction] = {
    cls: AggregateFunction[definition.key]
    for definition in aggregates.aggregates()
    for cls in definition.sqlglot_classes
}
AGGREGATE_FUNCTION_NAMES: tuple[str, ...] = tuple(
    sorted(name for definition in aggregates.aggregates() for name in definition.names)
)


def aggregate_result_type(
    function: AggregateFunction,
    argument_type: SqlType | None,
    *,
    node: exp.Expression | None = None,
) -> SqlType:
    """The type aggregate `function` over values of `argument_type` yields (Spark's rules,
    each function's `result_type`).

    `argument_type` is None only for COUNT(*). Raises ExpressionError for an argument the
    aggregate cannot take.
    """
    definition = function.definition
    result = definition.result_type(argument_type)
    if argument_type is None and result is None:
        raise ExpressionError(f"{function.value} needs an argument", node=node)
    if result is None:
        raise ExpressionError(
            f"{function.value} cannot take a {argument_type} argument",
            node=node,
            hint=f"{function.value} takes a {definition.accepts} argument; COUNT takes any type",
        )
    return result


# The type map of one expression: id(node) -> its type (None: a NULL whose type the context
# decides). Renderers look children's types up here instead of re-inferring them.
TypeMap = dict[int, "SqlType | None"]


def infer_type(expr: exp.Expression, env: TypeEnv) -> SqlType:
    """The type of `expr`. Raises ExpressionError on anything mangonel cannot evaluate."""
    return annotate_types(expr, env).root_type


@dataclass
class TypeAnnotation:
    """The types of every node of one expression (see TypeMap)."""

    root: exp.Expression
    types: TypeMap = field(default_factory=dict)

    @property
    def root_type(self) -> SqlType:
        root_type = self.types[id(self.root)]
        if root_type is None:
            raise ExpressionError(
                "the type of this expression is decided by NULLs alone",
                node=self.root,
                hint="write CAST(NULL AS <type>)",
            )
        return root_type

    def type_of(self, node: exp.Expression) -> SqlType | None:
        return self.types[id(node)]


def annotate_types(expr: exp.Expression, env: TypeEnv) -> TypeAnnotation:
    """Type every node of `expr`. Raises ExpressionError like infer_type."""
    ensure_recursion_headroom()  # typing and rendering recurse once or more per level
    annotation = TypeAnnotation(expr)
    _Typer(env, annotation.types, expr).infer(expr)
    annotation.root_type  # noqa: B018 - raises for an untyped NULL expression
    return annotation


# --------------------------------------------------------------------------------------------
# The typing rules, one per node class.


class _Typer:
    def __init__(self, env: TypeEnv, types: TypeMap, root: exp.Expression | None = None) -> None:
        self.env = env
        self.types = types
        self.root = root
        # Node (by identity) -> its inferred type. CASE x WHEN, IN and BETWEEN type x once per
        # comparison; inferring it again each time made nested ones exponential in depth.
        self.inferred: TypeMap = {}

    def infer(self, node: exp.Expression) -> SqlType | None:
        if id(node) in self.inferred:
            node_type = self.inferred[id(node)]
        else:
            rule = TYPE_RULES.get(type(node))
            if type(node) in RESULT_ONLY_TYPES:
                node_type = RESULT_ONLY_TYPES[type(node)]
            elif rule is None:
                raise _unsupported(node)
            else:
                node_type = rule(self, node)
            if node_type is not None and node_type.is_composite and not self._is_root(node):
                raise composite_operand_error(node, node_type)
            self.inferred[id(node)] = node_type
        self.types[id(node)] = node_type
        return node_type

    def _is_root(self, node: exp.Expression) -> bool:
        """Whether `node` is the typed expression itself (parentheses around it aside)."""
        while node is not self.root and isinstance(node.parent, exp.Paren):
            node = node.parent
        return node is self.root

    def record(self, node: exp.Expression, node_type: SqlType | None) -> None:
        self.types[id(node)] = node_type


# Nodes that are result columns only, typed but never rendered (no rule: the renderers
# cover TYPE_RULES): Spark's `window` struct, built by the Project driver from the bounds.
RESULT_ONLY_TYPES: dict[type, ResultType] = {nodes.WindowStruct: WINDOW_STRUCT}


def composite_operand_error(node: exp.Expression, node_type: ResultType) -> ExpressionError:
    """The error for an ARRAY or STRUCT result inside an expression: composite results are
    output as they are, never operands (`catalog.types`)."""
    return ExpressionError(
        f"{node.meta.get('sql') or _node_sql(node)} is an {node_type}: it can only be "
        "selected as it is",
        node=node,
        hint="select it as its own output column; ARRAY and STRUCT results are not computed "
        "with, compared or filtered on (HAVING)",
    )


def unsupported_function(node: exp.Expression) -> ExpressionError | None:
    """The error for a scalar function call mangonel cannot evaluate (an unknown name, or one
    sqlglot knows but no rule types), None for anything else. The binder asks this before it
    resolves the call's arguments, so the error names the function, not an argument."""
    if isinstance(node, exp.Func) and not isinstance(node, exp.AggFunc):
        if type(node) not in TYPE_RULES:
            return _unsupported(node)
    return None


def _unsupported(node: exp.Expression) -> ExpressionError:
    if isinstance(node, exp.Anonymous):
        return ExpressionError(
            f"unknown function {node.name.upper()}", node=node, hint=_FUNCTIONS_HINT
        )
    if isinstance(node, exp.AggFunc):
        return ExpressionError(
            f"aggregate function {node.sql_name()} cannot appear here",
            node=node,
            hint="aggregates go in the SELECT list or HAVING of a windowed GROUP BY query",
        )
    if isinstance(node, exp.Func):
        return ExpressionError(
            f"function {node.sql_name()} is not supported", node=node, hint=_FUNCTIONS_HINT
        )
    return ExpressionError(
        f"{type(node).__name__} expressions are not supported",
        node=node,
        hint="supported: arithmetic, comparisons, AND/OR/NOT, IS [NOT] NULL, BETWEEN, IN, "
        "CASE, CAST and the " + _FUNCTIONS_HINT,
    )


def unwrap_parens(node: exp.Expression) -> exp.Expression:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def is_string_literal(node: exp.Expression) -> bool:
    node = unwrap_parens(node)
    return isinstance(node, exp.Literal) and node.is_string


def numeric_literal_value(node: exp.Literal) -> int | float:
    """The Python number a numeric literal spells (validated: the only way numbers reach C)."""
    text = node.this
    if isinstance(text, str) and text.isascii() and text.isdigit():
        return int(text)
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ExpressionError(f"cannot read the number {text!r}", node=node) from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ExpressionError("numeric literal out of DOUBLE range", node=node)
    return value


def literal_type(value: int | float, node: exp.Expression) -> SqlType:
    if isinstance(value, float):
        return SqlType.DOUBLE
    if INT32_MIN <= value <= INT32_MAX:
        return SqlType.INT
    if INT64_MIN <= value <= INT64_MAX:
        return SqlType.BIGINT
    raise ExpressionError(
        "integer literal out of BIGINT range", node=node, hint="write it as a decimal (1.0E20)"
    )


def _describe(sql_type: SqlType | None) -> str:
    return "NULL" if sql_type is None else str(sql_type)


def _require(
    typer: _Typer, parent: exp.Expression, child: exp.Expression, allowed: str
) -> SqlType | None:
    """Infer `child` and check it is `allowed` ('numeric' | 'boolean'); NULL always passes."""
    child_type = typer.infer(child)
    if child_type is None:
        return None
    ok = child_type.is_numeric if allowed == "numeric" else child_type is SqlType.BOOLEAN
    if not ok:
        raise ExpressionError(
            f"{_operator_name(parent)} needs {allowed} operands, got {child_type}",
            node=parent,
        )
    return child_type


def _operator_name(node: exp.Expression) -> str:
    names = {
        exp.Add: "+",
        exp.Sub: "-",
        exp.Mul: "*",
        exp.Div: "/",
        exp.Mod: "%",
        exp.Neg: "unary -",
        exp.EQ: "=",
        exp.NEQ: "<>",
        exp.LT: "<",
        exp.LTE: "<=",
        exp.GT: ">",
        exp.GTE: ">=",
        exp.And: "AND",
        exp.Or: "OR",
        exp.Not: "NOT",
        exp.Between: "BETWEEN",
        exp.In: "IN",
        exp.Is: "IS",
    }
    if type(node) in names:
        return names[type(node)]
    if isinstance(node, exp.Func):
        return node.sql_name()
    return type(node).__name__.upper()


def _widen(types: list[SqlType | None]) -> SqlType | None:
    result: SqlType | None = None
    for t in types:
        if t is not None:
            result = t if result is None else common_numeric_type(result, t)
    return result


def common_type(
    typer: _Typer, parent: exp.Expression, children: list[exp.Expression], what: str
) -> SqlType | None:
    """The one type values of `children` are converted to (CASE branches, COALESCE, ...)."""
    child_types = [typer.infer(child) for child in children]
    known = {t for t in child_types if t is not None}
    if not known:
        return None
    if all(t.is_numeric for t in known):
        return _widen(child_types)
    if len(known) == 1 and next(iter(known)) in (SqlType.BOOLEAN, SqlType.TIMESTAMP):
        return next(iter(known))
    if SqlType.STRING in known:
        raise ExpressionError(
            f"{what} cannot yield STRING values",
            node=parent,
            hint="STRING values may only be compared with =, <>, IN and IS NULL",
        )
    raise ExpressionError(
        f"{what} mixes types " + ", ".join(sorted(str(t) for t in known)), node=parent
    )


def comparison_type(
    typer: _Typer, parent: exp.Expression, operands: list[exp.Expression], *, ordered: bool
) -> SqlType | None:
    """The type operands of a comparison are compared as; records string literals' type."""
    operand_types: list[SqlType | None] = []
    for operand in operands:
        if is_string_literal(operand):
            _record_string_literal(typer, operand)
            operand_types.append(SqlType.STRING)
        else:
            operand_types.append(typer.infer(operand))
    known = {t for t in operand_types if t is not None}
    if not known:
        return None
    if all(t.is_numeric for t in known):
        return _widen(operand_types)
    if len(known) == 1:
        (only,) = known
        if only is SqlType.STRING and ordered:
            raise ExpressionError(
                f"STRING values cannot be compared with {_operator_name(parent)}",
                node=parent,
                hint="STRING values may only be compared with =, <>, IN and IS NULL",
            )
        return only
    hint = "compare numbers with numbers, TIMESTAMP with TIMESTAMP, STRING with STRING"
    if known == {SqlType.TIMESTAMP, SqlType.STRING}:
        hint = "compare TIMESTAMP values with TIMESTAMP literals: " + TIMESTAMP_FORMAT_HINT
    raise ExpressionError(
        f"cannot compare {' with '.join(_describe(t) for t in operand_types)}",
        node=parent,
        hint=hint,
    )


def _record_string_literal(typer: _Typer, node: exp.Expression) -> None:
    while isinstance(node, exp.Paren):
        typer.record(node, SqlType.STRING)
        node = node.this
    typer.record(node, SqlType.STRING)


def _type_column(typer: _Typer, node: exp.Column) -> SqlType:
    name = node.name
    if name not in typer.env.columns:
        known = ", ".join(sorted(typer.env.columns)) or "(none)"
        raise ExpressionError(f"unknown column {name!r}", node=node, hint=f"columns: {known}")
    return typer.env.columns[name]


def _type_window_bound(typer: _Typer, node: nodes.WindowBound) -> SqlType:
    if node.bound not in nodes.WINDOW_BOUNDS:
        raise ExpressionError(f"unknown window bound {node.bound!r}", node=node)
    return SqlType.TIMESTAMP


def aggregate_index(node: nodes.AggregateRef) -> int:
    """The aggregate number of an AggregateRef, read from its args: sqlglot 30 keeps a node's
    position in its parent's list in an attribute also called `index`."""
    return int(node.args["this"])


def _type_aggregate_ref(typer: _Typer, node: nodes.AggregateRef) -> SqlType:
    index = aggregate_index(node)
    if not 0 <= index < len(typer.env.aggregates):
        raise ExpressionError(f"no aggregate number {index}", node=node)
    return typer.env.aggregates[index]


def _type_literal(typer: _Typer, node: exp.Literal) -> SqlType:
    if node.is_string:
        raise ExpressionError(
            "string literals may only be compared with STRING columns",
            node=node,
            hint="use them with =, <>, IN against a STRING column",
        )
    return literal_type(numeric_literal_value(node), node)


def _type_boolean(typer: _Typer, node: exp.Expression) -> SqlType:
    return SqlType.BOOLEAN


def _type_null(typer: _Typer, node: exp.Expression) -> None:
    return None


def _type_paren(typer: _Typer, node: exp.Paren) -> SqlType | None:
    return typer.infer(node.this)


def _type_arithmetic(typer: _Typer, node: exp.Binary) -> SqlType | None:
    left = _require(typer, node, node.this, "numeric")
    right = _require(typer, node, node.expression, "numeric")
    return _widen([left, right])


def _type_division(typer: _Typer, node: exp.Div) -> SqlType:
    _type_arithmetic(typer, node)
    return SqlType.DOUBLE


def _type_negation(typer: _Typer, node: exp.Neg) -> SqlType | None:
    inner = unwrap_parens(node.this)
    if isinstance(inner, exp.Literal) and not inner.is_string:
        # -2147483648 is an INT, as in Spark: type the negated value, not the literal.
        negated_type = literal_type(-numeric_literal_value(inner), node)
        _record_literal_chain(typer, node.this, negated_type)
        return negated_type
    return _require(typer, node, node.this, "numeric")


def _record_literal_chain(typer: _Typer, node: exp.Expression, node_type: SqlType) -> None:
    while isinstance(node, exp.Paren):
        typer.record(node, node_type)
        node = node.this
    typer.record(node, node_type)


def _type_comparison(typer: _Typer, node: exp.Binary) -> SqlType:
    ordered = not isinstance(node, (exp.EQ, exp.NEQ))
    comparison_type(typer, node, [node.this, node.expression], ordered=ordered)
    return SqlType.BOOLEAN


def _type_logical(typer: _Typer, node: exp.Expression) -> SqlType:
    for child in (node.this, node.args.get("expression")):
        if child is not None:
            _require(typer, node, child, "boolean")
    return SqlType.BOOLEAN


def _type_is(typer: _Typer, node: exp.Is) -> SqlType:
    target = node.expression
    if isinstance(target, exp.Null):
        if is_string_literal(node.this):
            _record_string_literal(typer, node.this)
        else:
            typer.infer(node.this)
    elif isinstance(target, exp.Boolean):
        _require(typer, node, node.this, "boolean")
    else:
        raise ExpressionError(
            "IS must be followed by NULL, TRUE or FALSE", node=node, hint="use = to compare"
        )
    typer.record(target, SqlType.BOOLEAN if isinstance(target, exp.Boolean) else None)
    return SqlType.BOOLEAN


def _type_between(typer: _Typer, node: exp.Between) -> SqlType:
    comparison_type(typer, node, [node.this, node.args["low"], node.args["high"]], ordered=True)
    return SqlType.BOOLEAN


def _type_in(typer: _Typer, node: exp.In) -> SqlType:
    if any(node.args.get(arg) for arg in ("query", "unnest", "field")):
        raise ExpressionError(
            "IN takes a list of literals here", node=node, hint="write x IN (1, 2, 3)"
        )
    items = node.expressions
    if not items:
        raise ExpressionError("IN needs at least one value", node=node)
    for item in items:
        if not is_literal(item):
            raise ExpressionError(
                "IN takes a list of literals here", node=item, hint="write x IN (1, 2, 3)"
            )
    comparison_type(typer, node, [node.this, *items], ordered=False)
    return SqlType.BOOLEAN


def is_literal(node: exp.Expression) -> bool:
    """A literal value: number, string, TRUE/FALSE, NULL, or a negated number."""
    node = unwrap_parens(node)
    if isinstance(node, exp.Neg):
        inner = unwrap_parens(node.this)
        return isinstance(inner, exp.Literal) and not inner.is_string
    return isinstance(node, (exp.Literal, exp.Boolean, exp.Null))


def _type_case(typer: _Typer, node: exp.Case) -> SqlType | None:
    operand = node.args.get("this")
    for branch in node.args["ifs"]:
        if operand is not None:
            # CASE x WHEN v THEN ...: each WHEN compares x = v.
            comparison_type(typer, node, [operand, branch.this], ordered=False)
        else:
            _require(typer, node, branch.this, "boolean")
    results = [branch.args["true"] for branch in node.args["ifs"]]
    if node.args.get("default") is not None:
        results.append(node.args["default"])
    result = common_type(typer, node, results, "CASE")
    for branch in node.args["ifs"]:
        typer.record(branch, result)
    return result


def _type_if(typer: _Typer, node: exp.If) -> SqlType | None:
    # IF(cond, x): Spark refuses it (a CASE's branches, IFs without `false`, are typed by
    # _type_case)
    if node.args.get("false") is None:
        raise ExpressionError(
            "IF takes three arguments: IF(condition, value, otherwise)",
            node=node,
            hint="CASE WHEN condition THEN value END is NULL where the condition does not hold",
        )
    _require(typer, node, node.this, "boolean")
    return common_type(typer, node, [node.args["true"], node.args["false"]], "IF")


def _type_coalesce(typer: _Typer, node: exp.Coalesce) -> SqlType | None:
    return common_type(typer, node, [node.this, *node.expressions], "COALESCE")


def _type_greatest_least(typer: _Typer, node: exp.Func) -> SqlType | None:
    arguments = [node.this, *node.expressions]
    result = common_type(typer, node, arguments, node.sql_name())
    return result


def timestamp_literal_value(node: exp.Expression) -> int | None:
    """Microseconds since the epoch of `TIMESTAMP '<text>'` (sqlglot reads it, and
    `CAST('<text>' AS TIMESTAMP)`, as a Cast of a string literal), or None when `node` is not
    one. The session time zone is UTC, so a text without a zone is UTC (Spark with
    spark.sql.session.timeZone=UTC). Raises ExpressionError for a text that is no timestamp."""
    if not isinstance(node, (exp.Cast, exp.TryCast)) or not is_string_literal(node.this):
        return None
    to = node.to
    if not isinstance(to, exp.DataType) or to.this not in TIMESTAMP_TYPES:
        return None
    text = unwrap_parens(node.this).this
    try:
        return timestamp_text_microseconds(text)
    except ValueError:
        raise ExpressionError(
            f"cannot read the TIMESTAMP {text!r}", node=node, hint=TIMESTAMP_FORMAT_HINT
        ) from None


def cast_target(node: exp.Cast) -> SqlType:
    to = node.to
    target = type_from_name(to.this.name) if isinstance(to, exp.DataType) else None
    if target is None or (to.expressions and target is not SqlType.STRING):
        raise ExpressionError(
            f"cannot CAST to {to.sql()}",
            node=node,
            hint="CAST converts between INT, BIGINT, FLOAT, DOUBLE and BOOLEAN",
        )
    return target


def _type_cast(typer: _Typer, node: exp.Cast) -> SqlType:
    if timestamp_literal_value(node) is not None:  # TIMESTAMP '2026-01-01 00:00:00'
        _record_literal_chain(typer, node.this, SqlType.TIMESTAMP)
        return SqlType.TIMESTAMP
    target = cast_target(node)
    source = typer.infer(node.this)
    if source is None or source is target:
        return target
    castable = {SqlType.INT, SqlType.BIGINT, SqlType.FLOAT, SqlType.DOUBLE, SqlType.BOOLEAN}
    if source not in castable or target not in castable:
        raise ExpressionError(
            f"cannot CAST {source} to {target}",
            node=node,
            hint="CAST converts between INT, BIGINT, FLOAT, DOUBLE and BOOLEAN",
        )
    return target


def _type_same_numeric(typer: _Typer, node: exp.Func) -> SqlType | None:
    return _require(typer, node, node.this, "numeric")


def _type_double_function(typer: _Typer, node: exp.Func) -> SqlType:
    for arg in ("this", "expression"):
        if node.args.get(arg) is not None:
            _require(typer, node, node.args[arg], "numeric")
    return SqlType.DOUBLE


def _type_log(typer: _Typer, node: exp.Log) -> SqlType:
    # LOG(b, x), or LOG(x), which Spark reads as LN(x)
    return _type_double_function(typer, node)


def _type_floor_ceil(typer: _Typer, node: exp.Func) -> SqlType:
    if node.args.get("decimals") is not None or node.args.get("to") is not None:
        raise ExpressionError(
            f"{node.sql_name()} takes one argument here", node=node, hint="use ROUND(x, d)"
        )
    _require(typer, node, node.this, "numeric")
    return SqlType.BIGINT


def round_scale(node: exp.Round) -> int:
    """The literal scale d of ROUND(x, d) (0 when absent), validated."""
    decimals = node.args.get("decimals")
    if decimals is None:
        return 0
    inner = unwrap_parens(decimals)
    sign = 1
    if isinstance(inner, exp.Neg):
        sign, inner = -1, unwrap_parens(inner.this)
    value = None
    if isinstance(inner, exp.Literal) and not inner.is_string:
        value = numeric_literal_value(inner)
    if not isinstance(value, int) or value > ROUND_SCALE_LIMIT:
        raise ExpressionError(
            "ROUND's scale must be an integer literal",
            node=node,
            hint=f"write ROUND(x, d) with -{ROUND_SCALE_LIMIT} <= d <= {ROUND_SCALE_LIMIT}",
        )
    return sign * value


def _type_round(typer: _Typer, node: exp.Round) -> SqlType | None:
    if node.args.get("truncate"):
        raise ExpressionError("ROUND takes (x) or (x, d)", node=node)
    round_scale(node)
    decimals = node.args.get("decimals")
    if decimals is not None:
        _record_literal_chain(typer, decimals, SqlType.INT)
    return _require(typer, node, node.this, "numeric")


def _type_sign(typer: _Typer, node: exp.Sign) -> SqlType:
    _require(typer, node, node.this, "numeric")
    return SqlType.DOUBLE


TypeRule = Callable[[_Typer, exp.Expression], "SqlType | None"]

TYPE_RULES: dict[type[exp.Expression], TypeRule] = {
    exp.Column: _type_column,
    nodes.WindowBound: _type_window_bound,
    nodes.AggregateRef: _type_aggregate_ref,
    exp.Literal: _type_literal,
    exp.Boolean: _type_boolean,
    exp.Null: _type_null,
    exp.Paren: _type_paren,
    exp.Add: _type_arithmetic,
    exp.Sub: _type_arithmetic,
    exp.Mul: _type_arithmetic,
    exp.Mod: _type_arithmetic,
    exp.Div: _type_division,
    exp.Neg: _type_negation,
    exp.EQ: _type_comparison,
    exp.NEQ: _type_comparison,
    exp.LT: _type_comparison,
    exp.LTE: _type_comparison,
    exp.GT: _type_comparison,
    exp.GTE: _type_comparison,
    exp.And: _type_logical,
    exp.Or: _type_logical,
    exp.Not: _type_logical,
    exp.Is: _type_is,
    exp.Between: _type_between,
    exp.In: _type_in,
    exp.Case: _type_case,
    exp.If: _type_if,
    exp.Coalesce: _type_coalesce,
    exp.Cast: _type_cast,
    exp.TryCast: _type_cast,
    exp.Abs: _type_same_numeric,
    exp.Sqrt: _type_double_function,
    exp.Ln: _type_double_function,
    exp.Log: _type_log,
    exp.Exp: _type_double_function,
    exp.Pow: _type_double_function,
    exp.Floor: _type_floor_ceil,
    exp.Ceil: _type_floor_ceil,
    exp.Round: _type_round,
    exp.Greatest: _type_greatest_least,
    exp.Least: _type_greatest_least,
    exp.Sign: _type_sign,
}
