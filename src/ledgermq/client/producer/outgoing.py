"""Messages made ready for the wire, once per send (``sendKernelImpl``'s preparation, 4.9.7).

A send may take several attempts on several brokers, and every attempt must carry the
same bytes: the same UNIQ_KEY (the ``msg_id`` the caller is given), the same compressed
body, the same property text. So the message is validated, given its id, compressed and
encoded here, before the first attempt, and an ``Outgoing`` is what the attempts reuse.
Building it also snapshots the message: later changes to the caller's ``Message`` do not
leak into an async send that is still in flight.

Pure: no I/O, no event loop; the id generator and the clock are passed in.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ledgermq.client.errors import MessageInvalidError
from ledgermq.client.message import (
    Message,
    check_property_text,
    validate_message,
    validate_message_fields,
    validate_topic,
)
from ledgermq.clock import Clock
from ledgermq.errors import LocalProtocolError
from ledgermq.protocol import properties as P
from ledgermq.protocol import sysflag as SF
from ledgermq.protocol.batch import encode_entries
from ledgermq.protocol.message import MAX_PROPERTIES_BYTES
from ledgermq.util.unique_ids import UniqueIdGenerator

MAX_MESSAGE_SIZE = 4 * 1024 * 1024
COMPRESS_OVER = 4096
COMPRESS_LEVEL = 5
RETRY_PREFIX = "%RETRY%"
RECONSUME_TIME = "RECONSUME_TIME"
MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
UNIQ_KEY_PAIR = P.UNIQ_KEY + P.NAME_VALUE_SEPARATOR
# The property text a message with no tags, keys or properties carries before its UNIQ_KEY
# (WAIT is always written): every row of a plain Spark frame, most batched messages.
PLAIN_ROW_PREFIX = f"{P.WAIT}{P.NAME_VALUE_SEPARATOR}true{P.PROPERTY_SEPARATOR}"
_WAIT_FALSE_PREFIX = f"{P.WAIT}{P.NAME_VALUE_SEPARATOR}false{P.PROPERTY_SEPARATOR}"


@dataclass(slots=True)
class Outgoing:
    """One message (or batch) ready for the wire; built once, the same on every attempt."""

    topic: str
    body: bytes
    sysflag: int
    flag: int
    properties: str
    msg_id: str
    batch: bool = False
    reconsume_times: int | None = None
    max_reconsume_times: int | None = None


def _plain(msg: Message) -> bool:
    """No tags, keys, properties, flag, delay or timer: the property text is WAIT and the UNIQ_KEY."""
    return (
        not (msg.tags or msg.keys or msg.properties or msg.flag or msg.delay_level)
        and msg.deliver_at is None
        and msg.delay is None
    )


def prepare_message(
    msg: Message,
    ids: UniqueIdGenerator,
    clock: Clock,
    max_message_size: int,
    compress_over: int,
    compress_level: int,
) -> Outgoing:
    """Validate ``msg``, give it a UNIQ_KEY unless it has one, compress a large body (zlib,
    sysflag COMPRESSED | ZLIB type, as Java 4.9.7) and encode its properties.

    A retry-topic message's RECONSUME_TIME and MAX_RECONSUME_TIMES properties move to the
    request header, as ``sendKernelImpl`` does, because the broker reads them there."""
    body = msg.body
    if type(body) is bytes and 0 < len(body) < compress_over and len(body) <= max_message_size and _plain(msg):
        # the usual message: only its topic to check, and its property text is WAIT and UNIQ_KEY
        validate_topic(msg.topic)
        if not msg.topic.startswith(RETRY_PREFIX):
            uid = ids.next_id(clock.wall_ms())
            text = f"{PLAIN_ROW_PREFIX if msg.wait_store_msg_ok else _WAIT_FALSE_PREFIX}{UNIQ_KEY_PAIR}{uid}"
            return Outgoing(msg.topic, body, 0, 0, text, uid)
    validate_message(msg, max_message_size)
    props = msg.wire_properties()
    if P.UNIQ_KEY not in props:
        props[P.UNIQ_KEY] = ids.next_id(clock.wall_ms())
    reconsume = max_reconsume = None
    if msg.topic.startswith(RETRY_PREFIX):
        if RECONSUME_TIME in props:
            reconsume = int(props.pop(RECONSUME_TIME))
        if MAX_RECONSUME_TIMES in props:
            max_reconsume = int(props.pop(MAX_RECONSUME_TIMES))
    body = bytes(msg.body)
    sysflag = 0
    if len(body) >= compress_over:
        body = zlib.compress(body, compress_level)
        sysflag |= SF.COMPRESSED | SF.COMPRESSION_ZLIB
    text = P.encode_properties(props)
    # a character is at most 4 UTF-8 bytes: the usual short text needs no encoding to check
    if len(text) * 4 > MAX_PROPERTIES_BYTES and len(text.encode()) > MAX_PROPERTIES_BYTES:
        raise MessageInvalidError(f"the message properties are longer than {MAX_PROPERTIES_BYTES} bytes")
    return Outgoing(msg.topic, body, sysflag, msg.flag, text, props[P.UNIQ_KEY], False, reconsume, max_reconsume)


def _batch_entry_text(msg: Message, fresh: str, max_message_size: int) -> tuple[str, str]:
    """A batched message's property text and UNIQ_KEY (its own, else ``fresh``), after the
    checks a batch makes of each message."""
    if msg.delay_level > 0:
        raise MessageInvalidError("delayed messages are not supported in a batch")
    if msg.deliver_at is not None or msg.delay is not None:
        raise MessageInvalidError("timer messages (deliver_at / delay) are not supported in a batch")
    validate_message_fields(msg, max_message_size)  # the topic is the batch's, checked once
    props = msg.wire_properties()
    uid = props.setdefault(P.UNIQ_KEY, fresh)
    return P.encode_properties(props), uid


def prepare_batch(msgs: Sequence[Message], ids: UniqueIdGenerator, clock: Clock, max_message_size: int) -> Outgoing:
    """``DefaultMQProducer.batch``: one topic, no delay, no retry topic; each message its own
    UNIQ_KEY. As in Java, a batch is not compressed (``sendKernelImpl`` compresses single
    messages only), and its ``msg_id`` is the comma-joined ids of its messages."""
    if not msgs:
        raise MessageInvalidError("a batch needs at least one message")
    topic = msgs[0].topic
    validate_topic(topic)
    if topic.startswith(RETRY_PREFIX):
        raise MessageInvalidError("retry-group messages are not supported in a batch")
    bodies: list[bytes] = []
    texts: list[bytes] = []
    flags: list[int] = []
    msg_ids: list[str] = []
    try:
        for msg, fresh in zip(msgs, ids.next_ids(len(msgs), clock.wall_ms()), strict=True):
            if msg.topic != topic:
                raise MessageInvalidError(f"a batch must have one topic; {msg.topic!r} differs from {topic!r}")
            body = msg.body
            if type(body) is bytes and 0 < len(body) <= max_message_size and _plain(msg):
                # the usual batched message: nothing to check or encode but its body
                text = f"{PLAIN_ROW_PREFIX if msg.wait_store_msg_ok else _WAIT_FALSE_PREFIX}{UNIQ_KEY_PAIR}{fresh}"
                flags.append(0)
                msg_ids.append(fresh)
            else:
                text, uid = _batch_entry_text(msg, fresh, max_message_size)
                flags.append(msg.flag)
                msg_ids.append(uid)
                body = bytes(body)
            bodies.append(body)
            texts.append(text.encode())
        body = encode_entries(bodies, texts, flags)
    except LocalProtocolError as exc:
        raise MessageInvalidError(str(exc)) from None
    if len(body) > max_message_size:
        raise MessageInvalidError(f"the batch is {len(body)} bytes, over the maximum {max_message_size}")
    wait = "true" if msgs[0].wait_store_msg_ok else "false"
    return Outgoing(topic, body, 0, 0, P.encode_properties({P.WAIT: wait}), ",".join(msg_ids), True)


def row_prefix(tags: str | None, keys: str | None, properties: Mapping[str, str]) -> str:
    """A row's property text up to its UNIQ_KEY, for ``prepare_rows``: what
    ``encode_properties(Message(t, b, tags=tags, keys=keys, properties=properties).wire_properties())``
    writes, each pair followed by 0x02, after the checks ``validate_message_fields`` makes of
    the same fields (``MessageInvalidError`` when a text holds a separator)."""
    pairs: list[str] = []
    if tags:
        check_property_text("the tags", tags)
        pairs.append(f"{P.TAGS}{P.NAME_VALUE_SEPARATOR}{tags}")
    if keys:
        key_list = [k for k in keys.split(P.KEY_SEPARATOR) if k]
        for key in key_list:
            check_property_text("the key", key)
        if key_list:
            pairs.append(f"{P.KEYS}{P.NAME_VALUE_SEPARATOR}{P.KEY_SEPARATOR.join(key_list)}")
    pairs.append(PLAIN_ROW_PREFIX[:-1])
    for k, v in properties.items():
        check_property_text("the property name", k)
        check_property_text("the property value", v)
        if k and v:
            pairs.append(f"{k}{P.NAME_VALUE_SEPARATOR}{v}")
    pairs.append("")  # the separator before UNIQ_KEY
    return P.PROPERTY_SEPARATOR.join(pairs)


def prepare_rows(
    topic: str,
    bodies: Sequence[bytes],
    prefixes: Sequence[str],
    ids: UniqueIdGenerator,
    clock: Clock,
    max_message_size: int,
) -> Outgoing:
    """``prepare_batch`` for a writer that holds columns (the Spark sink): row ``i`` is
    ``bodies[i]`` with the property text ``prefixes[i]`` (every pair but UNIQ_KEY, each
    followed by 0x02, in the order ``Message.wire_properties`` gives them, already checked
    for separators by the writer) and a fresh UNIQ_KEY last. The same bytes
    ``prepare_batch`` makes of the same messages, without a ``Message``, a dict and a
    property encoding per row."""
    if not bodies:
        raise MessageInvalidError("a batch needs at least one message")
    validate_topic(topic)
    if topic.startswith(RETRY_PREFIX):
        raise MessageInvalidError("retry-group messages are not supported in a batch")
    sizes = [len(b) for b in bodies]
    if min(sizes) == 0:
        raise MessageInvalidError("the message body length is zero")
    if max(sizes) > max_message_size:
        raise MessageInvalidError(f"the message body is {max(sizes)} bytes, over the maximum {max_message_size}")
    msg_ids = ids.next_ids(len(bodies), clock.wall_ms())
    texts = [f"{prefix}{UNIQ_KEY_PAIR}{uid}".encode() for prefix, uid in zip(prefixes, msg_ids, strict=True)]
    try:
        body = encode_entries(bodies, texts)
    except LocalProtocolError as exc:
        raise MessageInvalidError(str(exc)) from None
    if len(body) > max_message_size:
        raise MessageInvalidError(f"the batch is {len(body)} bytes, over the maximum {max_message_size}")
    return Outgoing(topic, body, 0, 0, P.encode_properties({P.WAIT: "true"}), ",".join(msg_ids), True)
