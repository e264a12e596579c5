"""Socket addresses as RocketMQ stores them: ip bytes (4 for IPv4, 16 for IPv6) and an int32
port, in stored records (BORNHOST, STOREHOST) and in offset message ids. Both the record
codec and the message-id codec need it, so it is neither's."""

from __future__ import annotations

import ipaddress
from functools import lru_cache

from ledgermq.util.ip import pack_ip

Host = tuple[str, int]


@lru_cache(maxsize=1024)
def pack_host(host: Host) -> tuple[bytes, int, bool]:
    """(packed ip, port, is_v6). IPv4-mapped IPv6 is stored as IPv4 so C clients can read it."""
    packed = pack_ip(host[0])
    return packed, int(host[1]), len(packed) == 16


@lru_cache(maxsize=1024)
def _ip_text(packed: bytes) -> str:
    return str(ipaddress.ip_address(packed))


def unpack_host(packed: bytes, port: int) -> Host:
    """Cached by address: a pull answer repeats the same few hosts, and ``ipaddress`` costs
    several microseconds a call."""
    return _ip_text(packed), port
