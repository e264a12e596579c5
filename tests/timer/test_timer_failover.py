"""Timers pending when the master (or DLedger leader) is SIGKILLed: every one is delivered
after the failover or restart; duplicates are counted and stay within the documented
window (docs/timers.md). Real processes on 127.0.0.1."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

from ledgermq.admin.client import AdminClient
from ledgermq.client import Message, Producer
from ledgermq.client.message import SendStatus
from tests.compat.cluster import tcp_open, wait_until
from tests.ha.controller_group import ControllerGroup
from tests.ha.dledger_group import TOPIC, DLedgerGroup
from tests.ha.process_group import BrokerProc, HAGroup, open_store, queue_bodies

TIMERS = 200
PRECISION = {"timerPrecisionMs": 100, "timerFlushIntervalMs": 200}


async def send_timers(namesrv: str, topic: str, first_s: float, spread_s: float) -> list[bytes]:
    """TIMERS timers due between first_s and first_s + spread_s from now; the acknowledged bodies."""
    acked: list[bytes] = []
    producer = Producer("timer-pg", namesrv, send_timeout=3.0)
    await producer.start()
    try:
        for i in range(TIMERS):
            delay = first_s + spread_s * i / TIMERS
            body = f"timer-{i:04d}".encode()
            r = await producer.send(Message(topic, body, keys=[str(i)], delay=delay))
            if r.status is SendStatus.SEND_OK:
                acked.append(body)
    finally:
        await producer.shutdown()
    return acked


def pending_timers(namesrv: str, addr: str) -> int:
    """The broker's pending timers (brokerStatus timerPending), -1 when it does not answer."""

    async def ask() -> int:
        async with AdminClient(namesrv, timeout=2.0, connect_timeout=1.0) as admin:
            info = await admin.broker_runtime_info(addr)
            return int(info["timerPending"]) if info.get("timerReadBehind") is not None else -1

    try:
        return asyncio.run(ask())
    except Exception:
        return -1


def delivered(bodies_by_queue: dict[int, dict[int, bytes]]) -> Counter[bytes]:
    return Counter(b for q in bodies_by_queue.values() for b in q.values() if b.startswith(b"timer-"))


def delivered_on(broker: BrokerProc) -> Counter[bytes]:
    """The timers a stopped broker's store holds on TimerTopic, each with how often."""
    store = open_store(broker)
    try:
        got: Counter[bytes] = Counter()
        for qid in range(8):
            got.update(x for x in queue_bodies(store, "TimerTopic", qid).values() if x.startswith(b"timer-"))
        return got
    finally:
        store.shutdown()


def test_a_killed_dledger_leader_leaves_no_timer_undelivered(tmp_path: Path) -> None:
    group = DLedgerGroup(tmp_path, extra=PRECISION)
    report: dict[str, object] = {}
    try:
        group.start()
        first = group.master()
        assert first is not None
        acked = asyncio.run(send_timers(group.namesrv_addr, TOPIC, 3.0, 6.0))
        assert len(acked) == TIMERS, group.explain()
        time.sleep(4.5)  # some delivered, most pending; followers have synced the progress
        group.brokers[first].kill()
        wait_until("a new leader", lambda: group.master() not in (None, first), 30, 0.1, group.explain)
        second = group.master()
        assert second is not None
        settled = lambda: pending_timers(group.namesrv_addr, group.addr(second)) == 0  # noqa: E731
        wait_until("the new leader to deliver every pending timer", settled, 40, 0.25, group.explain)
        for b in group.brokers.values():
            if b.alive:
                assert b.stop() == 0, group.explain()
        got = delivered(group.store_queues(second))
        report = {"leaders": (first, second), "delivered": len(got), "duplicates": sum(got.values()) - len(got)}
    finally:
        group.close()
    print(f"\nDLedger timer failover: {report}")
    missing = [b for b in acked if b not in got]
    assert not missing, f"{len(missing)} timers never delivered, e.g. {missing[:5]}"
    # the window (docs/timers.md): the one delivery in flight when the leader died; the rest
    # the new leader learned from the delivered records it holds (LEDGERMQ_TIMER_FROM)
    assert sum(got.values()) - len(got) <= 1


def test_a_leader_demoted_and_promoted_again_within_seconds_loses_no_timer(tmp_path: Path) -> None:
    """transferLeader away from the leader and back while timers come due: delivery stops
    and starts twice on the same broker; every timer is delivered, duplicates stay within
    the documented window."""
    group = DLedgerGroup(tmp_path, extra=PRECISION)
    report: dict[str, object] = {}
    try:
        group.start()
        first = group.master()
        assert first is not None
        other = next(n for n in group.ids if n != first)
        acked = asyncio.run(send_timers(group.namesrv_addr, TOPIC, 2.0, 6.0))
        assert len(acked) == TIMERS, group.explain()
        time.sleep(2.5)  # delivery under way

        async def transfer(leader: str, target: str) -> None:
            async with AdminClient(group.namesrv_addr, timeout=3.0) as admin:
                await admin.dledger_transfer_leader(group.addr(leader), target, timeout=10.0)

        started = time.monotonic()
        asyncio.run(transfer(first, other))
        wait_until("the other member to lead", lambda: group.master() == other, 20, 0.05, group.explain)
        time.sleep(1.0)  # the other member delivers for a while
        asyncio.run(transfer(other, first))
        wait_until("the first leader back", lambda: group.master() == first, 20, 0.05, group.explain)
        flipped_s = time.monotonic() - started
        settled = lambda: pending_timers(group.namesrv_addr, group.addr(first)) == 0  # noqa: E731
        wait_until("every pending timer delivered", settled, 40, 0.25, group.explain)
        for b in group.brokers.values():
            assert b.stop() == 0, group.explain()
        got = delivered(group.store_queues(first))
        report = {"flipped_s": round(flipped_s, 2), "delivered": len(got), "duplicates": sum(got.values()) - len(got)}
    finally:
        group.close()
    print(f"\nDLedger demote and promote: {report}")
    assert not [b for b in acked if b not in got]
    assert sum(got.values()) - len(got) <= 2  # at most the delivery in flight at each handover


def test_a_killed_master_delivers_every_timer_after_its_restart(tmp_path: Path) -> None:
    group = HAGroup(tmp_path, **PRECISION)
    master = group.add("m", 0, "ASYNC_MASTER", flushDiskType="SYNC_FLUSH")
    slave = group.add("s", 1, "SLAVE")
    try:
        group.start_namesrv()
        group.start(master)
        group.start(slave)
        acked = asyncio.run(send_timers(group.namesrv_addr, "TimerTopic", 2.0, 4.0))
        assert len(acked) == TIMERS, group.explain()
        time.sleep(3.0)
        group.kill(master)
        group.start(master)
        wait_until("the master's port", lambda: tcp_open(master.port), 20)
        settled = lambda: pending_timers(group.namesrv_addr, master.addr) == 0  # noqa: E731
        wait_until("the master to deliver every pending timer", settled, 40, 0.25, group.explain)
        assert master.server.stop() == 0 and slave.server.stop() == 0
        got = delivered_on(master)
    finally:
        group.close()
    dups = sum(got.values()) - len(got)
    print(f"\nmaster kill and restart: delivered {len(got)} of {len(acked)}, duplicates {dups}")
    assert not [b for b in acked if b not in got]
    assert dups <= TIMERS // 4  # at most timerFlushIntervalMs of deliveries and filing


def test_a_killed_controller_mode_master_leaves_no_timer_undelivered(tmp_path: Path) -> None:
    """Controller mode: the slave is elected, takes delivery over from the master's progress
    it replicated, and delivers every pending timer; the old master is not restarted."""
    group = ControllerGroup(tmp_path, allAckInSyncStateSet="true", **PRECISION)
    a = group.add_broker("a")
    b = group.add_broker("b")
    report: dict[str, object] = {}
    try:
        group.start_pair(a, b)
        acked = asyncio.run(send_timers(group.namesrv_addr, "TimerTopic", 2.0, 4.0))
        assert len(acked) == TIMERS, group.explain()
        some_delivered = lambda: 0 <= pending_timers(group.namesrv_addr, a.addr) < TIMERS * 3 // 4  # noqa: E731
        wait_until("the master to deliver a part of the timers", some_delivered, 30, 0.05, group.explain)
        group.kill(a)
        killed = time.monotonic()
        group.wait_role(b, "MASTER", 15)
        report["elected_s"] = round(time.monotonic() - killed, 2)
        settled = lambda: pending_timers(group.namesrv_addr, b.addr) == 0  # noqa: E731
        wait_until("the new master to deliver every pending timer", settled, 40, 0.25, group.explain)
        assert b.server.stop() == 0
        got = delivered_on(b)
        report.update(delivered=len(got), duplicates=sum(got.values()) - len(got))
    finally:
        group.close()
    print(f"\ncontroller-mode master kill: {report}")
    assert not [x for x in acked if x not in got]
    # allAckInSyncStateSet: each delivery the old master acknowledged reached the slave, so
    # at most the deliveries in flight at the kill (written, not yet replicated) come twice
    assert sum(got.values()) - len(got) <= 32
