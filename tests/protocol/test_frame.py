"""FrameDecoder: splitting a TCP byte stream into RemotingCommand / BadFrame items (docs/formats.md §1).

Frames are built by hand with ``struct.pack`` (length = 4 + headerLen + bodyLen, header word =
type << 24 | headerLen). Hypothesis runs are derandomized so failures reproduce on every run.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledgermq.errors import RemoteProtocolError
from ledgermq.protocol.codes import LanguageCode, SerializeType
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.frame import DEFAULT_MAX_FRAME_SIZE, BadFrame, FrameDecoder

FUZZ = settings(max_examples=150, derandomize=True, deadline=None)
ROUND_TRIP = settings(max_examples=100, derandomize=True, deadline=None)


def ref_frame(serialize_type: int, header: bytes, body: bytes = b"") -> bytes:
    return (
        struct.pack(">i", 4 + len(header) + len(body))
        + struct.pack(">I", (serialize_type << 24) | len(header))
        + header
        + body
    )


def json_frame(code: int, opaque: int, body: bytes = b"", ext: str = "{}") -> bytes:
    header = (
        f'{{"code":{code},"extFields":{ext},"flag":0,"language":"JAVA","opaque":{opaque},'
        f'"serializeTypeCurrentRPC":"JSON","version":407}}'
    ).encode()
    return ref_frame(0, header, body)


def feed_chunks(decoder: FrameDecoder, data: bytes, sizes: Iterable[int]) -> list[RemotingCommand | BadFrame]:
    out: list[RemotingCommand | BadFrame] = []
    pos = 0
    for size in sizes:
        if pos >= len(data):
            break
        out += decoder.feed(data[pos : pos + size])
        pos += size
    if pos < len(data):
        out += decoder.feed(data[pos:])
    return out


def commands(items: list[RemotingCommand | BadFrame]) -> list[RemotingCommand]:
    assert all(isinstance(i, RemotingCommand) for i in items), items
    return [i for i in items if isinstance(i, RemotingCommand)]


FRAMES = [json_frame(105, 1, b""), json_frame(310, 2, b"body-two"), json_frame(34, 3, b"\x00" * 300)]
STREAM = b"".join(FRAMES)


# -- splitting -------------------------------------------------------------------------------------


def test_byte_by_byte() -> None:
    dec = FrameDecoder()
    out: list[RemotingCommand | BadFrame] = []
    for i in range(len(STREAM)):
        out += dec.feed(STREAM[i : i + 1])
        consumed = sum(len(f) for f in FRAMES[: len(out)])
        assert dec.buffered == i + 1 - consumed
    cmds = commands(out)
    assert [(c.code, c.opaque, c.body) for c in cmds] == [
        (105, 1, b""),
        (310, 2, b"body-two"),
        (34, 3, b"\x00" * 300),
    ]
    assert dec.buffered == 0


def test_byte_by_byte_yields_each_frame_exactly_when_its_last_byte_arrives() -> None:
    ends = set()
    acc = 0
    for f in FRAMES:
        acc += len(f)
        ends.add(acc)
    dec = FrameDecoder()
    stream = STREAM
    for i in range(len(stream)):
        got = dec.feed(stream[i : i + 1])
        if i + 1 in ends:
            assert len(got) == 1 and isinstance(got[0], RemotingCommand)
            assert dec.buffered == 0
        else:
            assert got == []
            assert dec.buffered > 0


def test_coalesced_frames_in_one_feed_keep_order_and_bodies() -> None:
    dec = FrameDecoder()
    cmds = commands(dec.feed(STREAM))
    assert [c.opaque for c in cmds] == [1, 2, 3]
    assert [c.body for c in cmds] == [b"", b"body-two", b"\x00" * 300]
    assert dec.buffered == 0


def test_partial_frame_waits_for_rest() -> None:
    first, second = json_frame(10, 1, b"abc"), json_frame(11, 2, b"defgh")
    dec = FrameDecoder()
    cut = len(second) // 2
    got = commands(dec.feed(first + second[:cut]))
    assert [c.opaque for c in got] == [1]
    assert dec.buffered == cut
    assert dec.feed(b"") == []
    assert dec.buffered == cut
    got = commands(dec.feed(second[cut:]))
    assert [(c.opaque, c.body) for c in got] == [(2, b"defgh")]
    assert dec.buffered == 0


def test_length_prefix_split_across_feeds() -> None:
    frame = json_frame(10, 9, b"x")
    dec = FrameDecoder()
    assert dec.feed(frame[:1]) == []
    assert dec.feed(frame[1:3]) == []
    assert dec.feed(frame[3:6]) == []
    got = commands(dec.feed(frame[6:]))
    assert got[0].opaque == 9 and got[0].body == b"x"


def test_accepts_bytearray_and_memoryview() -> None:
    dec = FrameDecoder()
    got = dec.feed(bytearray(STREAM[:50])) + dec.feed(memoryview(STREAM)[50:])
    assert [c.opaque for c in commands(got)] == [1, 2, 3]


def test_encoded_commands_round_trip_through_decoder() -> None:
    originals = [
        RemotingCommand.request(310, {"a": "pg", "e": 3}, b"msg", opaque=1),
        RemotingCommand.request(15, {"queueId": 0}, oneway=True, opaque=2),
        RemotingCommand.request(34, opaque=3).response(0, remark="ok", ext_fields={"x": True}),
    ]
    binary = RemotingCommand.request(11, {"k": "v"}, b"\x01", opaque=4)
    binary.serialize_type = SerializeType.ROCKETMQ
    originals.append(binary)
    stream = b"".join(c.encode() for c in originals)
    assert commands(FrameDecoder().feed(stream)) == originals


def test_buffer_is_compacted() -> None:
    """buffered counts unconsumed bytes; consumed bytes are dropped from the internal buffer."""
    frame = json_frame(310, 1, b"p" * 100)
    dec = FrameDecoder()
    half = len(frame) // 2
    stream = frame * 400
    pos = 0
    seen = 0
    # feed 1.5 frames at a time so a partial frame is always left behind
    while pos < len(stream):
        chunk = stream[pos : pos + len(frame) + half]
        pos += len(chunk)
        seen += len(commands(dec.feed(chunk)))
        assert dec.buffered == pos - seen * len(frame)
        assert dec.buffered < len(frame)
        # white-box: the backing store must not keep every byte ever fed
        assert len(dec._buf) <= 4 * len(frame)
    assert seen == 400
    assert dec.buffered == 0


# -- length checks ---------------------------------------------------------------------------------


def test_length_above_max_raises_before_body_arrives() -> None:
    dec = FrameDecoder(max_frame_size=1024)
    with pytest.raises(RemoteProtocolError):
        dec.feed(struct.pack(">i", 1025))


def test_length_at_max_is_accepted_and_waits() -> None:
    dec = FrameDecoder(max_frame_size=1024)
    assert dec.feed(struct.pack(">i", 1024)) == []
    assert dec.buffered == 4


def test_frame_of_exactly_max_size_decodes() -> None:
    header = b'{"code":1,"opaque":5}'
    body_len = 200 - 4 - len(header)
    frame = ref_frame(0, header, b"b" * body_len)
    assert struct.unpack(">i", frame[:4])[0] == 200
    got = commands(FrameDecoder(max_frame_size=200).feed(frame))
    assert got[0].opaque == 5 and len(got[0].body) == body_len
    with pytest.raises(RemoteProtocolError):
        FrameDecoder(max_frame_size=199).feed(frame)


def test_default_max_is_16_mib_and_checked_on_the_prefix_alone() -> None:
    assert DEFAULT_MAX_FRAME_SIZE == 16 * 1024 * 1024
    dec = FrameDecoder()
    with pytest.raises(RemoteProtocolError):
        dec.feed(struct.pack(">i", 16 * 1024 * 1024 + 1))
    with pytest.raises(RemoteProtocolError):
        FrameDecoder().feed(struct.pack(">i", 2**31 - 1))


def test_oversized_length_after_a_good_frame() -> None:
    dec = FrameDecoder(max_frame_size=4096)
    with pytest.raises(RemoteProtocolError):
        dec.feed(json_frame(1, 1) + struct.pack(">i", 5000))


@pytest.mark.parametrize("length", [0, 1, 2, 3, -1, -(2**31)])
def test_length_below_four_raises(length: int) -> None:
    with pytest.raises(RemoteProtocolError):
        FrameDecoder().feed(struct.pack(">i", length) + b"\x00" * 8)


def test_incomplete_length_prefix_does_not_raise() -> None:
    dec = FrameDecoder(max_frame_size=16)
    assert dec.feed(b"\x7f\xff\xff") == []  # would be far too big, but only 3 bytes are known
    assert dec.buffered == 3
    with pytest.raises(RemoteProtocolError):
        dec.feed(b"\xff")


# -- bad frames ------------------------------------------------------------------------------------


def test_broken_json_header_recovers_opaque_and_code_and_continues() -> None:
    broken = b'{"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA","opaque":42,"vers'
    dec = FrameDecoder()
    items = dec.feed(ref_frame(0, broken, b"body") + json_frame(34, 43))
    assert len(items) == 2
    bad, good = items
    assert isinstance(bad, BadFrame)
    assert bad.opaque == 42 and bad.code == 105
    assert isinstance(bad.reason, str) and bad.reason
    assert isinstance(good, RemotingCommand) and good.opaque == 43 and good.code == 34
    assert dec.buffered == 0


def test_broken_json_header_with_string_numbers_and_spaces() -> None:
    broken = b'{ "code" : "11", "opaque" : "-7", "extFields": {'
    [bad] = FrameDecoder().feed(ref_frame(0, broken))
    assert isinstance(bad, BadFrame)
    assert (bad.opaque, bad.code) == (-7, 11)


@pytest.mark.parametrize(
    "header",
    [b"garbage", b"", b"{", b'{"flag":0,', b"\xff\xfe\xfd", b'{"code":[1],"opaque":{}}'],
)
def test_broken_header_without_numbers_gives_none(header: bytes) -> None:
    dec = FrameDecoder()
    items = dec.feed(ref_frame(0, header, b"zz") + json_frame(1, 2))
    assert len(items) == 2
    bad, good = items
    assert isinstance(bad, BadFrame)
    assert bad.opaque is None and bad.code is None
    assert isinstance(good, RemotingCommand) and good.opaque == 2


def test_valid_json_with_bad_field_types_is_a_bad_frame_with_opaque() -> None:
    header = b'{"code":"abc","extFields":{},"flag":0,"opaque":12,"version":1}'
    [bad] = FrameDecoder().feed(ref_frame(0, header))
    assert isinstance(bad, BadFrame)
    assert bad.opaque == 12 and bad.code is None


@pytest.mark.parametrize("kind", [2, 3, 0x7F, 0xFF])
def test_unknown_serialize_type_is_a_bad_frame(kind: int) -> None:
    header = b'{"code":1,"opaque":3}'
    dec = FrameDecoder()
    items = dec.feed(ref_frame(kind, header) + json_frame(1, 4))
    assert len(items) == 2
    assert isinstance(items[0], BadFrame)
    assert isinstance(items[1], RemotingCommand) and items[1].opaque == 4


def test_header_length_beyond_frame_is_a_bad_frame() -> None:
    payload = struct.pack(">I", 100) + b"{}"
    frame = struct.pack(">i", len(payload)) + payload
    items = FrameDecoder().feed(frame + json_frame(1, 5))
    assert isinstance(items[0], BadFrame)
    assert isinstance(items[1], RemotingCommand) and items[1].opaque == 5


def test_truncated_binary_header_is_a_bad_frame() -> None:
    items = FrameDecoder().feed(ref_frame(1, b"\x00\x01\x00") + json_frame(1, 6))
    assert isinstance(items[0], BadFrame)
    assert isinstance(items[1], RemotingCommand) and items[1].opaque == 6


# -- fuzz ------------------------------------------------------------------------------------------


def _consume(dec: FrameDecoder, data: bytes, sizes: list[int]) -> list[RemotingCommand | BadFrame]:
    """Feed in chunks; RemoteProtocolError ends the stream (the connection would close)."""
    out: list[RemotingCommand | BadFrame] = []
    chunks = []
    pos = 0
    for size in [*sizes, len(data)]:
        chunks.append(data[pos : pos + size])
        pos += size
    for chunk in chunks:
        try:
            got = dec.feed(chunk)
        except RemoteProtocolError:
            break
        assert all(isinstance(item, RemotingCommand | BadFrame) for item in got), got
        out += got
    return out


CHUNKS = st.lists(st.integers(1, 64), max_size=40)


@FUZZ
@given(data=st.binary(max_size=400), sizes=CHUNKS)
def test_fuzz_arbitrary_bytes(data: bytes, sizes: list[int]) -> None:
    _consume(FrameDecoder(max_frame_size=1 << 16), data, sizes)


# Framing-valid payloads with random header words and contents: these reach decode_command.
_JSON_SCALARS = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8)
_JSON_VALUES = st.recursive(
    _JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
_HEADER_KEYS = st.sampled_from(["code", "opaque", "flag", "language", "version", "remark", "extFields"])


@st.composite
def _json_headers(draw: st.DrawFn) -> bytes:
    doc = draw(st.dictionaries(_HEADER_KEYS | st.text(max_size=4), _JSON_VALUES, max_size=7))
    text = json.dumps(doc)  # may contain NaN/Infinity, which is not JSON
    if draw(st.booleans()):
        cut = draw(st.integers(0, len(text)))
        text = text[:cut]
    return text.encode()


@st.composite
def _payloads(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from([0, 0, 0, 1, 1, 2, 0xFF]))
    header = draw(_json_headers()) if kind == 0 else draw(st.binary(max_size=80))
    declared = len(header) if draw(st.integers(0, 4)) else draw(st.integers(0, 0xFFFFFF))
    body = draw(st.binary(max_size=20))
    return struct.pack(">I", (kind << 24) | declared) + header + body


@st.composite
def _frames(draw: st.DrawFn) -> bytes:
    payload = draw(_payloads())
    return struct.pack(">i", len(payload)) + payload


@FUZZ
@given(frames=st.lists(_frames(), min_size=1, max_size=5), sizes=CHUNKS)
def test_fuzz_framed_garbage_yields_commands_or_bad_frames(frames: list[bytes], sizes: list[int]) -> None:
    dec = FrameDecoder()
    out = feed_chunks(dec, b"".join(frames), sizes)  # framing is valid: no RemoteProtocolError allowed
    assert len(out) == len(frames)
    assert all(isinstance(i, RemotingCommand | BadFrame) for i in out)
    assert dec.buffered == 0


def _maybe_wrong(draw: st.DrawFn, true_len: int, bits: int) -> int:
    """The true length most of the time, otherwise any value the field can hold."""
    if draw(st.integers(0, 3)):
        return true_len
    return draw(st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) | st.integers(0, true_len + 8))


_SHORT_BYTES = st.binary(max_size=6) | st.text(max_size=4).map(str.encode)


@st.composite
def _binary_garbage_headers(draw: st.DrawFn) -> bytes:
    """Structurally plausible binary headers, some with corrupted length fields or bad UTF-8."""
    fixed = draw(st.binary(min_size=13, max_size=13))
    remark = draw(_SHORT_BYTES)
    entries = b""
    for _ in range(draw(st.integers(0, 3))):
        key, value = draw(_SHORT_BYTES), draw(_SHORT_BYTES)
        entries += struct.pack(">h", _maybe_wrong(draw, len(key), 16)) + key
        entries += struct.pack(">i", _maybe_wrong(draw, len(value), 32)) + value
    return (
        fixed
        + struct.pack(">i", _maybe_wrong(draw, len(remark), 32))
        + remark
        + struct.pack(">i", _maybe_wrong(draw, len(entries), 32))
        + entries
        + draw(st.binary(max_size=3))  # trailing bytes inside the declared header
    )


@FUZZ
@given(headers=st.lists(_binary_garbage_headers(), min_size=1, max_size=4), sizes=CHUNKS)
def test_fuzz_corrupted_binary_headers(headers: list[bytes], sizes: list[int]) -> None:
    stream = b"".join(ref_frame(1, h, b"B") for h in headers)
    dec = FrameDecoder()
    out = feed_chunks(dec, stream, sizes)
    assert len(out) == len(headers)
    for item in out:
        assert isinstance(item, RemotingCommand | BadFrame)
        if isinstance(item, RemotingCommand):
            assert item.body == b"B"


# -- round trip of random commands -----------------------------------------------------------------

_I16 = st.integers(-(2**15), 2**15 - 1)
_I32 = st.integers(-(2**31), 2**31 - 1)


@st.composite
def _commands(draw: st.DrawFn) -> RemotingCommand:
    serialize_type = draw(st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ]))
    return RemotingCommand(
        code=draw(_I16),
        opaque=draw(_I32),
        flag=draw(_I32),
        language=draw(st.sampled_from([lc.name for lc in LanguageCode])),
        version=draw(_I16),
        remark=draw(st.none() | st.text(max_size=30)),
        ext_fields=draw(st.dictionaries(st.text(max_size=12), st.text(max_size=30), max_size=6)),
        body=draw(st.binary(max_size=300)),
        serialize_type=serialize_type,
    )


def _expected_after_decode(cmd: RemotingCommand) -> RemotingCommand:
    if cmd.serialize_type is SerializeType.ROCKETMQ and cmd.remark == "":
        # RocketMQSerializable writes null and "" the same way (length 0) and reads 0 back as null
        return RemotingCommand(**{**_fields(cmd), "remark": None})
    return cmd


def _fields(cmd: RemotingCommand) -> dict[str, object]:
    return {name: getattr(cmd, name) for name in RemotingCommand.__dataclass_fields__}


@ROUND_TRIP
@given(cmds=st.lists(_commands(), min_size=1, max_size=5), data=st.data())
def test_round_trip_random_commands_chunked(cmds: list[RemotingCommand], data: st.DataObject) -> None:
    stream = b"".join(c.encode() for c in cmds)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    dec = FrameDecoder()
    out: list[RemotingCommand | BadFrame] = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        out += dec.feed(stream[prev:cut])
        prev = cut
    assert out == [_expected_after_decode(c) for c in cmds]
    assert dec.buffered == 0
