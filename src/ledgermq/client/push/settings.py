"""The push consumer's settings at the edges: checked when the consumer is made (Java's
``DefaultMQPushConsumerImpl.checkConfig``, with its ranges), so a bad value fails at once
rather than in a pull loop later, and announced to the brokers in every heartbeat
(``ConsumerData``) under Java's names, which the brokers read.

(Its ``ConsumerRunningInfo`` is ``push_broker_requests``', with the other answers to brokers.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ledgermq.client.consumer import common as consumer_common
from ledgermq.client.consumer.common import ConsumeType, check_group, parse_consume_timestamp
from ledgermq.client.errors import MQClientError

if TYPE_CHECKING:
    from ledgermq.client.push.consumer import PushConsumer

__all__ = ["check_settings", "checked_group", "heartbeat_data"]


def checked_group(group: str) -> str:
    """The group name without surrounding blanks, checked as Java's ``checkGroup`` checks it
    (blank, over 255 characters, characters outside ``[%|a-zA-Z0-9_-]``, or the default)."""
    group = (group or "").strip()
    check_group(group)
    return group


def check_settings(
    *,
    consume_thread_min: int,
    consume_thread_max: int,
    consume_concurrently_max_span: int,
    pull_threshold_for_queue: int,
    pull_threshold_size_for_queue: int,
    pull_threshold_for_topic: int,
    pull_threshold_size_for_topic: int,
    pull_batch_size: int,
    consume_message_batch_max_size: int,
    pull_interval: float,
    consume_timestamp: str | None,
) -> None:
    """The rest of ``checkConfig``, with Java's ranges: what the Java client refuses is
    refused here too, so a configuration moves between the two unchanged."""
    _check_range("consume_thread_min", consume_thread_min, 1, 1000)
    _check_range("consume_thread_max", consume_thread_max, 1, 1000)
    if consume_thread_min > consume_thread_max:
        raise MQClientError(f"consume_thread_min ({consume_thread_min}) > consume_thread_max ({consume_thread_max})")
    _check_range("consume_concurrently_max_span", consume_concurrently_max_span, 1, 65535)
    _check_range("pull_threshold_for_queue", pull_threshold_for_queue, 1, 65535)
    _check_range("pull_threshold_size_for_queue", pull_threshold_size_for_queue, 1, 1024)
    if pull_threshold_for_topic != -1:
        _check_range("pull_threshold_for_topic", pull_threshold_for_topic, 1, 6553500)
    if pull_threshold_size_for_topic != -1:
        _check_range("pull_threshold_size_for_topic", pull_threshold_size_for_topic, 1, 102400)
    _check_range("pull_batch_size", pull_batch_size, 1, 1024)
    _check_range("consume_message_batch_max_size", consume_message_batch_max_size, 1, 1024)
    if pull_interval < 0 or pull_interval > 65.535:
        raise MQClientError("pull_interval must be in [0, 65.535] seconds")
    if consume_timestamp is not None:
        try:
            parse_consume_timestamp(consume_timestamp)
        except ValueError as exc:
            raise MQClientError(str(exc)) from None


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise MQClientError(f"{name} is out of range [{low}, {high}]: {value}")


def heartbeat_data(consumer: PushConsumer) -> dict[str, Any]:
    """The heartbeat's ``ConsumerData``: a push consumer is handed messages
    (CONSUME_PASSIVELY), and announces its retry topic's subscription with the others."""
    return consumer_common.consumer_data(
        consumer.group,
        ConsumeType.CONSUME_PASSIVELY,
        consumer.message_model,
        consumer.consume_from_where,
        list(consumer.subscriptions.values()),
    )
