"""The lite pull consumer's settings at the edges: checked when the consumer is made
(Java's ``Validators.checkGroup`` and ``checkConfig``), so a bad value fails at once rather
than in a reader later, and reported under Java's names, which the other side reads: to
the brokers in every heartbeat (``ConsumerData``) and to admin tools
(``ConsumerRunningInfo``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ledgermq.client.consumer import common as consumer_common
from ledgermq.client.consumer.common import ConsumeType, SubscriptionData
from ledgermq.client.consumer.common import check_group as check_group
from ledgermq.client.errors import MQClientError
from ledgermq.protocol.names import GROUP_MAX_LENGTH as GROUP_MAX_LENGTH

if TYPE_CHECKING:
    from ledgermq.client.lite_pull.consumer import LitePullConsumer

__all__ = [
    "GROUP_MAX_LENGTH",
    "MIN_AUTO_COMMIT_INTERVAL",
    "check_group",
    "check_settings",
    "heartbeat_data",
    "running_info",
]

MIN_AUTO_COMMIT_INTERVAL = 1.0


def check_settings(
    *,
    pull_batch_size: int,
    pull_threads_nums: int,
    consume_message_batch_max_size: int,
    auto_commit_interval: float,
    poll_timeout_millis: int,
    broker_suspend_max_time_millis: int,
    consumer_timeout_millis_when_suspend: int,
) -> None:
    """The rest of ``checkConfig``; a client-side pull timeout shorter than the broker's
    long-poll hold would abandon pulls the broker is still answering."""
    for name, value in (
        ("pull_batch_size", pull_batch_size),
        ("pull_threads_nums", pull_threads_nums),
        ("consume_message_batch_max_size", consume_message_batch_max_size),
    ):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, not {value}")
    if auto_commit_interval < MIN_AUTO_COMMIT_INTERVAL:
        raise ValueError(f"auto_commit_interval must be at least {MIN_AUTO_COMMIT_INTERVAL:.0f} s")
    if poll_timeout_millis < 0:
        raise ValueError("poll_timeout_millis must not be negative")
    if consumer_timeout_millis_when_suspend < broker_suspend_max_time_millis:
        raise MQClientError(
            "long polling: consumer_timeout_millis_when_suspend must be at least broker_suspend_max_time_millis"
        )


def heartbeat_data(consumer: LitePullConsumer, subscriptions: Iterable[SubscriptionData]) -> dict[str, Any]:
    """The heartbeat's ``ConsumerData``: a lite pull consumer pulls when the application
    asks (CONSUME_ACTIVELY); in assign mode it announces no subscriptions."""
    return consumer_common.consumer_data(
        consumer.group,
        ConsumeType.CONSUME_ACTIVELY,
        consumer.message_model,
        consumer.consume_from_where,
        subscriptions,
        unit_mode=consumer.unit_mode,
    )


def running_info(
    consumer: LitePullConsumer, start_timestamp: int, subscriptions: Iterable[SubscriptionData]
) -> dict[str, Any]:
    """``ConsumerRunningInfo``: the settings as Java names them and the subscriptions."""
    props = {
        "consumerGroup": consumer.group,
        "messageModel": consumer.message_model.value,
        "consumeFromWhere": consumer.consume_from_where.value,
        "allocateMessageQueueStrategy": consumer.allocate_strategy.name,
        "pullBatchSize": consumer.pull_batch_size,
        "pullThreadNums": consumer.pull_threads_nums,
        "pullThresholdForAll": consumer.pull_threshold_for_all,
        "pullThresholdForQueue": consumer.pull_threshold_for_queue,
        "pullThresholdSizeForQueue": consumer.pull_threshold_size_for_queue,
        "consumeMaxSpan": consumer.consume_max_span,
        "pollTimeoutMillis": consumer.poll_timeout_millis,
        "autoCommit": consumer.auto_commit,
        "autoCommitIntervalMillis": int(consumer.auto_commit_interval * 1000),
        "topicMetadataCheckIntervalMillis": int(consumer.topic_metadata_check_interval * 1000),
        "brokerSuspendMaxTimeMillis": consumer.broker_suspend_max_time_millis,
        "consumerTimeoutMillisWhenSuspend": consumer.consumer_timeout_millis_when_suspend,
        "unitMode": consumer.unit_mode,
        "instanceName": consumer.instance_name,
        "clientIP": consumer.client_ip,
        "namesrvAddr": consumer.namesrv_addrs
        if isinstance(consumer.namesrv_addrs, str)
        else ";".join(consumer.namesrv_addrs),
        "PROP_CONSUMER_START_TIMESTAMP": start_timestamp,
    }
    return {
        "properties": {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in props.items()},
        "subscriptionSet": [s.to_json() for s in subscriptions],
        "mqTable": {},
        "statusTable": {},
    }
