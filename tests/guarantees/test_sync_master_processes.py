"""Guarantee 1 with real processes: a name server, a SYNC_MASTER broker and a real slave.

The slave is SIGSTOPped (its HA connection stays open; it reads and acknowledges nothing),
then 256 SYNC_MASTER sends are pipelined over four raw connections (64 each). Once the
master has appended all of them (its commitLogMaxOffset, polled) none may be answered for
a while; after SIGCONT every one must be answered SEND_OK. Finally the slave is stopped
cleanly and its own store must hold, at the queue and queue offset each answer named (and
at the physical offset of its msgId), the body sent under that answer's opaque.

The in-process test (test_sync_master_pipelined) controls the acknowledged offset byte by
byte; this one shows the same waits hold between processes with the real HA client.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from ledgermq.admin.client import AdminClient
from ledgermq.protocol.codes import ResponseCode
from ledgermq.protocol.message import decode_record
from ledgermq.protocol.msgid import decode_offset_msg_id
from tests.compat.cluster import wait_until
from tests.guarantees.sends import QUEUES, body_for, send_request
from tests.guarantees.wire import Answer, Pipe, stays, until
from tests.ha.process_group import BrokerProc, HAGroup, open_store, queue_bodies

TOPIC = "GuardSyncProc"
SENDERS = 4
PER_SENDER = 64


async def max_offset(namesrv: str, b: BrokerProc) -> int:
    async with AdminClient(namesrv, timeout=2.0, connect_timeout=1.0) as admin:
        return int((await admin.broker_runtime_info(b.addr))["commitLogMaxOffset"])


async def probe(b: BrokerProc, opaque: int) -> int:
    """One send on a fresh connection; its response code."""
    pipe = await Pipe.open(b.port)
    try:
        pipe.write([send_request(TOPIC, 0, body_for("probe", opaque), opaque)])
        await until(lambda: opaque in pipe.answers, 10, "the probe's answer")
        return pipe.answers[opaque].response.code
    finally:
        await pipe.close()


async def pipelined_while_paused(group: HAGroup, master: BrokerProc, slave: BrokerProc) -> list[Pipe]:
    rng = random.Random(99)
    ns = group.namesrv_addr
    before = await max_offset(ns, master)
    assert await probe(master, 7) == ResponseCode.SUCCESS
    size = await max_offset(ns, master) - before  # every record of this test has this size
    pipes = [await Pipe.open(master.port) for _ in range(SENDERS)]
    try:
        group.pause(slave)
        try:
            base = await max_offset(ns, master)
            opaques = rng.sample(range(100, 2**31 - 1), SENDERS * PER_SENDER)
            for i, pipe in enumerate(pipes):
                share = range(i * PER_SENDER, (i + 1) * PER_SENDER)
                pipe.write(send_request(TOPIC, n, body_for("proc", n), opaques[n]) for n in share)
            target = base + size * SENDERS * PER_SENDER
            seen = [0]

            async def poll() -> None:
                seen[0] = await max_offset(ns, master)

            async def appended() -> None:
                while seen[0] != target:
                    await poll()
                    assert seen[0] <= target, (seen[0], target)
                    await asyncio.sleep(0.02)

            await asyncio.wait_for(appended(), 10)
            count = lambda: sum(len(p.answers) for p in pipes)  # noqa: E731
            await stays(lambda: count() == 0, 0.5, lambda: f"{count()} answered while the slave is stopped")
        finally:
            group.resume(slave)
        await until(lambda: count() == SENDERS * PER_SENDER, 15, lambda: f"{count()} answered after SIGCONT")
    finally:
        for p in pipes:
            await p.close()
    return pipes


def test_pipelined_sync_master_sends_wait_for_a_real_paused_slave(tmp_path: Path) -> None:
    group = HAGroup(tmp_path)
    master = group.add("m", 0, "SYNC_MASTER", syncFlushTimeout=30_000)
    slave = group.add("s", 1, "SLAVE")
    try:
        group.start_namesrv()
        group.start(master)
        group.start(slave)
        wait_until(
            "a SEND_OK with the slave up",
            lambda: asyncio.run(probe(master, 1)) == ResponseCode.SUCCESS,
            20,
            0.2,
            group.explain,
        )
        pipes = asyncio.run(pipelined_while_paused(group, master, slave))
        assert group.stop(slave) == 0, f"the slave did not shut down cleanly{group.explain()}"
    finally:
        group.close()

    answers: list[tuple[bytes, Answer]] = []
    for pipe in pipes:
        pipe.check_clean()
        assert set(pipe.answers) == set(pipe.sent)
        answers += [(pipe.sent[o].body, a) for o, a in pipe.answers.items()]
    assert len(answers) == SENDERS * PER_SENDER
    store = open_store(slave)  # the slave's own copy
    try:
        served = {q: queue_bodies(store, TOPIC, q) for q in range(QUEUES)}
        for body, answer in answers:
            resp = answer.response
            assert resp.code == ResponseCode.SUCCESS, resp
            queue_id, queue_offset = int(resp.ext_fields["queueId"]), int(resp.ext_fields["queueOffset"])
            assert served[queue_id].get(queue_offset) == body, f"opaque {resp.opaque}: not on the slave as answered"
            _, offset = decode_offset_msg_id(resp.ext_fields["msgId"])
            raw = store.look_message_by_offset(offset)
            assert raw is not None and decode_record(raw).body == body
    finally:
        store.shutdown()
