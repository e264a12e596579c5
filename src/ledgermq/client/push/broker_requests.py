"""What brokers ask of a push consumer, mostly on behalf of admin tools
(``ClientRemotingProcessor`` and ``DefaultMQPushConsumerImpl.consumerRunningInfo``): its
running info with per-topic pull and consume rates, its offsets of a topic, an offset
reset, and consuming one message directly.

Answers go out under Java's names, which the admin tools (ours and Java's) read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from ledgermq.client.consumer.common import ConsumeType
from ledgermq.client.consumer.offset_store import OffsetStore
from ledgermq.client.consumer.rebalance import RebalanceImpl
from ledgermq.client.instance.client_instance import ClientInstance
from ledgermq.protocol import fastjson
from ledgermq.protocol.admin_body import MessageQueue, decode_mq_table, loads_lenient, mq_table
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.message import decode_records

if TYPE_CHECKING:
    from ledgermq.client.push.consumer import PushConsumer

__all__ = ["CLIENT_VERSION", "ConsumerStats", "handle_broker_request", "reset_offset", "running_info"]

# the consumer's logger: a failed reset is the consumer's to report
log = logging.getLogger("ledgermq.client.push.consumer")

CLIENT_VERSION = "V4_9_7"


class ConsumerStats:
    """Per-topic pull and consume rates over the last minute (``ConsumerStatsManager``, coarse)."""

    WINDOW = 60.0

    def __init__(self) -> None:
        self._events: dict[str, deque[tuple[float, str, float]]] = {}
        self.failed_total: dict[str, int] = {}

    def _add(self, topic: str, kind: str, value: float) -> None:
        q = self._events.setdefault(topic, deque())
        now = time.monotonic()
        q.append((now, kind, value))
        while q and now - q[0][0] > self.WINDOW:
            q.popleft()

    def pulled(self, topic: str, rt_ms: float, count: int) -> None:
        self._add(topic, "pullRT", rt_ms)
        self._add(topic, "pullTPS", count)

    def consumed(self, topic: str, ok: int, failed: int) -> None:
        if ok:
            self._add(topic, "consumeOKTPS", ok)
        if failed:
            self._add(topic, "consumeFailedTPS", failed)
            self.failed_total[topic] = self.failed_total.get(topic, 0) + failed

    def status(self, topic: str) -> dict[str, Any]:
        now = time.monotonic()
        events = [e for e in self._events.get(topic, ()) if now - e[0] <= self.WINDOW]
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        for _, kind, value in events:
            sums[kind] = sums.get(kind, 0.0) + value
            counts[kind] = counts.get(kind, 0) + 1
        return {
            "consumeFailedMsgs": self.failed_total.get(topic, 0),
            "consumeFailedTPS": sums.get("consumeFailedTPS", 0.0) / self.WINDOW,
            "consumeOKTPS": sums.get("consumeOKTPS", 0.0) / self.WINDOW,
            "consumeRT": 0.0,
            "pullRT": sums.get("pullRT", 0.0) / counts["pullRT"] if counts.get("pullRT") else 0.0,
            "pullTPS": sums.get("pullTPS", 0.0) / self.WINDOW,
        }


def running_info(
    consumer: PushConsumer,
    start_ms: int,
    instance: ClientInstance | None,
    offset_store: OffsetStore | None,
    rebalance: RebalanceImpl | None,
) -> dict[str, Any]:
    """``ConsumerRunningInfo``; the parts that exist only while started are given, None
    before start or after shutdown."""
    props = {
        "PROP_CLIENT_VERSION": CLIENT_VERSION,
        "PROP_CONSUMEORDERLY": str(consumer.orderly).lower(),
        "PROP_CONSUMER_START_TIMESTAMP": str(start_ms),
        "PROP_CONSUME_TYPE": ConsumeType.CONSUME_PASSIVELY.value,
        "PROP_NAMESERVER_ADDR": ";".join(instance.namesrv_addrs) if instance else "",
        "PROP_THREADPOOL_CORE_SIZE": str(consumer.consume_thread_min),
        "consumerGroup": consumer.group,
        "messageModel": consumer.message_model.value,
        "consumeFromWhere": consumer.consume_from_where.value,
        "consumeThreadMin": str(consumer.consume_thread_min),
        "consumeThreadMax": str(consumer.consume_thread_max),
        "pullThresholdForQueue": str(consumer.pull_threshold_for_queue),
        "pullThresholdSizeForQueue": str(consumer.pull_threshold_size_for_queue),
        "pullBatchSize": str(consumer.pull_batch_size),
        "consumeMessageBatchMaxSize": str(consumer.consume_message_batch_max_size),
        "maxReconsumeTimes": str(consumer.max_reconsume_times),
        "allocateMessageQueueStrategy": consumer.allocate_strategy.name,
    }
    mq_info: dict[MessageQueue, Any] = {}
    offsets = offset_store.clone_offset_table() if offset_store is not None else {}
    if rebalance is not None:
        for mq, pq in rebalance.process_queue_table.items():
            info = pq.info()
            info["commitOffset"] = offsets.get(mq, -1)
            mq_info[mq] = info
    subscriptions = consumer.subscriptions
    return {
        "jstack": "",
        "mqTable": mq_table(mq_info),
        "properties": props,
        "statusTable": {topic: consumer.stats.status(topic) for topic in sorted(subscriptions)},
        "subscriptionSet": [s.to_json() for s in sorted(subscriptions.values(), key=lambda s: s.topic)],
    }


async def handle_broker_request(consumer: PushConsumer, cmd: RemotingCommand) -> RemotingCommand | None:
    """The answer to a broker's request, None for a request a push consumer does not serve."""
    if cmd.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
        topic = str(cmd.ext_fields.get("topic") or "")
        table: dict[MessageQueue, int] = {}
        if cmd.body:
            doc = loads_lenient(cmd.body)
            raw = doc.get("offsetTable") if isinstance(doc, dict) else None
            if raw is not None:
                table = {mq: int(v) for mq, v in decode_mq_table(raw).items()}
        await consumer.reset_offset(topic, table)
        return cmd.response(ResponseCode.SUCCESS)
    if cmd.code == RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT:
        topic = str(cmd.ext_fields.get("topic") or "")
        offsets = consumer.offset_store.clone_offset_table(topic)
        body = fastjson.dumps({"consumerTable": {}, "messageQueueTable": mq_table(offsets)})
        return cmd.response(ResponseCode.SUCCESS, body=body)
    if cmd.code == RequestCode.CONSUME_MESSAGE_DIRECTLY:
        records = decode_records(cmd.body, inflate=True) if cmd.body else []
        if not records:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "no message in the request body")
        broker_name = str(cmd.ext_fields.get("brokerName") or "")
        records[0].broker_name = broker_name
        result = await consumer.consume_service.consume_directly(records[0], broker_name)
        return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(result))
    return None


async def reset_offset(consumer: PushConsumer, topic: str, offsets: dict[MessageQueue, int]) -> None:
    """``MQClientInstance.resetOffset``: pause, drop and empty the queues concerned, wait for
    running listeners, set the new offsets, resume; the next rebalance takes the queues up
    again from the new offsets."""
    rebalance = consumer.rebalance_impl
    consumer.suspend()
    try:
        for mq, pq in list(rebalance.process_queue_table.items()):
            if mq.topic == topic and mq in offsets:
                pq.dropped = True
                pq.clear()
        await asyncio.sleep(consumer.reset_offset_wait)
        for mq, pq in list(rebalance.process_queue_table.items()):
            offset = offsets.get(mq)
            if mq.topic != topic or offset is None:
                continue
            try:
                consumer.offset_store.update_offset(mq, offset, increase_only=False)
                await rebalance.remove_unnecessary_message_queue(mq, pq, consumer.orderly)
                if rebalance.process_queue_table.get(mq) is pq:
                    del rebalance.process_queue_table[mq]
            except Exception:
                log.warning("group %s: resetting the offset of %s failed", consumer.group, mq, exc_info=True)
        log.info("group %s: offsets of %s reset: %s", consumer.group, topic, {str(k): v for k, v in offsets.items()})
    finally:
        consumer.paused = False
    await consumer.do_rebalance()
