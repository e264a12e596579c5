"""An IP address as RocketMQ packs it (4 bytes, or 16 for IPv6), shared by the stored-record
codec and the message-id generator. Stdlib only."""

from __future__ import annotations

import ipaddress


def pack_ip(text: str) -> bytes:
    """The address's bytes; an IPv4-mapped IPv6 address packs as IPv4 so C clients can read it."""
    ip = ipaddress.ip_address(text)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.packed
