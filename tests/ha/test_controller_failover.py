"""Controller mode between real processes: a name server with the controller inside, two brokers.

``kill -9`` of the master under steady sends from our producer: the slave is elected and takes writes (the time
from the kill to the first SEND_OK it answers is printed: ``pytest -s``), every send answered SEND_OK is read back
from the new master's store message by message, and the old master, started again, comes back as a slave, truncates
what it held beyond the new master's epoch start, and ends with the same commit log.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from pathlib import Path

import pytest

from ledgermq.admin.client import AdminClient
from ledgermq.client.message import Message, SendStatus
from ledgermq.client.producer.producer import Producer
from ledgermq.protocol.msgid import decode_offset_msg_id
from tests.compat.cluster import wait_until
from tests.ha.controller_group import ControllerGroup
from tests.ha.process_group import BrokerProc, assert_identical, open_store, queue_bodies

TOPIC = "CtlFailoverTopic"
QUEUES = 4


# One seeded run in the suite; LEDGERMQ_FAILOVER_SEEDS=1,2,3,4,5 runs more (the timing docs/controller.md quotes).
SEEDS = [int(s) for s in os.environ.get("LEDGERMQ_FAILOVER_SEEDS", "1").split(",") if s.strip()]


def body(seq: int, size: int = 100) -> bytes:
    return f"ctl-{seq:06d}-".encode() + b"y" * size


def create_topic(group: ControllerGroup, master: BrokerProc, slave: BrokerProc) -> None:
    """The topic on the master, copied to the slave by its metadata sync."""

    async def create() -> None:
        async with AdminClient(group.namesrv_addr, timeout=3.0) as admin:
            await admin.create_topic(master.addr, TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)

    async def on_slave() -> bool:
        async with AdminClient(group.namesrv_addr, timeout=2.0) as admin:
            try:
                return len(await admin.topic_stats(slave.addr, TOPIC)) == QUEUES
            except Exception:
                return False

    asyncio.run(create())
    wait_until("the slave to copy the topic", lambda: asyncio.run(on_slave()), 10)


async def sends_across_a_kill(
    group: ControllerGroup, master: BrokerProc, new_master: BrokerProc, seed: int
) -> tuple[dict[int, tuple[int, int, bytes]], float]:
    """Two senders; the master is SIGKILLed after a seeded number (40-99) of acknowledged sends; they go on until
    ``new_master`` has acknowledged 40. Bodies have seeded sizes. (seq -> (queue, offset, body) of every SEND_OK,
    seconds from the kill to the first SEND_OK answered by the new master)."""
    rng = random.Random(seed)
    kill_after = rng.randrange(40, 100)
    sizes = [rng.randrange(16, 2048) for _ in range(4096)]
    acked: dict[int, tuple[int, int, bytes]] = {}
    new_addr = ("127.0.0.1", new_master.port)
    killed_at: list[float] = []
    new_acks: list[float] = []
    seqs = iter(range(100_000))
    async with Producer("ctl-pg", group.namesrv_addr, send_timeout=5.0, retry_times=4) as producer:

        async def sender() -> None:
            for seq in seqs:
                if len(new_acks) >= 40:
                    return
                data = body(seq, sizes[seq % len(sizes)])
                try:
                    res = await producer.send(Message(TOPIC, data))
                except Exception:
                    continue
                if res.status is not SendStatus.SEND_OK:
                    continue
                acked[seq] = (res.queue.queue_id, res.queue_offset, data)
                host, _ = decode_offset_msg_id(res.offset_msg_id)
                if killed_at and host == new_addr:
                    new_acks.append(time.monotonic())
                if len(acked) >= kill_after and not killed_at:
                    assert master.server.proc is not None
                    master.server.proc.send_signal(signal.SIGKILL)
                    killed_at.append(time.monotonic())

        await asyncio.wait_for(asyncio.gather(sender(), sender()), 60)
    assert killed_at and new_acks, f"no SEND_OK from the new master ({len(acked)} acknowledged)"
    return acked, min(new_acks) - killed_at[0]


@pytest.mark.parametrize("seed", SEEDS)
def test_kill_9_of_the_master_elects_the_slave_and_loses_no_acknowledged_send(tmp_path: Path, seed: int) -> None:
    group = ControllerGroup(tmp_path, allAckInSyncStateSet="true", slaveSyncInterval=300)
    a = group.add_broker("a")
    b = group.add_broker("b")
    try:
        group.start_pair(a, b)
        create_topic(group, a, b)
        acked, took = asyncio.run(sends_across_a_kill(group, a, b, seed=seed))
        print(f"\nseed {seed}: kill -9 -> first SEND_OK from the new master: {took * 1000:.0f} ms")
        group.wait_role(b, "MASTER", 5)
        # the old master returns as a slave and ends with the new master's log
        group.start_broker(a, "SLAVE")
        group.wait_sync_state_set(b, 2)
        group.wait_caught_up(b, [a], 20)
        group.stop(a)
        group.stop(b)
        assert_identical(b, a, all_segments=True)
        store = open_store(b)
        try:
            on_new: dict[tuple[int, int], bytes] = {}
            for q in range(QUEUES):
                on_new.update({(q, off): data for off, data in queue_bodies(store, TOPIC, q).items()})
        finally:
            store.shutdown()
        missing = [seq for seq, (q, off, data) in acked.items() if on_new.get((q, off)) != data]
        assert not missing, f"{len(missing)} acknowledged sends are not on the new master: {missing[:10]}"
    finally:
        group.close()
