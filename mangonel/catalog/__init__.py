"""Streams, tables, schemas and types."""

from mangonel.catalog.catalog import Catalog, Column, Schema, Stream, Table
from mangonel.catalog.types import SqlType

__all__ = ["Catalog", "Column", "Schema", "SqlType", "Stream", "Table"]
