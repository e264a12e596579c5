"""SYNC_FLUSH and ASYNC_FLUSH trouble seen through the broker, as a producer sees it.

* A slow fsync (a failpoint that holds the group-commit thread) makes some senders wait
  past syncFlushTimeout: they get FLUSH_DISK_TIMEOUT, and every other sender still gets
  its answer. Before, the timed-out wait cancelled its flush request, the group-commit
  thread raised InvalidStateError resolving it, and the rest of the batch never heard back.
* A failed fsync fails the store through the broker too (both flush services): the sender
  learns why, and every later send is refused with the reason, never stored silently.
"""

from __future__ import annotations

import asyncio
import errno
import threading
from collections.abc import Callable
from pathlib import Path

import orjson

from ledgermq.config import FlushDiskType
from ledgermq.failpoints import armed
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand, decode_command
from ledgermq.store.flush import AsyncFlushService, GroupCommitService
from tests.broker.harness import Harness, running_broker

FSYNC = "mapped_file.before_fsync"
TOPIC = "FlushTopic"


async def send_raw(h: Harness, seq: int, timeout: float = 10.0) -> tuple[int, str]:
    header = {"a": "pg", "b": TOPIC, "c": "TBW102", "d": 4, "e": seq % 4, "f": 0, "g": 0, "h": 0, "i": ""}
    resp = await h.call(RequestCode.SEND_MESSAGE_V2, header, f"m-{seq}".encode(), timeout=timeout)
    return resp.code, resp.remark or ""


def _held_group_commit() -> tuple[threading.Event, threading.Event, Callable[[], None]]:
    """(release, held, action): armed at the fsync failpoint, ``action`` holds the group-commit
    thread (``held`` set) until ``release`` is set (10 s at most)."""
    release = threading.Event()
    held = threading.Event()

    def slow_disk() -> None:
        if threading.current_thread().name == GroupCommitService.name and not release.is_set():
            held.set()
            release.wait(10)

    return release, held, slow_disk


def test_senders_past_sync_flush_timeout_do_not_strand_the_others(tmp_path: Path) -> None:
    release, held, slow_disk = _held_group_commit()

    async def main() -> None:
        store = {"flush_disk_type": FlushDiskType.SYNC_FLUSH, "sync_flush_timeout_ms": 2000}
        async with running_broker(tmp_path, store=store) as h:
            assert (await send_raw(h, 0))[0] == ResponseCode.SUCCESS  # topic exists, disk healthy
            with armed(FSYNC, slow_disk):
                stuck = asyncio.create_task(send_raw(h, 1))  # its fsync holds the group-commit thread
                await asyncio.to_thread(held.wait, 5)
                # A and B queue up for the same next group commit; A gives up first.
                a = [asyncio.create_task(send_raw(h, i)) for i in range(2, 6)]
                await asyncio.sleep(1.2)
                b = [asyncio.create_task(send_raw(h, i)) for i in range(6, 10)]
                timed_out = await asyncio.gather(stuck, *a)
                assert all(code == ResponseCode.FLUSH_DISK_TIMEOUT for code, _ in timed_out), timed_out
                release.set()  # the disk recovers while B still waits
                answered = await asyncio.wait_for(asyncio.gather(*b), 10)
            # B shared a batch with A's abandoned requests and still got its answers in time.
            assert all(code == ResponseCode.SUCCESS for code, _ in answered), answered
            assert (await send_raw(h, 99))[0] == ResponseCode.SUCCESS  # and the broker goes on
            flusher = h.app.broker.store.commitlog_flusher
            assert isinstance(flusher, GroupCommitService) and flusher.alive and flusher.failed is None

    asyncio.run(main())


def _broken_disk(thread_name: str):  # type: ignore[no-untyped-def]
    def action() -> None:
        if threading.current_thread().name == thread_name:
            raise OSError(errno.EIO, "injected fdatasync failure")

    return action


def test_a_failed_fsync_under_sync_flush_stops_the_broker_taking_writes_and_says_why(tmp_path: Path) -> None:
    async def main() -> None:
        store = {"flush_disk_type": FlushDiskType.SYNC_FLUSH, "sync_flush_timeout_ms": 3000}
        async with running_broker(tmp_path, store=store) as h:
            assert (await send_raw(h, 0))[0] == ResponseCode.SUCCESS
            with armed(FSYNC, _broken_disk(GroupCommitService.name)):
                code, remark = await send_raw(h, 1)
            assert code == ResponseCode.FLUSH_DISK_TIMEOUT and "flush failed" in remark, (code, remark)
            for i in range(2, 5):  # the disk "works" again: the store stays failed all the same
                code, remark = await send_raw(h, i)
                assert code == ResponseCode.SERVICE_NOT_AVAILABLE, (code, remark)
                assert "commit-log flush failed" in remark
            info = h.app.broker.store.runtime_info()
            assert "injected" in info["storeFailed"]

    asyncio.run(main())


def test_a_failed_fsync_under_async_flush_stops_the_broker_taking_writes(tmp_path: Path) -> None:
    async def main() -> None:
        store = {"flush_disk_type": FlushDiskType.ASYNC_FLUSH, "flush_interval_commitlog_ms": 20}
        async with running_broker(tmp_path, store=store) as h:
            assert (await send_raw(h, 0))[0] == ResponseCode.SUCCESS
            flusher = h.app.broker.store.commitlog_flusher
            assert isinstance(flusher, AsyncFlushService)
            with armed(FSYNC, _broken_disk(AsyncFlushService.name)):
                await send_raw(h, 1)  # dirty data for the flusher to fail on
                for _ in range(200):
                    if flusher.failed is not None:
                        break
                    await asyncio.sleep(0.02)
            assert flusher.failed is not None and flusher.alive
            code, remark = await send_raw(h, 2)
            assert code == ResponseCode.SERVICE_NOT_AVAILABLE and "commit-log flush failed" in remark, (code, remark)

    asyncio.run(main())


def test_a_send_written_below_a_cut_waits_for_an_fsync_after_the_cut(tmp_path: Path) -> None:
    """A broker's log cut back (what a controller-mode broker does when it becomes a slave and
    truncates past the agreed point; it may be master again later) and then written again:
    under SYNC_FLUSH the new message is answered only after an fsync covers it. Before, the
    durable offset reported before the cut counted, the answer left at once with no fsync
    behind it, and a power loss lost an acknowledged message (the chaos harness's
    controller-mode power-loss run: 79 of 46,023)."""
    release, held, slow_disk = _held_group_commit()

    async def main() -> None:
        store_keys = {"flush_disk_type": FlushDiskType.SYNC_FLUSH, "sync_flush_timeout_ms": 8000}
        async with running_broker(tmp_path, store=store_keys) as h:
            for seq in range(20):
                assert (await send_raw(h, seq))[0] == ResponseCode.SUCCESS
            store = h.app.broker.native_store
            end = store.max_phy_offset
            assert store.flushed_phy_offset == end  # every answer above came after its fsync
            await asyncio.to_thread(store.truncate_after_offset, end // 2)  # the cut
            with armed(FSYNC, slow_disk):
                again = asyncio.create_task(send_raw(h, 100))  # written at end // 2, below the old durable end
                await asyncio.to_thread(held.wait, 5)
                await asyncio.sleep(0.3)
                assert not again.done(), again.result()  # not answered while no fsync covers it
                release.set()
                code, _ = await asyncio.wait_for(again, 10)
            assert code == ResponseCode.SUCCESS
            assert store.flushed_phy_offset == store.max_phy_offset

    asyncio.run(main())


_BEAT = orjson.dumps({"clientID": "pc@1", "consumerDataSet": [], "producerDataSet": [{"groupName": "pg"}]})


def _send_frame(seq: int) -> bytes:
    """A SEND_MESSAGE_V2 frame of one small message, opaque ``seq``."""
    header = {"a": "pg", "b": TOPIC, "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": 0, "h": 0, "i": ""}
    return RemotingCommand(RequestCode.SEND_MESSAGE_V2, seq, ext_fields=header, body=b"m").encode()


def test_a_heartbeat_between_held_sends_does_not_take_a_sends_slot(tmp_path: Path) -> None:
    """A producer keeps as many sends in flight as the broker's per-connection limit (its
    async budget is that limit) and heartbeats on the same connection. The heartbeat is
    answered where it is read: with the limit's last slot free and its sends held (their
    fsync stalled), a heartbeat and a send arriving in one read both go through. Answered
    from a task instead, the heartbeat held a slot into a later loop turn and the send was
    refused SYSTEM_BUSY (seen as a failed send_async burst against a DLedger group)."""
    release, held, slow_disk = _held_group_commit()

    async def main() -> None:
        store = {"flush_disk_type": FlushDiskType.SYNC_FLUSH, "sync_flush_timeout_ms": 8000}
        async with running_broker(tmp_path, store=store, max_inflight_per_connection=3) as h:
            assert (await send_raw(h, 0))[0] == ResponseCode.SUCCESS
            reader, writer = await asyncio.open_connection("127.0.0.1", h.app.port)
            try:
                with armed(FSYNC, slow_disk):
                    writer.write(_send_frame(1) + _send_frame(2))  # both wait for the stalled fsync: two slots held
                    await writer.drain()
                    await asyncio.to_thread(held.wait, 5)
                    writer.write(RemotingCommand(RequestCode.HEART_BEAT, 3, body=_BEAT).encode() + _send_frame(4))
                    await writer.drain()
                    first = await asyncio.wait_for(_read_answer(reader), 5)  # the heartbeat's, at once
                    assert (first.opaque, first.code) == (3, ResponseCode.SUCCESS), first
                    release.set()
                    rest = [await asyncio.wait_for(_read_answer(reader), 10) for _ in range(3)]
                assert sorted((a.opaque, a.code) for a in rest) == [(1, 0), (2, 0), (4, 0)], rest
            finally:
                writer.close()

    asyncio.run(main())


def test_a_heartbeat_is_answered_while_every_slot_of_its_connection_is_held(tmp_path: Path) -> None:
    """Requests that answer where they are read hold no slot, so the per-connection limit
    does not apply to them: with every slot held by sends waiting for a stalled fsync, a
    heartbeat and an offset query are answered at once, and the next send is refused
    SYSTEM_BUSY as before. Counted, the heartbeat was refused too (a producer's async
    budget is the broker's per-connection limit), and a consumer whose heartbeats are
    refused long enough is dropped from its group."""
    release, held, slow_disk = _held_group_commit()

    async def main() -> None:
        store = {"flush_disk_type": FlushDiskType.SYNC_FLUSH, "sync_flush_timeout_ms": 8000}
        async with running_broker(tmp_path, store=store, max_inflight_per_connection=2) as h:
            assert (await send_raw(h, 0))[0] == ResponseCode.SUCCESS
            reader, writer = await asyncio.open_connection("127.0.0.1", h.app.port)
            try:
                offset = {"topic": TOPIC, "queueId": 0}
                with armed(FSYNC, slow_disk):
                    writer.write(_send_frame(1) + _send_frame(2))  # both wait for the stalled fsync: every slot held
                    await writer.drain()
                    await asyncio.to_thread(held.wait, 5)
                    writer.write(
                        RemotingCommand(RequestCode.HEART_BEAT, 3, body=_BEAT).encode()
                        + RemotingCommand(RequestCode.GET_MAX_OFFSET, 4, ext_fields=offset).encode()
                        + _send_frame(5)
                    )
                    await writer.drain()
                    now = [await asyncio.wait_for(_read_answer(reader), 5) for _ in range(3)]
                    assert [(a.opaque, a.code) for a in now] == [
                        (3, ResponseCode.SUCCESS),
                        (4, ResponseCode.SUCCESS),
                        (5, ResponseCode.SYSTEM_BUSY),
                    ], now
                    release.set()
                    rest = [await asyncio.wait_for(_read_answer(reader), 10) for _ in range(2)]
                assert sorted((a.opaque, a.code) for a in rest) == [(1, 0), (2, 0)], rest
            finally:
                writer.close()

    asyncio.run(main())


async def _read_answer(reader: asyncio.StreamReader) -> RemotingCommand:
    length = int.from_bytes(await reader.readexactly(4), "big")
    return decode_command(await reader.readexactly(length))
