"""mangonel: streaming-SQL window queries compiled to GPU kernels, inside Spark.

import mangonel as mg
s = mg.Session(backend="auto")
s.execute("CREATE STREAM trades (...) WITH (event_time = 'ts', watermark = '500 ms')")
q = s.sql("SELECT symbol, window_start, AVG(price) FROM trades [RANGE 1 SECOND "
          "SLIDE 10 MILLISECONDS] GROUP BY symbol")
print(q.explain()); table = q.run(batches)
"""

from mangonel.errors import (
    BackendUnavailableError,
    CatalogError,
    DataError,
    MangonelError,
    PlanError,
    SqlError,
)

__version__ = "0.1.0"


def __getattr__(name: str):  # noqa: ANN202
    # Session pulls in the whole compiler; load it on first use so that importing a
    # submodule (mangonel.catalog, mangonel.runtime...) stays light.
    if name in ("Session", "Query", "TuningOptions"):
        from mangonel import session

        return getattr(session, name)
    raise AttributeError(f"module 'mangonel' has no attribute {name!r}")


def attach(spark, **options):  # noqa: ANN001, ANN003, ANN201  (pyspark stays in runtime/spark)
    """Embed mangonel in a SparkSession: returns a session whose sql() gives streaming
    DataFrames. Options go to SparkMangonelSession (backend="auto"|"cpu"|"gpu", buckets,
    stage1, native, gpu_join, stage2, approx_percentile). Imports pyspark lazily so the core
    never needs it."""
    from mangonel.runtime.spark.session import SparkMangonelSession

    return SparkMangonelSession(spark, **options)


__all__ = [
    "BackendUnavailableError",
    "CatalogError",
    "DataError",
    "MangonelError",
    "PlanError",
    "Query",
    "Session",
    "SqlError",
    "TuningOptions",
    "attach",
]
