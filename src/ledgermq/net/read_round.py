"""A read round: what one read of a socket causes, finished before the loop reads anything else.

A server's connections (and a broker's HA links to its slaves) share one round. While a
read is handled the round is open: answers queued on any connection wait, and facts the
read produced (appends, acknowledgements) only mark the broker's end-of-read step as due.
When the read ends the round closes in a fixed order:

1. the answers queued so far leave, one write per connection (a send that needed no wait
   is answered before the work it caused);
2. ``on_end`` runs (the broker's write turn: dispatch, replicate, release waiters), with
   the round still open, so the answers it releases are queued too;
3. those answers leave, again one write per connection.

Why not ``loop.call_soon``: each callback scheduled for "later in this turn" is another
pass of the event loop (an ``epoll_wait``, the loop's bookkeeping), and a single sync send
paid three of them on the master (the step after the client's read, the step after the
slave's acknowledgement, the write of the answer it released). Ending the round at the
end of the read does the same work in the same order without those passes. A round never
spans an ``await``: it is entered and left within one callback.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger(__name__)


class Flushable(Protocol):
    """A connection with queued output (net/connection.py's ``Connection``)."""

    def flush(self) -> None: ...


class ReadRound:
    """One per server (shared by its connections); a private one per client connection."""

    __slots__ = ("_flushes", "depth", "on_end")

    def __init__(self) -> None:
        self.depth = 0
        """Reads being handled (nested: the write turn's step opens one of its own); while
        above 0, output queued now leaves when the outermost read ends."""
        self._flushes: list[Flushable] = []
        self.on_end: Callable[[], None] | None = None
        """Run when the outermost read ends (the broker's write turn step)."""

    @property
    def open(self) -> bool:
        """Whether a read is being handled (output queued now leaves at its end)."""
        return self.depth > 0

    def enter(self) -> None:
        self.depth += 1

    def exit(self) -> None:
        """Leave a read; the outermost one writes, runs ``on_end``, writes again."""
        if self.depth > 1:
            self.depth -= 1
            return
        try:
            if self._flushes:
                self._flush_all()
            hook = self.on_end
            if hook is not None:
                try:
                    hook()
                except Exception:  # the reads go on; the hook's owner counts its own failures
                    log.exception("the end-of-read hook failed")
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
