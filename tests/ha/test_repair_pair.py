"""Damaged commit-log ranges repaired between a master and a slave: two real stores over 127.0.0.1.

Damage is made as the disk would make it (64 bytes flipped in a sealed segment's file behind the
store's back) and then registered with ``report_damage``, as the store's scrub or a read does on
finding it. The process tests (test_repair_process.py) cover finding it by recovery and by the scrub.
"""

from __future__ import annotations

import asyncio
import os
import struct
from pathlib import Path

import pytest

from ledgermq.ha.master_link import SlaveLink
from ledgermq.store.message_store import MessageStore
from tests.ha.helpers import SEG, assert_files_identical, assert_queues_serve_same, caught_up, put, until
from tests.ha.test_replication import Pair

FLIP = 64


def record_at(store: MessageStore, offset: int) -> tuple[int, int]:
    """[start, end) of the record holding ``offset`` (walked from its segment's start)."""
    pos = offset - offset % SEG
    while True:
        (size,) = struct.unpack(">i", store.read_commitlog(pos, 4))
        if pos + size > offset:
            return pos, pos + size
        pos += size


def flip(store: MessageStore, offset: int, n: int = FLIP) -> bytes:
    """Invert ``n`` bytes of the segment file at ``offset`` behind the store's back; the old bytes."""
    path = store.config.commitlog_path / f"{offset - offset % SEG:020d}"
    fd = os.open(path, os.O_RDWR)
    try:
        old = os.pread(fd, n, offset % SEG)
        os.pwrite(fd, bytes(b ^ 0xFF for b in old), offset % SEG)
    finally:
        os.close(fd)
    return old


def damage(store: MessageStore, offset: int) -> tuple[int, int]:
    """Flip bytes inside the record holding ``offset`` and register its range as damaged."""
    start, end = record_at(store, offset)
    flip(store, start + 200)
    assert store.report_damage(start, end, "test: 64 bytes flipped")
    return start, end


async def started(tmp_path: Path, messages: int = 250) -> Pair:
    pair = Pair(tmp_path, scrub=False)
    await pair.start_service()
    pair.start_client()
    await until(lambda: bool(pair.service and pair.service.acked_offsets), what="first report")
    put(pair.m, messages)  # ~4 segments of 64 KiB
    await caught_up(pair.m, pair.s)
    return pair


def test_damage_found_on_a_running_master_is_taken_back_from_its_slave(tmp_path: Path) -> None:
    async def main() -> None:
        pair = await started(tmp_path)
        try:
            service, client = pair.service, pair.client
            assert service is not None and client is not None
            connects = client.connects
            start, end = damage(pair.m, SEG + SEG // 2)
            await until(lambda: not pair.m.damaged_ranges(), what="the master's repair")
            await until(lambda: client.connected and client.connects > connects, what="the slave's handshake to end")
            assert client.connects == connects + 1  # one re-handshake did it
            st = service.repairs.status()
            assert (st.taken, st.taken_bytes, st.given) == (1, end - start, 0)
            assert st.last.startswith(f"took [{start}, {end}) from slave ") and st.unrepaired == []
            assert_files_identical(pair.m, pair.s, all_segments=True)
            assert assert_queues_serve_same(pair.m, pair.s) == 250
            assert client.truncations == 0
            put(pair.m, 20, start=250)  # and replication goes on
            await caught_up(pair.m, pair.s)
            assert_files_identical(pair.m, pair.s, all_segments=True)
        finally:
            await pair.close()

    asyncio.run(main())


def test_damage_found_on_a_running_slave_is_repaired_from_its_master(tmp_path: Path) -> None:
    async def main() -> None:
        pair = await started(tmp_path)
        try:
            service, client = pair.service, pair.client
            assert service is not None and client is not None
            start, end = damage(pair.s, SEG // 3)
            # the store's range is repaired in a worker thread a moment before the book counts it
            await until(lambda: client.repairs.taken == 1, what="the slave's repair")
            assert not pair.s.damaged_ranges() and client.repairs.taken_bytes == end - start
            assert client.repairs.last == f"took [{start}, {end}) from master 127.0.0.1:{pair.port}"
            await until(lambda: service.repairs.given == 1, what="the master to count what it gave")
            assert client.truncations == 0 and pair.s.min_phy_offset == 0
            assert_files_identical(pair.m, pair.s, all_segments=True)
            assert assert_queues_serve_same(pair.m, pair.s) == 250
        finally:
            await pair.close()

    asyncio.run(main())


def test_a_range_damaged_on_both_stays_refused_loudly_without_reconnecting_in_a_loop(tmp_path: Path) -> None:
    async def main() -> None:
        pair = await started(tmp_path)
        try:
            service, client = pair.service, pair.client
            assert service is not None and client is not None
            start, end = damage(pair.s, 2 * SEG + 100)
            assert damage(pair.m, start) == (start, end)  # both before either reacts (no await in between)
            await until(lambda: bool(service.repairs.status().unrepaired), what="the master's note")
            [note] = service.repairs.status().unrepaired
            assert note.startswith(f"no replica holds [{start}, {end}): ") and "damaged too" in note, note
            await until(lambda: client.connected and bool(client.repairs.status().unrepaired), what="the slave's note")
            assert "the master's copy is damaged too" in client.repairs.status().unrepaired[0]
            settled = client.connects
            await asyncio.sleep(1.0)  # a window in which a reconnect loop would show
            assert client.connects == settled and client.connected
            assert pair.m.damaged_ranges() == [(start, end)] == pair.s.damaged_ranges()
            assert service.repairs.taken == 0 and client.repairs.taken == 0
            # the bytes after the damage still replicate
            put(pair.m, 10, start=250)
            await caught_up(pair.m, pair.s)
        finally:
            await pair.close()

    asyncio.run(main())


def test_a_transfer_stops_before_a_range_no_replica_holds_and_goes_on_once_it_is_repaired(tmp_path: Path) -> None:
    async def main() -> None:
        pair = Pair(tmp_path, scrub=False)
        try:
            end = put(pair.m, 300)
            last_segment = end - end % SEG
            start, stop = record_at(pair.m, last_segment + 3000)
            healthy = pair.m.read_commitlog(start, stop - start)
            damage(pair.m, start)
            service = await pair.start_service()
            client = pair.start_client()  # empty: it copies from the master's last segment
            await until(lambda: pair.s.max_phy_offset == start, what="the slave to reach the damaged range")
            [note] = service.repairs.status().unrepaired
            assert note.startswith(f"no replica holds [{start}, {stop}): ") and "has not copied it" in note, note
            await asyncio.sleep(0.5)  # it waits there: nothing of the damaged range is sent
            assert pair.s.max_phy_offset == start and client.connected
            await asyncio.to_thread(pair.m.repair_range, start, healthy, "an operator")
            await caught_up(pair.m, pair.s)
            assert_files_identical(pair.m, pair.s, all_segments=False)
        finally:
            await pair.close()

    asyncio.run(main())


def test_damage_found_while_the_only_slave_was_not_yet_a_holder_is_repaired_by_its_next_ack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race a 100-cycle chaos run found: the scrub reported damage while the only slave was
    still in its handshake (its repair plan already made, its first ack not yet in), so no link
    held the range and it stayed refused until the next reconnect, a minute later. Now the first
    slave that acknowledges past such a range re-handshakes and takes it back."""

    async def main() -> None:
        pair = await started(tmp_path)
        try:
            service, client = pair.service, pair.client
            assert service is not None and client is not None
            connects = client.connects
            with monkeypatch.context() as m:  # the slave is not (yet) a holder when the damage is found
                m.setattr(SlaveLink, "holds", lambda self, start, end: False)
                damage(pair.m, SEG + SEG // 2)
                await until(lambda: bool(service.repairs.status().unrepaired), what="the master's note")
                assert client.connects == connects  # no holder: nobody re-handshook
            put(pair.m, 5, start=250)  # the slave's next ack makes it a holder
            await until(lambda: service.repairs.taken == 1, what="the master's repair")
            assert not pair.m.damaged_ranges() and service.repairs.status().unrepaired == []
            await caught_up(pair.m, pair.s)
            assert_files_identical(pair.m, pair.s, all_segments=True)
        finally:
            await pair.close()

    asyncio.run(main())
