"""``ControllerModeService``: a broker's side of controller mode (RocketMQ 5's ReplicasManager).

Start-up (``_start_up``, retried until it succeeds): the controller-assigned id and
CONTROLLER_REGISTER_BROKER (registration.py), and CONTROLLER_ELECT_MASTER when the group has
no master. Until then the broker takes no writes and registers with no name server.

Running:

* heartbeats to every controller node, which keep a master's lease (lease.py);
* GET_REPLICA_INFO every syncBrokerMetadataPeriod (catches a lost notification; asks for
  an election when the group has no master);
* NOTIFY_BROKER_ROLE_CHANGED, answered at once;
* while master, the SyncStateSet and its proposals (sync_state.py).

This file is the role following: whichever brings a newer master epoch, the role follows
(``follow``), one switch at a time under a lock, through ``RoleSwitch`` (the broker's
wiring, roles.py: HA service or client, master-only duties, registration); and the gate
every write passes (``refuse_write``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from ledgermq.aio.periodic import Periodic
from ledgermq.broker.config import BrokerConfig
from ledgermq.broker.controller_mode.config import ControllerModeConfig
from ledgermq.broker.controller_mode.gate import WriteGate
from ledgermq.broker.controller_mode.in_sync import InSyncTracker
from ledgermq.broker.controller_mode.lease import Heartbeats, Lease
from ledgermq.broker.controller_mode.registration import Registration
from ledgermq.broker.controller_mode.sync_state import SyncStateSetKeeper
from ledgermq.broker.controller_mode.view import MasterView, Role, RoleSwitch, fetch_view, request_election
from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.controller.client import ControllerClient, ControllerResponseError
from ledgermq.ha.master import HAService
from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import ResponseCode
from ledgermq.store.results import PutResult
from ledgermq.util.ratelog import limited

__all__ = ["ControllerModeService", "MasterView", "Role", "RoleSwitch"]

log = logging.getLogger(__name__)

RC = ResponseCode
_RETRY_S = (0.2, 2.0)  # start-up retries: first pause, longest pause


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
        self.log_end = log_end
        self.ha = ha
        self.switch = switch
        self.clock = clock
        self.client = client if client is not None else RemotingClient(connect_timeout=1.0)
        self.controllers = ControllerClient(cfg.controller_addrs, client=self.client, request_timeout=1.0)
        self.registration = Registration(broker_cfg, store_root, self.controllers, clock)
        self.broker_id: int | None = None
        self.role = Role.STARTING
        self.view = MasterView(None, None, 0)  # the last view applied
        self.lease = Lease(cfg.heartbeat_timeout_ms / 1000)
        self.role_changes = 0
        self.role_change_failures = 0  # switches that raised; each is tried again (``_take_role``)
        self.elections_seen = 0  # newer master epochs learned from the controller (ours or another's)
        self._epoch_seen = 0  # the highest master epoch learned, for ``elections_seen``
        self.last_problem = ""
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._reconfirming = False
        self._stopping = False
        self._started = asyncio.Event()
        # Told the id once the controller granted it (the wiring puts it in the HA hello).
        self.on_broker_id: Callable[[int], None] | None = None
        # Whether this broker's writes wait for slaves as a master (SYNC_MASTER); the wiring's.
        self.waits_for_replicas: Callable[[], bool] = lambda: cfg.all_ack_in_sync_state_set
        self.heartbeats = self._make_heartbeats(last_epoch)
        self.sync_state = self._make_sync_state()
        self.gate = self._make_gate()
        self._heartbeats = Periodic("controller-heartbeat", self.heartbeats.round, cfg.heartbeat_interval_ms / 1000)
        self._metadata = Periodic(
            "controller-metadata", self.sync_metadata, cfg.sync_broker_metadata_period_ms / 1000, on_error=self._quiet
        )
        self._sss_check = Periodic(
            "sync-state-set-check", self.sync_state.check, cfg.check_sync_state_set_period_ms / 1000
        )

    # The collaborators below read the service's state through callables, not copies: the
    # role, view and broker id change as the controller decides, and each must see the
    # current value when it acts.

    def _is_master(self) -> bool:
        return self.role is Role.MASTER

    def _make_heartbeats(self, last_epoch: Callable[[], int]) -> Heartbeats:
        """Heartbeats to every controller node; a lapse of the master's lease calls ``_lapsed``."""
        return Heartbeats(
            self.cfg,
            self.broker_cfg,
            self.client,
            self.controllers,
            self.clock,
            self.lease,
            self._spawn,
            broker_id=lambda: self.broker_id,
            log_end=self.log_end,
            last_epoch=last_epoch,
            is_master=self._is_master,
            on_lapsed=self._lapsed,
        )

    def _make_sync_state(self) -> SyncStateSetKeeper:
        """The master's SyncStateSet and its proposals, stamped with the current master epoch."""
        return SyncStateSetKeeper(
            self.cfg,
            self.broker_cfg.broker_name,
            self.ha,
            self.controllers,
            self.clock,
            self._spawn,
            log_end=self.log_end,
            is_master=self._is_master,
            master_epoch=lambda: self.view.master_epoch,
            resync=self.sync_metadata,
        )

    def _make_gate(self) -> WriteGate:
        """The check every write passes: role, lease, epoch, and (SYNC_MASTER) the in-sync slaves."""
        return WriteGate(
            self.cfg,
            self.broker_cfg.broker_name,
            self.lease,
            self.clock,
            role=lambda: self.role,
            view=lambda: self.view,
            broker_id=lambda: self.broker_id,
            tracker=lambda: self.sync_state.tracker,
            waits_for_replicas=lambda: self.waits_for_replicas(),
        )

    @property
    def tracker(self) -> InSyncTracker | None:
        """The master's SyncStateSet (None unless master)."""
        return self.sync_state.tracker

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
        answer = await self.registration.register_until_done(
            self._got_id, lambda: self._stopping, self._problem, _RETRY_S
        )
        if answer is None:
            return
        self._heartbeats.start()
        await self.heartbeats.round()
        self._metadata.start()
        self._sss_check.start()
        self._started.set()
        await self.follow(answer)

    def _problem(self, what: str) -> None:
        self.last_problem = what

    async def _register(self) -> MasterView:
        return await self.registration.register(self._got_id)

    def _got_id(self, broker_id: int) -> None:
        self.broker_id = broker_id
        if self.on_broker_id is not None:
            self.on_broker_id(broker_id)

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

    # -- the lease's reconfirmation -------------------------------------------------------
    def _lapsed(self) -> None:
        if not self._reconfirming:
            self._reconfirming = True
            self._spawn(self._reconfirm(), "a master's reconfirmation")

    async def _reconfirm(self) -> None:
        """A master whose lease lapsed (or that just became master) takes writes again only
        once GET_REPLICA_INFO, sent after the lapse, still names it master in its epoch: a
        heartbeat alone says the controller hears us, not that it has not elected another."""
        try:
            sent = self.clock.monotonic()
            view = await fetch_view(self.controllers, self.broker_cfg.broker_name)
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

    # -- what the controller says ---------------------------------------------------------
    async def sync_metadata(self) -> None:
        """GET_REPLICA_INFO and follow it (also elects when the group has no master)."""
        if self.broker_id is None:
            return
        try:
            view = await fetch_view(self.controllers, self.broker_cfg.broker_name)
        except ControllerResponseError as exc:
            if exc.code in (RC.CONTROLLER_BROKER_METADATA_NOT_EXIST, RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED):
                await self.follow(await self._register())
                return
            raise
        await self.follow(view)

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
            if view.master_epoch > self._epoch_seen:
                if self._epoch_seen > 0:
                    self.elections_seen += 1
                self._epoch_seen = view.master_epoch
            if view.master_epoch > self.view.master_epoch and view.master_id is not None and view.master_addr:
                await self._take_role(view, me)
                return
            if view.master_id is None:
                if view.master_epoch > self.view.master_epoch and self.role is Role.MASTER:
                    log.warning(
                        "controller mode: deposed (master epoch %d, no master): taking no writes", view.master_epoch
                    )
                    self.view = view
                    self.role = Role.SWITCHING
                    await self.switch.become_slave(None, me)
                    self.sync_state.stop()
                    self.role = Role.SLAVE
                    self.switch.settled()
                self._spawn(self._elect(), "an election request")
                return
            if view.master_epoch == self.view.master_epoch and self.role is Role.MASTER:
                self.sync_state.accept(view.sync_state_set, view.sync_state_set_epoch)

    async def _take_role(self, view: MasterView, me: int) -> None:
        """Become ``view``'s master or its slave. A switch that fails (the disk full when the
        epoch file is written, say) leaves the broker taking no writes, and the view it
        held before: the next metadata sync (``syncBrokerMetadataPeriod``) tries the same
        role again, so the group gets its master back once the cause clears instead of
        waiting for a restart."""
        held = self.view
        self.view = view
        self.role = Role.SWITCHING
        try:
            if view.master_id == me:
                log.warning(
                    "controller mode: becoming master of %s (epoch %d)", self.broker_cfg.broker_name, view.master_epoch
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
                self.sync_state.stop()
                self.role = Role.SLAVE
                self.switch.settled()
            self.role_changes += 1  # roles taken; a failed try counts in ``role_change_failures``
        except Exception as exc:
            self.sync_state.stop()
            self.view = held  # so the next sync with the controller takes this role again
            self.role = Role.SWITCHING
            self.role_change_failures += 1
            role = "master" if view.master_id == me else "slave"
            self.last_problem = f"becoming {role} in epoch {view.master_epoch} failed: {exc}"
            limited.log(  # a disk that stays full fails every retry: once a minute in the log
                log,
                logging.ERROR,
                ("controller-role-change", self.broker_cfg.broker_name),
                "controller mode: %s; taking no writes, tried again at the next metadata sync (every %d ms)",
                self.last_problem,
                self.cfg.sync_broker_metadata_period_ms,
                exc_info=True,
            )

    async def _become_master(self, view: MasterView) -> None:
        assert self.broker_id is not None
        self.sync_state.start_as_master(self.broker_id, view.sync_state_set, view.sync_state_set_epoch)
        await self.switch.become_master(view.master_epoch)
        self.role = Role.MASTER
        self.lease.end()  # opened by the reconfirmation below (a GET_REPLICA_INFO from now)
        self._reconfirming = True
        self._spawn(self._reconfirm(), "a new master's confirmation")
        self.sync_state.check()

    async def _elect(self) -> None:
        assert self.broker_id is not None
        cfg = self.broker_cfg
        view = await request_election(self.controllers, cfg.cluster_name, cfg.broker_name, self.broker_id)
        if view is not None:
            await self.follow(view)

    # -- writes -------------------------------------------------------------------------
    def refuse_write(self, wait: bool) -> PutResult | None:
        """Why this broker may not take a write now (None: it may); gate.py."""
        return self.gate.refuse(wait)

    def registration_hold(self) -> str | None:
        """Why this broker must not claim brokerId 0 at the name servers now, or None."""
        return self.gate.registration_hold()

    # -- status -------------------------------------------------------------------------
    def status(self) -> dict[str, object]:
        tracker = self.tracker
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
            "leaseValidMillis": int(self.lease.remaining_s(self.clock.monotonic()) * 1000),
            "roleChanges": self.role_changes,
            "roleChangeFailures": self.role_change_failures,
            "lastProblem": self.last_problem,
        }
