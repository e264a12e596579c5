"""Rate-limited logging: a condition that can repeat every few hundred milliseconds (a
name server that stays unreachable, a queue whose pulls keep failing) is logged once per
key per interval, with a count of what was held back, so a real problem stays visible
without flooding the user's log.

Stdlib only, thread-safe (the sync facade's callback threads and the loop may share one).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable

DEFAULT_INTERVAL = 60.0
"""Seconds between two records of one key, unless the caller says otherwise."""

DEFAULT_GRACE = 60.0
"""Seconds a transient condition may last before ``persisting`` reports it above DEBUG."""

MAX_KEYS = 4096
"""Keys remembered at most; the oldest half is forgotten beyond it (keys may hold queue names)."""


class RateLimitedLog:
    """``log(logger, level, key, msg, *args)`` emits at most once per ``interval`` per key.

    A record that follows suppressed ones ends with "(N similar messages suppressed)".
    ``clock`` returns seconds on a monotonic clock; tests pass their own.
    """

    def __init__(self, interval: float = DEFAULT_INTERVAL, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[Hashable, float] = {}
        self._suppressed: dict[Hashable, int] = {}
        self._since: dict[Hashable, tuple[float, float]] = {}  # key -> (first, latest) occurrence

    def log(
        self,
        logger: logging.Logger,
        level: int,
        key: Hashable,
        msg: str,
        *args: object,
        exc_info: bool = False,
    ) -> bool:
        """Log now, or count the record as suppressed; True when it was logged."""
        if not logger.isEnabledFor(level):
            return False
        now = self._clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.interval:
                self._suppressed[key] = self._suppressed.get(key, 0) + 1
                return False
            if len(self._last) >= MAX_KEYS:
                for old in sorted(self._last, key=self._last.__getitem__)[: MAX_KEYS // 2]:
                    self._last.pop(old, None)
                    self._suppressed.pop(old, None)
            self._last[key] = now
            held = self._suppressed.pop(key, 0)
        if held:
            msg = f"{msg} ({held} similar messages suppressed)"
        logger.log(level, msg, *args, exc_info=exc_info)
        return True

    def persisting(
        self,
        logger: logging.Logger,
        level: int,
        key: Hashable,
        msg: str,
        *args: object,
        grace: float = DEFAULT_GRACE,
        exc_info: bool = False,
    ) -> bool:
        """A condition that is normal for a while (a topic being created, a group the broker
        learns from the next heartbeat, a broker restarting): DEBUG until it has lasted
        ``grace`` seconds since its first occurrence, then ``level`` once per interval.
        ``reset(key)`` when it clears; a key not seen for ``grace`` seconds starts afresh
        (its condition cleared without anyone saying so). True when logged above DEBUG."""
        now = self._clock()
        with self._lock:
            if len(self._since) >= MAX_KEYS:
                self._since.clear()
            since, latest = self._since.get(key, (now, now))
            if now - latest > grace:
                since = now
            self._since[key] = (since, now)
        if now - since < grace:
            logger.debug(msg, *args, exc_info=exc_info)
            return False
        return self.log(logger, level, key, f"{msg} (for %.0fs)", *args, now - since, exc_info=exc_info)

    def clear(self) -> None:
        """Forget every key (tests start from a clean slate)."""
        with self._lock:
            self._last.clear()
            self._suppressed.clear()
            self._since.clear()

    def reset(self, key: Hashable) -> None:
        """Forget ``key`` (the condition cleared), so its next occurrence is news again.
        Cheap when the key is unknown, so hot paths may call it on every success."""
        if key not in self._since and key not in self._last:
            return
        with self._lock:
            self._last.pop(key, None)
            self._suppressed.pop(key, None)
            self._since.pop(key, None)


limited = RateLimitedLog()
"""The process-wide limiter the client uses (one interval, ``DEFAULT_INTERVAL``)."""
