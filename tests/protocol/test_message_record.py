"""Stored message record codec (docs/formats.md §4.1, §4.2): golden bytes, decode, limits,
multi-record bodies and the append-time fields."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledgermq.errors import LocalProtocolError, RemoteProtocolError
from ledgermq.protocol import message as M
from ledgermq.protocol import sysflag as SF
from ledgermq.protocol.message import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    MessageRecord,
    decode_record,
    decode_records,
    encode_record,
    record_length,
    set_append_fields,
    store_timestamp_pos,
)
from ledgermq.protocol.msgid import offset_msg_id
from ledgermq.protocol.properties import decode_properties
from tests.protocol.golden import (
    IP_10_1_2_3,
    IP_192_168_0_10,
    IP_2001_DB8__1,
    IP_2001_DB8__2,
    MAGIC_BYTES,
    golden_record,
    ref_crc,
)

PROPS = "TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x017F0000010A0B1A2B3C4D5E6F70810000\x02WAIT\x01true"
PROPS_DICT = {
    "TAGS": "TagA",
    "KEYS": "k1 k2",
    "UNIQ_KEY": "7F0000010A0B1A2B3C4D5E6F70810000",
    "WAIT": "true",
}
BODY = b"123456789"  # the CRC-32 check string; its CRC has the sign bit set

# The same message, once as encode_record keywords and once as golden_record arguments.
COMMON = dict(
    queue_id=3,
    flag=7,
    queue_offset=42,
    physical_offset=123_456_789_012,
    born_timestamp=1_700_000_000_123,
    store_timestamp=1_700_000_000_456,
    reconsume_times=2,
)

HOSTS = {
    "v4": (("10.1.2.3", 54321), IP_10_1_2_3),
    "v4store": (("192.168.0.10", 10911), IP_192_168_0_10),
    "v6": (("2001:db8::1", 54321), IP_2001_DB8__1),
    "v6store": (("2001:db8::2", 10911), IP_2001_DB8__2),
}


def _encode(born: str, store: str, *, sysflag: int = 0, prepared: int = 0, body: bytes = BODY) -> bytearray:
    return encode_record(
        topic="TopicTest",
        body=body,
        properties=PROPS,
        sysflag=sysflag,
        born_host=HOSTS[born][0],
        store_host=HOSTS[store][0],
        prepared_transaction_offset=prepared,
        **COMMON,
    )


def _golden(born: str, store: str, *, sysflag: int, prepared: int = 0, body: bytes = BODY) -> bytes:
    return golden_record(
        topic=b"TopicTest",
        body=body,
        props=PROPS.encode(),
        queue_id=COMMON["queue_id"],
        flag=COMMON["flag"],
        queue_offset=COMMON["queue_offset"],
        physical_offset=COMMON["physical_offset"],
        sysflag=sysflag,
        born_timestamp=COMMON["born_timestamp"],
        born_ip=HOSTS[born][1],
        born_port=HOSTS[born][0][1],
        store_timestamp=COMMON["store_timestamp"],
        store_ip=HOSTS[store][1],
        store_port=HOSTS[store][0][1],
        reconsume_times=COMMON["reconsume_times"],
        prepared_offset=prepared,
    )


# --------------------------------------------------------------------------- golden bytes


def test_golden_ipv4_record_matches_field_by_field_layout() -> None:
    got = _encode("v4", "v4store", prepared=99)
    want = _golden("v4", "v4store", sysflag=0, prepared=99)
    assert bytes(got) == want


def test_ipv4_offsets_match_the_facts_table() -> None:
    rec = bytes(_encode("v4", "v4store", prepared=99))
    u = struct.unpack_from
    assert u(">i", rec, 0)[0] == len(rec)
    assert rec[4:8] == MAGIC_BYTES
    assert u(">i", rec, 12)[0] == 3  # QUEUEID
    assert u(">i", rec, 16)[0] == 7  # FLAG
    assert u(">q", rec, 20)[0] == 42  # QUEUEOFFSET
    assert u(">q", rec, 28)[0] == 123_456_789_012  # PHYSICALOFFSET
    assert u(">i", rec, 36)[0] == 0  # SYSFLAG
    assert u(">q", rec, 40)[0] == 1_700_000_000_123  # BORNTIMESTAMP
    assert rec[48:52] == IP_10_1_2_3 and u(">i", rec, 52)[0] == 54321  # BORNHOST
    assert u(">q", rec, 56)[0] == 1_700_000_000_456  # STORETIMESTAMP
    assert rec[64:68] == IP_192_168_0_10 and u(">i", rec, 68)[0] == 10911  # STOREHOST
    assert u(">i", rec, 72)[0] == 2  # RECONSUMETIMES
    assert u(">q", rec, 76)[0] == 99  # PREPARED TRANSACTION OFFSET
    assert u(">i", rec, 84)[0] == len(BODY)
    assert rec[88 : 88 + len(BODY)] == BODY
    p = 88 + len(BODY)
    assert rec[p] == len(b"TopicTest") and rec[p + 1 : p + 10] == b"TopicTest"
    assert u(">h", rec, p + 10)[0] == len(PROPS.encode())
    assert rec[p + 12 :] == PROPS.encode()


def test_ipv4_totalsize_is_91_plus_body_topic_props() -> None:
    for body, topic, props in [(b"", "T", ""), (BODY, "TopicTest", PROPS), (b"x" * 5000, "主题", "K\x01值")]:
        rec = encode_record(topic=topic, body=body, properties=props)
        expected = 91 + len(body) + len(topic.encode()) + len(props.encode())
        assert len(rec) == expected
        assert struct.unpack_from(">i", rec, 0)[0] == expected
        assert record_length(len(body), len(topic.encode()), len(props.encode())) == expected


@pytest.mark.parametrize(
    ("born", "store", "bits"),
    [
        ("v6", "v4store", 0x10),
        ("v4", "v6store", 0x20),
        ("v6", "v6store", 0x30),
    ],
)
def test_golden_ipv6_records(born: str, store: str, bits: int) -> None:
    got = _encode(born, store)
    want = _golden(born, store, sysflag=bits)
    assert bytes(got) == want
    extra = 12 * bin(bits).count("1")
    assert len(got) == 91 + extra + len(BODY) + len(b"TopicTest") + len(PROPS.encode())
    assert record_length(len(BODY), 9, len(PROPS.encode()), bits) == len(got)
    assert struct.unpack_from(">i", got, 36)[0] == bits


def test_ipv6_born_host_shifts_store_fields_by_12() -> None:
    rec = bytes(_encode("v6", "v4store"))
    assert rec[48:64] == IP_2001_DB8__1 and struct.unpack_from(">i", rec, 64)[0] == 54321
    assert struct.unpack_from(">q", rec, 68)[0] == COMMON["store_timestamp"]
    assert rec[76:80] == IP_192_168_0_10


def test_sysflag_other_bits_kept_and_host_bits_follow_the_hosts() -> None:
    # Stale v6 bits are cleared for IPv4 hosts, other bits pass through untouched.
    rec = encode_record(topic="T", body=b"b", sysflag=0x30 | SF.MULTI_TAGS | SF.TRANSACTION_COMMIT_TYPE)
    assert struct.unpack_from(">i", rec, 36)[0] == SF.MULTI_TAGS | SF.TRANSACTION_COMMIT_TYPE
    rec6 = encode_record(topic="T", body=b"b", sysflag=SF.MULTI_TAGS, born_host=("::1", 1))
    assert struct.unpack_from(">i", rec6, 36)[0] == SF.MULTI_TAGS | SF.BORNHOST_V6


def test_ipv4_mapped_ipv6_host_is_stored_as_ipv4() -> None:
    rec = encode_record(topic="T", body=b"b", born_host=("::ffff:10.1.2.3", 5), store_host=("::ffff:c0a8:a", 6))
    assert len(rec) == 91 + 1 + 1
    assert struct.unpack_from(">i", rec, 36)[0] == 0
    assert rec[48:52] == IP_10_1_2_3 and rec[64:68] == IP_192_168_0_10
    dec = decode_record(rec)
    assert dec.born_host == ("10.1.2.3", 5) and dec.store_host == ("192.168.0.10", 6)


def test_bodycrc_is_masked_crc32_of_the_body() -> None:
    rec = encode_record(topic="T", body=BODY)
    # CRC-32/IEEE check value of "123456789" is 0xCBF43926; the sign bit is cleared.
    assert struct.unpack_from(">I", rec, 8)[0] == 0x4BF43926 == ref_crc(BODY)
    assert struct.unpack_from(">I", encode_record(topic="T", body=b""), 8)[0] == 0


def test_explicit_crc_is_written_verbatim() -> None:
    rec = encode_record(topic="T", body=BODY, crc=12345)
    assert struct.unpack_from(">i", rec, 8)[0] == 12345
    with pytest.raises(RemoteProtocolError):
        decode_record(rec)
    assert decode_record(rec, check_crc=False).body_crc == 12345


def test_encode_accepts_memoryview_body() -> None:
    assert encode_record(topic="T", body=memoryview(BODY)) == encode_record(topic="T", body=BODY)


# --------------------------------------------------------------------------- decode


def _assert_all_fields(rec: MessageRecord, born: str, store: str, sysflag: int, prepared: int, size: int) -> None:
    assert rec.topic == "TopicTest"
    assert rec.body == BODY
    assert rec.queue_id == 3
    assert rec.flag == 7
    assert rec.queue_offset == 42
    assert rec.physical_offset == 123_456_789_012
    assert rec.sysflag == sysflag
    assert rec.born_timestamp == 1_700_000_000_123
    assert rec.born_host == HOSTS[born][0]
    assert rec.store_timestamp == 1_700_000_000_456
    assert rec.store_host == HOSTS[store][0]
    assert rec.reconsume_times == 2
    assert rec.prepared_transaction_offset == prepared
    assert rec.properties == PROPS_DICT
    assert rec.body_crc == 0x4BF43926
    assert rec.store_size == size


@pytest.mark.parametrize(
    ("born", "store", "bits"),
    [("v4", "v4store", 0), ("v6", "v4store", 0x10), ("v4", "v6store", 0x20), ("v6", "v6store", 0x30)],
)
def test_decode_golden_returns_every_field(born: str, store: str, bits: int) -> None:
    sysflag = bits | SF.TRANSACTION_COMMIT_TYPE
    golden = _golden(born, store, sysflag=sysflag, prepared=777)
    for buf in (golden, bytearray(golden), memoryview(golden)):
        _assert_all_fields(decode_record(buf), born, store, sysflag, 777, len(golden))


def test_decode_at_nonzero_position() -> None:
    golden = _golden("v6", "v4store", sysflag=0x10)
    buf = b"\xee" * 13 + golden + b"\xff" * 5
    # Trailing bytes after the record do not matter to decode_record (TOTALSIZE bounds it).
    _assert_all_fields(decode_record(buf, 13), "v6", "v4store", 0x10, 0, len(golden))


def test_record_properties_helpers() -> None:
    rec = decode_record(encode_record(topic="T", body=b"", properties=PROPS, store_host=("127.0.0.1", 10911)))
    assert rec.tags == "TagA"
    assert rec.keys == ["k1", "k2"]
    assert rec.offset_msg_id == "7F00000100002A9F0000000000000000"
    bare = decode_record(encode_record(topic="T", body=b""))
    assert bare.tags is None and bare.keys == [] and bare.properties == {}


def test_utf8_topic_and_properties_round_trip() -> None:
    rec = decode_record(encode_record(topic="主题-ü", body=b"\x00\xff", properties="键\x01值\x02TAGS\x01标签"))
    assert rec.topic == "主题-ü"
    assert rec.body == b"\x00\xff"
    assert rec.properties == {"键": "值", "TAGS": "标签"}


def test_magic_constants_are_the_java_ints() -> None:
    assert struct.pack(">i", MESSAGE_MAGIC_CODE) == bytes.fromhex("DAA320A7")
    assert struct.pack(">i", BLANK_MAGIC_CODE) == bytes.fromhex("CBD43194")


def _patched(rec: bytes | bytearray, offset: int, fmt: str, value: int) -> bytearray:
    out = bytearray(rec)
    struct.pack_into(fmt, out, offset, value)
    return out


_REC = _golden("v4", "v4store", sysflag=0)  # built without the codec, so collection never depends on it
_PROPS_LEN_POS = 88 + len(BODY) + 1 + 9
_BAD_RECORDS = {
    "empty": b"",
    "seven bytes": _REC[:7],
    "bad magic": _patched(_REC, 4, ">I", 0xDAA320A8),
    "blank magic": _patched(_REC, 4, ">I", 0xCBD43194),
    "size beyond buffer": _patched(_REC, 0, ">i", len(_REC) + 1),
    "size below minimum": _patched(_REC, 0, ">i", 90),
    "negative size": _patched(_REC, 0, ">i", -1),
    "size smaller than fields": _patched(_REC, 0, ">i", len(_REC) - 1),
    "negative body length": _patched(_REC, 84, ">i", -1),
    "body overruns record": _patched(_REC, 84, ">i", len(_REC)),
    "props length too long": _patched(_REC, _PROPS_LEN_POS, ">h", len(PROPS) + 1),
    "props length too short": _patched(_REC, _PROPS_LEN_POS, ">h", len(PROPS) - 1),
    "props length negative": _patched(_REC, _PROPS_LEN_POS, ">h", -1),
    "crc mismatch": _patched(_REC, 8, ">i", ref_crc(BODY) ^ 1),
    "truncated by one": _REC[:-1],
}


@pytest.mark.parametrize("name", sorted(_BAD_RECORDS))
def test_decode_rejections(name: str) -> None:
    with pytest.raises(RemoteProtocolError):
        decode_record(_BAD_RECORDS[name])


def test_rejection_fixtures_are_otherwise_valid() -> None:
    # Guard for the table above: the unpatched record decodes and its properties sit where assumed.
    assert decode_record(_REC).properties == PROPS_DICT
    assert struct.unpack_from(">h", _REC, _PROPS_LEN_POS)[0] == len(PROPS)


def test_record_padded_inside_totalsize_is_rejected() -> None:
    rec = bytes(_encode("v4", "v4store"))
    padded = _patched(rec + b"\x00", 0, ">i", len(rec) + 1)
    with pytest.raises(RemoteProtocolError):
        decode_record(padded)


def test_v6_sysflag_on_a_record_too_short_for_v6_hosts() -> None:
    # An IPv4-sized record whose SYSFLAG claims IPv6 hosts must not be read past its end.
    rec = encode_record(topic="T", body=b"")
    for bits in (0x10, 0x20, 0x30):
        with pytest.raises(RemoteProtocolError):
            decode_record(_patched(rec, 36, ">i", bits), check_crc=False)


# --------------------------------------------------------------------------- decode_records


def test_decode_records_splits_back_to_back_records() -> None:
    parts = [_encode("v4", "v4store"), _encode("v6", "v6store"), _encode("v4", "v6store", body=b"")]
    recs = decode_records(b"".join(parts))
    assert [r.store_size for r in recs] == [len(p) for p in parts]
    assert [r.born_host for r in recs] == [HOSTS["v4"][0], HOSTS["v6"][0], HOSTS["v4"][0]]
    assert [r.body for r in recs] == [BODY, BODY, b""]
    assert decode_records(b"") == []
    assert decode_records(memoryview(bytearray(b"".join(parts))))[1].store_host == HOSTS["v6store"][0]


def test_decode_records_rejects_trailing_garbage_and_bad_crc() -> None:
    good = bytes(_encode("v4", "v4store"))
    for tail in (b"\x00", b"\x00" * 8, good[:50]):
        with pytest.raises(RemoteProtocolError):
            decode_records(good + tail)
    corrupt = bytearray(good)
    corrupt[90] ^= 0x01  # inside the body
    with pytest.raises(RemoteProtocolError):
        decode_records(good + corrupt)
    assert len(decode_records(good + corrupt, check_crc=False)) == 2


# --------------------------------------------------------------------------- encode limits


def test_topic_length_limits() -> None:
    assert decode_record(encode_record(topic="t" * 127, body=b"")).topic == "t" * 127
    for topic in ("", "t" * 128, "é" * 64):  # "é" * 64 is 64 characters but 128 bytes
        with pytest.raises(LocalProtocolError):
            encode_record(topic=topic, body=b"")


def test_properties_length_limits() -> None:
    ok = "K\x01" + "v" * (32767 - 2)
    rec = encode_record(topic="T", body=b"", properties=ok)
    assert len(rec) == 91 + 1 + 32767
    assert decode_record(rec).properties == {"K": "v" * 32765}
    with pytest.raises(LocalProtocolError):
        encode_record(topic="T", body=b"", properties=ok + "v")
    with pytest.raises(LocalProtocolError):  # the limit is in bytes, not characters
        encode_record(topic="T", body=b"", properties="K\x01" + "值" * 10923)


# --------------------------------------------------------------------------- append-time fields


def test_store_timestamp_position() -> None:
    assert store_timestamp_pos(0) == 56
    assert store_timestamp_pos(SF.STOREHOST_V6) == 56
    assert store_timestamp_pos(SF.BORNHOST_V6) == 68
    assert store_timestamp_pos(SF.BORNHOST_V6 | SF.STOREHOST_V6) == 68


@pytest.mark.parametrize(
    ("born", "store", "ts_pos"),
    [("v4", "v4store", 56), ("v4", "v6store", 56), ("v6", "v4store", 68), ("v6", "v6store", 68)],
)
@pytest.mark.parametrize("as_view", [False, True])
def test_set_append_fields(born: str, store: str, ts_pos: int, as_view: bool) -> None:
    rec = encode_record(
        topic="TopicTest",
        body=BODY,
        properties=PROPS,
        born_host=HOSTS[born][0],
        store_host=HOSTS[store][0],
        born_timestamp=1,
    )
    at = 17
    before = bytearray(b"\xaa" * at) + rec + bytearray(b"\xbb" * 9)
    buf = bytearray(before)
    target = memoryview(buf) if as_view else buf
    set_append_fields(target, at, 5, 1 << 40, 1_700_000_000_999)

    assert struct.unpack_from(">q", buf, at + 20)[0] == 5
    assert struct.unpack_from(">q", buf, at + 28)[0] == 1 << 40
    assert struct.unpack_from(">q", buf, at + ts_pos)[0] == 1_700_000_000_999
    changed = {i for i in range(len(buf)) if buf[i] != before[i]}
    allowed = set(range(at + 20, at + 36)) | set(range(at + ts_pos, at + ts_pos + 8))
    assert changed and changed <= allowed

    dec = decode_record(buf, at)  # CRC still matches: the filled fields are outside it
    assert (dec.queue_offset, dec.physical_offset, dec.store_timestamp) == (5, 1 << 40, 1_700_000_000_999)
    assert dec.born_timestamp == 1
    assert dec.born_host == HOSTS[born][0] and dec.store_host == HOSTS[store][0]
    assert dec.body == BODY and dec.properties == PROPS_DICT


# --------------------------------------------------------------------------- generative round trip

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
ADDR = st.one_of(
    st.ip_addresses(v=4),
    st.ip_addresses(v=6).filter(lambda a: a.ipv4_mapped is None),
).map(str)
HOST = st.tuples(ADDR, st.integers(0, 65535))
TOPIC = st.text(min_size=1, max_size=60).filter(lambda t: len(t.encode()) <= 127)


@settings(max_examples=150, derandomize=True, deadline=None)
@given(
    topic=TOPIC,
    body=st.binary(max_size=300),
    props=st.text(max_size=80),
    ints32=st.tuples(INT32, INT32, INT32, INT32),
    ints64=st.tuples(INT64, INT64, INT64, INT64, INT64),
    born_host=HOST,
    store_host=HOST,
)
def test_encode_decode_round_trip(
    topic: str,
    body: bytes,
    props: str,
    ints32: tuple[int, int, int, int],
    ints64: tuple[int, int, int, int, int],
    born_host: tuple[str, int],
    store_host: tuple[str, int],
) -> None:
    queue_id, flag, sysflag, reconsume = ints32
    born_ts, prepared, queue_offset, phys, store_ts = ints64
    rec = encode_record(
        topic=topic,
        body=body,
        queue_id=queue_id,
        flag=flag,
        properties=props,
        sysflag=sysflag,
        born_timestamp=born_ts,
        born_host=born_host,
        store_host=store_host,
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        queue_offset=queue_offset,
        physical_offset=phys,
        store_timestamp=store_ts,
    )
    born_v6, store_v6 = ":" in born_host[0], ":" in store_host[0]
    host_bits = (0x10 if born_v6 else 0) | (0x20 if store_v6 else 0)
    assert len(rec) == 91 + len(body) + len(topic.encode()) + len(props.encode()) + 12 * (born_v6 + store_v6)
    dec = decode_record(rec)
    assert dec.sysflag == (sysflag & ~0x30) | host_bits
    assert (dec.topic, dec.body, dec.born_host, dec.store_host) == (topic, body, born_host, store_host)
    assert dec.properties == decode_properties(props)
    assert (dec.queue_id, dec.flag, dec.reconsume_times) == (queue_id, flag, reconsume)
    assert (dec.born_timestamp, dec.prepared_transaction_offset) == (born_ts, prepared)
    assert (dec.queue_offset, dec.physical_offset, dec.store_timestamp) == (queue_offset, phys, store_ts)
    assert (dec.store_size, dec.body_crc) == (len(rec), zlib.crc32(body) & 0x7FFFFFFF)


@pytest.mark.parametrize(
    "born, store", [("10.0.0.1", "10.1.2.3"), ("::1", "10.1.2.3"), ("10.0.0.1", "fe80::2"), ("::1", "::2")]
)
def test_fixed_fields_read_in_place_agree_with_a_full_decode(born: str, store: str) -> None:
    """A DLedger leader answers a send from these two helpers instead of decoding the record."""
    rec = M.encode_record(
        topic="T",
        body=b"payload",
        properties="KEYS\x01k\x02",
        born_host=(born, 1234),
        store_host=(store, 10911),
        queue_offset=77,
        store_timestamp=1_700_000_000_123,
    )
    decoded = M.decode_record(rec)
    padded = bytearray(b"\xee" * 5) + rec
    for buf, at in ((rec, 0), (padded, 5)):
        assert M.queue_offset_and_store_time(buf, at) == (77, 1_700_000_000_123)
        assert M.offset_msg_id_of(buf, 4096, at) == offset_msg_id(decoded.store_host, 4096)
