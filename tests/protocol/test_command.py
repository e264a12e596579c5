"""RemotingCommand encode/decode against frames built by hand from docs/formats.md §1.

Reference frames here are assembled with ``struct.pack`` one field at a time, and JSON headers
are written out as literal bytes (or with the standard library's ``json``), so a passing test
shows the codec agrees with the documented layout rather than with itself.

Binary (ROCKETMQ) header layout, from RocketMQSerializable.rocketMQProtocolEncode/Decode
(rocketmq-all-4.9.7): code int16, language int8, version int16, opaque int32, flag int32,
remarkLen int32 + UTF-8 remark (0 for null or empty; 0 decodes back to null), extLen int32 +
entries of (keyLen int16, key, valLen int32, value).
"""

from __future__ import annotations

import json
import struct

import pytest

from ledgermq.errors import RemoteProtocolError
from ledgermq.protocol.codes import (
    CURRENT_VERSION,
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    LanguageCode,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from ledgermq.protocol.command import RemotingCommand, decode_command, stringify
from ledgermq.protocol.frame import FrameDecoder

JSON = SerializeType.JSON
BINARY = SerializeType.ROCKETMQ


# -- independent reference builders ----------------------------------------------------------------


def ref_frame(serialize_type: int, header: bytes, body: bytes = b"") -> bytes:
    """§1 table: length (4 + headerLen + bodyLen), header word (type << 24 | headerLen), header, body."""
    return (
        struct.pack(">i", 4 + len(header) + len(body))
        + struct.pack(">i", (serialize_type << 24) | len(header))
        + header
        + body
    )


def ref_binary_header(
    *,
    code: int,
    language: int,
    version: int,
    opaque: int,
    flag: int,
    remark: bytes | None,
    ext: list[tuple[bytes, bytes]],
) -> bytes:
    """RocketMQSerializable's field order, one pack per field."""
    out = struct.pack(">h", code)
    out += struct.pack(">b", language)
    out += struct.pack(">h", version)
    out += struct.pack(">i", opaque)
    out += struct.pack(">i", flag)
    if remark:
        out += struct.pack(">i", len(remark)) + remark
    else:
        out += struct.pack(">i", 0)
    entries = b""
    for key, value in ext:
        entries += struct.pack(">h", len(key)) + key + struct.pack(">i", len(value)) + value
    out += struct.pack(">i", len(entries)) + entries
    return out


def split_frame(frame: bytes) -> tuple[int, int, int, bytes, bytes]:
    """(length, serialize type, header length, header, body) read back with struct."""
    (length,) = struct.unpack_from(">i", frame, 0)
    (word,) = struct.unpack_from(">I", frame, 4)
    kind, header_len = word >> 24, word & 0xFFFFFF
    header = frame[8 : 8 + header_len]
    body = frame[8 + header_len :]
    return length, kind, header_len, header, body


def json_header_doc(frame: bytes) -> dict[str, object]:
    _, kind, _, header, _ = split_frame(frame)
    assert kind == 0
    doc = json.loads(header)
    assert isinstance(doc, dict)
    return doc


# -- JSON encoding ---------------------------------------------------------------------------------


def test_json_request_frame_matches_hand_built_bytes() -> None:
    cmd = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}, b"xyz", opaque=7)
    header = (
        b'{"code":105,"extFields":{"topic":"T"},"flag":0,"language":"PYTHON","opaque":7,'
        b'"serializeTypeCurrentRPC":"JSON","version":407}'
    )
    assert cmd.encode() == ref_frame(0, header, b"xyz")


def test_json_response_frame_with_remark_matches_hand_built_bytes() -> None:
    req = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"a": "pg"}, opaque=42)
    resp = req.response(ResponseCode.SYSTEM_ERROR, remark="boom", ext_fields={"queueId": 3})
    header = (
        b'{"code":1,"extFields":{"queueId":"3"},"flag":1,"language":"PYTHON","opaque":42,'
        b'"remark":"boom","serializeTypeCurrentRPC":"JSON","version":407}'
    )
    assert resp.encode() == ref_frame(0, header)


@pytest.mark.parametrize("body", [b"", b"\x00", b"hello body", bytes(range(256)) * 40])
def test_json_frame_length_and_header_word(body: bytes) -> None:
    cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": "T", "e": 1}, body, opaque=99)
    frame = cmd.encode()
    length, kind, header_len, header, tail = split_frame(frame)
    assert length == 4 + header_len + len(body) == len(frame) - 4
    assert kind == 0
    assert struct.unpack_from(">I", frame, 4)[0] == header_len  # type byte 0: the word is the length
    assert tail == body
    assert frame == ref_frame(0, header, body)


def test_json_header_keys_are_alphabetical() -> None:
    cmd = RemotingCommand.request(10, {"z": "1", "a": "2", "M": "3"}, opaque=1)
    cmd.remark = "r"
    doc = json_header_doc(cmd.encode())
    assert list(doc) == sorted(doc)
    assert list(doc) == [
        "code",
        "extFields",
        "flag",
        "language",
        "opaque",
        "remark",
        "serializeTypeCurrentRPC",
        "version",
    ]
    ext = doc["extFields"]
    assert isinstance(ext, dict)
    assert list(ext) == sorted(ext) == ["M", "a", "z"]


def test_json_remark_omitted_when_none_but_kept_when_empty() -> None:
    cmd = RemotingCommand.request(10)
    assert cmd.remark is None
    assert "remark" not in json_header_doc(cmd.encode())
    cmd.remark = ""
    assert json_header_doc(cmd.encode())["remark"] == ""


def test_json_ext_fields_always_present_even_when_empty() -> None:
    for cmd in (
        RemotingCommand.request(34),
        RemotingCommand.request(34).response(0),
        RemotingCommand(code=0),
    ):
        doc = json_header_doc(cmd.encode())
        assert doc["extFields"] == {}


def test_json_ext_values_are_strings_on_the_wire() -> None:
    cmd = RemotingCommand.request(
        11,
        {"queueId": 3, "queueOffset": 2**40, "commitOffset": -1, "unitMode": True, "batch": False, "t": "T"},
    )
    raw_header = split_frame(cmd.encode())[3]
    ext = json.loads(raw_header)["extFields"]
    assert ext == {
        "queueId": "3",
        "queueOffset": "1099511627776",
        "commitOffset": "-1",
        "unitMode": "true",
        "batch": "false",
        "t": "T",
    }
    assert all(isinstance(v, str) for v in ext.values())
    # numbers in the header itself stay JSON numbers (the C++ client reads them with asInt)
    doc = json.loads(raw_header)
    for key in ("code", "flag", "opaque", "version"):
        assert type(doc[key]) is int


def test_json_non_ascii_is_utf8_and_header_len_counts_bytes() -> None:
    cmd = RemotingCommand.request(10, {"k": "héllo 世界 🚀"}, opaque=1)
    cmd.remark = "ñ"
    frame = cmd.encode()
    _, _, header_len, header, _ = split_frame(frame)
    assert len(header) == header_len
    text = header.decode("utf-8")
    assert "héllo 世界 🚀" in text  # written as UTF-8, not \u escapes
    assert json.loads(text)["extFields"]["k"] == "héllo 世界 🚀"
    assert len(text) < header_len  # multi-byte characters: bytes, not characters, are counted


def test_default_version_and_language() -> None:
    cmd = RemotingCommand.request(10)
    assert cmd.version == CURRENT_VERSION == 407  # V4_9_7 (docs/formats.md §1)
    doc = json_header_doc(cmd.encode())
    assert doc["version"] == 407
    assert doc["language"] == "PYTHON"
    assert doc["serializeTypeCurrentRPC"] == "JSON"


# -- stringify / request / response ----------------------------------------------------------------


def test_stringify_like_fastjson() -> None:
    assert stringify({"i": 5, "t": True, "f": False, "s": "x", "n": None, "neg": -7, "e": ""}) == {
        "i": "5",
        "t": "true",
        "f": "false",
        "s": "x",
        "neg": "-7",
        "e": "",
    }
    assert stringify({1: 2}) == {"1": "2"}
    assert stringify({}) == {}


def test_request_flags_and_oneway() -> None:
    req = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {"queueId": 0}, opaque=5)
    assert req.flag == 0
    assert not req.is_response and not req.is_oneway
    code = RequestCode.UPDATE_CONSUMER_OFFSET
    oneway = RemotingCommand.request(code, {"queueId": 0}, oneway=True, opaque=6)
    assert oneway.flag == ONEWAY_FLAG == 0b10
    assert oneway.is_oneway and not oneway.is_response
    assert json_header_doc(oneway.encode())["flag"] == 2
    assert req.ext_fields == {"queueId": "0"}


@pytest.mark.parametrize("serialize_type", [JSON, BINARY])
def test_response_copies_opaque_and_serialize_type_and_sets_flag(serialize_type: SerializeType) -> None:
    req = RemotingCommand.request(RequestCode.PULL_MESSAGE, {"queueId": 1}, opaque=123456)
    req.serialize_type = serialize_type
    req.language = "CPP"
    resp = req.response(ResponseCode.PULL_NOT_FOUND, ext_fields={"nextBeginOffset": 10, "flag": True})
    assert resp.opaque == 123456
    assert resp.serialize_type is serialize_type
    assert resp.flag == RESPONSE_FLAG == 1
    assert resp.is_response and not resp.is_oneway
    assert resp.code == 19
    assert resp.ext_fields == {"nextBeginOffset": "10", "flag": "true"}
    assert resp.remark is None
    assert resp.body == b""
    # the response goes back in the request's serialization
    assert split_frame(resp.encode())[1] == int(serialize_type)
    back = decode_command(resp.encode()[4:])
    assert back.opaque == 123456 and back.flag == 1 and back.code == 19


def test_response_of_oneway_request_is_plain_response_flag() -> None:
    req = RemotingCommand.request(15, oneway=True, opaque=3)
    resp = req.response(0)
    assert resp.flag == 1  # bit 0 set, oneway bit not copied


# -- decoding C++ / Java style JSON headers --------------------------------------------------------

# What rocketmq-client-cpp 2.x sends for SEND_MESSAGE_V2 (jsoncpp FastWriter: keys sorted, remark
# always present, a trailing newline counted in headerLen, d/e/f/h/l as JSON numbers).
CPP_SEND_HEADER = (
    b'{"code":310,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"c2lnbmF0dXJl=",'
    b'"a":"pg","b":"TopicTest","c":"TBW102","d":4,"e":-1,"f":0,"g":"1690000000000","h":0,'
    b'"i":"KEYS\\u0001k1\\u0002WAIT\\u0001true\\u0002","j":"0","k":"0","l":0,"m":"0"},'
    b'"flag":0,"language":"CPP","opaque":17,"remark":"","version":333}\n'
)


def test_decode_cpp_client_request() -> None:
    assert CPP_SEND_HEADER.endswith(b"}\n")
    frame = ref_frame(0, CPP_SEND_HEADER, b"hello")
    cmd = decode_command(frame[4:])
    assert cmd.code == 310
    assert cmd.opaque == 17
    assert cmd.flag == 0
    assert cmd.language == "CPP"
    assert cmd.version == 333
    assert cmd.remark == ""
    assert cmd.serialize_type is JSON
    assert cmd.body == b"hello"
    assert cmd.ext_fields == {
        "AccessKey": "",
        "OnsChannel": "ALIYUN",
        "Signature": "c2lnbmF0dXJl=",
        "a": "pg",
        "b": "TopicTest",
        "c": "TBW102",
        "d": "4",
        "e": "-1",
        "f": "0",
        "g": "1690000000000",
        "h": "0",
        "i": "KEYS\x01k1\x02WAIT\x01true\x02",
        "j": "0",
        "k": "0",
        "l": "0",
        "m": "0",
    }
    assert all(type(v) is str for v in cmd.ext_fields.values())
    assert not cmd.is_response and not cmd.is_oneway


def test_decode_cpp_client_request_through_frame_decoder() -> None:
    frame = ref_frame(0, CPP_SEND_HEADER, b"hello")
    items = FrameDecoder().feed(frame)
    assert len(items) == 1
    cmd = items[0]
    assert isinstance(cmd, RemotingCommand)
    assert cmd.ext_fields["d"] == "4" and cmd.body == b"hello"


def test_decode_cpp_pull_request_numbers_and_heartbeat_without_header_fields() -> None:
    pull = (
        b'{"code":11,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"s",'
        b'"commitOffset":"0","consumerGroup":"cg","maxMsgNums":32,"queueId":2,"queueOffset":"5",'
        b'"subVersion":"1","subscription":"*","suspendTimeoutMillis":"15000","sysFlag":6,"topic":"T"},'
        b'"flag":0,"language":"CPP","opaque":2147483647,"remark":"","version":333}\n'
    )
    cmd = decode_command(ref_frame(0, pull)[4:])
    assert cmd.opaque == 2**31 - 1
    assert cmd.ext_fields["queueId"] == "2"
    assert cmd.ext_fields["maxMsgNums"] == "32"
    assert cmd.ext_fields["sysFlag"] == "6"
    assert cmd.body == b""
    # a heartbeat carries only the three credential fields
    hb = (
        b'{"code":34,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":""},'
        b'"flag":0,"language":"CPP","opaque":3,"remark":"","version":333}\n'
    )
    body = b'{"clientID":"10.0.0.5@123#1","producerDataSet":[{"groupName":"pg"}]}\n'
    cmd = decode_command(ref_frame(0, hb, body)[4:])
    assert cmd.ext_fields == {"AccessKey": "", "OnsChannel": "ALIYUN", "Signature": ""}
    assert cmd.body == body


def test_decode_json_booleans_nulls_and_odd_values_in_ext_fields() -> None:
    header = (
        b'{"code":10,"extFields":{"t":true,"f":false,"n":null,"x":1.5,"neg":-3,"s":"v"},'
        b'"flag":0,"language":"CPP","opaque":1,"version":333}'
    )
    cmd = decode_command(ref_frame(0, header)[4:])
    assert cmd.ext_fields == {"t": "true", "f": "false", "x": "1.5", "neg": "-3", "s": "v"}
    assert cmd.remark is None


JAVA_HEADER_TEMPLATE = (
    '{{"code":34,"extFields":{{"k":"v"}},"flag":0,"language":{lang},"opaque":0,'
    '"serializeTypeCurrentRPC":"JSON","version":407}}'
)


@pytest.mark.parametrize(
    ("lang", "expected"),
    [
        ('"JAVA"', "JAVA"),
        ("0", "JAVA"),
        ('"CPP"', "CPP"),
        ("1", "CPP"),
        ("3", "PYTHON"),
        ("9", "GO"),
        ("12", "RUST"),
        ('"GO"', "GO"),
    ],
)
def test_decode_java_header_language_name_or_ordinal(lang: str, expected: str) -> None:
    header = JAVA_HEADER_TEMPLATE.format(lang=lang).encode()
    cmd = decode_command(ref_frame(0, header)[4:])
    assert cmd.language == expected
    assert cmd.code == 34 and cmd.version == 407 and cmd.ext_fields == {"k": "v"}


def test_decode_java_header_with_string_numbers() -> None:
    # fastjson on the Java side accepts numbers written as strings; so does our decoder
    header = b'{"code":"105","extFields":{},"flag":"1","language":"JAVA","opaque":"9","version":"407"}'
    cmd = decode_command(ref_frame(0, header)[4:])
    assert (cmd.code, cmd.flag, cmd.opaque, cmd.version) == (105, 1, 9, 407)
    assert cmd.is_response


def test_decode_minimal_header_defaults() -> None:
    # the C++ client tolerates a missing language or version; we do too
    cmd = decode_command(ref_frame(0, b'{"code":0,"opaque":4}')[4:])
    assert cmd.code == 0 and cmd.opaque == 4 and cmd.flag == 0 and cmd.version == 0
    assert cmd.ext_fields == {}
    assert cmd.remark is None


def test_json_round_trip_preserves_fields() -> None:
    cmd = RemotingCommand(
        code=310,
        opaque=-5,
        flag=3,
        language="GO",
        version=393,
        remark='ré\n"q"',
        ext_fields={"a": "1", "b": "", "ü": "\x00\x01"},
        body=b"\xff\x00body",
    )
    assert decode_command(cmd.encode()[4:]) == cmd


# -- binary (ROCKETMQ) header ----------------------------------------------------------------------


def test_binary_header_matches_rocketmq_serializable_layout() -> None:
    cmd = RemotingCommand(
        code=310,
        opaque=0x01020304,
        flag=0,
        language="JAVA",
        version=407,
        remark="ok",
        ext_fields={"topic": "T", "queueId": "3"},
        body=b"payload",
        serialize_type=BINARY,
    )
    header = ref_binary_header(
        code=310,
        language=0,
        version=407,
        opaque=0x01020304,
        flag=0,
        remark=b"ok",
        # entries in the dict's insertion order (Java's HashMap order is arbitrary; decoders don't care)
        ext=[(b"topic", b"T"), (b"queueId", b"3")],
    )
    assert cmd.encode() == ref_frame(1, header, b"payload")
    length, kind, header_len, _, _ = split_frame(cmd.encode())
    assert kind == 1
    assert struct.unpack_from(">I", cmd.encode(), 4)[0] == (1 << 24) | header_len
    assert length == 4 + header_len + len(b"payload")


def test_binary_fixed_part_offsets() -> None:
    cmd = RemotingCommand(
        code=105, opaque=-1, flag=1, language="CPP", version=333, serialize_type=BINARY, ext_fields={}
    )
    header = split_frame(cmd.encode())[3]
    assert len(header) == 2 + 1 + 2 + 4 + 4 + 4 + 4  # empty remark and extFields
    assert header[0:2] == b"\x00\x69"  # 105
    assert header[2] == 1  # CPP
    assert header[3:5] == b"\x01\x4d"  # 333
    assert header[5:9] == b"\xff\xff\xff\xff"  # -1
    assert header[9:13] == b"\x00\x00\x00\x01"
    assert header[13:17] == b"\x00\x00\x00\x00"  # remarkLen
    assert header[17:21] == b"\x00\x00\x00\x00"  # extLen


@pytest.mark.parametrize("remark", [None, ""])
def test_binary_remark_none_and_empty_both_encode_as_zero_length_and_decode_as_none(
    remark: str | None,
) -> None:
    cmd = RemotingCommand(code=1, remark=remark, serialize_type=BINARY)
    # language 3 = PYTHON, the default
    expected = ref_binary_header(code=1, language=3, version=407, opaque=0, flag=0, remark=None, ext=[])
    assert split_frame(cmd.encode())[3] == expected
    back = decode_command(cmd.encode()[4:])
    assert back.remark is None  # Java's readStr: length 0 -> null


def test_binary_multibyte_utf8_lengths_are_byte_counts() -> None:
    remark = "ошибка 错误 🚀"
    key, value = "ключ", "値🙂"
    ext = {key: value}
    cmd = RemotingCommand(code=1, remark=remark, ext_fields=ext, language="JAVA", serialize_type=BINARY)
    header = split_frame(cmd.encode())[3]
    expected = ref_binary_header(
        code=1,
        language=0,
        version=407,
        opaque=0,
        flag=0,
        remark=remark.encode("utf-8"),
        ext=[(key.encode("utf-8"), value.encode("utf-8"))],
    )
    assert header == expected
    assert struct.unpack_from(">i", header, 13)[0] == len(remark.encode("utf-8")) > len(remark)
    back = decode_command(cmd.encode()[4:])
    assert back == cmd


def test_decode_hand_built_binary_header() -> None:
    header = ref_binary_header(
        code=11,
        language=1,
        version=333,
        opaque=77,
        flag=2,
        remark="héllo".encode(),
        ext=[(b"consumerGroup", b"cg"), ("队列".encode(), b"7"), (b"empty", b"")],
    )
    cmd = decode_command(ref_frame(1, header, b"\x01\x02")[4:])
    assert cmd == RemotingCommand(
        code=11,
        opaque=77,
        flag=2,
        language="CPP",
        version=333,
        remark="héllo",
        ext_fields={"consumerGroup": "cg", "队列": "7", "empty": ""},
        body=b"\x01\x02",
        serialize_type=BINARY,
    )
    assert cmd.is_oneway


def test_binary_round_trip_every_language() -> None:
    for lang in LanguageCode:
        cmd = RemotingCommand(code=34, language=lang.name, serialize_type=BINARY, ext_fields={"a": "b"})
        header = split_frame(cmd.encode())[3]
        assert header[2] == lang.value
        assert decode_command(cmd.encode()[4:]).language == lang.name


def test_binary_unknown_language_name_is_sent_as_other() -> None:
    cmd = RemotingCommand(code=1, language="COBOL", serialize_type=BINARY)
    assert split_frame(cmd.encode())[3][2] == LanguageCode.OTHER == 7


# -- malformed payloads ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"\x00\x00\x00",
        struct.pack(">i", 10) + b"{}",  # header length beyond the frame
        struct.pack(">i", (2 << 24) | 2) + b"{}",  # unknown serialize type
        struct.pack(">I", (0xFF << 24) | 2) + b"{}",
        struct.pack(">i", 2) + b"[]",  # JSON header not an object
        struct.pack(">i", 5) + b"{oops",
        struct.pack(">i", 3) + b"\xff\xfe{",  # not UTF-8
        struct.pack(">i", 12) + b'{"code":[1]}',
        struct.pack(">i", 14) + b'{"code":"abc"}',
        struct.pack(">i", 17) + b'{"extFields":"x"}',
        struct.pack(">i", (1 << 24) | 5) + b"\x00\x01\x00\x00\x00",  # truncated binary header
    ],
)
def test_decode_command_rejects_malformed_with_protocol_error(payload: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        decode_command(payload)


def test_binary_header_with_overrunning_lengths_is_rejected() -> None:
    entry = [(b"k", b"v")]
    good = ref_binary_header(code=1, language=0, version=1, opaque=1, flag=0, remark=b"abc", ext=entry)
    # remarkLen says 1000
    bad_remark = good[:13] + struct.pack(">i", 1000) + good[17:]
    # extLen larger than what follows
    bad_ext = good[:20] + struct.pack(">i", 999) + good[24:]
    # an entry's value length overruns the extFields area
    entry_at = 24
    bad_entry = good[: entry_at + 3] + struct.pack(">i", 50) + good[entry_at + 7 :]
    for header in (bad_remark, bad_ext, bad_entry):
        with pytest.raises(RemoteProtocolError):
            decode_command(struct.pack(">i", (1 << 24) | len(header)) + header)
    assert decode_command(struct.pack(">i", (1 << 24) | len(good)) + good).ext_fields == {"k": "v"}


# -- codes spot check (docs/formats.md §2) -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("member", "value"),
    [
        (RequestCode.SEND_MESSAGE, 10),
        (RequestCode.PULL_MESSAGE, 11),
        (RequestCode.UPDATE_CONSUMER_OFFSET, 15),
        (RequestCode.HEART_BEAT, 34),
        (RequestCode.END_TRANSACTION, 37),
        (RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, 40),
        (RequestCode.REGISTER_BROKER, 103),
        (RequestCode.GET_ROUTEINFO_BY_TOPIC, 105),
        (RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, 206),
        (RequestCode.SEND_MESSAGE_V2, 310),
        (RequestCode.SEND_BATCH_MESSAGE, 320),
        (RequestCode.QUERY_DATA_VERSION, 322),
        (ResponseCode.SUCCESS, 0),
        (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, 3),
        (ResponseCode.FLUSH_DISK_TIMEOUT, 10),
        (ResponseCode.TOPIC_NOT_EXIST, 17),
        (ResponseCode.PULL_NOT_FOUND, 19),
        (ResponseCode.QUERY_NOT_FOUND, 22),
        (ResponseCode.SUBSCRIPTION_NOT_LATEST, 25),
        (ResponseCode.FLOW_CONTROL, 215),
    ],
)
def test_codes_match_facts(member: int, value: int) -> None:
    assert int(member) == value


def test_language_ordinals_match_facts() -> None:
    names = ["JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY"]
    names += ["OTHER", "HTTP", "GO", "PHP", "OMS", "RUST"]
    assert [(m.name, m.value) for m in LanguageCode] == [(n, i) for i, n in enumerate(names)]
