"""Request timeouts of a ``Connection``: one deadline timer per connection, exact per request.

A ``Connection`` keeps the deadlines of its pending requests in a heap and one timer armed
at the earliest; these tests pin what callers rely on: each request fails at its own
deadline with ``RequestTimeoutError`` (others keep waiting), a late answer is dropped, a
close fails every pending request, a cancelled caller leaves no entry behind, the timer
goes quiet when nothing is pending, and the heap stays as long as the pending table
whatever order the answers come in. The peer is a real loopback socket that answers only
when the test tells it to; the tests of *when* a deadline fires use an in-memory transport on
a virtual-time loop instead (tests/virtual_time.py), so the times they check are the ones the
connection chose, not how long a loaded machine took to get round to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import heapq
import random
import struct
import sys
import weakref
from collections.abc import AsyncIterator
from typing import Any

import pytest

from ledgermq.aio.loops import new_event_loop
from ledgermq.net.connection import Connection, ConnectionClosedError, RequestTimeoutError
from ledgermq.protocol.command import RemotingCommand, decode_command
from tests.virtual_time import run_virtual

HOST = "127.0.0.1"
CODE = 2001


class Peer:
    """The far end: records each request it reads, answers one when ``answer`` is called."""

    def __init__(self) -> None:
        self.requests: dict[int, RemotingCommand] = {}
        self.writer: asyncio.StreamWriter | None = None
        self.arrived = asyncio.Condition()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                (length,) = struct.unpack(">i", await reader.readexactly(4))
                cmd = decode_command(await reader.readexactly(length))
                async with self.arrived:
                    self.requests[cmd.opaque] = cmd
                    self.arrived.notify_all()

    async def wait_for(self, count: int) -> list[int]:
        """The opaques of the first ``count`` requests, once they have arrived."""
        async with asyncio.timeout(5), self.arrived:
            await self.arrived.wait_for(lambda: len(self.requests) >= count)
        return list(self.requests)[:count]

    def answer(self, opaque: int, n: str) -> None:
        assert self.writer is not None
        self.writer.write(self.requests[opaque].response(0, ext_fields={"n": n}).encode())


@contextlib.asynccontextmanager
async def connected() -> AsyncIterator[tuple[Connection, Peer]]:
    peer = Peer()
    server = await asyncio.start_server(peer.serve, HOST, 0)
    port = server.sockets[0].getsockname()[1]
    loop = asyncio.get_running_loop()
    _transport, conn = await loop.create_connection(Connection, HOST, port)
    try:
        yield conn, peer
    finally:
        conn.close()
        server.close()
        if peer.writer is not None:
            peer.writer.close()
        await asyncio.wait_for(conn.closed.wait(), 5)
        await server.wait_closed()


class MemoryPeer(asyncio.Transport):
    """The far end without a socket: the transport a ``Connection`` writes its requests
    to; ``answer`` feeds a response straight into the connection. Everything happens on
    the loop, so a virtual clock sees every wait."""

    def __init__(self, conn: Connection) -> None:
        super().__init__()
        self.conn = conn
        self.requests: dict[int, RemotingCommand] = {}
        self._closing = False
        self._buffer = b""
        conn.connection_made(self)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._buffer += bytes(data)
        while len(self._buffer) >= 4:
            (length,) = struct.unpack(">i", self._buffer[:4])
            if len(self._buffer) < 4 + length:
                return
            cmd = decode_command(self._buffer[4 : 4 + length])
            self._buffer = self._buffer[4 + length :]
            self.requests[cmd.opaque] = cmd

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            asyncio.get_running_loop().call_soon(self.conn.connection_lost, None)

    def abort(self) -> None:
        self.close()

    async def wait_for(self, count: int) -> list[int]:
        """The opaques of the first ``count`` requests (written by the connection's flush,
        a loop turn after ``request``)."""
        while len(self.requests) < count:
            await asyncio.sleep(0)
        return list(self.requests)[:count]

    def answer(self, opaque: int, n: str) -> None:
        self.conn.data_received(self.requests[opaque].response(0, ext_fields={"n": n}).encode())


@contextlib.asynccontextmanager
async def connected_in_memory() -> AsyncIterator[tuple[Connection, MemoryPeer]]:
    conn = Connection()
    peer = MemoryPeer(conn)
    try:
        yield conn, peer
    finally:
        conn.close()
        await asyncio.wait_for(conn.closed.wait(), 5)


def request(conn: Connection, timeout: float, n: str = "") -> asyncio.Task[RemotingCommand]:
    return asyncio.create_task(conn.request(RemotingCommand.request(CODE, {"n": n}), timeout))


async def ended_at(task: asyncio.Task[RemotingCommand]) -> float:
    """The loop time at which ``task`` finished (it is awaited here, its outcome kept)."""
    with contextlib.suppress(BaseException):
        await task
    return asyncio.get_running_loop().time()


def test_each_request_times_out_at_its_own_deadline_while_others_wait() -> None:
    async def main() -> None:
        async with connected_in_memory() as (conn, peer):
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            # sent in an order unlike their deadlines; the 5 s one is answered after the rest failed
            long = request(conn, 5.0, "long")
            timed = {t: request(conn, t) for t in (0.9, 0.3, 0.6)}
            ends: dict[float, float] = {}
            for t, task in timed.items():
                task.add_done_callback(lambda _task, t=t: ends.__setitem__(t, loop.time() - t0))
            long_opaque = (await peer.wait_for(4))[0]
            await asyncio.wait(timed.values(), timeout=5)
            for t, task in timed.items():
                exc = task.exception()
                assert isinstance(exc, RequestTimeoutError)
                assert str(exc) == f"no answer from {conn.peer} within {t:.1f}s"
            # each at its own deadline (virtual time: exactly), no other
            assert ends == pytest.approx({0.3: 0.3, 0.6: 0.6, 0.9: 0.9}), ends
            assert not long.done()
            assert list(conn.pending) == [long_opaque]
            peer.answer(long_opaque, "long")
            assert (await asyncio.wait_for(long, 5)).ext_fields["n"] == "long"
            assert conn.pending == {}

    run_virtual(main())


def test_a_late_answer_after_the_timeout_is_dropped() -> None:
    async def main() -> None:
        async with connected() as (conn, peer):
            late = request(conn, 0.1)
            (late_opaque,) = await peer.wait_for(1)
            with pytest.raises(RequestTimeoutError):
                await late
            assert conn.pending == {}
            peer.answer(late_opaque, "late")  # arrives before the next request's own answer
            nxt = request(conn, 5.0)
            _, opaque = await peer.wait_for(2)
            peer.answer(opaque, "mine")
            resp = await asyncio.wait_for(nxt, 5)
            assert (resp.opaque, resp.ext_fields["n"]) == (opaque, "mine")
            assert conn.is_open and conn.pending == {}

    asyncio.run(main())


def test_close_fails_every_pending_request_and_stops_the_timer() -> None:
    async def main() -> None:
        async with connected() as (conn, peer):
            tasks = [request(conn, t) for t in (30.0, 10.0, 20.0)]
            await peer.wait_for(3)
            conn.close()
            results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)
            assert all(isinstance(r, ConnectionClosedError) for r in results), results
            assert conn.pending == {}
            assert conn._timer is None and conn._deadlines == []

    asyncio.run(main())


def test_a_cancelled_caller_is_cancelled_and_leaves_no_entry() -> None:
    async def main() -> None:
        async with connected() as (conn, peer):
            doomed = request(conn, 5.0)
            (doomed_opaque,) = await peer.wait_for(1)
            doomed.cancel()
            with pytest.raises(asyncio.CancelledError):
                await doomed
            assert conn.pending == {} and conn._deadlines == []
            peer.answer(doomed_opaque, "too late")  # dropped like any late answer
            nxt = request(conn, 5.0)
            _, opaque = await peer.wait_for(2)
            peer.answer(opaque, "mine")
            assert (await asyncio.wait_for(nxt, 5)).ext_fields["n"] == "mine"

    asyncio.run(main())


def test_the_timer_goes_quiet_when_nothing_is_pending() -> None:
    fired: list[float] = []

    class Counting(Connection):
        def _on_deadline(self) -> None:
            fired.append(asyncio.get_running_loop().time())
            super()._on_deadline()

    async def main() -> None:
        async with connected_in_memory() as (conn, peer):
            conn.__class__ = Counting
            loop = asyncio.get_running_loop()
            for i in range(3):  # answered long before their 0.2 s deadlines
                task = request(conn, 0.2)
                (opaque,) = (await peer.wait_for(i + 1))[i:]
                peer.answer(opaque, "ok")
                await asyncio.wait_for(task, 5)
            assert conn._timer is not None  # armed once, at the first deadline: not once per request
            deadline = loop.time() + 5
            while conn._timer is not None and loop.time() < deadline:
                await asyncio.sleep(0.02)
            assert conn._timer is None and len(fired) == 1  # fired once, found nothing, stayed off
            assert fired == [pytest.approx(0.2)]  # at the first request's deadline
            await asyncio.sleep(0.4)  # two more would-be deadlines
            assert len(fired) == 1

    run_virtual(main())


def test_on_uvloop_each_deadline_fires_about_once_at_its_time() -> None:
    """uvloop's millisecond timers fire up to half a millisecond early: the timer must
    count such a deadline as reached, not re-arm for the rest and spin the loop."""
    fired: list[float] = []

    class Counting(Connection):
        def _on_deadline(self) -> None:
            fired.append(asyncio.get_running_loop().time())
            super()._on_deadline()

    rng = random.Random(12)
    timeouts = [round(rng.uniform(0.05, 0.4), 4) for _ in range(20)]

    async def main() -> None:
        async with connected() as (conn, peer):
            conn.__class__ = Counting
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            ends: dict[int, float] = {}
            tasks = [request(conn, t) for t in timeouts]
            for i, task in enumerate(tasks):
                task.add_done_callback(lambda _task, i=i: ends.__setitem__(i, loop.time() - t0))
            await peer.wait_for(len(tasks))
            await asyncio.wait(tasks, timeout=5)
            assert all(isinstance(task.exception(), RequestTimeoutError) for task in tasks)
            for i, t in enumerate(timeouts):
                # not before its deadline (uvloop's millisecond timers may be early by half of
                # one); how late depends on the machine, so it is not checked here (the stock
                # loop's test above checks "at its own deadline" on a virtual clock)
                assert ends[i] >= t - 2e-3, (t, ends[i])
            assert len(fired) <= len(timeouts) + 2, len(fired)  # about one firing per deadline

    loop = new_event_loop()  # uvloop, as the client and the CLI run
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def test_the_deadline_heap_stays_as_long_as_the_pending_table() -> None:
    async def main() -> None:
        async with connected() as (conn, peer):
            # 400 requests whose later ones have earlier deadlines, answered oldest first:
            # answered entries pile up below the live top unless compacted
            tasks = [request(conn, 30.0 - i * 0.01, str(i)) for i in range(400)]
            opaques = await peer.wait_for(400)
            longest = 0
            for i, opaque in enumerate(opaques):
                peer.answer(opaque, str(i))
                assert (await asyncio.wait_for(tasks[i], 5)).ext_fields["n"] == str(i)
                longest = max(longest, len(conn._deadlines) - 2 * len(conn.pending))
            assert longest <= 64
            assert conn.pending == {} and conn._deadlines == []

    asyncio.run(main())


def test_answers_read_at_once_do_not_make_every_ending_request_compact_the_heap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """400 answers in one write empty the pending table before any await has ended: the
    heap is compacted by the count of awaits still running, or each of the 400 endings
    would rebuild it (quadratic)."""
    rebuilds = 0
    real_heapify = heapq.heapify

    def counting_heapify(heap: list[Any]) -> None:
        nonlocal rebuilds
        if sys._getframe(1).f_code.co_name == "_drop_ended":  # not the event loop's own timers
            rebuilds += 1
        real_heapify(heap)

    monkeypatch.setattr(heapq, "heapify", counting_heapify)

    async def main() -> None:
        async with connected() as (conn, peer):
            tasks = [request(conn, 30.0, str(i)) for i in range(400)]
            opaques = await peer.wait_for(400)
            assert peer.writer is not None
            peer.writer.write(b"".join(peer.requests[o].response(0).encode() for o in reversed(opaques)))
            await asyncio.wait_for(asyncio.gather(*tasks), 5)
            assert conn.pending == {} and conn._deadlines == []

    asyncio.run(main())
    assert rebuilds <= 4, rebuilds


def test_answers_are_not_kept_alive_by_the_deadline_heap() -> None:
    """A request held long on top of the heap (the earliest deadline: a long-polling pull)
    keeps the entries of later, answered requests below it until compaction; those
    entries must not keep the answers (a pull answer can carry megabytes)."""

    async def main() -> None:
        async with connected() as (conn, peer):
            held = request(conn, 2.0)  # earliest deadline, never answered here
            later = [request(conn, 10.0, str(i)) for i in range(20)]
            opaques = await peer.wait_for(21)
            for i, opaque in enumerate(opaques[1:]):
                peer.answer(opaque, str(i))
            answers = await asyncio.wait_for(asyncio.gather(*later), 5)
            assert [a.ext_fields["n"] for a in answers] == [str(i) for i in range(20)]
            assert len(conn._deadlines) == 21  # below the held one, not compacted yet
            holders = [entry for entry in conn._deadlines if entry[3] is not None]
            assert len(holders) == 1 and holders[0][2] == opaques[0]
            held.cancel()
            with pytest.raises(asyncio.CancelledError):
                await held
            assert conn._deadlines == [] and conn.pending == {}

    asyncio.run(main())


def test_a_timed_out_request_leaves_no_reference_cycle() -> None:
    """The timeout error is freed by reference counting alone once its task is gone: no
    cycle through the future that held the error and the frame that awaited it, so a
    timeout gives the cyclic collector nothing to do."""

    async def main() -> None:
        async with connected() as (conn, peer):
            task = request(conn, 0.05)
            await peer.wait_for(1)
            try:
                await task
            except RequestTimeoutError as exc:
                ref = weakref.ref(exc)
            del task
            for _ in range(3):  # the loop lets go of the finished task's wake-up call
                await asyncio.sleep(0)
            assert ref() is None

    gc.disable()  # only reference counting frees anything here
    try:
        asyncio.run(main())
    finally:
        gc.enable()
