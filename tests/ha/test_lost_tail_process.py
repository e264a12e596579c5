"""The issue's scenario with real processes: a SYNC_MASTER (ASYNC_FLUSH) loses its unflushed tail.

A name server, a SYNC_MASTER and its slave, in sync. The master is SIGKILLed and the last 64 KiB of its written
commit log is zeroed (what a lost page cache leaves), then restarted. Before epochs the restarted master dropped the
acknowledged messages in that tail, and once new writes carried it past the slave's offset it streamed bytes from the
middle of a record: the slave's dispatch stopped and every later SEND_OK was unreadable there. Now:

* the restarted master refuses writes until its slave has returned the lost tail;
* every send answered SEND_OK before the crash is readable on both brokers, at the queue offset its answer named;
* master and slave are byte-identical, position by position, and both serve the same messages;
* the pair takes writes again, and they replicate.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import ResponseCode
from tests.compat.cluster import broker_writable, wait_until
from tests.ha.process_group import SEG, BrokerProc, HAGroup, open_store, queue_bodies, send_raw

TOPIC = "LostTailTopic"
QUEUES = 4
LOST = 64 * 1024


def body(seq: int) -> bytes:
    return f"tail-{seq:06d}-".encode() + b"y" * 300


def send_all(b: BrokerProc, seqs: range) -> dict[int, tuple[int, int]]:
    """Sync sends one by one; seq -> (queueId, queueOffset) of each SEND_OK (every one must be)."""

    async def run() -> dict[int, tuple[int, int]]:
        client = RemotingClient(connect_timeout=2.0)
        acked: dict[int, tuple[int, int]] = {}
        try:
            for seq in seqs:
                resp = await send_raw(client, b, TOPIC, seq % QUEUES, body(seq))
                assert resp.code == ResponseCode.SUCCESS, (seq, resp.code, resp.remark)
                acked[seq] = (int(resp.ext_fields["queueId"]), int(resp.ext_fields["queueOffset"]))
        finally:
            await client.close()
        return acked

    return asyncio.run(run())


def zero_written_tail(store_dir: Path, nbytes: int) -> int:
    """Zero the last ``nbytes`` of written data across the segments; returns where data ended."""
    segments = sorted(p for p in (store_dir / "commitlog").iterdir() if p.name.isdigit())
    end = 0
    for path in segments:  # the end of data: the last non-zero byte of the newest non-empty segment
        data = path.read_bytes().rstrip(b"\0")
        if data:
            end = int(path.name) + len(data)
    for path in segments:
        start = int(path.name)
        a, b = max(end - nbytes, start), min(end, start + SEG)
        if a < b:
            with path.open("r+b") as f:
                f.seek(a - start)
                f.write(b"\0" * (b - a))
    return end


def test_sync_master_that_loses_its_unflushed_tail_gets_it_back_from_its_slave(tmp_path: Path) -> None:
    group = HAGroup(tmp_path)
    master = group.add("m", 0, "SYNC_MASTER", flushDiskType="ASYNC_FLUSH", flushIntervalCommitLog=60_000)
    slave = group.add("s", 1, "SLAVE")
    try:
        group.start_namesrv()
        group.start(master)
        group.start(slave)
        wait_until("a SEND_OK with the slave up", lambda: _probe(master), 20, 0.2, group.explain)
        acked = send_all(master, range(600))  # ~200 KiB: more than the tail that will be lost
        group.wait_caught_up(master, [slave], 20)

        group.kill(master)
        end = zero_written_tail(master.store_dir, LOST)
        assert end > 2 * LOST
        group.start(master)  # waits until the master takes writes: the slave returned the tail
        wait_until("the master to take writes", lambda: broker_writable(master.addr), 20, 0.1, group.explain)
        assert group.max_offset(master) >= end - 1, (group.max_offset(master), end)

        acked.update(send_all(master, range(600, 700)))  # writable again
        group.wait_caught_up(master, [slave], 20)
        assert group.stop(slave) == 0 and group.stop(master) == 0, group.explain()
    finally:
        group.close()

    m_files, s_files = master.commitlog_files(), slave.commitlog_files()
    assert m_files == s_files, "master and slave commit logs differ"
    served = {}
    for b in (master, slave):
        store = open_store(b)
        try:
            served[b.name] = {q: queue_bodies(store, TOPIC, q) for q in range(QUEUES)}
        finally:
            store.shutdown()
    assert served["m"] == served["s"]
    missing = [seq for seq, (q, off) in sorted(acked.items()) if served["m"][q].get(off) != body(seq)]
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged sends are lost: {missing[:20]}"


def _probe(master: BrokerProc) -> bool:
    async def run() -> bool:
        client = RemotingClient(connect_timeout=2.0)
        try:
            resp = await send_raw(client, master, "ProbeTopic", 0, b"probe")
            return resp.code == ResponseCode.SUCCESS
        finally:
            await client.close()

    try:
        return asyncio.run(run())
    except Exception:
        return False
