"""RaftDriver behaviour beyond the happy path: config checks, restarts, callbacks, transfer,
fail-stop on a storage error, proposals pending at stop. Real sockets and stores throughout."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import ClassVar

import pytest

from ledgermq.clock import ManualClock
from ledgermq.errors import ConfigError
from ledgermq.raft import Entry, EntryKind, Role
from ledgermq.raft.types import HardState, Message, MsgType
from ledgermq.raftio.driver import (
    LeadershipLostError,
    ProposalOutcomeUnknownError,
    RaftDriver,
    RaftDriverConfig,
    election_jitter_rng,
    seed_election_jitter,
)
from ledgermq.raftio.ledger_storage import LedgerStorage
from ledgermq.raftio.transport import RaftTransport, parse_peers
from ledgermq.store.dledger import DLedgerStore, DLedgerStoreConfig
from ledgermq.testing.ports import HOST, free_port

from .driver_cluster import ELECTION_TICKS, TICK_MS, DriverCluster


def test_config_is_checked_up_front() -> None:
    with pytest.raises(ConfigError, match="'n9' is not in dLegerPeers"):
        RaftDriverConfig("n9", "n0-127.0.0.1:1;n1-127.0.0.1:2")
    with pytest.raises(ConfigError, match="election_timeout_ticks"):
        RaftDriverConfig("n0", "n0-127.0.0.1:1", election_timeout_ticks=1, heartbeat_ticks=1)
    with pytest.raises(ConfigError, match="part 2"):
        RaftDriverConfig("n0", "n0-127.0.0.1:1;n1")
    with pytest.raises(ConfigError, match="tick_interval_ms"):
        RaftDriverConfig("n0", "n0-127.0.0.1:1", tick_interval_ms=0)


def test_election_jitter_repeats_under_a_seed_and_differs_between_peers() -> None:
    """Tests seed the jitter (tests/conftest.py) so elections repeat run to run; peers still
    draw different timeouts, a configured seed wins, and without either it is the OS's."""

    def draws(rng: random.Random) -> list[int]:
        return [rng.randrange(1000) for _ in range(8)]

    try:
        seed_election_jitter(7)
        assert draws(election_jitter_rng(None, "n0")) == draws(election_jitter_rng(None, "n0"))
        assert draws(election_jitter_rng(None, "n0")) != draws(election_jitter_rng(None, "n1"))
        assert draws(election_jitter_rng(3, "n0")) == draws(election_jitter_rng(3, "n1"))  # the config's seed
        seed_election_jitter(None)
        assert draws(election_jitter_rng(None, "n0")) != draws(election_jitter_rng(None, "n0"))  # 1000**8 to 1
    finally:
        seed_election_jitter(None)


def small(root: Path) -> DLedgerStoreConfig:
    return DLedgerStoreConfig(str(root), "n0", data_file_size=1 << 20, index_file_size=32 * 4096)


class Single:
    """A one-node group: it elects itself at once and commits alone (fast restarts)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.peers = f"n0-{HOST}:{free_port()}"

    async def run(self, proposals: Sequence[bytes], applied: int = 0, async_commit: bool = False) -> list[Entry]:
        got: list[Entry] = []

        async def on_commit_async(entries: Sequence[Entry]) -> None:
            await asyncio.sleep(0)
            got.extend(entries)

        store = DLedgerStore.open(small(self.root))
        transport = RaftTransport("n0", parse_peers(self.peers))
        cfg = RaftDriverConfig("n0", self.peers, tick_interval_ms=10, election_timeout_ticks=3)
        driver = RaftDriver(
            cfg,
            LedgerStorage(store),
            transport,
            on_commit=on_commit_async if async_commit else got.extend,
            applied=applied,
        )
        await driver.start()
        try:
            await driver.wait_for(lambda s: s.role is Role.LEADER, timeout=3.0)
            for p in proposals:
                await driver.propose(p)
            await driver.wait_for(lambda s: s.applied == s.last_index, timeout=3.0)
        finally:
            await driver.stop()
            store.close()
        return got


def test_restart_keeps_term_and_log_and_skips_what_was_applied(tmp_path: Path) -> None:
    async def main() -> None:
        single = Single(tmp_path)
        first = await single.run([b"a", b"b", b"c"])
        assert [(e.index, e.kind, bytes(e.data)) for e in first] == [
            (1, EntryKind.NOOP, b""),
            (2, EntryKind.NORMAL, b"a"),
            (3, EntryKind.NORMAL, b"b"),
            (4, EntryKind.NORMAL, b"c"),
        ]
        with DLedgerStore.open(small(tmp_path)) as store:
            hs = LedgerStorage(store).load_hard_state()
            assert hs == HardState(1, "n0", 4)  # the stop checkpointed the commit
        # The state machine got through index 3 before the "crash": only 4 and later again.
        second = await single.run([b"d"], applied=3, async_commit=True)
        assert [(e.index, bytes(e.data)) for e in second] == [(4, b"c"), (5, b""), (6, b"d")]
        assert second[1].kind is EntryKind.NOOP and second[1].term == 2

    asyncio.run(main())


def test_a_failing_on_commit_is_logged_and_the_loop_goes_on(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        c = DriverCluster(tmp_path)
        await c.start()
        try:
            leader = await c.wait_leader()
            calls: list[int] = []

            def flaky(entries: Sequence[Entry]) -> None:
                calls.append(entries[-1].index)
                if len(calls) == 1:
                    raise RuntimeError("state machine hiccup")

            leader.driver.on_commit = flaky
            first = await leader.driver.propose(b"one")
            second = await leader.driver.propose(b"two")
            assert second > first and calls[-1] == second
        finally:
            await c.stop()

    asyncio.run(main())
    assert "on_commit failed" in caplog.text and "state machine hiccup" in caplog.text


def test_transfer_leadership(tmp_path: Path) -> None:
    async def main() -> None:
        c = DriverCluster(tmp_path)
        await c.start()
        try:
            old = await c.wait_leader()
            await old.driver.propose(b"x")
            target = next(n for n in c.ids if n != old.node_id)
            old.driver.transfer_leadership(target)
            await c.members[target].driver.wait_for(lambda s: s.role is Role.LEADER, timeout=3.0)
            new = await c.wait_leader()
            assert new.node_id == target
            await new.driver.propose(b"y")
            await c.wait(lambda: all(m.data == [b"x", b"y"] for m in c.running()), 5.0, "both applied")
            assert (Role.FOLLOWER, new.driver.status().term, target) in old.roles
        finally:
            await c.stop()

    asyncio.run(main())


class BrokenDisk(LedgerStorage):
    """Writes fail once ``broken`` is set, as a full or failing disk would."""

    broken = False

    def write(self, entries: Sequence[Entry], *, own: bool = False) -> None:
        if self.broken:
            raise OSError(28, "No space left on device")
        super().write(entries, own=own)


def test_storage_failure_stops_the_node_and_the_rest_carry_on(tmp_path: Path) -> None:
    async def main() -> None:
        c = DriverCluster(tmp_path)
        await c.start()
        try:
            leader = await c.wait_leader()
            d = leader.driver
            disk = BrokenDisk(leader.store)
            d.storage = disk
            failure = asyncio.create_task(d.wait_failed())  # what a supervisor waits on
            await d.propose(b"fine")
            await asyncio.sleep(0.05)
            assert not failure.done()  # Readies come and go; it wakes for a failure only
            disk.broken = True
            with pytest.raises(ProposalOutcomeUnknownError, match="No space left"):
                async with asyncio.timeout(3.0):
                    await d.propose(b"doomed")
            async with asyncio.timeout(1.0):
                assert "No space left" in await failure
            st = d.status()
            assert st.failed is not None and "No space left" in st.failed
            assert leader.roles[-1][0] is Role.FOLLOWER and leader.roles[-1][2] is None
            rest = [n for n in c.ids if n != leader.node_id]
            await c.wait_leader(timeout=5.0, among=rest)
            await c.propose_anywhere(b"after", among=rest)
        finally:
            await c.stop()

    asyncio.run(main())


def test_stop_fails_pending_proposals_with_outcome_unknown(tmp_path: Path) -> None:
    async def main() -> None:
        c = DriverCluster(tmp_path)
        await c.start()
        try:
            leader = await c.wait_leader()
            leader.transport.outbound_filter = lambda m: False  # nothing can commit
            pending = asyncio.create_task(leader.driver.propose(b"in flight"))
            await c.wait(lambda: leader.driver.pending_proposals == 1, 2.0, "the proposal is pending")
            await c.stop_node(leader.node_id)
            with pytest.raises(LeadershipLostError, match="stopped before index"):
                await pending
        finally:
            await c.stop()

    asyncio.run(main())


def test_driver_and_transport_must_agree_on_the_group(tmp_path: Path) -> None:
    peers = f"n0-{HOST}:{free_port()};n1-{HOST}:{free_port()}"
    with DLedgerStore.open(small(tmp_path)) as store:
        transport = RaftTransport("n0", {"n0": "127.0.0.1:1"})
        with pytest.raises(ConfigError, match="different nodes"):
            RaftDriver(RaftDriverConfig("n0", peers), LedgerStorage(store), transport)


class Recorder(LedgerStorage):
    """Records durable term/vote saves and flushes, with a slow fsync to widen every window."""

    events: ClassVar[list[tuple[str, str, int]]] = []

    def save_hard_state(self, hs: HardState) -> None:
        before = self.store.term_state
        time.sleep(0.01)
        super().save_hard_state(hs)
        if (before.current_term, before.vote_for) != (hs.term, hs.vote):
            Recorder.events.append(("durable", self.store.config.self_id, hs.term))

    def flush(self) -> tuple[int, int]:
        Recorder.events.append(("flush", self.store.config.self_id, 0))
        return super().flush()


def test_term_is_durable_before_any_message_of_it_leaves_and_writes_are_grouped(tmp_path: Path) -> None:
    async def main() -> None:
        Recorder.events = []
        c = DriverCluster(tmp_path, storage_cls=Recorder)
        await c.start()
        sent: list[tuple[str, str, int]] = []
        for m in c.running():
            original = m.transport.send

            def spy(messages: Iterable[Message], original: Callable[[Iterable[Message]], None] = original) -> None:
                batch = list(messages)
                for msg in batch:
                    # A pre-vote (and a yes to one) names the term it would run in, not ours.
                    if msg.type not in (MsgType.PRE_VOTE, MsgType.PRE_VOTE_RESP):
                        Recorder.events.append(("send", msg.src, msg.term))
                        sent.append(("send", msg.src, msg.term))
                original(batch)

            m.transport.send = spy  # type: ignore[method-assign]
        try:
            leader = await c.wait_leader()
            flushes_before = sum(1 for e in Recorder.events if e[:2] == ("flush", leader.node_id))
            await asyncio.gather(*(leader.driver.propose(b"p%d" % i) for i in range(100)))
            flushes = sum(1 for e in Recorder.events if e[:2] == ("flush", leader.node_id)) - flushes_before
            assert flushes < 50, f"{flushes} fsyncs for 100 concurrent proposals: no group commit"
        finally:
            await c.stop()
        assert sent, "nothing was sent"
        durable: dict[str, int] = {}
        for kind, node, term in Recorder.events:
            if kind == "durable":
                durable[node] = max(durable.get(node, 0), term)
            elif kind == "send":
                assert term <= durable.get(node, 0), f"{node} sent a term-{term} message before the term was durable"

    asyncio.run(main())


def test_commit_is_checkpointed_while_running_not_only_at_stop(tmp_path: Path) -> None:
    async def main() -> None:
        c = DriverCluster(tmp_path, commit_checkpoint_interval_ms=100)
        await c.start()
        try:
            leader = await c.wait_leader()
            index = 0
            for i in range(5):
                index = await leader.driver.propose(b"c%d" % i)
            # committedIndex is DLedger-based: raft index - 1.
            await c.wait(lambda: all(m.store.committed_index >= index - 1 for m in c.running()), 3.0, "checkpoints")
        finally:
            await c.stop()

    asyncio.run(main())


def test_a_leader_stalled_past_an_election_timeout_stops_claiming_and_steps_down(tmp_path: Path) -> None:
    """A stopped (SIGSTOP) or starved leader counted no ticks meanwhile, so its core still
    says LEADER on waking while the others may have elected someone else. Until its tick
    loop ran, ``leadership_current`` is False (the broker then does not register as master);
    its first tick after the stall counts the missed election timeout, and check-quorum
    steps it down at once instead of an election timeout later."""

    async def main() -> None:
        c = DriverCluster(tmp_path)
        await c.start()
        try:
            leader = await c.wait_leader()
            d = leader.driver
            await c.wait(d.leadership_current, 2.0, "a current leadership")
            stall_s = TICK_MS * ELECTION_TICKS / 1000 * 1.5
            roles_before = len(leader.roles)
            time.sleep(stall_s)  # the whole process stalls, as under SIGSTOP
            assert d.status().role is Role.LEADER  # nothing has run yet...
            assert not d.leadership_current()  # ...but it no longer claims to lead
            await c.wait(
                lambda: d.status().role is not Role.LEADER, TICK_MS / 1000 * 3, "the stalled leader stepping down"
            )
            assert any(r[0] is Role.FOLLOWER for r in leader.roles[roles_before:])
            await c.wait_leader()  # and the group carries on
        finally:
            await c.stop()

    asyncio.run(main())


def test_the_ticks_and_the_leadership_stamp_go_by_the_injected_clock(tmp_path: Path) -> None:
    """The driver reads time only through its clock: when a leader's clock jumps past an
    election timeout, it stops claiming its leadership at once, before any tick has run
    (a real-time driver would still claim it for a whole timeout); its next tick, which
    sees the jump as a stall, makes the leadership current again."""

    async def main() -> None:
        clock = ManualClock()
        store = DLedgerStore.open(small(tmp_path))
        peers = f"n0-{HOST}:{free_port()}"
        cfg = RaftDriverConfig("n0", peers, tick_interval_ms=10, election_timeout_ticks=3)
        driver = RaftDriver(cfg, LedgerStorage(store), RaftTransport("n0", parse_peers(peers)), clock=clock)
        await driver.start()
        try:
            await driver.wait_for(lambda s: s.role is Role.LEADER, timeout=5.0)
            assert driver.leadership_current()  # the clock has not moved since the last tick
            clock.advance(2 * cfg.tick_interval_ms * cfg.election_timeout_ticks / 1000)
            assert not driver.leadership_current()
            deadline = time.monotonic() + 5.0
            while not driver.leadership_current():
                assert time.monotonic() < deadline, "no tick after the clock moved"
                await asyncio.sleep(0.01)
        finally:
            await driver.stop()
            store.close()

    asyncio.run(main())
