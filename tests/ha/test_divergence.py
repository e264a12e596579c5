"""A master that loses the unflushed tail of its commit log, with real stores and sockets.

The crash is ``testing.crash.abandon`` (what SIGKILL leaves) followed by zeroing the last
bytes of the written log (what a lost page cache leaves: the pages were never written
back). Before epochs, the restarted master took its slave's report as an acknowledgement
once new writes carried it past it, and streamed bytes from the middle of a record.
"""

from __future__ import annotations

import asyncio
import random
import socket
import sys
from pathlib import Path

import pytest

from ledgermq.config import BrokerRole
from ledgermq.ha.codec import encode_report
from ledgermq.ha.config import HAConfig
from ledgermq.ha.epoch_file import EpochFile, EpochState
from ledgermq.ha.epochs import EpochLog
from ledgermq.ha.master import HAService
from ledgermq.ha.slave import HAClient
from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import MessageStore
from ledgermq.store.results import PutStatus
from ledgermq.testing.crash import abandon
from tests.ha.helpers import FAST, SEG, TOPIC, assert_queues_serve_same, caught_up, open_store, put, until
from tests.ha.test_replication import Pair

LOST = 64 * 1024


def zero_tail(store_root: Path, end: int, nbytes: int) -> None:
    """Zero ``[end - nbytes, end)`` across the commit-log segment files."""
    lo = max(0, end - nbytes)
    for path in sorted((store_root / "commitlog").iterdir()):
        if not path.name.isdigit():
            continue
        start = int(path.name)
        a, b = max(lo, start), min(end, start + SEG)
        if a < b:
            with path.open("r+b") as f:
                f.seek(a - start)
                f.write(b"\0" * (b - a))


async def crash_master_losing_tail(pair: Pair, nbytes: int = LOST) -> tuple[int, int]:
    """SIGKILL-like stop of the master plus a lost page cache; returns (end before, end after)."""
    assert pair.service is not None and pair.master is not None
    await pair.service.stop()
    pair.service = None
    before = pair.master.max_phy_offset
    abandon(pair.master)
    zero_tail(pair.root / "master", before, nbytes)
    pair.master = open_store(pair.root / "master", BrokerRole.ASYNC_MASTER)
    after = pair.master.max_phy_offset
    assert pair.master.recovery is not None and pair.master.recovery.abnormal
    assert after < before - nbytes // 2, (before, after)
    return before, after


async def start_master(pair: Pair, *, sync: bool = True, config: HAConfig = FAST) -> HAService:
    assert pair.master is not None
    pair.service = HAService(pair.master, "127.0.0.1", pair.port, config, sync_master=sync)
    await pair.service.start()
    pair.port = pair.service.port
    return pair.service


def try_put(store: MessageStore, i: int) -> PutStatus:
    return store.put_message(MessageInput(topic=TOPIC, body=b"x" * 100, queue_id=i % 4)).status


def test_master_that_lost_its_tail_takes_it_back_from_its_slave_before_taking_writes(tmp_path: Path) -> None:
    async def main() -> None:
        pair = Pair(tmp_path)
        try:
            service = await start_master(pair)
            client = pair.start_client()
            await until(lambda: bool(service.acked_offsets), what="the slave's first report")
            put(pair.m, 250)  # ~4 segments; the slave holds all of them
            await caught_up(pair.m, pair.s)
            held = pair.s.max_phy_offset
            await pair.stop_client()  # the slave is away while the master restarts

            before, after = await crash_master_losing_tail(pair)
            assert before == held
            service = await start_master(pair)
            assert service.recovering
            assert try_put(pair.m, 0) is PutStatus.SERVICE_NOT_AVAILABLE  # fenced: nothing may land at `after`
            assert "waits for its slave" in (pair.m.write_fence or "")

            client = pair.start_client()
            await until(lambda: not service.recovering, what="the master to reconcile with its slave")
            assert pair.m.max_phy_offset == before  # every byte the slave held came back
            assert service.took_back_bytes == before - after
            assert pair.m.write_fence is None
            assert [(e.number, e.start) for e in service.epochs.entries] == [(1, 0), (2, before)]
            await caught_up(pair.m, pair.s)
            assert assert_queues_serve_same(pair.m, pair.s) == 250  # every message readable on both

            put(pair.m, 40, start=250)  # writable again, and the queues continue where they were
            await caught_up(pair.m, pair.s)
            assert pair.m.read_commitlog(0, SEG) == pair.s.read_commitlog(0, SEG)
            assert assert_queues_serve_same(pair.m, pair.s) == 290
            assert client.truncations == 0 and client.status().served_bytes == before - after
            assert EpochFile(pair.root / "slave").load().epochs == service.epochs
        finally:
            await pair.close()

    asyncio.run(main())


def test_divergent_slave_is_truncated_to_the_last_common_offset_never_acknowledged_through(tmp_path: Path) -> None:
    """The operator let the master take writes without its slave (haRecoveryWaitMillis=0):
    its new records sit where the slave holds older ones. The slave must cut its tail at the
    epoch boundary and copy the master's records; its stale report is never an ack."""

    async def main() -> None:
        pair = Pair(tmp_path)
        no_wait = HAConfig(send_heartbeat_interval_ms=200, housekeeping_interval_ms=3000, recovery_wait_millis=0)
        try:
            service = await start_master(pair, config=no_wait)
            pair.start_client()
            await until(lambda: bool(service.acked_offsets), what="the slave's first report")
            put(pair.m, 250)
            await caught_up(pair.m, pair.s)
            await pair.stop_client()

            before, after = await crash_master_losing_tail(pair)
            service = await start_master(pair, config=no_wait)
            assert not service.recovering  # the operator chose availability
            put(pair.m, 150, start=1000)  # new records at offsets the slave holds others at
            assert pair.m.max_phy_offset > before  # the slave's old end is now inside the master's log

            client = pair.start_client()
            await caught_up(pair.m, pair.s)
            assert client.truncations == 1 and client.truncated_bytes == before - after
            assert service.truncated_slaves == 1
            # position by position identical, and every queue serves the same messages
            end = pair.m.max_phy_offset
            for off in range(0, end, SEG):
                n = min(SEG, end - off)
                assert pair.m.read_commitlog(off, n) == pair.s.read_commitlog(off, n), off
            assert pair.m.wait_dispatched()
            kept = sum(pair.m.max_offset_in_queue(TOPIC, q) for q in range(4)) - 150
            assert 0 < kept < 250  # what the master kept of the first 250, then the 150 new ones
            assert assert_queues_serve_same(pair.m, pair.s) == kept + 150
            assert client.status().refused == ""
        finally:
            await pair.close()

    asyncio.run(main())


def test_slave_with_an_epoch_the_master_never_had_is_refused_and_left_alone(tmp_path: Path) -> None:
    async def main() -> None:
        pair = Pair(tmp_path)
        try:
            put(pair.m, 30)
            await start_master(pair)
            pair.slave = open_store(tmp_path / "slave", BrokerRole.SLAVE)
            put_like_master = open_store(tmp_path / "other", BrokerRole.ASYNC_MASTER)
            put(put_like_master, 10)
            data = put_like_master.read_commitlog(0, put_like_master.max_phy_offset)
            put_like_master.shutdown()
            pair.slave.append_raw(0, data)  # its own history, written in an epoch of another master
            EpochFile(tmp_path / "slave").save(EpochState(EpochLog([(7, 0, 12345)])))
            client = pair.start_client()
            service = pair.service
            assert service is not None
            await until(lambda: service.refused_connections >= 1, what="the master to refuse the slave")
            await until(lambda: "epoch 7" in client.status().refused, what="the slave to learn why")
            assert pair.s.max_phy_offset == len(data)  # nothing truncated: an operator decides
            assert client.truncations == 0
        finally:
            await pair.close()

    asyncio.run(main())


def test_a_4x_slave_reporting_inside_a_record_is_refused(tmp_path: Path) -> None:
    async def main() -> None:
        pair = Pair(tmp_path)
        try:
            put(pair.m, 30)
            service = await start_master(pair)
            loop = asyncio.get_running_loop()
            sock = socket.create_connection(("127.0.0.1", pair.port))
            sock.setblocking(False)
            try:
                await loop.sock_sendall(sock, encode_report(1001))  # no hello: a RocketMQ slave
                await until(lambda: any("not a record boundary" in s.closed_reason for s in service.status()))
                assert service.max_acked_offset == 0  # its report was never an acknowledgement
            finally:
                sock.close()
        finally:
            await pair.close()

    asyncio.run(main())


def test_recovering_master_gives_up_waiting_after_haRecoveryWaitMillis(tmp_path: Path) -> None:
    async def main() -> None:
        pair = Pair(tmp_path)
        short = HAConfig(send_heartbeat_interval_ms=200, housekeeping_interval_ms=3000, recovery_wait_millis=300)
        try:
            service = await start_master(pair, sync=False, config=short)
            pair.start_client()
            await until(lambda: bool(service.acked_offsets), what="the slave's first report")
            put(pair.m, 50)
            await caught_up(pair.m, pair.s)
            await pair.stop_client(close_store=True)
            await crash_master_losing_tail(pair, 4096)
            service = await start_master(pair, sync=False, config=short)
            assert service.recovering and try_put(pair.m, 1) is PutStatus.SERVICE_NOT_AVAILABLE
            await until(lambda: not service.recovering, timeout=5, what="the recovery wait to end")
            assert try_put(pair.m, 2) is PutStatus.PUT_OK
            assert "gave up" in service.recovery_note
        finally:
            await pair.close()

    asyncio.run(main())


def test_clean_restart_and_a_master_that_never_had_a_slave_take_writes_at_once(tmp_path: Path) -> None:
    async def main() -> None:
        pair = Pair(tmp_path)
        try:
            service = await start_master(pair)
            put(pair.m, 10)
            assert not service.recovering
            # a crash with no slave ever attached: nothing can be waited for
            await service.stop()
            abandon(pair.m)
            pair.master = open_store(tmp_path / "master", BrokerRole.ASYNC_MASTER)
            service = await start_master(pair)
            assert not service.recovering and try_put(pair.m, 1) is PutStatus.PUT_OK
            assert service.epochs.last_epoch == 2
            # a slave attaches, then a clean stop: no wait either
            pair.start_client()
            await caught_up(pair.m, pair.s)
            await until(lambda: service.epoch_state.slave_attached, what="the slave to be remembered")
            await pair.close_master()
            pair.master = open_store(tmp_path / "master", BrokerRole.ASYNC_MASTER)
            service = await start_master(pair)
            assert not service.recovering and try_put(pair.m, 2) is PutStatus.PUT_OK
        finally:
            await pair.close()

    asyncio.run(main())


class BackoffWaits:
    """The back-off waits an ``HAClient``'s reconnect loop chose: every ``asyncio.timeout``
    entered by ``ledgermq.ha.slave``'s ``_run`` (its only one; connects and handshakes time
    out elsewhere). What the client decided, independent of how busy the machine is."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.delays: list[float] = []
        real = asyncio.timeout

        def recording(delay: float | None) -> asyncio.Timeout:
            caller = sys._getframe(1)
            if caller.f_code.co_name == "_run" and caller.f_globals.get("__name__") == "ledgermq.ha.slave":
                assert delay is not None
                self.delays.append(delay)
            return real(delay)

        monkeypatch.setattr(asyncio, "timeout", recording)


def test_slave_finds_a_returning_master_within_about_a_second_and_at_once_when_kicked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits = BackoffWaits(monkeypatch)

    async def main() -> None:
        pair = Pair(tmp_path)
        try:
            service = await start_master(pair)
            pair.slave = open_store(tmp_path / "slave", BrokerRole.SLAVE)
            # default back-off: from 0.1 s, doubling, capped at 1 s, each with +-20 % jitter
            client = HAClient(pair.s, lambda: f"127.0.0.1:{pair.port}", FAST, rng=random.Random(5))
            pair.client = client
            client.start()
            await until(lambda: client.connected, what="first connection")
            await service.stop()
            await until(lambda: not client.connected, what="the disconnect")
            # an outage long enough for an uncapped back-off to reach several seconds:
            # seven waits (0.1 0.2 0.4 0.8 1.6 3.2 6.4 s uncapped)
            await until(lambda: len(waits.delays) >= 7, timeout=30, what="seven back-off waits")
            outage = waits.delays
            assert outage[:4] == pytest.approx([0.1, 0.2, 0.4, 0.8], rel=0.21), outage
            assert all(0.8 <= d <= 1.2 for d in outage[4:]), outage  # capped at 1 s (+-20 %)
            service = await start_master(pair)
            await until(lambda: client.connected, what="the reconnect")

            await client.stop()  # a slow back-off, cut short by the name server's word
            client = HAClient(pair.s, lambda: f"127.0.0.1:{pair.port}", FAST, reconnect_min=30, reconnect_max=30)
            pair.client = client
            await service.stop()
            client.start()
            await until(lambda: client.status().last_error != "", what="a failed connect")
            service = await start_master(pair)
            await until(lambda: waits.delays[-1] >= 24, what="the 30 s back-off wait")
            client.kick()
            # connected while its 30 s (-20 %) wait would still be running: the kick ended it
            await until(lambda: client.connected, timeout=20, what="the kicked reconnect")
        finally:
            await pair.close()

    asyncio.run(main())
