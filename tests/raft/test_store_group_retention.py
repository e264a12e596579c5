"""Retention in a running DLedger group: three message stores, each driven by a RaftDriver
over loopback sockets, with small (4 KiB) data files and a ``MemberWatch`` guarding each
store as a broker wires it (broker/dledger.py).

What is checked: the leader deletes old files and the group goes on replicating and
committing; a connected follower that lags holds the leader's files back until the disk is
critical; a follower left below the leader's first index is reported stuck (ERROR once),
the leader neither crashes nor spins, and the follower keeps following without its log
moving; handing leadership to a member that still has the entries lets it catch up.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path

import pytest

from ledgermq.config import FlushDiskType
from ledgermq.protocol import message as M
from ledgermq.raft import Role
from ledgermq.raft.types import MsgType
from ledgermq.raftio.member_watch import MemberWatch
from ledgermq.store.dledger.reseed import reseed_store
from ledgermq.store.message_store import MessageStore
from ledgermq.store.results import GetStatus
from tests.raft.test_store_group import QUEUES, Node, StoreGroup, queues
from tests.store.dledger.mode_helpers import TOPIC


class DiskGauge:
    def __init__(self) -> None:
        self.ratio = 0.10

    def __call__(self, path: Path) -> float:
        return self.ratio


def ledger_of(store: MessageStore):  # type: ignore[no-untyped-def]
    assert store.commitlog is not None
    return store.commitlog.ledger


def age_all_files(store: MessageStore, hours: float = 1000.0) -> None:
    old = time.time() - hours * 3600
    for mf in ledger_of(store).data.files:
        os.utime(mf.path, (old, old))


def bodies_from(store: MessageStore, queue_id: int, offset: int) -> list[bytes]:
    out: list[bytes] = []
    while True:
        got = store.get_message(TOPIC, queue_id, offset, 32)
        if not got.message_count:
            return out
        out += [M.decode_record(r).body for r in got.messages]
        offset = got.next_begin_offset


def clean(store: MessageStore) -> int:
    """One round (every hour is a deleteWhen hour; the timer is set to an hour)."""
    assert store.cleaner is not None
    return store.cleaner.clean_once()


@pytest.mark.parametrize("remedy", ["transfer", "reseed"])
def test_the_group_replicates_on_after_the_leader_deleted_old_files(tmp_path: Path, caplog, remedy: str) -> None:
    caplog.set_level(logging.ERROR, logger="ledgermq.raftio.member_watch")

    async def main() -> None:
        gauge = DiskGauge()
        group = StoreGroup(
            tmp_path,
            store_kwargs={"disk_usage": gauge},
            mapped_file_size_commitlog=4096,
            clean_resource_interval_ms=3_600_000,
            delete_when=";".join(f"{h:02d}" for h in range(24)),
            delete_commitlog_files_interval_ms=0,
            flush_disk_type=FlushDiskType.SYNC_FLUSH,  # every entry durable: the checkpoint reaches the end
        )
        watches: dict[str, MemberWatch] = {}
        tasks: list[asyncio.Task[None]] = []

        async def start(node_id: str) -> Node:
            node = await group.start_node(node_id)
            watch = watches[node_id] = MemberWatch(node_id)
            node.store.add_ledger_guard(watch.keep_from)
            tasks.append(asyncio.create_task(watch.run(lambda d=node.driver: d, 0.05)))
            return node

        sent: list[bytes] = []

        async def send(n: int, tag: str) -> None:
            for i in range(n):
                body = f"{tag}-{i:03d}".encode() + bytes(300)
                await group.send(body, len(sent) % QUEUES)
                sent.append(body)

        def expected() -> list[list[bytes]]:
            return [[b for i, b in enumerate(sent) if i % QUEUES == q] for q in range(QUEUES)]

        try:
            for n in group.ids:
                await start(n)
            await send(40, "a")
            for node in group.running():
                await group.until(lambda n=node: queues(n.store) == expected(), 10, f"{node.node_id}'s queues")
            (leader,) = [n for n in group.running() if n.driver.status().role is Role.LEADER]
            lagger, other = [n for n in group.running() if n is not leader]
            watch = watches[leader.node_id]

            # The lagger stays connected (heartbeats pass) but gets no more entries.
            leader.driver.transport.outbound_filter = lambda m: (
                not (m.dst == lagger.node_id and m.type is MsgType.APPEND)
            )
            lag_last = ledger_of(lagger.store).last_index
            await send(60, "b")
            await group.until(lambda: queues(other.store) == expected(), 10, "the other follower's queues")
            assert ledger_of(lagger.store).last_index == lag_last
            lead_ledger = ledger_of(leader.store)
            await group.until(
                lambda: lead_ledger.committed_index == lead_ledger.last_index, 10, "the commit checkpoint"
            )
            await group.until(lambda: watch.keep_from() == lag_last, 5, "the watch to see the lagger's match")

            # Held back: only files wholly below what the connected lagger still needs go.
            age_all_files(leader.store)
            assert await asyncio.to_thread(clean, leader.store) >= 1
            assert 0 < lead_ledger.first_index <= lag_last
            assert await asyncio.to_thread(clean, leader.store) == 0

            # A critical disk overrides the guard: the lagger is given up.
            gauge.ratio = 0.90
            while await asyncio.to_thread(clean, leader.store):
                pass
            gauge.ratio = 0.10
            await asyncio.to_thread(clean, leader.store)  # the disk is fine again: writes accepted
            assert lead_ledger.first_index > lag_last + 1
            first = lead_ledger.first_index
            assert all(q > 0 for q in (leader.store.min_offset_in_queue(TOPIC, q) for q in range(QUEUES)))
            low = leader.store.get_message(TOPIC, 0, 0, 32)
            assert low.status is GetStatus.OFFSET_TOO_SMALL

            # Appends resume: the lagger needs what is gone, so it is stuck, reported once.
            leader.driver.transport.outbound_filter = None
            await group.until(lambda: watch.needs.stuck == {lagger.node_id}, 5, "the lagger reported stuck")
            loop = asyncio.get_running_loop()
            sent_before, t0 = leader.driver.transport.stats()[lagger.node_id].sent_messages, loop.time()
            await send(20, "c")
            await group.until(lambda: queues(other.store) == expected(), 10, "replication after the deletion")
            # No spinning on the stuck member: over a one-second window, about a heartbeat per
            # 50 ms tick goes to it.
            await group.until(lambda: loop.time() > t0 + 1.0, 5, "the measuring window")
            to_lagger = leader.driver.transport.stats()[lagger.node_id].sent_messages - sent_before
            assert 0 < to_lagger <= 2 * (loop.time() - t0) / 0.05 + 20, to_lagger
            st = leader.driver.status()
            assert st.role is Role.LEADER and st.failed is None and st.commit == st.last_index
            assert lead_ledger.first_index == first
            # The stuck follower follows the leader, its log does not move, nothing fails.
            lst = lagger.driver.status()
            assert lst.role is Role.FOLLOWER and lst.leader == leader.node_id and lst.failed is None
            assert ledger_of(lagger.store).last_index == lag_last
            errors = [
                r for r in caplog.records if lagger.node_id in r.getMessage() and "needs entries" in r.getMessage()
            ]
            assert len(errors) == 1

            if remedy == "transfer":
                # A leader that still has the entries can feed it: hand leadership over.
                leader.driver.transfer_leadership(other.node_id)
                await group.until(
                    lambda: other.driver.status().role is Role.LEADER, 10, "leadership to move to the other follower"
                )
            else:
                # Re-seed the stopped follower from a copy of the running leader's store.
                await group.stop_node(lagger.node_id)
                aside = await asyncio.to_thread(
                    reseed_store,
                    group.root / leader.node_id,
                    leader.node_id,
                    group.root / lagger.node_id,
                    lagger.node_id,
                )
                assert aside is not None and aside.is_dir()
                lagger = await start(lagger.node_id)
                assert ledger_of(lagger.store).first_index == lead_ledger.first_index
            await send(5, "d")
            ends = [len(q) for q in expected()]
            for node in group.running():
                await group.until(
                    lambda n=node: [n.store.max_offset_in_queue(TOPIC, q) for q in range(QUEUES)] == ends,
                    10,
                    f"{node.node_id} to have the last sends",
                )
            await group.until(lambda: not watch.needs.stuck, 5, "the old leader to stop reporting it")
            # Every message the lagger stores is the group's, at its queue offset.
            for q in range(QUEUES):
                low_q = lagger.store.min_offset_in_queue(TOPIC, q)
                assert bodies_from(lagger.store, q, low_q) == expected()[q][low_q:]
            if remedy == "transfer":
                assert queues(lagger.store) == expected()  # it kept its old entries and got the rest
        finally:
            for t in tasks:
                t.cancel()
            for n in list(group.nodes):
                await group.stop_node(n)

    asyncio.run(main())
