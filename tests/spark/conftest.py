"""Fixtures of the Spark tests: one local SparkSession (local[2]), one name server + broker and one standalone
Spark cluster (real processes), each started when a test first needs it and stopped after the package's last
test (``make test`` runs the package on one pytest worker: ``xdist_scope``); tests use topics of their own.
Skipped when pyspark or a Java runtime is missing (``make test`` installs both)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledgermq.testing.ports import free_port
from tests.compat.cluster import HOST, Cluster
from tests.spark.standalone import SparkStandalone
from tests.spark.worker_python import worker_python

BROKER = "spark-a"


CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
CONNECT_PORT = "spark.connect.grpc.binding.port"
# Starting the package's JVM can take minutes on a loaded two-core machine (220 s seen at load
# average 13); the first test that asks for it gets this much on top of its own timeout.
START_BUDGET = 300


@pytest.fixture(scope="package")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The package's local SparkSession. Its driver also serves Spark Connect (Spark's own
    ``SparkConnectPlugin``, on a free loopback port: ``CONNECT_PORT`` in its conf), so the
    Connect tests need no JVM of their own."""
    pytest.importorskip("pyspark", reason="pyspark is not installed (the 'spark' extra)")
    pytest.importorskip("pyarrow", reason="pyarrow is not installed (the 'spark' extra)")
    if shutil.which("java") is None:  # pragma: no cover - make test installs one
        pytest.skip("no Java runtime (make test installs openjdk-17-jre-headless)")
    from pyspark.sql import SparkSession

    import ledgermq.spark

    # workers run this interpreter (with pyarrow and ledgermq), importing pyspark from site-packages
    os.environ["PYSPARK_PYTHON"] = str(worker_python(tmp_path_factory.mktemp("worker-python")))
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("ledgermq-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "768m")
        .config("spark.sql.streaming.stopTimeout", "20s")
        .config("spark.python.worker.faulthandler.enabled", "true")
        .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -Xss4m")
        .config("spark.plugins", CONNECT_PLUGIN)
        .config("spark.connect.grpc.binding.address", HOST)
        .config(CONNECT_PORT, str(free_port()))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    ledgermq.spark.register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A name server and one master broker (group ``spark-a``), killed at the end of the session."""
    c = Cluster(tmp_path_factory.mktemp("spark-cluster"), broker_name=BROKER)
    try:
        c.start()
        yield c
    finally:
        c.close()


@pytest.fixture(scope="package")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandalone]:
    """A standalone Spark cluster (a master and a worker of 2 cores, 1 GiB) for the tests that submit
    applications to one (the fault test, the standalone batch test); its executors come and go with them."""
    pytest.importorskip("pyspark", reason="pyspark is not installed (the 'spark' extra)")
    if shutil.which("java") is None:  # pragma: no cover - make test installs one
        pytest.skip("no Java runtime (make test installs openjdk-17-jre-headless)")
    with SparkStandalone(tmp_path_factory.mktemp("spark-standalone")) as cluster:
        yield cluster


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that starts one of the package's JVMs (the local session, the standalone cluster)
    in its setup gets ``START_BUDGET`` more than its timeout: pytest-timeout counts the setup."""
    for item in items:
        if not item.nodeid.startswith("tests/spark/"):
            continue
        if not {"spark", "standalone"} & set(getattr(item, "fixturenames", ())):
            continue
        marker = item.get_closest_marker("timeout")
        own = marker.args[0] if marker is not None and marker.args else _configured_timeout(item.config)
        if own:
            item.add_marker(pytest.mark.timeout(float(own) + START_BUDGET), append=False)


def _configured_timeout(config: pytest.Config) -> float:
    """pytest-timeout's timeout from the command line or the ini file (0: none)."""
    try:
        value = config.getoption("timeout", None) or config.getini("timeout")
    except ValueError:  # pytest-timeout is not installed
        return 0.0
    return float(value or 0)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    return tmp_path
