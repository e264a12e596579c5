"""``RaftDriver``: the asyncio loop that runs one pure ``RaftNode`` against a disk and a network.

The core decides; the driver only carries out its Ready contract (docs/raft.md) in the
right order, because that order is what makes Raft safe:

1. a changed term or vote is made durable (``currterm``, fsynced) *before* any message of
   the same Ready leaves, so a vote or a term is never forgotten after a peer saw it;
2. messages go to the transport (the leader's appends may leave before its own copy is
   durable, as Raft allows; a follower's acks are held by the core until durable, so
   they are in a later Ready than the entries they vouch for);
3. new entries go to a single persist worker that writes and fsyncs them in a thread
   (``asyncio.to_thread``, so the loop keeps ticking and answering) and only then calls
   ``persisted()``; Readies that queue up meanwhile are written together (group commit),
   always in the order they were handed out. When the storage counts an entry as
   persisted once written (``write_inline``: a broker under ASYNC_FLUSH), the write is a
   copy into the page cache and is done on the loop, ``persisted()`` right after it and
   a follower's acks sent then (``take_persisted_acks``: no Ready of their own, and not
   behind step 4), and the worker only fsyncs on the tick timer: a thread hand-off per
   Ready would cost more than the copy;
4. committed entries go to ``on_commit`` in order, then the proposals they settle resolve;
5. ``advance``.

Three tasks run: ticks (``tick_interval_ms``), the Ready loop (woken by every tick, step
and proposal) and the persist worker. None may die silently: an exception in a callback
or a step is logged and the loop goes on; a storage failure (or a Ready that could not be
carried out) is logged and stops the node (fail-stop: going on after a lost write could
break the promises Raft made), which ``status().failed`` reports, ``on_role_change``
hears as FOLLOWER with no leader, and every pending proposal learns (proposals.py keeps
them and decides each one's answer). A driver is started and stopped once; a restart
builds a new one on the same store. Its settings and status report are in
``driver_config``; the ticks go by an injected clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence

from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.errors import ConfigError
from ledgermq.raft import RaftNode
from ledgermq.raft.types import Entry, Message, Ready, Role
from ledgermq.raftio.driver_config import RaftDriverConfig, RaftStatus, election_jitter_rng, seed_election_jitter
from ledgermq.raftio.ledger_storage import LedgerStorage
from ledgermq.raftio.proposals import (
    DriverNotRunningError,
    LeadershipLostError,
    OnSettled,
    PendingProposals,
    ProposalOutcomeUnknownError,
    ProposalOverwrittenError,
)
from ledgermq.raftio.transport import RaftTransport
from ledgermq.store.dledger import CorruptEntryError

__all__ = [
    "DriverNotRunningError",
    "LeadershipLostError",
    "ProposalOutcomeUnknownError",
    "ProposalOverwrittenError",
    "RaftDriver",
    "RaftDriverConfig",
    "RaftStatus",
    "election_jitter_rng",
    "seed_election_jitter",
]

log = logging.getLogger(__name__)

CommitCallback = Callable[[Sequence[Entry]], Awaitable[None] | None]
RoleCallback = Callable[[Role, int, str | None], None]


class RaftDriver:
    """Runs one Raft node. ``start()``, then ``propose``/``status``/...; ``stop()`` at the end.

    ``on_commit(entries)`` gets every committed entry once, in index order (NOOPs included:
    they carry indices the state machine may count), and may be a coroutine function; the
    next Ready waits for it. ``on_role_change(role, term, leader)`` is called whenever one
    of the three changes. ``applied`` says how far the caller's state machine already got,
    so a restart does not hand those entries out again. The storage and the transport stay
    the caller's (start the transport's server before, close the store after).
    """

    def __init__(
        self,
        config: RaftDriverConfig,
        storage: LedgerStorage,
        transport: RaftTransport,
        *,
        on_commit: CommitCallback | None = None,
        on_role_change: RoleCallback | None = None,
        applied: int = 0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if transport.self_id != config.self_id or set(transport.peers) != set(config.peer_addresses):
            raise ConfigError("the transport and the driver config name different nodes")
        self.config = config
        self.storage = storage
        self.transport = transport
        self.on_commit = on_commit
        self.on_role_change = on_role_change
        self.clock = clock
        """Paces the ticks and dates the last one (``leadership_current``); a test may drive it."""
        self.node = self._make_node(applied)
        self.failed: BaseException | None = None
        self._running = False
        self._wake = asyncio.Event()
        self._persist_wake = asyncio.Event()
        self._persist_queue: list[tuple[tuple[Entry, ...], bool]] = []  # (entries, own proposals)
        self._proposals = PendingProposals()
        self._commit_hint = self.node.commit
        self._checkpoint_due = False
        self._inline_writes = storage.write_inline
        self._last_tick_at: float | None = None
        self._flush_due = False
        self._reported: tuple[Role, int, str | None] = (self.node.role, self.node.term, self.node.leader)
        self._changed: asyncio.Event | None = None  # made by the first ``wait_for`` after a change
        self._failed_event = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._persist_task: asyncio.Task[None] | None = None
        self._sync_task: asyncio.Future[None] | None = None
        self.repairs_completed = 0

    def _make_node(self, applied: int) -> RaftNode:
        hs = self.storage.load_hard_state()
        rng = election_jitter_rng(self.config.seed, self.config.self_id)
        peers = list(self.config.peer_addresses)
        # The core reads durable entries from the store; only the unwritten tail is in memory.
        repair = self.storage.repair()
        if repair is not None:
            log.error(
                "raft %s: this member's log lost entries; repairing until index %d from the leader "
                "(until then it does not campaign, votes only for logs as up to date as its old one, "
                "and is not counted toward a quorum)",
                self.config.self_id,
                repair.until,
            )
        return RaftNode(
            self.config.raft_config(), peers, hs, storage=self.storage, applied=applied, rng=rng, repair=repair
        )

    # -- lifetime --------------------------------------------------------------------
    async def start(self) -> None:
        if self._running:
            return
        self._running = True
        self.transport.set_handler(self._on_messages)
        await self.transport.start()
        me = self.config.self_id
        self._persist_task = asyncio.create_task(self._persist_loop(), name=f"raft-persist-{me}")
        self._tasks = [
            asyncio.create_task(self._tick_loop(), name=f"raft-tick-{me}"),
            asyncio.create_task(self._ready_loop(), name=f"raft-ready-{me}"),
        ]
        self._wake.set()
        log.info(
            "raft %s: started in term %d (last index %d, commit %d)",
            me,
            self.node.term,
            self.node.last_index,
            self.node.commit,
        )

    async def stop(self) -> None:
        """Stop ticking and answering, finish the write in progress, checkpoint the commit."""
        if not self._running:
            return
        self._running = False
        self.transport.set_handler(None)
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks = []
        if self._sync_task is not None and not self._sync_task.done():
            with contextlib.suppress(Exception):
                await self._sync_task  # a term/vote write already under way finishes first
        if self._persist_task is not None:
            self._persist_wake.set()  # the worker drains its queue, then sees _running False
            await self._persist_task
            self._persist_task = None
        if self.failed is None:
            try:
                await asyncio.to_thread(self.storage.save_commit, self._commit_hint)
            except Exception:
                log.exception("raft %s: final commit checkpoint failed", self.config.self_id)
        self._proposals.fail(lambda i, t: LeadershipLostError(f"the driver stopped before index {i} committed", i, t))
        await self.transport.stop()
        log.info("raft %s: stopped", self.config.self_id)

    # -- API -------------------------------------------------------------------------
    async def propose(self, data: bytes) -> int:
        """Append ``data``; returns its index once committed and handed to ``on_commit``.

        NotLeaderError (with the leader hint) or LeaderTransferInProgressError at once off
        a leader; LeadershipLostError if leadership goes before the commit (outcome
        unknown); ProposalOverwrittenError if another entry committed at that index.
        """
        return await self.propose_nowait(data)

    def propose_nowait(self, data: bytes) -> asyncio.Future[int]:
        """``propose`` without waiting: the entry is in the log (in call order) when this
        returns, and the future resolves as ``propose`` would. A broker that assigned queue
        offsets to several messages proposes them this way, so their order cannot change."""
        fut = self._proposals.add(self._append_proposal(data), self.node.term)
        self._wake.set()
        return fut

    def propose_with(self, data: bytes, on_settled: OnSettled) -> int:
        """``propose_nowait`` without a future: the entry's index now, and
        ``on_settled(index, error)`` once decided (``error`` None: committed; else what the
        future would have raised), called from the step that decides it. A broker's send
        path settles many entries per step this way, with no loop step per entry."""
        index = self._append_proposal(data)
        self._proposals.add_callback(index, self.node.term, on_settled)
        self._wake.set()
        return index

    def _append_proposal(self, data: bytes) -> int:
        if not self._running or self.failed is not None:
            raise DriverNotRunningError(f"raft {self.config.self_id} is not running")
        if not data:
            raise ValueError("an empty proposal would read back as a NOOP; propose at least one byte")
        return self.node.propose(data)

    def transfer_leadership(self, target: str) -> None:
        """Ask the leader to hand over to ``target`` (NotLeaderError elsewhere); see ``wait_for``."""
        self.node.transfer_leader(target)
        self._wake.set()

    def status(self) -> RaftStatus:
        n = self.node
        match = {peer: m for peer, (m, _next, _state) in n.progress().items()} if n.role is Role.LEADER else {}
        failed = None if self.failed is None else f"{type(self.failed).__name__}: {self.failed}"
        return RaftStatus(
            self.config.self_id,
            n.role,
            n.term,
            n.leader,
            n.commit,
            n.applied,
            n.last_index,
            n.persisted_index,
            match,
            failed,
            n.repair_until,
        )

    async def wait_for(self, predicate: Callable[[RaftStatus], bool], timeout: float) -> RaftStatus:
        """Wait until ``predicate(status())`` holds (checked after each Ready); TimeoutError after ``timeout``."""
        async with asyncio.timeout(timeout):
            while True:
                st = self.status()
                if predicate(st):
                    return st
                event = self._changed
                if event is None:
                    event = self._changed = asyncio.Event()
                await event.wait()

    async def wait_failed(self) -> str:
        """Wait until the driver fail-stops; its ``status().failed`` reason.

        For a supervisor that waits for nothing else: ``wait_for`` would wake it after
        every Ready (hundreds a second under load) only to find the driver still running."""
        await self._failed_event.wait()
        return self.status().failed or "failed"

    def leadership_current(self) -> bool:
        """Leader, and the tick loop ran within the last election timeout.

        The core's leases are counted in ticks, and a process that was stopped (SIGSTOP, a
        long stall) counted none meanwhile, so on waking its core still says LEADER though
        the others may have elected someone else. Until the tick loop has caught up (and
        check-quorum stepped down), claims made on its behalf, such as registering as the
        group's master, must wait."""
        if self.node.role is not Role.LEADER or self.failed is not None or self._last_tick_at is None:
            return False
        timeout_s = self.config.tick_interval_ms * self.config.election_timeout_ticks / 1000
        return self.clock.monotonic() - self._last_tick_at <= timeout_s

    @property
    def pending_proposals(self) -> int:
        return len(self._proposals)

    # -- loops -----------------------------------------------------------------------
    def _on_messages(self, messages: list[Message]) -> None:
        if not self._running or self.failed is not None:
            return
        for m in messages:
            try:
                self.node.step(m)
            except CorruptEntryError as exc:
                self._fail(exc, f"reading the log to answer {m.type.value} from {m.src}")
                return
            except Exception:
                log.exception("raft %s: step(%s from %s) failed", self.config.self_id, m.type.value, m.src)
        self._wake.set()

    async def _tick_loop(self) -> None:
        now = self.clock.monotonic
        interval = self.config.tick_interval_ms / 1000
        checkpoint_every = max(1, round(self.config.commit_checkpoint_interval_ms / self.config.tick_interval_ms))
        ticks = 0
        due = now()
        while True:
            due += interval
            await asyncio.sleep(max(0.0, due - now()))
            missed = 0
            woke = now()
            if woke - due > 5 * interval:
                missed = int((woke - due) / interval)
                due = woke  # after a stall, do not fire a burst of catch-up ticks...
            if self.failed is not None:
                continue
            try:
                if missed >= self.config.election_timeout_ticks and self.node.role is Role.LEADER:
                    # ...except that a leader stalled past an election timeout (stopped, or
                    # starved) counts the timeout now: check-quorum then steps it down at
                    # once unless a quorum is heard from, instead of an election timeout
                    # later, during which it would still act as the group's master.
                    log.warning(
                        "raft %s: stalled for %.1f s while leading; counting the missed election timeout",
                        self.config.self_id,
                        missed * interval,
                    )
                    for _ in range(self.config.election_timeout_ticks - 1):
                        self.node.tick()
                self.node.tick()
            except CorruptEntryError as exc:
                self._fail(exc, "reading the log on a tick")
                continue
            except Exception:
                log.exception("raft %s: tick failed", self.config.self_id)
            self._last_tick_at = now()
            ticks += 1
            if ticks % checkpoint_every == 0 and self._commit_hint > self.storage.saved_commit:
                self._checkpoint_due = True
                self._persist_wake.set()
            if self._inline_writes and not self._flush_due and self.storage.flush_due():
                self._flush_due = True  # the storage paces its fsyncs (flushIntervalCommitLog)
                self._persist_wake.set()
            self._wake.set()

    async def _ready_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                while self.failed is None and self.node.has_ready():
                    await self._handle_ready(self.node.ready())
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # A Ready half carried out cannot be advanced (and the core takes no other
                # until it is): stop rather than guess which of its promises were kept.
                self._fail(exc, "handling a Ready")
            if self.repairing and self.node.repair_until == 0 and self.failed is None:
                await self._end_repair()
            self._notify()

    async def _handle_ready(self, rd: Ready) -> None:
        if rd.hard_state is not None:
            if rd.must_sync:
                # A task, so stop() can wait for the write a cancel cannot interrupt.
                self._sync_task = asyncio.ensure_future(asyncio.to_thread(self.storage.save_hard_state, rd.hard_state))
                try:
                    await asyncio.shield(self._sync_task)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self._fail(exc, "saving the term and vote")
                    return  # nothing of this Ready may be sent, and the node stops
            self._commit_hint = rd.hard_state.commit
        # Messages go before this Ready's entries are written (etcd's rule): a leader's Appends
        # may leave first; acks for these entries leave once persisted (below when written
        # inline, else in a later Ready).
        if rd.messages:
            try:
                self.transport.send(rd.messages)
            except Exception:
                log.exception("raft %s: queueing %d messages failed", self.config.self_id, len(rd.messages))
        if rd.entries_to_persist:
            # A leader appends only its own proposals (and its NOOP) in its own term.
            own = self.node.role is Role.LEADER and rd.entries_to_persist[0].term == self.node.term
            if self._inline_writes:
                try:
                    self.storage.write(rd.entries_to_persist, own=own)
                except Exception as exc:
                    self._fail(exc, "writing entries")
                    return  # the node stops (its messages vouch only for what was already durable)
                self._persisted_inline(rd.entries_to_persist[-1])
            else:
                self._persist_queue.append((rd.entries_to_persist, own))
                self._persist_wake.set()
        if rd.committed_entries:
            await self._apply(rd.committed_entries)
        self._observe_roles()
        self.node.advance(rd)

    def _persisted_inline(self, written: Entry) -> None:
        """Entries written on the loop count as persisted at once, and a follower's acks for
        them leave now: before this Ready's committed entries are applied (a follower's
        dispatch would delay the leader's commit), with no second Ready per round for them.
        The hard state of this Ready is durable by now (``must_sync`` was awaited first)."""
        node = self.node
        node.persisted(written.index, written.term)
        acks = node.take_persisted_acks()
        if acks:
            try:
                self.transport.send(acks)
            except Exception:
                log.exception("raft %s: queueing %d acks failed", self.config.self_id, len(acks))

    async def _apply(self, entries: tuple[Entry, ...]) -> None:
        if self.on_commit is not None:
            try:
                result = self.on_commit(entries)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception(
                    "raft %s: on_commit failed for entries %d..%d",
                    self.config.self_id,
                    entries[0].index,
                    entries[-1].index,
                )
        self._proposals.settle(entries)

    @property
    def repairing(self) -> bool:
        """The store still carries a repair marker (the log lost entries and is being refilled)."""
        return self.storage.store.repair is not None

    async def _end_repair(self) -> None:
        st = self.node
        try:
            await asyncio.to_thread(self.storage.end_repair)
        except Exception as exc:
            self._fail(exc, "clearing the repair marker")
            return
        self.repairs_completed += 1
        log.warning(
            "raft %s: repaired: the log holds every entry it had before the damage again (last index %d, "
            "persisted %d); a normal member again",
            self.config.self_id,
            st.last_index,
            st.persisted_index,
        )

    def fail(self, exc: BaseException, doing: str) -> None:
        """Fail-stop from outside (a read for a consumer met a corrupt entry): the broker
        re-recovers the store, which cuts the log at the damage, and starts a repairing driver."""
        self._fail(exc, doing)
        self._wake.set()

    def _observe_roles(self) -> None:
        n = self.node
        now = (n.role, n.term, n.leader)
        if now == self._reported:
            return
        self._reported = now
        role, term, leader = now
        log.info("raft %s: %s in term %d (leader %s)", self.config.self_id, role.value, term, leader)
        self._proposals.leadership_changed(self.config.self_id, role, term, leader)
        if self.on_role_change is not None:
            try:
                self.on_role_change(role, term, leader)
            except Exception:
                log.exception("raft %s: on_role_change failed", self.config.self_id)

    def _notify(self) -> None:
        """Wake every ``wait_for``. An event is made only when someone waits: this runs after
        every Ready (twice per send on a leader), and nobody waits almost always."""
        event = self._changed
        if event is not None:
            self._changed = None
            event.set()

    def _fail(self, exc: BaseException, doing: str) -> None:
        """Fail-stop (a storage error, or a Ready that could not be carried out): log it, stop
        taking part, tell everyone waiting. A new driver on the store, once the store is
        re-recovered (a failed write may leave a torn tail), recovers: BrokerDLedger does it."""
        if self.failed is not None:
            return
        self.failed = exc
        self._failed_event.set()
        log.error("raft %s: failed while %s; the node stops: %r", self.config.self_id, doing, exc, exc_info=exc)
        self._proposals.fail(
            lambda i, t: ProposalOutcomeUnknownError(
                f"the node failed while {doing} ({exc}) before index {i} committed", i, t
            )
        )
        if self._reported[0] is not Role.FOLLOWER or self._reported[2] is not None:
            self._reported = (Role.FOLLOWER, self._reported[1], None)
            if self.on_role_change is not None:
                with contextlib.suppress(Exception):
                    self.on_role_change(Role.FOLLOWER, self._reported[1], None)
        self._notify()

    async def _persist_loop(self) -> None:
        """The single writer: entries in hand-out order, one fsync per group, then ``persisted``."""
        while True:
            await self._persist_wake.wait()
            self._persist_wake.clear()
            batches, self._persist_queue = self._persist_queue, []
            checkpoint = self._commit_hint if self._checkpoint_due else None
            self._checkpoint_due = False
            flush, self._flush_due = self._flush_due, False
            if self.failed is not None:
                return
            if batches or checkpoint is not None or flush:
                try:
                    await asyncio.to_thread(self._write, batches, checkpoint, flush)
                except Exception as exc:
                    self._fail(exc, "writing entries")
                    return
                if batches:
                    last = batches[-1][0][-1]
                    self.node.persisted(last.index, last.term)
                    self._wake.set()
            if not self._running and not self._persist_queue:
                return

    def _write(
        self, batches: list[tuple[tuple[Entry, ...], bool]], checkpoint: int | None, flush: bool = False
    ) -> None:
        """Worker thread: write every batch (each may cut what an earlier one wrote), fsync once."""
        for batch, own in batches:
            self.storage.write(batch, own=own)
        if batches or flush:
            self.storage.flush()
        if checkpoint is not None:
            self.storage.save_commit(checkpoint)
