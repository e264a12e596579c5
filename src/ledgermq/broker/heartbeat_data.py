"""HEART_BEAT bodies from Java and C++ clients, parsed into one shape.

Java writes enum names and numeric subVersion; the C++ client writes enum ordinals,
a string subVersion, omits empty sets and sends a wrong ``codeSet`` (atoi of each tag).
So tag codes are always recomputed here from ``tagsSet`` with Java's String.hashCode.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ledgermq.errors import RemoteProtocolError
from ledgermq.filter import is_tag_type
from ledgermq.protocol import fastjson
from ledgermq.protocol.javahash import tag_hash
from ledgermq.protocol.tag_expression import SUB_ALL, TagExpressionError, parse_tag_expression

CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")
MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
CONSUME_FROM = {
    0: "CONSUME_FROM_LAST_OFFSET",
    1: "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    2: "CONSUME_FROM_MIN_OFFSET",
    3: "CONSUME_FROM_MAX_OFFSET",
    4: "CONSUME_FROM_FIRST_OFFSET",
    5: "CONSUME_FROM_TIMESTAMP",
}


def _enum(value: Any, names: tuple[str, ...] | dict[int, str], default: str) -> str:
    table = dict(enumerate(names)) if isinstance(names, tuple) else names
    if isinstance(value, int) and not isinstance(value, bool):
        return table.get(value, default)
    if isinstance(value, str) and value.isdigit():
        return table.get(int(value), default)
    return str(value) if value else default


@dataclass(slots=True)
class SubscriptionData:
    topic: str
    sub_string: str = SUB_ALL
    tags: list[str] = field(default_factory=list)
    codes: frozenset[int] = frozenset()
    sub_version: int = 0
    expression_type: str = "TAG"

    @classmethod
    def build(
        cls, topic: str, expression: str | None, sub_version: int = 0, expr_type: str = "TAG"
    ) -> SubscriptionData:
        if not is_tag_type(expr_type):
            # A property expression (SQL92): kept verbatim, no tags (FilterAPI.build).
            return cls(topic, (expression or "").strip(), [], frozenset(), sub_version, expr_type)
        parsed = parse_tag_expression(expression)  # TagExpressionError if RocketMQ refuses it
        return cls(topic, parsed.text, list(parsed.tags), parsed.codes, sub_version, "TAG")

    @classmethod
    def from_tags(cls, topic: str, expression: str, tags: list[str], sub_version: int) -> SubscriptionData:
        """A heartbeat's subscription kept as its client parsed it (``tagsSet``), when its
        text is one RocketMQ's parser refuses (Java's broker never re-parses a heartbeat)."""
        return cls(topic, expression, tags, frozenset(tag_hash(t) for t in tags), sub_version, "TAG")

    @property
    def is_tag_type(self) -> bool:
        return is_tag_type(self.expression_type)

    @property
    def matches_all(self) -> bool:
        """RocketMQ's broker: only the text ``*`` selects everything; a text that names no
        tag selects nothing (``protocol/tag_expression.py``)."""
        return self.is_tag_type and self.sub_string == SUB_ALL

    def to_json(self) -> dict[str, Any]:
        return {
            "classFilterMode": False,
            "codeSet": sorted(self.codes),
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": self.tags,
            "topic": self.topic,
        }


@dataclass(slots=True)
class ConsumerData:
    group: str
    consume_type: str
    message_model: str
    consume_from_where: str
    subscriptions: list[SubscriptionData]
    unit_mode: bool = False


@dataclass(slots=True)
class HeartbeatData:
    client_id: str
    producer_groups: list[str]
    consumers: list[ConsumerData]


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _subscription(doc: dict[str, Any]) -> SubscriptionData:
    tags = [str(t) for t in doc.get("tagsSet") or []]
    expr = str(doc.get("subString") or (" || ".join(tags) if tags else SUB_ALL))
    topic, version = str(doc["topic"]), _int(doc.get("subVersion"))
    try:
        return SubscriptionData.build(topic, expr, version, str(doc.get("expressionType") or "TAG"))
    except TagExpressionError:
        return SubscriptionData.from_tags(topic, expr, tags, version)


def parse_heartbeat(body: bytes) -> HeartbeatData:
    try:
        doc = fastjson.loads(body)
        client_id = str(doc["clientID"])
        producers = [str(p["groupName"]) for p in doc.get("producerDataSet") or []]
        consumers = []
        for c in doc.get("consumerDataSet") or []:
            subs = []
            for s in c.get("subscriptionDataSet") or []:
                subs.append(_subscription(s))
            consumers.append(
                ConsumerData(
                    group=str(c["groupName"]),
                    consume_type=_enum(c.get("consumeType"), CONSUME_TYPES, "CONSUME_PASSIVELY"),
                    message_model=_enum(c.get("messageModel"), MESSAGE_MODELS, "CLUSTERING"),
                    consume_from_where=_enum(c.get("consumeFromWhere"), CONSUME_FROM, "CONSUME_FROM_LAST_OFFSET"),
                    subscriptions=subs,
                    unit_mode=bool(c.get("unitMode", False)),
                )
            )
    except (KeyError, TypeError, AttributeError) as exc:
        raise RemoteProtocolError(f"heartbeat body does not decode: {exc!r}") from exc
    return HeartbeatData(client_id, producers, consumers)
