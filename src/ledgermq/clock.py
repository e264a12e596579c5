"""The only place that reads time, so tests can drive every timeout and timestamp.

Code where time decides behaviour (timeouts, intervals, deadlines, stored timestamps)
takes a ``Clock`` (``SYSTEM_CLOCK`` by default) so a test can pass a ``ManualClock``.
Code that only measures how long its own work took (latency histograms, an elapsed time in
a log line, pacing by the machine's real load) reads ``perf_seconds``, which no test drives:
the name says which of the two a reading is. ``tests/unit/test_clock_rule.py`` keeps every
other time read out of the source.

A chaos run can make a process's wall clock jump: with ``LEDGERMQ_CLOCK_SKEW_FILE=<file>``
in its environment, ``SYSTEM_CLOCK.wall_ms()`` adds the integer number of milliseconds the
file holds (absent or empty: 0). The file is read at most every ``SKEW_POLL_S`` seconds,
not on every call. The monotonic clock never jumps, as on a real machine.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Protocol

CLOCK_SKEW_ENV = "LEDGERMQ_CLOCK_SKEW_FILE"
SKEW_POLL_S = 0.1
log = logging.getLogger(__name__)


class Clock(Protocol):
    def wall_ms(self) -> int:
        """Milliseconds since the epoch; what RocketMQ stores as born/store timestamps."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back; for timeouts and intervals."""


class SkewFile:
    """A wall-clock offset in milliseconds read from a file, re-read at most every
    ``poll_s`` (races between threads only re-read it twice)."""

    def __init__(self, path: str, poll_s: float = SKEW_POLL_S) -> None:
        self.path = path
        self.poll_s = poll_s
        self._offset_ms = 0
        self._next_read = 0.0
        self._complained = ""

    def offset_ms(self) -> int:
        now = time.monotonic()
        if now >= self._next_read:
            self._next_read = now + self.poll_s
            self._offset_ms = self._read()
        return self._offset_ms

    def _read(self) -> int:
        try:
            with open(self.path, "rb") as f:
                text = f.read(64).strip()
        except FileNotFoundError:
            return 0
        except OSError as exc:
            return self._keep(f"cannot read clock skew file {self.path}: {exc}")
        if not text:
            return 0
        try:
            return int(text)
        except ValueError:
            return self._keep(f"clock skew file {self.path} holds {text!r}, not an integer of milliseconds")

    def _keep(self, problem: str) -> int:
        """Keep the last offset; say why once per distinct problem."""
        if problem != self._complained:
            self._complained = problem
            log.error("%s; keeping the offset %d ms", problem, self._offset_ms)
        return self._offset_ms


class SystemClock:
    """The real clock (its wall time offset by a ``SkewFile`` when one is given)."""

    def __init__(self, skew: SkewFile | None = None) -> None:
        self.skew = skew

    def wall_ms(self) -> int:
        if self.skew is None:
            return time.time_ns() // 1_000_000
        return time.time_ns() // 1_000_000 + self.skew.offset_ms()

    monotonic = staticmethod(time.monotonic)
    """The system's function itself, not a method around it: the produce path reads it
    about seven times per send (a wrapper doubled those calls)."""


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


perf_seconds: Callable[[], float] = time.perf_counter
"""A high-resolution reading for measuring elapsed real time (only differences mean
anything); never for deciding when something is due. The function itself, not a wrapper:
the request path reads it twice per request."""

thread_cpu_seconds: Callable[[], float] = time.thread_time
"""CPU seconds the calling thread has used (only differences mean anything): how much of
its thread's time a piece of work took, whether or not the process was on a core meanwhile
(timer delivery's pacing, broker/timer/pacing.py). Injected where it decides behaviour."""


_skew_path = os.environ.get(CLOCK_SKEW_ENV)
SYSTEM_CLOCK = SystemClock(SkewFile(_skew_path) if _skew_path else None)
