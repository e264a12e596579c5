"""The lite pull consumer's per-queue reader loop, driven by a scripted ``pull_once``, on a
virtual-time loop (tests/virtual_time.py): the gaps measured are the ones the reader chose."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace

import pytest

from ledgermq.client.consumer.process_queue import ProcessQueue
from ledgermq.client.lite_pull.assigned_queues import QueueState
from ledgermq.client.lite_pull.readers import PULL_DELAY_WHEN_PAUSE, QueueReaders
from ledgermq.client.lite_pull.settings import LitePullSettings
from ledgermq.client.lite_pull.state import LitePullState
from ledgermq.clock import SYSTEM_CLOCK
from ledgermq.protocol.admin_body import MessageQueue
from tests.virtual_time import now, run_virtual

MQ = MessageQueue("T", "broker-a", 0)


def _readers() -> QueueReaders:
    settings = LitePullSettings(
        group="g",
        namesrv_addrs="127.0.0.1:9876",
        client_ip="127.0.0.1",
        pull_threads_nums=4,
        pull_time_delay_millis_when_exception=1000,
    )
    state = LitePullState(settings, SYSTEM_CLOCK, lifecycle="running")
    plan = SimpleNamespace(assigned={})
    return QueueReaders(state, plan, buffer=None, background=None)  # type: ignore[arg-type]


def _gap_between_pulls(state: QueueState, first_pull: Callable[[QueueState], float]) -> float:
    """Seconds between a reader's first pull (answered by ``first_pull``, which returns the
    delay the reader should wait) and its second, which ends the reader."""

    async def main() -> float:
        readers = _readers()
        calls: list[float] = []

        async def pull_once(st: QueueState) -> float | None:
            calls.append(now())
            return first_pull(st) if len(calls) == 1 else None

        readers.pull_once = pull_once  # type: ignore[method-assign]
        readers.start([state])
        async with asyncio.timeout(5):
            while len(calls) < 2:
                await asyncio.sleep(0.005)
        readers.cancel()
        return calls[1] - calls[0]

    return run_virtual(main())


def test_a_resume_during_a_pull_ends_the_pause_wait_at_once() -> None:
    def saw_pause_then_resumed(st: QueueState) -> float:  # the user resumes before the pull returns
        st.paused = False
        st.wakeup.set()
        return PULL_DELAY_WHEN_PAUSE

    waited = _gap_between_pulls(QueueState(MQ, ProcessQueue(), paused=True), saw_pause_then_resumed)
    # the next pull at once (no virtual time passed), not after the pause delay
    assert waited == 0.0, f"the reader sat out the pause delay ({waited:.3f}s) after a resume"


def test_without_a_resume_the_reader_waits_out_its_delay() -> None:
    assert _gap_between_pulls(QueueState(MQ, ProcessQueue()), lambda _st: 0.2) == pytest.approx(0.2)
