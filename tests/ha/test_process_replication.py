"""Commit-log replication between real broker processes (``python -m ledgermq.cli.main broker``).

A master (ASYNC_MASTER, 1 MiB commit-log segments) and two slaves of the same broker group, found through a name
server. Slave s1 runs from the start and ends up with every segment; slave s2 joins when the master already holds
several segments and, as in RocketMQ (a first report of 0 starts at the beginning of the master's last segment),
holds the master's last segment onwards. Once caught up their commit-log files equal the master's byte for byte.
Replication then resumes after ``kill -9`` and a restart of a slave, and of the master (same port, same store),
and the slave's consume queues serve the same messages as the master's.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from ledgermq.client import Message, Producer
from tests.ha.process_group import HAGroup, assert_identical, open_store, queue_bodies

TOPIC = "HaProcTopic"
BODY = 2000  # below the producer's compress threshold (4096): stored bodies are the sent ones
BATCH = 16


def body(i: int) -> bytes:
    return (f"seq={i:07d};".encode() * (BODY // 12 + 1))[:BODY]


def send(namesrv: str, start: int, count: int) -> int:
    """Send messages ``start .. start+count-1`` in batches with our producer; the next sequence number."""

    async def run() -> None:
        async with Producer("ha-proc-pg", namesrv, send_timeout=10.0) as producer:
            for first in range(start, start + count, BATCH):
                msgs = [Message(TOPIC, body(i)) for i in range(first, min(first + BATCH, start + count))]
                result = await producer.send_batch(msgs)
                assert result.status.name == "SEND_OK", result

    asyncio.run(run())
    return start + count


def per_segment(bytes_wanted: int) -> int:
    """How many messages make about ``bytes_wanted`` bytes of commit log."""
    return bytes_wanted // (BODY + 120)


def test_slaves_catch_up_and_resume_after_kill_9_of_either_side(tmp_path: Path) -> None:
    group = HAGroup(tmp_path)
    master = group.add("m", 0, "ASYNC_MASTER")
    s1 = group.add("s1", 1, "SLAVE")
    s2 = group.add("s2", 2, "SLAVE")
    timings: dict[str, float] = {}
    try:
        group.start_namesrv()
        group.start(master)
        group.start(s1)
        seq = send(group.namesrv_addr, 0, BATCH)  # s1 starts from segment 0: it connects before the first roll
        group.wait_caught_up(master, [s1], 20)

        seq = send(group.namesrv_addr, seq, per_segment(3_400_000))  # the master holds 4 segments
        started = time.monotonic()
        end = group.wait_caught_up(master, [s1], 20)
        timings["s1 live"] = time.monotonic() - started
        assert end > 3 * 1024 * 1024
        assert len(assert_identical(master, s1, all_segments=True)) == 4

        started = time.monotonic()  # a fresh slave joining late: the master's last segment onwards
        group.start(s2)
        group.wait_caught_up(master, [s2], 20)
        timings["s2 fresh"] = time.monotonic() - started
        assert assert_identical(master, s2, all_segments=False) == [max(master.commitlog_files())]

        group.kill(s1)  # kill -9 a slave; the master rolls to a new segment meanwhile; the slave resumes
        seq = send(group.namesrv_addr, seq, per_segment(1_200_000))
        started = time.monotonic()
        group.start(s1)
        group.wait_caught_up(master, [s1, s2], 20)
        timings["s1 restart"] = time.monotonic() - started
        assert len(assert_identical(master, s1, all_segments=True)) == 5
        assert_identical(master, s2, all_segments=False)

        group.kill(master)  # kill -9 the master; it comes back on the same port and store
        started = time.monotonic()
        group.start(master)
        seq = send(group.namesrv_addr, seq, per_segment(600_000))
        group.wait_caught_up(master, [s1, s2], 30)
        timings["master restart"] = time.monotonic() - started
        names = assert_identical(master, s1, all_segments=True)
        assert len(names) >= 5
        assert_identical(master, s2, all_segments=False)

        for b in (s1, s2, master):
            assert group.stop(b) == 0, f"{b.name} did not shut down cleanly{group.explain()}"
    finally:
        group.close()
    print(f"\nreplication timings (s): { {k: round(v, 2) for k, v in timings.items()} }, {seq} messages")

    m_store, s_store = open_store(master), open_store(s1)
    try:
        total = 0
        for q in range(4):
            served = queue_bodies(s_store, TOPIC, q)
            assert served == queue_bodies(m_store, TOPIC, q), f"queue {q} differs"
            total += len(served)
        assert total == seq
        sent = {body(i) for i in range(seq)}
        assert {b for q in range(4) for b in queue_bodies(s_store, TOPIC, q).values()} == sent
    finally:
        s_store.shutdown()
        m_store.shutdown()
