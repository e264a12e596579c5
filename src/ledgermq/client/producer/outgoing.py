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
from collections.abc import Sequence
from dataclasses import dataclass

from ledgermq.client.errors import MessageInvalidError
from ledgermq.client.message import Message, validate_message, validate_message_fields, validate_topic
from ledgermq.clock import Clock
from ledgermq.errors import LocalProtocolError
from ledgermq.protocol import properties as P
from ledgermq.protocol import sysflag as SF
from ledgermq.protocol.batch import add_batch_entry
from ledgermq.protocol.message import MAX_PROPERTIES_BYTES
from ledgermq.util.unique_ids import UniqueIdGenerator

MAX_MESSAGE_SIZE = 4 * 1024 * 1024
COMPRESS_OVER = 4096
COMPRESS_LEVEL = 5
RETRY_PREFIX = "%RETRY%"
RECONSUME_TIME = "RECONSUME_TIME"
MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"


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
    parts: list[bytes] = []
    msg_ids: list[str] = []
    try:
        for msg in msgs:
            if msg.topic != topic:
                raise MessageInvalidError(f"a batch must have one topic; {msg.topic!r} differs from {topic!r}")
            if msg.delay_level > 0:
                raise MessageInvalidError("delayed messages are not supported in a batch")
            if msg.deliver_at is not None or msg.delay is not None:
                raise MessageInvalidError("timer messages (deliver_at / delay) are not supported in a batch")
            validate_message_fields(msg, max_message_size)  # the topic is the one checked above
            props = msg.wire_properties()
            if P.UNIQ_KEY not in props:
                props[P.UNIQ_KEY] = ids.next_id(clock.wall_ms())
            msg_ids.append(props[P.UNIQ_KEY])
            add_batch_entry(parts, msg.flag, bytes(msg.body), P.encode_properties(props))
    except LocalProtocolError as exc:
        raise MessageInvalidError(str(exc)) from None
    body = b"".join(parts)
    if len(body) > max_message_size:
        raise MessageInvalidError(f"the batch is {len(body)} bytes, over the maximum {max_message_size}")
    wait = "true" if msgs[0].wait_store_msg_ok else "false"
    return Outgoing(topic, body, 0, 0, P.encode_properties({P.WAIT: wait}), ",".join(msg_ids), True)
