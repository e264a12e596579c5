"""A raw pipelined remoting connection for the guarantee tests: no client library between
the test and the bytes, so what is checked is what the server wrote.

``Pipe`` writes any number of requests back to back (one ``write``) with opaques the test
chose, and a reader task collects every answer as it arrives. ``on_answer`` runs at the
moment an answer is read (same event loop as an in-process broker), so a test can take a
snapshot of the broker's state (flushed offset, acknowledged offset) exactly when the
answer was seen. Every answer is checked to be a response to an opaque this pipe sent and
not yet answered; anything else is recorded in ``problems``, fails ``check_clean``, and
fails the next ``until``/``stays`` poll at once (rather than letting it time out).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ledgermq.protocol.command import RemotingCommand, decode_command

HOST = "127.0.0.1"
_OPEN: list[Pipe] = []  # pipes whose problems every poll checks


@dataclass(slots=True)
class Answer:
    response: RemotingCommand
    seq: int  # arrival order over every pipe of a test (one shared counter)
    seen: Any = None  # what ``on_answer`` returned when it arrived


@dataclass
class Pipe:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    counter: list[int]  # shared arrival counter
    on_answer: Callable[[RemotingCommand], Any] | None = None
    sent: dict[int, RemotingCommand] = field(default_factory=dict)
    answers: dict[int, Answer] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls, port: int, counter: list[int] | None = None, on_answer: Callable[[RemotingCommand], Any] | None = None
    ) -> Pipe:
        reader, writer = await asyncio.open_connection(HOST, port)
        pipe = cls(reader, writer, counter if counter is not None else [0], on_answer)
        pipe._task = asyncio.create_task(pipe._read_loop())
        _OPEN.append(pipe)
        return pipe

    def write(self, requests: Iterable[RemotingCommand]) -> None:
        """Send every request in one write (pipelined); each must carry its own opaque."""
        frames = []
        for cmd in requests:
            assert cmd.opaque not in self.sent, f"opaque {cmd.opaque} reused by the test"
            self.sent[cmd.opaque] = cmd
            frames.append(cmd.encode())
        self.writer.write(b"".join(frames))

    async def _read_loop(self) -> None:
        reader = self.reader
        try:
            while True:
                (length,) = struct.unpack(">i", await reader.readexactly(4))
                cmd = decode_command(await reader.readexactly(length))
                seen = self.on_answer(cmd) if self.on_answer is not None else None
                self.counter[0] += 1
                if not cmd.is_response:
                    self.problems.append(f"a request frame (code {cmd.code}) where answers were expected")
                elif cmd.opaque not in self.sent:
                    self.problems.append(f"an answer with opaque {cmd.opaque}, which no request on this pipe had")
                elif cmd.opaque in self.answers:
                    self.problems.append(f"a second answer for opaque {cmd.opaque}")
                elif self.sent[cmd.opaque].is_oneway:
                    self.problems.append(f"an answer to the oneway request {cmd.opaque}")
                else:
                    self.answers[cmd.opaque] = Answer(cmd, self.counter[0], seen)
        except (asyncio.IncompleteReadError, ConnectionError):
            return

    def check_clean(self) -> None:
        assert not self.problems, self.problems

    async def close(self) -> None:
        if self in _OPEN:
            _OPEN.remove(self)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        self.writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.writer.wait_closed(), 1.0)


async def until(cond: Callable[[], bool], timeout: float, what: Callable[[], str] | str) -> None:
    """Poll ``cond`` every 5 ms until it holds; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        _no_problems()
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s: {what() if callable(what) else what}")
        await asyncio.sleep(0.005)


async def stays(cond: Callable[[], bool], seconds: float, what: Callable[[], str] | str) -> None:
    """``cond`` keeps holding for ``seconds`` (checked every 5 ms): for "nothing is answered
    yet" while a test holds what the answer must wait for. A premature answer would come
    within microseconds of the work it skipped, so a short window catches it."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        _no_problems()
        if not cond():
            raise AssertionError(what() if callable(what) else what)
        await asyncio.sleep(0.005)
    if not cond():
        raise AssertionError(what() if callable(what) else what)


def _no_problems() -> None:
    problems = [p for pipe in _OPEN for p in pipe.problems]
    assert not problems, f"answers that match no request: {problems[:5]}"
