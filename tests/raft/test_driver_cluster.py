"""RaftDriver end to end: three brokers' worth of drivers, real sockets, real DLedgerStores.

Timing is DLedger-like but scaled down (tick 50 ms, election timeout 10 ticks, so a
follower campaigns 0.5-1 s after it last heard a leader). Every wait has a deadline.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ledgermq.raft import EntryKind, NotLeaderError, Role
from ledgermq.raft.types import Message
from ledgermq.raftio.driver import DriverNotRunningError, LeadershipLostError
from ledgermq.store.dledger import DLedgerStore

from .driver_cluster import DriverCluster, monotonic, stored_log


def test_leader_elected_and_proposals_commit_everywhere_in_order(tmp_path: Path) -> None:
    async def main() -> None:
        c = DriverCluster(tmp_path)
        await c.start()
        try:
            leader = await c.wait_leader(timeout=5.0)
            follower = next(m for m in c.running() if m is not leader)
            with pytest.raises(NotLeaderError) as info:
                await follower.driver.propose(b"nope")
            assert info.value.leader_hint == leader.node_id
            payloads = [b"m%03d" % i for i in range(60)]
            # Concurrent proposals: each resolves with its own index once committed.
            indices = await asyncio.gather(*(leader.driver.propose(p) for p in payloads))
            assert indices == sorted(indices) and len(set(indices)) == len(indices)
            await c.wait(lambda: all(m.data == payloads for m in c.running()), 5.0, "every node applied all")
            # The same log on every disk, NOOP of the new leader's term included.
            await c.wait(lambda: len({len(stored_log(m.store)) for m in c.running()}) == 1, 5.0, "equal logs")
            logs = {m.node_id: stored_log(m.store) for m in c.running()}
            assert len({tuple(v) for v in logs.values()}) == 1
            assert logs[leader.node_id][0][2] == b""  # the election NOOP is an empty body
            # The leader learns a follower's match from its acknowledgement, which may still be
            # on its way when the follower's own log already shows everything.
            await c.wait(lambda: all(v >= indices[-1] for v in leader.driver.status().match.values()), 5.0, "acks seen")
            st = leader.driver.status()
            assert st.match and all(v >= indices[-1] for v in st.match.values())
            assert all(m.applied[0].kind is EntryKind.NOOP for m in c.running())
            assert leader.roles[-1] == (Role.LEADER, st.term, leader.node_id)
            with pytest.raises(ValueError):
                await leader.driver.propose(b"")
        finally:
            await c.stop()
        with pytest.raises(DriverNotRunningError):
            await leader.driver.propose(b"after stop")

    asyncio.run(main())


def test_failover_then_old_leader_rejoins_and_drops_its_divergent_tail(tmp_path: Path) -> None:
    async def main() -> None:
        c = DriverCluster(tmp_path)
        await c.start()
        try:
            old = await c.wait_leader(timeout=5.0)
            for i in range(10):
                await old.driver.propose(b"before-%d" % i)
            old_term = old.driver.status().term
            await c.wait(lambda: all(len(m.data) == 10 for m in c.running()), 5.0, "followers applied")

            t0 = monotonic()
            await c.stop_node(old.node_id)
            index = await c.propose_anywhere(b"after-failover", timeout=30.0)
            failover = monotonic() - t0
            new = c.leaders()[0]
            # Typically 0.5-0.8 s: the first follower's randomised timeout (0.5-1 s) plus a
            # pre-vote and a vote round (20 runs: median 0.70 s, p90 1.3 s, max 2.2 s). A
            # measurement, printed, not asserted: a loaded machine stretches it. What is
            # asserted is that one of the others took over in a later term and committed.
            print(
                f"\nfailover: new leader {new.node_id} committed index {index} {failover * 1000:.0f} ms after the stop"
            )
            assert new.node_id != old.node_id and new.driver.status().term > old_term
            for i in range(5):
                await new.driver.propose(b"after-%d" % i)

            # A divergent, uncommitted tail on the stopped node: an entry of its old term
            # at an index the new leader has since filled with something else.
            store = DLedgerStore.open(c.store_config(old.node_id))
            diverged_at = store.last_index + 1
            store.append([(diverged_at, old_term, b"divergent-old-term")])
            store.close()

            back = await c.start_node(old.node_id)
            want = [b"before-%d" % i for i in range(10)] + [b"after-failover"] + [b"after-%d" % i for i in range(5)]
            await c.wait(lambda: back.data == want, 5.0, "the rejoined node applied the new history")
            await c.wait(lambda: stored_log(back.store) == stored_log(new.store), 5.0, "identical stores")
            assert back.store.get(diverged_at).term > old_term
            assert all(body != b"divergent-old-term" for _i, _t, body in stored_log(back.store))
            assert b"divergent-old-term" not in back.data
            assert c.leaders()[0] is new  # pre-vote: the returning node did not depose it
        finally:
            await c.stop()

    asyncio.run(main())


def test_isolated_leader_commits_nothing_and_its_proposals_fail(tmp_path: Path) -> None:
    async def main() -> None:
        c = DriverCluster(tmp_path)
        await c.start()
        try:
            old = await c.wait_leader(timeout=5.0)
            await old.driver.propose(b"shared")
            rest = [n for n in c.ids if n != old.node_id]

            def cut(m: Message) -> bool:
                return old.node_id not in (m.src, m.dst)

            old.transport.outbound_filter = old.transport.inbound_filter = lambda m: False
            for n in rest:
                c.members[n].transport.outbound_filter = c.members[n].transport.inbound_filter = cut
            commit_before = old.driver.status().commit

            lonely = asyncio.create_task(old.driver.propose(b"lonely"))
            with pytest.raises(LeadershipLostError) as info:
                async with asyncio.timeout(5.0):
                    await lonely
            print(f"\nisolated leader gave up: {info.value}")
            assert old.driver.status().role is not Role.LEADER
            assert old.driver.status().commit == commit_before

            new = await c.wait_leader(timeout=5.0, among=rest)
            await c.propose_anywhere(b"majority", among=rest)
            assert old.driver.status().commit == commit_before
            with pytest.raises(NotLeaderError):
                await old.driver.propose(b"again")

            # Heal: the old leader learns the majority's history; "lonely" is gone for good.
            for m in c.running():
                m.transport.outbound_filter = m.transport.inbound_filter = None
            await c.wait(lambda: old.data == [b"shared", b"majority"], 5.0, "the old leader caught up")
            await c.wait(lambda: stored_log(old.store) == stored_log(new.store), 5.0, "identical stores")
            assert old.transport.stats()[new.node_id].filtered > 0
        finally:
            await c.stop()

    asyncio.run(main())
