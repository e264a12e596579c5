"""``format("ledgermq")`` through Spark Connect: a real connect server started from the pyspark wheel's own
``sbin/start-connect-server.sh``, a client session (``SparkSession.builder.remote``) in this process, and the
ledgermq name server and broker of the Spark tests. The data source is registered on the client
(``ledgermq.spark.register``), which sends the class to the server; the server's Python workers import ledgermq
from their interpreter (``PYSPARK_PYTHON``). Batch read, batch write and an availableNow streaming query."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledgermq.testing.ports import free_port
from tests.compat.cluster import HOST, Cluster
from tests.spark.connect_cases import batch_read_and_write, missing_connect_deps, streaming_query
from tests.spark.spark_processes import START_TIMEOUT, start_connect_server

# the connect server starts in the first test's setup (up to START_TIMEOUT under load), and a
# streaming query may be started again when Spark's Python worker did not connect back
pytestmark = [pytest.mark.long, pytest.mark.slow, pytest.mark.timeout(START_TIMEOUT + 600)]


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Spark Connect client session on a connect server of its own (killed by pid at the end)."""
    missing = missing_connect_deps()
    if missing:
        pytest.skip(f"Spark Connect client dependencies missing ({', '.join(missing)}): the 'spark-connect' extra")
    if shutil.which("java") is None:  # pragma: no cover - make test installs one
        pytest.skip("no Java runtime (make test installs openjdk-17-jre-headless)")
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    import ledgermq.spark

    port = free_port()
    server = start_connect_server(tmp_path_factory.mktemp("connect"), port)
    session = None
    try:
        session = RemoteSparkSession.builder.remote(f"sc://{HOST}:{port}").getOrCreate()
        ledgermq.spark.register(session)
        yield session
    finally:
        if session is not None:
            try:
                session.stop()
            except Exception:  # the server is killed next anyway
                pass
        server.kill()


def test_batch_read_and_write_through_spark_connect(remote: Any, cluster: Cluster) -> None:
    batch_read_and_write(remote, cluster, "ScriptConnectIn", "ScriptConnectOut")


def test_streaming_query_through_spark_connect(remote: Any, cluster: Cluster, tmp_path: Path) -> None:
    streaming_query(remote, cluster, tmp_path / "checkpoint", "ScriptConnectStreamIn", "ScriptConnectStreamOut")
