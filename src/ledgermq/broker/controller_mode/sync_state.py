"""A master's SyncStateSet proposals (RocketMQ 5's AutoSwitchHAService / ReplicasManager parts).

The master keeps the set the controller accepted in an ``InSyncTracker`` (in_sync.py, pure)
and feeds it every slave ack, every slave whose connection is gone and a periodic check
(checkSyncStateSetPeriod). Whatever change the tracker asks for is proposed with
CONTROLLER_ALTER_SYNC_STATE_SET, one at a time, and relied on only once the controller
accepted it; a refusal for a stale master or SyncStateSet epoch makes the broker read
GET_REPLICA_INFO again (``resync``) and follow it. With allAckInSyncStateSet the HA service
waits for the members the tracker requires.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ledgermq.broker.controller_mode.config import ControllerModeConfig
from ledgermq.broker.controller_mode.in_sync import InSyncTracker
from ledgermq.clock import Clock
from ledgermq.controller.client import ControllerClient
from ledgermq.errors import LedgerError
from ledgermq.ha.master import HAService
from ledgermq.ha.master_link import SlaveLink
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.controller_body import SyncStateSet
from ledgermq.protocol.headers_controller import AlterSyncStateSetRequestHeader

__all__ = ["SyncStateSetKeeper"]

log = logging.getLogger(__name__)

RC = ResponseCode
DEADLINE_SLACK_S = 0.001
_FENCED = (RC.CONTROLLER_FENCED_MASTER_EPOCH, RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH, RC.CONTROLLER_INVALID_MASTER)


class SyncStateSetKeeper:
    def __init__(
        self,
        cfg: ControllerModeConfig,
        broker_name: str,
        ha: HAService,
        controllers: ControllerClient,
        clock: Clock,
        spawn: Callable[[Awaitable[None], str], None],
        *,
        log_end: Callable[[], int],
        is_master: Callable[[], bool],
        master_epoch: Callable[[], int],
        resync: Callable[[], Awaitable[None]],
    ) -> None:
        self.cfg = cfg
        self.broker_name = broker_name
        self.ha = ha
        self.controllers = controllers
        self.clock = clock
        self.spawn = spawn
        self.log_end = log_end
        self.is_master = is_master
        self.master_epoch = master_epoch
        self.resync = resync
        self.tracker: InSyncTracker | None = None  # while master
        self.accepted_changes = 0
        self.refused_changes = 0
        self._deadline_look: asyncio.TimerHandle | None = None  # a look set for a member's lag deadline
        ha.ack_listeners.append(self._on_slave_ack)
        ha.gone_listeners.append(self._on_slave_gone)

    def start_as_master(self, self_id: int, members: frozenset[int], epoch: int) -> None:
        tracker = InSyncTracker(self_id, self.cfg.ha_max_time_slave_not_catchup_ms / 1000)
        tracker.reset(members, epoch, self.clock.monotonic())
        self.tracker = tracker
        self.changed()

    def stop(self) -> None:
        self.tracker = None
        if self._deadline_look is not None:
            self._deadline_look.cancel()
            self._deadline_look = None

    def accept(self, members: frozenset[int], epoch: int) -> None:
        """The controller's set from an answer or a notification (ignored unless newer)."""
        if self.tracker is not None and self.tracker.accept(members, epoch):
            self.changed()
            self.spawn(self._remember(self.tracker, members), "noting the SyncStateSet")

    async def _remember(self, tracker: InSyncTracker, members: frozenset[int]) -> None:
        """Keep the members in the HA epoch file (a master that crashes waits for one of them
        before it takes writes again: ha/master_epochs.py)."""
        if self.tracker is tracker:
            await self.ha.note_in_sync(members - {tracker.self_id})

    def changed(self) -> None:
        """Make the HA service wait for the members the tracker now requires."""
        tracker = self.tracker
        if tracker is not None and self.cfg.all_ack_in_sync_state_set:
            self.ha.require_acks_from(tracker.required())

    # -- inputs ---------------------------------------------------------------------------
    def _on_slave_ack(self, link: SlaveLink, offset: int) -> None:
        tracker = self.tracker
        if tracker is None or link.broker_id is None or not self.is_master():
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

    def check(self) -> None:
        """The periodic look (checkSyncStateSetPeriod); when a member's lag limit ends before
        the next one, a look is also set for that moment (``_look_at_deadline``)."""
        tracker = self.tracker
        if tracker is None or not self.is_master():
            return
        now, log_end = self.clock.monotonic(), self.log_end()
        proposal = tracker.next_proposal(now, log_end)
        if proposal is not None:
            self._propose(proposal)
            return
        self._look_at_deadline(tracker.lag_deadline(log_end), now)

    def _look_at_deadline(self, deadline: float | None, now: float) -> None:
        period = self.cfg.check_sync_state_set_period_ms / 1000
        if deadline is None or deadline - now >= period:
            return  # the periodic look comes first
        if self._deadline_look is not None:
            self._deadline_look.cancel()
        # a hair past the deadline: the tracker compares "more than the limit"
        delay = max(0.0, deadline - now) + DEADLINE_SLACK_S
        self._deadline_look = asyncio.get_running_loop().call_later(delay, self._deadline_check)

    def _deadline_check(self) -> None:
        self._deadline_look = None
        self.check()

    # -- proposals ------------------------------------------------------------------------
    def _propose(self, members: frozenset[int]) -> None:
        self.changed()  # a member being added is waited for from now on
        self.spawn(self._alter(members), "a SyncStateSet change")

    async def _alter(self, members: frozenset[int]) -> None:
        tracker = self.tracker
        assert tracker is not None
        base = tracker.accepted
        hdr = AlterSyncStateSetRequestHeader(self.broker_name, tracker.self_id, self.master_epoch())
        cmd = RemotingCommand.request(
            RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, hdr.ext(), SyncStateSet(members, base.epoch).encode()
        )
        await self._remember(tracker, members | base.members)  # on disk before the controller may accept a join
        if self.tracker is not tracker:
            return
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
            self.refused_changes += 1
            log.warning("controller mode: SyncStateSet change not answered: %s", exc)
        if self.tracker is not tracker:
            return  # the role changed meanwhile
        if resp is not None and resp.code == RC.SUCCESS:
            sss = SyncStateSet.decode(resp.body)
            tracker.accept(sss.sync_state_set, sss.sync_state_set_epoch)
            self.accepted_changes += 1
            self.spawn(self._remember(tracker, sss.sync_state_set), "noting the SyncStateSet")
            log.warning(
                "controller mode: SyncStateSet is now %s (epoch %d)",
                sorted(sss.sync_state_set),
                sss.sync_state_set_epoch,
            )
        else:
            if resp is not None:
                self.refused_changes += 1
                log.warning("controller mode: SyncStateSet change refused: %s %s", resp.code, resp.remark)
            tracker.proposal_failed()
            if resp is not None and resp.code in _FENCED:
                self.spawn(self.resync(), "a metadata sync")
        self.changed()
        self.check()
