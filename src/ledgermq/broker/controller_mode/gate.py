"""The gate every write passes in controller mode (``Broker.refuse_write``).

A write is refused when this broker is not the master (SERVICE_NOT_AVAILABLE naming the
master, so clients look for it), when a master's controller lease ran out (lease.py: another
master may be elected meanwhile), or, for a write that waits for replicas, when the
SyncStateSet has fewer members than minInSyncReplicas (RocketMQ's IN_SYNC_REPLICAS_NOT_ENOUGH,
before anything is stored). The same lease decides whether a master may claim brokerId 0 at
the name servers.
"""

from __future__ import annotations

from collections.abc import Callable

from ledgermq.broker.controller_mode.config import ControllerModeConfig
from ledgermq.broker.controller_mode.in_sync import InSyncTracker
from ledgermq.broker.controller_mode.lease import Lease
from ledgermq.broker.controller_mode.view import MasterView, Role
from ledgermq.clock import Clock
from ledgermq.store.results import PutResult, PutStatus

__all__ = ["WriteGate"]

_MASTER = Role.MASTER  # read per send: an enum member through its class costs a lookup each time


class WriteGate:
    def __init__(
        self,
        cfg: ControllerModeConfig,
        broker_name: str,
        lease: Lease,
        clock: Clock,
        *,
        role: Callable[[], Role],
        view: Callable[[], MasterView],
        broker_id: Callable[[], int | None],
        tracker: Callable[[], InSyncTracker | None],
        waits_for_replicas: Callable[[], bool],
    ) -> None:
        self.cfg = cfg
        self.broker_name = broker_name
        self.lease = lease
        self.clock = clock
        self.role = role
        self.view = view
        self.broker_id = broker_id
        self.tracker = tracker
        self.waits_for_replicas = waits_for_replicas
        self.fenced_writes = 0  # sends refused for an expired lease

    def refuse(self, wait: bool) -> PutResult | None:
        """Why this broker may not take a write now (None: it may): not the master, a lease
        run out, or (a write that waits for replicas) fewer in-sync replicas than
        minInSyncReplicas."""
        if self.role() is not _MASTER:
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
        if not wait or self.cfg.min_in_sync_replicas <= 1:
            return None  # the master itself is always in its SyncStateSet: nothing to count per send
        tracker = self.tracker()
        if (
            tracker is not None
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
        v = self.view()
        role = self.role()
        broker_id = self.broker_id()
        name = self.broker_name
        who = f"broker {broker_id}" if broker_id is not None else "this broker (no id yet)"
        if role is Role.SWITCHING:
            return f"{who} of {name} is changing role (master epoch {v.master_epoch})"
        if v.master_id is None or role is Role.STARTING:
            return f"{who} is not the master of {name}: no master elected yet (controller mode: election in progress)"
        return f"{who} is a slave of {name}; its master is {v.master_id} at {v.master_addr} (epoch {v.master_epoch})"

    def registration_hold(self) -> str | None:
        """Why this broker must not claim brokerId 0 at the name servers now, or None."""
        if self.role() is Role.MASTER and not self.lease.valid(self.clock.monotonic()):
            return "this master's controller lease ran out (not heard from the controller leader)"
        return None
