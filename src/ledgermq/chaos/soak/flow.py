"""One checked message flow of a soak: a producer sending at a bounded rate, the consumers
that must receive what it sent, and what they got wrong.

A flow numbers its messages ``<flow>-<n>`` (the start of the body, up to ``;``). Each
consumer has a ``Receiver``: the keys it must get (acknowledged and, for a filtering
consumer, matching) and the keys it must never get (a rolled-back transaction, a message
its filter excludes). At the end a flow reports per receiver what is missing, what
arrived that must not have, duplicates (at-least-once allows them; reported, not failed)
and the flow's own checks (order, delay).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ledgermq.client import ConsumeFromWhere, PushConsumer
from ledgermq.protocol.message import MessageRecord

EXAMPLES = 10
Listener = Callable[[list[MessageRecord], Any], Any]
SHUTDOWN_S = 10.0


def key_of(record: MessageRecord) -> str:
    """The flow's key of a message: its body up to the first ``;``."""
    return bytes(record.body).split(b";", 1)[0].decode(errors="replace")


@dataclass(slots=True)
class Receiver:
    """What one consumer must and must not receive."""

    name: str
    expected: set[str] = field(default_factory=set)
    forbidden: set[str] = field(default_factory=set)
    seen: Counter[str] = field(default_factory=Counter)

    def arrived(self, key: str) -> bool:
        """Count an arrival; True the first time ``key`` arrives. (Whether it was allowed is
        judged at the end: a committed transaction may arrive before its producer learns
        that its commit went through.)"""
        self.seen[key] += 1
        return self.seen[key] == 1

    def unexpected(self) -> list[str]:
        return sorted(k for k in self.seen if k in self.forbidden)

    def outstanding(self) -> int:
        return sum(1 for k in self.expected if k not in self.seen)

    def to_json(self) -> dict[str, Any]:
        missing = sorted(k for k in self.expected if k not in self.seen)
        unexpected = self.unexpected()
        return {
            "receiver": self.name,
            "expected": len(self.expected),
            "received": len(self.expected) - len(missing),
            "missing": len(missing),
            "missing_examples": missing[:EXAMPLES],
            "unexpected": len(unexpected),
            "unexpected_examples": unexpected[:EXAMPLES],
            "duplicates": sum(1 for n in self.seen.values() if n > 1),
        }


class Flow:
    """Subclasses set ``name``/``topic``, build their producer in ``start_producer`` and
    consumers in ``start_consumers``, and send one message in ``send_one``."""

    name = "flow"
    topic = "SoakTopic"
    queues = 4

    def __init__(self, namesrv: str, seed: int, rate: float, send_timeout: float = 3.0) -> None:
        self.namesrv = namesrv
        self.rng = random.Random(f"{seed}-{self.name}")
        self.interval = 1.0 / rate
        self.send_timeout = send_timeout
        self.sends: list[tuple[float, float, bool]] = []  # (end, latency s, acknowledged), time.monotonic()
        self.errors: Counter[str] = Counter()
        self.receivers: list[Receiver] = []
        self.consumers: list[PushConsumer] = []
        self.problems: dict[str, list[str]] = {}  # a flow's own checks: name -> examples (all of them count)
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # -- what subclasses provide -------------------------------------------------------
    async def start_producer(self) -> None:
        raise NotImplementedError

    async def stop_producer(self) -> None:
        raise NotImplementedError

    async def start_consumers(self) -> None:
        raise NotImplementedError

    async def send_one(self, n: int) -> bool:
        """Send message ``n``; True when acknowledged (SEND_OK)."""
        raise NotImplementedError

    # -- shared ------------------------------------------------------------------------
    def problem(self, kind: str, example: str) -> None:
        self.problems.setdefault(kind, []).append(example)

    async def consumer(
        self, group: str, expression: str, listener: Listener, *, orderly: bool = False, expression_type: str = "TAG"
    ) -> PushConsumer:
        c = PushConsumer(group, self.namesrv, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        c.subscribe(self.topic, expression, expression_type=expression_type)
        if orderly:
            c.register_orderly_listener(listener)
        else:
            c.register_listener(listener)
        await c.start()
        self.consumers.append(c)
        return c

    async def start(self) -> None:
        await self.start_consumers()
        await self.start_producer()
        self._task = asyncio.create_task(self._send_loop(), name=f"soak-{self.name}")

    async def _send_loop(self) -> None:
        n = 0
        while not self._stopping.is_set():
            started = time.monotonic()
            try:
                acked = await self.send_one(n)
            except Exception as exc:
                acked = False
                self.errors[type(exc).__name__] += 1
            ended = time.monotonic()
            self.sends.append((ended, ended - started, acked))
            n += 1
            pause = self.interval - (ended - started)
            if pause > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), pause)

    async def stop_sending(self) -> None:
        self._stopping.set()
        if self._task is not None:
            await asyncio.wait([self._task], timeout=self.send_timeout * 3 + 5)
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def stop(self) -> None:
        await self.stop_sending()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.stop_producer(), SHUTDOWN_S)
        for c in self.consumers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(c.shutdown(), SHUTDOWN_S)

    def outstanding(self) -> int:
        """Expected messages not received yet (the drain waits for 0)."""
        return sum(r.outstanding() for r in self.receivers)

    def result(self) -> dict[str, Any]:
        receivers = [r.to_json() for r in self.receivers]
        problems = {k: {"count": len(v), "examples": v[:EXAMPLES]} for k, v in sorted(self.problems.items())}
        failed = any(r["missing"] or r["unexpected"] for r in receivers) or any(self.problems.values())
        return {
            "flow": self.name,
            "topic": self.topic,
            "attempts": len(self.sends),
            "acked": sum(1 for s in self.sends if s[2]),
            "send_errors": dict(self.errors),
            "receivers": receivers,
            "problems": problems,
            "failed": failed,
        }
