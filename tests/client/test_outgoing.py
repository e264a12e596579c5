"""The produce path's encoding, made cheaper per message, must stay byte for byte what it was.

``send_request`` builds its header as strings directly (no ``stringify`` per message),
``prepare_batch`` appends entries without ``BatchEntry`` objects and checks the batch's
topic once, ``prepare_message`` encodes the property text only when it could be too long,
and ``read_send_response`` hands back the attempt's queue instead of a new equal one. Each
is checked here against the general form it replaces.
"""

from __future__ import annotations

import random

import pytest

from ledgermq.client.errors import MessageInvalidError
from ledgermq.client.message import Message, validate_topic
from ledgermq.client.producer.outgoing import PLAIN_ROW_PREFIX, Outgoing, prepare_batch, prepare_message, prepare_rows
from ledgermq.client.producer.send_codec import read_send_response, send_request
from ledgermq.clock import SYSTEM_CLOCK, ManualClock
from ledgermq.protocol import properties as P
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.batch import BatchEntry, encode_batch, iter_batch
from ledgermq.protocol.codes import RequestCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.message import MAX_PROPERTIES_BYTES
from ledgermq.util.unique_ids import UniqueIdGenerator

MAX = 4 * 1024 * 1024


def ids() -> UniqueIdGenerator:
    return UniqueIdGenerator("10.0.0.1", pid=42, rng=random.Random(5))


def general_header(out: Outgoing, mq: MessageQueue, born_ms: int) -> dict[str, str]:
    """The header as the typed dict ``RemotingCommand.request`` turns into strings."""
    values = {
        "a": "pg", "b": out.topic, "c": "TBW102", "d": 4, "e": mq.queue_id, "f": out.sysflag, "g": born_ms,
        "h": out.flag, "i": out.properties, "j": out.reconsume_times or 0, "k": False,
        "l": out.max_reconsume_times, "m": out.batch, "n": mq.broker_name,
    }  # fmt: skip
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, values).ext_fields


@pytest.mark.parametrize(
    "out",
    [
        Outgoing("T", b"body", 0, 7, "WAIT\x01true\x02UNIQ_KEY\x01AB", "AB"),
        Outgoing("%RETRY%g", b"b", 1, -3, "WAIT\x01false", "CD", reconsume_times=2, max_reconsume_times=16),
        Outgoing("T", b"batch", 0, 0, "WAIT\x01true", "A,B", batch=True),
    ],
)
def test_send_request_header_is_what_stringify_made_of_the_typed_values(out: Outgoing) -> None:
    mq = MessageQueue(out.topic, "broker-a", 5)
    req = send_request(out, mq, "pg", "TBW102", 4, 1_700_000_000_123)
    assert req.ext_fields == general_header(out, mq, 1_700_000_000_123)
    assert all(type(v) is str for v in req.ext_fields.values())
    assert ("l" in req.ext_fields) == (out.max_reconsume_times is not None)
    assert req.code == (RequestCode.SEND_BATCH_MESSAGE if out.batch else RequestCode.SEND_MESSAGE_V2)
    assert req.body == out.body and req.opaque == 0 and not req.is_oneway and not req.is_response


def test_read_send_response_reuses_the_attempts_queue_only_when_it_is_the_same() -> None:
    out = Outgoing("T", b"x", 0, 0, "", "ID")
    mq = MessageQueue("T", "broker-a", 3)
    ext = {"queueId": "3", "queueOffset": "9", "msgId": "OFF"}
    same = read_send_response(RemotingCommand(code=0, flag=1, ext_fields=ext), out, mq, "a:1")
    assert same.queue is mq and same.queue_offset == 9 and same.offset_msg_id == "OFF"
    other = read_send_response(RemotingCommand(code=0, flag=1, ext_fields={**ext, "queueId": "1"}), out, mq, "a:1")
    assert other.queue == MessageQueue("T", "broker-a", 1)


def test_prepare_batch_body_is_the_entries_encode_batch_makes() -> None:
    msgs = [
        Message("T", f"body-{i}".encode(), tags="t" if i % 2 else None, keys=f"k{i}", flag=i, properties={"u": str(i)})
        for i in range(5)
    ]
    msgs[3].properties[P.UNIQ_KEY] = "MINE"
    out = prepare_batch(msgs, ids(), SYSTEM_CLOCK, MAX)
    entries = list(iter_batch(out.body))
    assert [(e.flag, e.body) for e in entries] == [(m.flag, m.body) for m in msgs]
    uniq = [P.decode_properties(e.properties)[P.UNIQ_KEY] for e in entries]
    assert uniq[3] == "MINE" and len(set(uniq)) == 5 and out.msg_id == ",".join(uniq)
    expected = [BatchEntry(m.flag, m.body, e.properties) for m, e in zip(msgs, entries, strict=True)]
    assert out.body == encode_batch(expected)
    assert P.decode_properties(entries[1].properties) == {
        "TAGS": "t", "KEYS": "k1", "WAIT": "true", "u": "1", "UNIQ_KEY": uniq[1],
    }  # fmt: skip
    assert out.batch and out.topic == "T" and out.properties == "WAIT\x01true"


def test_plain_messages_in_a_batch_are_encoded_as_any_other() -> None:
    """Messages with no tags, keys, properties or flag take a shorter way through
    ``prepare_batch``; their entries are what the general encoding makes of them."""
    msgs = [
        Message("T", b"plain"),
        Message("T", b"no-wait", wait_store_msg_ok=False),
        Message("T", bytearray(b"bytearray")),
        Message("T", b"tagged", tags="t"),
        Message("T", b"flagged", flag=3),
        Message("T", b"plain again", keys=[]),
    ]
    out = prepare_batch(msgs, ids(), SYSTEM_CLOCK, MAX)
    uniq = out.msg_id.split(",")
    expected = [
        BatchEntry(m.flag, bytes(m.body), P.encode_properties({**m.wire_properties(), P.UNIQ_KEY: u}))
        for m, u in zip(msgs, uniq, strict=True)
    ]
    assert out.body == encode_batch(expected) and len(set(uniq)) == len(msgs)


@pytest.mark.parametrize(
    "msg",
    [
        Message("T", b"plain"),
        Message("T", b"no-wait", wait_store_msg_ok=False),
        Message("T", bytearray(b"bytearray")),
        Message("T", b"tagged", tags="t", keys="k", properties={"u": "1"}),
        Message("%RETRY%g", b"retry"),
        Message("T", b"x" * 4095),
    ],
)
def test_a_plain_message_is_prepared_as_any_other(msg: Message) -> None:
    """Messages with no tags, keys, properties or flag and a body under the compression
    threshold take a shorter way through ``prepare_message``; the outcome is the general one."""
    out = prepare_message(msg, ids(), SYSTEM_CLOCK, MAX, 4096, 5)
    text = P.encode_properties({**msg.wire_properties(), P.UNIQ_KEY: out.msg_id})
    assert out == Outgoing(msg.topic, bytes(msg.body), 0, msg.flag, text, out.msg_id)
    assert len(out.msg_id) == 32


def test_a_plain_message_still_has_its_topic_and_size_checked() -> None:
    for msg, words in [(Message("bad topic", b"x"), "illegal"), (Message("T", b""), "length is zero")]:
        with pytest.raises(MessageInvalidError, match=words):
            prepare_message(msg, ids(), SYSTEM_CLOCK, MAX, 4096, 5)
    with pytest.raises(MessageInvalidError, match="over the maximum"):
        prepare_message(Message("T", b"x" * 11), ids(), SYSTEM_CLOCK, 10, 4096, 5)
    assert prepare_message(Message("T", b"x" * 4096), ids(), SYSTEM_CLOCK, MAX, 4096, 5).sysflag != 0  # compressed


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        (Message("Other", b"x"), "one topic"),
        (Message("T", b"x", delay_level=2), "delayed"),
        (Message("T", b""), "length is zero"),
        (Message("T", b"x", flag=2**31), "32-bit"),
        (Message("T", b"x", properties={"p": "v" * 40000}), "32767"),
    ],
)
def test_prepare_batch_refuses_any_bad_message(bad: Message, words: str) -> None:
    with pytest.raises(MessageInvalidError, match=words):
        prepare_batch([Message("T", b"ok"), bad], ids(), SYSTEM_CLOCK, MAX)


@pytest.mark.parametrize(
    ("topic", "bodies", "prefix", "words"),
    [
        ("T", [], PLAIN_ROW_PREFIX, "at least one"),
        ("bad topic", [b"x"], PLAIN_ROW_PREFIX, "illegal characters"),
        ("%RETRY%g", [b"x"], PLAIN_ROW_PREFIX, "retry-group"),
        ("T", [b"x", b""], PLAIN_ROW_PREFIX, "length is zero"),
        ("T", [b"x", b"y" * (MAX + 1)], PLAIN_ROW_PREFIX, "over the maximum"),
        ("T", [b"x"], "p\x01" + "v" * 40000 + "\x02", "32767"),
    ],
)
def test_prepare_rows_refuses_what_prepare_batch_refuses(
    topic: str, bodies: list[bytes], prefix: str, words: str
) -> None:
    with pytest.raises(MessageInvalidError, match=words):
        prepare_rows(topic, bodies, [prefix] * len(bodies), ids(), SYSTEM_CLOCK, MAX)


def test_prepare_rows_makes_the_batch_prepare_batch_makes() -> None:
    msgs = [Message("T", f"body-{i}".encode()) for i in range(5)]
    a, b, clock = ids(), ids(), ManualClock()  # the same salt and time: the same ids in turn
    out = prepare_rows("T", [m.body for m in msgs], [PLAIN_ROW_PREFIX] * 5, a, clock, MAX)
    assert out == prepare_batch(msgs, b, clock, MAX)


def test_prepare_batch_checks_the_topic() -> None:
    with pytest.raises(MessageInvalidError, match="illegal characters"):
        prepare_batch([Message("bad topic", b"x"), Message("bad topic", b"y")], ids(), SYSTEM_CLOCK, MAX)


def test_prepare_message_limits_the_property_bytes_not_characters() -> None:
    """3-byte characters: few enough characters to pass a character count, too many bytes."""

    def text_len(value: str) -> int:
        out = prepare_message(Message("T", b"x", properties={"p": value}), ids(), SYSTEM_CLOCK, MAX, 4096, 5)
        return len(out.properties.encode())

    assert text_len("€" * 10_000) <= MAX_PROPERTIES_BYTES
    with pytest.raises(MessageInvalidError, match="properties are longer"):
        text_len("€" * 11_000)  # 33,000 bytes in 11,000 characters
    with pytest.raises(MessageInvalidError, match="properties are longer"):
        text_len("v" * MAX_PROPERTIES_BYTES)


@pytest.mark.parametrize(
    ("topic", "words"),
    [("", "blank"), ("a b", "illegal"), ("x" * 128, "longer than 127"), ("SCHEDULE_TOPIC_XXXX", "system topic")],
)
def test_a_bad_topic_is_refused_every_time_it_is_sent_to(topic: str, words: str) -> None:
    """Topic checks are remembered per topic: the answer, not just the first refusal."""
    for _ in range(3):
        with pytest.raises(MessageInvalidError, match=words):
            validate_topic(topic)
    for _ in range(3):
        validate_topic("Good_Topic-1%|")
