"""The broker's own writes in DLedger mode, in process.

The schedule service's offsets move only past messages its writer accepted (a refused or
unknown-outcome proposal is retried later: at-least-once). A one-node DLedger group (its
own quorum, so it leads at once) delivers a delayed message through Raft, and the role
callback starts the schedule service on leadership and stops it on losing it, switching
the slave synchronizer the other way.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from ledgermq.broker.app import BrokerApp
from ledgermq.broker.schedule import ScheduleService
from ledgermq.clock import ManualClock
from ledgermq.protocol import properties as P
from ledgermq.raft import Role
from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import MessageStore
from ledgermq.store.results import PutResult, PutStatus
from ledgermq.testing.ports import free_port
from tests.broker.harness import running_broker


def test_the_offset_moves_only_past_messages_the_writer_accepted(
    store_factory: Callable[..., MessageStore], tmp_path: Path
) -> None:
    clock = ManualClock()
    store = store_factory(clock=clock)
    for i in range(3):
        msg = MessageInput(topic="Orders", body=f"m{i}".encode(), queue_id=0, properties={P.DELAY: "1"})
        assert store.put_message(msg).ok
    assert store.wait_dispatched()
    answers = [PutStatus.PUT_OK, PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH, PutStatus.SERVICE_NOT_AVAILABLE]
    written: list[bytes] = []

    async def put(msg: MessageInput) -> PutResult:
        status = answers.pop(0) if answers else PutStatus.PUT_OK
        if status is PutStatus.PUT_OK:
            written.append(msg.body)
        return PutResult(status, remark="test")

    service = ScheduleService(store, tmp_path / "delayOffset.json", clock, put=put)
    clock.advance(1.0)

    async def rounds() -> list[int]:
        return [await service.deliver_due_async() for _ in range(3)]

    # Round 1: m0 accepted, m1's outcome unknown -> stop at m1. Round 2: m1 refused. Round 3: m1, m2.
    assert asyncio.run(rounds()) == [1, 0, 2]
    assert written == [b"m0", b"m1", b"m2"]
    assert service.to_json() == {"offsetTable": {1: 3}}


def test_a_follower_adopts_the_masters_delay_offsets_only_while_stopped(
    store_factory: Callable[..., MessageStore], tmp_path: Path
) -> None:
    service = ScheduleService(store_factory(), tmp_path / "delayOffset.json", ManualClock())
    service.adopt({"offsetTable": {"1": 7, "3": 2}})
    assert service.to_json() == {"offsetTable": {1: 7, 3: 2}}

    async def while_running() -> None:
        service.start()
        service.adopt({"offsetTable": {"1": 1}})  # the running (master's) service owns its offsets
        await service.stop()

    asyncio.run(while_running())
    assert service.to_json() == {"offsetTable": {1: 7, 3: 2}}


def one_node_group(root: Path) -> dict[str, object]:
    return dict(
        enable_dleger_commit_log=True,
        dleger_group="broker-a",
        dleger_self_id="n0",
        dleger_peers=f"n0-127.0.0.1:{free_port()}",
        message_delay_level="1s 2s",
    )


async def wait_for(what: str, check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def schedule_running(app: BrokerApp) -> bool:
    return app.broker.schedule is not None and app.broker.schedule.running


def test_a_dledger_leader_delivers_delayed_messages_and_the_service_follows_the_role(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_broker(tmp_path, store=one_node_group(tmp_path)) as h:
            app = h.app
            dledger = app.broker.dledger
            assert dledger is not None and app.slave_sync is not None
            await wait_for("leadership", lambda: dledger.is_master and schedule_running(app))

            sent = time.monotonic()
            await h.send("Later", b"due-in-1s", props={P.DELAY: "1"})
            await wait_for(
                "the delayed message in its topic", lambda: app.broker.store.max_offset_in_queue("Later", 0) == 1
            )
            assert time.monotonic() - sent >= 0.9
            assert [m.body for m in await h.pull("cg", "Later")] == [b"due-in-1s"]
            assert app.broker.schedule is not None and app.broker.schedule.to_json() == {"offsetTable": {1: 1}}

            # Losing leadership stops delivery and starts copying the master's metadata; regaining it, the reverse.
            dledger._role_changed(Role.FOLLOWER, 99, None)
            await wait_for("delivery to stop", lambda: not schedule_running(app))
            sync = app.slave_sync  # starts after the timer and the check-back stopped too (their files flushed)
            await wait_for("copying the master's metadata", lambda: sync._periodic._task is not None)
            dledger._role_changed(Role.LEADER, 99, "n0")
            await wait_for("delivery to restart", lambda: schedule_running(app))
            assert app.slave_sync._periodic._task is None

        assert not schedule_running(app)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_committed_send_is_dispatched_by_the_write_turn_before_its_answer(tmp_path: Path) -> None:
    """A commit is dispatched by the broker's end-of-turn step (``after_commit``), not by a
    reput-thread wake-up per commit: by the time SEND_OK is read the message is in its
    consume queue, with the reput thread's own poll parked."""

    async def main() -> None:
        async with running_broker(tmp_path, store=one_node_group(tmp_path)) as h:
            app = h.app
            dledger = app.broker.dledger
            assert dledger is not None and app.broker.store.reput is not None
            await wait_for("leadership", lambda: dledger.is_master)
            app.broker.store.reput.interval_s = 3600.0  # only a wake-up or the turn dispatches
            await h.send("Turned", b"warm-up")  # the reput thread's pending poll, if any, goes now
            for n in range(2, 12):
                resp = await h.send("Turned", b"m%d" % n)
                assert resp.code == 0, resp.remark
                assert app.broker.store.max_offset_in_queue("Turned", 0) == n

    asyncio.run(asyncio.wait_for(main(), 30))
