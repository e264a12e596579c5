"""Names, enums and subscription data every consumer shares (RocketMQ 4.9.7
``MessageModel``, ``ConsumeType``, ``ConsumeFromWhere``, ``SubscriptionData``,
``FilterAPI`` and the heartbeat's ``ConsumerData``).

Everything a consumer reports to a broker goes out under Java's field and enum names,
because the broker (ours or Java's) and the admin tools read them that way.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ledgermq.client.errors import MQClientError
from ledgermq.clock import SYSTEM_CLOCK
from ledgermq.filter import EXPRESSION_TYPE_SQL92, EXPRESSION_TYPE_TAG, FilterSyntaxError, compile_expression
from ledgermq.protocol.javahash import tag_hash
from ledgermq.protocol.names import GROUP_MAX_LENGTH, GROUP_NAME_PATTERN
from ledgermq.protocol.tag_expression import TagExpressionError, check_subscribable

__all__ = [
    "DEFAULT_CONSUMER_GROUP",
    "DLQ_GROUP_TOPIC_PREFIX",
    "PULL_DELAY_WHEN_BROKER_FLOW_CONTROL",
    "RETRY_GROUP_TOPIC_PREFIX",
    "SUB_ALL",
    "ConsumeFromWhere",
    "ConsumeType",
    "MessageModel",
    "MessageSelector",
    "SubscriptionData",
    "consumer_data",
    "default_consume_timestamp",
    "dlq_topic",
    "format_consume_timestamp",
    "is_retry_topic",
    "parse_consume_timestamp",
    "retry_topic",
    "selector_of",
]

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
SUB_ALL = "*"
DEFAULT_CONSUMER_GROUP = "DEFAULT_CONSUMER"


def check_group(group: str) -> None:
    """``Validators.checkGroup`` plus the DEFAULT_CONSUMER refusal of ``checkConfig``: both
    consumers refuse the same names, as Java's do."""
    if not group or not group.strip():
        raise MQClientError("the consumer group is blank")
    if len(group) > GROUP_MAX_LENGTH:
        raise MQClientError(f"the consumer group is longer than {GROUP_MAX_LENGTH} characters")
    if not GROUP_NAME_PATTERN.fullmatch(group):
        raise MQClientError(f"the consumer group {group!r} has illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$")
    if group == DEFAULT_CONSUMER_GROUP:
        raise MQClientError(f"the consumer group can not be {DEFAULT_CONSUMER_GROUP}; name another one")


"""``MixAll.DEFAULT_CONSUMER_GROUP``: the group Java gives a consumer nobody named. Consumers
refuse it, since unrelated applications left on it would share one group's offsets."""
PULL_DELAY_WHEN_BROKER_FLOW_CONTROL = 0.02
"""Seconds a consumer waits after a broker answered a pull with FLOW_CONTROL (both Java
consumers' ``PULL_TIME_DELAY_MILLS_WHEN_BROKER_FLOW_CONTROL``)."""
_TIMESTAMP_FORMAT = "%Y%m%d%H%M%S"


def retry_topic(group: str) -> str:
    """``MixAll.getRetryTopic``."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    """``MixAll.getDLQTopic``."""
    return DLQ_GROUP_TOPIC_PREFIX + group


def is_retry_topic(topic: str) -> bool:
    return topic.startswith(RETRY_GROUP_TOPIC_PREFIX)


class MessageModel(enum.Enum):
    """Every member of a group gets all messages (BROADCASTING) or a share (CLUSTERING)."""

    BROADCASTING = "BROADCASTING"
    CLUSTERING = "CLUSTERING"


class ConsumeType(enum.Enum):
    """Pull consumers consume ACTIVELY, push consumers PASSIVELY."""

    CONSUME_ACTIVELY = "CONSUME_ACTIVELY"
    CONSUME_PASSIVELY = "CONSUME_PASSIVELY"


class ConsumeFromWhere(enum.Enum):
    """Where a group starts on a queue it has never committed an offset for.

    The three deprecated Java values behave as CONSUME_FROM_LAST_OFFSET.
    """

    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST = "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST"
    CONSUME_FROM_MIN_OFFSET = "CONSUME_FROM_MIN_OFFSET"
    CONSUME_FROM_MAX_OFFSET = "CONSUME_FROM_MAX_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


def parse_consume_timestamp(text: str) -> int:
    """A ``yyyyMMddHHmmss`` timestamp (local time, as Java's ``UtilAll.parseDate``) in epoch ms."""
    try:
        return int(datetime.strptime(text.strip(), _TIMESTAMP_FORMAT).timestamp() * 1000)
    except ValueError as exc:
        raise ValueError(f"consume timestamp {text!r} is not yyyyMMddHHmmss") from exc


def format_consume_timestamp(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000).strftime(_TIMESTAMP_FORMAT)


def default_consume_timestamp(now_ms: int) -> str:
    """Java's default ``consumeTimestamp``: half an hour before ``now_ms``."""
    return format_consume_timestamp(now_ms - 30 * 60 * 1000)


def check_property_expression(expression: str, expression_type: str) -> None:
    """Refuse locally what every broker would refuse: an unknown expression type, an empty
    expression (``FilterAPI.build``: "Expression can't be null!"), or one the SQL92 parser
    rejects. The error names the problem and its position."""
    if expression_type != EXPRESSION_TYPE_SQL92:
        raise MQClientError(f"expression type {expression_type!r} is not supported: use TAG or SQL92")
    if not expression:
        raise MQClientError(f"Expression can't be null! {expression_type}")
    try:
        compile_expression(expression)
    except FilterSyntaxError as exc:
        raise MQClientError(f"the {expression_type} expression {expression!r} is invalid: {exc}") from exc


@dataclass(frozen=True, slots=True)
class MessageSelector:
    """Java's ``MessageSelector``: what a consumer selects, by tag or by SQL92 expression
    over the message properties (``subscribe(topic, MessageSelector.by_sql("a > 5"))``)."""

    expression: str
    expression_type: str = EXPRESSION_TYPE_TAG

    @classmethod
    def by_tag(cls, expression: str = SUB_ALL) -> MessageSelector:
        return cls(expression, EXPRESSION_TYPE_TAG)

    @classmethod
    def by_sql(cls, expression: str) -> MessageSelector:
        return cls(expression, EXPRESSION_TYPE_SQL92)


def selector_of(expression: str | MessageSelector, expression_type: str) -> tuple[str, str]:
    """(expression, type) from a subscribe call that passed a string or a MessageSelector."""
    if isinstance(expression, MessageSelector):
        return expression.expression, expression.expression_type
    return expression, expression_type


@dataclass(slots=True)
class SubscriptionData:
    """One topic's subscription (``FilterAPI.buildSubscriptionData``).

    ``sub_version`` is a wall-clock ms stamp; a broker refuses pulls whose version is newer
    than the one it holds from our heartbeat, so it changes only together with a heartbeat.
    """

    topic: str
    sub_string: str = SUB_ALL
    tags_set: list[str] = field(default_factory=list)
    code_set: list[int] = field(default_factory=list)
    sub_version: int = 0
    expression_type: str = "TAG"
    class_filter_mode: bool = False

    @classmethod
    def build(
        cls,
        topic: str,
        expression: str | None = SUB_ALL,
        *,
        expression_type: str = "TAG",
        sub_version: int | None = None,
    ) -> SubscriptionData:
        # the consumers give their clock's time; the system clock only for a caller of its own
        version = SYSTEM_CLOCK.wall_ms() if sub_version is None else sub_version
        expr = (expression or "").strip()
        kind = (expression_type or EXPRESSION_TYPE_TAG).upper()
        if kind != EXPRESSION_TYPE_TAG:
            check_property_expression(expr, kind)
            return cls(topic, expr, [], [], version, kind)
        try:  # RocketMQ's reading, refusing what would select other than meant
            tags = check_subscribable(expression)
        except TagExpressionError as exc:
            raise MQClientError(str(exc)) from None
        return cls(topic, tags.text, list(tags.tags), [tag_hash(t) for t in tags.tags], version)

    @property
    def matches_all(self) -> bool:
        return self.expression_type == "TAG" and (self.sub_string == SUB_ALL or not self.tags_set)

    def matches_tag(self, tag: str | None) -> bool:
        """The client-side tag check (``PullAPIWrapper.processPullResult``)."""
        if self.expression_type != "TAG" or self.matches_all:
            return True
        return tag is not None and tag in self.tags_set

    def to_json(self) -> dict[str, Any]:
        return {
            "classFilterMode": self.class_filter_mode,
            "codeSet": list(self.code_set),
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": list(self.tags_set),
            "topic": self.topic,
        }


def consumer_data(
    group: str,
    consume_type: ConsumeType,
    message_model: MessageModel,
    consume_from_where: ConsumeFromWhere,
    subscriptions: Iterable[SubscriptionData],
    *,
    unit_mode: bool = False,
) -> dict[str, Any]:
    """A heartbeat's ``consumerDataSet`` entry (Java ``ConsumerData``)."""
    return {
        "consumeFromWhere": consume_from_where.value,
        "consumeType": consume_type.value,
        "groupName": group,
        "messageModel": message_model.value,
        "subscriptionDataSet": [s.to_json() for s in subscriptions],
        "unitMode": unit_mode,
    }
