"""One local SparkSession for the whole Spark test suite (starting Spark costs seconds)."""

from __future__ import annotations

import pytest

from mangonel.runtime.spark.java import check_java


@pytest.fixture(scope="session")
def spark():
    problem = check_java()
    if problem:
        pytest.skip(problem)
    from mangonel.runtime.spark.session import local_spark

    session = local_spark(app_name="mangonel-tests", shuffle_partitions=2)
    yield session
    session.stop()
