"""The lite pull consumer's settings: the shared ``ConsumerSettings`` plus its own, checked
when they are made (Java's ``Validators.checkGroup`` and ``checkConfig``), so a bad value
fails at once rather than in a reader later, and reported under Java's names, which the
other side reads: to the brokers in every heartbeat (``ConsumerData``) and to admin tools
(``ConsumerRunningInfo``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ledgermq.client.consumer.common import ConsumeType, SubscriptionData, consumer_data
from ledgermq.client.consumer.settings import ConsumerSettings
from ledgermq.client.errors import MQClientError
from ledgermq.protocol.names import GROUP_MAX_LENGTH as GROUP_MAX_LENGTH

__all__ = [
    "GROUP_MAX_LENGTH",
    "MIN_AUTO_COMMIT_INTERVAL",
    "LitePullSettings",
    "heartbeat_data",
    "running_info",
]

MIN_AUTO_COMMIT_INTERVAL = 1.0


@dataclass(frozen=True, kw_only=True)
class LitePullSettings(ConsumerSettings):
    """Offsets are queue offsets (message counts); the ``*_millis`` options are
    milliseconds as in Java; intervals are seconds."""

    pull_batch_size: int = 10
    consume_message_batch_max_size: int = 10
    pull_threads_nums: int = 20
    pull_threshold_for_all: int = 10_000
    consume_max_span: int = 2000
    poll_timeout_millis: int = 5000
    auto_commit: bool = True
    auto_commit_interval: float = 5.0
    topic_metadata_check_interval: float = 30.0
    broker_suspend_max_time_millis: int = 20_000
    consumer_timeout_millis_when_suspend: int = 30_000
    pull_time_delay_millis_when_exception: int = 1000
    local_offset_store_dir: str | None = None
    unit_mode: bool = False
    persist_interval: float = 5.0

    def __post_init__(self) -> None:
        """The rest of ``checkConfig``; a client-side pull timeout shorter than the broker's
        long-poll hold would abandon pulls the broker is still answering."""
        super().__post_init__()
        for name, value in (
            ("pull_batch_size", self.pull_batch_size),
            ("pull_threads_nums", self.pull_threads_nums),
            ("consume_message_batch_max_size", self.consume_message_batch_max_size),
        ):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, not {value}")
        if self.auto_commit_interval < MIN_AUTO_COMMIT_INTERVAL:
            raise ValueError(f"auto_commit_interval must be at least {MIN_AUTO_COMMIT_INTERVAL:.0f} s")
        if self.poll_timeout_millis < 0:
            raise ValueError("poll_timeout_millis must not be negative")
        if self.consumer_timeout_millis_when_suspend < self.broker_suspend_max_time_millis:
            raise MQClientError(
                "long polling: consumer_timeout_millis_when_suspend must be at least broker_suspend_max_time_millis"
            )

    @property
    def pull_time_delay_when_exception(self) -> float:
        """The back-off after a failed pull, in seconds."""
        return self.pull_time_delay_millis_when_exception / 1000


def heartbeat_data(settings: LitePullSettings, subscriptions: Iterable[SubscriptionData]) -> dict[str, Any]:
    """The heartbeat's ``ConsumerData``: a lite pull consumer pulls when the application
    asks (CONSUME_ACTIVELY); in assign mode it announces no subscriptions."""
    return consumer_data(
        settings.group,
        ConsumeType.CONSUME_ACTIVELY,
        settings.message_model,
        settings.consume_from_where,
        subscriptions,
        unit_mode=settings.unit_mode,
    )


def running_info(
    settings: LitePullSettings, start_timestamp: int, subscriptions: Iterable[SubscriptionData]
) -> dict[str, Any]:
    """``ConsumerRunningInfo``: the settings as Java names them and the subscriptions."""
    props = {
        "consumerGroup": settings.group,
        "messageModel": settings.message_model.value,
        "consumeFromWhere": settings.consume_from_where.value,
        "allocateMessageQueueStrategy": settings.allocate_strategy.name,
        "pullBatchSize": settings.pull_batch_size,
        "pullThreadNums": settings.pull_threads_nums,
        "pullThresholdForAll": settings.pull_threshold_for_all,
        "pullThresholdForQueue": settings.pull_threshold_for_queue,
        "pullThresholdSizeForQueue": settings.pull_threshold_size_for_queue,
        "consumeMaxSpan": settings.consume_max_span,
        "pollTimeoutMillis": settings.poll_timeout_millis,
        "autoCommit": settings.auto_commit,
        "autoCommitIntervalMillis": int(settings.auto_commit_interval * 1000),
        "topicMetadataCheckIntervalMillis": int(settings.topic_metadata_check_interval * 1000),
        "brokerSuspendMaxTimeMillis": settings.broker_suspend_max_time_millis,
        "consumerTimeoutMillisWhenSuspend": settings.consumer_timeout_millis_when_suspend,
        "unitMode": settings.unit_mode,
        "instanceName": settings.instance_name,
        "clientIP": settings.client_ip,
        "namesrvAddr": settings.namesrv_addr_text,
        "PROP_CONSUMER_START_TIMESTAMP": start_timestamp,
    }
    return {
        "properties": {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in props.items()},
        "subscriptionSet": [s.to_json() for s in subscriptions],
        "mqTable": {},
        "statusTable": {},
    }
