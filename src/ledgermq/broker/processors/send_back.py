"""CONSUMER_SEND_MSG_BACK: a consumer hands back a message it failed to consume
(RocketMQ 4.9.7 ``SendMessageProcessor.asyncConsumerSendMsgBack``).

Header: ``offset`` (commit-log offset of the consumed message), ``group``, ``delayLevel``,
optional ``originMsgId``, ``originTopic``, ``unitMode``, ``maxReconsumeTimes``.

The broker copies the stored message (body as stored, flag, sysflag, properties, born
time and hosts, store host) into ``%RETRY%<group>`` (a random one of the group's
retryQueueNums queues, topic created on demand with perm RW) with:

* ``RETRY_TOPIC`` = the original topic, unless already set (a message retried again);
* ``ORIGIN_MESSAGE_ID`` = the original's offset message id, unless already set;
* reconsumeTimes + 1; ``WAIT=false`` (the put does not wait for a flush);
* ``DELAY`` = delayLevel, or 3 + reconsumeTimes when delayLevel is 0. The store then
  files the copy under SCHEDULE_TOPIC_XXXX (queue level - 1) with REAL_TOPIC/REAL_QID.

When the original's reconsumeTimes >= maxReconsumeTimes (header, else the group's
retryMaxTimes) or delayLevel < 0, the copy goes to ``%DLQ%<group>`` (1 queue, perm RW)
with ``DELAY=0`` instead. A group with retryQueueNums <= 0 gets SUCCESS and nothing is
written.

The copy is written through ``Broker.put``: into the store natively, proposed to the
Raft group in DLedger mode (where only the leader accepts it; a follower answers
SYSTEM_ERROR and the client sends the retry itself, to the master). The schedule
service later moves a delayed copy to the retry topic.
"""

from __future__ import annotations

import random

from ledgermq.broker.context import Broker
from ledgermq.broker.topics import DLQ_PREFIX, RETRY_PREFIX
from ledgermq.net.server import RequestContext
from ledgermq.protocol import properties as P
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.headers_send import ConsumerSendMsgBackRequestHeader
from ledgermq.protocol.message import decode_record
from ledgermq.protocol.route import PERM_WRITE
from ledgermq.store.message_input import MessageInput
from ledgermq.store.results import PutStatus

DLQ_NUMS_PER_GROUP = 1
RETRY_BASE_DELAY_LEVEL = 3


async def consumer_send_msg_back(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    hdr = ConsumerSendMsgBackRequestHeader.decode(cmd)
    group, offset, delay_level = hdr.group, hdr.offset, hdr.delay_level
    group_cfg = broker.subscriptions.find(group)
    if group_cfg is None:
        return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}")
    if not broker.config.broker_permission & PERM_WRITE:
        return cmd.response(
            ResponseCode.NO_PERMISSION, f"the broker[{broker.config.broker_ip1}] sending message is forbidden"
        )
    if group_cfg.retry_queue_nums <= 0:
        return cmd.response(ResponseCode.SUCCESS)

    topic = RETRY_PREFIX + group
    queue_id = random.randrange(group_cfg.retry_queue_nums)
    tc = broker.topics.create_retry_topic(topic, group_cfg.retry_queue_nums)
    if not tc.perm & PERM_WRITE:
        return cmd.response(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
    raw = broker.store.look_message_by_offset(offset)
    if raw is None:
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {offset}")
    original = decode_record(raw)

    props = dict(original.properties)
    props.setdefault(P.RETRY_TOPIC, original.topic)
    props[P.WAIT] = "false"
    max_times = group_cfg.retry_max_times if hdr.max_reconsume_times is None else hdr.max_reconsume_times
    if original.reconsume_times >= max_times or delay_level < 0:
        topic = DLQ_PREFIX + group
        queue_id = random.randrange(DLQ_NUMS_PER_GROUP)
        broker.topics.create_retry_topic(topic, DLQ_NUMS_PER_GROUP)
        props[P.DELAY] = "0"
    else:
        props[P.DELAY] = str(delay_level or RETRY_BASE_DELAY_LEVEL + original.reconsume_times)
    if not props.get(P.ORIGIN_MESSAGE_ID, "").strip():
        props[P.ORIGIN_MESSAGE_ID] = original.offset_msg_id

    result = await broker.put(
        MessageInput(
            topic=topic,
            body=original.body,
            queue_id=queue_id,
            flag=original.flag,
            properties=props,
            sysflag=original.sysflag,
            born_timestamp=original.born_timestamp,
            born_host=original.born_host,
            store_host=original.store_host,
            reconsume_times=original.reconsume_times + 1,
            wait_store_ok=False,
        )
    )
    if result.status is not PutStatus.PUT_OK:
        return cmd.response(ResponseCode.SYSTEM_ERROR, result.status.value)
    return cmd.response(ResponseCode.SUCCESS)


PROCESSORS = {RequestCode.CONSUMER_SEND_MSG_BACK: consumer_send_msg_back}
