"""``format("ledgermq")`` through Spark Connect: a real connect server started from the pyspark wheel's own
``sbin/start-connect-server.sh``, a client session (``SparkSession.builder.remote``) in this process, and the
ledgermq name server and broker of the Spark tests. The data source is registered on the client
(``ledgermq.spark.register``), which sends the class to the server; the server's Python workers import ledgermq
from their interpreter (``PYSPARK_PYTHON``). Batch read, batch write and an availableNow streaming query."""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledgermq.testing.ports import free_port
from tests.compat.cluster import HOST, Cluster
from tests.spark.conftest import BROKER
from tests.spark.helpers import body, create_topic, send
from tests.spark.queries import run_to_end
from tests.spark.spark_processes import START_TIMEOUT, start_connect_server

# the connect server starts in the first test's setup (up to START_TIMEOUT under load), and a
# streaming query may be started again when Spark's Python worker did not connect back
pytestmark = [pytest.mark.long, pytest.mark.slow, pytest.mark.timeout(START_TIMEOUT + 600)]

CONNECT_DEPS = ("pyspark", "pyarrow", "pandas", "grpc", "grpc_status", "google.protobuf", "zstandard")


def _missing_deps() -> list[str]:
    missing = []
    for name in CONNECT_DEPS:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            missing.append(name)
    return missing


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Spark Connect client session on a connect server of its own (killed by pid at the end)."""
    missing = _missing_deps()
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


def _values(df: Any) -> list[tuple[int, int, bytes]]:
    rows = df.select("queueId", "queueOffset", "value").collect()
    return sorted((r.queueId, r.queueOffset, bytes(r.value)) for r in rows)


def test_batch_read_and_write_through_spark_connect(remote: Any, cluster: Cluster) -> None:
    source, target = "ConnectIn", "ConnectOut"
    for topic in (source, target):
        create_topic(cluster.namesrv_addr, [cluster.broker_addr], topic, queues=2)
    sent = send(cluster.namesrv_addr, source, BROKER, {0: 7, 1: 4})

    df = remote.read.format("ledgermq").option("namesrvAddr", cluster.namesrv_addr).option("subscribe", source).load()
    assert _values(df) == sorted(sent)
    one = df.where("queueId = 1 AND queueOffset = 3").collect()[0]
    assert (one.key, one.tags, one.properties["seq"]) == ("k1-3", "TagA", "3")

    (
        df.selectExpr("key", "value", "properties")
        .write.format("ledgermq")
        .option("namesrvAddr", cluster.namesrv_addr)
        .option("topic", target)
        .mode("append")
        .save()
    )
    back = remote.read.format("ledgermq").option("namesrvAddr", cluster.namesrv_addr).option("subscribe", target).load()
    rows = back.select("key", "value", "properties").collect()
    assert sorted(bytes(r.value) for r in rows) == sorted(b for _q, _o, b in sent)
    assert sorted((r.key, r.properties["seq"]) for r in rows) == sorted((f"k{q}-{o}", str(o)) for q, o, _b in sent)


def test_streaming_query_through_spark_connect(remote: Any, cluster: Cluster, tmp_path: Path) -> None:
    """readStream -> writeStream, both ``ledgermq``, with trigger(availableNow=True): every message present at the
    start is copied once; a second run from the same checkpoint copies only what came after."""
    source, target = "ConnectStreamIn", "ConnectStreamOut"
    for topic in (source, target):
        create_topic(cluster.namesrv_addr, [cluster.broker_addr], topic, queues=2)
    first = send(cluster.namesrv_addr, source, BROKER, {0: 6, 1: 5})

    def run_once() -> None:
        stream = (
            remote.readStream.format("ledgermq")
            .option("namesrvAddr", cluster.namesrv_addr)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "4")
            .load()
        )
        writer = (
            stream.selectExpr("key", "value")
            .writeStream.format("ledgermq")
            .option("namesrvAddr", cluster.namesrv_addr)
            .option("topic", target)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
        )
        query = run_to_end(writer.start, 240)
        assert query.exception() is None, query.exception()

    def copied() -> list[bytes]:
        out = remote.read.format("ledgermq").option("namesrvAddr", cluster.namesrv_addr).option("subscribe", target)
        return sorted(bytes(r.value) for r in out.load().select("value").collect())

    run_once()
    assert copied() == sorted(b for _q, _o, b in first)

    later = send(cluster.namesrv_addr, source, BROKER, {0: 2}, first={0: 6})
    assert [b for _q, _o, b in later] == [body(source, 0, 6), body(source, 0, 7)]
    run_once()
    assert copied() == sorted(b for _q, _o, b in first + later)
