"""One local SparkSession for the whole Spark test suite (starting Spark costs seconds)."""

from __future__ import annotations

import pytest

from mangonel.runtime.spark.java import check_java

# The test JVM lives for one worker's tests, short queries over small inputs: C2's compiles
# and the parallel collector's threads cost more CPU than they save there (four xdist workers
# share CI's two cores). Measured on the 2-core VM, two Spark test files in one process: 92
# and 121 s of machine CPU with these options against 121 and 178 s without (docs/testing.md).
# Benchmarks start their own JVMs with the defaults.
TEST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# Spark's interpreted evaluation instead of generated Java code (Janino compiles every
# query's stages): the tests' inputs are small and each query runs a few micro-batches.
# Two Spark test files: 148-150 s of machine CPU against 160-170 s with codegen
# (docs/testing.md). The results are Spark's either way (its own tests run both modes).
TEST_CONF = {
    "spark.driver.extraJavaOptions": TEST_JVM,
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}


@pytest.fixture(scope="session")
def spark():
    problem = check_java()
    if problem:
        pytest.skip(problem)
    from mangonel.runtime.spark.session import local_spark

    session = local_spark(
        app_name="mangonel-tests",
        shuffle_partitions=2,
        extra=TEST_CONF,
    )
    yield session
    session.stop()
