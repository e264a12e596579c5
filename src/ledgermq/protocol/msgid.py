"""Message ids as RocketMQ builds them.

* The **offset message id** (``msgId`` in a send response, ``offsetMsgId`` in clients) is
  the uppercase hex of store ip + int32 port + int64 physical offset: 32 characters for
  IPv4, 56 for IPv6. Anyone holding it can find the record without an index.
* The **unique client id** (property ``UNIQ_KEY``) is 20 fixed hex characters (ip, pid as
  int16, a per-process int32) followed by 12 of time and counter: int32 milliseconds
  since the start of the current month and an int16 counter (``MessageClientIDSetter``).
  Reading one is here (``uniq_id_ip``); making them, which keeps state (a counter, a lock,
  the process id), is ``ledgermq.util.unique_ids``'s (used by producers and the broker).
"""

from __future__ import annotations

import ipaddress
import re
import struct
from functools import lru_cache

from ledgermq.errors import RemoteProtocolError
from ledgermq.protocol.hosts import Host, pack_host

_PORT_OFFSET = struct.Struct(">iq")
_PORT = struct.Struct(">i")
_HEX = re.compile(r"[0-9A-Fa-f]*")


def offset_msg_id(store_host: Host, physical_offset: int) -> str:
    """RocketMQ's offset message id: the store host's ip and port and the record's offset,
    as upper-case hex. Made once per stored message: the host's part is cached."""
    if 0 <= physical_offset < _OFFSET_LIMIT:
        return f"{_host_hex(store_host)}{physical_offset:016X}"
    ip, port, _ = pack_host(store_host)
    return (ip + _PORT_OFFSET.pack(port, physical_offset)).hex().upper()  # raises for what Java cannot store


_OFFSET_LIMIT = 1 << 63


@lru_cache(maxsize=64)
def _host_hex(store_host: Host) -> str:
    ip, port, _ = pack_host(store_host)
    return (ip + _PORT.pack(port)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[Host, int]:
    """(store host, physical offset) from an offset message id."""
    if len(msg_id) not in (32, 56) or not _HEX.fullmatch(msg_id):
        raise RemoteProtocolError(f"message id {msg_id!r} is not 32 or 56 hex characters")
    raw = bytes.fromhex(msg_id)
    ip_len = len(raw) - 12
    port, offset = _PORT_OFFSET.unpack_from(raw, ip_len)
    return (str(ipaddress.ip_address(raw[:ip_len])), port), offset


def uniq_id_ip(uniq_id: str) -> str:
    raw = bytes.fromhex(uniq_id)
    return str(ipaddress.ip_address(raw[: 16 if len(raw) == 28 else 4]))
