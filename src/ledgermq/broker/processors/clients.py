"""Client lifecycle and offsets: HEART_BEAT, UNREGISTER_CLIENT, CHECK_CLIENT_CONFIG,
GET_CONSUMER_LIST_BY_GROUP, QUERY_CONSUMER_OFFSET, UPDATE_CONSUMER_OFFSET.

None of them waits, so each is answered where its frame is read (a plain function, no
task): a request answered from a task holds one of its connection's in-flight slots into a
later loop turn, and a producer whose async sends fill the rest of them (its budget is the
broker's per-connection limit) then had a send refused SYSTEM_BUSY because its heartbeat
came in the same read (tests/broker/test_flush_failures.py)."""

from __future__ import annotations

from ledgermq.broker.clients import ClientChannel
from ledgermq.broker.consumer_filters import compile_subscription
from ledgermq.broker.context import Broker
from ledgermq.broker.heartbeat_data import SubscriptionData, parse_heartbeat
from ledgermq.broker.topics import RETRY_PREFIX
from ledgermq.errors import RemoteProtocolError
from ledgermq.filter import FilterSyntaxError, is_tag_type
from ledgermq.net.server import RequestContext
from ledgermq.protocol import fastjson
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.headers_pull import (
    GetConsumerListByGroupRequestHeader,
    OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)


def heartbeat(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    data = parse_heartbeat(cmd.body)
    channel = ClientChannel(data.client_id, ctx.connection, cmd.language, cmd.version, broker.clock.wall_ms())
    for consumer in data.consumers:
        group_cfg = broker.subscriptions.find(consumer.group)
        if group_cfg is not None:
            broker.topics.create_retry_topic(RETRY_PREFIX + consumer.group, group_cfg.retry_queue_nums)
        broker.consumers.register(consumer, channel)
        # Java registers SQL92 filters on every heartbeat, whether or not the broker filters
        # by properties: a heartbeat is never refused; the pulls and CHECK_CLIENT_CONFIG are.
        broker.filters.register(consumer.group, consumer.subscriptions, broker.clock.wall_ms())
    for group in data.producer_groups:
        broker.producers.register(group, channel)
    return cmd.response(ResponseCode.SUCCESS)


def unregister_client(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    hdr = UnregisterClientRequestHeader.decode(cmd)
    producer_group, consumer_group = hdr.producer_group, hdr.consumer_group
    if producer_group:
        broker.producers.unregister(producer_group, ctx.connection)
    if consumer_group:
        broker.consumers.unregister(consumer_group, ctx.connection)
    return cmd.response(ResponseCode.SUCCESS)


def check_client_config(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    """What a consumer asks at start for each non-TAG subscription (RocketMQ's
    ``ClientManageProcessor.checkClientConfig``): can this broker filter with it?"""
    if not cmd.body:
        return cmd.response(ResponseCode.SUCCESS)
    try:
        doc = fastjson.loads(cmd.body)
        raw = doc.get("subscriptionData") if isinstance(doc, dict) else None
        if raw is None:
            return cmd.response(ResponseCode.SUCCESS)
        kind = str(raw.get("expressionType") or "TAG")
        if is_tag_type(kind):  # a tag subscription needs nothing of the broker
            return cmd.response(ResponseCode.SUCCESS)
        sub = SubscriptionData.build(str(raw["topic"]), raw.get("subString"), 0, kind)
    except (RemoteProtocolError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise RemoteProtocolError(f"CHECK_CLIENT_CONFIG body does not decode: {exc}") from exc
    if not broker.config.enable_property_filter:
        return cmd.response(
            ResponseCode.SYSTEM_ERROR,
            f"The broker does not support consumer to filter message by {sub.expression_type} "
            "(set enablePropertyFilter=true in the broker's config)",
        )
    try:
        compile_subscription(sub.sub_string, sub.expression_type)
    except FilterSyntaxError as exc:
        return cmd.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc))
    return cmd.response(ResponseCode.SUCCESS)


def consumer_list(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    group = GetConsumerListByGroupRequestHeader.decode(cmd).consumer_group
    info = broker.consumers.groups.get(group)
    if info is None or not info.channels:
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
    return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps({"consumerIdList": info.client_ids()}))


def query_consumer_offset(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    hdr = QueryConsumerOffsetRequestHeader.decode(cmd)
    group, topic, queue_id = hdr.consumer_group, hdr.topic, hdr.queue_id
    offset = broker.offsets.query(group, topic, queue_id)
    if offset >= 0:
        return cmd.response(ResponseCode.SUCCESS, ext_fields=OffsetResponseHeader(offset).ext())
    min_offset = broker.store.min_offset_in_queue(topic, queue_id)
    if min_offset <= 0 and not _in_disk(broker, topic, queue_id, 0):
        return cmd.response(ResponseCode.SUCCESS, ext_fields=OffsetResponseHeader(0).ext())
    return cmd.response(ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")


def _in_disk(broker: Broker, topic: str, queue_id: int, offset: int) -> bool:
    """RocketMQ's checkInDiskByConsumeOffset: is that message outside the hot page cache?
    A queue with no message there has nothing on disk (false), as in Java."""
    if broker.store.max_offset_in_queue(topic, queue_id) <= offset:
        return False
    phy = broker.store.commitlog_offset_in_queue(topic, queue_id, offset)
    return broker.store.max_phy_offset - phy > broker.store.memory_budget


def update_consumer_offset(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    hdr = UpdateConsumerOffsetRequestHeader.decode(cmd)
    broker.offsets.commit(hdr.consumer_group, hdr.topic, hdr.queue_id, hdr.commit_offset)
    return cmd.response(ResponseCode.SUCCESS)


PROCESSORS = {
    RequestCode.HEART_BEAT: heartbeat,
    RequestCode.UNREGISTER_CLIENT: unregister_client,
    RequestCode.CHECK_CLIENT_CONFIG: check_client_config,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: consumer_list,
    RequestCode.QUERY_CONSUMER_OFFSET: query_consumer_offset,
    RequestCode.UPDATE_CONSUMER_OFFSET: update_consumer_offset,
}
