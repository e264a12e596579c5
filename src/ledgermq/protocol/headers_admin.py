"""Headers of the broker's admin requests (mqadmin and the dashboard): topics, subscription
groups, consume stats, connections, offset resets, CONSUME_MESSAGE_DIRECTLY, stats items and
the DLedger leadership transfer. Names as RocketMQ 4.9's header classes; where the broker has
always been more lenient than Java's @CFNotNull (CreateTopicRequestHeader's defaultTopic and
order, which it does not use) or read a number as a long where Java has an Integer, it stays so.
"""

from __future__ import annotations

from ledgermq.protocol.header_codec import (
    RequestHeader,
    ResponseHeader,
    boolean,
    int64,
    request_header,
    response_header,
    text,
)

DEFAULT_TRANSFER_TIMEOUT_MS = 5000


@request_header
class CreateTopicRequestHeader(RequestHeader):
    topic: str = text("topic")
    read_queue_nums: int = int64("readQueueNums")
    write_queue_nums: int = int64("writeQueueNums")
    perm: int = int64("perm")
    topic_filter_type: str | None = text("topicFilterType", absent=None)
    topic_sys_flag: int = int64("topicSysFlag", absent=0)
    default_topic: str | None = text("defaultTopic", absent=None)
    order: bool = boolean("order")  # not stored, as in 4.9.7: order topics are a name-server KV matter


@request_header
class TopicRequestHeader(RequestHeader):
    """DeleteTopicRequestHeader, GetTopicStatsInfoRequestHeader and
    QueryTopicConsumeByWhoRequestHeader: the topic alone."""

    topic: str = text("topic")


DeleteTopicRequestHeader = TopicRequestHeader
GetTopicStatsInfoRequestHeader = TopicRequestHeader
QueryTopicConsumeByWhoRequestHeader = TopicRequestHeader


@request_header
class DeleteSubscriptionGroupRequestHeader(RequestHeader):
    group_name: str = text("groupName")
    remove_offset: bool = boolean("removeOffset")


@request_header
class GetConsumeStatsRequestHeader(RequestHeader):
    consumer_group: str = text("consumerGroup")
    topic: str = text("topic", absent="")


@request_header
class GetConsumerConnectionListRequestHeader(RequestHeader):
    consumer_group: str = text("consumerGroup")


@request_header
class GetProducerConnectionListRequestHeader(RequestHeader):
    producer_group: str = text("producerGroup")


@request_header
class ResetOffsetRequestHeader(RequestHeader):
    """INVOKE_BROKER_TO_RESET_OFFSET's header, and RESET_CONSUMER_CLIENT_OFFSET's as the broker
    tells each consumer of the group."""

    topic: str = text("topic")
    group: str = text("group")
    timestamp: int = int64("timestamp")
    is_force: bool = boolean("isForce")


@request_header
class ConsumeMessageDirectlyResultRequestHeader(RequestHeader):
    """What an admin tool sends and the broker forwards to the consumer, with its brokerName."""

    consumer_group: str = text("consumerGroup")
    client_id: str = text("clientId")
    msg_id: str = text("msgId")
    broker_name: str | None = text("brokerName", absent=None)


@request_header
class ViewBrokerStatsDataRequestHeader(RequestHeader):
    stats_name: str = text("statsName")
    stats_key: str = text("statsKey")


@response_header
class GetBrokerConfigResponseHeader(ResponseHeader):
    version: str = text("version")


@request_header
class TransferLeaderRequestHeader(RequestHeader):
    """Ours (RocketMQ's DLedger has its own protocol): the peer to hand leadership to and how
    long to wait for it."""

    target: str = text("target", absent="")
    timeout_millis: int = int64("timeoutMillis", absent=DEFAULT_TRANSFER_TIMEOUT_MS)
