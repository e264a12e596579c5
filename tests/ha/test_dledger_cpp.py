"""Apache's C++ client (the ``rocketmq`` wheel), unmodified, against a DLedger group across a leader kill.

A name server and a 3-broker DLedger group as real processes (tests/ha/test_dledger_process.py). A C++ producer
child sends batch A; a long-running C++ producer sends one message after another while the leader (the group's
master) is SIGKILLed; a new C++ producer child sends batch B after the group elected a new master; a C++ push
consumer child then receives every acknowledged message. The long-running producer's route names the dead master
until the client's own route poll (pollNameServerInterval, 30 s) sees the new one: its sends fail meanwhile, which
is the C++ client's behaviour, measured and printed, not ledgermq's.
"""

from __future__ import annotations

import collections
import time
from pathlib import Path

import pytest

from tests.compat.cluster import HAVE_CPP_CLIENT, wait_until
from tests.ha.dledger_group import DLedgerGroup
from tests.ha.layout_group import Clients
from tests.ha.test_cpp_layouts import PRODUCER_GROUP, TOPIC, UID, messages, push_step, send_step, statuses, uids

pytestmark = pytest.mark.skipif(
    not HAVE_CPP_CLIENT, reason="the Apache RocketMQ C++ client wheel (rocketmq==0.4.4, the 'test' extra) is missing"
)
N = 30


def test_cpp_client_produces_and_consumes_across_a_dledger_leader_kill(tmp_path: Path) -> None:
    group = DLedgerGroup(tmp_path)
    clients = Clients(group)  # type: ignore[arg-type]  # duck-typed: root, namesrv_addr, explain()
    stream = None
    report: dict[str, object] = {}
    try:
        group.start()
        first = group.master()
        assert first is not None
        batch_a, batch_b = messages("A", N), messages("B", N)
        (sent_a,) = clients.run_client([send_step(batch_a)])
        assert statuses(sent_a) == ["OK"] * N, statuses(sent_a)

        stream = clients.start_stream(PRODUCER_GROUP, TOPIC, "S", UID, interval=0.05)
        stream.wait_sends("10 OK stream sends", lambda s: sum(e["status"] == "OK" for e in s) >= 10, 30)
        killed_at = time.time()
        group.brokers[first].kill()
        wait_until("a new master", lambda: group.master() not in (None, first), 20, 0.05, group.explain)
        report["kill -> new master registered s"] = round(time.time() - killed_at, 2)
        (sent_b,) = clients.run_client([send_step(batch_b)])  # a new client: fresh route, the new master
        report["kill -> batch B done s"] = round(time.time() - killed_at, 2)
        assert statuses(sent_b) == ["OK"] * N, statuses(sent_b)
        stream.wait_sends(
            "an OK stream send after the kill",
            lambda s: any(e["t"] > killed_at and e["status"] == "OK" for e in s),
            60,
        )
        (streamed,) = stream.release(timeout=20)
        sends = streamed["results"]
        first_ok = min(e["t"] for e in sends if e["t"] > killed_at and e["status"] == "OK")
        report["C++ long-running producer: kill -> next OK s"] = round(first_ok - killed_at, 2)
        report["its failed sends"] = sum(e["status"] != "OK" for e in sends)
        stream_ok = [e["uid"] for e in sends if e["status"] == "OK"]

        acked = uids(batch_a) + stream_ok + uids(batch_b)
        (push,) = clients.run_client([push_step(acked, 40)], timeout=80)
    finally:
        if stream is not None:
            stream.kill()
        clients.close()
        group.close()
    counts = collections.Counter(r["props"][UID] for r in push["messages"])
    lost = sorted(set(acked) - set(counts))
    print(f"\nC++ client across a DLedger leader kill: {report}; acked {len(acked)}, received {len(counts)}")
    assert push["complete"] and not lost, f"lost {lost[:20]}"
