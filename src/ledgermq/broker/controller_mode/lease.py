"""Heartbeats to the controller, and the lease they give a master.

BROKER_HEARTBEAT goes to every controller node every brokerHeartbeatInterval, with our HA
epoch, log end, controllerHeartBeatTimeoutMills and brokerElectionPriority (elections prefer
the highest epoch, then the longest log).

**The lease.** A master takes writes only while the controller leader answered one of its
heartbeats sent less than controllerHeartBeatTimeoutMills ago: the leader counts a broker
gone only after that long without a heartbeat (measured from when it received one, which
is after we sent it), so by the time another master can be elected this one has stopped
acknowledging. A heartbeat to the leader that fails on its connection (the leader then
sees it closed and may act at once) ends the lease at once. A master whose lease lapsed is
not renewed by a heartbeat alone: ``on_lapsed`` asks the service to reconfirm it first.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from ledgermq.broker.config import BrokerConfig
from ledgermq.broker.controller_mode.config import ControllerModeConfig
from ledgermq.clock import Clock
from ledgermq.controller.client import ControllerClient
from ledgermq.errors import LedgerError
from ledgermq.net.client import RemotingClient
from ledgermq.net.connection import RequestTimeoutError
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.headers_controller import BrokerHeartbeatRequestHeader

__all__ = ["Heartbeats", "Lease"]

log = logging.getLogger(__name__)


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

    def remaining_s(self, now: float) -> float:
        return max(0.0, self.until - now)


class Heartbeats:
    """One heartbeat round at a time per controller node (a slow node does not pile them up)."""

    def __init__(
        self,
        cfg: ControllerModeConfig,
        broker_cfg: BrokerConfig,
        client: RemotingClient,
        controllers: ControllerClient,
        clock: Clock,
        lease: Lease,
        spawn: Callable[[Awaitable[None], str], None],
        *,
        broker_id: Callable[[], int | None],
        log_end: Callable[[], int],
        last_epoch: Callable[[], int],
        is_master: Callable[[], bool],
        on_lapsed: Callable[[], None],
    ) -> None:
        self.cfg = cfg
        self.broker_cfg = broker_cfg
        self.client = client
        self.controllers = controllers
        self.clock = clock
        self.lease = lease
        self.spawn = spawn
        self.broker_id = broker_id
        self.log_end = log_end
        self.last_epoch = last_epoch
        self.is_master = is_master
        self.on_lapsed = on_lapsed
        self.failures = 0
        self._beating: set[str] = set()

    async def round(self) -> None:
        for addr in self.cfg.controller_addrs:
            if addr not in self._beating:
                self._beating.add(addr)
                self.spawn(self._beat(addr), f"heartbeat to {addr}")

    async def _beat(self, addr: str) -> None:
        try:
            broker_id = self.broker_id()
            assert broker_id is not None
            cfg = self.broker_cfg
            end = self.log_end()
            hdr = BrokerHeartbeatRequestHeader(
                cfg.cluster_name,
                cfg.broker_addr,
                cfg.broker_name,
                broker_id,
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
                self.failures += 1
                if addr == self.controllers.leader_addr and not isinstance(exc, RequestTimeoutError):
                    if self.lease.valid(self.clock.monotonic()) and self.is_master():
                        log.warning(
                            "controller mode: heartbeat to the controller leader %s failed (%s): lease ends", addr, exc
                        )
                    self.lease.end()
                return
            if resp.code == ResponseCode.SUCCESS and self._answered_as_leader(addr, resp):
                if self.lease.valid(self.clock.monotonic()) or not self.is_master():
                    self.lease.renew(sent)
                else:  # lapsed: the controller may have moved on meanwhile
                    self.on_lapsed()
        finally:
            self._beating.discard(addr)

    def _answered_as_leader(self, addr: str, resp: RemotingCommand) -> bool:
        """ledgermq's controller says in its heartbeat answer whether it leads; another
        controller's answer counts when it comes from the leader the client last found."""
        flag = resp.ext_fields.get("isLeader")
        if flag is not None:
            leads = flag == "true"
            if leads:
                self.controllers.leader_addr = addr
            return leads
        return addr == self.controllers.leader_addr
