"""Delayed delivery: messages filed under SCHEDULE_TOPIC_XXXX reach their real topic when due."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ledgermq.broker.schedule import ScheduleService
from ledgermq.clock import ManualClock
from ledgermq.protocol import properties as P
from ledgermq.protocol.message import decode_records
from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import MessageStore


def test_due_messages_go_back_to_their_topic_in_order(
    store_factory: Callable[..., MessageStore], tmp_path: Path
) -> None:
    clock = ManualClock()
    store = store_factory(clock=clock)
    for i, level in enumerate([1, 2, 1]):  # 1 s, 5 s, 1 s
        r = store.put_message(
            MessageInput(topic="Orders", body=f"m{i}".encode(), queue_id=3, properties={P.DELAY: str(level)})
        )
        assert r.ok
    assert store.wait_dispatched()
    service = ScheduleService(store, tmp_path / "delayOffset.json", clock)
    assert service.deliver_due() == 0  # nothing due yet
    assert store.max_offset_in_queue("Orders", 3) == 0

    clock.advance(1.0)
    assert service.deliver_due() == 2  # both 1 s messages
    assert store.wait_dispatched()
    got = decode_records(store.get_message("Orders", 3, 0, 32).body())
    assert [r.body for r in got] == [b"m0", b"m2"]
    assert all(P.DELAY not in r.properties and r.properties[P.REAL_TOPIC] == "Orders" for r in got)

    clock.advance(4.0)
    assert service.deliver_due() == 1
    assert store.wait_dispatched()
    assert store.max_offset_in_queue("Orders", 3) == 3
    assert service.to_json() == {"offsetTable": {1: 2, 2: 1}}

    service.persist()  # progress survives a restart: nothing is delivered twice
    again = ScheduleService(store, tmp_path / "delayOffset.json", clock)
    again.load()
    clock.advance(10.0)
    assert again.deliver_due() == 0
    assert store.max_offset_in_queue("Orders", 3) == 3
