"""What the Spark Connect tests check, whichever server they reach (test_connect.py: the service inside the
shared session's driver; test_connect_server_script.py: a server started by PySpark's own script)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from tests.compat.cluster import Cluster
from tests.spark.conftest import BROKER
from tests.spark.helpers import body, create_topic, send
from tests.spark.queries import run_to_end

CONNECT_DEPS = ("pyspark", "pyarrow", "pandas", "grpc", "grpc_status", "google.protobuf", "zstandard")


def missing_connect_deps() -> list[str]:
    missing = []
    for name in CONNECT_DEPS:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            missing.append(name)
    return missing


def _values(df: Any) -> list[tuple[int, int, bytes]]:
    rows = df.select("queueId", "queueOffset", "value").collect()
    return sorted((r.queueId, r.queueOffset, bytes(r.value)) for r in rows)


def batch_read_and_write(remote: Any, cluster: Cluster, source: str, target: str) -> None:
    """Read ``source`` back exactly as sent, write it to ``target``, read that back."""
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


def streaming_query(remote: Any, cluster: Cluster, checkpoint: Path, source: str, target: str) -> None:
    """readStream -> writeStream, both ``ledgermq``, with trigger(availableNow=True): every message present at the
    start is copied once; a second run from the same checkpoint copies only what came after."""
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
            .option("checkpointLocation", str(checkpoint))
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
