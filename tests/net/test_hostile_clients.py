"""Clients that misbehave: malformed frames, oversized lengths, floods, slow readers, idlers.

The server must answer what it can, close what it cannot parse, bound the memory any one
peer can pin, and keep serving well-behaved clients throughout. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import pytest
import uvloop

from ledgermq.net.connection import Connection
from ledgermq.net.server import RemotingServer, RequestContext
from ledgermq.protocol.command import RemotingCommand, decode_command
from tests.net.test_server_client import (
    ECHO,
    HOST,
    SLOW,
    addr,
    assert_eof,
    echo,
    make_server,
    raw_connection,
    raw_frame,
    read_frame,
    remoting_client,
    serving,
    wait_until,
)
from tests.virtual_time import run_virtual

BIG = 1101
MiB = 1024 * 1024


def run(coro: Coroutine[Any, Any, None], loop: str = "asyncio") -> None:
    """Run on the stock asyncio loop (what asyncio.run uses) or on uvloop (what the CLI uses)."""
    factory = uvloop.new_event_loop if loop == "uvloop" else None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(coro)


async def assert_still_serving(server: RemotingServer, within: float = 2.0) -> None:
    async with remoting_client() as client:
        response = await asyncio.wait_for(
            client.invoke(addr(server), RemotingCommand.request(ECHO, {"n": "ok"}), within), within
        )
        assert response.code == 0 and response.ext_fields["n"] == "ok"


# -- malformed frames ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("header", "serialize_type"),
    [
        pytest.param(b'{"code":1001,"flag":0,"opaque":77,"extFields":{', 0, id="truncated-json"),
        pytest.param(b'{"code":"abc","flag":0,"opaque":77}', 0, id="non-integer-code"),
        pytest.param(b'{"code":1001,"extFields":[1,2],"opaque":77}', 0, id="extfields-not-object"),
        pytest.param(b'{"code":1001,"flag":0,"opaque":77}', 5, id="unknown-serialize-type"),
    ],
)
def test_malformed_header_with_readable_opaque_gets_system_error(header: bytes, serialize_type: int) -> None:
    async def main() -> None:
        async with serving(make_server()) as server, raw_connection(server) as (reader, writer):
            writer.write(raw_frame(header, b"body", serialize_type))
            response = await read_frame(reader)
            assert (response.code, response.opaque, response.flag & 1) == (1, 77, 1)
            assert response.remark is not None and response.remark.startswith("malformed request")
            # The framing was intact, so the connection goes on.
            writer.write(RemotingCommand.request(ECHO, {"n": "after"}, opaque=78).encode())
            after = await read_frame(reader)
            assert (after.code, after.opaque, after.ext_fields["n"]) == (0, 78, "after")

    asyncio.run(main())


@pytest.mark.parametrize(
    "header",
    [
        pytest.param(b"this is not json", id="garbage"),
        pytest.param(b'{"code":1001,"flag":0,', id="truncated-before-opaque"),
        pytest.param(b"", id="empty-header"),
    ],
)
def test_malformed_header_without_opaque_closes_the_connection(header: bytes) -> None:
    async def main() -> None:
        async with serving(make_server()) as server:
            async with raw_connection(server) as (reader, writer):
                writer.write(raw_frame(header))
                await assert_eof(reader)
            await assert_still_serving(server)

    asyncio.run(main())


def test_header_length_beyond_the_frame_closes_the_connection() -> None:
    async def main() -> None:
        async with serving(make_server()) as server:
            async with raw_connection(server) as (reader, writer):
                frame = bytearray(raw_frame(b'{"code":1001}'))
                frame[4:8] = (5000).to_bytes(4, "big")  # header length 5000 in a 17-byte frame
                writer.write(bytes(frame))
                await assert_eof(reader)
            await assert_still_serving(server)

    asyncio.run(main())


def test_requests_behind_an_unparseable_frame_are_not_processed() -> None:
    """Once the server decides to close a connection (a header with no readable opaque), the
    requests that arrived behind it in the same read must not run: their answers cannot be
    delivered, and their side effects would be tied to a connection that is already gone (a
    name server would register a broker whose connection-close cleanup already ran)."""

    async def main() -> None:
        seen: list[int] = []

        async def record(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
            seen.append(cmd.opaque)
            return cmd.response(0)

        server = make_server()
        server.register(SLOW, record)
        async with serving(server):
            async with raw_connection(server) as (reader, writer):
                writer.write(raw_frame(b"garbage") + RemotingCommand.request(SLOW, opaque=5).encode())
                await assert_eof(reader)
            await assert_still_serving(server)
            assert seen == [], "a request behind the unparseable frame ran on a closed connection"

    asyncio.run(main())


@pytest.mark.parametrize(
    "length",
    [
        pytest.param(4097, id="just-above-max"),
        pytest.param(2**31 - 1, id="int-max"),
        pytest.param(0, id="zero"),
        pytest.param(3, id="below-header-word"),
        pytest.param(-1, id="negative"),
    ],
)
def test_impossible_frame_length_closes_the_connection(length: int) -> None:
    async def main() -> None:
        server = make_server(max_frame_size=4096)
        async with serving(server):
            async with remoting_client() as good:
                assert (await good.invoke(addr(server), RemotingCommand.request(ECHO), 3)).code == 0
                async with raw_connection(server) as (reader, writer):
                    # Only the length word and a few bytes: the server must not wait for the rest.
                    writer.write(length.to_bytes(4, "big", signed=True) + b"\x00\x00\x00\x05abcde")
                    await assert_eof(reader)
                # An established client and a new one are both still served.
                assert (await good.invoke(addr(server), RemotingCommand.request(ECHO), 3)).code == 0
            await assert_still_serving(server)
            await wait_until(lambda: not server.connections, what="all connections gone")

    asyncio.run(main())


def test_frame_at_exactly_max_frame_size_is_accepted() -> None:
    async def main() -> None:
        server = make_server(max_frame_size=4096)
        async with serving(server), raw_connection(server) as (reader, writer):
            request = RemotingCommand.request(ECHO, {"n": 1}, opaque=3)
            header_len = len(request.encode()) - 8
            request.body = b"b" * (4096 - 4 - header_len)
            frame = request.encode()
            assert int.from_bytes(frame[:4], "big") == 4096
            writer.write(frame)
            response = await read_frame(reader)
            assert (response.opaque, response.code, len(response.body)) == (3, 0, len(request.body))

    asyncio.run(main())


def test_random_garbage_never_takes_the_server_down() -> None:
    async def main() -> None:
        rng = random.Random(20240611)
        async with serving(make_server(max_frame_size=64 * 1024)) as server:
            for _ in range(40):
                blob = rng.randbytes(rng.randint(1, 2048))
                async with raw_connection(server) as (reader, writer):
                    writer.write(blob)
                    writer.write_eof()
                    # Whatever the server makes of it, it answers or closes; it never hangs.
                    async with asyncio.timeout(3):
                        while await reader.read(65536):
                            pass
            await assert_still_serving(server)
            await wait_until(lambda: not server.connections, what="all garbage connections gone")
            assert server.inflight == 0

    asyncio.run(main())


def test_unsolicited_response_frames_are_ignored() -> None:
    async def main() -> None:
        async with serving(make_server()) as server, raw_connection(server) as (reader, writer):
            stray = RemotingCommand.request(0, opaque=999)
            stray.flag = 1  # a "response" to nothing
            writer.write(stray.encode())
            writer.write(RemotingCommand.request(ECHO, opaque=5).encode())
            response = await read_frame(reader)
            assert (response.opaque, response.code) == (5, 0)

    asyncio.run(main())


# -- overload ----------------------------------------------------------------------------
def test_system_busy_once_max_inflight_per_connection_are_parked() -> None:
    async def main() -> None:
        gate = asyncio.Event()

        async def slow(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
            await gate.wait()
            return cmd.response(0, ext_fields={"n": cmd.ext_fields["n"]})

        server = make_server(max_inflight_per_connection=4)
        server.register(SLOW, slow)
        async with serving(server), remoting_client() as flooder, remoting_client() as other:
            parked = [
                asyncio.create_task(flooder.invoke(addr(server), RemotingCommand.request(SLOW, {"n": i}), 10))
                for i in range(4)
            ]
            await wait_until(lambda: server.inflight == 4, what="four parked requests")
            busy = await flooder.invoke(addr(server), RemotingCommand.request(SLOW, {"n": 4}), 2)
            assert busy.code == 2
            assert busy.remark is not None and "[OVERLOAD]" in busy.remark
            # Unknown codes are still answered at once (they cost nothing).
            assert (await flooder.invoke(addr(server), RemotingCommand.request(9999), 2)).code == 3
            # Another client is not affected by the flooder's limit: served while the four
            # are still parked.
            assert (await other.invoke(addr(server), RemotingCommand.request(ECHO), 5)).code == 0
            assert server.inflight == 4 and not any(t.done() for t in parked)
            gate.set()
            done = await asyncio.wait_for(asyncio.gather(*parked), 5)
            assert [r.code for r in done] == [0, 0, 0, 0]
            assert [r.ext_fields["n"] for r in done] == ["0", "1", "2", "3"]
            await wait_until(lambda: server.inflight == 0, what="inflight back to 0")
            assert (await flooder.invoke(addr(server), RemotingCommand.request(SLOW, {"n": 9}), 2)).code == 0

    asyncio.run(main())


def test_system_busy_once_max_inflight_total_is_reached() -> None:
    async def main() -> None:
        gate = asyncio.Event()

        async def slow(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
            await gate.wait()
            return cmd.response(0)

        server = make_server(max_inflight_per_connection=100, max_inflight_total=3)
        server.register(SLOW, slow)
        async with serving(server), remoting_client() as a, remoting_client() as b:
            parked = [asyncio.create_task(c.invoke(addr(server), RemotingCommand.request(SLOW), 10)) for c in (a, a, b)]
            await wait_until(lambda: server.inflight == 3, what="three parked requests")
            assert (await b.invoke(addr(server), RemotingCommand.request(ECHO), 2)).code == 2
            gate.set()
            assert [r.code for r in await asyncio.wait_for(asyncio.gather(*parked), 5)] == [0, 0, 0]
            assert (await b.invoke(addr(server), RemotingCommand.request(ECHO), 2)).code == 0

    asyncio.run(main())


def test_parked_requests_do_not_count_towards_the_overload_limit() -> None:
    """RequestContext.park() (a held pull) takes a request out of the in-flight count until
    unpark(); the counts come back to zero afterwards. (The limit is checked at dispatch,
    before a processor can park: requests arriving in one burst above the limit are still
    refused, so the held ones here are sent one at a time.)"""

    async def main() -> None:
        gate = asyncio.Event()
        parked: list[int] = []

        async def held(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
            ctx.park()
            parked.append(cmd.opaque)
            try:
                await gate.wait()
            finally:
                ctx.unpark()
            return cmd.response(0)

        server = make_server(max_inflight_per_connection=2)
        server.register(SLOW, held)
        async with serving(server), remoting_client() as client:
            held_calls = []
            for i in range(5):
                held_calls.append(asyncio.create_task(client.invoke(addr(server), RemotingCommand.request(SLOW), 10)))
                await wait_until(lambda n=i + 1: len(parked) == n, what=f"held request {i} parked")  # type: ignore[misc]
            assert server.inflight == 0
            assert (await client.invoke(addr(server), RemotingCommand.request(ECHO), 2)).code == 0
            gate.set()
            assert [r.code for r in await asyncio.wait_for(asyncio.gather(*held_calls), 5)] == [0] * 5
            await wait_until(lambda: server.inflight == 0, what="inflight back to 0")
            assert all(c.inflight == 0 for c in server.connections)

    asyncio.run(main())


# -- slow readers (backpressure) -------------------------------------------------------
class SmallBufferServer(RemotingServer):
    """A RemotingServer whose connections close past ``max_write_buffer`` bytes of unsent data."""

    def __init__(self, *args: Any, max_write_buffer: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_write_buffer = max_write_buffer

    def _new_connection(self) -> Connection:
        conn = Connection(
            self._on_request,
            self._on_bad_frame,
            self._on_close,
            max_frame_size=self.max_frame_size,
            max_write_buffer=self.max_write_buffer,
        )
        self.connections.add(conn)
        return conn


def big_response_server(server: RemotingServer, calls: list[int]) -> RemotingServer:
    payload = b"r" * MiB

    async def big(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        calls.append(cmd.opaque)
        return cmd.response(0, body=payload)

    server.register(ECHO, echo)
    server.register(BIG, big)
    return server


@contextlib.asynccontextmanager
async def non_reading_socket(port: int) -> AsyncIterator[socket.socket]:
    """A client socket with a tiny receive buffer that never reads."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    try:
        await asyncio.wait_for(asyncio.get_running_loop().sock_connect(sock, (HOST, port)), 3)
        yield sock
    finally:
        sock.close()


def server_side_buffer(server: RemotingServer) -> int:
    return max(
        (c.transport.get_write_buffer_size() for c in server.connections if c.transport is not None),
        default=0,
    )


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_slow_reader_pins_bounded_memory_and_others_are_served(loop: str) -> None:
    """200 requests for 1 MiB answers from a peer that never reads: the server stops queueing
    output at ``max_write_buffer`` (plus at most one answer) and keeps serving everyone else."""

    async def main() -> None:
        calls: list[int] = []
        server = big_response_server(SmallBufferServer(HOST, 0, max_write_buffer=8 * MiB), calls)
        async with serving(server), non_reading_socket(server.port) as sock:
            requests = b"".join(RemotingCommand.request(BIG, opaque=i).encode() for i in range(200))
            await asyncio.get_running_loop().sock_sendall(sock, requests)
            await wait_until(lambda: len(calls) > 0, what="the first big request")
            await wait_until(lambda: all(not c.is_open for c in server.connections), what="the slow reader cut off")
            peak = server_side_buffer(server)
            assert peak <= 8 * MiB + MiB + 64 * 1024, peak
            for _ in range(5):
                await assert_still_serving(server, within=1.0)
            assert server_side_buffer(server) <= peak

    run(main(), loop)


def test_slow_reader_is_paused_then_resumed_when_it_reads_again() -> None:
    """Past the high-water mark the server stops reading new requests from that peer; once
    the peer drains its answers, the server reads and answers the rest."""

    async def main() -> None:
        calls: list[int] = []
        server = big_response_server(make_server(), calls)  # default 64 MiB write limit
        async with serving(server), non_reading_socket(server.port) as sock:
            loop = asyncio.get_running_loop()
            # The kernel absorbs a few MiB; 12 answers of 1 MiB push the transport past 4 MiB.
            first = b"".join(RemotingCommand.request(BIG, opaque=i).encode() for i in range(12))
            await loop.sock_sendall(sock, first)
            await wait_until(lambda: len(calls) == 12, what="twelve big answers queued")
            await wait_until(lambda: server_side_buffer(server) > 4 * MiB, what="output to back up")
            more = b"".join(RemotingCommand.request(BIG, opaque=100 + i).encode() for i in range(20))
            await loop.sock_sendall(sock, more)
            await asyncio.sleep(0.3)
            assert len(calls) == 12, "the server kept reading from a peer that does not read"
            await assert_still_serving(server, within=1.0)
            # Now read everything: all 32 answers arrive, in order.
            received = bytearray()
            opaques: list[int] = []
            async with asyncio.timeout(10):
                while len(opaques) < 32:
                    chunk = await loop.sock_recv(sock, 1 << 20)
                    assert chunk, "server closed a connection it should have resumed"
                    received += chunk
                    while len(received) >= 4:
                        length = int.from_bytes(received[:4], "big")
                        if len(received) < 4 + length:
                            break
                        opaques.append(decode_command(bytes(received[4 : 4 + length])).opaque)
                        del received[: 4 + length]
            assert opaques == list(range(12)) + [100 + i for i in range(20)]

    asyncio.run(main())


@pytest.mark.parametrize(
    ("reason", "loop"),
    [
        ("write-buffer-overflow", "asyncio"),
        ("write-buffer-overflow", "uvloop"),
        ("idle-with-unsent-output", "asyncio"),
    ],
)
def test_a_connection_the_server_gives_up_on_is_really_released(reason: str, loop: str) -> None:
    """When the server decides to drop a peer that never reads (buffer over the limit, or idle
    while paused), the socket and its buffered output must actually be freed. ``close()`` on an
    asyncio/uvloop transport waits for the buffer to drain, which never happens here; the
    connection then lingers forever with megabytes pinned (an abort is needed). The idle case
    uses the default 64 MiB limit: the idle scan calls the same ``close()``."""

    async def main() -> None:
        calls: list[int] = []
        if reason == "write-buffer-overflow":
            base: RemotingServer = SmallBufferServer(HOST, 0, max_write_buffer=8 * MiB)
            count = 200
        else:
            base = RemotingServer(HOST, 0, idle_timeout=0.5)  # default 64 MiB limit: never overflows
            count = 12
        server = big_response_server(base, calls)
        async with serving(server), non_reading_socket(server.port) as sock:
            requests = b"".join(RemotingCommand.request(BIG, opaque=i).encode() for i in range(count))
            await asyncio.get_running_loop().sock_sendall(sock, requests)
            await wait_until(lambda: len(calls) == count, what="all big requests processed")
            await wait_until(
                lambda: not server.connections,
                timeout=3.0,
                what=f"the server to release the non-reading connection ({server_side_buffer(server)} "
                "bytes still buffered for it)",
            )

    run(main(), loop)


# -- idle connections ------------------------------------------------------------------
def test_idle_connections_are_closed_and_active_ones_kept() -> None:
    """On virtual time (server and clients on the test's loop, over loopback sockets): the
    idle timeout is measured on the loop's clock, so a stalled test process cannot make the
    busy connection look idle, and the close can be checked from both sides."""

    async def main() -> None:
        idle_timeout = 0.3
        scan_every = idle_timeout / 4  # the server's idle scan (net/server.py)
        server = make_server(idle_timeout=idle_timeout)
        async with serving(server), remoting_client() as idle, remoting_client() as busy:
            loop = asyncio.get_running_loop()
            assert (await busy.invoke(addr(server), RemotingCommand.request(ECHO), 3)).code == 0
            busy_conn = await busy.connection(addr(server))
            before_last_request = loop.time()  # the server hears the idle client after this
            assert (await idle.invoke(addr(server), RemotingCommand.request(ECHO), 3)).code == 0
            idle_conn = await idle.connection(addr(server))
            while not idle_conn.closed.is_set():
                assert (await busy.invoke(addr(server), RemotingCommand.request(ECHO), 3)).code == 0
                await asyncio.sleep(0.05)
            # after its timeout, at the first scan past it (seen here within one 50 ms turn)
            silent = loop.time() - before_last_request
            assert idle_timeout <= silent <= idle_timeout + scan_every + 0.05 + 0.01, silent
            # Keep the busy one going for three more timeouts.
            t1 = loop.time()
            while loop.time() - t1 < 3 * idle_timeout:
                assert (await busy.invoke(addr(server), RemotingCommand.request(ECHO), 3)).code == 0
                await asyncio.sleep(0.05)
            assert busy_conn.is_open and not busy_conn.closed.is_set()
            # The idle client simply reconnects.
            assert (await idle.invoke(addr(server), RemotingCommand.request(ECHO), 3)).code == 0

    run_virtual(main(), io_grace=0.002)


def test_slowloris_partial_frame_is_closed_by_the_idle_timeout() -> None:
    async def main() -> None:
        server = make_server(idle_timeout=0.3)
        async with serving(server), raw_connection(server) as (reader, writer):
            frame = RemotingCommand.request(ECHO, opaque=1).encode()
            writer.write(frame[:10])  # a frame that never completes
            await assert_eof(reader, timeout=3.0)
            await assert_still_serving(server)

    asyncio.run(main())


def test_a_parked_request_keeps_its_connection_past_the_idle_timeout() -> None:
    async def main() -> None:
        async def slow(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
            await asyncio.sleep(0.8)
            return cmd.response(0)

        server = make_server(idle_timeout=0.2)
        server.register(SLOW, slow)
        async with serving(server), remoting_client() as client:
            response = await client.invoke(addr(server), RemotingCommand.request(SLOW), 3)
            assert response.code == 0

    asyncio.run(main())


def test_a_thousand_idle_connections_are_kept_while_a_normal_client_is_served() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = make_server()
        transports: list[asyncio.BaseTransport] = []
        async with serving(server):
            try:
                async with asyncio.timeout(60):  # a bound for a hang, not a speed test
                    for _batch in range(10):  # batches stay under the listen backlog
                        made = await asyncio.gather(
                            *(loop.create_connection(asyncio.Protocol, HOST, server.port) for _ in range(100))
                        )
                        transports.extend(t for t, _p in made)
                    await wait_until(lambda: len(server.connections) >= 1000, what="1000 server connections")
                    async with remoting_client() as client:
                        for i in range(5):
                            request = RemotingCommand.request(ECHO, {"n": i})
                            response = await client.invoke(addr(server), request, 5)
                            assert response.code == 0 and response.ext_fields["n"] == str(i)
                    # served beside them, and none of the thousand was dropped to make room
                    assert len(server.connections) >= 1000
                    assert not any(t.is_closing() for t in transports)
            finally:
                for t in transports:
                    t.close()
            await wait_until(lambda: not server.connections, what="all idle connections gone")

    asyncio.run(main())
