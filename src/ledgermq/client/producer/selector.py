"""Which queue the next send attempt goes to (pure).

``select_queue`` follows ``MQFaultStrategy.selectOneMessageQueue`` (4.9.7):

* fault avoidance off: round-robin from the topic's position, skipping queues of the
  broker the previous attempt failed on when another broker has queues;
* fault avoidance on: round-robin over queues of brokers not in an unavailability window
  (here also preferring a broker other than the last failed one, as the 5.x client
  does); if every broker is in a window, the least bad one
  (``pickOneAtLeast``) with a queue id taken round-robin from its writeQueueNums; failing
  that, plain round-robin.

Orderly senders pick the queue themselves: ``select_by_hash`` is RocketMQ's
``SelectMessageQueueByHash`` (Java ``hashCode`` of the argument's text, mod queue count).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ledgermq.client.instance.publish_info import TopicPublishInfo
from ledgermq.client.producer.fault import FaultStrategy
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.javahash import java_string_hash

# (queues, message, arg) -> queue; what ``Producer.send_orderly`` takes.
QueueSelector = Callable[[Sequence[MessageQueue], Any, Any], MessageQueue]


def select_one(info: TopicPublishInfo, last_broker: str | None = None) -> MessageQueue | None:
    """``TopicPublishInfo.selectOneMessageQueue(lastBrokerName)``."""
    queues = info.queues
    if not queues:
        return None
    if last_broker is not None:
        for _ in range(len(queues)):
            mq = queues[info.next_index() % len(queues)]
            if mq.broker_name != last_broker:
                return mq
    return queues[info.next_index() % len(queues)]


def select_queue(info: TopicPublishInfo, last_broker: str | None, strategy: FaultStrategy) -> MessageQueue | None:
    queues = info.queues
    if not queues:
        return None
    if not strategy.enabled:
        return select_one(info, last_broker)
    tolerance = strategy.tolerance
    index = info.next_index()
    fallback: MessageQueue | None = None
    for i in range(len(queues)):
        mq = queues[(index + i) % len(queues)]
        if tolerance.is_available(mq.broker_name):
            if mq.broker_name != last_broker:
                info.index = (index + i) & 0x7FFFFFFF
                return mq
            if fallback is None:
                fallback = mq
    if fallback is not None:
        return fallback
    not_best = tolerance.pick_one_at_least()
    if not_best is not None:
        nums = info.write_queue_nums(not_best)
        if nums > 0:
            return MessageQueue(info.topic, not_best, info.next_index() % nums)
        tolerance.remove(not_best)
    return select_one(info)


def select_by_hash(queues: Sequence[MessageQueue], msg: Any, arg: Any) -> MessageQueue:
    """``SelectMessageQueueByHash``: abs(arg.hashCode()) % size, for text or int arguments."""
    if isinstance(arg, int) and not isinstance(arg, bool):
        h = arg & 0xFFFFFFFF
        h = h - (1 << 32) if h >= 1 << 31 else h
    else:
        h = java_string_hash(str(arg))
    return queues[abs(h) % len(queues)]
