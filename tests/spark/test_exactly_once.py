"""exactlyOnce=true on one local Spark session, a real name server and broker: rows become
visible only at the driver's commit, a re-run of a committed batch writes nothing twice, and
a commit left half-done by a dead driver is finished by the next run (the driver's death
played by calling the coordinator's steps by hand, so the broker state is exact)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from ledgermq.spark.commit_records import StartedRecord, started_messages
from ledgermq.spark.eo_commit import Coordinator, commit_write
from ledgermq.spark.half_sender import HalfSender, SentHalves
from ledgermq.spark.options import parse_write_options
from tests.compat.cluster import Cluster
from tests.spark.helpers import create_topic

pytestmark = pytest.mark.slow

SCHEMA = "key string, value string"


def keys_in(spark: Any, cluster: Cluster, topic: str, expect: int, timeout: float = 20.0) -> list[str]:
    """The keys of every message of ``topic``, once ``expect`` are there (or the deadline passed)."""
    deadline = time.monotonic() + timeout
    while True:
        df = spark.read.format("ledgermq").option("namesrvAddr", cluster.namesrv_addr).option("subscribe", topic)
        got = sorted(r.key for r in df.load().select("key").collect())
        if len(got) >= expect or time.monotonic() > deadline:
            return got


def arrow_rows(keys: list[str]) -> Any:
    import pyarrow as pa

    return pa.RecordBatch.from_pydict({"key": keys, "value": [f"v-{k}".encode() for k in keys]})


def test_batch_write_exactly_once(spark: Any, cluster: Cluster) -> None:
    topic = "SparkEoBatch"
    create_topic(cluster.namesrv_addr, [cluster.broker_addr], topic, queues=2)
    rows = [(f"k{i}", f"v{i}") for i in range(300)]
    (
        spark.createDataFrame(rows, SCHEMA)
        .repartition(3)
        .write.format("ledgermq")
        .option("namesrvAddr", cluster.namesrv_addr)
        .option("topic", topic)
        .option("exactlyOnce", "true")
        .mode("append")
        .save()
    )
    got = keys_in(spark, cluster, topic, 300)
    assert got == sorted(k for k, _ in rows)


def test_stream_needs_a_checkpoint_location_option(spark: Any, cluster: Cluster) -> None:
    opts = parse_write_options({"namesrvAddr": cluster.namesrv_addr, "topic": "T", "exactlyOnce": "true"})
    from ledgermq.spark.sink import make_stream_writer

    schema = spark.createDataFrame([("a", "b")], SCHEMA).schema
    with pytest.raises(ValueError, match="checkpointLocation"):
        make_stream_writer({"namesrvAddr": cluster.namesrv_addr, "topic": "T", "exactlyOnce": "true"}, schema, False)
    assert opts.exactly_once


def test_halves_stay_invisible_until_commit_and_a_rerun_commits_nothing_twice(
    spark: Any, cluster: Cluster, tmp_path: Path
) -> None:
    topic = "SparkEoRerun"
    create_topic(cluster.namesrv_addr, [cluster.broker_addr], topic, queues=2)
    opts = parse_write_options(
        {"namesrvAddr": cluster.namesrv_addr, "topic": topic, "exactlyOnce": "true", "checkpointLocation": "/x/eo1"}
    )
    write_id = "qtest-rerun"
    first = HalfSender(opts, write_id).write(iter([arrow_rows([f"a{i}" for i in range(50)])]))
    assert isinstance(first, SentHalves) and first.messages == 50
    time.sleep(1.0)
    assert keys_in(spark, cluster, topic, 1, timeout=0.5) == []  # halves are invisible
    commit_write(opts, write_id, 7, [first], fresh=False)
    assert keys_in(spark, cluster, topic, 50) == sorted(f"a{i}" for i in range(50))
    # the batch runs again (a driver that died before Spark recorded it): its rows are rolled back
    again = HalfSender(opts, write_id).write(iter([arrow_rows([f"a{i}" for i in range(50)])]))
    commit_write(opts, write_id, 7, [again], fresh=False)
    # the next batch still commits
    nxt = HalfSender(opts, write_id).write(iter([arrow_rows(["b0", "b1"])]))
    commit_write(opts, write_id, 8, [nxt], fresh=False)
    got = keys_in(spark, cluster, topic, 52)
    time.sleep(1.0)
    got = keys_in(spark, cluster, topic, 53, timeout=0.5)
    assert got == sorted([f"a{i}" for i in range(50)] + ["b0", "b1"])


def test_a_half_finished_commit_is_finished_by_the_next_run(spark: Any, cluster: Cluster) -> None:
    topic = "SparkEoFinish"
    create_topic(cluster.namesrv_addr, [cluster.broker_addr], topic, queues=2)
    opts = parse_write_options({"namesrvAddr": cluster.namesrv_addr, "topic": topic, "exactlyOnce": "true"})
    write_id, batch = "qtest-finish", 3
    sent = HalfSender(opts, write_id).write(iter([arrow_rows([f"c{i}" for i in range(40)])]))
    halves = sent.halves
    # the dead driver: wrote its started record, committed the first 15 halves, then died
    with Coordinator(opts, write_id, batch) as c:
        record = StartedRecord("tok", halves, c.session.run(c.start_offsets(halves)))
        c.session.run(c._send_record_messages(started_messages(opts.commit_topic, write_id, batch, record)))
        assert c.session.run(c._end_many(halves, range(15), _commit())) == []
    assert keys_in(spark, cluster, topic, 15) == sorted(f"c{i}" for i in range(15))
    # the restarted query re-runs the batch with new halves of the same rows
    rerun = HalfSender(opts, write_id).write(iter([arrow_rows([f"c{i}" for i in range(40)])]))
    commit_write(opts, write_id, batch, [rerun], fresh=False)
    keys_in(spark, cluster, topic, 41, timeout=3)
    assert keys_in(spark, cluster, topic, 41, timeout=0.5) == sorted(f"c{i}" for i in range(40))


def _commit() -> Any:
    from ledgermq.client import LocalTransactionState

    return LocalTransactionState.COMMIT_MESSAGE
