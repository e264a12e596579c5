"""The broker's write turn: one end-of-turn step that turns a loop turn's facts into answers.

Like etcd's ``Ready``: during a turn of the event loop, sends append to the store (each
append returns a plain fact, its ``PutResult``), register what their answers wait for in
the one waits table (waits.py), and note that the turn appended (``appended``); acks
from slaves and commits of proposals note that replication moved (``changed``, ``settle``);
the flush and reput threads post into the inbox (inbox.py, one thread-safe wake-up per
batch). The first of these schedules the step once (``call_soon``), and the step runs
after the turn's reads, always in this order:

1. **dispatch**: the store writes the consume-queue units and index entries of what the
   turn appended (``MessageStore.dispatch_appended``); the queues that grew, with those
   the reput thread posted, go to the long-polling pulls;
2. **pump replication links**: each idle slave link sends what was appended, one window
   per link per turn however many sends appended (``Replication.pump``);
3. **release waiters**: the inbox's durable offset or fsync failure, the replication
   floor, settled proposals and expired deadlines go through the table;
4. **write answers**: each released wait's ``on_released`` builds its answer and queues it
   on its connection, which writes once for all answers of the turn.

Answers that needed no wait were queued by their reads and leave at the end of each read
(net/read_round.py), before this step: a client that got SEND_OK and then reads finds the
message dispatched, because the step runs before the loop reads anything else. The step
itself runs inside the server's read round, so the answers it releases leave in one write
per connection when it ends, not from a flush scheduled for the next loop pass.

Why ``call_soon`` for the step and a round for its answers: a callback scheduled from an
I/O callback runs before the loop polls again (no extra ``epoll_wait``), and one step then
serves every connection read in that pass (64 senders on 64 connections: one dispatch and
one window to the slave, not 64); a callback scheduled from a scheduled callback (the old
flush of a released answer) costs a pass of its own.

A slave's appends are dispatched on a cadence instead, at most
``REPLICA_DISPATCH_INTERVAL_S`` after the first one (``replica_appended``), as RocketMQ's
reput thread does on every broker (it polls every millisecond). Nobody waits on a slave's
dispatch (its acknowledgement leaves before it), and with few sends in flight it ran once
per received frame: on 2 cores, with one send in flight, the cadence cut the slave's CPU
per message by a tenth (ASYNC_MASTER) to a sixth (SYNC_MASTER); at 256 in flight, where
a read already carries many frames, it changed nothing measurable (docs/benchmarks.md).
A DLedger follower keeps dispatching per Ready: there the cadence's own timer wake-up cost
what it saved at one send in flight, and a tenth more follower CPU at 256.

The store never sees the loop: the broker tells it once that the appender dispatches
(``MessageStore.set_appender_dispatches``) and calls ``dispatch_appended`` here. Time
for deadlines is read from the injected clock; the loop's timer only wakes the step.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ledgermq.broker.write_turn.inbox import Inbox
from ledgermq.broker.write_turn.waits import Wait, Waits
from ledgermq.clock import Clock
from ledgermq.net.read_round import ReadRound
from ledgermq.store.message_store import MessageStore

log = logging.getLogger(__name__)

REPLICA_DISPATCH_INTERVAL_S = 0.001
"""How long a replica's append may wait for its dispatch (RocketMQ's ReputMessageService
sleeps a millisecond between passes); appends meanwhile share the one dispatch."""

_NO_ARRIVALS: dict[tuple[str, int], int] = {}  # read only: a step whose inbox was empty and that appended nothing

ArrivalSink = Callable[[str, int, int], None]
"""Told (topic, queue id, new max offset) of every queue that grew (long-polling pulls)."""


class Replication(Protocol):
    """What the step needs of a master's replication (ha/master.py's HAService)."""

    def pump(self) -> None:
        """Let every slave link send what was appended (loop thread)."""

    def replication_floor(self) -> int:
        """The offset the slaves the mode asks for acknowledged (-1: none can)."""

    def holds(self, end: int) -> bool:
        """Whether those slaves verifiably hold the message ending at ``end``."""


class ReplicationSource(Protocol):
    """Where the step finds the master's replication as it is now: the broker, whose
    ``ha`` comes and goes with its role. An attribute, not a getter: read twice per send."""

    @property
    def ha(self) -> Replication | None: ...


@dataclass(frozen=True, slots=True)
class FixedReplication:
    """A ``ReplicationSource`` that never changes (tests, tools; None: no replication)."""

    ha: Replication | None = None


class WriteTurn:
    """One per broker; ``bind`` it to the loop before the first send."""

    def __init__(
        self,
        store: MessageStore,
        clock: Clock,
        replication: ReplicationSource = FixedReplication(),
        on_arrival: ArrivalSink | None = None,
        read_round: ReadRound | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.replication = replication
        self.on_arrival = on_arrival
        self.waits = Waits(flushed=lambda: store.flushed_phy_offset)
        self.inbox = Inbox(self._wake_threadsafe)
        self.steps = 0  # end-of-turn steps run
        self.failures = 0  # steps that raised (logged; the next step runs as usual)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scheduled = False
        self._appended = False
        self._replication_moved = False
        self._released: list[Wait] = []  # released outside the step, answered in it
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._replica_timer: asyncio.TimerHandle | None = None
        self._round = read_round

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    # -- facts of the turn (loop thread) ---------------------------------------------
    def appended(self) -> None:
        """This turn appended to the commit log (a put, or a slave's raw append)."""
        self._appended = True
        self._schedule()

    def replica_appended(self) -> None:
        """A slave appended (after its acknowledgement went out): dispatched by the step the
        cadence timer runs, with whatever else it appended by then (module docstring)."""
        if self._replica_timer is not None:
            return
        loop = self._loop
        if loop is None:
            raise RuntimeError("WriteTurn.bind(loop) before the first append")
        self._replica_timer = loop.call_later(REPLICA_DISPATCH_INTERVAL_S, self._on_replica_timer)

    def _on_replica_timer(self) -> None:
        self._replica_timer = None
        self._appended = True
        if not self._scheduled:
            self._scheduled = True
            self.run()

    def changed(self) -> None:
        """Replication moved: an ack, a slave gone, a new set of required slaves."""
        self._replication_moved = True
        self._schedule()

    def add(self, wait: Wait) -> None:
        """Answer ``wait`` (its ``on_released``) once the table releases it, in a step."""
        released = self.waits.add(wait, self.clock.monotonic())
        if released:
            self._released += released
        if not self._scheduled:  # the send's append has scheduled it already
            self._schedule()

    def settle(self, wait: Wait, committed: bool, reason: str = "") -> None:
        """A COMMITTED wait's proposal ended (a Raft future's callback)."""
        released = self.waits.settle(wait, committed, reason, self.clock.monotonic())
        if released:
            self._released += released
            self._schedule()

    def stop(self) -> None:
        """Answer every wait as missed (the broker is stopping) and disarm the timer."""
        for wait in self.waits.clear("the broker is stopping"):
            self._answer(wait)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = self._timer_at = None
        if self._replica_timer is not None:
            self._replica_timer.cancel()
            self._replica_timer = None

    # -- the step ----------------------------------------------------------------------
    def _schedule(self) -> None:
        if self._scheduled:
            return
        loop = self._loop
        if loop is None:
            raise RuntimeError("WriteTurn.bind(loop) before the first send")
        self._scheduled = True
        loop.call_soon(self.run)

    def appended_now(self) -> None:
        """An append by a task outside any read (the timer service delivering due messages):
        the step runs now. Scheduled from a task's step, it would cost a pass of the loop of
        its own, and the caller paces itself by what the step costs."""
        self._appended = True
        if self._loop is None or (self._round is not None and self._round.depth):
            self._schedule()  # within a read or a step: the scheduled step picks it up
            return
        self._scheduled = True
        self.run()

    def _wake_threadsafe(self) -> None:
        loop = self._loop
        if loop is None:
            return  # not serving yet: the first step drains the inbox
        loop.call_soon_threadsafe(self._on_wake)

    def _on_wake(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            self.run()

    def _on_timer(self) -> None:
        self._timer = self._timer_at = None
        if not self._scheduled:
            self._scheduled = True
            self.run()

    def run(self) -> None:
        """The end-of-turn step (see the module docstring for its order), inside a read
        round, so the answers it releases leave in one write per connection at its end.
        Runs only when scheduled: a ``call_soon`` of it finds nothing to do when the step
        already ran since (``appended_now``, a wake-up)."""
        if not self._scheduled:
            return
        self._scheduled = False
        read_round = self._round
        if read_round is not None:
            read_round.depth += 1  # ReadRound.enter, spelled out: two steps per SYNC_MASTER send
        self.steps += 1
        try:
            self._step()
        except Exception:
            self.failures += 1
            log.exception("write turn: the end-of-turn step failed; the next one runs as usual")
        finally:
            waits = self.waits
            if waits.deadlines:  # else nothing can expire: no timer to arm or move
                at = waits.next_deadline()
                if at is not None and (self._timer_at is None or at < self._timer_at):
                    self._arm_timer(at)
            if read_round is not None:
                read_round.exit()  # the released answers leave, one write per connection

    def _step(self) -> None:
        inbox = self.inbox
        facts = inbox.drain() if inbox.woken else None  # None: nothing posted since the last step
        appended, self._appended = self._appended, False
        self._replication_moved = False  # the floor is read below whenever a wait needs it
        # 1. dispatch
        arrivals = facts.arrivals if facts is not None else _NO_ARRIVALS
        if appended:
            grown = self.store.dispatch_appended()
            if arrivals:
                for key, max_offset in grown.items():
                    if arrivals.get(key, -1) < max_offset:
                        arrivals[key] = max_offset
            else:
                arrivals = grown
        sink = self.on_arrival
        if sink is not None and arrivals:
            for (topic, queue_id), max_offset in arrivals.items():
                sink(topic, queue_id, max_offset)
        # 2. pump replication links
        replication = self.replication.ha
        if replication is not None and (appended or arrivals):
            replication.pump()
        # 3. release waiters
        now = self.clock.monotonic()
        waits = self.waits
        released, self._released = self._released, []
        if facts is not None:
            if facts.flush_failure:
                released += waits.durable_failed(facts.flush_failure)
            if facts.durable_offset >= 0:
                released += waits.durable(facts.durable_offset, now)
        if replication is not None and waits.replicating:
            released += waits.replicated(replication.replication_floor(), replication.holds, now)
        if waits.deadlines:
            released += waits.expire(now)
        # 4. write answers (``_answer``, spelled out: once per send)
        for wait in released:
            callback = wait.on_released
            if callback is not None:
                try:
                    callback(wait)
                except Exception:
                    log.exception("write turn: answering a released send failed")

    @staticmethod
    def _answer(wait: Wait) -> None:
        callback = wait.on_released
        if callback is None:
            return
        try:
            callback(wait)
        except Exception:
            log.exception("write turn: answering a released send failed")

    def _arm_timer(self, at: float) -> None:
        """One loop timer, at or before the table's earliest deadline ``at``. It is moved
        (``run`` calls this) only when a deadline earlier than the armed one appears: the
        oldest deadline moves on with nearly every step, and re-arming each time cost a
        timer per step; a timer that fires early only runs a step that finds nothing due
        and arms the next one."""
        if self._timer is not None:
            self._timer.cancel()
        loop = self._loop
        if loop is None:
            self._timer = self._timer_at = None
            return
        self._timer_at = at
        self._timer = loop.call_later(max(0.0, at - self.clock.monotonic()), self._on_timer)
