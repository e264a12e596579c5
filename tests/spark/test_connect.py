"""``format("ledgermq")`` through Spark Connect: a client session (``SparkSession.builder.remote``) in this
process, over gRPC, to the Spark Connect service that the package's local SparkSession runs in its driver (Spark's
``SparkConnectPlugin``: the service ``sbin/start-connect-server.sh`` starts, inside a JVM the tests start anyway),
and the ledgermq name server and broker of the Spark tests. The data source is registered on the client
(``ledgermq.spark.register``), which sends the class to the server by reference; the server's Python workers
import ledgermq from their interpreter (``PYSPARK_PYTHON``). Batch read, batch write and an availableNow streaming
query."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.compat.cluster import HOST, Cluster, tcp_open, wait_until
from tests.spark.conftest import CONNECT_PORT
from tests.spark.connect_cases import batch_read_and_write, missing_connect_deps, streaming_query
from tests.spark.standalone import START_TIMEOUT

# a streaming query may be started again when Spark's Python worker did not connect back
# (conftest adds the JVM's start when the session starts in this module's setup)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def remote(spark: Any) -> Iterator[Any]:
    """A Spark Connect client session on the Connect service of the package's SparkSession."""
    missing = missing_connect_deps()
    if missing:
        pytest.skip(f"Spark Connect client dependencies missing ({', '.join(missing)}): the 'spark-connect' extra")
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    import ledgermq.spark

    port = int(spark.conf.get(CONNECT_PORT))
    wait_until("the Spark Connect service to listen", lambda: tcp_open(port), START_TIMEOUT, 0.5)
    session = RemoteSparkSession.builder.remote(f"sc://{HOST}:{port}").getOrCreate()
    try:
        ledgermq.spark.register(session)
        yield session
    finally:
        session.stop()


def test_batch_read_and_write_through_spark_connect(remote: Any, cluster: Cluster) -> None:
    batch_read_and_write(remote, cluster, "ConnectIn", "ConnectOut")


def test_streaming_query_through_spark_connect(remote: Any, cluster: Cluster, tmp_path: Path) -> None:
    streaming_query(remote, cluster, tmp_path / "checkpoint", "ConnectStreamIn", "ConnectStreamOut")
