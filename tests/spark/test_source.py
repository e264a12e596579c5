"""The ledgermq source on a local SparkSession against real name-server and broker processes."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.compat.cluster import Cluster
from tests.spark.conftest import BROKER
from tests.spark.helpers import body, create_topic, rows_of, send
from tests.spark.queries import run_to_end

pytestmark = pytest.mark.slow


def reader(spark: Any, cluster: Cluster, **options: str) -> Any:
    r = spark.read.format("ledgermq").option("namesrvAddr", cluster.namesrv_addr)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def offsets(topic: str, **per_queue: int) -> str:
    return json.dumps({topic: {f"{BROKER}:{q[1:]}": v for q, v in per_queue.items()}})


def test_batch_reads_exact_offset_ranges(spark: Any, cluster: Cluster) -> None:
    topic = "SparkBatch"
    create_topic(cluster.namesrv_addr, [cluster.broker_addr], topic, queues=2)
    sent = send(cluster.namesrv_addr, topic, BROKER, {0: 10, 1: 6})
    assert [(q, off) for q, off, _ in sent] == [(0, i) for i in range(10)] + [(1, i) for i in range(6)]

    df = reader(spark, cluster, subscribe=topic)
    assert df.columns == [
        "key", "value", "topic", "broker", "queueId", "queueOffset", "msgId", "tags", "properties",
        "bornTimestamp", "storeTimestamp", "reconsumeTimes",
    ]  # fmt: skip
    assert rows_of(df) == sorted((topic, BROKER, q, off, b) for q, off, b in sent)
    first = df.where("queueId = 1 AND queueOffset = 2").collect()[0]
    assert (first.key, first.tags, first.properties["seq"], first.reconsumeTimes) == ("k1-2", "TagA", "2", 0)
    assert len(first.msgId) == 32 and first.storeTimestamp >= first.bornTimestamp

    exact = reader(
        spark,
        cluster,
        subscribe=topic,
        startingOffsets=offsets(topic, q0=3, q1=-2),
        endingOffsets=offsets(topic, q0=8, q1=-1),
    )
    expected = [(topic, BROKER, 0, i, body(topic, 0, i)) for i in range(3, 8)]
    expected += [(topic, BROKER, 1, i, body(topic, 1, i)) for i in range(6)]
    assert rows_of(exact) == expected

    split = reader(spark, cluster, subscribe=topic, minPartitions="5")
    assert split.rdd.getNumPartitions() >= 5
    assert rows_of(split) == rows_of(df)

    assigned = reader(spark, cluster, assign=json.dumps({topic: {BROKER: [1]}}))
    assert [r[2:4] for r in rows_of(assigned)] == [(1, i) for i in range(6)]
    pattern = reader(spark, cluster, subscribePattern="SparkBat.*")
    assert rows_of(pattern) == rows_of(df)


def test_batch_tags_and_starting_timestamp(spark: Any, cluster: Cluster) -> None:
    topic = "SparkTags"
    create_topic(cluster.namesrv_addr, [cluster.broker_addr], topic, queues=2)
    send(cluster.namesrv_addr, topic, BROKER, {0: 4, 1: 4}, tags="TagA")
    time.sleep(0.05)
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    later = send(cluster.namesrv_addr, topic, BROKER, {0: 3, 1: 2}, first={0: 4, 1: 4}, tags="TagB")
    tagged = reader(spark, cluster, subscribe=topic, tags="TagB || TagC")
    assert [r[2:4] for r in rows_of(tagged)] == sorted((q, off) for q, off, _ in later)
    since = reader(spark, cluster, subscribe=topic, startingTimestamp=str(middle))
    assert [r[2:4] for r in rows_of(since)] == sorted((q, off) for q, off, _ in later)


def test_bad_options_are_rejected_naming_the_option(spark: Any, cluster: Cluster) -> None:
    cases = [
        ({"subcribe": "T"}, "subcribe"),
        ({"subscribe": "T", "startingOffsets": "latest"}, "startingOffsets"),
        ({"subscribe": "T", "maxOffsetsPerTrigger": "5"}, "maxOffsetsPerTrigger"),
        ({"subscribe": "T", "failOnDataLoss": "sometimes"}, "failOnDataLoss"),
        ({"subscribe": "SparkBatch", "endingOffsets": offsets("SparkBatch", q0=10**9)}, "endingOffsets"),
        ({"assign": json.dumps({"SparkBatch": {BROKER: [7]}})}, "assign"),
    ]
    for options, name in cases:
        with pytest.raises(Exception, match=f"'{name}'"):
            reader(spark, cluster, **options).collect()
    # a stream's options are checked where Spark creates its reader, in the query's Python worker
    stream = (
        spark.readStream.format("ledgermq")
        .option("namesrvAddr", cluster.namesrv_addr)
        .option("subscribe", "T")
        .option("endingOffsets", "latest")
        .load()
        .writeStream.format("noop")
    )
    failure = run_to_end(stream.start, 30).exception()
    assert failure is not None and "'endingOffsets'" in str(failure), failure


def run_available_now(
    spark: Any, cluster: Cluster, topic: str, out: Path, checkpoint: Path, *, once: bool = False, **options: str
) -> list[dict[str, Any]]:
    """A streaming query (trigger availableNow, or once) from ``topic`` into parquet files; its progress reports."""
    r = (
        spark.readStream.format("ledgermq")
        .option("namesrvAddr", cluster.namesrv_addr)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for k, v in options.items():
        r = r.option(k, v)
    writer = (
        r.load()
        .select("topic", "broker", "queueId", "queueOffset", "value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(**({"once": True} if once else {"availableNow": True}))
    )
    query = run_to_end(writer.start, 120)
    assert query.exception() is None, query.exception()
    return [p for p in query.recentProgress if p["numInputRows"]]


def test_stream_restarted_from_its_checkpoint_reads_every_message_once(
    spark: Any, cluster: Cluster, tmp_path: Path
) -> None:
    topic = "SparkStream"
    create_topic(cluster.namesrv_addr, [cluster.broker_addr], topic, queues=2)
    first = send(cluster.namesrv_addr, topic, BROKER, {0: 13, 1: 7})
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    progress = run_available_now(spark, cluster, topic, out, ckpt, maxOffsetsPerTrigger="6")
    assert [p["numInputRows"] for p in progress] == [6, 6, 6, 2]  # bounded batches, everything present at start
    assert json.loads(progress[-1]["sources"][0]["endOffset"]) == {topic: {f"{BROKER}:0": 13, f"{BROKER}:1": 7}}

    second = send(cluster.namesrv_addr, topic, BROKER, {0: 2, 1: 5}, first={0: 13, 1: 7})
    progress = run_available_now(spark, cluster, topic, out, ckpt, maxOffsetsPerTrigger="6")
    assert [p["numInputRows"] for p in progress] == [6, 1]

    got = rows_of(spark.read.parquet(str(out)))
    assert got == sorted((topic, BROKER, q, off, b) for q, off, b in first + second)  # each exactly once

    # once more with nothing new: no batch, nothing read twice
    assert run_available_now(spark, cluster, topic, out, ckpt) == []
    assert len(spark.read.parquet(str(out)).collect()) == len(first) + len(second)


def test_once_trigger_reads_everything_present_in_one_batch(spark: Any, cluster: Cluster, tmp_path: Path) -> None:
    """Trigger.Once is one batch that takes all there is (Spark ignores read limits for it); a rerun from the
    checkpoint takes only what came since."""
    topic = "SparkOnce"
    create_topic(cluster.namesrv_addr, [cluster.broker_addr], topic, queues=2)
    first = send(cluster.namesrv_addr, topic, BROKER, {0: 9, 1: 4})
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    progress = run_available_now(spark, cluster, topic, out, ckpt, once=True, maxOffsetsPerTrigger="5")
    assert [p["numInputRows"] for p in progress] == [13]
    second = send(cluster.namesrv_addr, topic, BROKER, {0: 1, 1: 2}, first={0: 9, 1: 4})
    progress = run_available_now(spark, cluster, topic, out, ckpt, once=True)
    assert [p["numInputRows"] for p in progress] == [3]
    got = rows_of(spark.read.parquet(str(out)))
    assert got == sorted((topic, BROKER, q, off, b) for q, off, b in first + second)


def test_stream_group_progress_is_committed(spark: Any, cluster: Cluster, tmp_path: Path) -> None:
    from tests.spark.helpers import committed_offsets

    topic, group = "SparkProgress", "spark-progress-cg"
    create_topic(cluster.namesrv_addr, [cluster.broker_addr], topic, queues=2)
    send(cluster.namesrv_addr, topic, BROKER, {0: 5, 1: 3})
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    run_available_now(spark, cluster, topic, out, ckpt, groupId=group)
    # Spark commits a batch's offsets when it plans the next one: the restart commits the last batch
    run_available_now(spark, cluster, topic, out, ckpt, groupId=group)
    assert committed_offsets(cluster.namesrv_addr, cluster.broker_addr, group, topic) == {0: 5, 1: 3}
