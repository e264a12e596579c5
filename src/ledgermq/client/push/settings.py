"""The push consumer's settings: the shared ``ConsumerSettings`` plus its own, checked when
they are made with Java's ranges (``DefaultMQPushConsumerImpl.checkConfig``), so what the
Java client refuses is refused here too; and announced to the brokers in every heartbeat
(``ConsumerData``) under Java's names, which the brokers read.

(Its ``ConsumerRunningInfo`` is ``push.broker_requests``', with the other answers to brokers.)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ledgermq.client.consumer.common import ConsumeType, SubscriptionData, consumer_data, parse_consume_timestamp
from ledgermq.client.consumer.settings import ConsumerSettings, check_range
from ledgermq.client.errors import MQClientError

__all__ = ["PushSettings", "heartbeat_data"]


@dataclass(frozen=True, kw_only=True)
class PushSettings(ConsumerSettings):
    """Times in seconds unless the name says millis. ``pull_threshold_size_for_queue`` is in
    MiB; ``consume_timeout`` in minutes; ``max_reconsume_times`` -1 means 16 (concurrently)
    or unlimited (orderly). ``pull_threshold_*_for_topic`` -1 means unset; when set, they
    are shared among the queues read (``PushState`` holds the per-queue share)."""

    consume_timestamp: str | None = None
    consume_thread_min: int = 20
    consume_thread_max: int = 20
    consume_concurrently_max_span: int = 2000
    pull_threshold_for_topic: int = -1
    pull_threshold_size_for_topic: int = -1
    pull_interval: float = 0.0
    max_reconsume_times: int = -1
    consume_timeout: float = 15.0
    suspend_current_queue_time_millis: int = 1000
    persist_consumer_offset_interval: float = 5.0
    offset_store_dir: str | None = None
    broker_suspend_max_time: float = 15.0
    consumer_timeout_when_suspend: float = 30.0
    pull_delay_when_exception: float = 3.0
    flow_control_delay: float = 0.05
    local_reconsume_delay: float = 5.0
    lock_interval: float = 20.0
    unlock_delay: float = 20.0
    offset_illegal_fix_delay: float = 10.0
    reset_offset_wait: float = 10.0
    # Java's postSubscriptionWhenPull: False sends a pull's subscription only to a broker
    # that may not hold it from our heartbeats (client/instance/announcements.py)
    post_subscription_when_pull: bool = False

    def __post_init__(self) -> None:
        # Java's checkGroup after the blanks around the name are dropped
        self._set(group=(self.group or "").strip())
        super().__post_init__()
        check_range("consume_thread_min", self.consume_thread_min, 1, 1000)
        check_range("consume_thread_max", self.consume_thread_max, 1, 1000)
        if self.consume_thread_min > self.consume_thread_max:
            raise MQClientError(
                f"consume_thread_min ({self.consume_thread_min}) > consume_thread_max ({self.consume_thread_max})"
            )
        check_range("consume_concurrently_max_span", self.consume_concurrently_max_span, 1, 65535)
        check_range("pull_threshold_for_queue", self.pull_threshold_for_queue, 1, 65535)
        check_range("pull_threshold_size_for_queue", self.pull_threshold_size_for_queue, 1, 1024)
        if self.pull_threshold_for_topic != -1:
            check_range("pull_threshold_for_topic", self.pull_threshold_for_topic, 1, 6553500)
        if self.pull_threshold_size_for_topic != -1:
            check_range("pull_threshold_size_for_topic", self.pull_threshold_size_for_topic, 1, 102400)
        check_range("pull_batch_size", self.pull_batch_size, 1, 1024)
        check_range("consume_message_batch_max_size", self.consume_message_batch_max_size, 1, 1024)
        if self.pull_interval < 0 or self.pull_interval > 65.535:
            raise MQClientError("pull_interval must be in [0, 65.535] seconds")
        if self.consume_timestamp is not None:
            try:
                parse_consume_timestamp(self.consume_timestamp)
            except ValueError as exc:
                raise MQClientError(str(exc)) from None

    def effective_max_reconsume_times(self, *, orderly: bool) -> int:
        if self.max_reconsume_times == -1:
            return 2**31 - 1 if orderly else 16
        return self.max_reconsume_times


def heartbeat_data(settings: PushSettings, subscriptions: Iterable[SubscriptionData]) -> dict[str, Any]:
    """The heartbeat's ``ConsumerData``: a push consumer is handed messages
    (CONSUME_PASSIVELY), and announces its retry topic's subscription with the others."""
    return consumer_data(
        settings.group,
        ConsumeType.CONSUME_PASSIVELY,
        settings.message_model,
        settings.consume_from_where,
        list(subscriptions),
    )
