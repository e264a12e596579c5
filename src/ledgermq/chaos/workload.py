"""The load: our asyncio producer's sync sends, every attempt recorded.

A few concurrent senders share one producer; each takes the next sequence number (unique
across the run, so each sender's numbers increase), sends a small message carrying it in
the body (``seq=<n> sender=<s>;`` then padding) and in its keys, and waits for the answer.
The total rate is bounded. Every attempt is kept with its start and end (time.monotonic())
and outcome: ``SEND_OK`` with the queue and offset, another send status, or the exception;
with a hash of the body it sent (the checker compares every copy read back with it) and,
when acknowledged, the commit-log offset the broker stored it at (from its offset message
id: what a power loss's durable ends are compared with).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import time
from dataclasses import asdict, dataclass
from typing import Any

from ledgermq.client import Message, Producer
from ledgermq.client.message import SendStatus
from ledgermq.client.tls import TlsOptions
from ledgermq.protocol.msgid import decode_offset_msg_id

TOPIC = "ChaosTopic"
QUEUES = 4
SEND_OK = SendStatus.SEND_OK.value
_BODY = re.compile(rb"^seq=(\d+) sender=(\d+);")


@dataclass(slots=True)
class Attempt:
    seq: int
    sender: int
    start: float
    end: float
    outcome: str  # SEND_OK, another SendStatus, or "error:<ExceptionType>"
    queue_id: int = -1
    queue_offset: int = -1
    error: str = ""
    digest: str = ""  # content_digest of the body sent
    phys: int = -1  # the commit-log offset of an acknowledged message, -1 when unknown

    @property
    def acked(self) -> bool:
        return self.outcome == SEND_OK

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def body_for(seq: int, sender: int, size: int) -> bytes:
    head = f"seq={seq} sender={sender};".encode()
    return head + b"x" * max(0, size - len(head))


def content_digest(body: bytes | bytearray | memoryview) -> str:
    """A short hash of a body: enough to tell a served copy from the one sent."""
    return hashlib.blake2b(body, digest_size=8).hexdigest()


def _physical_offset(offset_msg_id: str) -> int:
    try:
        return decode_offset_msg_id(offset_msg_id.split(",")[0])[1]
    except Exception:
        return -1


def parse_body(body: bytes) -> tuple[int, int] | None:
    """(seq, sender) of a chaos message, None for anything else."""
    m = _BODY.match(body)
    return (int(m.group(1)), int(m.group(2))) if m else None


class Workload:
    def __init__(
        self,
        namesrv: str,
        *,
        topic: str = TOPIC,
        senders: int = 4,
        rate: float = 200.0,
        size: int = 128,
        send_timeout: float = 3.0,
        group: str = "chaos-producer",
        tls: TlsOptions | None = None,
    ) -> None:
        self.namesrv = namesrv
        self.topic = topic
        self.senders = senders
        self.interval = senders / rate  # seconds between one sender's sends
        self.size = size
        self.send_timeout = send_timeout
        self.group = group
        self.tls = tls  # None: plain
        self.attempts: list[Attempt] = []
        self.last_ok_end = 0.0
        self._next_seq = 0
        self._stopping = asyncio.Event()
        self._ok = asyncio.Event()  # set on every SEND_OK (cleared by waiters)
        self._tasks: list[asyncio.Task[None]] = []
        self._producer: Producer | None = None
        self.abandoned = 0  # attempts the producer abandoned for a new master (see docs/client.md)

    async def start(self) -> None:
        self._producer = Producer(
            self.group, self.namesrv, send_timeout=self.send_timeout, use_tls=self.tls is not None, tls=self.tls
        )
        await self._producer.start()
        self._tasks = [asyncio.create_task(self._sender(i)) for i in range(self.senders)]

    async def stop(self) -> None:
        self._stopping.set()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=self.send_timeout * 3 + 5)
        for t in self._tasks:
            t.cancel()
        if self._producer is not None:
            self.abandoned = self._producer.master_watch.abandoned
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._producer.shutdown(), 10.0)

    async def wait_ok_after(self, moment: float, timeout: float) -> float:
        """The end time of the first SEND_OK that started at or after ``moment``; 0.0 if none
        within ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            found = self._first_ok_after(moment)
            if found or time.monotonic() >= deadline:
                return found
            self._ok.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ok.wait(), max(0.01, min(1.0, deadline - time.monotonic())))

    def _first_ok_after(self, moment: float) -> float:
        """Attempts are appended as they end, so only the tail after ``moment`` is looked at."""
        found = 0.0
        for a in reversed(self.attempts):
            if a.end < moment:
                break
            if a.acked and a.start >= moment:
                found = a.end  # walking backwards: the last one kept ended first
        return found

    async def _sender(self, sender: int) -> None:
        assert self._producer is not None
        while not self._stopping.is_set():
            seq = self._next_seq
            self._next_seq += 1
            body = body_for(seq, sender, self.size)
            digest = content_digest(body)
            msg = Message(self.topic, body, keys=f"chaos-{seq}")
            start = time.monotonic()
            try:
                result = await self._producer.send(msg)
            except asyncio.CancelledError:
                self.attempts.append(Attempt(seq, sender, start, time.monotonic(), "error:Cancelled", digest=digest))
                raise
            except Exception as exc:
                attempt = Attempt(seq, sender, start, time.monotonic(), f"error:{type(exc).__name__}", digest=digest)
                attempt.error = str(exc)[:300]
            else:
                attempt = Attempt(
                    seq, sender, start, time.monotonic(), result.status.value, result.queue.queue_id,
                    result.queue_offset, digest=digest, phys=_physical_offset(result.offset_msg_id),
                )  # fmt: skip
                if attempt.acked:
                    self.last_ok_end = attempt.end
                    self._ok.set()
            self.attempts.append(attempt)
            pause = self.interval - (time.monotonic() - start)
            if pause > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), pause)
