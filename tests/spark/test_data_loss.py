"""failOnDataLoss both ways: retention deletes messages a query still needed (batch and streaming)."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.compat.cluster import Cluster, wait_until
from tests.spark.helpers import create_topic, delete_expired, queue_bounds, rows_of, send
from tests.spark.queries import run_to_end

pytestmark = pytest.mark.slow

BROKER = "spark-loss"
TOPIC = "SparkLoss"


@pytest.fixture(scope="module")
def small_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A broker whose commit-log segments hold a few dozen messages and expire at once when asked."""
    c = Cluster(
        tmp_path_factory.mktemp("spark-loss"),
        broker_name=BROKER,
        mappedFileSizeCommitLog=8192,
        mappedFileSizeConsumeQueue=200,
        fileReservedTime=0,
        deleteCommitLogFilesInterval=0,
        cleanResourceInterval=200,
    )
    try:
        c.start()
        yield c
    finally:
        c.close()


def stream(spark: Any, cluster: Cluster, ckpt: Path, out: Path, **options: str) -> Any:
    """An availableNow query from the topic into parquet, run to its end (``queries.run_to_end``)."""
    r = (
        spark.readStream.format("ledgermq")
        .option("namesrvAddr", cluster.namesrv_addr)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
    )
    for k, v in options.items():
        r = r.option(k, v)
    writer = (
        r.load()
        .select("topic", "broker", "queueId", "queueOffset", "value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
    )
    return run_to_end(writer.start, 120)


def _settled_low(c: Cluster, quiet: float = 5.0, timeout: float = 30.0) -> int:
    """The queue's earliest offset once it has not moved for ``quiet`` seconds (longer than the
    20 rounds x 200 ms a deletion request buys)."""
    deadline = time.monotonic() + timeout
    low, since = queue_bounds(c.namesrv_addr, c.broker_addr, TOPIC)[0][0], time.monotonic()
    while time.monotonic() - since < quiet:
        assert time.monotonic() < deadline, f"retention kept moving the earliest offset (now {low}){c.explain()}"
        time.sleep(0.25)
        now = queue_bounds(c.namesrv_addr, c.broker_addr, TOPIC)[0][0]
        if now != low:
            low, since = now, time.monotonic()
    return low


def test_fail_on_data_loss_both_ways(spark: Any, small_cluster: Cluster, tmp_path: Path) -> None:
    c = small_cluster
    create_topic(c.namesrv_addr, [c.broker_addr], TOPIC, queues=1)
    first = send(c.namesrv_addr, TOPIC, BROKER, {0: 5})
    # a stream reads the first 5 messages and checkpoints offset 5
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    q = stream(spark, c, ckpt, out)
    assert q.exception() is None, q.exception()
    ckpt_copy, out_copy = tmp_path / "ckpt-copy", tmp_path / "out-copy"
    shutil.copytree(ckpt, ckpt_copy)
    shutil.copytree(out, out_copy)

    sent = send(c.namesrv_addr, TOPIC, BROKER, {0: 150}, first={0: 5})  # ~6 segments of 8 KiB

    def deleted() -> int:
        delete_expired(c.namesrv_addr, c.broker_addr)
        low, _high = queue_bounds(c.namesrv_addr, c.broker_addr, TOPIC)[0]
        return low if low > 10 else 0

    wait_until("retention to delete the oldest messages", deleted, 30, 0.3, c.explain)
    # One request buys the broker 20 cleaning rounds (every cleanResourceInterval, 200 ms): wait
    # them out, so that nothing more goes while the reads below run and each can expect exactly
    # what is left.
    low = _settled_low(c)
    high = 155
    assert 10 < low < high

    # batch: asking for offsets that are gone fails by default, and reads what is left with failOnDataLoss=false
    def batch(**options: str) -> Any:
        r = spark.read.format("ledgermq").option("namesrvAddr", c.namesrv_addr).option("subscribe", TOPIC)
        for k, v in options.items():
            r = r.option(k, v)
        return r.load()

    exact = json.dumps({TOPIC: {f"{BROKER}:0": 0}})
    with pytest.raises(Exception, match="failOnDataLoss"):
        batch(startingOffsets=exact).collect()
    kept = rows_of(batch(startingOffsets=exact, failOnDataLoss="false"))
    assert [r[3] for r in kept] == list(range(low, high)), (
        f"read {[r[3] for r in kept][:5]}... ({len(kept)} rows); the broker's bounds now "
        f"{queue_bounds(c.namesrv_addr, c.broker_addr, TOPIC)[0]}{c.explain()}"
    )
    assert rows_of(batch()) == kept  # "earliest" is the earliest still stored: no loss

    # streaming: the checkpoint at offset 5 is behind the earliest offset now
    failure = stream(spark, c, ckpt, out).exception()
    assert failure is not None and "deleted by retention before they were read" in str(failure), failure
    q = stream(spark, c, ckpt_copy, out_copy, failOnDataLoss="false")
    assert q.exception() is None, q.exception()
    got = rows_of(spark.read.parquet(str(out_copy)))
    assert [r[3] for r in got if r[3] >= 5] == list(range(low, high))  # read on from the earliest, once each
    assert {r[4] for r in got} <= {b for _, _, b in first + sent}
