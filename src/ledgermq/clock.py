"""The only place that reads time, so tests can drive every timeout and timestamp."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def wall_ms(self) -> int:
        """Milliseconds since the epoch; what RocketMQ stores as born/store timestamps."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back; for timeouts and intervals."""


class SystemClock:
    """The real clock."""

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock tests move by hand; thread-safe because store services read it from threads."""

    def __init__(self, wall_ms: int = 1_700_000_000_000, monotonic: float = 0.0) -> None:
        self._lock = threading.Lock()
        self._wall_ms = wall_ms
        self._monotonic = monotonic

    def wall_ms(self) -> int:
        with self._lock:
            return self._wall_ms

    def monotonic(self) -> float:
        with self._lock:
            return self._monotonic

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._monotonic += seconds
            self._wall_ms += int(seconds * 1000)


SYSTEM_CLOCK = SystemClock()
