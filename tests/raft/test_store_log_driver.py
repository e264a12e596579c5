"""A one-member DLedger group driven over ``StoreLog``: where the driver writes entries.

Under ASYNC_FLUSH an entry counts as persisted once written, so the driver writes it on
the event loop (a thread hand-off per Ready would cost more than the copy) and only the
timed fsync runs in a thread; under SYNC_FLUSH every write goes to the persist worker's
thread and is fsynced before the core hears of it. The recent-entries cache must hand
the core back exactly what was written, and forget a suffix a truncation replaced.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from ledgermq.config import FlushDiskType
from ledgermq.net.server import RemotingServer
from ledgermq.raft import Entry, Role
from ledgermq.raftio.driver import RaftDriver, RaftDriverConfig
from ledgermq.raftio.store_log import StoreLog
from ledgermq.raftio.transport import RaftTransport, parse_peers
from ledgermq.store.message_store import MessageStore, open_message_store
from ledgermq.testing.ports import HOST, free_port
from tests.store.dledger.mode_helpers import HOST as STORE_HOST
from tests.store.dledger.mode_helpers import TOPIC, dledger_config, encode


class WatchedLog(StoreLog):
    """Records which thread wrote entries and which thread fsynced."""

    def __init__(self, store: MessageStore) -> None:
        super().__init__(store)
        self.write_threads: list[str] = []
        self.flush_threads: list[str] = []

    def write(self, entries: Sequence[Entry], *, own: bool = False) -> None:
        self.write_threads.append(threading.current_thread().name)
        super().write(entries, own=own)

    def flush(self) -> tuple[int, int]:
        self.flush_threads.append(threading.current_thread().name)
        return super().flush()


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
def test_where_entries_are_written_follows_the_flush_type(tmp_path: Path, flush: FlushDiskType) -> None:
    async def main() -> None:
        peers = f"n0-{HOST}:{free_port()}"
        cfg = dledger_config(tmp_path, dleger_peers=peers, flush_disk_type=flush, flush_interval_commitlog_ms=50)
        store = open_message_store(cfg, store_host=STORE_HOST)
        await asyncio.to_thread(store.start)
        log = WatchedLog(store)
        server = RemotingServer(HOST, int(parse_peers(peers)["n0"].rsplit(":", 1)[1]))
        transport = RaftTransport("n0", parse_peers(peers))
        transport.attach(server)
        await server.start()
        driver = RaftDriver(
            RaftDriverConfig("n0", peers, tick_interval_ms=20, election_timeout_ticks=3),
            log,
            transport,
            on_commit=log.commit,
        )
        await driver.start()
        try:
            await driver.wait_for(lambda st: st.role is Role.LEADER, 5.0)
            loop_thread = threading.current_thread().name
            for i in range(20):
                (body,) = store.prepare_append([encode(f"m{i}".encode())], TOPIC, 0)
                await asyncio.wait_for(driver.propose(bytes(body)), 5.0)
            if flush is FlushDiskType.ASYNC_FLUSH:
                assert set(log.write_threads) == {loop_thread}
                # The timed fsync still happens, off the loop.
                dl = store.commitlog
                assert dl is not None
                deadline = asyncio.get_running_loop().time() + 5.0
                while dl.ledger.persisted_index + 1 < driver.status().last_index:
                    assert asyncio.get_running_loop().time() < deadline, "no fsync within 5 s"
                    await asyncio.sleep(0.02)
                assert log.flush_threads and loop_thread not in log.flush_threads
            else:
                assert log.write_threads and loop_thread not in log.write_threads
                assert loop_thread not in log.flush_threads
            # What the core reads back (cache or files) is what was proposed.
            last = driver.status().last_index
            assert [e.index for e in log.entries(1, last + 1, 1 << 30)] == list(range(1, last + 1))
        finally:
            await driver.stop()
            await server.stop()
            await asyncio.to_thread(store.shutdown)

    asyncio.run(main())


def test_recent_entries_follow_a_truncation_and_stay_bounded(tmp_path: Path) -> None:
    store = open_message_store(dledger_config(tmp_path), store_host=STORE_HOST)
    store.start()
    try:
        log = StoreLog(store)
        log._recent_max_entries = 4  # a small window so eviction is exercised

        def entry(index: int, term: int, text: str) -> Entry:
            (body,) = store.prepare_append([encode(text.encode())], TOPIC, 0)
            return Entry(index, term, bytes(body))

        log.write([entry(i, 1, f"a{i}") for i in range(1, 7)])
        assert sorted(log._recent) == [3, 4, 5, 6]  # the oldest fell out of the window
        replaced = [entry(5, 2, "b5"), entry(6, 2, "b6")]
        log.write(replaced)  # a new leader's entries replace the uncommitted 5..6
        got = log.entries(1, 7, 1 << 30)
        assert [(e.index, e.term) for e in got] == [(1, 1), (2, 1), (3, 1), (4, 1), (5, 2), (6, 2)]
        assert got[4].data == replaced[0].data and log.term(6) == 2
        # Entries read from the files (1, 2) and from memory agree on what is stored.
        assert [e.term for e in log.entries(1, 3, 1 << 30)] == [log.store.term_at(0), log.store.term_at(1)]
    finally:
        store.shutdown()
