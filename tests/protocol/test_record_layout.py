"""The record layout (protocol/record_layout.py) against the record codec: every place it
names is where the codec writes that field, for IPv4 and IPv6 hosts alike."""

from __future__ import annotations

import socket
import struct

import pytest

from ledgermq.client import records as R
from ledgermq.protocol import record_layout as L
from ledgermq.protocol import sysflag as SF
from ledgermq.protocol.message import MAX_HEAD_SIZE, body_end, decode_record, encode_record

FIELDS = dict(
    queue_id=3,
    flag=7,
    queue_offset=42,
    physical_offset=123_456_789_012,
    sysflag=SF.MULTI_TAGS,
    born_timestamp=1_700_000_000_123,
    store_timestamp=1_700_000_000_456,
    reconsume_times=2,
    prepared_transaction_offset=99,
)


def _record(born: str = "10.1.2.3", store: str = "192.168.0.10", body: bytes = b"hello") -> bytearray:
    return encode_record(
        topic="TopicTest", body=body, properties="TAGS\x01a", born_host=(born, 1), store_host=(store, 10911), **FIELDS
    )


def test_the_ipv4_fields_tile_the_header_in_stored_order() -> None:
    at = 0
    for name, (pos, size) in L.V4_FIELDS.items():
        assert pos == at, f"{name} at {pos}, expected {at}"
        at += size
    assert at == L.V4_BODY_POS == 88 and L.V4_MIN_RECORD_SIZE == 91


def test_every_ipv4_field_is_where_the_codec_writes_it() -> None:
    raw = bytes(_record())
    rec = decode_record(raw, 0)
    expected: dict[str, int | bytes] = {
        "totalSize": len(raw),
        "magicCode": R.MESSAGE_MAGIC_CODE,
        "bodyCRC": rec.body_crc,
        "queueId": 3,
        "flag": 7,
        "queueOffset": 42,
        "physicalOffset": 123_456_789_012,
        "sysFlag": rec.sysflag,
        "bornTimestamp": 1_700_000_000_123,
        "bornHost": socket.inet_aton("10.1.2.3") + struct.pack(">i", 1),
        "storeTimestamp": 1_700_000_000_456,
        "storeHost": socket.inet_aton("192.168.0.10") + struct.pack(">i", 10911),
        "reconsumeTimes": 2,
        "preparedTransactionOffset": 99,
        "bodyLength": 5,
    }
    assert expected.keys() == L.V4_FIELDS.keys()
    for name, (pos, size) in L.V4_FIELDS.items():
        value = raw[pos : pos + size]
        assert (value if isinstance(expected[name], bytes) else int.from_bytes(value, "big", signed=True)) == (
            expected[name]
        ), name
    assert raw[L.V4_BODY_POS : L.V4_BODY_POS + 5] == b"hello"


def test_the_reader_struct_unpacks_what_the_decoder_decodes() -> None:
    raw = bytes(_record())
    rec = decode_record(raw, 0)
    assert L.V4_HEAD.size == L.V4_BODY_POS and L.V4_HEAD.format == ">ii12xqqiq8xq4sii8xi"
    assert L.V4_HEAD.unpack_from(raw, 0) == (
        len(raw),
        R.MESSAGE_MAGIC_CODE,
        rec.queue_offset,
        rec.physical_offset,
        rec.sysflag,
        rec.born_timestamp,
        rec.store_timestamp,
        socket.inet_aton(rec.store_host[0]),
        rec.store_host[1],
        rec.reconsume_times,
        len(rec.body),
    )
    assert L.TOTALSIZE.unpack_from(raw, 0)[0] == len(raw)


@pytest.mark.parametrize(
    ("born", "store"),
    [("10.0.0.1", "10.0.0.2"), ("2001:db8::1", "10.0.0.2"), ("10.0.0.1", "2001:db8::2"), ("::1", "::2")],
)
def test_body_and_store_timestamp_places_follow_the_host_sizes(born: str, store: str) -> None:
    raw = bytes(_record(born, store, body=b"xyz"))
    sysflag = decode_record(raw, 0).sysflag
    assert raw[L.body_pos(sysflag) : L.body_pos(sysflag) + 3] == b"xyz"
    assert body_end(raw[:MAX_HEAD_SIZE]) == L.body_pos(sysflag) + 3
    ts = L.store_timestamp_pos(sysflag)
    assert int.from_bytes(raw[ts : ts + 8], "big") == 1_700_000_000_456
    assert raw[L.SYSFLAG_POS : L.SYSFLAG_POS + 4] == struct.pack(">i", sysflag)


def test_the_client_publishes_the_protocol_layout() -> None:
    assert R.V4_FIELDS is L.V4_FIELDS and R.V4_HEAD is L.V4_HEAD and R.TOTALSIZE is L.TOTALSIZE
    assert (R.V4_BODY_POS, R.V4_MIN_RECORD_SIZE) == (L.V4_BODY_POS, L.V4_MIN_RECORD_SIZE)
