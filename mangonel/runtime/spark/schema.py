"""Spark <-> mangonel schemas. The one type map is mangonel.catalog.types; this module only
translates between it and Spark's StructType.

Result columns of an ARRAY type map to Spark's ArrayType (`ARRAY<DOUBLE>`), of a STRUCT type
(Spark's `window` column) to its StructType (`STRUCT<start: TIMESTAMP, end: TIMESTAMP>`).
Stage 2 hands its results to Spark as pandas frames (`applyInPandasWithState`), which carry
no struct column reliably: there a struct travels as its fields (`flat_columns`,
`flatten`) and is put together again by a select after the stateful stage (`nest`)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType as SparkStructType
from pyspark.sql.types import TimestampNTZType

from mangonel.catalog.catalog import Column, Schema
from mangonel.catalog.types import ResultType, SqlType, StructType, type_from_arrow
from mangonel.errors import CatalogError


def quote(name: str) -> str:
    """A Spark SQL identifier, back-quoted (names may hold spaces or reserved words)."""
    return "`" + name.replace("`", "``") + "`"


def ddl(columns: list[tuple[str, ResultType]]) -> str:
    """A Spark DDL schema string: `a` BIGINT, `b` STRING, `p` ARRAY<DOUBLE>, ..."""
    return ", ".join(f"{quote(name)} {sql_type.info.spark}" for name, sql_type in columns)


# a struct field's flat column between stage 2 and the select that nests it again
_FIELD = "{column}.__mangonel_field.{field}"


def flat_columns(columns: list[tuple[str, ResultType]]) -> list[tuple[str, ResultType]]:
    """`columns` with every STRUCT column as its fields' columns, in place."""
    flat: list[tuple[str, ResultType]] = []
    for name, sql_type in columns:
        if isinstance(sql_type, StructType):
            flat += [(_FIELD.format(column=name, field=f), t) for f, t in sql_type.fields]
        else:
            flat.append((name, sql_type))
    return flat


def flatten(table: pa.Table) -> pa.Table:
    """`table` with every struct column as its fields' columns (`flat_columns`' names)."""
    if not any(pa.types.is_struct(field.type) for field in table.schema):
        return table
    names, columns = [], []
    for field, column in zip(table.schema, table.columns, strict=True):
        if not pa.types.is_struct(field.type):
            names.append(field.name)
            columns.append(column)
            continue
        for index in range(field.type.num_fields):
            names.append(_FIELD.format(column=field.name, field=field.type.field(index).name))
            columns.append(pc.struct_field(column, [index]))
    return pa.table(columns, names=names)


def nest(frame: DataFrame, columns: list[tuple[str, ResultType]]) -> DataFrame:
    """The columns of `frame` (laid out by `flat_columns(columns)`) as `columns`: each
    STRUCT column put together from its fields."""
    if not any(isinstance(t, StructType) for _, t in columns):
        return frame
    selected = []
    for name, sql_type in columns:
        if isinstance(sql_type, StructType):
            fields = [
                F.col(quote(_FIELD.format(column=name, field=f))).alias(f)
                for f, _ in sql_type.fields
            ]
            selected.append(F.struct(*fields).alias(name))
        else:
            selected.append(F.col(quote(name)))
    return frame.select(*selected)


def schema_ddl(schema: Schema) -> str:
    return ddl([(c.name, c.type) for c in schema.columns])


def arrow_schema(spark_schema: SparkStructType) -> pa.Schema:
    """The Arrow schema Spark uses for a StructType (timestamps as us, UTC)."""
    return to_arrow_schema(spark_schema, timezone="UTC")


def schema_from_spark(name: str, spark_schema: SparkStructType) -> Schema:
    """A mangonel Schema for a Spark DataFrame's schema; unsupported types are an error naming
    the column, since a query could not read them."""
    columns = []
    for field in arrow_schema(spark_schema):
        if isinstance(spark_schema[field.name].dataType, TimestampNTZType):
            # Arrow hands it over as a timestamp without a zone, which mangonel reads as a
            # TIMESTAMP: results came back retyped (an instant through the session time zone)
            raise CatalogError(
                f"column {field.name!r} of {name!r} is TIMESTAMP_NTZ, which mangonel does not "
                "support: its TIMESTAMP is Spark's (an instant, shown in the session time "
                "zone), so the column would come back retyped",
                hint=f"cast it before registering: df.withColumn({field.name!r}, "
                f"F.col({field.name!r}).cast('timestamp'))",
            )
        sql_type = type_from_arrow(field.type)
        if sql_type is None:
            raise CatalogError(
                f"column {field.name!r} of {name!r} has Spark type "
                f"{spark_schema[field.name].dataType.simpleString()}, which mangonel does not "
                "support",
                hint="supported: "
                + ", ".join(t.value for t in SqlType)
                + "; cast or drop the column before registering the DataFrame",
            )
        columns.append(Column(field.name, sql_type, field.nullable))
    return Schema(tuple(columns))


def spark_interval(microseconds: int) -> str:
    """A Spark interval string for a watermark delay (Spark keeps milliseconds)."""
    if microseconds % 1000 == 0:
        return f"{microseconds // 1000} milliseconds"
    return f"{microseconds} microseconds"
