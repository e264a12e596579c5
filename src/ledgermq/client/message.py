"""What a producer sends and what it gets back (RocketMQ ``Message``, ``SendResult``).

A ``Message`` carries its user properties in ``properties``; ``tags``, ``keys``,
``delay_level`` and ``wait_store_msg_ok`` become the well-known properties TAGS, KEYS,
DELAY and WAIT when the message is encoded, in the order the Java client writes them
(TAGS, KEYS, WAIT, then user properties; UNIQ_KEY is added at send time).

A timer message (docs/timers.md) names its time with ``deliver_at`` (an aware datetime,
or seconds since the epoch), sent as TIMER_DELIVER_MS, or ``delay`` (a timedelta or
seconds from now), sent as TIMER_DELAY_MS; as RocketMQ 5's ``setDeliverTimeMs`` and
``setDelayTimeMs``. At most one of them, and not with ``delay_level``.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ledgermq.client.errors import MessageInvalidError
from ledgermq.protocol import properties as P
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.names import NOT_ALLOWED_SEND_TOPICS as NOT_ALLOWED_SEND_TOPICS
from ledgermq.protocol.names import TOPIC_MAX_LENGTH as TOPIC_MAX_LENGTH
from ledgermq.protocol.names import TOPIC_NAME_PATTERN

__all__ = [
    "Message",
    "MessageQueue",
    "SendResult",
    "SendStatus",
    "validate_message",
    "validate_message_fields",
    "validate_topic",
]

DEFAULT_REGION = "DefaultRegion"


@dataclass(slots=True)
class Message:
    topic: str
    body: bytes
    tags: str | None = None
    keys: str | Sequence[str] | None = None
    properties: dict[str, str] = field(default_factory=dict)
    delay_level: int = 0
    flag: int = 0
    wait_store_msg_ok: bool = True
    deliver_at: datetime | float | None = None  # a timer: when (aware datetime, or epoch seconds)
    delay: timedelta | float | None = None  # a timer: how long from now (timedelta, or seconds)

    @property
    def key_list(self) -> list[str]:
        if self.keys is None:
            return []
        if isinstance(self.keys, str):
            return [k for k in self.keys.split(P.KEY_SEPARATOR) if k]
        return [k for k in self.keys if k]

    def wire_properties(self) -> dict[str, str]:
        """All properties as the broker stores them (without UNIQ_KEY unless the user set it)."""
        props: dict[str, str] = {}
        if self.tags:
            props[P.TAGS] = self.tags
        keys = self.key_list
        if keys:
            props[P.KEYS] = P.KEY_SEPARATOR.join(keys)
        props[P.WAIT] = "true" if self.wait_store_msg_ok else "false"
        if self.delay_level > 0:
            props[P.DELAY] = str(self.delay_level)
        timer = self.timer_property()
        if timer is not None:
            props[timer[0]] = timer[1]
        for k, v in self.properties.items():
            if k and v:
                props[k] = v
        return props

    def timer_property(self) -> tuple[str, str] | None:
        """The timer property ``deliver_at`` or ``delay`` stands for, or None."""
        if self.deliver_at is not None:
            at = self.deliver_at
            if isinstance(at, datetime):
                if at.tzinfo is None:
                    raise MessageInvalidError("deliver_at must be an aware datetime (with a time zone)")
                at = at.timestamp()
            return P.TIMER_DELIVER_MS, str(round(at * 1000))
        if self.delay is not None:
            seconds = self.delay.total_seconds() if isinstance(self.delay, timedelta) else self.delay
            return P.TIMER_DELAY_MS, str(round(seconds * 1000))
        return None


class SendStatus(enum.Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


# Response code -> status, for the four codes a send answer may carry (MQClientAPIImpl.processSendResponse).
STATUS_BY_CODE = {
    0: SendStatus.SEND_OK,
    10: SendStatus.FLUSH_DISK_TIMEOUT,
    12: SendStatus.FLUSH_SLAVE_TIMEOUT,
    11: SendStatus.SLAVE_NOT_AVAILABLE,
}


@dataclass(frozen=True, slots=True)
class SendResult:
    """``msg_id`` is the client's UNIQ_KEY (comma-joined for a batch); ``offset_msg_id`` the
    broker's offset id(s)."""

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    region_id: str = DEFAULT_REGION
    trace_on: bool = True
    transaction_id: str | None = None


def validate_topic(topic: str) -> None:
    """``Validators.checkTopic`` + ``isNotAllowedSendTopic``."""
    problem = _topic_problem(topic)
    if problem is not None:
        raise MessageInvalidError(problem)


@functools.lru_cache(maxsize=1024)
def _topic_problem(topic: str) -> str | None:
    """What is wrong with ``topic``, or None; remembered, as a producer sends to a few
    topics over and over (the pattern match is most of a message's validation)."""
    if not topic or not topic.strip():
        return "the topic is blank"
    if len(topic) > TOPIC_MAX_LENGTH:
        return f"the topic is longer than {TOPIC_MAX_LENGTH} characters"
    if not TOPIC_NAME_PATTERN.fullmatch(topic):
        return f"the topic {topic!r} has illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    if topic in NOT_ALLOWED_SEND_TOPICS:
        return f"sending to the system topic {topic} is forbidden"
    return None


def check_property_text(what: str, text: str) -> None:
    """Refuse a text the property encoding would split (it holds a separator)."""
    if P.NAME_VALUE_SEPARATOR in text or P.PROPERTY_SEPARATOR in text:
        raise MessageInvalidError(f"{what} {text!r} contains a 0x01 or 0x02 character")


def validate_message(msg: Message, max_message_size: int) -> None:
    """``Validators.checkMessage``, plus what the property encoding cannot carry."""
    validate_topic(msg.topic)
    validate_message_fields(msg, max_message_size)


def validate_message_fields(msg: Message, max_message_size: int) -> None:
    """``validate_message`` but the topic: for a batch's messages, whose one topic is
    checked once."""
    if not isinstance(msg.body, bytes | bytearray | memoryview):
        raise MessageInvalidError(f"the message body must be bytes, not {type(msg.body).__name__}")
    if len(msg.body) == 0:
        raise MessageInvalidError("the message body length is zero")
    if len(msg.body) > max_message_size:
        raise MessageInvalidError(f"the message body is {len(msg.body)} bytes, over the maximum {max_message_size}")
    if msg.delay_level < 0:
        raise MessageInvalidError(f"the delay level {msg.delay_level} is negative")
    if msg.deliver_at is not None or msg.delay is not None:
        _check_timer(msg)
    if not -(2**31) <= msg.flag < 2**31:
        raise MessageInvalidError(f"the flag {msg.flag} is not a 32-bit integer")
    if msg.tags:
        check_property_text("the tags", msg.tags)
    for key in msg.key_list:
        check_property_text("the key", key)
    for k, v in msg.properties.items():
        check_property_text("the property name", k)
        check_property_text("the property value", v)


def _check_timer(msg: Message) -> None:
    """One way to say when, and a time a broker can take: RocketMQ would store a second
    kind of delay silently ignored, so a conflict is refused here."""
    if msg.deliver_at is not None and msg.delay is not None:
        raise MessageInvalidError("set deliver_at or delay, not both")
    if msg.delay_level > 0:
        raise MessageInvalidError("a timer (deliver_at / delay) cannot also have a delay_level")
    if any(k in msg.properties for k in (P.TIMER_DELIVER_MS, P.TIMER_DELAY_MS, P.TIMER_DELAY_SEC)):
        raise MessageInvalidError("deliver_at / delay conflict with a TIMER_* property set by hand")
    timer = msg.timer_property()
    if timer is not None and timer[0] == P.TIMER_DELAY_MS and int(timer[1]) < 0:
        raise MessageInvalidError(f"the delay {msg.delay} is negative")
