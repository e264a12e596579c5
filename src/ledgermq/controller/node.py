"""``ControllerNode``: one member of the controller's Raft group, with its state machine.

The node runs the shared Raft driver (``raftio``) over a DLedger-format log under
``controllerStorePath/dledger-<selfId>/`` and applies every committed entry to its
``ReplicasState``. Recovery is by replay: the log is never compacted (the Raft core has no
snapshots), so a restarted node hands every committed entry to a fresh state machine
again; controller logs grow only with broker registrations, liveness transitions and
elections, a few hundred bytes each.

Only the leader proposes. A proposal carries a request id; when the entry is applied, the
state machine's answer goes to the caller that proposed it (every other node applies it
silently). The leader answers (writes and reads) only once it has applied every entry of
earlier terms, i.e. its own election entry: until then its state may be behind what was
committed. A node that is not the ready leader raises ``NotLeaderNow`` naming the leader.

The node listens on its Raft address (``controllerDLegerPeers``) for Raft messages and for
controller requests alike, as RocketMQ 5's DLedger controller does; ``attach`` adds the
same processors to another server (a name server's own port).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.controller.config import ControllerConfig
from ledgermq.controller.events import Event, encode_entry
from ledgermq.controller.model import Result
from ledgermq.controller.state import ReplicasState
from ledgermq.errors import LedgerError
from ledgermq.net.client import split_address
from ledgermq.net.server import RemotingServer
from ledgermq.protocol.codes import ResponseCode
from ledgermq.raft import Entry, EntryKind, LeaderTransferInProgressError, NotLeaderError, Role
from ledgermq.raft.errors import ProposalDroppedError
from ledgermq.raftio.driver import ProposalOutcomeUnknownError, RaftDriver, RaftDriverConfig
from ledgermq.raftio.ledger_storage import LedgerStorage
from ledgermq.raftio.transport import RaftTransport
from ledgermq.store.dledger import INDEX_UNIT_SIZE, DLedgerStore, DLedgerStoreConfig

__all__ = ["ControllerNode", "LeaderInfo", "NotLeaderNow", "ProposalFailed"]

log = logging.getLogger(__name__)

READY_WAIT_S = 1.0
"""How long a request waits for a just-elected leader to catch up before being refused."""
PROPOSAL_TIMEOUT_S = 5.0
"""RocketMQ's controller waits 5 s for an event to commit."""


@dataclass(frozen=True, slots=True)
class LeaderInfo:
    leader_id: str | None
    leader_address: str | None


class NotLeaderNow(LedgerError):
    """This node cannot answer for the group now; ``leader`` says who may."""

    def __init__(self, message: str, leader: LeaderInfo) -> None:
        super().__init__(message)
        self.leader = leader


class ProposalFailed(LedgerError):
    """The event was proposed but its outcome is unknown (leadership moved, a timeout)."""


class ControllerNode:
    def __init__(self, config: ControllerConfig, clock: Clock = SYSTEM_CLOCK, *, listen_host: str = "0.0.0.0") -> None:
        self.config = config
        self.clock = clock
        self.state = ReplicasState()
        peers = config.peer_addresses
        _host, port = split_address(peers[config.self_id])
        self.server = RemotingServer(listen_host, port, name=f"controller {config.group}/{config.self_id}")
        self.transport = RaftTransport(config.self_id, peers)
        self.transport.attach(self.server)
        self.store: DLedgerStore | None = None
        self.driver: RaftDriver | None = None
        self.applied_index = 0
        self._ready_index: int | None = None  # a leader's own election entry
        self._leader_since_ms = 0
        self._waiting: dict[str, asyncio.Future[Result]] = {}
        self._rid_prefix = f"{config.self_id}-{os.urandom(4).hex()}-"
        self._rid_seq = itertools.count(1)
        self.role_listeners: list[Callable[[bool], None]] = []
        """Called with True when this node becomes the ready leader, False when it stops leading."""
        self._was_ready_leader = False

    # -- lifetime ----------------------------------------------------------------------
    def store_config(self) -> DLedgerStoreConfig:
        return DLedgerStoreConfig(
            self.config.store_path,
            self.config.self_id,
            data_file_size=self.config.mapped_file_size,
            index_file_size=INDEX_UNIT_SIZE * 64 * 1024,
        )

    async def start(self) -> None:
        cfg = self.config
        self.store = await asyncio.to_thread(DLedgerStore.open, self.store_config())
        try:
            await self.server.start()
            driver_cfg = RaftDriverConfig(
                cfg.self_id,
                cfg.peers,
                tick_interval_ms=cfg.raft_heartbeat_interval_ms,
                election_timeout_ticks=cfg.election_ticks,
            )
            self.driver = RaftDriver(
                driver_cfg,
                LedgerStorage(self.store),
                self.transport,
                on_commit=self._on_commit,
                on_role_change=self._on_role_change,
                clock=self.clock,
            )
            await self.driver.start()
        except BaseException:
            await self.server.stop()
            self.store.close()
            self.store = None
            raise
        log.info("controller %s/%s: started on %s (peers %s)", cfg.group, cfg.self_id, self.address, cfg.peers)

    async def stop(self) -> None:
        if self.driver is not None:
            await self.driver.stop()
            self.driver = None
        await self.server.stop()
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(ProposalFailed("the controller stopped"))
        self._waiting.clear()
        if self.store is not None:
            store, self.store = self.store, None
            await asyncio.to_thread(store.close)

    @property
    def address(self) -> str:
        return self.config.self_address

    # -- who leads ---------------------------------------------------------------------
    def leader(self) -> LeaderInfo:
        d = self.driver
        lead = d.node.leader if d is not None and d.failed is None else None
        return LeaderInfo(lead, self.config.peer_addresses.get(lead) if lead else None)

    @property
    def is_ready_leader(self) -> bool:
        """Leading, the tick loop current, and every entry of earlier terms applied here."""
        d = self.driver
        return (
            d is not None
            and d.leadership_current()
            and self._ready_index is not None
            and self.applied_index >= self._ready_index
        )

    @property
    def leader_since_ms(self) -> int:
        """The wall-clock time this node last became leader (liveness grace starts there)."""
        return self._leader_since_ms

    async def wait_ready(self, timeout: float = READY_WAIT_S) -> None:
        """Return once this node is the ready leader; NotLeaderNow if it is not leading or does
        not catch up within ``timeout``."""
        if self.is_ready_leader:
            return
        d = self.driver
        if d is None or d.node.role is not Role.LEADER:
            raise NotLeaderNow("the controller is not in leader state", self.leader())
        with contextlib.suppress(TimeoutError):
            await d.wait_for(lambda _st: self.is_ready_leader or d.node.role is not Role.LEADER, timeout)
        if not self.is_ready_leader:
            raise NotLeaderNow("the controller leader is still catching up; try again", self.leader())

    # -- proposals ---------------------------------------------------------------------
    async def propose(self, event: Event, timeout: float = PROPOSAL_TIMEOUT_S) -> Result:
        """Put ``event`` in the log and return what applying it answered.

        NotLeaderNow when this node is not the ready leader (nothing was appended);
        ProposalFailed when the event was appended but its fate is unknown."""
        await self.wait_ready()
        d = self.driver
        assert d is not None
        rid = self._rid_prefix + str(next(self._rid_seq))
        fut: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = fut
        try:
            try:
                async with asyncio.timeout(timeout):
                    await d.propose(encode_entry(event, rid))
                    return await fut
            except (NotLeaderError, LeaderTransferInProgressError) as exc:
                raise NotLeaderNow(str(exc), self.leader()) from None
            except (ProposalOutcomeUnknownError, ProposalDroppedError, TimeoutError) as exc:
                raise ProposalFailed(f"{event.TYPE} was not confirmed: {type(exc).__name__}: {exc}") from None
        finally:
            self._waiting.pop(rid, None)

    # -- the driver's callbacks -----------------------------------------------------------
    def _on_commit(self, entries: Sequence[Entry]) -> None:
        for e in entries:
            if e.kind is EntryKind.NORMAL:
                try:
                    result, rid = self.state.apply_entry(e.data)
                except Exception:
                    # The state machine raises for nothing it is given; if it ever does, every
                    # node fails the same way on the same entry, so log it and go on.
                    log.exception("controller %s: applying entry %d failed", self.config.self_id, e.index)
                    result, rid = Result.refuse(ResponseCode.SYSTEM_ERROR, "applying the entry failed"), ""
                if not result.ok and rid:
                    log.info("controller %s: entry %d refused: %s", self.config.self_id, e.index, result.remark)
                fut = self._waiting.pop(rid, None) if rid else None
                if fut is not None and not fut.done():
                    fut.set_result(result)
            self.applied_index = e.index
        self._report_readiness()

    def _on_role_change(self, role: Role, term: int, leader: str | None) -> None:
        d = self.driver
        if role is Role.LEADER and d is not None:
            self._ready_index = d.node.last_index  # includes the election entry just appended
            self._leader_since_ms = self.clock.wall_ms()
        else:
            self._ready_index = None
        log.info("controller %s: %s in term %d (leader %s)", self.config.self_id, role.value, term, leader)
        self._report_readiness()

    def _report_readiness(self) -> None:
        ready = self.is_ready_leader
        if ready == self._was_ready_leader:
            return
        self._was_ready_leader = ready
        for listener in self.role_listeners:
            try:
                listener(ready)
            except Exception:
                log.exception("controller %s: role listener failed", self.config.self_id)
