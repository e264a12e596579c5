"""PULL_MESSAGE with long polling (RocketMQ ``PullMessageProcessor``).

Status mapping from the store's GetStatus to the response code, and the subscription
rules for clients that send their subscription (C++: SUBSCRIPTION flag) or rely on the
one from their heartbeat (Java) are as RocketMQ 4.9.7 has them; see docs/formats.md §3.2.
"""

from __future__ import annotations

from ledgermq.broker.consumer_filters import compile_subscription
from ledgermq.broker.context import Broker
from ledgermq.broker.heartbeat_data import SubscriptionData
from ledgermq.filter import FilterSyntaxError, SqlExpression
from ledgermq.net.server import RequestContext
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.headers_pull import PullMessageRequestHeader, PullMessageResponseHeader
from ledgermq.protocol.route import PERM_READ, TopicConfig
from ledgermq.store.message_filter import MessageFilter, PropertyFilter, TagFilter
from ledgermq.store.results import GetResult, GetStatus

FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
MASTER_ID = 0

_STATUS = {
    GetStatus.FOUND: ResponseCode.SUCCESS,
    GetStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
    # The next message is in a commit-log range known corrupt: an error the client logs
    # (with the CorruptRangeError text as remark) and retries later, after a replica's
    # bytes repaired the range; never an empty answer that would move its offset on.
    GetStatus.CORRUPT_RANGE: ResponseCode.SYSTEM_ERROR,
}


def _code_for(result: GetResult, offset: int) -> int:
    if result.status in (GetStatus.NO_MATCHED_LOGIC_QUEUE, GetStatus.NO_MESSAGE_IN_QUEUE):
        return ResponseCode.PULL_OFFSET_MOVED if offset != 0 else ResponseCode.PULL_NOT_FOUND
    return _STATUS[result.status]


def _subscription(
    broker: Broker, cmd: RemotingCommand, hdr: PullMessageRequestHeader
) -> tuple[SubscriptionData, SqlExpression | None] | RemotingCommand:
    """The pull's subscription and, for a property filter, its compiled expression; or the
    refusal. Order and codes are RocketMQ 4.9's ``PullMessageProcessor``."""
    group, topic = hdr.consumer_group, hdr.topic
    if hdr.sys_flag & FLAG_SUBSCRIPTION:
        sub = SubscriptionData.build(topic, hdr.subscription, hdr.sub_version, hdr.expression_type or "TAG")
        if sub.is_tag_type:
            return sub, None
        try:
            return sub, compile_subscription(sub.sub_string, sub.expression_type)
        except FilterSyntaxError as exc:
            return cmd.response(
                ResponseCode.SUBSCRIPTION_PARSE_FAILED, f"parse the consumer's subscription failed: {exc}"
            )
    info = broker.consumers.groups.get(group)
    if info is None:
        return cmd.response(ResponseCode.SUBSCRIPTION_NOT_EXIST, f"the consumer's group info not exist, {group}")
    found = info.subscriptions.get(topic)
    if found is None:
        return cmd.response(ResponseCode.SUBSCRIPTION_NOT_EXIST, f"the consumer's subscription not exist, {topic}")
    version = hdr.sub_version
    if found.sub_version < version:
        return cmd.response(ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest")
    if found.is_tag_type:
        return found, None
    data = broker.filters.get(topic, group)
    if data is None:
        return cmd.response(
            ResponseCode.FILTER_DATA_NOT_EXIST,
            f"The broker's consumer filter data is not exist!Your expression may be wrong! ({found.expression_type} "
            f"{found.sub_string!r} of {group} did not compile; see the broker log)",
        )
    if data.client_version < version:
        return cmd.response(ResponseCode.FILTER_DATA_NOT_LATEST, "the consumer's consumer filter data not latest")
    return found, data.compiled


def _replicated_topic(broker: Broker, topic: str) -> TopicConfig | None:
    """A slave serves a topic whose messages it has replicated before its metadata sync has
    brought the topic's config (RocketMQ answers TOPIC_NOT_EXIST there, and the C++ client
    then retries without pause); the read queues are the consume queues it holds."""
    queue_ids = [qid for (t, qid) in broker.store.queues.queues if t == topic]
    if not queue_ids:
        return None
    count = max(queue_ids) + 1
    return TopicConfig(topic, count, count, PERM_READ)


async def pull_message(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    return await _pull(broker, ctx, cmd, None, allow_suspend=True)


async def _hold(
    broker: Broker,
    topic: str,
    queue_id: int,
    offset: int,
    timeout: float,
    by_properties: PropertyFilter | None,
    max_msgs: int,
) -> int:
    """Hold a pull until a message arrives or ``timeout`` passes; the offset to answer from.

    With a property filter, a held pull wakes only for a message it matches, as RocketMQ's
    PullRequestHoldService checks the filter against each arrival: arrivals that do not
    match move the offset on and the pull keeps waiting (and when it times out, its answer
    carries the moved offset)."""
    clock = broker.clock
    deadline = clock.monotonic() + timeout
    while True:
        arrived = await broker.pull_hold.wait(
            topic,
            queue_id,
            offset,
            max(0.0, deadline - clock.monotonic()),
            current_max=lambda: broker.store.max_offset_in_queue(topic, queue_id),
        )
        if not arrived or by_properties is None:
            return offset
        result = broker.store.get_message(topic, queue_id, offset, max_msgs, by_properties)
        if result.status is not GetStatus.NO_MATCHED_MESSAGE or clock.monotonic() >= deadline:
            return offset
        offset = result.next_begin_offset


async def _pull(
    broker: Broker,
    ctx: RequestContext,
    cmd: RemotingCommand,
    hdr: PullMessageRequestHeader | None,
    allow_suspend: bool,
    offset: int | None = None,
) -> RemotingCommand:
    if not broker.readable:
        return cmd.response(
            ResponseCode.NO_PERMISSION,
            f"the broker[{broker.config.broker_addr}] pulling message is forbidden",
        )
    if hdr is None:  # decoded after the permission check, as the broker always answered
        hdr = PullMessageRequestHeader.decode(cmd)
    group, topic, queue_id = hdr.consumer_group, hdr.topic, hdr.queue_id
    if offset is None:  # else a held pull that moved past non-matching messages
        offset = hdr.queue_offset
    max_msgs, sys_flag = hdr.max_msg_nums, hdr.sys_flag
    group_cfg = broker.subscriptions.find(group)
    if group_cfg is None:
        return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{group}] does not exist")
    if not group_cfg.consume_enable:
        return cmd.response(ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}")
    tc = broker.topics.get(topic)
    if tc is None and broker.store_config.is_slave:
        tc = _replicated_topic(broker, topic)
    if tc is None:
        return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
    if not tc.perm & PERM_READ:
        return cmd.response(ResponseCode.NO_PERMISSION, f"the topic[{topic}] pulling message is forbidden")
    if queue_id < 0 or queue_id >= tc.read_queue_nums:
        return cmd.response(
            ResponseCode.SYSTEM_ERROR,
            f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:[{tc.read_queue_nums}]",
        )
    found = _subscription(broker, cmd, hdr)
    if isinstance(found, RemotingCommand):
        return found
    sub, compiled = found
    message_filter: MessageFilter | None
    if compiled is not None:
        if not broker.config.enable_property_filter:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR,
                f"The broker does not support consumer to filter message by {sub.expression_type} "
                "(set enablePropertyFilter=true in the broker's config)",
            )
        verdict = None
        if broker.filter_cache is not None:
            broker.filter_cache.watch(topic, compiled)
            verdict = broker.filter_cache.verdict_of(topic, queue_id, compiled)
        message_filter = PropertyFilter(compiled.matches, compiled.names, verdict)
    else:
        message_filter = None if sub.matches_all else TagFilter(sub.tags)
    result = broker.store.get_message(topic, queue_id, offset, max_msgs, message_filter)
    code = _code_for(result, offset)
    if allow_suspend and sys_flag & FLAG_COMMIT_OFFSET and broker.config.is_master:
        # Committed on the first pass, held or not, as RocketMQ does: a caught-up consumer's
        # pulls are nearly all held, and its progress must still be recorded.
        commit = hdr.commit_offset
        if commit >= 0:
            broker.offsets.commit(group, topic, queue_id, commit)
    if code == ResponseCode.PULL_NOT_FOUND and allow_suspend and sys_flag & FLAG_SUSPEND:
        timeout_ms = (
            hdr.suspend_timeout_millis if broker.config.long_polling_enable else (broker.config.short_polling_time_ms)
        )
        by_properties = message_filter if isinstance(message_filter, PropertyFilter) else None
        ctx.park()
        try:
            offset = await _hold(broker, topic, queue_id, offset, max(0, timeout_ms) / 1000, by_properties, max_msgs)
        finally:
            ctx.unpark()
        return await _pull(broker, ctx, cmd, hdr, allow_suspend=False, offset=offset)
    suggest = group_cfg.which_broker_when_consume_slowly if result.suggest_pulling_from_slave else MASTER_ID
    ext = PullMessageResponseHeader(suggest, result.next_begin_offset, result.min_offset, result.max_offset).ext()
    body = result.body() if code == ResponseCode.SUCCESS else b""
    broker.stats.count_get(topic, group, result.message_count if body else 0, len(body))
    remark = None if code == ResponseCode.SUCCESS else (result.remark or result.status.value)
    return cmd.response(code, remark, ext, body)


PROCESSORS = {RequestCode.PULL_MESSAGE: pull_message}
