"""Two real stores (master and slave) and bounded waits for the asyncio HA tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from ledgermq.config import BrokerRole
from ledgermq.ha.config import HAConfig
from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import MessageStore, open_message_store
from ledgermq.store.results import GetStatus
from tests.conftest import small_config

SEG = 64 * 1024
TOPIC = "HaTopic"
QUEUES = 4
FAST = HAConfig(send_heartbeat_interval_ms=200, housekeeping_interval_ms=3000)


def open_store(root: Path, role: BrokerRole, scrub: bool = True) -> MessageStore:
    """``scrub=False``: no background scrub, for tests that plant and report damage themselves
    (a scrub pass could find the same flip first, as a whole digest block)."""
    store = open_message_store(
        small_config(root, broker_role=role, mapped_file_size_commitlog=SEG, store_scrub_enable=scrub)
    )
    store.start()
    return store


def put(store: MessageStore, count: int, size: int = 1000, start: int = 0) -> int:
    """Put ``count`` messages round-robin over the queues; returns the end offset."""
    end = 0
    for i in range(start, start + count):
        body = (f"msg-{i:06d}-".encode() * (size // 10 + 1))[:size]
        res = store.put_message(MessageInput(topic=TOPIC, body=body, queue_id=i % QUEUES, properties={"KEYS": str(i)}))
        assert res.ok and res.append is not None, res
        end = res.append.next_offset
    return end


async def until(cond: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


async def caught_up(master: MessageStore, slave: MessageStore, timeout: float = 10.0) -> None:
    await until(
        lambda: slave.max_phy_offset == master.max_phy_offset,
        timeout,
        f"slave to reach {master.max_phy_offset} (at {slave.max_phy_offset})",
    )


def segment_files(store: MessageStore) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(store.config.commitlog_path.iterdir())}


def assert_files_identical(master: MessageStore, slave: MessageStore, *, all_segments: bool) -> None:
    m, s = segment_files(master), segment_files(slave)
    assert s, "slave has no commit-log files"
    if all_segments:
        assert sorted(s) == sorted(m)
    else:
        assert set(s) <= set(m)
        assert max(s) == max(m)  # the slave holds the master's last segment
    for name, data in s.items():
        assert data == m[name], f"segment {name} differs"


def queue_messages(store: MessageStore, queue_id: int, start: int) -> list[bytes]:
    out: list[bytes] = []
    offset = start
    while True:
        res = store.get_message(TOPIC, queue_id, offset, 32)
        if res.status is not GetStatus.FOUND:
            return out
        out += res.messages
        offset = res.next_begin_offset


def assert_queues_serve_same(master: MessageStore, slave: MessageStore) -> int:
    """Every message in the slave's queues equals the master's; returns how many. Both sides
    dispatched first: the master's consume queues lag its log too (its reput thread), and
    under load that lag outlasted the slave's copy."""
    assert master.wait_dispatched(timeout=10.0)
    assert slave.wait_dispatched(timeout=10.0)
    total = 0
    for q in range(QUEUES):
        low = slave.min_offset_in_queue(TOPIC, q)
        assert slave.max_offset_in_queue(TOPIC, q) == master.max_offset_in_queue(TOPIC, q)
        got = queue_messages(slave, q, low)
        assert got == queue_messages(master, q, low)
        total += len(got)
    return total
