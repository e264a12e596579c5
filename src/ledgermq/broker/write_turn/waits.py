"""The waits table: every send that must not be answered yet, keyed by the offset it waits for.

Pure (no loop, no clock, no threads): offsets and times in, released waits out, so the
rules that decide when an answer may leave are tested without sockets or timers
(tests/broker/test_write_turn_waits.py). ``WriteTurn`` (turn.py) owns the one table of a
broker and feeds it the facts of each loop turn.

A wait needs up to three things, met in this order:

* ``DURABLE``: an fsync covers the message's bytes (SYNC_FLUSH). Keyed by the offset the
  message ends at; released when the durable offset reaches it. A failed fsync is sticky:
  it fails every durable wait then and later ("fsyncgate"). The durable offset is never
  taken on the reports alone: a log cut back (a broker that becomes a slave truncates what
  it holds beyond the agreed point, and may be master again later) makes every offset
  reported before the cut stale, and a message written again below it would have counted
  as durable with no fsync behind it, acknowledged and lost in the next power loss (found
  by the chaos harness's controller-mode power-loss run). So each report, and each wait
  that would be met at once, is also checked against ``flushed()``, the store's own
  flushed offset, which a truncation lowers.
* ``REPLICATED``: the slaves the mode asks for hold the message (SYNC_MASTER; in
  controller mode every member of the SyncStateSet). Keyed by the end offset too; released
  when the replication floor reaches it *and* ``holds(end)`` says the slaves verifiably
  hold those bytes. A wait the floor passed but no slave holds (a slave that started after
  it) is left to time out, as RocketMQ's would never be acknowledged.
* ``COMMITTED``: a Raft quorum committed the message (DLedger). Settled per wait by its
  proposal (``settle``), not by a bare index: only the Raft driver knows whether the entry
  committed at an index is this proposal's or a later leader's.

Each stage has its own deadline (the stage's start + the timeout the caller gave), as the
chained waits had before: a SYNC_FLUSH + SYNC_MASTER send may wait up to the timeout for
its fsync and then up to the timeout for its slave. A wait released early keeps ``missed``
= the need that timed out or failed, and ``reason``.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass


class Need:
    """What a wait needs, as bits of a plain int (an ``enum.IntFlag`` costs microseconds
    per ``&``, and the table tests bits several times per send)."""

    NONE = 0
    DURABLE = 1
    REPLICATED = 2
    COMMITTED = 4

    @staticmethod
    def name(needs: int) -> str:
        """``DURABLE|REPLICATED`` style, for messages and tests."""
        names = [n for n in ("DURABLE", "REPLICATED", "COMMITTED") if needs & getattr(Need, n)]
        return "|".join(names) or "NONE"


@dataclass(slots=True, eq=False)
class Wait:
    """One send's wait. ``end``: the commit-log offset its last byte ends at (DURABLE,
    REPLICATED); ``timeout_s``: per stage; ``on_released``: the caller's, called by the
    turn once the table releases the wait (not by the table)."""

    end: int
    needs: int
    timeout_s: float
    on_released: Callable[[Wait], None] | None = None
    missed: int = Need.NONE  # the need that timed out or failed; NONE when every one was met
    reason: str = ""
    stage_started: float = 0.0  # when the current stage began (replication latency)
    deadline: float = math.inf
    asked: int = Need.NONE  # ``needs`` as registered
    _seq: int = 0

    @property
    def met(self) -> bool:
        return self.missed == Need.NONE and self.needs == Need.NONE


Holds = Callable[[int], bool]
"""Whether the slaves the mode asks for verifiably hold the message ending at an offset."""


class Waits:
    """The table. Heaps by end offset per stage, and one heap by deadline; entries of waits
    that moved on or ended stay in a heap until they reach its top (checked by stage)."""

    def __init__(self, flushed: Callable[[], int] | None = None) -> None:
        self._flushed = flushed  # the store's flushed offset now (lowered by a truncation)
        self.durable_offset = 0
        self.durable_failure = ""  # sticky: after a failed fsync nothing is durable any more
        self._by_end: dict[int, list[tuple[int, int, Wait]]] = {Need.DURABLE: [], Need.REPLICATED: []}
        self.replicating = self._by_end[Need.REPLICATED]
        """The REPLICATED heap itself (never replaced): empty when no wait needs the slaves,
        the step's pre-check before it reads the replication floor (read only)."""
        self.deadlines: list[tuple[float, int, Wait]] = []
        """The deadline heap (never replaced; read only): empty, nothing can expire."""
        self._proposals: dict[int, Wait] = {}  # COMMITTED waits by sequence number (settled one by one)
        self._seq = 0
        self._live = 0

    def __len__(self) -> int:
        """Waits not yet released."""
        return self._live

    def waiting_for(self, need: int) -> bool:
        """Whether any entry sits in ``need``'s heap (may be stale; a cheap pre-check)."""
        heap = self._by_end.get(need)
        return bool(heap)

    def add(self, wait: Wait, now: float) -> list[Wait]:
        """Register ``wait``; returns it at once (in a list) if nothing needs waiting for
        (its durable offset already reached, or a sticky fsync failure)."""
        self._seq += 1
        wait._seq = self._seq
        wait.asked = wait.needs
        self._live += 1
        released: list[Wait] = []
        self._enter_stage(wait, now, released)
        return released

    def durable(self, offset: int, now: float) -> list[Wait]:
        """An fsync covered everything below ``offset`` (as far as the log, which may have
        been cut back since, still holds it: ``flushed()``)."""
        flushed = self._flushed
        if flushed is not None:
            offset = min(offset, flushed())
            self.durable_offset = offset  # may go down: a truncation
        elif offset > self.durable_offset:
            self.durable_offset = offset
        released: list[Wait] = []
        heap = self._by_end[Need.DURABLE]
        while heap and heap[0][0] <= offset:
            wait = heapq.heappop(heap)[2]
            if self._current(wait) == Need.DURABLE:
                wait.needs &= ~Need.DURABLE
                self._enter_stage(wait, now, released)
        return released

    def durable_failed(self, reason: str) -> list[Wait]:
        """An fsync failed: every durable wait fails now, and every later one at once."""
        if not self.durable_failure:
            self.durable_failure = reason
        released: list[Wait] = []
        heap, self._by_end[Need.DURABLE] = self._by_end[Need.DURABLE], []
        for _end, _seq, wait in heap:
            if self._current(wait) == Need.DURABLE:
                self._miss(wait, Need.DURABLE, self.durable_failure, released)
        return released

    def replicated(self, floor: int, holds: Holds, now: float) -> list[Wait]:
        """The required slaves acknowledged everything below ``floor``; a wait at or below
        it is met if ``holds(end)``, else left to time out."""
        released: list[Wait] = []
        heap = self._by_end[Need.REPLICATED]
        while heap and heap[0][0] <= floor:
            wait = heapq.heappop(heap)[2]
            needs = wait.needs  # ``_current`` spelled out here and below: once per send each
            if not wait.missed and (needs & -needs) == Need.REPLICATED and holds(wait.end):
                wait.needs &= ~Need.REPLICATED
                self._enter_stage(wait, now, released)
        return released

    def settle(self, wait: Wait, committed: bool, reason: str, now: float) -> list[Wait]:
        """A COMMITTED wait's proposal ended: committed, or not (``reason``)."""
        released: list[Wait] = []
        if self._current(wait) != Need.COMMITTED:
            return released  # already released (timed out, or the table was cleared)
        self._proposals.pop(wait._seq, None)
        if committed:
            wait.needs &= ~Need.COMMITTED
            self._enter_stage(wait, now, released)
        else:
            self._miss(wait, Need.COMMITTED, reason, released)
        return released

    def expire(self, now: float) -> list[Wait]:
        """Release every wait whose current stage's deadline passed (missed = that need)."""
        released: list[Wait] = []
        heap = self.deadlines
        while heap and heap[0][0] <= now:
            deadline, _seq, wait = heapq.heappop(heap)
            if wait.deadline == deadline and self._current(wait) != Need.NONE:
                self._miss(wait, self._current(wait), "", released)
        return released

    def next_deadline(self) -> float | None:
        """The earliest deadline of a live stage (stale entries are dropped on the way)."""
        heap = self.deadlines
        while heap:
            deadline, _seq, wait = heap[0]
            if wait.deadline == deadline and not wait.missed and wait.needs:
                return deadline
            heapq.heappop(heap)
        return None

    def clear(self, reason: str) -> list[Wait]:
        """Release everything still waiting as missed (the broker is stopping)."""
        released: list[Wait] = []
        candidates = [w for _d, _s, w in self.deadlines] + [w for h in self._by_end.values() for _e, _s, w in h]
        candidates += self._proposals.values()
        self._proposals = {}
        for wait in candidates:
            need = self._current(wait)
            if need != Need.NONE:
                self._miss(wait, need, reason, released)
        self.deadlines.clear()
        for heap in self._by_end.values():
            heap.clear()
        return released

    # -- stages ----------------------------------------------------------------------
    @staticmethod
    def _current(wait: Wait) -> int:
        if wait.missed:
            return Need.NONE
        needs = wait.needs
        return needs & -needs  # the lowest bit: stages are met in bit order

    def _enter_stage(self, wait: Wait, now: float, released: list[Wait]) -> None:
        """Put ``wait`` where its next need is waited for, or release it."""
        needs = wait.needs
        need = Need.NONE if wait.missed else needs & -needs  # ``_current``
        if need == Need.DURABLE:
            if self.durable_failure:
                self._miss(wait, Need.DURABLE, self.durable_failure, released)
                return
            # the cached offset first (no store read for the usual wait past it), then the store's
            if wait.end <= self.durable_offset and (self._flushed is None or wait.end <= self._flushed()):
                wait.needs &= ~Need.DURABLE
                self._enter_stage(wait, now, released)
                return
        if need == Need.NONE:
            self._live -= 1
            released.append(wait)
            return
        wait.stage_started = now
        timeout = wait.timeout_s
        wait.deadline = now + timeout if timeout > 0 else now  # math.inf: no deadline (its proposal ends it)
        if wait.deadline != math.inf:
            heapq.heappush(self.deadlines, (wait.deadline, wait._seq, wait))
        if need == Need.COMMITTED:
            self._proposals[wait._seq] = wait
        else:
            heapq.heappush(self._by_end[need], (wait.end, wait._seq, wait))

    def _miss(self, wait: Wait, need: int, reason: str, released: list[Wait]) -> None:
        if need == Need.COMMITTED:
            self._proposals.pop(wait._seq, None)
        wait.missed = need
        wait.reason = reason
        wait.deadline = math.inf
        self._live -= 1
        released.append(wait)
