"""The C decoder of pulled records (ledgermq/_record_decode.c, ``message.decode_records``)
against the Python loop it stands in for (``message._decode_records_py``).

C reads the plain records and hands every other one (IPv6 hosts, a body to inflate,
anything malformed) to the Python ``decode_record``, so for any bytes the answer must be
the Python loop's: the same records, field for field and of the same types, or the same
error with the same message. Random pull bodies come from hypothesis: records built by
``encode_record`` and by hand (topics and properties of any bytes, invalid UTF-8 among
them, separators anywhere, repeated and empty keys and values, hosts of both families,
compressed bodies, any sysflag), back to back, then damaged (cut short, a field
overwritten, a byte changed), read as bytes, bytearray and memoryview.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledgermq import speedups
from ledgermq.errors import RemoteProtocolError
from ledgermq.protocol import message as M
from ledgermq.protocol import sysflag as SF
from ledgermq.protocol.message import MessageRecord, _decode_records_py, decode_record, decode_records, encode_record

PURE = os.environ.get("LEDGERMQ_PURE_PYTHON", "") not in ("", "0")
needs_c = pytest.mark.skipif(
    speedups.recordc is None, reason="the compiled record path is not built or LEDGERMQ_PURE_PYTHON is set"
)
_SHORT = struct.Struct(">h")
Buffer = bytes | bytearray | memoryview

# -- records ---------------------------------------------------------------------------------
_ports = st.integers(-(2**31), 2**31 - 1) | st.sampled_from([0, 10911, 65535])
_ip_bytes = st.integers(0, 7).flatmap(lambda n: st.binary(min_size=16 if n == 7 else 4, max_size=16 if n == 7 else 4))
_hosts = st.tuples(_ip_bytes, _ports)  # mostly IPv4, which C reads
_i32 = st.integers(-(2**31), 2**31 - 1)
_i64 = st.integers(-(2**63), 2**63 - 1)
_ZIPPED = [SF.COMPRESSED, SF.COMPRESSED | SF.COMPRESSION_ZLIB, SF.COMPRESSED | SF.COMPRESSION_LZ4]
_usual_sysflags = st.sampled_from([0, 0, 0, 0, 0, SF.MULTI_TAGS, SF.TRANSACTION_COMMIT_TYPE, 0x7FFF_FF00, *_ZIPPED])
_sysflags = st.integers(0, 5).flatmap(lambda n: _i32 if n == 5 else _usual_sysflags)

_text_pieces = st.sampled_from(
    ["", "a", "ab", "TAGS", "UNIQ_KEY", "KEYS", "k1 k2", "\xe9", "\xe9t\xe9", "\U0001f600", "\u0663", "x\x00y"]
) | st.text(max_size=6)
_raw_pieces = st.one_of(
    _text_pieces.map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.sampled_from([b"\xff", b"\xe2\x82", b"\xed\xa0\x80", b"\xc3", b"\x80\x01", b"\x01", b"\x02", b"\x01\x01"]),
    st.binary(max_size=5),
)


@st.composite
def raw_properties(draw: st.DrawFn) -> bytes:
    """A stored properties text: pairs (a key or value may be empty, repeated, not UTF-8,
    hold a separator), joined with 0x02 or not, with a trailing 0x02 or not; or any bytes."""
    if draw(st.integers(0, 7)) == 0:
        return draw(st.binary(max_size=60))
    pairs = draw(
        st.lists(st.tuples(_raw_pieces, _raw_pieces, st.sampled_from([b"\x01", b"", b"\x01\x01"])), max_size=6)
    )
    text = b"\x02".join(key + sep + value for key, value, sep in pairs)
    return text + draw(st.sampled_from([b"", b"\x02", b"\x02\x02"]))


_topics = st.one_of(
    st.sampled_from([b"T", b"TopicTest", b"", b"T\xc3\xa9", b"\xff\xfeT", b"\xe2\x82", b"%RETRY%g"]),
    st.text(min_size=1, max_size=20).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.binary(max_size=255),
)


@st.composite
def hand_record(draw: st.DrawFn) -> bytes:
    """A record packed field by field: raw topic and properties bytes, raw host bytes (the
    sysflag's host bits from their lengths), a compressed body when the sysflag says so."""
    sysflag = draw(_sysflags)
    born, store = draw(_hosts), draw(_hosts)
    sysflag &= ~(SF.BORNHOST_V6 | SF.STOREHOST_V6)
    sysflag |= (SF.BORNHOST_V6 if len(born[0]) == 16 else 0) | (SF.STOREHOST_V6 if len(store[0]) == 16 else 0)
    body = draw(st.binary(max_size=64) | st.sampled_from([b"", b"x" * 1024]))
    if sysflag & SF.COMPRESSED and draw(st.integers(0, 3)):
        body = zlib.compress(body)
    topic, props = draw(_topics), draw(raw_properties())
    head = M._head_struct(len(born[0]) == 16, len(store[0]) == 16)
    total = head.size + len(body) + 1 + len(topic) + 2 + len(props)
    crc = M.body_crc(body) if draw(st.integers(0, 7)) else draw(_i32)
    fields = (draw(_i32), draw(_i32), draw(_i64), draw(_i64), sysflag, draw(_i64))  # queue id .. born time
    rest = (draw(_i64), store[0], store[1], draw(_i32), draw(_i64), len(body))
    packed = head.pack(total, M.MESSAGE_MAGIC_CODE, crc, *fields, born[0], born[1], *rest)
    return packed + body + bytes([len(topic)]) + topic + _SHORT.pack(len(props)) + props


_ip_text = st.integers(0, 7).flatmap(lambda n: st.ip_addresses(v=6 if n == 7 else 4).map(str))


@st.composite
def encoded_record(draw: st.DrawFn) -> bytes:
    """A record as the broker writes it (``encode_record``): UTF-8 text, usual ranges."""
    props = draw(st.lists(st.tuples(_text_pieces, _text_pieces), max_size=5))
    return bytes(
        encode_record(
            topic=draw(st.text(min_size=1, max_size=30).filter(lambda t: len(t.encode()) <= M.MAX_TOPIC_BYTES)),
            body=draw(st.binary(max_size=200)),
            queue_id=draw(_i32),
            flag=draw(_i32),
            properties="\x02".join(f"{k}\x01{v}" for k, v in props),
            sysflag=draw(_sysflags),
            born_timestamp=draw(_i64),
            born_host=(draw(_ip_text), draw(st.integers(0, 65535))),
            store_host=(draw(_ip_text), draw(st.integers(0, 65535))),
            reconsume_times=draw(_i32),
            prepared_transaction_offset=draw(_i64),
            queue_offset=draw(_i64),
            physical_offset=draw(_i64),
            store_timestamp=draw(_i64),
        )
    )


# What a record is damaged with: (offset in the record, struct format, value).
DAMAGE = st.one_of(
    st.tuples(st.just(4), st.just(">i"), st.sampled_from([M.BLANK_MAGIC_CODE, 0, M.MESSAGE_MAGIC_CODE + 1])),
    st.tuples(st.just(0), st.just(">i"), _i32 | st.integers(-2, 400)),  # TOTALSIZE
    st.tuples(st.just(8), st.just(">i"), _i32),  # BODYCRC
    st.tuples(st.just(36), st.just(">i"), st.sampled_from([0, 1, SF.BORNHOST_V6, SF.STOREHOST_V6, 0x31, -1])),
    st.tuples(st.just(39), st.just(">B"), st.integers(0, 255)),  # the sysflag's host and compression bits
    st.tuples(st.integers(76, 120), st.just(">i"), _i32 | st.integers(-3, 300)),  # around BODYLENGTH
    st.tuples(st.integers(0, 400), st.just(">B"), st.integers(0, 255)),  # a topic length, any byte
    st.tuples(st.integers(0, 400), st.just(">h"), st.integers(-(2**15), 2**15 - 1) | st.integers(-2, 200)),
)


@st.composite
def pull_body(draw: st.DrawFn) -> bytes:
    """Records back to back, some damaged, the whole maybe cut short or with bytes after it."""
    recs = draw(st.lists(hand_record() | encoded_record(), max_size=5))
    buf = bytearray()
    for rec in recs:
        start = len(buf)
        buf += rec
        for offset, fmt, value in draw(st.lists(DAMAGE, max_size=2)) if draw(st.booleans()) else []:
            if start + offset + struct.calcsize(fmt) <= len(buf):
                struct.pack_into(fmt, buf, start + offset, value)
    cut = draw(st.sampled_from(["none", "none", "cut", "tail"]))
    if cut == "cut" and buf:
        del buf[draw(st.integers(0, len(buf) - 1)) :]
    elif cut == "tail":
        buf += draw(st.binary(min_size=1, max_size=100))
    return bytes(buf)


# -- the comparison --------------------------------------------------------------------------
def outcome(decode: Callable[[], list[MessageRecord] | None]) -> tuple[str, Any]:
    """A decode's answer, comparable: the records with their fields' types, or the error."""
    try:
        records = decode()
    except Exception as exc:
        return "raised", (type(exc), str(exc))
    assert records is not None
    return "read", (records, [field_types(r) for r in records])


def field_types(rec: MessageRecord) -> list[Any]:
    """Dataclass equality lets bytearray equal bytes and True equal 1: the types, too."""
    kinds: list[Any] = [type(getattr(rec, name)) for name in MessageRecord.__slots__]
    kinds += [tuple(map(type, rec.born_host)), tuple(map(type, rec.store_host))]
    kinds += [type(x) for kv in rec.properties.items() for x in kv]
    return kinds


def views(data: bytes) -> list[Buffer]:
    return [data, bytearray(data), memoryview(data), memoryview(b"xyz" + data)[3:]]


def check_both(data: bytes, check_crc: bool, inflate: bool) -> tuple[str, Any]:
    expected = outcome(lambda: _decode_records_py(data, check_crc=check_crc, inflate=inflate))
    c = speedups.recordc
    for buf in views(data):
        assert outcome(lambda: decode_records(buf, check_crc=check_crc, inflate=inflate)) == expected  # noqa: B023
        if c is not None:
            got = outcome(lambda: c.decode_records(buf, check_crc, inflate, MessageRecord, decode_record))  # noqa: B023
            assert got == expected
    return expected


FLAGS = st.tuples(st.booleans(), st.booleans())  # (check_crc, inflate)
PROPERTY = settings(max_examples=600, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(data=pull_body(), flags=FLAGS)
def test_pull_bodies_decode_the_same(data: bytes, flags: tuple[bool, bool]) -> None:
    check_both(data, *flags)


@PROPERTY
@given(recs=st.lists(hand_record() | encoded_record(), min_size=1, max_size=6), flags=FLAGS)
def test_sound_bodies_decode_the_same(recs: list[bytes], flags: tuple[bool, bool]) -> None:
    check_both(b"".join(recs), *flags)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(data=st.binary(max_size=300), flags=FLAGS)
def test_any_bytes_decode_the_same(data: bytes, flags: tuple[bool, bool]) -> None:
    check_both(data, *flags)


# -- the plain records are C's own -----------------------------------------------------------
def plain(
    body: bytes = b"payload", properties: str = "TAGS\x01a\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01ABC", sysflag: int = 0
) -> bytes:
    return bytes(encode_record(topic="T", body=body, properties=properties, born_host=("10.1.2.3", 4), sysflag=sysflag))


def never_called(*args: Any, **kwargs: Any) -> MessageRecord:
    raise AssertionError(f"the slow path was called for {args[1:]} {kwargs}")


@needs_c
def test_plain_records_never_reach_the_python_decoder() -> None:
    """Else a C decoder that handed everything to Python would pass every comparison."""
    c = speedups.recordc
    assert c is not None
    zipped = plain(b"not zlib", sysflag=SF.COMPRESSED)  # left compressed: C's too
    data = plain() * 3 + plain(b"", "") + plain(b"z" * 5000, "a\x01b\x02a\x01c\x02\x02x\x01\x02\x01y") + zipped
    got = c.decode_records(data, True, False, MessageRecord, never_called)
    assert got == _decode_records_py(data, check_crc=True, inflate=False)
    assert len(got) == 6 and got[4].properties == {"a": "c"}


@pytest.mark.parametrize("bits", [SF.BORNHOST_V6, SF.STOREHOST_V6, SF.BORNHOST_V6 | SF.STOREHOST_V6])
@pytest.mark.parametrize("check_crc", [True, False])
def test_host_bits_set_on_an_ipv4_record(bits: int, check_crc: bool) -> None:
    """Its fields still add up read as IPv4: only the sysflag says the layout is another."""
    for body in (b"", b"x" * 12, b"y" * 40):
        data = bytearray(plain(body) + plain(b"after"))
        data[39] |= bits
        check_both(bytes(data), check_crc, False)


@needs_c
def test_what_c_leaves_to_python_goes_to_decode_record() -> None:
    c = speedups.recordc
    assert c is not None
    v6 = bytes(encode_record(topic="T", body=b"b", born_host=("::1", 1)))
    zipped = bytes(encode_record(topic="T", body=zlib.compress(b"b" * 100), sysflag=SF.COMPRESSED))
    data = plain() + v6 + plain() + zipped + plain()
    calls: list[int] = []

    def slow(buf: Buffer, pos: int, *, check_crc: bool, inflate: bool) -> MessageRecord:
        calls.append(pos)
        return decode_record(buf, pos, check_crc=check_crc, inflate=inflate)

    got = c.decode_records(data, True, True, MessageRecord, slow)
    assert got == _decode_records_py(data, check_crc=True, inflate=True)
    assert calls == [len(plain()), 2 * len(plain()) + len(v6)]
    assert got[3].body == b"b" * 100


@needs_c
def test_buffers_c_does_not_read_are_left_to_python() -> None:
    c = speedups.recordc
    assert c is not None
    data = plain() * 2
    for buf in (
        memoryview(data).cast("b"),
        memoryview(data + data)[::2],
        memoryview(data).cast("B", (2, len(data) // 2)),
    ):
        assert c.decode_records(buf, True, False, MessageRecord, never_called) is None
    assert c.decode_records("text", True, False, MessageRecord, never_called) is None


@needs_c
def test_the_buffer_is_released_on_every_path() -> None:
    """A bytearray still exported cannot be resized: each call must let it go."""
    c = speedups.recordc
    assert c is not None
    good, bad = bytearray(plain() * 2), bytearray(plain()[:-1])

    def refuse(*args: Any) -> MessageRecord:
        raise ValueError("no")

    assert len(c.decode_records(good, True, False, MessageRecord, never_called)) == 2
    with pytest.raises(RemoteProtocolError, match="size"):
        c.decode_records(bad, True, False, MessageRecord, decode_record)
    with pytest.raises(ValueError, match="no"):
        c.decode_records(good, True, False, refuse, decode_record)
    for buf in (good, bad):
        buf.extend(b"x")
        del buf[-1:]


def test_the_compiled_decoder_is_used_unless_turned_off() -> None:
    """A build that quietly lost the decoder would leave the client on the slow path."""
    if PURE:
        assert M._C_DECODE is None
    else:
        assert M._C_DECODE is not None, "ledgermq._recordc was not built with decode_records"
