"""Headers of the consume path: PULL_MESSAGE, the queue and message lookups (max/min offset,
offset by time, earliest store time, VIEW_MESSAGE_BY_ID, QUERY_MESSAGE) and the consumer's own
requests (UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP, QUERY/UPDATE_CONSUMER_OFFSET), with
their response headers. Names, Java types and @CFNotNull as RocketMQ 4.9's header classes;
PullMessageRequestHeader's commitOffset, suspendTimeoutMillis and subVersion are primitives
there, so they are required even when a pull does not use them.
"""

from __future__ import annotations

from ledgermq.protocol.header_codec import (
    RequestHeader,
    ResponseHeader,
    int32,
    int64,
    request_header,
    response_header,
    text,
)

UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"  # MixAll.UNIQUE_MSG_QUERY_FLAG

# PullMessageRequestHeader.sysFlag bits (RocketMQ ``PullSysFlag``)
FLAG_COMMIT_OFFSET = 0x1  # record commitOffset as the group's offset in passing (masters only)
FLAG_SUSPEND = 0x2  # the broker may hold a pull that finds nothing (long polling)
FLAG_SUBSCRIPTION = 0x4  # the pull carries its subscription; else the heartbeat's is used
FLAG_CLASS_FILTER = 0x8
FLAG_LITE_PULL_MESSAGE = 0x10


@request_header
class PullMessageRequestHeader(RequestHeader):
    consumer_group: str = text("consumerGroup")
    topic: str = text("topic")
    queue_id: int = int32("queueId")
    queue_offset: int = int64("queueOffset")
    max_msg_nums: int = int32("maxMsgNums")
    sys_flag: int = int32("sysFlag")
    commit_offset: int = int64("commitOffset")
    suspend_timeout_millis: int = int64("suspendTimeoutMillis")
    sub_version: int = int64("subVersion")
    subscription: str | None = text("subscription", absent=None)
    expression_type: str | None = text("expressionType", absent=None)


@response_header
class PullMessageResponseHeader(ResponseHeader):
    suggest_which_broker_id: int = int64("suggestWhichBrokerId")
    next_begin_offset: int = int64("nextBeginOffset")
    min_offset: int = int64("minOffset")
    max_offset: int = int64("maxOffset")


@request_header
class QueueRequestHeader(RequestHeader):
    """GetMaxOffsetRequestHeader, GetMinOffsetRequestHeader and
    GetEarliestMsgStoretimeRequestHeader: the same two fields."""

    topic: str = text("topic")
    queue_id: int = int32("queueId")


GetMaxOffsetRequestHeader = QueueRequestHeader
GetMinOffsetRequestHeader = QueueRequestHeader
GetEarliestMsgStoretimeRequestHeader = QueueRequestHeader


@request_header
class SearchOffsetRequestHeader(RequestHeader):
    topic: str = text("topic")
    queue_id: int = int32("queueId")
    timestamp: int = int64("timestamp")


@response_header
class OffsetResponseHeader(ResponseHeader):
    """GetMaxOffset-, GetMinOffset-, SearchOffset- and QueryConsumerOffsetResponseHeader."""

    offset: int = int64("offset")


@response_header
class GetEarliestMsgStoretimeResponseHeader(ResponseHeader):
    timestamp: int = int64("timestamp")


@request_header
class ViewMessageRequestHeader(RequestHeader):
    offset: int = int64("offset")


@request_header
class QueryMessageRequestHeader(RequestHeader):
    topic: str = text("topic")
    key: str = text("key")
    max_num: int = int32("maxNum")
    unique_key_query: str | None = text(UNIQUE_KEY_QUERY, absent=None)
    begin_timestamp: int = int64("beginTimestamp")
    end_timestamp: int = int64("endTimestamp")

    @property
    def by_unique_key(self) -> bool:
        """Java compares the flag with "true" exactly (not Boolean.parseBoolean)."""
        return self.unique_key_query == "true"


@response_header
class QueryMessageResponseHeader(ResponseHeader):
    index_last_update_timestamp: int = int64("indexLastUpdateTimestamp")
    index_last_update_phyoffset: int = int64("indexLastUpdatePhyoffset")


@request_header
class UnregisterClientRequestHeader(RequestHeader):
    """clientID is @CFNotNull in Java but never read by the broker; we do not insist on it
    (our client sends it, for Java's broker)."""

    client_id: str | None = text("clientID", absent=None)
    producer_group: str | None = text("producerGroup", absent=None)
    consumer_group: str | None = text("consumerGroup", absent=None)


@request_header
class GetConsumerListByGroupRequestHeader(RequestHeader):
    consumer_group: str = text("consumerGroup")


@request_header
class QueryConsumerOffsetRequestHeader(RequestHeader):
    consumer_group: str = text("consumerGroup")
    topic: str = text("topic")
    queue_id: int = int32("queueId")


@request_header
class UpdateConsumerOffsetRequestHeader(RequestHeader):
    consumer_group: str = text("consumerGroup")
    topic: str = text("topic")
    queue_id: int = int32("queueId")
    commit_offset: int = int64("commitOffset")
