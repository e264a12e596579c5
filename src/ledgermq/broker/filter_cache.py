"""SQL92 results computed at dispatch, so pulls skip non-matching messages cheaply
(ledgermq's counterpart of RocketMQ's consume-queue-ext bloom bit map).

RocketMQ (with ``enableCalcFilterBitMap``) evaluates every registered filter when it
dispatches a message and keeps the results beside the consume-queue unit; a pull then
rejects a message from those bits without reading the commit log. Here the reput thread
hands each dispatched record (its properties text already parsed out for the consume
queue) to ``on_dispatch``, which evaluates the expressions consumers have pulled the
record's topic with, and keeps one byte per message: matched or not. A pull asks
``verdict`` first and reads the record's properties only when the answer is unknown:
a message dispatched before its expression was first used, after a restart, or evicted.

Answers are keyed by queue offset and checked against the commit-log offset, and a
dispatch that goes backwards (a slave truncating and re-replicating) clears everything,
so a stale answer is never given. Memory is bounded: ``MAX_CHUNKS`` chunks of ``CHUNK``
messages per (expression, queue), oldest dropped first; an expression no pull used for
``IDLE_MS`` is no longer evaluated.
"""

from __future__ import annotations

import logging
import threading
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field

from ledgermq.clock import Clock
from ledgermq.filter import SqlExpression
from ledgermq.protocol.properties import get_property
from ledgermq.protocol.sysflag import gets_queue_entry
from ledgermq.store.dispatch import DispatchRequest

log = logging.getLogger(__name__)

CHUNK = 1024  # messages per chunk (a power of two)
MAX_CHUNKS = 64  # per (expression, queue): the last ~65k messages, 320 KiB
IDLE_MS = 10 * 60 * 1000
_UNKNOWN, _NO, _YES = 0, 1, 2
_SHIFT = CHUNK.bit_length() - 1
_LOW32 = 0xFFFFFFFF


@dataclass(slots=True)
class _Chunk:
    # The low 32 bits of each message's commit-log offset: what an answer is checked against.
    phys: array[int] = field(default_factory=lambda: array("I", bytes(4 * CHUNK)))
    verdicts: bytearray = field(default_factory=lambda: bytearray(CHUNK))


@dataclass(slots=True)
class _Watched:
    expression: SqlExpression
    last_used_ms: int
    queues: dict[int, dict[int, _Chunk]] = field(default_factory=dict)  # queue id -> chunk no -> chunk


class DispatchMatchCache:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._by_topic: dict[str, dict[str, _Watched]] = {}
        self._lock = threading.Lock()  # watch/unwatch (loop) against on_dispatch (reput thread)
        self._last_phy = -1
        self._dispatched = 0

    # -- the pull side (event loop) ------------------------------------------------------
    def watch(self, topic: str, expression: SqlExpression) -> None:
        """A pull uses ``expression`` on ``topic``: evaluate it for the messages dispatched from now on."""
        now = self.clock.wall_ms()
        watched = self._by_topic.get(topic, {}).get(expression.text)
        if watched is not None:
            watched.last_used_ms = now
            return
        with self._lock:
            table = dict(self._by_topic.get(topic, {}))
            table[expression.text] = _Watched(expression, now)
            self._by_topic = {**self._by_topic, topic: table}

    def verdict_of(self, topic: str, queue_id: int, expression: SqlExpression) -> Callable[[int, int], bool | None]:
        """``verdict(queue_offset, commit_log_offset)``: True/False when known, else None."""
        watched = self._by_topic.get(topic, {}).get(expression.text)
        chunks = watched.queues.get(queue_id) if watched is not None else None
        if chunks is None:
            return _unknown

        def verdict(queue_offset: int, phy: int) -> bool | None:
            chunk = chunks.get(queue_offset >> _SHIFT)
            if chunk is None:
                return None
            i = queue_offset & (CHUNK - 1)
            v = chunk.verdicts[i]
            if v == _UNKNOWN or chunk.phys[i] != phy & _LOW32:
                return None
            return v == _YES

        return verdict

    # -- the dispatch side (reput thread) ------------------------------------------------
    def on_dispatch(self, req: DispatchRequest) -> None:
        if req.commit_log_offset < self._last_phy:
            self._clear()  # the log was cut and is being written again: forget every answer
        self._last_phy = req.commit_log_offset
        table = self._by_topic.get(req.topic)
        if not table or not gets_queue_entry(req.sysflag):
            return
        self._dispatched += 1
        if self._dispatched % 4096 == 0:
            self._forget_idle()
        text = req.properties
        no, i = req.queue_offset >> _SHIFT, req.queue_offset & (CHUNK - 1)
        for watched in table.values():
            expr = watched.expression
            props = {}
            for name in expr.names:
                value = get_property(text, name)
                if value is not None:
                    props[name] = value
            chunks = watched.queues.get(req.queue_id)
            if chunks is None:
                chunks = watched.queues[req.queue_id] = {}
            chunk = chunks.get(no)
            if chunk is None:
                chunk = _Chunk()
                chunks[no] = chunk
                if len(chunks) > MAX_CHUNKS:
                    del chunks[min(chunks)]
            chunk.phys[i] = req.commit_log_offset & _LOW32
            chunk.verdicts[i] = _YES if expr.matches(props) else _NO

    def _clear(self) -> None:
        with self._lock:
            self._by_topic = {
                topic: {text: _Watched(w.expression, w.last_used_ms) for text, w in table.items()}
                for topic, table in self._by_topic.items()
            }

    def _forget_idle(self) -> None:
        cutoff = self.clock.wall_ms() - IDLE_MS
        with self._lock:
            kept = {
                topic: {text: w for text, w in table.items() if w.last_used_ms >= cutoff}
                for topic, table in self._by_topic.items()
            }
            self._by_topic = {topic: table for topic, table in kept.items() if table}


def _unknown(queue_offset: int, phy: int) -> bool | None:
    return None
