"""Typed request and response headers (protocol/header_codec.py, protocol/headers_*.py).

Golden frames as each client puts them on the wire (the C++ client's JSON numbers, the Java
client's strings, RocketMQ's binary header) decode to the typed values; Java's parsing rules
hold for every value hypothesis draws (checked against an independent model of them and
against the field-by-field helpers the processors used before); response headers give the
extFields the wire carries and survive a frame round trip in both serializations.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from typing import Any

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from ledgermq.protocol import headers_admin, headers_namesrv, headers_pull, headers_send
from ledgermq.protocol.codes import RequestCode, SerializeType
from ledgermq.protocol.command import RemotingCommand, decode_command, stringify
from ledgermq.protocol.header_codec import (
    Kind,
    RequestHeader,
    ResponseHeader,
    build_decoder,
    int32,
    int64,
    request_header,
    wires,
)
from ledgermq.protocol.headers import MissingField, bool_field, field, int_field, opt_field
from ledgermq.protocol.headers_pull import PullMessageRequestHeader, PullMessageResponseHeader
from ledgermq.protocol.headers_send import SendMessageRequestHeader, SendMessageResponseHeader

MODULES = (headers_send, headers_pull, headers_admin, headers_namesrv)


def _classes(base: type) -> list[type]:
    found = {obj for m in MODULES for obj in vars(m).values() if isinstance(obj, type) and issubclass(obj, base)}
    return sorted(found - {base}, key=lambda c: c.__name__)


REQUEST_CLASSES = _classes(RequestHeader)
RESPONSE_CLASSES = _classes(ResponseHeader)


def frame(serialize_type: int, header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), (serialize_type << 24) | len(header)) + header + body


# -- golden frames ---------------------------------------------------------------------------------

# rocketmq-client-cpp 2.x: jsoncpp writes d/e/f/h/l as JSON numbers, booleans as "0"/"1" strings.
CPP_SEND_V2 = (
    b'{"code":310,"extFields":{"AccessKey":"","Signature":"c2ln","a":"pg","b":"TopicTest","c":"TBW102",'
    b'"d":4,"e":-1,"f":0,"g":"1690000000000","h":0,"i":"KEYS\\u0001k1\\u0002","j":"0","k":"0","l":16,"m":"1"},'
    b'"flag":0,"language":"CPP","opaque":17,"remark":"","version":333}\n'
)


def test_cpp_send_v2_frame_decodes_to_typed_fields() -> None:
    cmd = decode_command(frame(0, CPP_SEND_V2, b"body")[4:])
    hdr = SendMessageRequestHeader.decode(cmd)
    assert hdr == SendMessageRequestHeader(
        producer_group="pg",
        topic="TopicTest",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=-1,
        sys_flag=0,
        born_timestamp=1_690_000_000_000,
        flag=0,
        properties="KEYS\x01k1\x02",
        reconsume_times=0,
        unit_mode=False,
        max_reconsume_times=16,
        batch=True,  # the C++ client's "1"
        broker_name=None,
        topic_sys_flag=0,
    )


def test_java_pull_frame_with_string_values() -> None:
    ext = {
        "consumerGroup": "cg",
        "topic": "T",
        "queueId": "3",
        "queueOffset": "9007199254740993",  # past a double's precision: read as an integer
        "maxMsgNums": "32",
        "sysFlag": "6",
        "commitOffset": "-1",
        "suspendTimeoutMillis": "15000",
        "subscription": "a || b",
        "subVersion": "1690000000001",
        "expressionType": "TAG",
    }
    doc = {"code": 11, "extFields": ext, "flag": 0, "language": "JAVA", "opaque": 5, "version": 395}
    cmd = decode_command(frame(0, json.dumps(doc).encode())[4:])
    assert PullMessageRequestHeader.decode(cmd) == PullMessageRequestHeader(
        "cg", "T", 3, 9_007_199_254_740_993, 32, 6, -1, 15_000, 1_690_000_000_001, "a || b", "TAG"
    )


def test_java_send_v1_frame_reads_long_names_and_java_booleans() -> None:
    ext = {"producerGroup": "pg", "topic": "T", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
           "queueId": "1", "sysFlag": "0", "bornTimestamp": "1", "flag": "0", "unitMode": "true",
           "batch": "false", "maxReconsumeTimes": "null"}  # fmt: skip
    hdr = SendMessageRequestHeader.decode(RemotingCommand.request(RequestCode.SEND_MESSAGE, ext))
    assert (hdr.unit_mode, hdr.batch, hdr.max_reconsume_times, hdr.reconsume_times) == (True, False, None, 0)
    # SEND_MESSAGE_V2 reads only the one-letter keys, as Java's SendMessageRequestHeaderV2.
    with pytest.raises(MissingField, match="lacks 'producerGroup'"):
        SendMessageRequestHeader.decode(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext))


def _binary_header(code: int, ext: list[tuple[bytes, bytes]]) -> bytes:
    """RocketMQSerializable's layout, one pack per field (docs/formats.md §1)."""
    entries = b"".join(struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v for k, v in ext)
    return struct.pack(">hbhii", code, 0, 395, 77, 0) + struct.pack(">i", 0) + struct.pack(">i", len(entries)) + entries


def test_rocketmq_binary_header_frame() -> None:
    ext = [(b"a", b"pg"), (b"b", b"T\xc3\xa9"), (b"c", b"TBW102"), (b"d", b"8"), (b"e", b"2"), (b"f", b"4"),
           (b"g", b"1700000000000"), (b"h", b"0"), (b"j", b"3"), (b"n", b"broker-a")]  # fmt: skip
    cmd = decode_command(frame(SerializeType.ROCKETMQ, _binary_header(310, ext), b"x")[4:])
    assert cmd.serialize_type is SerializeType.ROCKETMQ
    hdr = SendMessageRequestHeader.decode(cmd)
    assert (hdr.topic, hdr.default_topic_queue_nums, hdr.queue_id, hdr.sys_flag) == ("Té", 8, 2, 4)
    assert (hdr.born_timestamp, hdr.reconsume_times, hdr.broker_name, hdr.properties) == (
        1_700_000_000_000,
        3,
        "broker-a",
        None,
    )


def test_v2_errors_name_the_v1_field() -> None:
    ext = {"a": "pg", "b": "T", "c": "TBW102", "d": "4", "e": "2147483648", "f": "0", "g": "1", "h": "0"}
    with pytest.raises(MissingField) as err:
        SendMessageRequestHeader.decode(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext))
    assert str(err.value) == "header field 'queueId' is out of range for a 32-bit integer: '2147483648'"


# -- Java's parsing rules --------------------------------------------------------------------------


@request_header
class _Numbers(RequestHeader):
    i: int = int32("i")
    j: int = int64("j")
    k: int | None = int32("k", absent=None)


def _java_int(value: str | None, bits: int) -> int | None:
    """Independent model: trimmed, "" / "null" absent, optional sign then decimal digits, in range."""
    if value is None or value.strip() in ("", "null"):
        return None
    body = value.strip()
    digits = body[1:] if body[:1] in ("+", "-") else body
    if not digits or not all(ch.isdecimal() for ch in digits):
        raise ValueError("not an integer")
    number = int(body)
    if not -(1 << (bits - 1)) <= number < 1 << (bits - 1):
        raise ValueError("out of range")
    return number


EDGE_TEXTS = ["0", "-0", "+7", " 12 ", "2147483647", "2147483648", "-2147483648", "-2147483649",
              "9223372036854775807", "9223372036854775808", "-9223372036854775808", "1.0", "1e3", "nan",
              "inf", "0x10", "1_000", "", " ", "null", "NULL", "\u0663", "\u00b2", "true", "--1", "+"]  # fmt: skip
int_texts = st.one_of(
    st.sampled_from(EDGE_TEXTS),
    st.integers(-(1 << 70), 1 << 70).map(str),
    st.text(alphabet="0123456789+- .e_nul\u0663", max_size=22),
)


@seed(20261126)
@settings(max_examples=400, deadline=None)
@given(i=int_texts, j=int_texts, k=st.one_of(st.none(), int_texts))
def test_integers_follow_java_rules(i: str, j: str, k: str | None) -> None:
    ext = {"i": i, "j": j} if k is None else {"i": i, "j": j, "k": k}
    try:
        expected: Any = (_java_int(i, 32), _java_int(j, 64), _java_int(k, 32))
        if expected[0] is None or expected[1] is None:
            expected = MissingField
    except ValueError:
        expected = MissingField
    if expected is MissingField:
        with pytest.raises(MissingField):
            _Numbers.from_ext(ext)
    else:
        assert dataclasses.astuple(_Numbers.from_ext(ext)) == expected


def _legacy(cls: type, cmd: RemotingCommand) -> tuple[Any, ...]:
    """What the processors read field by field before the typed headers."""
    out: list[Any] = []
    for _attr, wire in wires(cls):
        if wire.kind is Kind.TEXT:
            out.append(field(cmd, wire.key) if wire.required else opt_field(cmd, wire.key, wire.absent))
        elif wire.kind is Kind.BOOL:
            out.append(bool_field(cmd, wire.key, wire.absent))
        elif wire.absent is None:  # optional without a default: read only when present
            present = cmd.ext_fields.get(wire.key, "").strip() not in ("", "null")
            out.append(int_field(cmd, wire.key, bits=wire.bits) if present else None)
        else:
            out.append(int_field(cmd, wire.key, None if wire.required else wire.absent, bits=wire.bits))
    return tuple(out)


values = st.one_of(st.sampled_from([*EDGE_TEXTS, "1", "TRUE", " 1", "false", "x"]), st.text(max_size=8))


@seed(20261127)
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_every_request_header_decodes_as_the_field_helpers_did(data: st.DataObject) -> None:
    cls = data.draw(st.sampled_from([c for c in REQUEST_CLASSES if c is not SendMessageRequestHeader]))
    keys = [w.key for _a, w in wires(cls)]
    ext = data.draw(st.dictionaries(st.sampled_from(keys), values, max_size=len(keys)))
    cmd = RemotingCommand.request(0, ext)
    try:
        expected: Any = _legacy(cls, cmd)
    except MissingField as exc:
        expected = str(exc)
    try:
        got: Any = dataclasses.astuple(cls.decode(cmd))
    except MissingField as exc:
        got = str(exc)
    assert got == expected


def test_booleans_read_true_and_one_in_any_case() -> None:
    cls = headers_admin.DeleteSubscriptionGroupRequestHeader
    for text, expected in [("true", True), (" TRUE ", True), ("1", True), ("false", False), ("0", False),
                           ("yes", False), ("", False), ("null", False)]:  # fmt: skip
        assert cls.from_ext({"groupName": "g", "removeOffset": text}).remove_offset is expected, text
    assert cls.from_ext({"groupName": "g"}).remove_offset is False
    with pytest.raises(MissingField, match="lacks 'groupName'"):
        cls.from_ext({"removeOffset": "true"})
    assert cls.from_ext({"groupName": ""}).group_name == ""  # a present string is never missing


def test_every_class_is_frozen_and_slotted() -> None:
    for cls in REQUEST_CLASSES + RESPONSE_CLASSES:
        assert "__slots__" in vars(cls) and "__dict__" not in vars(cls), cls
        assert vars(cls)["__dataclass_params__"].frozen, cls


# -- response headers ------------------------------------------------------------------------------

longs = st.integers(-(1 << 63), (1 << 63) - 1)


@seed(20261128)
@settings(max_examples=100, deadline=None)
@given(
    msg_id=st.text(min_size=1, max_size=40),
    queue_id=st.integers(-(1 << 31), (1 << 31) - 1),
    offset=longs,
    region=st.text(max_size=10),
    trace=st.booleans(),
    serialize=st.sampled_from(list(SerializeType)),
)
def test_send_response_round_trip(
    msg_id: str, queue_id: int, offset: int, region: str, trace: bool, serialize: SerializeType
) -> None:
    hdr = SendMessageResponseHeader(msg_id, queue_id, offset, region, trace)
    ext = hdr.ext()
    # Exactly what the processor's dict gave before, key order included (the binary header keeps it).
    legacy = stringify({"msgId": msg_id, "queueId": queue_id, "queueOffset": offset, "MSG_REGION": region,
                        "TRACE_ON": trace})  # fmt: skip
    assert list(ext.items()) == list(legacy.items())
    request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"a": "pg"})
    request.serialize_type = serialize
    wire = request.response(0, None, ext).encode()
    back = decode_command(wire[4:])
    assert back.ext_fields == ext
    assert build_decoder(SendMessageResponseHeader)(back.ext_fields) == hdr


@seed(20261129)
@settings(max_examples=50, deadline=None)
@given(nums=st.tuples(longs, longs, longs, longs))
def test_pull_response_round_trip(nums: tuple[int, int, int, int]) -> None:
    hdr = PullMessageResponseHeader(*nums)
    assert hdr.ext() == {k: str(v) for k, v in zip(
        ("suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset"), nums, strict=True)}  # fmt: skip
    assert build_decoder(PullMessageResponseHeader)(hdr.ext()) == hdr


def test_response_headers_drop_none_and_print_java_booleans() -> None:
    register = headers_namesrv.RegisterBrokerResponseHeader(None, "10.0.0.1:10911")
    assert register.ext() == {"masterAddr": "10.0.0.1:10911"}
    assert headers_namesrv.QueryDataVersionResponseHeader(True).ext() == {"changed": "true"}
    assert headers_namesrv.QueryDataVersionResponseHeader(False).ext() == {"changed": "false"}


def test_a_request_header_encodes_for_forwarding() -> None:
    hdr = headers_admin.ResetOffsetRequestHeader.from_ext(
        {"topic": "T", "group": "g", "timestamp": "+5", "isForce": "1"}
    )
    assert hdr.ext() == {"topic": "T", "group": "g", "timestamp": "5", "isForce": "true"}
    direct = headers_admin.ConsumeMessageDirectlyResultRequestHeader.from_ext(
        {"consumerGroup": "g", "clientId": "c", "msgId": "m"}
    )
    assert dataclasses.replace(direct, broker_name="b").ext() == {
        "consumerGroup": "g",
        "clientId": "c",
        "msgId": "m",
        "brokerName": "b",
    }
