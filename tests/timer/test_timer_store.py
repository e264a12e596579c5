"""The on-disk wheel and log: filing, due units in order, restarts, crashes, rolls, followers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ledgermq.broker.timer.convert import due_message
from ledgermq.clock import ManualClock
from ledgermq.protocol import properties as P
from ledgermq.protocol.message import decode_record
from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import MessageStore
from ledgermq.store.timer.checkpoint import CheckpointData
from ledgermq.store.timer.delivered_from import DELIVERED_FROM, DeliveredFrom, find_in
from ledgermq.store.timer.intercept import TIMER_TOPIC
from ledgermq.store.timer.settings import TimerSettings
from ledgermq.store.timer.timer_store import TimerStore

StoreFactory = Callable[..., MessageStore]


def put_timer(store: MessageStore, body: bytes, delay_ms: int) -> None:
    result = store.put_message(MessageInput(topic="Orders", body=body, properties={P.TIMER_DELAY_MS: str(delay_ms)}))
    assert result.ok and result.append is not None and result.append.topic == TIMER_TOPIC


def timer_store(store: MessageStore, clock: ManualClock, settings: TimerSettings | None = None) -> TimerStore:
    ts = TimerStore(store.root, settings or store.timer, lambda: store.queues.get(TIMER_TOPIC, 0), clock)
    ts.open()
    ts.set_delivering(True)
    return ts


def drain(ts: TimerStore, store: MessageStore, now_ms: int) -> list[bytes]:
    """Deliver everything due at ``now_ms``; the bodies in delivery order."""
    bodies: list[bytes] = []
    while units := ts.due_units(now_ms, 3):
        for unit in units:
            raw = store.commitlog.read(unit.phy, unit.size)
            assert raw is not None
            bodies.append(decode_record(raw, check_crc=False).body)
        ts.delivered([u.pos for u in units])
    return bodies


def test_units_come_due_after_their_step_in_filing_order(store_factory: StoreFactory) -> None:
    clock = ManualClock(wall_ms=1_700_000_000_000)
    store = store_factory(clock=clock)
    ts = timer_store(store, clock)
    for i, delay in enumerate([3000, 1500, 3000, 1200, 10_000]):
        put_timer(store, f"m{i}".encode(), delay)
    assert store.wait_dispatched()
    assert ts.enqueue() == 5 and ts.pending == 5
    start = clock.wall_ms()
    assert drain(ts, store, start + 1999) == []  # nothing is ever early: 1.2 s and 1.5 s are due at 2 s
    assert drain(ts, store, start + 2000) == [b"m1", b"m3"]  # one step, in filing order
    assert drain(ts, store, start + 2999) == []  # 3 s exactly: its step ends at 3 s
    assert drain(ts, store, start + 3000) == [b"m0", b"m2"]
    assert ts.pending == 1
    assert drain(ts, store, start + 10_000) == [b"m4"]
    assert ts.pending == 0 and ts.delivered_count == 5
    ts.close()


def test_a_restart_resumes_inside_a_slot_without_repeating_it(store_factory: StoreFactory) -> None:
    clock = ManualClock(wall_ms=1_700_000_000_000)
    store = store_factory(clock=clock)
    ts = timer_store(store, clock)
    for i in range(10):
        put_timer(store, f"m{i}".encode(), 1500)
    assert store.wait_dispatched()
    ts.enqueue()
    now = clock.wall_ms() + 2000
    first = ts.due_units(now, 4)
    ts.delivered([u.pos for u in first])
    ts.close()  # a clean stop writes the checkpoint: slot and position inside it
    again = timer_store(store, clock)
    assert again.enqueue() == 0  # everything was filed already
    assert drain(again, store, now) == [f"m{i}".encode() for i in range(4, 10)]
    again.close()


def test_after_a_kill_the_wheel_learns_units_filed_past_the_checkpoint(store_factory: StoreFactory) -> None:
    """A SIGKILL leaves the mapped files as written but the checkpoint as last flushed: the
    units filed since are found in the log's tail and nothing is filed twice."""
    clock = ManualClock(wall_ms=1_700_000_000_000)
    store = store_factory(clock=clock)
    ts = timer_store(store, clock)
    put_timer(store, b"early", 1500)
    assert store.wait_dispatched()
    ts.enqueue()
    ts.flush()  # the checkpoint knows 1 unit
    for i in range(5):
        put_timer(store, f"late{i}".encode(), 1500)
    assert store.wait_dispatched()
    ts.enqueue()
    slot_ms = 1_700_000_001_000
    assert ts.wheel is not None
    ts.wheel.put(slot_ms, ts.wheel.slot(slot_ms).first_pos, ts.log.end - 2 * 52, 5)  # type: ignore[union-attr]
    # "killed": the last unit reached the log but not its slot; nothing is flushed or closed
    ts.log.files.flush()
    ts.wheel.flush()
    crashed = timer_store(store, clock)
    assert crashed.enqueue() == 5  # filed again from the checkpoint's master offset (RocketMQ's rule)
    bodies = drain(crashed, store, clock.wall_ms() + 2000)
    assert sorted(set(bodies)) == sorted([b"early"] + [f"late{i}".encode() for i in range(5)])
    assert len(bodies) <= 11  # each at most twice: the units filed after the last checkpoint
    crashed.close()


def test_a_timer_past_the_roll_window_is_parked_and_filed_again(store_factory: StoreFactory) -> None:
    clock = ManualClock(wall_ms=1_700_000_000_000)
    store = store_factory(clock=clock)
    settings = TimerSettings(roll_window_slots=10)  # 10 s window
    ts = timer_store(store, clock, settings)
    put_timer(store, b"far", 30_000)
    assert store.wait_dispatched()
    ts.enqueue()
    start = clock.wall_ms()
    assert ts.due_units(start + 10_999) == []
    units = ts.due_units(start + 11_000)
    assert len(units) == 1 and units[0].roll  # parked in the window's last step, to be filed again
    ts.close()


def test_a_follower_files_only_what_its_master_filed_and_takes_its_slot(store_factory: StoreFactory) -> None:
    clock = ManualClock(wall_ms=1_700_000_000_000)
    store = store_factory(clock=clock)
    follower = TimerStore(store.root, store.timer, lambda: store.queues.get(TIMER_TOPIC, 0), clock)
    follower.open()
    for i in range(4):
        put_timer(store, f"m{i}".encode(), 5000)
    assert store.wait_dispatched()
    assert follower.enqueue() == 0  # no master progress yet
    start = clock.wall_ms()
    follower.adopt(CheckpointData(read_ms=start + 1000, master_queue_offset=3))
    assert follower.enqueue() == 3 and follower.read_ms == start + 1000
    follower.set_delivering(True)  # takes over: files the rest, delivers from the master's slot
    assert follower.enqueue() == 1
    assert drain(follower, store, start + 5000) == [b"m0", b"m1", b"m2", b"m3"]
    follower.close()


def test_a_follower_taking_over_skips_what_the_master_s_delivered_records_said(
    store_factory: StoreFactory, tmp_path: Path
) -> None:
    """The master's delivered messages carry LEDGERMQ_TIMER_FROM; a follower listening to
    dispatched records starts where they left off, not at its last checkpoint sync."""
    clock = ManualClock(wall_ms=1_700_000_000_000)
    store = store_factory(clock=clock)
    master = timer_store(store, clock)
    follower = TimerStore(tmp_path / "follower", store.timer, lambda: store.queues.get(TIMER_TOPIC, 0), clock)
    follower.open()
    store.add_dispatch_hook(lambda req: follower.hear(req.properties))
    for i in range(10):
        put_timer(store, f"m{i}".encode(), 1500)
    put_timer(store, b"next", 2500)
    assert store.wait_dispatched()
    start = clock.wall_ms()
    assert master.enqueue() == 11
    follower.adopt(master.snapshot())  # the last slave sync: before any delivery
    assert follower.enqueue() == 11
    due = master.due_units(start + 2000, 6)
    for unit in due:  # delivered as the timer service does: written to the topic through the store
        raw = store.commitlog.read(unit.phy, unit.size)
        assert raw is not None and store.put_message(due_message(raw, unit, start + 2000)).ok
    master.delivered([u.pos for u in due])
    forged = {DELIVERED_FROM: DeliveredFrom(start + 9000, 10, 1).encode()}  # not what queue offset 10 holds
    assert store.put_message(MessageInput(topic="Orders", body=b"x", properties=forged)).ok
    assert store.wait_dispatched()
    follower.set_delivering(True)  # the master died: the follower takes over
    assert drain(follower, store, start + 3000) == [b"m6", b"m7", b"m8", b"m9", b"next"]
    assert follower.known_delivered == 6 and follower.pending == 0
    master.close()
    follower.close()


def test_delivered_from_is_found_in_a_properties_text_and_refuses_garbage() -> None:
    text = P.encode_properties({P.KEYS: "k", DELIVERED_FROM: "1000,7,4242", P.TIMER_OUT_MS: "1"})
    assert find_in(text) == DeliveredFrom(1000, 7, 4242)
    assert find_in(P.encode_properties({P.KEYS: "k"})) is None
    assert find_in(P.encode_properties({DELIVERED_FROM: "1,2"})) is None
    assert find_in(P.encode_properties({"X" + DELIVERED_FROM: "1,2,3"})) is None
