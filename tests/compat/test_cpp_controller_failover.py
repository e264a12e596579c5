"""Apache's C++ client (the ``rocketmq`` wheel), unmodified, across a master kill in a two-replica
controller-mode group.

A name server with the controller inside and two brokers in controller mode
(allAckInSyncStateSet) as real processes (tests/ha/controller_group.py). A long-running C++
producer sends one message after another while the master is SIGKILLed; the controller
elects the slave, which registers with the name server as brokerId 0, and the same producer
resumes by itself once its route names the new master (the C++ client's own route poll:
nothing is done for it). A new C++ producer sends a batch to the new master; a C++ push
consumer then receives every acknowledged message.
"""

from __future__ import annotations

import asyncio
import collections
import time
from pathlib import Path

import pytest

from ledgermq.admin.client import AdminClient
from tests.compat.cluster import HAVE_CPP_CLIENT, wait_until
from tests.ha.controller_group import ControllerGroup
from tests.ha.layout_group import Clients
from tests.ha.test_cpp_layouts import PRODUCER_GROUP, QUEUES, TOPIC, UID, messages, push_step, send_step, statuses, uids

pytestmark = pytest.mark.skipif(
    not HAVE_CPP_CLIENT, reason="the Apache RocketMQ C++ client wheel (rocketmq==0.4.4, the 'test' extra) is missing"
)
N = 20
RESUME_TIMEOUT_S = 60.0  # the C++ client polls the name server for routes every 30 s


def _create_topic(group: ControllerGroup, master_addr: str, slave_addr: str) -> None:
    """The topic on the master; the slave copies it with its metadata sync."""

    async def create() -> None:
        async with AdminClient(group.namesrv_addr, timeout=3.0) as admin:
            await admin.create_topic(master_addr, TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)

    async def on_slave() -> bool:
        async with AdminClient(group.namesrv_addr, timeout=2.0) as admin:
            try:
                return len(await admin.topic_stats(slave_addr, TOPIC)) == QUEUES
            except Exception:
                return False

    asyncio.run(create())
    wait_until("the slave to copy the topic", lambda: asyncio.run(on_slave()), 15)


def test_cpp_producer_resumes_by_itself_after_the_controller_replaces_a_killed_master(tmp_path: Path) -> None:
    group = ControllerGroup(tmp_path, allAckInSyncStateSet="true", slaveSyncInterval=300)
    a = group.add_broker("a")
    b = group.add_broker("b")
    clients = Clients(group)  # type: ignore[arg-type]  # duck-typed: root, namesrv_addr, explain()
    stream = None
    report: dict[str, object] = {}
    try:
        group.start_pair(a, b)
        _create_topic(group, a.addr, b.addr)

        stream = clients.start_stream(PRODUCER_GROUP, TOPIC, "S", UID, interval=0.05)
        stream.wait_sends("10 OK stream sends", lambda s: sum(e["status"] == "OK" for e in s) >= 10, 30)
        killed_at = time.time()
        group.kill(a)
        group.wait_role(b, "MASTER", 10)
        report["kill -> slave serving as master s"] = round(time.time() - killed_at, 2)
        stream.wait_sends(
            "an OK stream send after the kill",
            lambda s: any(e["t"] > killed_at and e["status"] == "OK" for e in s),
            RESUME_TIMEOUT_S,
        )
        (sent_b,) = clients.run_client([send_step(messages("B", N))])  # a new client: the new master at once
        assert statuses(sent_b) == ["OK"] * N, statuses(sent_b)
        (streamed,) = stream.release(timeout=20)
        sends = streamed["results"]
        first_ok = min(e["t"] for e in sends if e["t"] > killed_at and e["status"] == "OK")
        report["C++ long-running producer: kill -> next OK s"] = round(first_ok - killed_at, 2)
        report["its failed sends"] = sum(e["status"] != "OK" for e in sends)
        acked = [e["uid"] for e in sends if e["status"] == "OK"] + uids(messages("B", N))
        (push,) = clients.run_client([push_step(acked, 40)], timeout=80)
    finally:
        if stream is not None:
            stream.kill()
        clients.close()
        group.close()
    counts = collections.Counter(r["props"][UID] for r in push["messages"])
    lost = sorted(set(acked) - set(counts))
    print(f"\nC++ client across a controller-mode master kill: {report}; acked {len(acked)}, received {len(counts)}")
    assert push["complete"] and not lost, f"lost {lost[:20]}"
