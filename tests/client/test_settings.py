"""The clients' settings objects: every keyword argument the facades took before the
settings became dataclasses is still taken (and lands in ``client.settings``), ``settings=``
works instead, the settings are checked when made and frozen after, and the package's
public names are the ones it always had. Nothing here starts a client."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from typing import Any

import pytest

import ledgermq.client
from ledgermq.client import LitePullConsumer, MessageModel, MQClientError, Producer, PushConsumer
from ledgermq.client.consumer.settings import ConsumerSettings
from ledgermq.client.lite_pull.settings import LitePullSettings
from ledgermq.client.producer.settings import ProducerSettings
from ledgermq.client.push.settings import PushSettings
from ledgermq.clock import ManualClock

NS = "127.0.0.1:9876"

# The keyword arguments of the three facades before the settings objects (commit 22ad5ed).
PUSH_KEYWORDS = [
    "message_model",
    "consume_from_where",
    "consume_timestamp",
    "allocate_strategy",
    "consume_thread_min",
    "consume_thread_max",
    "consume_concurrently_max_span",
    "pull_threshold_for_queue",
    "pull_threshold_size_for_queue",
    "pull_threshold_for_topic",
    "pull_threshold_size_for_topic",
    "pull_interval",
    "pull_batch_size",
    "consume_message_batch_max_size",
    "max_reconsume_times",
    "consume_timeout",
    "suspend_current_queue_time_millis",
    "persist_consumer_offset_interval",
    "rebalance_interval",
    "heartbeat_interval",
    "poll_namesrv_interval",
    "api_timeout",
    "instance_name",
    "client_ip",
    "offset_store",
    "offset_store_dir",
    "broker_suspend_max_time",
    "consumer_timeout_when_suspend",
    "pull_delay_when_exception",
    "flow_control_delay",
    "local_reconsume_delay",
    "lock_interval",
    "unlock_delay",
    "offset_illegal_fix_delay",
    "reset_offset_wait",
    "clock",
    "credentials",
]
LITE_KEYWORDS = [
    "message_model",
    "consume_from_where",
    "consume_timestamp",
    "allocate_strategy",
    "pull_batch_size",
    "pull_threads_nums",
    "consume_message_batch_max_size",
    "pull_threshold_for_all",
    "pull_threshold_for_queue",
    "pull_threshold_size_for_queue",
    "consume_max_span",
    "poll_timeout_millis",
    "auto_commit",
    "auto_commit_interval",
    "topic_metadata_check_interval",
    "broker_suspend_max_time_millis",
    "consumer_timeout_millis_when_suspend",
    "pull_time_delay_millis_when_exception",
    "offset_store",
    "local_offset_store_dir",
    "unit_mode",
    "instance_name",
    "client_ip",
    "api_timeout",
    "poll_namesrv_interval",
    "heartbeat_interval",
    "rebalance_interval",
    "persist_interval",
    "clock",
    "rng",
    "credentials",
]
PRODUCER_KEYWORDS = [
    "send_timeout",
    "retry_times",
    "retry_times_when_send_async_failed",
    "async_send_max_inflight",
    "async_send_max_bytes",
    "compress_over",
    "compress_level",
    "max_message_size",
    "send_latency_fault_enable",
    "retry_another_broker_when_not_store_ok",
    "poll_namesrv_interval",
    "heartbeat_interval",
    "api_timeout",
    "create_topic_key",
    "default_topic_queue_nums",
    "client_ip",
    "instance_name",
    "clock",
    "rng",
    "failover",
    "credentials",
]
PUBLIC_NAMES = [
    "AllocateMessageQueueAveragely",
    "AllocateMessageQueueAveragelyByCircle",
    "AllocateMessageQueueByConfig",
    "AllocateMessageQueueConsistentHash",
    "AsyncBackPressureError",
    "ConsumeConcurrentlyContext",
    "ConsumeConcurrentlyStatus",
    "ConsumeFromWhere",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "Credentials",
    "FailoverSettings",
    "LitePullConsumer",
    "LocalTransactionState",
    "MQBrokerError",
    "MQClientError",
    "MQConnectError",
    "MasterMovedError",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "MessageSelector",
    "Producer",
    "PushConsumer",
    "SendCallback",
    "SendFailedError",
    "SendResult",
    "SendStatus",
    "TransactionProducer",
    "TransactionSendResult",
]


def _accepted(facade: type, settings_cls: type) -> set[str]:
    params = set(inspect.signature(facade.__init__).parameters) - {"self", "options"}
    return params | {f.name for f in dataclasses.fields(settings_cls)}


@pytest.mark.parametrize(
    ("facade", "settings_cls", "keywords"),
    [
        (PushConsumer, PushSettings, PUSH_KEYWORDS),
        (LitePullConsumer, LitePullSettings, LITE_KEYWORDS),
        (Producer, ProducerSettings, PRODUCER_KEYWORDS),
    ],
    ids=["push", "lite_pull", "producer"],
)
def test_every_former_keyword_argument_is_still_taken(facade: type, settings_cls: type, keywords: list[str]) -> None:
    missing = set(keywords) - _accepted(facade, settings_cls)
    assert not missing, f"{facade.__name__} no longer takes {sorted(missing)}"


def test_the_shared_settings_are_defined_once_for_both_consumers() -> None:
    shared = {f.name for f in dataclasses.fields(ConsumerSettings)}
    assert {"group", "message_model", "allocate_strategy", "pull_batch_size", "credentials"} <= shared
    assert issubclass(PushSettings, ConsumerSettings) and issubclass(LitePullSettings, ConsumerSettings)


def test_the_package_exports_what_it_always_did() -> None:
    assert set(PUBLIC_NAMES) <= set(ledgermq.client.__all__)
    assert all(hasattr(ledgermq.client, name) for name in PUBLIC_NAMES)


def test_keyword_arguments_land_in_the_settings_and_the_clock_is_a_collaborator() -> None:
    clock = ManualClock()
    push = PushConsumer(
        " cg ", NS, pull_batch_size=16, message_model=MessageModel.BROADCASTING, client_ip="10.0.0.9", clock=clock
    )
    assert push.settings.group == "cg"  # blanks around a push consumer's group are dropped, as before
    assert (push.settings.pull_batch_size, push.message_model, push.settings.client_ip) == (
        16,
        MessageModel.BROADCASTING,
        "10.0.0.9",
    )
    assert push.clock is clock
    lite = LitePullConsumer("cg", NS, pull_time_delay_millis_when_exception=2500, client_ip="10.0.0.9")
    assert lite.settings.pull_time_delay_when_exception == 2.5
    assert lite.settings.pull_batch_size == 10 and push.settings.consume_message_batch_max_size == 1  # own defaults


def test_settings_given_whole_and_never_mixed_with_keywords() -> None:
    settings = PushSettings(group="cg", namesrv_addrs=NS, client_ip="10.0.0.9", pull_batch_size=8)
    assert PushConsumer(settings=settings).settings is settings
    with pytest.raises(TypeError):
        PushConsumer(settings=settings, pull_batch_size=4)
    with pytest.raises(TypeError):
        PushConsumer("cg", NS, no_such_option=1)
    with pytest.raises(TypeError):
        LitePullConsumer(namesrv_addrs=NS)


def test_settings_are_checked_when_made_and_frozen_after() -> None:
    with pytest.raises(MQClientError, match="consume_thread_min"):
        PushSettings(group="cg", namesrv_addrs=NS, consume_thread_min=0)
    with pytest.raises(MQClientError, match="illegal characters"):
        LitePullSettings(group="c g", namesrv_addrs=NS)
    with pytest.raises(ValueError, match="pull_batch_size"):
        LitePullSettings(group="cg", namesrv_addrs=NS, pull_batch_size=0)
    with pytest.raises(MQClientError, match="retry_times"):
        ProducerSettings(group="pg", namesrv_addrs=NS, retry_times=-1)
    settings = PushSettings(group="cg", namesrv_addrs=NS)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.pull_batch_size = 1  # type: ignore[misc]
    with pytest.raises(MQClientError, match="pull_batch_size"):
        settings.replace(pull_batch_size=5000)  # a copy is checked again
    assert settings.replace(group="cg2").group == "cg2"


def test_a_producer_takes_its_settings_object_too() -> None:
    async def main() -> Any:
        settings = ProducerSettings(group="pg", namesrv_addrs=NS, client_ip="10.0.0.9", send_timeout=7.0)
        producer = Producer(settings=settings)
        try:
            return producer.settings, producer.send_timeout, producer.client_ip
        finally:
            await producer.shutdown()

    settings, timeout, ip = asyncio.run(main())
    assert (settings.send_timeout, timeout, ip) == (7.0, 7.0, "10.0.0.9")
