"""A stalled member leaves the SyncStateSet at its lag deadline, not at the next periodic look.

Why: with allAckInSyncStateSet a stalled slave holds every write up until it is dropped, and
issue #30 asks that this last no longer than haMaxTimeSlaveNotCatchup. The periodic look
(checkSyncStateSetPeriod) alone added up to one period (0.25-0.5 s) to that. Real loop,
fake HA service and controller; the period is set far longer than the limit, so only the
deadline look can drop the slave in time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from ledgermq.broker.controller_mode.config import ControllerModeConfig
from ledgermq.broker.controller_mode.sync_state import SyncStateSetKeeper
from ledgermq.clock import SystemClock
from ledgermq.protocol.codes import ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.controller_body import SyncStateSet

ME, SLAVE = 1, 2
LAG_S = 0.3
PERIOD_S = 30.0


class FakeHA:
    def __init__(self) -> None:
        self.ack_listeners: list[object] = []
        self.gone_listeners: list[object] = []
        self.links: dict[str, object] = {}
        self.required: frozenset[int] = frozenset()

    def require_acks_from(self, members: frozenset[int]) -> None:
        self.required = members

    async def note_in_sync(self, members: frozenset[int]) -> None:
        return None


class FakeControllers:
    def __init__(self, clock: SystemClock) -> None:
        self.clock = clock
        self.asked_at: list[float] = []

    async def invoke(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        self.asked_at.append(self.clock.monotonic())
        members = SyncStateSet.decode(cmd.body).sync_state_set
        return cmd.response(ResponseCode.SUCCESS, body=SyncStateSet(members, 2).encode())


def test_a_stalled_member_is_dropped_at_its_lag_deadline() -> None:
    asyncio.run(_stalled_member_is_dropped_at_its_lag_deadline())


async def _stalled_member_is_dropped_at_its_lag_deadline() -> None:
    clock = SystemClock()
    cfg = ControllerModeConfig(
        enable=True,
        controller_addr="127.0.0.1:1",
        check_sync_state_set_period_ms=int(PERIOD_S * 1000),
        ha_max_time_slave_not_catchup_ms=int(LAG_S * 1000),
        all_ack_in_sync_state_set=True,
    )
    ha, controllers = FakeHA(), FakeControllers(clock)
    tasks: list[asyncio.Task[None]] = []
    log_end = [1000]

    def spawn(coro: Awaitable[None], name: str) -> None:
        tasks.append(asyncio.ensure_future(coro))

    async def resync() -> None:
        return None

    keeper = SyncStateSetKeeper(
        cfg, "b", ha, controllers, clock, spawn,  # type: ignore[arg-type]
        log_end=lambda: log_end[0], is_master=lambda: True, master_epoch=lambda: 1, resync=resync,
    )  # fmt: skip
    keeper.start_as_master(ME, frozenset({ME, SLAVE}), 1)
    tracker = keeper.tracker
    assert tracker is not None
    caught_up = clock.monotonic()
    tracker.on_ack(SLAVE, 1000, 1000, caught_up)  # holds everything ...
    log_end[0] = 2000  # ... then stops copying
    keeper.check()  # the periodic look finds it within the limit and sets a look for its deadline
    assert not controllers.asked_at
    deadline = clock.monotonic() + 5.0
    while not controllers.asked_at and clock.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert controllers.asked_at, "the stalled member was not dropped before the next periodic look"
    waited = controllers.asked_at[0] - caught_up
    assert waited > LAG_S  # never before the limit
    assert waited < PERIOD_S / 2  # long before the periodic look would have come
    await asyncio.gather(*tasks)
    assert tracker.accepted.members == {ME}
    assert ha.required == frozenset()
    keeper.stop()
