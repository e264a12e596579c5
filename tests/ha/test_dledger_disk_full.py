"""A full disk on the DLedger leader, with real processes (the chaos layout: a name server
and three brokers n0, n1, n2, each with its disk-full failpoints armed on a flag file).

While the flag exists, creating a segment and writing a state file (the DLedger checkpoint)
raise ENOSPC, so the leader's Raft driver fail-stops. The broker must say so
(dledgerStatus ``failed``/``state``), stop being the master (the others elect a leader and
sends go on), keep trying to restart its driver while the disk is full, and once the flag
is gone restart it by itself, catch up with the group (every acknowledged message on it,
its commit index moving with the leader's) and be able to lead again.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from ledgermq.admin.client import AdminClient
from ledgermq.admin.model import DLedgerStatus
from ledgermq.chaos.dledger import DLedgerLayout
from ledgermq.chaos.proxy import FaultProxy
from ledgermq.chaos.readback import read_broker
from ledgermq.client import Message, Producer
from ledgermq.client.message import SendStatus

TOPIC = "DiskFullTopic"
QUEUES = 4


async def _status(layout: DLedgerLayout, node: str) -> DLedgerStatus | None:
    try:
        async with AdminClient(layout.namesrv_addr, timeout=2.0, connect_timeout=1.0) as admin:
            return await admin.dledger_status(layout.node(node).addr)
    except Exception:
        return None


async def _until(what: str, check: object, timeout: float, layout: DLedgerLayout) -> None:
    deadline = time.monotonic() + timeout
    while not await check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"{what} not within {timeout:.0f} s{layout.explain()}"
        await asyncio.sleep(0.1)


class Sender:
    """Sends numbered messages one at a time and keeps what was acknowledged."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self.seq = 0
        self.acked: set[int] = set()

    async def send(self) -> bool:
        self.seq += 1
        body = f"seq={self.seq} sender=0;".encode() + b"x" * 200
        try:
            r = await self.producer.send(Message(TOPIC, body, keys=[f"k{self.seq}"]))
        except Exception:
            return False
        if r.status is SendStatus.SEND_OK:
            self.acked.add(self.seq)
            return True
        return False

    async def send_for(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if not await self.send():
                await asyncio.sleep(0.02)


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_leader_whose_disk_filled_restarts_its_raft_driver_and_catches_up(tmp_path: Path) -> None:
    layout = DLedgerLayout(tmp_path)

    async def run() -> None:
        proxies = [FaultProxy(link.listen, link.target, link.name) for link in layout.links()]
        for proxy in proxies:  # the layout's Raft links go through them (they stay healthy here)
            await proxy.start()
        try:
            await scenario()
        finally:
            for proxy in proxies:
                await proxy.close()

    async def scenario() -> None:
        await layout.start()
        leader = await layout.wait_master(20)
        assert leader is not None
        async with AdminClient(layout.namesrv_addr, timeout=5.0) as admin:
            await admin.create_topic(layout.node(leader).addr, TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        producer = Producer("disk-full-pg", layout.namesrv_addr, send_timeout=3.0)
        await producer.start()
        try:
            sender = Sender(producer)
            await sender.send_for(1.0)
            assert len(sender.acked) > 20, layout.explain()

            # The leader's disk fills: its driver fail-stops, another member takes over.
            layout.node(leader).disk_full_flag.touch()
            failed_at: list[DLedgerStatus] = []

            async def leader_failed() -> bool:
                await sender.send()
                st = await _status(layout, leader)
                if st is not None and st.failed and st.state == "failed":
                    failed_at.append(st)
                    return True
                return False

            await _until(f"{leader}'s driver failing on the full disk", leader_failed, 30, layout)
            assert "No space left" in failed_at[0].failed or "cannot create segment" in failed_at[0].failed
            assert failed_at[0].role != "LEADER"

            async def another_master() -> bool:
                await sender.send()
                now = await layout.current_master()
                return now is not None and now != leader

            await _until("another member registered as master", another_master, 20, layout)
            await sender.send_for(3.0)  # the disk stays full: restarts keep failing
            st = await _status(layout, leader)
            assert st is not None and st.state == "failed", st
            assert st.role != "LEADER"

            # The disk is free again: the driver restarts by itself and the node catches up.
            layout.node(leader).disk_full_flag.unlink()
            await sender.send_for(1.0)

            async def caught_up() -> bool:
                mine = await _status(layout, leader)
                master = await layout.current_master()
                if mine is None or master is None or mine.state != "running":
                    return False
                theirs = await _status(layout, master)
                return theirs is not None and mine.commit_index == theirs.commit_index > failed_at[0].commit_index

            await _until(f"{leader} restarted and caught up", caught_up, 30, layout)
            mine = await _status(layout, leader)
            assert mine is not None and mine.driver_failures >= 1 and not mine.failed

            # Every acknowledged message is on the node whose disk filled.
            stability = await layout.wait_stable(30)
            assert stability.stable, stability.detail
            # Its commit log is at the leader's end; its consume queues follow as its reput
            # dispatches what it caught up on, so read until they hold everything (bounded).
            deadline = time.monotonic() + 15
            while True:
                back = await read_broker(leader, layout.node(leader).addr, TOPIC, QUEUES)
                assert not back.errors, back.errors
                held = {e[0] for table in back.queues.values() for e in table.values() if e is not None}
                missing = sender.acked - held
                if not missing or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)
            assert not missing, f"{len(missing)} acknowledged messages missing from {leader}: {sorted(missing)[:10]}"

            # It can lead again, and sends go on through it.
            master = await layout.current_master()
            assert master is not None
            async with AdminClient(layout.namesrv_addr, timeout=10.0) as admin:
                await admin.dledger_transfer_leader(layout.node(master).addr, leader, timeout=10.0)

            async def leads_again() -> bool:
                return await layout.current_master() == leader and await sender.send()

            await _until(f"{leader} leading again and taking sends", leads_again, 20, layout)
        finally:
            await producer.shutdown()

    try:
        asyncio.run(run())
    finally:
        layout.close()
