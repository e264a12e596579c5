"""PULL_MESSAGE with long polling (RocketMQ ``PullMessageProcessor``).

Status mapping from the store's GetStatus to the response code, and the subscription
rules for clients that send their subscription (C++: SUBSCRIPTION flag) or rely on the
one from their heartbeat (Java) are as RocketMQ 4.9.7 has them; see docs/formats.md §3.2.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledgermq.broker.consumer_filters import compile_subscription
from ledgermq.broker.context import Broker
from ledgermq.broker.heartbeat_data import SubscriptionData
from ledgermq.broker.subscriptions import SubscriptionGroupConfig
from ledgermq.filter import FilterSyntaxError, SqlExpression
from ledgermq.net.server import RequestContext
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.headers_pull import (
    FLAG_COMMIT_OFFSET,
    FLAG_SUBSCRIPTION,
    FLAG_SUSPEND,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
)
from ledgermq.protocol.route import PERM_READ, TopicConfig
from ledgermq.protocol.tag_expression import TagExpressionError
from ledgermq.store.message_filter import MessageFilter, PropertyFilter, TagFilter
from ledgermq.store.results import GetResult, GetStatus

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
    # The next message is not readable *now* (a DLedger member re-recovering its log, or
    # refilling what a repair cut): the client backs off and pulls the same offset again.
    GetStatus.STORE_UNAVAILABLE: ResponseCode.SYSTEM_BUSY,
}


def _code_for(result: GetResult, offset: int) -> int:
    if result.status in (GetStatus.NO_MATCHED_LOGIC_QUEUE, GetStatus.NO_MESSAGE_IN_QUEUE):
        return ResponseCode.PULL_OFFSET_MOVED if offset != 0 else ResponseCode.PULL_NOT_FOUND
    return _STATUS[result.status]


def _subscription(
    broker: Broker, cmd: RemotingCommand, hdr: PullMessageRequestHeader, group_cfg: SubscriptionGroupConfig
) -> tuple[SubscriptionData, SqlExpression | None] | RemotingCommand:
    """The pull's subscription and, for a property filter, its compiled expression; or the
    refusal. Order and codes are RocketMQ 4.9's ``PullMessageProcessor``: a pull with the
    SUBSCRIPTION flag carries its own; one without it (Java's default) is served with the
    subscription the group's heartbeat registered, and refused while that is missing or
    older than the version the pull names."""
    group, topic = hdr.consumer_group, hdr.topic
    if hdr.sys_flag & FLAG_SUBSCRIPTION:
        try:
            sub = SubscriptionData.build(topic, hdr.subscription, hdr.sub_version, hdr.expression_type or "TAG")
            return sub, None if sub.is_tag_type else compile_subscription(sub.sub_string, sub.expression_type)
        except (TagExpressionError, FilterSyntaxError) as exc:
            return cmd.response(
                ResponseCode.SUBSCRIPTION_PARSE_FAILED, f"parse the consumer's subscription failed: {exc}"
            )
    info = broker.consumers.groups.get(group)
    if info is None:
        return cmd.response(ResponseCode.SUBSCRIPTION_NOT_EXIST, f"the consumer's group info not exist, {group}")
    if not group_cfg.consume_broadcast_enable and info.message_model == "BROADCASTING":
        return cmd.response(ResponseCode.NO_PERMISSION, f"the consumer group[{group}] can not consume by broadcast way")
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


@dataclass(frozen=True, slots=True)
class _Plan:
    """What a pull reads, decided once before the first read (and kept for a held pull)."""

    group: str
    topic: str
    queue_id: int
    max_msgs: int
    message_filter: MessageFilter | None
    group_cfg: SubscriptionGroupConfig
    subscription: SubscriptionData


class _Reader:
    """The one read of a pull, first and on every wake-up of its hold. A pull that relies on
    its group's heartbeat (no SUBSCRIPTION flag) reads with the subscription the group holds
    now, as RocketMQ re-runs the whole request on a wake-up: when a heartbeat replaced it
    while the pull was held, the pull is planned again and read from its own offset (what
    the old filter skipped may match the new one)."""

    def __init__(self, broker: Broker, cmd: RemotingCommand, hdr: PullMessageRequestHeader, plan: _Plan) -> None:
        self.broker, self.cmd, self.hdr, self.plan = broker, cmd, hdr, plan

    def __call__(self, offset: int) -> tuple[int, GetResult]:
        plan, hdr = self.plan, self.hdr
        by_heartbeat = not hdr.sys_flag & FLAG_SUBSCRIPTION
        if by_heartbeat and self.broker.consumers.subscription(plan.group, plan.topic) is not plan.subscription:
            fresh = _plan(self.broker, self.cmd, hdr)
            if isinstance(fresh, _Plan):  # else (the group left meanwhile) the old plan answers
                self.plan = plan = fresh
                offset = hdr.queue_offset
        result = self.broker.store.get_message(plan.topic, plan.queue_id, offset, plan.max_msgs, plan.message_filter)
        return offset, result


async def pull_message(broker: Broker, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    """Read once; a pull that found nothing and may be suspended is handed to the long-polling
    service, which reads again (through ``read``) each time its queue grows, and whose last
    read is the answer: the store is never read twice for one outcome."""
    if not broker.readable:
        return cmd.response(
            ResponseCode.NO_PERMISSION,
            f"the broker[{broker.config.broker_addr}] pulling message is forbidden",
        )
    hdr = PullMessageRequestHeader.decode(cmd)  # after the permission check, as the broker always answered
    plan = _plan(broker, cmd, hdr)
    if isinstance(plan, RemotingCommand):
        return plan

    read = _Reader(broker, cmd, hdr, plan)
    offset, result = read(hdr.queue_offset)
    if hdr.sys_flag & FLAG_COMMIT_OFFSET and broker.config.is_master and hdr.commit_offset >= 0:
        # Committed on the first pass, held or not, as RocketMQ does: a caught-up consumer's
        # pulls are nearly all held, and its progress must still be recorded.
        broker.offsets.commit(plan.group, plan.topic, plan.queue_id, hdr.commit_offset)
    if _code_for(result, offset) == ResponseCode.PULL_NOT_FOUND and hdr.sys_flag & FLAG_SUSPEND:
        config = broker.config
        timeout_ms = hdr.suspend_timeout_millis if config.long_polling_enable else config.short_polling_time_ms
        ctx.park()
        try:
            offset, result = await broker.pull_hold.hold(
                plan.topic,
                plan.queue_id,
                offset,
                max(0, timeout_ms) / 1000,
                read=read,
                current_max=lambda: broker.store.max_offset_in_queue(plan.topic, plan.queue_id),
                clock=broker.clock,
            )
        finally:
            ctx.unpark()
    return _answer(broker, cmd, read.plan, result, offset)


def _plan(broker: Broker, cmd: RemotingCommand, hdr: PullMessageRequestHeader) -> _Plan | RemotingCommand:
    """The checks of RocketMQ's ``PullMessageProcessor`` before its read, in its order."""
    group, topic, queue_id = hdr.consumer_group, hdr.topic, hdr.queue_id
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
    found = _subscription(broker, cmd, hdr, group_cfg)
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
        message_filter = None if sub.matches_all else TagFilter.by_codes(sub.codes)
    return _Plan(group, topic, queue_id, hdr.max_msg_nums, message_filter, group_cfg, sub)


def _answer(broker: Broker, cmd: RemotingCommand, plan: _Plan, result: GetResult, offset: int) -> RemotingCommand:
    code = _code_for(result, offset)
    suggest = plan.group_cfg.which_broker_when_consume_slowly if result.suggest_pulling_from_slave else MASTER_ID
    ext = PullMessageResponseHeader(suggest, result.next_begin_offset, result.min_offset, result.max_offset).ext()
    body = result.body() if code == ResponseCode.SUCCESS else b""
    broker.stats.count_get(plan.topic, plan.group, result.message_count if body else 0, len(body))
    remark = None if code == ResponseCode.SUCCESS else (result.remark or result.status.value)
    return cmd.response(code, remark, ext, body)


PROCESSORS = {RequestCode.PULL_MESSAGE: pull_message}
