"""Queue selection: round-robin, avoiding the last failed broker, skipping faulty brokers."""

from __future__ import annotations

from ledgermq.client.instance.publish_info import TopicPublishInfo, publish_info_from_route
from ledgermq.client.producer.fault import FaultStrategy
from ledgermq.client.producer.selector import select_by_hash, select_one, select_queue
from ledgermq.clock import ManualClock
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.route import BrokerData, QueueData, TopicRouteData


def two_brokers(start: int = 0) -> TopicPublishInfo:
    r = TopicRouteData(
        [QueueData("a", 2, 2, 6), QueueData("b", 2, 2, 6)],
        [BrokerData("C", "a", {0: "1:1"}), BrokerData("C", "b", {0: "2:2"})],
    )
    return publish_info_from_route("T", r, start_index=start)


def test_round_robin_visits_every_queue() -> None:
    info = two_brokers(start=-1)  # masked to a positive index
    assert info.index >= 0
    info.index = 0
    picks = [select_one(info) for _ in range(4)]
    assert picks == [MessageQueue("T", "a", 1), MessageQueue("T", "b", 0), MessageQueue("T", "b", 1),
                     MessageQueue("T", "a", 0)]  # fmt: skip


def test_index_wraps_without_going_negative() -> None:
    info = two_brokers()
    info.index = 0x7FFFFFFF
    mq = select_one(info)
    assert info.index == 0 and mq == MessageQueue("T", "a", 0)


def test_avoids_last_broker_when_fault_avoidance_is_off() -> None:
    info = two_brokers()
    fs = FaultStrategy(False)
    for _ in range(10):
        assert select_queue(info, "a", fs).broker_name == "b"  # type: ignore[union-attr]
    # only one broker: the last broker is all there is
    single = publish_info_from_route("T", TopicRouteData([QueueData("a", 2, 2, 6)], [BrokerData("C", "a", {0: "x"})]))
    assert select_queue(single, "a", fs).broker_name == "a"  # type: ignore[union-attr]
    assert select_queue(TopicPublishInfo("T"), None, fs) is None


def test_skips_brokers_in_a_fault_window() -> None:
    clock = ManualClock()
    fs = FaultStrategy(True, clock=clock)
    info = two_brokers()
    fs.update_fault_item("a", 100, isolation=True)
    assert {select_queue(info, None, fs).broker_name for _ in range(8)} == {"b"}  # type: ignore[union-attr]
    clock.advance(601)
    assert {select_queue(info, None, fs).broker_name for _ in range(8)} == {"a", "b"}  # type: ignore[union-attr]


def test_prefers_another_broker_than_the_last_even_when_both_available() -> None:
    fs = FaultStrategy(True, clock=ManualClock())
    info = two_brokers()
    assert {select_queue(info, "b", fs).broker_name for _ in range(8)} == {"a"}  # type: ignore[union-attr]


def test_all_faulty_picks_the_least_bad_broker() -> None:
    fs = FaultStrategy(True, clock=ManualClock())
    info = two_brokers()
    fs.update_fault_item("a", 20000, isolation=False)  # 600 s out, high latency
    fs.update_fault_item("b", 600, isolation=False)  # 30 s out, lower latency
    picks = [select_queue(info, None, fs) for _ in range(4)]
    assert all(p is not None and p.broker_name == "b" and 0 <= p.queue_id < 2 for p in picks)


def test_least_bad_broker_without_queues_is_forgotten() -> None:
    fs = FaultStrategy(True, clock=ManualClock())
    info = two_brokers()
    fs.update_fault_item("a", 20000, isolation=False)
    fs.update_fault_item("b", 20000, isolation=False)
    fs.update_fault_item("gone", 0, 10**9)
    fs.update_fault_item("gone", 0, 10**9)
    # "gone" sorts first (lowest latency) but is not in the route
    fs.tolerance.items["gone"].current_latency_ms = -1
    mq = select_queue(info, None, fs)
    assert mq is not None
    assert "gone" not in fs.tolerance.items


def test_select_by_hash_is_javas() -> None:
    queues = [MessageQueue("T", "a", i) for i in range(4)]
    assert select_by_hash(queues, None, 7) == queues[3]
    assert select_by_hash(queues, None, -7) == queues[3]
    assert select_by_hash(queues, None, "order-1") == queues[abs(hash_of("order-1")) % 4]


def hash_of(text: str) -> int:
    h = 0
    for ch in text:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h
