"""Spark <-> mangonel schemas. The one type map is mangonel.catalog.types; this module only
translates between it and Spark's StructType."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from mangonel.catalog.catalog import Column, Schema
from mangonel.catalog.types import SqlType, type_from_arrow
from mangonel.errors import CatalogError


def quote(name: str) -> str:
    """A Spark SQL identifier, back-quoted (names may hold spaces or reserved words)."""
    return "`" + name.replace("`", "``") + "`"


def ddl(columns: list[tuple[str, SqlType]]) -> str:
    """A Spark DDL schema string: `a` BIGINT, `b` STRING, ..."""
    return ", ".join(f"{quote(name)} {sql_type.info.spark}" for name, sql_type in columns)


def schema_ddl(schema: Schema) -> str:
    return ddl([(c.name, c.type) for c in schema.columns])


def arrow_schema(spark_schema: StructType) -> pa.Schema:
    """The Arrow schema Spark uses for a StructType (timestamps as us, UTC)."""
    return to_arrow_schema(spark_schema, timezone="UTC")


def schema_from_spark(name: str, spark_schema: StructType) -> Schema:
    """A mangonel Schema for a Spark DataFrame's schema; unsupported types are an error naming
    the column, since a query could not read them."""
    columns = []
    for field in arrow_schema(spark_schema):
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
