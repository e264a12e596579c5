"""What brokers ask of a push consumer, mostly on behalf of admin tools
(``ClientRemotingProcessor`` and ``DefaultMQPushConsumerImpl.consumerRunningInfo``): its
running info with per-topic pull and consume rates, its offsets of a topic, an offset
reset, and consuming one message directly.

Answers go out under Java's names, which the admin tools (ours and Java's) read.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ledgermq.client.consumer.common import ConsumeType
from ledgermq.client.consumer.parts import ConsumerParts
from ledgermq.client.push.consume_service import ConsumeMessageService
from ledgermq.client.push.state import PushState
from ledgermq.protocol import fastjson
from ledgermq.protocol.admin_body import MessageQueue, decode_mq_table, loads_lenient, mq_table
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.message import decode_records

__all__ = ["CLIENT_VERSION", "handle_broker_request", "reset_offset", "running_info"]

# the consumer's logger: a failed reset is the consumer's to report
log = logging.getLogger("ledgermq.client.push.consumer")

CLIENT_VERSION = "V4_9_7"


def running_info(state: PushState, parts: ConsumerParts | None) -> dict[str, Any]:
    """``ConsumerRunningInfo``; ``parts`` exist only while started, None before start or
    after shutdown. The pull thresholds are the per-queue ones in force (a share of the
    topic-wide ones when those are set)."""
    settings = state.settings
    instance = parts.instance if parts is not None else None
    props = {
        "PROP_CLIENT_VERSION": CLIENT_VERSION,
        "PROP_CONSUMEORDERLY": str(state.orderly).lower(),
        "PROP_CONSUMER_START_TIMESTAMP": str(state.start_ms),
        "PROP_CONSUME_TYPE": ConsumeType.CONSUME_PASSIVELY.value,
        "PROP_NAMESERVER_ADDR": ";".join(instance.namesrv_addrs) if instance else "",
        "PROP_THREADPOOL_CORE_SIZE": str(settings.consume_thread_min),
        "consumerGroup": settings.group,
        "messageModel": settings.message_model.value,
        "consumeFromWhere": settings.consume_from_where.value,
        "consumeThreadMin": str(settings.consume_thread_min),
        "consumeThreadMax": str(settings.consume_thread_max),
        "pullThresholdForQueue": str(state.queue_threshold_count),
        "pullThresholdSizeForQueue": str(state.queue_threshold_mib),
        "pullBatchSize": str(settings.pull_batch_size),
        "consumeMessageBatchMaxSize": str(settings.consume_message_batch_max_size),
        "maxReconsumeTimes": str(settings.max_reconsume_times),
        "allocateMessageQueueStrategy": settings.allocate_strategy.name,
    }
    mq_info: dict[MessageQueue, Any] = {}
    offsets = parts.offset_store.clone_offset_table() if parts is not None else {}
    if parts is not None:
        for mq, pq in parts.rebalance.process_queue_table.items():
            info = pq.info()
            info["commitOffset"] = offsets.get(mq, -1)
            mq_info[mq] = info
    subscriptions = state.subscriptions
    return {
        "jstack": "",
        "mqTable": mq_table(mq_info),
        "properties": props,
        "statusTable": {topic: state.stats.status(topic) for topic in sorted(subscriptions)},
        "subscriptionSet": [s.to_json() for s in sorted(subscriptions.values(), key=lambda s: s.topic)],
    }


async def handle_broker_request(
    cmd: RemotingCommand,
    parts: ConsumerParts,
    service: ConsumeMessageService,
    reset: Callable[[str, dict[MessageQueue, int]], Awaitable[None]],
) -> RemotingCommand | None:
    """The answer to a broker's request, None for a request a push consumer does not serve;
    ``reset`` is the consumer's offset reset (public, so the application may call it too)."""
    if cmd.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
        topic = str(cmd.ext_fields.get("topic") or "")
        table: dict[MessageQueue, int] = {}
        if cmd.body:
            doc = loads_lenient(cmd.body)
            raw = doc.get("offsetTable") if isinstance(doc, dict) else None
            if raw is not None:
                table = {mq: int(v) for mq, v in decode_mq_table(raw).items()}
        await reset(topic, table)
        return cmd.response(ResponseCode.SUCCESS)
    if cmd.code == RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT:
        topic = str(cmd.ext_fields.get("topic") or "")
        offsets = parts.offset_store.clone_offset_table(topic)
        body = fastjson.dumps({"consumerTable": {}, "messageQueueTable": mq_table(offsets)})
        return cmd.response(ResponseCode.SUCCESS, body=body)
    if cmd.code == RequestCode.CONSUME_MESSAGE_DIRECTLY:
        records = decode_records(cmd.body, inflate=True) if cmd.body else []
        if not records:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "no message in the request body")
        broker_name = str(cmd.ext_fields.get("brokerName") or "")
        records[0].broker_name = broker_name
        result = await service.consume_directly(records[0], broker_name)
        return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(result))
    return None


async def reset_offset(
    state: PushState,
    parts: ConsumerParts,
    topic: str,
    offsets: dict[MessageQueue, int],
    rebalance_again: Callable[[], Awaitable[None]],
) -> None:
    """``MQClientInstance.resetOffset``: pause, drop and empty the queues concerned, wait for
    running listeners, set the new offsets, resume; the next rebalance takes the queues up
    again from the new offsets."""
    rebalance = parts.rebalance
    state.paused = True
    try:
        for mq, pq in list(rebalance.process_queue_table.items()):
            if mq.topic == topic and mq in offsets:
                pq.dropped = True
                pq.clear()
        await asyncio.sleep(state.settings.reset_offset_wait)
        for mq, pq in list(rebalance.process_queue_table.items()):
            offset = offsets.get(mq)
            if mq.topic != topic or offset is None:
                continue
            try:
                parts.offset_store.update_offset(mq, offset, increase_only=False)
                await rebalance.remove_unnecessary_message_queue(mq, pq, state.orderly)
                if rebalance.process_queue_table.get(mq) is pq:
                    del rebalance.process_queue_table[mq]
            except Exception:
                log.warning("group %s: resetting the offset of %s failed", state.group, mq, exc_info=True)
        log.info("group %s: offsets of %s reset: %s", state.group, topic, {str(k): v for k, v in offsets.items()})
    finally:
        state.paused = False
    await rebalance_again()
