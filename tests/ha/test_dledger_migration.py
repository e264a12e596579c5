"""Moving a master-slave group to DLedger mode, with real processes (docs/dledger.md,
"Moving a master-slave group to DLedger").

A native SYNC_MASTER and its SLAVE take messages from our client and a consumer group's
offsets, and are stopped cleanly. The group restarts as three DLedger brokers: n0 on the
old master's store, n1 on the old slave's store (its commit log identical, the master's
config/ copied over it), n2 on a copy of the master's store, as RocketMQ's upgrade guide
says. Every old message is readable on every member by queue offset and by key, the
consumer offsets survive, new sends are SEND_OK at queue offsets after the old ones, and
after a SIGKILL of the leader the new leader serves old and new messages. A member that
starts with an empty store is refused (it exits naming the difference) and the others
run without it.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import pytest

from ledgermq.admin.client import AdminClient
from ledgermq.chaos.readback import ReadBack, read_broker
from ledgermq.client import Message, Producer
from ledgermq.client.message import SendStatus
from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from tests.compat.cluster import tail, tcp_open, wait_until
from tests.ha.dledger_group import QUEUES, TOPIC, DLedgerGroup
from tests.ha.process_group import HAGroup

CG = "migration-cg"
OLD = 160


async def _send(producer: Producer, seq: int) -> tuple[int, int] | None:
    body = f"seq={seq} sender=0;".encode() + b"m" * 100
    try:
        r = await producer.send(Message(TOPIC, body, keys=[f"key-{seq}"]))
    except Exception:
        return None
    return (r.queue.queue_id, r.queue_offset) if r.status is SendStatus.SEND_OK else None


async def _offset_request(addr: str, code: int, queue_id: int, offset: int | None = None) -> RemotingCommand:
    ext: dict[str, object] = {"consumerGroup": CG, "topic": TOPIC, "queueId": queue_id}
    if offset is not None:
        ext["commitOffset"] = offset
    client = RemotingClient(connect_timeout=2.0)
    try:
        return await client.invoke(addr, RemotingCommand.request(code, ext), 3.0)
    finally:
        await client.close()


def _run_native(root: Path) -> tuple[HAGroup, dict[int, tuple[int, int]], dict[int, int]]:
    """The old group: every acknowledged (queue, offset) by seq, and the committed offsets."""
    ha = HAGroup(root)
    master = ha.add("m", 0, "SYNC_MASTER", slaveSyncInterval=500)
    slave = ha.add("s", 1, "SLAVE", slaveSyncInterval=500)
    acked: dict[int, tuple[int, int]] = {}
    committed: dict[int, int] = {}
    ha.start_namesrv()
    ha.start(master)
    ha.start(slave)

    async def load() -> None:
        async with AdminClient(ha.namesrv_addr, timeout=5.0) as admin:
            await admin.create_topic(master.addr, TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        producer = Producer("migration-pg", ha.namesrv_addr, send_timeout=3.0)
        await producer.start()
        try:
            deadline = time.monotonic() + 60
            seq = 0
            while len(acked) < OLD and time.monotonic() < deadline:
                seq += 1
                got = await _send(producer, seq)
                if got is not None:
                    acked[seq] = got
        finally:
            await producer.shutdown()
        for q in range(QUEUES):
            count = sum(1 for qid, _off in acked.values() if qid == q)
            committed[q] = count // 2
            resp = await _offset_request(master.addr, RequestCode.UPDATE_CONSUMER_OFFSET, q, committed[q])
            assert resp.code == ResponseCode.SUCCESS, resp.remark

    asyncio.run(load())
    assert len(acked) == OLD, f"{len(acked)} of {OLD} acknowledged{ha.explain()}"
    ha.wait_caught_up(master, [slave], 30)
    assert ha.stop(master) == 0 and ha.stop(slave) == 0
    return ha, acked, committed


async def _master(group: DLedgerGroup) -> str | None:
    """The member the name server lists as brokerId 0 (``DLedgerGroup.master`` from a loop)."""
    async with AdminClient(group.namesrv_addr, timeout=2.0, connect_timeout=1.0) as admin:
        route = await admin.route("TBW102")
    for bd in route.broker_datas:
        if 0 in bd.broker_addrs:
            return next((n for n in group.ids if group.addr(n) == bd.broker_addrs[0]), None)
    return None


def _held(back: ReadBack) -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    for qid, table in back.queues.items():
        for qoff, entry in table.items():
            if entry is not None:
                out[entry[0]] = (qid, qoff)
    return out


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_master_slave_group_moves_to_dledger_keeping_every_message_and_offset(tmp_path: Path) -> None:
    ha, acked, committed = _run_native(tmp_path / "native")
    group = DLedgerGroup(tmp_path / "dledger")
    try:
        m_store, s_store = ha.brokers["m"].store_dir, ha.brokers["s"].store_dir
        shutil.copytree(m_store, group.root / "n0" / "store", dirs_exist_ok=True)
        shutil.copytree(s_store, group.root / "n1" / "store", dirs_exist_ok=True)
        shutil.copytree(m_store / "config", group.root / "n1" / "store" / "config", dirs_exist_ok=True)
        shutil.copytree(m_store, group.root / "n2" / "store", dirs_exist_ok=True)
        group.start()

        async def check() -> None:
            # Every old message on every member, where its SEND_OK put it; by key too.
            async with AdminClient(group.namesrv_addr, timeout=5.0) as admin:
                for n in group.ids:
                    back = await read_broker(n, group.addr(n), TOPIC, QUEUES)
                    assert not back.errors, (n, back.errors)
                    held = _held(back)
                    assert {s: held.get(s) for s in acked} == acked, f"{n} does not hold the old messages in place"
                    for seq in (1, OLD // 2, OLD):
                        found = await admin.query_message(group.addr(n), TOPIC, f"key-{seq}")
                        assert any(f"key-{seq}" in r.keys for r in found.messages), (n, seq)
                    for q, off in committed.items():
                        resp = await _offset_request(group.addr(n), RequestCode.QUERY_CONSUMER_OFFSET, q)
                        assert resp.code == ResponseCode.SUCCESS and int(resp.ext_fields["offset"]) == off, (n, q)
            # New sends: SEND_OK, queue offsets after the old ones, none reused.
            producer = Producer("migration-pg2", group.namesrv_addr, send_timeout=3.0)
            await producer.start()
            new: dict[int, tuple[int, int]] = {}
            try:
                seq = OLD
                deadline = time.monotonic() + 30
                while len(new) < 40 and time.monotonic() < deadline:
                    seq += 1
                    got = await _send(producer, seq)
                    if got is not None:
                        new[seq] = got
                assert len(new) == 40, f"{len(new)} new sends acknowledged{group.explain()}"
                old_ends = {q: sum(1 for qid, _o in acked.values() if qid == q) for q in range(QUEUES)}
                for q in range(QUEUES):
                    offsets = sorted(o for qid, o in new.values() if qid == q)
                    assert offsets == list(range(old_ends[q], old_ends[q] + len(offsets))), (q, offsets, old_ends)
                # SIGKILL the leader: the next one serves old and new messages.
                leader = await _master(group)
                assert leader is not None
                group.brokers[leader].kill()
                killed = time.monotonic()
                while time.monotonic() - killed < 30:
                    seq += 1
                    got = await _send(producer, seq)
                    if got is not None:
                        new[seq] = got
                        break
                    await asyncio.sleep(0.05)
                else:
                    raise AssertionError(f"no SEND_OK within 30 s of killing {leader}{group.explain()}")
            finally:
                await producer.shutdown()
            successor = await _master(group)
            assert successor is not None and successor != leader
            everything = {**acked, **new}
            deadline = time.monotonic() + 10  # its reput may still be dispatching the newest
            while True:
                held = _held(await read_broker(successor, group.addr(successor), TOPIC, QUEUES))
                if {s: held.get(s) for s in everything} == everything or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)
            assert {s: held.get(s) for s in everything} == everything
            async with AdminClient(group.namesrv_addr, timeout=5.0) as admin:
                found = await admin.query_message(group.addr(successor), TOPIC, "key-1")
                assert any("key-1" in r.keys for r in found.messages)

        asyncio.run(check())
    finally:
        group.close()
        ha.close()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_member_whose_old_store_differs_is_refused(tmp_path: Path) -> None:
    ha, _acked, _committed = _run_native(tmp_path / "native")
    group = DLedgerGroup(tmp_path / "dledger")
    try:
        m_store = ha.brokers["m"].store_dir
        shutil.copytree(m_store, group.root / "n0" / "store", dirs_exist_ok=True)
        shutil.copytree(m_store, group.root / "n1" / "store", dirs_exist_ok=True)
        # n2 starts empty: no old commit log below its DLedger data.
        group.namesrv.start()
        wait_until("the name server", lambda: tcp_open(group.namesrv_port), 15)
        for b in group.brokers.values():
            b.start()
        n2 = group.brokers["n2"]
        wait_until("n2 to exit", lambda: n2.proc is not None and n2.proc.poll() is not None, 60, 0.1, group.explain)
        assert n2.proc is not None and n2.proc.returncode != 0
        why = tail(n2.log_path, 30)
        assert "does not match enough members" in why and "no native commit log" in why, why
        wait_until("n0 or n1 elected and registered", lambda: group.master() in ("n0", "n1"), 30, 0.1, group.explain)
    finally:
        group.close()
        ha.close()
