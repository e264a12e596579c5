"""``ControllerModeService``: a broker's side of controller mode (RocketMQ 5's ReplicasManager).

Start-up (``_register``, retried until it succeeds): the controller-assigned id from
``brokerIdentity`` or, the first time, CONTROLLER_GET_NEXT_BROKER_ID then
CONTROLLER_APPLY_BROKER_ID with a registerCheckCode kept in ``brokerIdentity-temp``
(identity.py); then CONTROLLER_REGISTER_BROKER, whose answer names the master if it is
alive, and CONTROLLER_ELECT_MASTER when the group has none. Until then the broker takes no
writes and registers with no name server.

Running:

* BROKER_HEARTBEAT to every controller node every brokerHeartbeatInterval, with our HA
  epoch, log end, controllerHeartBeatTimeoutMills and brokerElectionPriority;
* GET_REPLICA_INFO every syncBrokerMetadataPeriod (catches a lost notification; asks for
  an election when the group has no master);
* NOTIFY_BROKER_ROLE_CHANGED, answered at once.

Whichever brings a newer master epoch, the role follows (``_apply``), one switch at a time
under a lock, through ``RoleSwitch`` (the broker's wiring: HA service or client, master-only
duties, registration). A master keeps its SyncStateSet (in_sync.py) and proposes every
change (CONTROLLER_ALTER_SYNC_STATE_SET), one at a time, relying on a change only once the
controller accepted it.

**The lease.** A master takes writes only while the controller leader answered one of its
heartbeats sent less than controllerHeartBeatTimeoutMills ago: the leader counts a broker
gone only after that long without a heartbeat (measured from when it received one, which
is after we sent it), so by the time another master can be elected this one has stopped
acknowledging. A heartbeat to the leader that fails on its connection (the leader then
sees it closed and may act at once) ends the lease at once.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ledgermq.aio.periodic import Periodic
from ledgermq.broker.config import BrokerConfig
from ledgermq.broker.controller_mode.config import ControllerModeConfig
from ledgermq.broker.controller_mode.identity import BrokerIdentity, IdentityFiles
from ledgermq.broker.controller_mode.in_sync import InSyncTracker
from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.controller.client import ControllerClient, ControllerResponseError
from ledgermq.errors import LedgerError
from ledgermq.ha.master import HAService
from ledgermq.ha.master_link import SlaveLink
from ledgermq.net.client import RemotingClient
from ledgermq.net.connection import RequestTimeoutError
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.controller_body import SyncStateSet
from ledgermq.protocol.headers_controller import (
    AlterSyncStateSetRequestHeader,
    ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader,
    GetNextBrokerIdRequestHeader,
    GetNextBrokerIdResponseHeader,
    RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader,
)
from ledgermq.store.results import PutResult, PutStatus

__all__ = ["ControllerModeService", "MasterView", "Role", "RoleSwitch"]

log = logging.getLogger(__name__)

RC = ResponseCode
_RETRY_S = (0.2, 2.0)  # start-up retries: first pause, longest pause
_FENCED = (RC.CONTROLLER_FENCED_MASTER_EPOCH, RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH, RC.CONTROLLER_INVALID_MASTER)


class Role(enum.Enum):
    STARTING = "STARTING"  # no id or no role yet
    MASTER = "MASTER"
    SLAVE = "SLAVE"
    SWITCHING = "SWITCHING"


@dataclass(frozen=True, slots=True)
class MasterView:
    """What the controller says of the group (an answer or a notification)."""

    master_id: int | None
    master_addr: str | None
    master_epoch: int
    sync_state_set: frozenset[int] = frozenset()
    sync_state_set_epoch: int = 0


class RoleSwitch(Protocol):
    """The broker's wiring, told to take a role (``BrokerApp``)."""

    async def become_master(self, master_epoch: int) -> None: ...

    async def become_slave(self, master_addr: str | None, broker_id: int) -> None: ...

    def settled(self) -> None:
        """The role is taken (and a master's lease open): register it with the name servers now."""


class Lease:
    """Monotonic time until which a master may acknowledge writes."""

    def __init__(self, duration_s: float) -> None:
        self.duration_s = duration_s
        self.until = 0.0
        self.renewals = 0

    def renew(self, sent_at: float) -> None:
        self.until = max(self.until, sent_at + self.duration_s)
        self.renewals += 1

    def end(self) -> None:
        self.until = 0.0

    def valid(self, now: float) -> bool:
        return now < self.until


class ControllerModeService:
    def __init__(
        self,
        cfg: ControllerModeConfig,
        broker_cfg: BrokerConfig,
        store_root: str | Path,
        log_end: Callable[[], int],
        ha: HAService,
        switch: RoleSwitch,
        *,
        clock: Clock = SYSTEM_CLOCK,
        client: RemotingClient | None = None,
        last_epoch: Callable[[], int] = lambda: 0,
    ) -> None:
        self.cfg = cfg
        self.broker_cfg = broker_cfg
        self.identity_files = IdentityFiles(store_root)
        self.log_end = log_end
        self.last_epoch = last_epoch
        self.ha = ha
        self.switch = switch
        self.clock = clock
        self.client = client if client is not None else RemotingClient(connect_timeout=1.0)
        self.controllers = ControllerClient(cfg.controller_addrs, client=self.client, request_timeout=1.0)
        self.broker_id: int | None = None
        self.role = Role.STARTING
        self.view = MasterView(None, None, 0)  # the last view applied
        self.lease = Lease(cfg.heartbeat_timeout_ms / 1000)
        self.tracker: InSyncTracker | None = None
        self.fenced_writes = 0  # sends refused for an expired lease
        self.role_changes = 0
        self.alters_accepted = 0
        self.alters_refused = 0
        self.heartbeat_failures = 0
        self.last_problem = ""
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._beating: set[str] = set()
        self._altering = False
        self._reconfirming = False
        self._stopping = False
        self._started = asyncio.Event()
        # Told the id once the controller granted it (the wiring puts it in the HA hello).
        self.on_broker_id: Callable[[int], None] | None = None
        # Whether this broker's writes wait for slaves as a master (SYNC_MASTER); the wiring's.
        self.waits_for_replicas: Callable[[], bool] = lambda: cfg.all_ack_in_sync_state_set
        self._heartbeats = Periodic("controller-heartbeat", self._heartbeat_round, cfg.heartbeat_interval_ms / 1000)
        self._metadata = Periodic(
            "controller-metadata", self.sync_metadata, cfg.sync_broker_metadata_period_ms / 1000, on_error=self._quiet
        )
        self._sss_check = Periodic(
            "sync-state-set-check", self._check_sync_state_set, cfg.check_sync_state_set_period_ms / 1000
        )
        ha.ack_listeners.append(self._on_slave_ack)
        ha.gone_listeners.append(self._on_slave_gone)

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        self._spawn(self._start_up(), "controller-mode start-up")

    async def stop(self) -> None:
        self._stopping = True
        for p in (self._heartbeats, self._metadata, self._sss_check):
            await p.stop()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.controllers.close()
        await self.client.close()

    async def _start_up(self) -> None:
        pause = _RETRY_S[0]
        while not self._stopping:
            try:
                answer = await self._register()
                break
            except (LedgerError, OSError, TimeoutError) as exc:
                self.last_problem = f"registering with the controller: {exc}"
                log.warning("controller mode: %s; again in %.1f s", self.last_problem, pause)
            await asyncio.sleep(pause)
            pause = min(pause * 2, _RETRY_S[1])
        else:
            return
        self._heartbeats.start()
        await self._heartbeat_round()
        self._metadata.start()
        self._sss_check.start()
        self._started.set()
        await self.follow(answer)

    def _quiet(self, task: Periodic, exc: Exception) -> None:
        self.last_problem = f"{task.name}: {exc}"
        log.warning("controller mode: %s", self.last_problem)

    def _spawn(self, work: Awaitable[None], what: str) -> None:
        async def run() -> None:
            try:
                await work
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("controller mode: %s failed", what)

        task = asyncio.ensure_future(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- identity and registration ------------------------------------------------------
    async def _register(self) -> MasterView:
        cfg = self.broker_cfg
        files = self.identity_files
        identity = await asyncio.to_thread(files.load)
        if identity is not None:
            files.check_matches(identity, cfg.cluster_name, cfg.broker_name)
        else:
            identity = await self._apply_for_id()
        self.broker_id = identity.broker_id
        if self.on_broker_id is not None:
            self.on_broker_id(identity.broker_id)
        hdr = RegisterBrokerToControllerRequestHeader(
            cfg.cluster_name, cfg.broker_name, identity.broker_id, cfg.broker_addr
        )
        resp = await self.controllers.invoke(RemotingCommand.request(RequestCode.CONTROLLER_REGISTER_BROKER, hdr.ext()))
        if resp.code == RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED and identity.register_check_code:
            log.warning(
                "controller mode: the controller does not know broker %d; applying for it again", identity.broker_id
            )
            await self._apply_broker_id(identity)
            resp = await self.controllers.invoke(
                RemotingCommand.request(RequestCode.CONTROLLER_REGISTER_BROKER, hdr.ext())
            )
        if resp.code != RC.SUCCESS:
            raise ControllerResponseError(resp.code, resp.remark)
        ans = RegisterBrokerToControllerResponseHeader.from_ext(resp.ext_fields)
        sss = SyncStateSet.decode(resp.body) if resp.body else SyncStateSet(frozenset(), 0)
        log.info(
            "controller mode: registered as broker %d of %s (master %s, epoch %s)",
            identity.broker_id,
            cfg.broker_name,
            ans.master_broker_id,
            ans.master_epoch,
        )
        return MasterView(
            ans.master_broker_id,
            ans.master_address,
            ans.master_epoch or 0,
            sss.sync_state_set,
            ans.sync_state_set_epoch or sss.sync_state_set_epoch,
        )

    async def _apply_for_id(self) -> BrokerIdentity:
        cfg = self.broker_cfg
        files = self.identity_files
        temp = await asyncio.to_thread(files.load_temp)
        if temp is not None:
            files.check_matches(temp, cfg.cluster_name, cfg.broker_name)
        else:
            hdr = GetNextBrokerIdRequestHeader(cfg.cluster_name, cfg.broker_name)
            resp = await self.controllers.invoke(
                RemotingCommand.request(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, hdr.ext())
            )
            if resp.code != RC.SUCCESS:
                raise ControllerResponseError(resp.code, resp.remark)
            next_id = GetNextBrokerIdResponseHeader.from_ext(resp.ext_fields).next_broker_id
            if next_id is None:
                raise ControllerResponseError(resp.code, "CONTROLLER_GET_NEXT_BROKER_ID answered no id")
            code = f"{cfg.broker_addr};{self.clock.wall_ms()}"
            temp = BrokerIdentity(cfg.cluster_name, cfg.broker_name, next_id, code)
            await asyncio.to_thread(files.save_temp, temp)
        try:
            await self._apply_broker_id(temp)
        except ControllerResponseError as exc:
            if exc.code == RC.CONTROLLER_BROKER_ID_INVALID:  # taken meanwhile: ask for the next one
                await asyncio.to_thread(files.temp_path.unlink, True)
            raise
        await asyncio.to_thread(files.commit, temp)
        log.info("controller mode: the controller granted broker id %d (%s)", temp.broker_id, files.path)
        return temp

    async def _apply_broker_id(self, identity: BrokerIdentity) -> None:
        hdr = ApplyBrokerIdRequestHeader(
            identity.cluster_name, identity.broker_name, identity.broker_id, identity.register_check_code
        )
        resp = await self.controllers.invoke(RemotingCommand.request(RequestCode.CONTROLLER_APPLY_BROKER_ID, hdr.ext()))
        if resp.code != RC.SUCCESS:
            raise ControllerResponseError(resp.code, resp.remark)

    # -- heartbeats and the lease ---------------------------------------------------------
    async def _heartbeat_round(self) -> None:
        for addr in self.cfg.controller_addrs:
            if addr not in self._beating:
                self._beating.add(addr)
                self._spawn(self._beat(addr), f"heartbeat to {addr}")

    async def _beat(self, addr: str) -> None:
        try:
            assert self.broker_id is not None
            cfg = self.broker_cfg
            end = self.log_end()
            hdr = BrokerHeartbeatRequestHeader(
                cfg.cluster_name,
                cfg.broker_addr,
                cfg.broker_name,
                self.broker_id,
                self.last_epoch(),
                end,
                end,
                self.cfg.heartbeat_timeout_ms,
                self.cfg.election_priority,
            )
            sent = self.clock.monotonic()
            try:
                resp = await self.client.invoke(
                    addr,
                    RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, hdr.ext()),
                    self.cfg.heartbeat_timeout_ms / 1000,
                )
            except (LedgerError, OSError, TimeoutError) as exc:
                self.heartbeat_failures += 1
                if addr == self._leader_addr() and not isinstance(exc, RequestTimeoutError):
                    if self.lease.valid(self.clock.monotonic()) and self.role is Role.MASTER:
                        log.warning(
                            "controller mode: heartbeat to the controller leader %s failed (%s): lease ends", addr, exc
                        )
                    self.lease.end()
                return
            if resp.code == RC.SUCCESS and self._answered_as_leader(addr, resp):
                if self.lease.valid(self.clock.monotonic()) or self.role is not Role.MASTER:
                    self.lease.renew(sent)
                elif not self._reconfirming:  # lapsed: the controller may have moved on meanwhile
                    self._reconfirming = True
                    self._spawn(self._reconfirm(), "a master's reconfirmation")
        finally:
            self._beating.discard(addr)

    async def _reconfirm(self) -> None:
        """A master whose lease lapsed (or that just became master) takes writes again only
        once GET_REPLICA_INFO, sent after the lapse, still names it master in its epoch: a
        heartbeat alone says the controller hears us, not that it has not elected another."""
        try:
            sent = self.clock.monotonic()
            hdr, sss = await self.controllers.get_replica_info(self.broker_cfg.broker_name)
            view = MasterView(
                hdr.master_broker_id,
                hdr.master_address,
                hdr.master_epoch or 0,
                sss.sync_state_set,
                sss.sync_state_set_epoch,
            )
            if (
                self.role is Role.MASTER
                and view.master_id == self.broker_id
                and view.master_epoch == self.view.master_epoch
            ):
                self.lease.renew(sent)
                self.switch.settled()
                log.info(
                    "controller mode: still master of %s in epoch %d: writes open",
                    self.broker_cfg.broker_name,
                    view.master_epoch,
                )
            else:
                await self.follow(view)
        finally:
            self._reconfirming = False

    def _leader_addr(self) -> str | None:
        return self.controllers.leader_addr

    def _answered_as_leader(self, addr: str, resp: RemotingCommand) -> bool:
        """ledgermq's controller says in its heartbeat answer whether it leads; another
        controller's answer counts when it comes from the leader the client last found."""
        flag = resp.ext_fields.get("isLeader")
        if flag is not None:
            leads = flag == "true"
            if leads:
                self.controllers.leader_addr = addr
            return leads
        return addr == self._leader_addr()

    # -- what the controller says ---------------------------------------------------------
    async def sync_metadata(self) -> None:
        """GET_REPLICA_INFO and follow it (also elects when the group has no master)."""
        if self.broker_id is None:
            return
        try:
            hdr, sss = await self.controllers.get_replica_info(self.broker_cfg.broker_name)
        except ControllerResponseError as exc:
            if exc.code in (RC.CONTROLLER_BROKER_METADATA_NOT_EXIST, RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED):
                await self.follow(await self._register())
                return
            raise
        await self.follow(
            MasterView(
                hdr.master_broker_id,
                hdr.master_address,
                hdr.master_epoch or 0,
                sss.sync_state_set,
                sss.sync_state_set_epoch,
            )
        )

    def on_notify(self, view: MasterView) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED (its processor); applied in the background."""
        if self.broker_id is not None:
            self._spawn(self.follow(view), "a role change")

    async def follow(self, view: MasterView) -> None:
        """Take the role ``view`` gives, if it is newer than the one held (RocketMQ's
        changeBrokerRole); a group with no master gets an election request."""
        async with self._lock:
            if self._stopping or self.broker_id is None:
                return
            me = self.broker_id
            if view.master_epoch > self.view.master_epoch and view.master_id is not None and view.master_addr:
                self.view = view
                self.role = Role.SWITCHING
                self.role_changes += 1
                if view.master_id == me:
                    log.warning(
                        "controller mode: becoming master of %s (epoch %d)",
                        self.broker_cfg.broker_name,
                        view.master_epoch,
                    )
                    await self._become_master(view)
                else:
                    log.warning(
                        "controller mode: becoming slave of broker %d at %s (epoch %d)",
                        view.master_id,
                        view.master_addr,
                        view.master_epoch,
                    )
                    await self.switch.become_slave(view.master_addr, me)
                    self.tracker = None
                    self.role = Role.SLAVE
                    self.switch.settled()
                return
            if view.master_id is None:
                if view.master_epoch > self.view.master_epoch and self.role is Role.MASTER:
                    log.warning(
                        "controller mode: deposed (master epoch %d, no master): taking no writes", view.master_epoch
                    )
                    self.view = view
                    self.role = Role.SWITCHING
                    await self.switch.become_slave(None, me)
                    self.tracker = None
                    self.role = Role.SLAVE
                    self.switch.settled()
                self._spawn(self._elect(), "an election request")
                return
            same_epoch = view.master_epoch == self.view.master_epoch and self.role is Role.MASTER
            if (
                same_epoch
                and self.tracker is not None
                and self.tracker.accept(view.sync_state_set, view.sync_state_set_epoch)
            ):
                self._sync_state_changed()

    async def _become_master(self, view: MasterView) -> None:
        assert self.broker_id is not None
        tracker = InSyncTracker(self.broker_id, self.cfg.ha_max_time_slave_not_catchup_ms / 1000)
        tracker.reset(view.sync_state_set, view.sync_state_set_epoch, self.clock.monotonic())
        self.tracker = tracker
        self._sync_state_changed()
        await self.switch.become_master(view.master_epoch)
        self.role = Role.MASTER
        self.lease.end()  # opened by the reconfirmation below (a GET_REPLICA_INFO from now)
        self._reconfirming = True
        self._spawn(self._reconfirm(), "a new master's confirmation")
        self._kick_sync_state_set()

    async def _elect(self) -> None:
        assert self.broker_id is not None
        cfg = self.broker_cfg
        try:
            resp, hdr, body = await self.controllers.elect_master(
                cfg.cluster_name, cfg.broker_name, self.broker_id, designate=False
            )
        except (LedgerError, OSError, TimeoutError) as exc:
            log.warning("controller mode: election request failed: %s", exc)
            return
        if resp.code not in (RC.SUCCESS, RC.CONTROLLER_MASTER_STILL_EXIST):
            log.info("controller mode: no master elected for %s yet: %s", cfg.broker_name, resp.remark)
            return
        sss = body.sync_state_set if body is not None else frozenset()
        await self.follow(
            MasterView(
                hdr.master_broker_id, hdr.master_address, hdr.master_epoch or 0, sss, hdr.sync_state_set_epoch or 0
            )
        )

    # -- the SyncStateSet (master) --------------------------------------------------------
    def _sync_state_changed(self) -> None:
        """Make the HA service wait for the members the tracker now requires."""
        tracker = self.tracker
        if tracker is not None and self.cfg.all_ack_in_sync_state_set:
            self.ha.require_acks_from(tracker.required())

    def _on_slave_ack(self, link: SlaveLink, offset: int) -> None:
        tracker = self.tracker
        if tracker is None or link.broker_id is None or self.role is not Role.MASTER:
            return
        proposal = tracker.on_ack(link.broker_id, offset, self.log_end(), self.clock.monotonic())
        if proposal is not None:
            self._propose(proposal)

    def _on_slave_gone(self, link: SlaveLink) -> None:
        tracker = self.tracker
        if tracker is None or link.broker_id is None:
            return
        if any(other.broker_id == link.broker_id for other in self.ha.links.values() if other is not link):
            return  # it reconnected already
        proposal = tracker.on_gone(link.broker_id)
        if proposal is not None:
            self._propose(proposal)

    def _check_sync_state_set(self) -> None:
        tracker = self.tracker
        if tracker is None or self.role is not Role.MASTER:
            return
        proposal = tracker.next_proposal(self.clock.monotonic())
        if proposal is not None:
            self._propose(proposal)

    def _kick_sync_state_set(self) -> None:
        self._check_sync_state_set()

    def _propose(self, members: frozenset[int]) -> None:
        self._sync_state_changed()  # a member being added is waited for from now on
        self._spawn(self._alter(members), "a SyncStateSet change")

    async def _alter(self, members: frozenset[int]) -> None:
        tracker = self.tracker
        assert tracker is not None and self.broker_id is not None
        base = tracker.accepted
        hdr = AlterSyncStateSetRequestHeader(self.broker_cfg.broker_name, self.broker_id, self.view.master_epoch)
        cmd = RemotingCommand.request(
            RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, hdr.ext(), SyncStateSet(members, base.epoch).encode()
        )
        log.info(
            "controller mode: proposing SyncStateSet %s (from %s, epoch %d)",
            sorted(members),
            sorted(base.members),
            base.epoch,
        )
        try:
            resp = await self.controllers.invoke(cmd, timeout=max(1.0, self.cfg.heartbeat_timeout_ms / 1000))
        except (LedgerError, OSError, TimeoutError) as exc:
            resp = None
            self.alters_refused += 1
            log.warning("controller mode: SyncStateSet change not answered: %s", exc)
        if self.tracker is not tracker:
            return  # the role changed meanwhile
        if resp is not None and resp.code == RC.SUCCESS:
            sss = SyncStateSet.decode(resp.body)
            tracker.accept(sss.sync_state_set, sss.sync_state_set_epoch)
            self.alters_accepted += 1
            log.warning(
                "controller mode: SyncStateSet is now %s (epoch %d)",
                sorted(sss.sync_state_set),
                sss.sync_state_set_epoch,
            )
        else:
            if resp is not None:
                self.alters_refused += 1
                log.warning("controller mode: SyncStateSet change refused: %s %s", resp.code, resp.remark)
            tracker.proposal_failed()
            if resp is not None and resp.code in _FENCED:
                self._spawn(self.sync_metadata(), "a metadata sync")
        self._sync_state_changed()
        self._check_sync_state_set()

    # -- writes -------------------------------------------------------------------------
    def refuse_write(self, wait: bool) -> PutResult | None:
        """Why this broker may not take a write now (None: it may): not the master, a lease
        run out, or (a write that waits for replicas) fewer in-sync replicas than
        minInSyncReplicas."""
        if self.role is not Role.MASTER:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark=self._not_master())
        if not self.lease.valid(self.clock.monotonic()):
            self.fenced_writes += 1
            return PutResult(
                PutStatus.SERVICE_NOT_AVAILABLE,
                remark=(
                    f"this master has not heard from the controller leader within controllerHeartBeatTimeoutMills="
                    f"{self.cfg.heartbeat_timeout_ms}: writes are fenced (another master may be elected) until it does"
                ),
            )
        tracker = self.tracker
        if (
            wait
            and tracker is not None
            and self.waits_for_replicas()
            and tracker.in_sync_count() < self.cfg.min_in_sync_replicas
        ):
            return PutResult(
                PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH,
                remark=(
                    f"in-sync replicas not enough: the SyncStateSet {sorted(tracker.accepted.members)} has "
                    f"{tracker.in_sync_count()} of minInSyncReplicas={self.cfg.min_in_sync_replicas}; nothing stored"
                ),
            )
        return None

    def _not_master(self) -> str:
        v = self.view
        name = self.broker_cfg.broker_name
        who = f"broker {self.broker_id}" if self.broker_id is not None else "this broker (no id yet)"
        if self.role is Role.SWITCHING:
            return f"{who} of {name} is changing role (master epoch {v.master_epoch})"
        if v.master_id is None or self.role is Role.STARTING:
            return f"{who} is not the master of {name}: no master elected yet (controller mode: election in progress)"
        return f"{who} is a slave of {name}; its master is {v.master_id} at {v.master_addr} (epoch {v.master_epoch})"

    def registration_hold(self) -> str | None:
        """Why this broker must not claim brokerId 0 at the name servers now, or None."""
        if self.role is Role.MASTER and not self.lease.valid(self.clock.monotonic()):
            return "this master's controller lease ran out (not heard from the controller leader)"
        return None

    # -- status -------------------------------------------------------------------------
    def status(self) -> dict[str, object]:
        tracker = self.tracker
        now = self.clock.monotonic()
        return {
            "controllerMode": True,
            "brokerControllerId": self.broker_id,
            "role": self.role.value,
            "masterBrokerId": self.view.master_id,
            "masterAddress": self.view.master_addr,
            "masterEpoch": self.view.master_epoch,
            "syncStateSet": sorted(tracker.accepted.members) if tracker is not None else [],
            "syncStateSetEpoch": tracker.accepted.epoch if tracker is not None else 0,
            "syncStateSetPending": sorted(tracker.pending) if tracker is not None and tracker.pending else [],
            "leaseValidMillis": max(0, int((self.lease.until - now) * 1000)),
            "lastProblem": self.last_problem,
        }
