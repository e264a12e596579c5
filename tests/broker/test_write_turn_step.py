"""The write turn's end-of-turn step (broker/write_turn/turn.py) on a real event loop.

The order is fixed (dispatch, pump replication links, release waiters, write answers), a
turn runs one step however many sends appended, and the threads' posts wake the loop once
per batch. A fake store and a fake replication record what the step asked of them.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, cast

import pytest

from ledgermq.broker.write_turn import FixedReplication, Need, Wait, WriteTurn
from ledgermq.broker.write_turn import turn as turn_module
from ledgermq.broker.write_turn.turn import REPLICA_DISPATCH_INTERVAL_S
from ledgermq.clock import SYSTEM_CLOCK
from ledgermq.net.read_round import ReadRound
from ledgermq.store.message_store import MessageStore


class _Store:
    flushed_phy_offset = 1 << 62  # the store's own flushed offset: every report stands

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def dispatch_appended(self) -> dict[tuple[str, int], int]:
        self.calls.append("dispatch")
        return {("T", 0): 7}


class _Replication:
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls
        self.floor = 0

    def pump(self) -> None:
        self.calls.append("pump")

    def replication_floor(self) -> int:
        return self.floor

    def holds(self, end: int) -> bool:
        return end <= self.floor


def _turn(calls: list[str], replication: _Replication | None = None) -> WriteTurn:
    store = cast(MessageStore, cast(Any, _Store(calls)))
    turn = WriteTurn(
        store, SYSTEM_CLOCK, FixedReplication(replication), lambda t, q, m: calls.append(f"arrived {t}-{q}:{m}")
    )
    turn.bind(asyncio.get_running_loop())
    return turn


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_one_step_per_turn_in_the_documented_order() -> None:
    async def main() -> None:
        calls: list[str] = []
        replication = _Replication(calls)
        turn = _turn(calls, replication)
        replication.floor = 100  # the slave already holds the message: released in this step
        for _ in range(3):  # three sends in one turn
            turn.appended()
        turn.add(Wait(100, Need.REPLICATED, 5.0, lambda w: calls.append(f"answer met={w.met}")))
        assert calls == []  # nothing before the end of the turn
        await _settle()
        assert calls == ["dispatch", "arrived T-0:7", "pump", "answer met=True"]
        assert turn.steps == 1

    asyncio.run(main())


def test_a_wait_is_not_answered_before_its_fact_and_is_after_it() -> None:
    async def main() -> None:
        calls: list[str] = []
        replication = _Replication(calls)
        turn = _turn(calls, replication)
        turn.appended()
        turn.add(Wait(200, Need.REPLICATED, 5.0, lambda w: calls.append("answer")))
        await _settle()
        assert "answer" not in calls
        replication.floor = 199  # one byte short
        turn.changed()
        await _settle()
        assert "answer" not in calls
        replication.floor = 200
        turn.changed()
        await _settle()
        assert calls.count("answer") == 1

    asyncio.run(main())


def test_flush_thread_posts_wake_the_loop_once_per_batch_and_release_durable_waits() -> None:
    async def main() -> None:
        calls: list[str] = []
        turn = _turn(calls)
        done = asyncio.Event()
        turn.add(Wait(300, Need.DURABLE, 5.0, lambda w: (calls.append(f"answer met={w.met}"), done.set())))
        await _settle()

        def flush_thread() -> None:
            for offset in (100, 200, 300):  # three fsyncs before the loop gets to run
                turn.inbox.post_durable(offset, None)

        poster = threading.Thread(target=flush_thread)
        poster.start()
        poster.join()  # the loop is blocked meanwhile: it cannot drain between the posts
        await asyncio.wait_for(done.wait(), 5)
        assert calls == ["answer met=True"]
        assert turn.inbox.wakeups == 1

    asyncio.run(main())


def test_a_wait_past_its_deadline_is_answered_by_the_turn_timer() -> None:
    async def main() -> None:
        calls: list[str] = []
        turn = _turn(calls, _Replication(calls))
        done = threading.Event()
        turn.add(
            Wait(100, Need.REPLICATED, 0.05, lambda w: (calls.append(f"missed={Need.name(w.missed)}"), done.set()))
        )
        await asyncio.wait_for(asyncio.to_thread(done.wait, 5), 10)
        assert calls == ["missed=REPLICATED"]
        assert len(turn.waits) == 0

    asyncio.run(main())


def test_an_earlier_deadline_moves_the_armed_timer_and_a_later_wait_stays_pending() -> None:
    """The timer is armed for the first wait's far deadline (a minute); a near one added
    later must move it (answered within seconds, not a minute), and the far wait stays in
    the table until something releases it."""

    async def main() -> None:
        calls: list[str] = []
        turn = _turn(calls, _Replication(calls))
        near = threading.Event()
        turn.add(Wait(100, Need.REPLICATED, 60.0, lambda w: calls.append(f"far missed={Need.name(w.missed)}")))
        await _settle()  # a step ran and armed the timer for the far deadline
        turn.add(Wait(200, Need.REPLICATED, 0.05, lambda w: (calls.append("near"), near.set())))
        await asyncio.wait_for(asyncio.to_thread(near.wait, 20), 30)
        assert calls == ["near"] and len(turn.waits) == 1
        turn.stop()
        assert calls == ["near", "far missed=REPLICATED"] and len(turn.waits) == 0

    asyncio.run(main())


def test_facts_noted_during_a_read_run_one_step_after_it_whose_answers_are_in_a_round() -> None:
    """Reads of several connections in one pass share one step (scheduled, not run at each
    read's end), and the answers it releases are queued in the server's read round."""

    async def main() -> None:
        calls: list[str] = []
        replication = _Replication(calls)
        read_round = ReadRound()
        store = cast(MessageStore, cast(Any, _Store(calls)))
        turn = WriteTurn(store, SYSTEM_CLOCK, FixedReplication(replication), None, read_round)
        turn.bind(asyncio.get_running_loop())
        replication.floor = 1000

        def answer(wait: Wait) -> None:
            calls.append(f"answer in round={read_round.open}")

        for end in (100, 200):  # two connections' reads in one pass
            read_round.enter()
            turn.appended()
            turn.add(Wait(end, Need.REPLICATED, 5.0, answer))
            read_round.exit()
        assert calls == []
        await _settle()
        assert calls == ["dispatch", "pump", "answer in round=True", "answer in round=True"]
        assert turn.steps == 1

    asyncio.run(main())


def test_an_append_from_a_task_is_dispatched_at_once() -> None:
    async def main() -> None:
        calls: list[str] = []
        store = cast(MessageStore, cast(Any, _Store(calls)))
        turn = WriteTurn(store, SYSTEM_CLOCK, FixedReplication(), None, ReadRound())
        turn.bind(asyncio.get_running_loop())
        turn.appended_now()
        assert calls == ["dispatch"]  # no loop pass in between
        await _settle()
        assert turn.steps == 1  # and nothing left for a scheduled step

    asyncio.run(main())


def test_a_replicas_appends_share_one_dispatch_on_the_reput_cadence(monkeypatch: pytest.MonkeyPatch) -> None:
    """A slave's appends are not dispatched per append, nor in the loop
    passes after them, but once, by the cadence timer, for all of them together. (The
    cadence is stretched to a second here so that "not in the next passes" holds on any
    machine; the broker's is REPLICA_DISPATCH_INTERVAL_S.)"""
    assert REPLICA_DISPATCH_INTERVAL_S == 0.001  # RocketMQ's reput thread: a pass every millisecond
    monkeypatch.setattr(turn_module, "REPLICA_DISPATCH_INTERVAL_S", 1.0)

    async def main() -> None:
        calls: list[str] = []
        store = cast(MessageStore, cast(Any, _Store(calls)))
        turn = WriteTurn(store, SYSTEM_CLOCK, FixedReplication(), None, ReadRound())
        turn.bind(asyncio.get_running_loop())
        started = time.monotonic()
        for _ in range(3):
            turn.replica_appended()
        await _settle()
        assert calls == [] and turn.steps == 0  # not per append, not in the next passes
        while not calls and time.monotonic() < started + 10:
            await asyncio.sleep(0.01)
        assert calls == ["dispatch"] and turn.steps == 1
        assert time.monotonic() - started >= 0.9  # by the cadence timer
        turn.replica_appended()  # a later append gets a cadence of its own
        await _settle()
        assert calls == ["dispatch"]
        while len(calls) < 2 and time.monotonic() < started + 20:
            await asyncio.sleep(0.01)
        assert calls == ["dispatch", "dispatch"] and turn.steps == 2

    asyncio.run(main())


def test_a_stopped_turn_dispatches_no_pending_replica_append() -> None:
    async def main() -> None:
        calls: list[str] = []
        store = cast(MessageStore, cast(Any, _Store(calls)))
        turn = WriteTurn(store, SYSTEM_CLOCK, FixedReplication(), None, ReadRound())
        turn.bind(asyncio.get_running_loop())
        turn.replica_appended()
        turn.stop()
        await asyncio.sleep(REPLICA_DISPATCH_INTERVAL_S * 20)
        assert calls == [] and turn.steps == 0

    asyncio.run(main())
