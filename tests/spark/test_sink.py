"""The ledgermq sink: batch and streaming writes, read back by the Apache C++ client and by the source."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.compat.cluster import HAVE_CPP_CLIENT, Cluster
from tests.spark.conftest import BROKER
from tests.spark.helpers import create_topic, rows_of, send
from tests.spark.queries import run_to_end

pytestmark = pytest.mark.slow

SCHEMA = "value binary, key string, tags string, properties map<string,string>"


def write(df: Any, cluster: Cluster, mode: str = "append", **options: str) -> None:
    w = df.write.format("ledgermq").option("namesrvAddr", cluster.namesrv_addr).mode(mode)
    for k, v in options.items():
        w = w.option(k, v)
    w.save()


def read(spark: Any, cluster: Cluster, topic: str) -> Any:
    return spark.read.format("ledgermq").option("namesrvAddr", cluster.namesrv_addr).option("subscribe", topic).load()


@pytest.mark.skipif(not HAVE_CPP_CLIENT, reason="the Apache RocketMQ C++ client wheel (rocketmq==0.4.4) is missing")
def test_sink_messages_are_readable_by_the_cpp_client(spark: Any, cluster: Cluster) -> None:
    topic = "SparkSinkCpp"
    create_topic(cluster.namesrv_addr, [cluster.broker_addr], topic, queues=2)
    props = [{"p": str(i), "UNIQ_KEY": "dropped"} for i in range(40)]
    rows = [(f"value {i}".encode(), f"key{i} other{i}", "TagS", props[i]) for i in range(40)]
    write(spark.createDataFrame(rows, SCHEMA).repartition(2), cluster, topic=topic, sendBatchSize="7")
    steps = [{"op": "pull", "group": "spark-sink-cpp-cg", "topic": topic, "expect_count": 40, "props": ["p"],
              "timeout": 30}]  # fmt: skip
    got = cluster.run_client(steps)[0]["messages"]
    assert sorted(m["body"] for m in got) == sorted(f"value {i}" for i in range(40))
    for m in got:
        i = int(m["body"].split()[1])
        assert (m["tags"], m["keys"], m["props"]["p"]) == ("TagS", f"key{i} other{i}", str(i))
        assert m["props"]["UNIQ_KEY"] != "dropped" and len(m["id"]) == 32
    assert {m["queue_id"] for m in got} == {0, 1}


def test_sink_topic_and_queue_columns_and_string_values(spark: Any, cluster: Cluster) -> None:
    t1, t2 = "SparkSinkA", "SparkSinkB"
    for t in (t1, t2):
        create_topic(cluster.namesrv_addr, [cluster.broker_addr], t, queues=2)
    rows = [(t1 if i % 2 else t2, f"s{i}", 1, None) for i in range(10)]
    df = spark.createDataFrame(rows, "topic string, value string, queueId int, key binary")
    write(df, cluster)
    deadline = time.monotonic() + 15
    got = rows_of(read(spark, cluster, f"{t1},{t2}"))
    while len(got) < len(rows) and time.monotonic() < deadline:  # acknowledged, perhaps not yet dispatched
        time.sleep(0.2)
        got = rows_of(read(spark, cluster, f"{t1},{t2}"))
    assert sorted((r[0], r[2], r[4]) for r in got) == sorted((t, 1, v.encode()) for t, v, _, _ in rows)


def test_sink_rejects_bad_frames_with_clear_errors(spark: Any, cluster: Cluster) -> None:
    ok = {"topic": "SparkSinkA"}
    cases = [
        (spark.createDataFrame([("a",)], "body string"), ok, "'value' column"),
        (spark.createDataFrame([(1,)], "value int"), ok, "column 'value' must be binary or string"),
        (spark.createDataFrame([(b"x", 5)], "value binary, key int"), ok, "column 'key' must be string or binary"),
        (spark.createDataFrame([(b"x",)], "value binary"), {}, "'topic' column"),
        (spark.createDataFrame([(None,)], "value binary"), ok, "column 'value' is null"),
        (spark.createDataFrame([(b"x", 9)], "value binary, queueId int"), ok, "column 'queueId' is 9"),
        (spark.createDataFrame([(b"x",)], "value binary"), {"topic": "x y"}, "option 'topic'"),
    ]
    for df, options, message in cases:
        with pytest.raises(Exception, match=message):
            write(df, cluster, **options)
    with pytest.raises(Exception, match="overwrite"):
        write(spark.createDataFrame([(b"x",)], "value binary"), cluster, mode="overwrite", **ok)


def test_stream_copies_a_topic_through_the_sink(spark: Any, cluster: Cluster, tmp_path: Path) -> None:
    src, dst = "SparkCopyIn", "SparkCopyOut"
    for t in (src, dst):
        create_topic(cluster.namesrv_addr, [cluster.broker_addr], t, queues=2)
    sent = send(cluster.namesrv_addr, src, BROKER, {0: 9, 1: 4})
    writer = (
        spark.readStream.format("ledgermq")
        .option("namesrvAddr", cluster.namesrv_addr)
        .option("subscribe", src)
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("ledgermq")
        .option("namesrvAddr", cluster.namesrv_addr)
        .option("topic", dst)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
    )
    query = run_to_end(writer.start, 120)
    assert query.exception() is None, query.exception()
    copied = read(spark, cluster, dst).collect()
    assert sorted(bytes(r.value) for r in copied) == sorted(b for _, _, b in sent)
    # the tags, keys and user properties travel; the queue ids too (queueId column)
    assert {(r.tags, r.properties.get("seq") is not None) for r in copied} == {("TagA", True)}
    assert json.dumps(sorted({r.queueId for r in copied})) == "[0, 1]"
