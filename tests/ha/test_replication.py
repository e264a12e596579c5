"""Master and slave over 127.0.0.1 with two real stores: catch-up, restarts, acks, strangers."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

from ledgermq.broker.write_turn import FixedReplication, Need, Wait, WriteTurn
from ledgermq.clock import SYSTEM_CLOCK
from ledgermq.config import BrokerRole
from ledgermq.ha.codec import encode_report
from ledgermq.ha.master import HAService
from ledgermq.ha.slave import HAClient
from ledgermq.store.message_store import MessageStore
from tests.ha.helpers import (
    FAST,
    SEG,
    assert_files_identical,
    assert_queues_serve_same,
    caught_up,
    open_store,
    put,
    until,
)


class Pair:
    """A master store + HAService and a slave store + HAClient, stopped in ``close``."""

    def __init__(self, root: Path, scrub: bool = True) -> None:
        self.root = root
        self.scrub = scrub
        self.master: MessageStore | None = open_store(root / "master", BrokerRole.ASYNC_MASTER, scrub)
        self.slave: MessageStore | None = None
        self.service: HAService | None = None
        self.client: HAClient | None = None
        self.port = 0

    async def start_service(self) -> HAService:
        assert self.master is not None
        self.service = HAService(self.master, "127.0.0.1", self.port, FAST)
        await self.service.start()
        self.port = self.service.port
        return self.service

    def start_client(self) -> HAClient:
        if self.slave is None:
            self.slave = open_store(self.root / "slave", BrokerRole.SLAVE, self.scrub)
        self.client = HAClient(
            self.slave, lambda: f"127.0.0.1:{self.port}", FAST, reconnect_min=0.05, reconnect_max=0.3
        )
        self.client.start()
        return self.client

    async def stop_client(self, *, close_store: bool = False) -> None:
        if self.client is not None:
            await self.client.stop()
            self.client = None
        if close_store and self.slave is not None:
            self.slave.shutdown()
            self.slave = None

    async def close_master(self) -> None:
        if self.service is not None:
            await self.service.stop()
            self.service = None
        if self.master is not None:
            self.master.shutdown()
            self.master = None

    async def close(self) -> None:
        await self.stop_client(close_store=True)
        await self.close_master()

    @property
    def m(self) -> MessageStore:
        assert self.master is not None
        return self.master

    @property
    def s(self) -> MessageStore:
        assert self.slave is not None
        return self.slave


def test_slave_attached_from_the_start_copies_every_segment(tmp_path: Path) -> None:
    async def main() -> None:
        pair = Pair(tmp_path)
        try:
            await pair.start_service()
            pair.start_client()
            await until(lambda: bool(pair.service and pair.service.acked_offsets), what="first report")
            end = put(pair.m, 250)  # ~4 segments of 64 KiB
            assert end > 3 * SEG
            await caught_up(pair.m, pair.s)
            assert_files_identical(pair.m, pair.s, all_segments=True)
            assert assert_queues_serve_same(pair.m, pair.s) == 250
            # replication goes on as messages keep arriving
            put(pair.m, 60, start=250)
            await caught_up(pair.m, pair.s)
            assert_files_identical(pair.m, pair.s, all_segments=True)
            assert assert_queues_serve_same(pair.m, pair.s) == 310
            service = pair.service
            assert service is not None
            await until(lambda: service.max_acked_offset == pair.m.max_phy_offset, what="final ack")
            [st] = service.status()
            assert st.connected and st.acked_offset == pair.m.max_phy_offset and st.lag_bytes == 0
            assert st.last_ack_time_ms > 0
        finally:
            await pair.close()

    asyncio.run(main())


def test_fresh_slave_catches_up_from_the_masters_last_segment(tmp_path: Path) -> None:
    async def main() -> None:
        pair = Pair(tmp_path)
        try:
            end = put(pair.m, 300)  # several segments before any slave exists
            assert end > 4 * SEG
            await pair.start_service()
            pair.start_client()
            await caught_up(pair.m, pair.s)
            # RocketMQ: a first report of 0 starts at the beginning of the master's last segment
            assert pair.s.min_phy_offset == end - end % SEG
            assert_files_identical(pair.m, pair.s, all_segments=False)
            served = assert_queues_serve_same(pair.m, pair.s)
            assert 0 < served < 300
            put(pair.m, 100, start=300)  # and it follows the master across new segments
            await caught_up(pair.m, pair.s)
            assert_files_identical(pair.m, pair.s, all_segments=False)
            assert assert_queues_serve_same(pair.m, pair.s) == served + 100
        finally:
            await pair.close()

    asyncio.run(main())


def test_slave_restart_resumes_from_its_offset(tmp_path: Path) -> None:
    async def main() -> None:
        pair = Pair(tmp_path)
        try:
            await pair.start_service()
            pair.start_client()
            await until(lambda: bool(pair.service and pair.service.acked_offsets), what="first report")
            put(pair.m, 120)
            await caught_up(pair.m, pair.s)
            await pair.stop_client(close_store=True)
            put(pair.m, 150, start=120)  # the master moves on while the slave is down
            pair.start_client()  # reopens the slave store from disk
            resumed_from = pair.s.max_phy_offset
            assert 0 < resumed_from < pair.m.max_phy_offset
            await caught_up(pair.m, pair.s)
            assert_files_identical(pair.m, pair.s, all_segments=True)
            assert assert_queues_serve_same(pair.m, pair.s) == 270
        finally:
            await pair.close()

    asyncio.run(main())


def test_master_restart_slave_reconnects_and_resumes(tmp_path: Path) -> None:
    async def main() -> None:
        pair = Pair(tmp_path)
        try:
            await pair.start_service()
            client = pair.start_client()
            await until(lambda: bool(pair.service and pair.service.acked_offsets), what="first report")
            put(pair.m, 100)
            await caught_up(pair.m, pair.s)
            connects = client.connects
            await pair.close_master()
            await until(lambda: not client.connected, what="slave to notice the master is gone")
            pair.master = open_store(tmp_path / "master", BrokerRole.ASYNC_MASTER)
            put(pair.m, 150, start=100)
            await pair.start_service()  # same port
            await until(lambda: client.connects > connects, what="reconnect")
            await caught_up(pair.m, pair.s)
            assert_files_identical(pair.m, pair.s, all_segments=True)
            assert assert_queues_serve_same(pair.m, pair.s) == 250
            assert client.last_error == ""  # healthy again: the outage was logged, not kept as current
        finally:
            await pair.close()

    asyncio.run(main())


def _turn_for(service: HAService, store: MessageStore) -> WriteTurn:
    """A write turn releasing SYNC_MASTER waits off ``service``, as a broker wires it."""
    turn = WriteTurn(store, SYSTEM_CLOCK, FixedReplication(service))
    turn.bind(asyncio.get_running_loop())
    service.on_replicated = turn.changed
    return turn


def _acked(turn: WriteTurn, end: int, timeout: float) -> asyncio.Future[bool]:
    """True once the slave holds the message ending at ``end``; False after ``timeout``."""
    fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    turn.add(Wait(end, Need.REPLICATED, timeout, lambda w: None if fut.done() else fut.set_result(w.met)))
    return fut


def test_an_ack_releases_a_replication_wait_and_a_paused_slave_times_it_out(tmp_path: Path) -> None:
    async def main() -> None:
        pair = Pair(tmp_path)
        try:
            service = await pair.start_service()
            turn = _turn_for(service, pair.m)
            pair.start_client()
            await until(lambda: bool(service.acked_offsets), what="first report")
            end = put(pair.m, 5)
            assert await _acked(turn, end, timeout=5.0)
            assert service.max_acked_offset >= end
            assert await _acked(turn, end, timeout=0.0)  # already acknowledged
            await pair.stop_client()  # the slave stops acknowledging
            end2 = put(pair.m, 5, start=5)
            t0 = time.monotonic()
            # gives up (False) once its 0.5 s are over, not before; the outer bound only
            # catches a wait that ignores its timeout (how late it returns is the machine's)
            assert not await asyncio.wait_for(_acked(turn, end2, timeout=0.5), 30)
            assert time.monotonic() - t0 >= 0.5 - 0.01
            assert len(turn.waits) == 0
            pair.start_client()  # back: the same offset is acknowledged again
            assert await _acked(turn, end2, timeout=5.0)
        finally:
            await pair.close()

    asyncio.run(main())


def test_stranger_reporting_beyond_max_is_disconnected_and_never_acks(tmp_path: Path) -> None:
    async def main() -> None:
        pair = Pair(tmp_path)
        try:
            end = put(pair.m, 10)
            service = await pair.start_service()
            waiter = _acked(_turn_for(service, pair.m), end + 500, 2.0)
            for first in (True, False):
                reader, writer = await asyncio.open_connection("127.0.0.1", service.port)
                try:
                    if not first:  # a plausible first report, then one beyond the max
                        writer.write(encode_report(end))
                    writer.write(encode_report(end + 1000))
                    await writer.drain()
                    eof = await asyncio.wait_for(_read_until_eof(reader), 5.0)
                    assert eof
                finally:
                    writer.close()
            await until(lambda: not service.links, what="links to go")
            assert service.max_acked_offset <= end
            assert service.acked_offsets == {}
            assert not await waiter  # the bogus offset never satisfied a waiter
            reasons = [st.closed_reason for st in service.status()]
            assert len(reasons) == 2 and all("beyond the master's max offset" in r for r in reasons)
            assert all(not st.connected for st in service.status())
        finally:
            await pair.close()

    asyncio.run(main())


def test_garbage_on_the_ha_port_is_closed_without_harm(tmp_path: Path) -> None:
    async def main() -> None:
        pair = Pair(tmp_path)
        try:
            put(pair.m, 3)
            service = await pair.start_service()
            with socket.create_connection(("127.0.0.1", service.port), timeout=5) as sock:
                sock.sendall(b"\xff" * 16)  # negative offsets
                try:  # closed with the rest unread: EOF or a reset, never an answer
                    assert await asyncio.to_thread(sock.recv, 100) == b""
                except ConnectionResetError:
                    pass
            await until(lambda: not service.links, what="link to go")
            assert service.max_acked_offset == 0
            assert "negative" in service.status()[0].closed_reason
        finally:
            await pair.close()

    asyncio.run(main())


async def _read_until_eof(reader: asyncio.StreamReader) -> bool:
    while await reader.read(65536):
        pass
    return True


def test_slave_ahead_of_its_master_is_refused_loudly_and_keeps_retrying(tmp_path: Path) -> None:
    async def main() -> None:
        pair = Pair(tmp_path)
        try:
            await pair.start_service()
            client = pair.start_client()
            await until(lambda: bool(pair.service and pair.service.acked_offsets), what="first report")
            put(pair.m, 50)
            await caught_up(pair.m, pair.s)
            ahead = pair.s.max_phy_offset
            await pair.close_master()
            pair.master = open_store(tmp_path / "other-master", BrokerRole.ASYNC_MASTER)  # an empty master
            put(pair.m, 2)
            service = await pair.start_service()
            await until(lambda: len(service.status()) >= 2, what="two refused connections")
            assert service.acked_offsets == {} and service.max_acked_offset == 0
            # Both logs are in "epoch 1", but not the same epoch 1: the master refuses the
            # slave before anything is truncated, every time.
            assert "copied from another master" in client.last_error
            assert client.status().refused and client.truncations == 0
            assert pair.s.max_phy_offset == ahead  # nothing truncated, nothing appended
        finally:
            await pair.close()

    asyncio.run(main())
