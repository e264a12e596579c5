"""Independent reference builders for the protocol tests.

Everything here is written from the layout tables in docs/formats.md §4 with plain
``struct.pack`` calls, one field at a time, and deliberately shares no code or
``Struct`` definitions with ``ledgermq.protocol``: a golden test that reused the
codec's own format strings would only prove the codec agrees with itself.
"""

from __future__ import annotations

import struct
import zlib

MAGIC_BYTES = bytes.fromhex("DAA320A7")  # §4.1 field 2, as it appears on disk
BLANK_MAGIC_BYTES = bytes.fromhex("CBD43194")

# Packed addresses, spelled out by hand rather than computed with ipaddress/socket.
IP_127_0_0_1 = bytes([127, 0, 0, 1])
IP_10_1_2_3 = bytes([10, 1, 2, 3])
IP_192_168_0_10 = bytes([192, 168, 0, 10])
IP_2001_DB8__1 = bytes.fromhex("20010db8000000000000000000000001")
IP_2001_DB8__2 = bytes.fromhex("20010db8000000000000000000000002")


def ref_crc(body: bytes) -> int:
    """§4.1 field 3: java.util.zip.CRC32 with the sign bit cleared."""
    return zlib.crc32(body) & 0x7FFFFFFF


def golden_record(
    *,
    topic: bytes,
    body: bytes,
    props: bytes,
    queue_id: int,
    flag: int,
    queue_offset: int,
    physical_offset: int,
    sysflag: int,
    born_timestamp: int,
    born_ip: bytes,
    born_port: int,
    store_timestamp: int,
    store_ip: bytes,
    store_port: int,
    reconsume_times: int,
    prepared_offset: int,
    crc: int | None = None,
) -> bytes:
    """One stored record, field by field in the order of the §4.1 table."""
    assert len(born_ip) in (4, 16) and len(store_ip) in (4, 16)
    fields_after_size = [
        MAGIC_BYTES,  # 2 MAGICCODE
        struct.pack(">I", ref_crc(body) if crc is None else crc),  # 3 BODYCRC
        struct.pack(">i", queue_id),  # 4 QUEUEID
        struct.pack(">i", flag),  # 5 FLAG
        struct.pack(">q", queue_offset),  # 6 QUEUEOFFSET
        struct.pack(">q", physical_offset),  # 7 PHYSICALOFFSET
        struct.pack(">i", sysflag),  # 8 SYSFLAG
        struct.pack(">q", born_timestamp),  # 9 BORNTIMESTAMP
        born_ip + struct.pack(">i", born_port),  # 10 BORNHOST
        struct.pack(">q", store_timestamp),  # 11 STORETIMESTAMP
        store_ip + struct.pack(">i", store_port),  # 12 STOREHOST
        struct.pack(">i", reconsume_times),  # 13 RECONSUMETIMES
        struct.pack(">q", prepared_offset),  # 14 PREPARED TRANSACTION OFFSET
        struct.pack(">i", len(body)) + body,  # 15 BODY
        struct.pack(">b", len(topic)) + topic,  # 16 TOPIC (int8 length)
        struct.pack(">h", len(props)) + props,  # 17 PROPERTIES (int16 length)
    ]
    rest = b"".join(fields_after_size)
    return struct.pack(">i", 4 + len(rest)) + rest  # 1 TOTALSIZE, this field included


def golden_batch_entry(*, flag: int, body: bytes, props: bytes, magic: int = 0, crc: int = 0) -> bytes:
    """One SEND_BATCH_MESSAGE entry per §4.6."""
    return (
        struct.pack(">i", 22 + len(body) + len(props))  # TOTALSIZE
        + struct.pack(">i", magic)  # MAGIC (0 from clients)
        + struct.pack(">i", crc)  # BODYCRC (0 from clients)
        + struct.pack(">i", flag)  # FLAG
        + struct.pack(">i", len(body))
        + body
        + struct.pack(">h", len(props))
        + props
    )


def ref_java_hash(text: str) -> int:
    """Java String.hashCode, computed over code points with explicit surrogate splitting.

    Deliberately a different route from the codec (which encodes to UTF-16-BE): each code
    point above the BMP is split into its high and low surrogate by arithmetic.
    """
    h = 0
    for ch in text:
        cp = ord(ch)
        if cp > 0xFFFF:
            cp -= 0x10000
            units = (0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF))
        else:
            units = (cp,)
        for u in units:
            h = (h * 31 + u) % (1 << 32)
    return h - (1 << 32) if h >= (1 << 31) else h


def java_length(text: str) -> int:
    """Java String.length(): UTF-16 code units."""
    return sum(2 if ord(ch) > 0xFFFF else 1 for ch in text)


def ref_string2properties(text: str) -> dict[str, str]:
    """Property parsing as §4.3 describes it (split on 0x02, skip segments shorter than
    3 Java characters, key before the first 0x01 must be non-empty, value non-empty;
    a later duplicate key replaces an earlier one, as HashMap.put does)."""
    out: dict[str, str] = {}
    for segment in text.split("\x02"):
        if java_length(segment) < 3 or "\x01" not in segment:
            continue
        cut = segment.index("\x01")
        key, value = segment[:cut], segment[cut + 1 :]
        if key and value:
            out[key] = value
    return out
