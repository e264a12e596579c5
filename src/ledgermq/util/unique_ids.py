"""Making message ids (``UNIQ_KEY``) the way the Java client's ``MessageClientIDSetter``
does: 20 fixed hex characters (ip, pid as int16, a per-generator int32 salt) followed by 12
of time and counter: int32 milliseconds since the start of the current month and an int16
counter.

The generator keeps state (the counter, a lock, the month's start, the process id), so it
is not in the pure protocol layer (reading ids is ``ledgermq.protocol.msgid``'s); it is
here, below both of its users: producers, and the broker's own writes (a transaction's op
messages). Stdlib only.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import random
import struct
import threading

from ledgermq.util.ip import pack_ip

__all__ = ["UniqueIdGenerator"]

_TIME_COUNTER = struct.Struct(">ih")


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

    def __init__(self, ip: str = "127.0.0.1", pid: int | None = None, rng: random.Random | None = None) -> None:
        """``pid`` defaults to this process's, the salt comes from ``rng`` (default: the
        module's generator): ids of two generators of one process differ."""
        packed = pack_ip(ip)
        pid = os.getpid() if pid is None else pid
        salt = (rng or random).getrandbits(31)
        self._fixed = (packed + struct.pack(">Hi", pid & 0xFFFF, salt)).hex().upper()
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._start_ms = 0
        self._next_start_ms = 0

    def next_id(self, now_ms: int) -> str:
        with self._lock:
            diff = self._time_part(now_ms)
            counter = next(self._counter) & 0xFFFF
        raw = _TIME_COUNTER.pack(diff, counter - (counter >> 15 << 16))
        return self._fixed + raw.hex().upper()

    def next_ids(self, count: int, now_ms: int) -> list[str]:
        """``count`` ids at once, each what ``next_id(now_ms)`` would have returned in turn:
        a batch of many messages takes the lock and the time part once, and each id is its
        counter's four hex digits after a shared prefix (the time part is the same for all)."""
        with self._lock:
            diff = self._time_part(now_ms)
            counters = [next(self._counter) & 0xFFFF for _ in range(count)]
        prefix = self._fixed + _TIME_COUNTER.pack(diff, 0)[:4].hex().upper()
        return [f"{prefix}{c:04X}" for c in counters]

    def _time_part(self, now_ms: int) -> int:
        """Milliseconds since the month's start as Java's int; the caller holds the lock."""
        if now_ms >= self._next_start_ms:
            self._start_ms, self._next_start_ms = _month_start_ms(now_ms)
        diff = _java_int(now_ms - self._start_ms)  # wraps past 2**31 ms, as Java's (int) does
        if -1_000_000 < diff < 0:
            diff = 0  # a small step back (NTP), as the Java client treats it
        return diff
