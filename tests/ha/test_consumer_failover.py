"""A push consumer of the Apache C++ client (``rocketmq`` wheel) across a master outage, with real processes.

A name server and a broker group (master + slave) run as processes (``tests.compat.cluster.Cluster`` for the name
server and the master, a second broker process for the slave). The consumer group first consumes batch A from the
master and leaves (committing its offsets). Batch B is stored and replicated; the master is killed with SIGKILL;
the group comes back while the master is down and consumes B from the slave, committing its offsets there. The
master restarts on the same port and store, batch C is sent, and the same consumer receives C. No message may be
lost; duplicates are counted and reported (allowed, as in RocketMQ).
"""

from __future__ import annotations

import asyncio
import collections
import time
from pathlib import Path
from typing import Any

import pytest

from ledgermq.admin.client import AdminClient
from ledgermq.broker.metadata_log import read_current
from tests.compat.cluster import HAVE_CPP_CLIENT, HOST, Cluster, ServerProcess, free_port, route, tail, wait_until

pytestmark = pytest.mark.skipif(
    not HAVE_CPP_CLIENT, reason="the Apache RocketMQ C++ client wheel (rocketmq==0.4.4, the 'test' extra) is missing"
)

TOPIC = "HaFailoverTopic"
GROUP = "ha-failover-cg"
UID = "ha_uid"
FAST = {"registerNameServerPeriod": 1000, "haSendHeartbeatInterval": 1000, "slaveSyncInterval": 1000}


def messages(prefix: str, count: int) -> list[dict[str, Any]]:
    return [{"topic": TOPIC, "body": f"{prefix} body {i}", "props": {UID: f"{prefix}-{i:03d}"}} for i in range(count)]


def send_step(msgs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"op": "send", "mode": "sync", "group": "ha-failover-pg", "messages": msgs}


def push_step(uids: list[str], timeout: float, hold: bool = False) -> dict[str, Any]:
    return {"op": "push", "group": GROUP, "topic": TOPIC, "uid_prop": UID, "expect_uids": uids, "props": [],
            "timeout": timeout, "settle": 2.0, "hold": hold}  # fmt: skip


def create_topic(cluster: Cluster) -> None:
    """The topic made on the master and routed before the C++ client's first send: the
    wheel's client fails a send to a topic it cannot route at once ("No route info of this
    topic") when its lookup of the auto-create fallback times out on a loaded machine, and
    the failover, not auto-creation, is what these tests are about."""

    async def make() -> None:
        async with AdminClient(cluster.namesrv_addr, timeout=5.0) as admin:
            await admin.create_topic(cluster.broker_addr, TOPIC, read_queue_nums=4, write_queue_nums=4)

    asyncio.run(make())
    cluster.wait_route(TOPIC, 30.0)


def uids(msgs: list[dict[str, Any]]) -> list[str]:
    return [m["props"][UID] for m in msgs]


class Slave:
    """The master's slave (brokerId 1) as a second broker process of the cluster's group."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.port = free_port(span=2)
        self.addr = f"{HOST}:{self.port}"
        self.store_dir = cluster.root / "slave-store"
        props = dict(line.split("=", 1) for line in cluster.broker_conf.read_text().splitlines() if "=" in line)
        props.update(brokerId="1", brokerRole="SLAVE", listenPort=str(self.port), storePathRootDir=str(self.store_dir))
        self.conf = cluster.root / "slave.properties"
        self.conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        self.server = ServerProcess("slave", ["broker", "-c", str(self.conf)], cluster.root / "slave.log")

    def start(self) -> None:
        self.server.start()
        wait_until("the slave's registration", self.registered, 20, 0.1, self.explain)

    def registered(self) -> bool:
        self.server.check_alive()
        data = route(self.cluster.namesrv_addr, "TBW102")
        return data is not None and any(b.broker_addrs.get(1) == self.addr for b in data.broker_datas)

    def persisted_offsets(self) -> dict[int, int]:
        try:
            doc = read_current(self.store_dir / "config" / "consumerOffset.json", "offsetTable")
        except Exception:
            return {}
        table = (doc.get("offsetTable") or {}).get(f"{TOPIC}@{GROUP}") or {}
        return {int(q): int(o) for q, o in table.items()}

    def explain(self) -> str:
        return f"{self.cluster.explain()}\n--- slave log ---\n{tail(self.server.log_path, 30)}"


def max_offset(namesrv: str, addr: str) -> int:
    async def ask() -> int:
        async with AdminClient(namesrv, timeout=2.0, connect_timeout=1.0) as admin:
            return int((await admin.broker_runtime_info(addr))["commitLogMaxOffset"])

    try:
        return asyncio.run(ask())
    except Exception:
        return -1


def queue_ends(records: list[dict[str, Any]]) -> dict[int, int]:
    ends: dict[int, int] = {}
    for r in records:
        ends[r["queue_id"]] = max(ends.get(r["queue_id"], 0), r["queue_offset"] + 1)
    return ends


def covers(have: dict[int, int], want: dict[int, int]) -> bool:
    return all(have.get(q, -1) >= o for q, o in want.items())


def test_push_consumer_reads_from_the_slave_while_the_master_is_down(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "cluster", broker_name="broker-ha-f", **FAST)
    slave = Slave(cluster)
    batch_a, batch_b, batch_c = messages("A", 20), messages("B", 30), messages("C", 20)
    try:
        cluster.start()
        slave.start()
        create_topic(cluster)
        sent_a, push_a = cluster.send_and_consume(TOPIC, [send_step(batch_a), push_step(uids(batch_a), 30)])
        assert [r["status"] for r in sent_a["results"]] == ["OK"] * len(batch_a)
        got_a = push_a["messages"]
        assert set(uids(batch_a)) <= {r["props"][UID] for r in got_a}
        a_ends = queue_ends(got_a)
        wait_until("the slave to copy the group's offsets", lambda: covers(slave.persisted_offsets(), a_ends), 15)

        (sent_b,) = cluster.run_client([send_step(batch_b)])
        assert [r["status"] for r in sent_b["results"]] == ["OK"] * len(batch_b)
        target = max_offset(cluster.namesrv_addr, cluster.broker_addr)
        wait_until("the slave to catch up", lambda: max_offset(cluster.namesrv_addr, slave.addr) == target, 15)

        cluster.broker.kill()  # kill -9 the master; the name server drops it when its connection closes
        wait_until("the name server to drop the master", lambda: not cluster.broker_registered(False), 15)
        consumer = cluster.start_client([push_step(uids(batch_b) + uids(batch_c), 75)])
        started = time.monotonic()
        wait_until(
            "the consumer to commit batch B's offsets to the slave",
            lambda: sum(slave.persisted_offsets().values()) >= len(batch_a) + len(batch_b),
            45,
            0.5,
            lambda: f"slave offsets {slave.persisted_offsets()}{slave.explain()}",
        )
        b_ends = slave.persisted_offsets()
        b_took = time.monotonic() - started

        cluster.start_broker()  # the master returns on the same port and store
        (sent_c,) = cluster.run_client([send_step(batch_c)])
        assert [r["status"] for r in sent_c["results"]] == ["OK"] * len(batch_c)
        (push_bc,) = consumer.release(timeout=90)
    finally:
        slave.server.kill()
        cluster.close()

    got = got_a + push_bc["messages"]
    counts = collections.Counter(r["props"][UID] for r in got)
    missing = sorted(set(uids(batch_a + batch_b + batch_c)) - set(counts))
    duplicates = {u: n - 1 for u, n in counts.items() if n > 1}
    print(
        f"\nconsumer failover: {len(got)} received, {len(counts)} distinct, {sum(duplicates.values())} duplicates "
        f"({sorted(duplicates)[:10]}), consumer 2 took {push_bc['elapsed']:.1f}s, "
        f"B committed to the slave after {b_took:.1f}s ({b_ends})"
    )
    assert push_bc["complete"], f"the consumer did not receive everything; missing {missing}"
    assert not missing, missing
