"""Sources of batches for streams: the built-in generator and Parquet/CSV files."""

from mangonel.catalog.sources.files import read_files
from mangonel.catalog.sources.generator import GeneratorConfig, generate

__all__ = ["GeneratorConfig", "generate", "read_files"]
