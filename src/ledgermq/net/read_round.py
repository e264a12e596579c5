"""A read round: output queued while a read (or the broker's write turn step) is handled
leaves when it ends, one write per connection.

A server's connections share one round. While a read's frames are handled, or while the
broker's end-of-turn step releases waiting sends, answers queued on any connection wait;
when the outermost of these ends, each connection with queued output writes it once.

Why not a flush scheduled with ``loop.call_soon`` for answers released by the step: the
step itself runs from ``call_soon``, and a callback scheduled from a scheduled callback
runs only after the loop polled again: an extra pass (an ``epoll_wait``, the loop's
bookkeeping) per released batch. A SYNC_MASTER sync send paid it on every ack. A round
never spans an ``await``: it is entered and left within one callback.
"""

from __future__ import annotations

import logging
from typing import Protocol

log = logging.getLogger(__name__)


class Flushable(Protocol):
    """A connection with queued output (net/connection.py's ``Connection``)."""

    def flush(self) -> None: ...


class ReadRound:
    """One per server (shared by its connections); a private one per client connection."""

    __slots__ = ("_flushes", "depth")

    def __init__(self) -> None:
        self.depth = 0
        """Reads (or steps) being handled; while above 0, output queued now leaves when the
        outermost one ends."""
        self._flushes: list[Flushable] = []

    @property
    def open(self) -> bool:
        """Whether a read is being handled (output queued now leaves at its end)."""
        return self.depth > 0

    def enter(self) -> None:
        self.depth += 1

    def exit(self) -> None:
        """Leave a read; the outermost one writes what was queued."""
        if self.depth > 1:
            self.depth -= 1
            return
        try:
            if self._flushes:
                self._flush_all()
        finally:
            self.depth = 0

    def defer_flush(self, conn: Flushable) -> None:
        """``conn`` queued output during the round: it is written when the round ends."""
        self._flushes.append(conn)

    def _flush_all(self) -> None:
        while self._flushes:
            flushes, self._flushes = self._flushes, []
            for conn in flushes:
                try:
                    conn.flush()
                except Exception:
                    log.exception("a deferred write failed")
