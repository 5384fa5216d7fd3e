"""The SQL types mangonel supports and their one map to Arrow, NumPy, CUDA C and Spark.

Every other module asks this table; no second copy of the mapping exists.

Scalar types (`SqlType`) are what streams, tables, keys, expressions and aggregate arguments
hold. Two composite types exist only as query results (`ResultType`), never as inputs, keys
or operands: `ArrayType` (`ARRAY<DOUBLE>`: a percentile over an array of p, one element per
p) and `StructType` (`STRUCT<start: TIMESTAMP, end: TIMESTAMP>`: Spark's `window` and
`session_window` columns). Both answer the scalar type's questions (`is_numeric` ... are
False, `is_composite` True), print as Spark prints them, and map to Arrow's list and struct
and to Spark's ArrayType and StructType DDL.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np
import pyarrow as pa


class SqlType(enum.Enum):
    TIMESTAMP = "TIMESTAMP"
    BIGINT = "BIGINT"
    INT = "INT"
    DOUBLE = "DOUBLE"
    FLOAT = "FLOAT"
    STRING = "STRING"
    BOOLEAN = "BOOLEAN"

    @property
    def info(self) -> TypeInfo:
        return TYPE_INFO[self]

    @property
    def is_integer(self) -> bool:
        return self in (SqlType.BIGINT, SqlType.INT)

    @property
    def is_floating(self) -> bool:
        return self in (SqlType.DOUBLE, SqlType.FLOAT)

    @property
    def is_numeric(self) -> bool:
        return self.is_integer or self.is_floating

    @property
    def is_composite(self) -> bool:
        """Whether values hold other values (ARRAY, STRUCT): never a scalar type."""
        return False

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class TypeInfo:
    arrow: pa.DataType
    numpy: np.dtype  # the in-memory element type of a column on CPU and GPU
    cuda: str  # the CUDA C type of one element; STRING travels as int32 dictionary ids
    spark: str  # Spark SQL DDL name
    size: int  # bytes per element on the wire to the device


TYPE_INFO: dict[SqlType, TypeInfo] = {
    SqlType.TIMESTAMP: TypeInfo(
        pa.timestamp("us", tz="UTC"), np.dtype("int64"), "long long", "TIMESTAMP", 8
    ),
    SqlType.BIGINT: TypeInfo(pa.int64(), np.dtype("int64"), "long long", "BIGINT", 8),
    SqlType.INT: TypeInfo(pa.int32(), np.dtype("int32"), "int", "INT", 4),
    SqlType.DOUBLE: TypeInfo(pa.float64(), np.dtype("float64"), "double", "DOUBLE", 8),
    SqlType.FLOAT: TypeInfo(pa.float32(), np.dtype("float32"), "float", "FLOAT", 4),
    SqlType.STRING: TypeInfo(pa.string(), np.dtype("int32"), "int", "STRING", 4),
    SqlType.BOOLEAN: TypeInfo(pa.bool_(), np.dtype("bool"), "bool", "BOOLEAN", 1),
}


class _CompositeType:
    """What ArrayType and StructType share: a scalar type's questions, all answered no."""

    is_integer = False
    is_floating = False
    is_numeric = False
    is_composite = True

    @property
    def value(self) -> str:
        return str(self)


@dataclass(frozen=True)
class ArrayType(_CompositeType):
    """`ARRAY<element>`: a list of scalar values, none NULL (a NULL result is a NULL array)."""

    element: SqlType

    @property
    def info(self) -> TypeInfo:
        element = self.element.info
        # elements are never NULL (Spark's containsNull = false for the percentile arrays)
        arrow = pa.list_(pa.field("element", element.arrow, nullable=False))
        return TypeInfo(arrow, np.dtype(object), "", f"ARRAY<{element.spark}>", 0)

    def __str__(self) -> str:
        return f"ARRAY<{self.element}>"


@dataclass(frozen=True)
class StructType(_CompositeType):
    """`STRUCT<name: type, ...>`: named scalar fields, none NULL."""

    fields: tuple[tuple[str, SqlType], ...]

    @property
    def info(self) -> TypeInfo:
        arrow = pa.struct([pa.field(name, t.info.arrow, nullable=False) for name, t in self.fields])
        spark = ", ".join(f"`{name}`: {t.info.spark}" for name, t in self.fields)
        return TypeInfo(arrow, np.dtype(object), "", f"STRUCT<{spark}>", 0)

    def __str__(self) -> str:
        return "STRUCT<" + ", ".join(f"{name}: {t}" for name, t in self.fields) + ">"


# What a query's result columns may be: a scalar, or a composite (never an input's type).
ResultType = SqlType | ArrayType | StructType

# Spark's `window` / `session_window` column: the window's bounds.
WINDOW_STRUCT = StructType((("start", SqlType.TIMESTAMP), ("end", SqlType.TIMESTAMP)))


# Spellings accepted in DDL and CAST, mapped to the canonical type.
TYPE_NAMES: dict[str, SqlType] = {
    "TIMESTAMP": SqlType.TIMESTAMP,
    "TIMESTAMP_LTZ": SqlType.TIMESTAMP,
    "BIGINT": SqlType.BIGINT,
    "LONG": SqlType.BIGINT,
    "INT": SqlType.INT,
    "INTEGER": SqlType.INT,
    "DOUBLE": SqlType.DOUBLE,
    "FLOAT": SqlType.FLOAT,
    "REAL": SqlType.FLOAT,
    "STRING": SqlType.STRING,
    "VARCHAR": SqlType.STRING,
    "TEXT": SqlType.STRING,
    "BOOLEAN": SqlType.BOOLEAN,
    "BOOL": SqlType.BOOLEAN,
}


def type_from_name(name: str) -> SqlType | None:
    """The SqlType spelled `name` (case-insensitive), or None if unsupported."""
    return TYPE_NAMES.get(name.upper())


def type_from_arrow(arrow_type: pa.DataType) -> SqlType | None:
    """The SqlType an Arrow column of this type is read as, or None if unsupported."""
    if pa.types.is_timestamp(arrow_type):
        return SqlType.TIMESTAMP
    if pa.types.is_int64(arrow_type):
        return SqlType.BIGINT
    if pa.types.is_integer(arrow_type):
        # uint32 does not fit INT (int32): BIGINT, as Spark reads it (LongType)
        signed = pa.types.is_signed_integer(arrow_type)
        return SqlType.INT if arrow_type.bit_width <= (32 if signed else 16) else SqlType.BIGINT
    if pa.types.is_float64(arrow_type):
        return SqlType.DOUBLE
    if pa.types.is_floating(arrow_type):
        return SqlType.FLOAT
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return SqlType.STRING
    if pa.types.is_dictionary(arrow_type):
        return type_from_arrow(arrow_type.value_type)
    if pa.types.is_boolean(arrow_type):
        return SqlType.BOOLEAN
    return None


def result_type_from_arrow(arrow_type: pa.DataType) -> ResultType | None:
    """The result type of an Arrow column a query emits: a scalar (`type_from_arrow`), a
    list of one (ARRAY) or a struct of them (STRUCT); None if unsupported. Inputs read
    `type_from_arrow`, which takes scalars only."""
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        element = type_from_arrow(arrow_type.value_type)
        return None if element is None else ArrayType(element)
    if pa.types.is_struct(arrow_type):
        fields = []
        for index in range(arrow_type.num_fields):
            field = arrow_type.field(index)
            field_type = type_from_arrow(field.type)
            if field_type is None:
                return None
            fields.append((field.name, field_type))
        return StructType(tuple(fields))
    return type_from_arrow(arrow_type)


def common_numeric_type(left: SqlType, right: SqlType) -> SqlType:
    """The type binary arithmetic on two numeric operands yields (Spark's widening)."""
    order = [SqlType.INT, SqlType.BIGINT, SqlType.FLOAT, SqlType.DOUBLE]
    if left is SqlType.TIMESTAMP:
        left = SqlType.BIGINT
    if right is SqlType.TIMESTAMP:
        right = SqlType.BIGINT
    return order[max(order.index(left), order.index(right))]
