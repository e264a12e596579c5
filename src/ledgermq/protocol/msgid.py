"""Message ids as RocketMQ builds them.

* The **offset message id** (``msgId`` in a send response, ``offsetMsgId`` in clients) is
  the uppercase hex of store ip + int32 port + int64 physical offset: 32 characters for
  IPv4, 56 for IPv6. Anyone holding it can find the record without an index.
* The **unique client id** (property ``UNIQ_KEY``) is 20 fixed hex characters (ip, pid as
  int16, a per-process int32) followed by 12 of time and counter: int32 milliseconds
  since the start of the current month and an int16 counter (``MessageClientIDSetter``).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import itertools
import os
import random
import re
import struct
import threading

from ledgermq.errors import RemoteProtocolError
from ledgermq.protocol.message import Host, pack_host

_PORT_OFFSET = struct.Struct(">iq")
_HEX = re.compile(r"[0-9A-Fa-f]*")
_TIME_COUNTER = struct.Struct(">ih")


def offset_msg_id(store_host: Host, physical_offset: int) -> str:
    ip, port, _ = pack_host(store_host)
    return (ip + _PORT_OFFSET.pack(port, physical_offset)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[Host, int]:
    """(store host, physical offset) from an offset message id."""
    if len(msg_id) not in (32, 56) or not _HEX.fullmatch(msg_id):
        raise RemoteProtocolError(f"message id {msg_id!r} is not 32 or 56 hex characters")
    raw = bytes.fromhex(msg_id)
    ip_len = len(raw) - 12
    port, offset = _PORT_OFFSET.unpack_from(raw, ip_len)
    return (str(ipaddress.ip_address(raw[:ip_len])), port), offset


def _month_start_ms(now_ms: int) -> tuple[int, int]:
    """Local midnight on the 1st of this month and of the next (naive datetimes: DST-correct)."""
    now = dt.datetime.fromtimestamp(now_ms / 1000)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    nxt = (start + dt.timedelta(days=32)).replace(day=1)
    return round(start.timestamp() * 1000), round(nxt.timestamp() * 1000)


def _java_int(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


class UniqueIdGenerator:
    """Creates UNIQ_KEY values the way the Java client does."""

    def __init__(self, ip: str = "127.0.0.1", pid: int | None = None) -> None:
        packed, _, _ = pack_host((ip, 0))
        pid = os.getpid() if pid is None else pid
        salt = random.getrandbits(31)
        self._fixed = (packed + struct.pack(">Hi", pid & 0xFFFF, salt)).hex().upper()
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._start_ms = 0
        self._next_start_ms = 0

    def next_id(self, now_ms: int) -> str:
        with self._lock:
            if now_ms >= self._next_start_ms:
                self._start_ms, self._next_start_ms = _month_start_ms(now_ms)
            diff = _java_int(now_ms - self._start_ms)  # wraps past 2**31 ms, as Java's (int) does
            if -1_000_000 < diff < 0:
                diff = 0  # a small step back (NTP), as the Java client treats it
            counter = next(self._counter) & 0xFFFF
        raw = _TIME_COUNTER.pack(diff, counter - (counter >> 15 << 16))
        return self._fixed + raw.hex().upper()


def uniq_id_ip(uniq_id: str) -> str:
    raw = bytes.fromhex(uniq_id)
    return str(ipaddress.ip_address(raw[: 16 if len(raw) == 28 else 4]))
