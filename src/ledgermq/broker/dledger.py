"""DLedger mode in the broker: the group's Raft leader is its master, the others its slaves.

Every broker of a group runs a ``RaftDriver`` over its message store (``StoreLog``): the
commit log is the Raft log. A send on the leader is encoded, given its queue offsets
(``prepare_append``) and proposed; it is answered SEND_OK only once a quorum has persisted
it and it is committed, so a leader that dies after answering cannot take it with it. A
broker that is not the leader refuses sends with SERVICE_NOT_AVAILABLE (as a RocketMQ
slave's store does), naming the leader; clients then refresh their route.

Roles follow the Raft role: on election the broker registers as the group's master
(brokerId 0) at once; otherwise as slave ``n<k>`` -> brokerId k + 1, as RocketMQ's
DLedgerRoleChangeHandler does. ``on_role`` hands the change to the broker's wiring
(registration, slave metadata sync).

The broker's own writes go through ``put`` too, by way of ``Broker.put`` (the broker's one
writer): consumer send-back (to %RETRY%group with a delay level, or %DLQ%group) and the
schedule service. A delayed message is proposed like any other; the store's
``encode_message`` files it under SCHEDULE_TOPIC_XXXX, so every node's consume queues hold
it. The schedule service runs on the leader only, started and stopped with leadership by
``BrokerApp``; followers keep its delay offsets in sync (GET_ALL_DELAY_OFFSET), so a new
leader carries on where the old one was at its last sync. A due message is proposed to its
real topic and its level's offset moves only once that proposal committed, so a leader
that dies or steps down mid-delivery costs a redelivery (at-least-once, as RocketMQ),
never a loss.

A driver that fail-stops (a write failed, e.g. ENOSPC on a full disk: going on after a
lost write could break Raft's promises) is restarted by ``_supervise``: the failure is
logged at ERROR and shown (``state`` "failed" in dledgerStatus, the driver's ``failed``
reason, ``ledgermq_dledger_driver_failures_total``); the driver already told the broker it
is a follower with no leader, so it registers as a slave and refuses sends. Then the
failed driver is stopped, the DLedger files are re-recovered in place
(``DLedgerMessageStore.reopen_ledger``: a torn tail is cut, committed entries are kept and
checkpointed again) and a new driver is built on the same store, retrying with back-off
(``RestartPolicy``) while that fails, e.g. while the disk is still full. The new driver
catches up from the leader like any follower, and may be elected again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections.abc import Callable, Sequence

from ledgermq.broker.dledger_identity import IdentityCheck, store_identity
from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.config import StoreConfig
from ledgermq.errors import ConfigError
from ledgermq.net.client import RemotingClient
from ledgermq.net.server import RemotingServer, RequestContext
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.raft import Entry, NotLeaderError, ProposalDroppedError, Role
from ledgermq.raftio.driver import ProposalOutcomeUnknownError, RaftDriver, RaftDriverConfig, RaftStatus
from ledgermq.raftio.member_watch import MemberWatch
from ledgermq.raftio.store_log import StoreLog
from ledgermq.raftio.transport import RaftTransport, parse_peers
from ledgermq.store.commitlog import EncodedMessage
from ledgermq.store.dledger.commitlog import DLedgerCommitLog
from ledgermq.store.dledger.mode_store import DLedgerMessageStore
from ledgermq.store.dledger.scrub import LedgerScrubService
from ledgermq.store.message_input import BatchInput, MessageInput
from ledgermq.store.results import PutResult, PutStatus

log = logging.getLogger(__name__)

RoleListener = Callable[[bool], None]  # True: this broker is now the group's master
MEMBER_WATCH_INTERVAL_S = 0.5


@dataclasses.dataclass(frozen=True, slots=True)
class RestartPolicy:
    """How a broker restarts a Raft driver that fail-stopped: the first try after
    ``first_delay_s``, each failed try (or a new driver failing again soon) doubling the
    wait up to ``max_delay_s``; a driver that ran ``healthy_after_s`` resets it."""

    first_delay_s: float = 0.5
    max_delay_s: float = 5.0
    healthy_after_s: float = 10.0

    def __post_init__(self) -> None:
        if not 0 < self.first_delay_s <= self.max_delay_s:
            raise ConfigError("RestartPolicy: need 0 < first_delay_s <= max_delay_s")


def follower_broker_id(self_id: str) -> int:
    """RocketMQ's rule: ``n<k>`` is brokerId k + 1 while it follows."""
    digits = self_id[1:]
    if not self_id.startswith("n") or not digits.isdigit():
        raise ConfigError(f"dLegerSelfId={self_id!r}: expected n<number>, as in dLegerPeers")
    return int(digits) + 1


def check_settings(cfg: StoreConfig) -> None:
    """What DLedger mode needs from the broker config, refused with the key that is wrong."""
    if not cfg.dleger_group:
        raise ConfigError("enableDLegerCommitLog=true needs dLegerGroup (usually the brokerName)")
    if not cfg.dleger_self_id:
        raise ConfigError("enableDLegerCommitLog=true needs dLegerSelfId (n0, n1, ...)")
    peers = parse_peers(cfg.dleger_peers)
    if cfg.dleger_self_id not in peers:
        raise ConfigError(f"dLegerSelfId={cfg.dleger_self_id} is not among dLegerPeers ({cfg.dleger_peers})")
    follower_broker_id(cfg.dleger_self_id)


class BrokerDLedger:
    def __init__(
        self,
        store: DLedgerMessageStore,
        cfg: StoreConfig,
        listen_host: str,
        on_role: RoleListener,
        restart: RestartPolicy | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        check_settings(cfg)
        self.store = store
        self.clock = clock
        """The Raft driver's ticks and the supervisor's healthy-run measure go by it."""
        self.self_id = cfg.dleger_self_id
        self.on_role = on_role
        self.is_master = False
        peers = parse_peers(cfg.dleger_peers)
        port = int(peers[self.self_id].rsplit(":", 1)[1])
        self.server = RemotingServer(listen_host, port, name=f"dledger {cfg.dleger_group}/{self.self_id}")
        self.transport = RaftTransport(self.self_id, peers)
        self.transport.attach(self.server)
        self.group = cfg.dleger_group
        self.identity_check: IdentityCheck | None = None
        self.server.register(RequestCode.DLEDGER_STORE_IDENTITY, self._identity)
        # Ticks finer than the heartbeat: the core draws election timeouts in whole ticks, and
        # with one tick per heartbeat (100 ms) an 800 ms timeout had 8 possible values, so two
        # followers of a dead leader timed out in the same tick about one election in eight
        # and split the vote (a second round: +1 s). Five ticks per heartbeat give 40 values.
        heartbeat_ticks = 5 if cfg.dleger_heartbeat_interval_ms >= 10 else 1
        tick = max(1, cfg.dleger_heartbeat_interval_ms // heartbeat_ticks)
        self.driver_config = RaftDriverConfig(
            self.self_id,
            cfg.dleger_peers,
            tick_interval_ms=tick,
            heartbeat_ticks=heartbeat_ticks,
            election_timeout_ticks=max(3 * heartbeat_ticks, cfg.dleger_election_timeout_ms // tick),
            eager_commit_notice=False,
        )
        self.restart_policy = restart or RestartPolicy()
        self.log: StoreLog | None = None
        self.driver: RaftDriver | None = None
        self.state = "stopped"
        """"running", "failed" (the driver fail-stopped; restarting it), "stopped"."""
        self.driver_failures = 0
        self.driver_restarts = 0
        self.repairs_started = 0
        """Times recovery found this member's log damaged and began repairing it from the group."""
        self._repairs_completed_before = 0  # by drivers that were replaced since
        self._supervisor: asyncio.Task[None] | None = None
        self._reopen: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Retention: what connected followers still need, and who is stuck (raftio/member_watch.py).
        self.watch = MemberWatch(self.self_id)
        self._watch_task: asyncio.Task[None] | None = None
        self.after_commit: Callable[[], None] | None = None
        """Told on the loop after each commit reached the store: the broker's write turn then
        dispatches the committed messages in its end-of-turn step. (Waking the reput thread
        for every commit instead cost each member a thread hand-off per Raft round.)"""
        self.scrub: LedgerScrubService | None = None
        """Digests sealed data files and re-reads them (store/dledger/scrub.py); damage it finds
        fail-stops the driver like a corrupt read (``on_corrupt_read``)."""

    async def start(self) -> None:
        """After the store started (its log is read here). The Raft driver starts once a
        quorum of members (itself included) holds the same commit log below the DLedger
        data (``dledger_identity``); ConfigError if that can never be."""
        self._count_damage()
        identity = await asyncio.to_thread(store_identity, self.store)
        self.identity_check = IdentityCheck(self.group, self.self_id, self.transport.peers, identity)
        await self.server.start()
        client = RemotingClient(connect_timeout=1.0)
        try:
            await self.identity_check.wait_for_quorum(client)
        finally:
            await client.close()
        self._loop = asyncio.get_running_loop()
        self.store.commitlog.on_corrupt = self.on_corrupt_read
        if self.scrub is None:
            self.scrub = LedgerScrubService(self.store.commitlog, self.store.scrub_settings, self.store.clock)
            self.scrub.start()
        driver = self._new_driver()
        await driver.start()
        self.state = "running"
        self._supervisor = asyncio.create_task(self._supervise(), name=f"dledger-supervisor-{self.self_id}")
        if self.watch.keep_from not in self.store.ledger_guards():
            self.store.add_ledger_guard(self.watch.keep_from)
        if self._watch_task is None:  # follows whichever driver runs (``self.driver``), restarts included
            self._watch_task = asyncio.create_task(
                self.watch.run(lambda: self.driver, MEMBER_WATCH_INTERVAL_S), name=f"member-watch-{self.self_id}"
            )

    async def stop(self) -> None:
        self.state = "stopped"
        if self.scrub is not None:
            await asyncio.to_thread(self.scrub.stop)
            self.scrub = None
        if self._watch_task is not None:
            self._watch_task.cancel()
            self._watch_task = None
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
            self._supervisor = None
        if self._reopen is not None and not self._reopen.done():
            with contextlib.suppress(Exception):
                await self._reopen  # a re-recovery under way finishes before the store closes
        if self.driver is not None:
            await self.driver.stop()
        await self.server.stop()

    async def _identity(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        check = self.identity_check
        if check is None:
            return cmd.response(ResponseCode.SYSTEM_BUSY, f"DLedger {self.self_id} is starting")
        return await check.process(ctx, cmd)

    def _new_driver(self) -> RaftDriver:
        self.log = StoreLog(self.store)
        applied = max(self.store.commitlog.committed_index + 1, 0)
        self.driver = RaftDriver(
            self.driver_config,
            self.log,
            self.transport,
            on_commit=functools.partial(self._committed, self.log),
            on_role_change=self._role_changed,
            applied=applied,
            clock=self.clock,
        )
        return self.driver

    def _committed(self, log: StoreLog, entries: Sequence[Entry]) -> None:
        """The driver's ``on_commit``: the entries become readable, then ``after_commit``."""
        log.commit(entries)
        hook = self.after_commit
        if hook is not None:
            hook()

    # -- fail-stop and restart ----------------------------------------------------------
    async def _supervise(self) -> None:
        """Wait for the driver to fail, then restart it; never ends but by ``stop``."""
        policy = self.restart_policy
        delay = policy.first_delay_s
        while True:
            try:
                driver = self.driver
                assert driver is not None
                started = self.clock.monotonic()
                reason = await driver.wait_failed()
                self.state = "failed"
                self.driver_failures += 1
                if self.clock.monotonic() - started >= policy.healthy_after_s:
                    delay = policy.first_delay_s
                log.error(
                    "DLedger %s: the Raft driver failed (%s); this broker serves as a slave without Raft "
                    "until it is restarted: stopping it, re-recovering the DLedger store, new driver in %.1f s",
                    self.self_id,
                    reason,
                    delay,
                )
                with contextlib.suppress(Exception):
                    await driver.stop()
                delay = await self._restart(delay)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("DLedger %s: the driver supervisor failed; it goes on", self.self_id)
                await asyncio.sleep(delay)
                delay = min(delay * 2, policy.max_delay_s)

    async def _restart(self, delay: float) -> float:
        """Re-recover the store and start a new driver, retrying with back-off until one
        starts; returns the back-off the next failure starts from."""
        policy = self.restart_policy
        attempt = 0
        while True:
            await asyncio.sleep(delay)
            delay = min(delay * 2, policy.max_delay_s)
            attempt += 1
            try:
                self._reopen = asyncio.ensure_future(asyncio.to_thread(self.store.reopen_ledger))
                await asyncio.shield(self._reopen)
                self._count_damage()
                if self.driver is not None:
                    self._repairs_completed_before += self.driver.repairs_completed
                driver = self._new_driver()
                await driver.start()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.error(
                    "DLedger %s: restart attempt %d failed (%s: %s); next in %.1f s",
                    self.self_id,
                    attempt,
                    type(exc).__name__,
                    exc,
                    delay,
                )
                continue
            self.driver_restarts += 1
            self.state = "running"
            st = driver.status()
            log.warning(
                "DLedger %s: Raft driver restarted (attempt %d; log ends at %d, commit %d); catching up",
                self.self_id,
                attempt,
                st.last_index,
                st.commit,
            )
            return delay

    def _count_damage(self) -> None:
        rec = self.store.commitlog.ledger.recovery
        if rec is not None and rec.damage_found:
            self.repairs_started += 1

    @property
    def repairs_completed(self) -> int:
        return self._repairs_completed_before + (self.driver.repairs_completed if self.driver is not None else 0)

    def on_corrupt_read(self, exc: BaseException) -> None:
        """A read (for a consumer) or the scrub found damage the driver has not met: fail-stop
        the driver, so the store is re-recovered (cut at the damage, which the store recorded)
        and the log repaired from the leader. Called from any thread."""
        driver, loop = self.driver, self._loop
        if driver is None or loop is None:
            return
        loop.call_soon_threadsafe(driver.fail, exc, "damage was found in the log (by a read or the scrub)")

    def leadership_current(self) -> bool:
        """This broker leads and its Raft driver has run within an election timeout (see
        ``RaftDriver.leadership_current``)."""
        driver = self.driver
        return self.is_master and driver is not None and driver.leadership_current()

    def status(self) -> RaftStatus | None:
        """The driver's status; a failed driver's core is frozen in the role it had, so it is
        shown as what the broker acts as then: a follower that knows no leader."""
        if self.driver is None:
            return None
        st = self.driver.status()
        if st.failed is not None:
            st = dataclasses.replace(st, role=Role.FOLLOWER, leader=None, match={})
        return st

    def _role_changed(self, role: Role, term: int, leader: str | None) -> None:
        master = role is Role.LEADER
        log.info("DLedger %s: %s in term %d (leader %s)", self.self_id, role.value, term, leader)
        if master and not self.is_master:
            self.store.rebuild_queue_offsets()  # what this node stores, committed or not, is the base
        if master != self.is_master:
            self.is_master = master
            self.on_role(master)
        self.watch.refresh(self.driver)  # a new leader holds back what its followers need at once

    # -- sends ------------------------------------------------------------------------
    async def put(self, msg: MessageInput | BatchInput) -> PutResult:
        """Propose ``msg`` and answer once it is committed (SEND_OK), or why not."""
        proposed = self.propose(msg)
        if isinstance(proposed, PutResult):
            return proposed
        await proposed.settled()
        return proposed.outcome()

    def propose(self, msg: MessageInput | BatchInput) -> PutResult | Proposal:
        """Propose ``msg`` now (no await): its ``Proposal``, or why it was refused. The
        broker's send path registers the proposal in its write turn and answers from there."""
        refused = self._refuse(msg)
        if refused is not None:
            return refused
        store = self.store
        encoded = store.encode_message(msg) if isinstance(msg, MessageInput) else store.encode_batch(msg)
        if isinstance(encoded, PutResult):
            return encoded
        messages, topic, queue_id, _wait = encoded
        return self._propose(messages, topic, queue_id)

    def _refuse(self, msg: MessageInput | BatchInput) -> PutResult | None:
        driver = self.driver
        if driver is None or not self.is_master:
            leader = driver.status().leader if driver is not None else None
            return PutResult(
                PutStatus.SERVICE_NOT_AVAILABLE,
                remark=f"this broker ({self.self_id}) is not the DLedger leader (leader: {leader or 'none yet'})",
            )
        return self.store.check_for_proposal(msg)

    def _propose(self, messages: Sequence[EncodedMessage], topic: str, queue_id: int) -> PutResult | Proposal:
        driver = self.driver
        assert driver is not None
        bodies = self.store.prepare_append(list(messages), topic, queue_id)
        proposal = Proposal(self.store, bodies, topic, queue_id)
        settled = proposal.settled_one
        try:
            for body in bodies:  # proposed in the order their queue offsets were given
                index = driver.propose_with(bytes(body), settled)
                if proposal.first < 0:
                    proposal.first = index
        except (NotLeaderError, ProposalDroppedError) as exc:
            proposal.abandoned = True  # what was appended settles later, unheard
            self.store.rebuild_queue_offsets()  # the offsets just given were never used
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark=f"not the DLedger leader: {exc}")
        return proposal


class Proposal:
    """One send's entries, proposed; settled entry by entry by the Raft driver
    (``settled_one``: committed, or why not), from the step that decides them: no future or
    loop step per entry. ``on_done`` is told once all of them settled."""

    __slots__ = ("_done", "_errors", "_left", "abandoned", "bodies", "first", "queue_id", "store", "topic")

    def __init__(self, store: DLedgerMessageStore, bodies: list[bytearray], topic: str, queue_id: int) -> None:
        self.store = store
        self.bodies = bodies
        self.topic = topic
        self.queue_id = queue_id
        self.first = -1  # the Raft index of the first entry (the others follow it)
        self.abandoned = False  # proposing failed part-way: the send was answered already
        self._left = len(bodies)
        self._errors: list[BaseException | None] = [None] * len(bodies)
        self._done: list[Callable[[bool], None]] = []

    def on_done(self, callback: Callable[[bool], None]) -> None:
        """``callback(committed)`` once every entry settled (at once if they have)."""
        if self._left == 0:
            callback(self._committed())
        else:
            self._done.append(callback)

    async def settled(self) -> None:
        """Until every entry settled (for callers that await, e.g. ``put``)."""
        if self._left == 0:
            return
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._done.append(lambda committed: None if fut.done() else fut.set_result(committed))
        await fut

    def settled_one(self, index: int, error: BaseException | None) -> None:
        """The driver's word on the entry at Raft ``index``."""
        if self.abandoned or self.first < 0:
            return
        slot = index - self.first
        if not 0 <= slot < len(self._errors):
            return
        self._errors[slot] = error
        self._left -= 1
        if self._left == 0:
            committed = self._committed()
            callbacks, self._done = self._done, []
            for callback in callbacks:
                callback(committed)

    def _committed(self) -> bool:
        return all(e is None for e in self._errors)

    def outcome(self) -> PutResult:
        """The send's result once settled: SEND_OK with its offsets, or why not."""
        failure = None
        for error in self._errors:
            if error is not None:
                failure = error
                break
        if isinstance(failure, ProposalOutcomeUnknownError):
            # It may still commit under the next leader. RocketMQ's DLedgerCommitLog answers
            # this SYSTEM_ERROR ("in-sync replicas not enough"), not FLUSH_SLAVE_TIMEOUT, which
            # clients hand to the application as stored: with SYSTEM_ERROR they send again (on
            # the new master), at the price of a possible duplicate.
            return PutResult(
                PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH,
                remark=f"in-sync replicas not enough: leadership changed before commit ({failure}); "
                "it may still commit",
            )
        if isinstance(failure, ProposalDroppedError):
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark=str(failure))
        if failure is not None:
            return PutResult(PutStatus.UNKNOWN_ERROR, remark=f"{type(failure).__name__}: {failure}")
        ledger = self.store.commitlog.ledger
        first = self.first - 1  # the DLedger index of the first entry (Raft's counts from 1)
        bodies = self.bodies
        if len(bodies) == 1:  # a single send: no comprehension for one position
            positions = [ledger.entry_span(first)[0]]
        else:
            positions = [ledger.entry_span(first + k)[0] for k in range(len(bodies))]
        return PutResult(PutStatus.PUT_OK, DLedgerCommitLog.append_result(bodies, positions, self.topic, self.queue_id))
