"""Compressed bodies (docs/formats.md §4.2): the store keeps the compressed bytes, the CRC covers
them, and consumers inflate zlib (compression type 0 or 0x300). Other types are refused."""

from __future__ import annotations

import struct
import zlib

import pytest

from ledgermq.errors import RemoteProtocolError
from ledgermq.protocol import sysflag as SF
from ledgermq.protocol.message import decode_record, decode_records, encode_record, inflate_body
from tests.protocol.golden import ref_crc

PLAIN = b"RocketMQ compressed body " * 400  # 10 KB, above both clients' thresholds
DEFLATED = zlib.compress(PLAIN, 5)


def _rec(sysflag: int, body: bytes = DEFLATED) -> bytearray:
    return encode_record(topic="TopicTest", body=body, sysflag=sysflag, properties="TAGS\x01A")


def test_sysflag_constants() -> None:
    assert (SF.COMPRESSED, SF.COMPRESSION_LZ4, SF.COMPRESSION_ZSTD, SF.COMPRESSION_ZLIB) == (
        1,
        0x100,
        0x200,
        0x300,
    )
    assert SF.COMPRESSION_TYPE_MASK == 0x700
    assert (SF.BORNHOST_V6, SF.STOREHOST_V6) == (0x10, 0x20)


@pytest.mark.parametrize("sysflag", [SF.COMPRESSED, SF.COMPRESSED | SF.COMPRESSION_ZLIB])
def test_zlib_body_inflates_on_request(sysflag: int) -> None:
    rec = _rec(sysflag)
    # Stored as given: TOTALSIZE counts the compressed bytes and BODYCRC covers them.
    assert len(rec) == 91 + len(DEFLATED) + len("TopicTest") + len("TAGS\x01A")
    assert struct.unpack_from(">i", rec, 8)[0] == ref_crc(DEFLATED)

    raw = decode_record(rec)
    assert raw.body == DEFLATED
    assert raw.body_crc == ref_crc(DEFLATED)

    inflated = decode_record(rec, inflate=True)
    assert inflated.body == PLAIN
    assert inflated.body_crc == ref_crc(DEFLATED)
    assert inflated.tags == "A"
    assert inflated.store_size == len(rec)


def test_java_deflater_style_streams_inflate() -> None:
    # Java uses Deflater (zlib wrapper) at level 5; any level must inflate.
    for level in (0, 1, 9):
        rec = _rec(SF.COMPRESSED, zlib.compress(b"abc" * 50, level))
        assert decode_record(rec, inflate=True).body == b"abc" * 50


def test_uncompressed_record_is_never_inflated() -> None:
    # Body happens to be zlib data, but COMPRESSED is clear: bytes come back untouched.
    for sysflag in (0, SF.COMPRESSION_ZLIB, SF.COMPRESSION_LZ4):
        assert decode_record(_rec(sysflag), inflate=True).body == DEFLATED


@pytest.mark.parametrize("kind", [SF.COMPRESSION_LZ4, SF.COMPRESSION_ZSTD, 0x400, 0x500, 0x600, 0x700], ids=hex)
def test_unsupported_compression_types_are_refused(kind: int) -> None:
    rec = _rec(SF.COMPRESSED | kind)
    with pytest.raises(RemoteProtocolError):
        decode_record(rec, inflate=True)
    with pytest.raises(RemoteProtocolError):
        decode_records(bytes(rec), inflate=True)
    with pytest.raises(RemoteProtocolError):
        inflate_body(DEFLATED, SF.COMPRESSED | kind)
    # Without inflating, the stored bytes are still readable (a broker only relays them).
    assert decode_record(rec).body == DEFLATED


@pytest.mark.parametrize("body", [b"", b"not zlib at all", DEFLATED[:-5], b"\x78\x9c" + b"\x00" * 20])
def test_corrupt_compressed_body_raises_protocol_error(body: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        decode_record(_rec(SF.COMPRESSED, body), inflate=True)
    with pytest.raises(RemoteProtocolError):
        inflate_body(body, SF.COMPRESSED)


def test_inflate_body_directly() -> None:
    assert inflate_body(DEFLATED, SF.COMPRESSED) == PLAIN
    assert inflate_body(DEFLATED, SF.COMPRESSED | SF.COMPRESSION_ZLIB) == PLAIN


def test_decode_records_inflates_each_record() -> None:
    other = zlib.compress(b"second")
    body = bytes(_rec(SF.COMPRESSED)) + bytes(_rec(0, b"plain")) + bytes(_rec(SF.COMPRESSED | 0x300, other))
    assert [r.body for r in decode_records(body, inflate=True)] == [PLAIN, b"plain", b"second"]
    assert [r.body for r in decode_records(body)] == [DEFLATED, b"plain", other]
