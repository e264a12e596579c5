"""The queues a lite pull consumer reads and the per-queue state of its readers (RocketMQ
4.9.7 ``AssignedMessageQueue``), plus the buffer of pulled batches its ``poll`` drains
(Java's ``consumeRequestCache``).

Per assigned queue the consumer keeps two offsets, -1 meaning "none yet":

* ``pull_offset``: where the next pull starts (the broker's ``nextBeginOffset`` of the last
  answer, or the position a ``seek`` asked for); -1 until the start offset has been
  computed from the group's committed offset;
* ``consume_offset``: the offset after the last message ``poll`` returned (or the position
  of the last ``seek``), i.e. what a commit of this queue records.

(Java also keeps a ``seekOffset`` that the queue's reader takes up at its next pull; a
seek here sets ``pull_offset`` directly, which also survives a failed first pull.)

The queue's buffered batches are counted here (messages, body bytes, the span from the
oldest to the newest buffered offset) for the readers' flow control. Java keeps the same
figures in the queue's ``ProcessQueue`` message by message; a queue's messages are
buffered and polled in offset order, so whole batches suffice and cost far less per
message. The ``ProcessQueue`` remains the queue's ownership flag: in subscribe mode it is
the rebalance's own, so a queue rebalanced away is seen as dropped here too.

Everything here runs on the event loop thread and never awaits, so each method is atomic
with respect to the consumer's coroutines.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ledgermq.client.consumer.process_queue import ProcessQueue
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.message import MessageRecord

__all__ = ["AssignedQueues", "ConsumeBuffer", "ConsumeRequest", "QueueState"]

NO_OFFSET = -1


@dataclass(eq=False, slots=True)
class QueueState:
    """One assigned queue (Java ``MessageQueueState``)."""

    mq: MessageQueue
    pq: ProcessQueue
    paused: bool = False
    pull_offset: int = NO_OFFSET
    consume_offset: int = NO_OFFSET
    # the last pull found nothing new: the next one is a long poll that needs no pull permit
    idle: bool = False
    # set by resume() so a reader waiting out a pause starts at once
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    # buffered batches of this queue, oldest first (the same objects as in ConsumeBuffer)
    requests: deque[ConsumeRequest] = field(default_factory=deque)
    buffered: int = 0
    buffered_bytes: int = 0

    @property
    def buffered_span(self) -> int:
        """Offset distance from the oldest to the newest buffered message (Java ``getMaxSpan``)."""
        if not self.requests:
            return 0
        head = self.requests[0]
        return self.requests[-1].messages[-1].queue_offset - head.messages[head.pos].queue_offset

    def drop_buffered(self) -> None:
        self.requests.clear()
        self.buffered = 0
        self.buffered_bytes = 0


class AssignedQueues:
    """Assigned queues by ``MessageQueue``; see the module docstring."""

    def __init__(self) -> None:
        self._states: dict[MessageQueue, QueueState] = {}
        # subscribe mode: the rebalance's process queue of a queue, so both see one object
        self.process_queue_of: Callable[[MessageQueue], ProcessQueue | None] | None = None

    def __contains__(self, mq: object) -> bool:
        return mq in self._states

    def __len__(self) -> int:
        return len(self._states)

    def queues(self) -> set[MessageQueue]:
        return set(self._states)

    def states(self) -> list[QueueState]:
        return list(self._states.values())

    def get(self, mq: MessageQueue) -> QueueState | None:
        return self._states.get(mq)

    def topics(self) -> set[str]:
        return {mq.topic for mq in self._states}

    # -- membership ------------------------------------------------------------------------
    def update(
        self, assigned: Iterable[MessageQueue], topic: str | None = None
    ) -> tuple[list[QueueState], list[QueueState]]:
        """Make the assignment (of ``topic`` only, when given) exactly ``assigned``.

        Queues leaving are marked dropped; queues arriving get a fresh state (and, in
        subscribe mode, the rebalance's process queue). Returns (removed, added).
        """
        wanted = set(assigned)
        removed: list[QueueState] = []
        for mq in list(self._states):
            if (topic is None or mq.topic == topic) and mq not in wanted:
                state = self._states.pop(mq)
                state.pq.dropped = True
                removed.append(state)
        added: list[QueueState] = []
        for mq in sorted(wanted):
            if mq not in self._states:
                pq = self.process_queue_of(mq) if self.process_queue_of is not None else None
                state = QueueState(mq, pq if pq is not None else ProcessQueue())
                self._states[mq] = state
                added.append(state)
        return removed, added

    def remove_topic(self, topic: str) -> list[QueueState]:
        """Forget every queue of ``topic`` (unsubscribe); their process queues are dropped."""
        removed = [s for mq, s in self._states.items() if mq.topic == topic]
        for state in removed:
            del self._states[state.mq]
            state.pq.dropped = True
        return removed

    # -- pause -----------------------------------------------------------------------------
    def is_paused(self, mq: MessageQueue) -> bool:
        """True for a paused queue, and for one not assigned (Java)."""
        state = self._states.get(mq)
        return True if state is None else state.paused

    def pause(self, mqs: Iterable[MessageQueue]) -> None:
        for mq in mqs:
            state = self._states.get(mq)
            if state is not None:
                state.paused = True

    def resume(self, mqs: Iterable[MessageQueue]) -> None:
        for mq in mqs:
            state = self._states.get(mq)
            if state is not None and state.paused:
                state.paused = False
                state.wakeup.set()


@dataclass(eq=False, slots=True)
class ConsumeRequest:
    """One pulled batch of one queue, partly taken while ``pos`` < len(messages)."""

    state: QueueState
    pq: ProcessQueue
    messages: list[MessageRecord]
    pos: int = 0

    @property
    def remaining(self) -> int:
        return len(self.messages) - self.pos


class ConsumeBuffer:
    """Pulled batches in arrival order; ``take`` hands out up to n messages and moves the
    consume offsets of their queues (Java ``consumeRequestCache`` + ``poll``)."""

    def __init__(self) -> None:
        self._requests: deque[ConsumeRequest] = deque()
        self.count = 0  # messages buffered and not yet taken
        self.ready = asyncio.Event()  # set while something may be taken

    def __len__(self) -> int:
        return len(self._requests)

    def put(self, state: QueueState, pq: ProcessQueue, messages: list[MessageRecord]) -> None:
        if not messages:
            return
        req = ConsumeRequest(state, pq, messages)
        self._requests.append(req)
        state.requests.append(req)
        state.buffered += len(messages)
        state.buffered_bytes += sum([len(m.body) for m in messages])
        self.count += len(messages)
        self.ready.set()

    def take(self, max_messages: int) -> list[MessageRecord]:
        """Up to ``max_messages`` buffered messages, oldest batch first; batches of dropped
        queues are discarded. Each queue's consume offset moves past what was taken (Java:
        to the oldest offset still buffered, the same unless a filter skipped offsets)."""
        out: list[MessageRecord] = []
        requests = self._requests
        while requests and len(out) < max_messages:
            req = requests[0]
            state = req.state
            if req.pq.dropped or state.pq is not req.pq:
                requests.popleft()
                self.count -= req.remaining
                continue
            messages = req.messages
            start = req.pos
            end = min(len(messages), start + max_messages - len(out))
            chunk = messages if start == 0 and end == len(messages) else messages[start:end]
            req.pos = end
            if end >= len(messages):
                requests.popleft()
                if state.requests and state.requests[0] is req:
                    state.requests.popleft()
            taken = len(chunk)
            self.count -= taken
            state.buffered -= taken
            state.buffered_bytes -= sum([len(m.body) for m in chunk])
            state.consume_offset = chunk[-1].queue_offset + 1
            out.extend(chunk)
        if not requests:
            self.ready.clear()
        return out

    def discard(self, state: QueueState) -> int:
        """Drop every buffered batch of the queue (seek, unassigned); the messages dropped."""
        dropped = 0
        if state.requests:
            kept: deque[ConsumeRequest] = deque()
            for req in self._requests:
                if req.state is state:
                    dropped += req.remaining
                else:
                    kept.append(req)
            self._requests = kept
            self.count -= dropped
        state.drop_buffered()
        if not self._requests:
            self.ready.clear()
        return dropped

    def clear(self) -> None:
        for req in self._requests:
            req.state.drop_buffered()
        self._requests.clear()
        self.count = 0
        self.ready.clear()
