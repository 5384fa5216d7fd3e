"""Sources of batches for streams: the built-in generator and Parquet/CSV files, and the
`CREATE STREAM ... WITH (source = ...)` options that describe them."""

from mangonel.catalog.sources.files import read_files
from mangonel.catalog.sources.generator import GeneratorConfig, generate
from mangonel.catalog.sources.options import (
    SOURCE_OPTIONS,
    SOURCES,
    FileSource,
    GeneratorSource,
    file_source,
    generator_source,
    source_of,
)

__all__ = [
    "SOURCES",
    "SOURCE_OPTIONS",
    "FileSource",
    "GeneratorConfig",
    "GeneratorSource",
    "file_source",
    "generate",
    "generator_source",
    "read_files",
    "source_of",
]
