"""Exactly-once reading across a master outage (reads from the slave) and a queue count change, with a
name server, a master and its slave as real processes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.compat.cluster import route, wait_until
from tests.ha.process_group import GROUP, HAGroup
from tests.spark.helpers import create_topic, rows_of, send
from tests.spark.queries import run_to_end

pytestmark = pytest.mark.slow

TOPIC = "SparkFailover"


def run_stream(spark: Any, namesrv: str, ckpt: Path, out: Path) -> list[int]:
    """An availableNow query into parquet; the input rows of its batches."""
    writer = (
        spark.readStream.format("ledgermq")
        .option("namesrvAddr", namesrv)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("pollTimeoutMs", "30000")
        .load()
        .select("topic", "broker", "queueId", "queueOffset", "value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
    )
    query = run_to_end(writer.start, 120)
    assert query.exception() is None, query.exception()
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def test_stream_reads_once_across_a_master_outage_and_a_queue_count_change(spark: Any, tmp_path: Path) -> None:
    group = HAGroup(tmp_path / "ha", slaveSyncInterval=1000)
    master = group.add("m", 0, "ASYNC_MASTER")
    slave = group.add("s", 1, "SLAVE")
    ns = group.namesrv_addr
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    try:
        group.start_namesrv()
        group.start(master)
        group.start(slave)
        create_topic(ns, [master.addr], TOPIC, queues=2)
        sent = send(ns, TOPIC, GROUP, {0: 6, 1: 4})
        assert run_stream(spark, ns, ckpt, out) == [10]

        sent += send(ns, TOPIC, GROUP, {0: 5, 1: 7}, first={0: 6, 1: 4})
        group.wait_caught_up(master, [slave], 20)
        group.kill(master)

        def master_gone() -> bool:
            data = route(ns, TOPIC)
            return data is not None and all(0 not in b.broker_addrs for b in data.broker_datas)

        wait_until("the name server to drop the dead master", master_gone, 30, 0.2, group.explain)
        # the checkpointed query goes on from the slave: only the 12 new messages
        assert run_stream(spark, ns, ckpt, out) == [12]
        batch = spark.read.format("ledgermq").option("namesrvAddr", ns).option("subscribe", TOPIC).load()
        assert len(rows_of(batch)) == 22  # a batch read is served by the slave too

        group.start(master)
        create_topic(ns, [master.addr], TOPIC, queues=4)  # two more queues while the query is down
        sent += send(ns, TOPIC, GROUP, {0: 1, 2: 3, 3: 2}, first={0: 11})
        assert run_stream(spark, ns, ckpt, out) == [6]

        got = rows_of(spark.read.parquet(str(out)))
        assert got == sorted((TOPIC, GROUP, q, off, b) for q, off, b in sent)  # every message exactly once
        offsets_file = max((p for p in (ckpt / "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
        last = json.loads(offsets_file.read_text().splitlines()[-1])
        assert last == {TOPIC: {f"{GROUP}:0": 12, f"{GROUP}:1": 11, f"{GROUP}:2": 3, f"{GROUP}:3": 2}}
    finally:
        group.close()
