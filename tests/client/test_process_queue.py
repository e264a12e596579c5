"""ProcessQueue: cache accounting, the committable offset, orderly take/commit/rollback, expiry."""

from __future__ import annotations

from ledgermq.client.consumer.process_queue import PROPERTY_CONSUME_START_TIME, ProcessQueue
from ledgermq.clock import ManualClock
from ledgermq.protocol.message import MessageRecord


def msg(offset: int, body: bytes = b"abc", **props: str) -> MessageRecord:
    return MessageRecord(topic="T", body=body, queue_offset=offset, properties=dict(props))


def test_put_counts_new_messages_once_and_dispatches_once() -> None:
    pq = ProcessQueue()
    assert pq.put_message([msg(0), msg(1)]) is True
    assert pq.put_message([msg(1), msg(2, b"12345")]) is False  # already consuming
    assert pq.msg_count == 3 and pq.msg_size == 3 + 3 + 5
    assert pq.queue_offset_max == 2 and pq.max_span == 2
    assert [m.queue_offset for m in pq.cached_messages()] == [0, 1, 2]


def test_remove_returns_the_smallest_offset_still_in_flight() -> None:
    pq = ProcessQueue()
    assert pq.remove_message([msg(0)]) == -1  # nothing cached
    pq.put_message([msg(10), msg(11), msg(12)])
    assert pq.remove_message([msg(11)]) == 10  # 10 still in a listener: commit stops before it
    assert pq.remove_message([msg(10)]) == 12
    assert pq.remove_message([msg(12)]) == 13  # empty: one past the newest
    assert pq.msg_count == 0 and pq.msg_size == 0 and not pq.has_temp_message()


def test_accumulation_from_the_max_offset_property() -> None:
    pq = ProcessQueue()
    pq.put_message([msg(3, MAX_OFFSET="10")])
    assert pq.msg_acc_cnt == 7


def test_orderly_take_commit_and_consume_again() -> None:
    pq = ProcessQueue()
    pq.put_message([msg(i) for i in range(5)])
    first = pq.take_messages(2)
    assert [m.queue_offset for m in first] == [0, 1]
    assert pq.commit() == 2
    assert pq.msg_count == 3
    again = pq.take_messages(2)
    pq.make_message_to_consume_again(again)
    assert [m.queue_offset for m in pq.take_messages(10)] == [2, 3, 4]  # same order again
    pq.rollback()
    assert [m.queue_offset for m in pq.cached_messages()] == [2, 3, 4]
    assert pq.take_messages(3) and pq.commit() == 5
    assert pq.take_messages(1) == [] and pq.consuming is False
    assert pq.commit() == -1


def test_lock_and_pull_expiry_follow_the_clock() -> None:
    clock = ManualClock()
    pq = ProcessQueue(clock=clock)
    pq.mark_locked(True)
    clock.advance(29)
    assert not pq.lock_expired
    clock.advance(2)
    assert pq.lock_expired
    pq.mark_locked(True)
    assert not pq.lock_expired
    clock.advance(121)
    assert pq.pull_expired
    pq.mark_pulled()
    assert not pq.pull_expired


def test_expired_head_and_info() -> None:
    clock = ManualClock()
    pq = ProcessQueue(clock=clock)
    now = clock.wall_ms()
    pq.put_message([msg(0, **{PROPERTY_CONSUME_START_TIME: str(now - 16 * 60_000)}), msg(1)])
    head = pq.expired_head(15 * 60, now)
    assert head is not None and head.queue_offset == 0
    pq.remove_message([head])
    assert pq.expired_head(15 * 60, now) is None  # no start time yet
    pq.take_messages(1)
    info = pq.info()
    assert info["transactionMsgCount"] == 1 and info["cachedMsgCount"] == 0
    assert info["lastPullTimestamp"] == now
    pq.clear()
    assert pq.msg_count == 0 and pq.info()["transactionMsgCount"] == 0
