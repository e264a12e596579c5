"""Where each field of a stored message record sits: the one description of the layout
that every reader of record bytes takes its offsets from.

The record codec (``protocol.message``), the store's in-place readers (recovery, dispatch,
record checks) and the Spark source's column decoder (through ``client.records``) all read
records field by field at fixed offsets. The offsets are RocketMQ 4.x's
(``MessageDecoder``/``CommitLog``); they live here once, so no reader carries a copy of
its own that could drift.

The fields up to BORNHOST have fixed places. A host is 8 bytes (IPv4 address, int32 port)
or 20 (IPv6), chosen per host by a SYSFLAG bit, so every field after the born host moves
with it. ``V4_FIELDS`` gives the places of every header field of a record whose two hosts
are IPv4 (the common case, which fast readers decode directly); ``body_pos`` gives where
any record's body starts.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from ledgermq.protocol import sysflag as SF

TOTALSIZE_POS: Final = 0
MAGIC_POS: Final = 4
BODYCRC_POS: Final = 8
QUEUEID_POS: Final = 12
FLAG_POS: Final = 16
QUEUEOFFSET_POS: Final = 20
PHYSICALOFFSET_POS: Final = 28
SYSFLAG_POS: Final = 36
BORNTIMESTAMP_POS: Final = 40
BORNHOST_POS: Final = 48

IPV4_HOST_SIZE: Final = 8  # 4-byte address, int32 port
IPV6_HOST_SIZE: Final = 20  # 16-byte address, int32 port

V4_FIELDS: Final[Mapping[str, tuple[int, int]]] = MappingProxyType(
    {
        # RocketMQ's field name: (offset in the record, size in bytes), both hosts IPv4
        "totalSize": (TOTALSIZE_POS, 4),
        "magicCode": (MAGIC_POS, 4),
        "bodyCRC": (BODYCRC_POS, 4),
        "queueId": (QUEUEID_POS, 4),
        "flag": (FLAG_POS, 4),
        "queueOffset": (QUEUEOFFSET_POS, 8),
        "physicalOffset": (PHYSICALOFFSET_POS, 8),
        "sysFlag": (SYSFLAG_POS, 4),
        "bornTimestamp": (BORNTIMESTAMP_POS, 8),
        "bornHost": (BORNHOST_POS, IPV4_HOST_SIZE),
        "storeTimestamp": (BORNHOST_POS + IPV4_HOST_SIZE, 8),
        "storeHost": (BORNHOST_POS + IPV4_HOST_SIZE + 8, IPV4_HOST_SIZE),
        "reconsumeTimes": (BORNHOST_POS + 2 * IPV4_HOST_SIZE + 8, 4),
        "preparedTransactionOffset": (BORNHOST_POS + 2 * IPV4_HOST_SIZE + 12, 8),
        "bodyLength": (BORNHOST_POS + 2 * IPV4_HOST_SIZE + 20, 4),
    }
)
"""The header fields in the order they are stored; the body follows ``bodyLength``."""

V4_BODY_POS: Final = V4_FIELDS["bodyLength"][0] + V4_FIELDS["bodyLength"][1]
"""Where the body of a record with two IPv4 hosts starts (88): its fixed header's size."""

V4_MIN_RECORD_SIZE: Final = V4_BODY_POS + 1 + 2
"""The smallest such record: an empty body, a topic length byte, a properties length."""

TOTALSIZE: Final = struct.Struct(">i")
"""The record's first field, its whole length: what a walk over records back to back reads."""


def _reader(names: tuple[str, ...], size: int) -> struct.Struct:
    """A struct unpacking the ``V4_FIELDS`` ``names`` (in stored order) from ``size`` bytes,
    skipping the bytes between them. Hosts unpack as (address bytes, port)."""
    fmt, at = ">", 0
    for name in names:
        pos, width = V4_FIELDS[name]
        if pos < at:
            raise ValueError(f"{name} is not in stored order")
        fmt += f"{pos - at}x" if pos > at else ""
        fmt += "4si" if width == IPV4_HOST_SIZE and name.endswith("Host") else {4: "i", 8: "q"}[width]
        at = pos + width
    return struct.Struct(fmt + (f"{size - at}x" if size > at else ""))


V4_HEAD: Final = _reader(
    (
        "totalSize",
        "magicCode",
        "queueOffset",
        "physicalOffset",
        "sysFlag",
        "bornTimestamp",
        "storeTimestamp",
        "storeHost",
        "reconsumeTimes",
        "bodyLength",
    ),
    V4_BODY_POS,
)
"""What a reader of IPv4 records needs of a header, in one ``unpack_from``: total size,
magic, queue offset, physical offset, sysflag, born timestamp, store timestamp, store
host address (4 bytes), store host port, reconsume times, body length."""


def store_timestamp_pos(sysflag: int) -> int:
    """Where STORETIMESTAMP sits: after the born host, whose size SYSFLAG says."""
    return BORNHOST_POS + (IPV6_HOST_SIZE if sysflag & SF.BORNHOST_V6 else IPV4_HOST_SIZE)


def body_pos(sysflag: int) -> int:
    """Where the body of a record with this SYSFLAG starts (the fixed header's size)."""
    wider = IPV6_HOST_SIZE - IPV4_HOST_SIZE
    return V4_BODY_POS + (wider if sysflag & SF.BORNHOST_V6 else 0) + (wider if sysflag & SF.STOREHOST_V6 else 0)
