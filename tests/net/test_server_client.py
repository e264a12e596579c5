"""RemotingServer and RemotingClient over real sockets on 127.0.0.1 (free ports, bounded waits).

Covers the dispatch rules the server owns (processor by code, REQUEST_CODE_NOT_SUPPORTED,
SYSTEM_ERROR from a raising processor, oneway never answered), opaque matching under
concurrency, timeouts, connection loss and reconnection, and broker-to-client requests.
The helpers at the top are shared with ``test_hostile_clients``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import struct
from collections.abc import AsyncIterator, Callable

import pytest

from ledgermq.net.client import ConnectError, RemotingClient
from ledgermq.net.connection import Connection, ConnectionClosedError, RequestTimeoutError
from ledgermq.net.server import RemotingServer, RequestContext
from ledgermq.protocol.codes import SerializeType
from ledgermq.protocol.command import RemotingCommand, decode_command

HOST = "127.0.0.1"
ECHO = 1001
SLOW = 1002
FAIL = 1003
RECORD = 1004
NEVER = 1005
CALLBACK = 1006


# -- shared helpers ---------------------------------------------------------------------
def addr(server: RemotingServer) -> str:
    return f"{HOST}:{server.port}"


@contextlib.asynccontextmanager
async def serving(server: RemotingServer) -> AsyncIterator[RemotingServer]:
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@contextlib.asynccontextmanager
async def remoting_client(**kwargs: object) -> AsyncIterator[RemotingClient]:
    client = RemotingClient(**kwargs)  # type: ignore[arg-type]
    try:
        yield client
    finally:
        await client.close()


async def wait_until(pred: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not pred():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.01)


def raw_frame(header: bytes, body: bytes = b"", serialize_type: int = 0, length: int | None = None) -> bytes:
    """A frame built by hand: length word, header word, header, body."""
    if length is None:
        length = 4 + len(header) + len(body)
    return struct.pack(">ii", length, (serialize_type << 24) | len(header)) + header + body


async def read_frame(reader: asyncio.StreamReader, timeout: float = 5.0) -> RemotingCommand:
    async with asyncio.timeout(timeout):
        (length,) = struct.unpack(">i", await reader.readexactly(4))
        return decode_command(await reader.readexactly(length))


async def assert_eof(reader: asyncio.StreamReader, timeout: float = 5.0) -> None:
    """The server closed the connection: reads hit EOF (or a reset) within ``timeout``."""
    async with asyncio.timeout(timeout):
        while True:
            try:
                chunk = await reader.read(65536)
            except ConnectionResetError:
                return
            if not chunk:
                return


@contextlib.asynccontextmanager
async def raw_connection(
    server: RemotingServer,
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    reader, writer = await asyncio.open_connection(HOST, server.port)
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(writer.wait_closed(), 1.0)


async def echo(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(0, "echo", {"n": cmd.ext_fields.get("n"), "peer": ctx.peer}, body=cmd.body)


def make_server(**kwargs: object) -> RemotingServer:
    server = RemotingServer(HOST, 0, **kwargs)  # type: ignore[arg-type]
    server.register(ECHO, echo)
    return server


# -- basic request/response --------------------------------------------------------------
def test_request_response_over_a_real_socket() -> None:
    async def main() -> None:
        async with serving(make_server()) as server, remoting_client() as client:
            request = RemotingCommand.request(ECHO, {"n": 7, "flag": True}, body=b"\x00payload\xff")
            response = await client.invoke(addr(server), request, timeout=3)
            assert response.is_response and not response.is_oneway
            assert response.code == 0
            assert response.opaque == request.opaque and request.opaque > 0
            assert response.remark == "echo"
            assert response.ext_fields["n"] == "7"
            assert response.body == b"\x00payload\xff"
            assert response.serialize_type is SerializeType.JSON
            # The server sees the client's own address as the peer.
            conn = await client.connection(addr(server))
            host, port = conn.transport.get_extra_info("sockname")[:2]  # type: ignore[union-attr]
            assert response.ext_fields["peer"] == f"{host}:{port}"

    asyncio.run(main())


def test_binary_header_request_gets_binary_header_response() -> None:
    """The server answers in the request's serialize type (Java does the same)."""

    async def main() -> None:
        async with serving(make_server()) as server, raw_connection(server) as (reader, writer):
            request = RemotingCommand.request(ECHO, {"n": "b"}, opaque=4242)
            request.serialize_type = SerializeType.ROCKETMQ
            writer.write(request.encode())
            response = await read_frame(reader)
            assert response.serialize_type is SerializeType.ROCKETMQ
            assert (response.code, response.opaque, response.flag & 1) == (0, 4242, 1)
            assert response.ext_fields["n"] == "b"

    asyncio.run(main())


def test_many_concurrent_requests_are_matched_by_opaque() -> None:
    async def shuffled_echo(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        # Answer in a different order than the requests arrived.
        await asyncio.sleep(random.Random(int(cmd.ext_fields["n"])).random() * 0.05)
        return cmd.response(0, ext_fields={"n": cmd.ext_fields["n"]}, body=cmd.body)

    async def main() -> None:
        # 500 parked at once is over the default per-connection limit (256, see the hostile tests).
        server = make_server(max_inflight_per_connection=1024)
        server.register(SLOW, shuffled_echo)
        async with serving(server), remoting_client() as client:
            n = 500
            requests = [RemotingCommand.request(SLOW, {"n": i}, body=str(i).encode() * 3) for i in range(n)]
            async with asyncio.timeout(10):
                responses = await asyncio.gather(*(client.invoke(addr(server), r, 5) for r in requests))
            assert [r.ext_fields["n"] for r in responses] == [str(i) for i in range(n)]
            assert [r.body for r in responses] == [str(i).encode() * 3 for i in range(n)]
            assert len({r.opaque for r in requests}) == n
            # All of them went over one pooled connection.
            assert len(server.connections) == 1
            conn = await client.connection(addr(server))
            assert conn.pending == {}

    asyncio.run(main())


def test_unknown_code_gets_request_code_not_supported() -> None:
    async def main() -> None:
        async with serving(make_server()) as server, remoting_client() as client:
            response = await client.invoke(addr(server), RemotingCommand.request(9999), 3)
            assert response.code == 3
            assert response.remark == " request type 9999 not supported"
            # The connection is still good.
            assert (await client.invoke(addr(server), RemotingCommand.request(ECHO), 3)).code == 0

    asyncio.run(main())


def test_processor_exception_becomes_system_error_with_its_text() -> None:
    async def fail(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        raise ValueError(f"boom number {cmd.ext_fields['n']}")

    async def main() -> None:
        server = make_server()
        server.register(FAIL, fail)
        async with serving(server), remoting_client() as client:
            response = await client.invoke(addr(server), RemotingCommand.request(FAIL, {"n": 42}), 3)
            assert response.code == 1
            assert response.remark is not None and "boom number 42" in response.remark
            assert server.inflight == 0
            assert (await client.invoke(addr(server), RemotingCommand.request(ECHO), 3)).code == 0

    asyncio.run(main())


def test_oneway_request_runs_its_processor_but_is_never_answered() -> None:
    """Oneway requests (processor, unknown code, raising processor) produce no frame at all:
    the first frame back is the answer to the normal request sent after them."""
    seen: list[int] = []

    async def record(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        seen.append(cmd.opaque)
        return cmd.response(0, "would be an answer")

    async def fail(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        seen.append(cmd.opaque)
        raise RuntimeError("oneway failure")

    async def main() -> None:
        server = make_server()
        server.register(RECORD, record)
        server.register(FAIL, fail)
        async with serving(server), raw_connection(server) as (reader, writer):
            writer.write(RemotingCommand.request(RECORD, oneway=True, opaque=11).encode())
            writer.write(RemotingCommand.request(9999, oneway=True, opaque=12).encode())
            writer.write(RemotingCommand.request(FAIL, oneway=True, opaque=13).encode())
            writer.write(RemotingCommand.request(RECORD, opaque=14).encode())
            response = await read_frame(reader)
            assert (response.opaque, response.code, response.remark) == (14, 0, "would be an answer")
            assert seen == [11, 13, 14]
            # Nothing else is on the way.
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.3):
                    await reader.read(1)

    asyncio.run(main())


def test_client_oneway_reaches_the_processor() -> None:
    async def main() -> None:
        arrived = asyncio.Event()
        oneway_flags: list[bool] = []

        async def record(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
            oneway_flags.append(cmd.is_oneway)
            arrived.set()
            return cmd.response(0)

        server = make_server()
        server.register(RECORD, record)
        async with serving(server), remoting_client() as client:
            await client.invoke_oneway(addr(server), RemotingCommand.request(RECORD, {"k": "v"}))
            async with asyncio.timeout(3):
                await arrived.wait()
            assert oneway_flags == [True]
            conn = await client.connection(addr(server))
            assert conn.pending == {}

    asyncio.run(main())


# -- timeouts and connection loss --------------------------------------------------------
def test_request_timeout_when_the_processor_never_answers() -> None:
    async def main() -> None:
        forever = asyncio.Event()

        async def never(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
            await forever.wait()
            return cmd.response(0)

        server = make_server()
        server.register(NEVER, never)
        async with serving(server), remoting_client() as client:
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            with pytest.raises(RequestTimeoutError):
                await client.invoke(addr(server), RemotingCommand.request(NEVER), timeout=0.2)
            # by the call's own 0.2 s timeout, not earlier (how much later depends on the machine)
            assert loop.time() - t0 >= 0.2 - 0.01
            conn = await client.connection(addr(server))
            assert conn.pending == {}
            # The connection stays usable; a late answer would be dropped, not misdelivered.
            assert (await client.invoke(addr(server), RemotingCommand.request(ECHO, {"n": 1}), 3)).code == 0
            forever.set()

    asyncio.run(main())


def test_pending_requests_fail_with_connection_closed_when_the_connection_drops() -> None:
    async def main() -> None:
        async def hang(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
            await asyncio.Event().wait()
            return cmd.response(0)

        server = make_server()
        server.register(NEVER, hang)
        async with serving(server), remoting_client() as client:
            calls = [
                asyncio.create_task(client.invoke(addr(server), RemotingCommand.request(NEVER), 30)) for _ in range(3)
            ]
            await wait_until(lambda: server.inflight == 3, what="three parked requests")
            for conn in list(server.connections):
                conn.close()
            # failed by the close, not by their 30 s timeout
            results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 20)
            assert all(isinstance(r, ConnectionClosedError) for r in results), results
            # The next call opens a fresh connection.
            assert (await client.invoke(addr(server), RemotingCommand.request(ECHO), 3)).code == 0

    asyncio.run(main())


def test_client_reconnects_after_the_server_closes_its_connection() -> None:
    async def main() -> None:
        async with serving(make_server()) as server, remoting_client() as client:
            assert (await client.invoke(addr(server), RemotingCommand.request(ECHO), 3)).code == 0
            first = await client.connection(addr(server))
            for conn in list(server.connections):
                conn.close()
            await asyncio.wait_for(first.closed.wait(), 5)
            response = await client.invoke(addr(server), RemotingCommand.request(ECHO, {"n": 2}), 3)
            assert response.code == 0 and response.ext_fields["n"] == "2"
            second = await client.connection(addr(server))
            assert second is not first and second.is_open
            await wait_until(lambda: len(server.connections) == 1, what="one server-side connection")

    asyncio.run(main())


def test_client_reconnects_to_a_restarted_server_on_the_same_port() -> None:
    async def main() -> None:
        first = make_server()
        async with remoting_client() as client:
            async with serving(first):
                port = first.port
                assert (await client.invoke(addr(first), RemotingCommand.request(ECHO), 3)).code == 0
                old = await client.connection(addr(first))
            await asyncio.wait_for(old.closed.wait(), 5)
            with pytest.raises(ConnectError):
                await client.invoke(f"{HOST}:{port}", RemotingCommand.request(ECHO), 3)
            second = RemotingServer(HOST, port)
            second.register(ECHO, echo)
            async with serving(second):
                response = await client.invoke(f"{HOST}:{port}", RemotingCommand.request(ECHO), 3)
                assert response.code == 0

    asyncio.run(main())


def test_connect_error_for_an_address_nobody_listens_on() -> None:
    async def main() -> None:
        server = make_server()
        async with serving(server):
            port = server.port
        async with remoting_client(connect_timeout=2.0) as client:
            with pytest.raises(ConnectError):
                await client.invoke(f"{HOST}:{port}", RemotingCommand.request(ECHO), 3)

    asyncio.run(main())


def test_client_disconnect_mid_request_leaves_no_inflight_accounting() -> None:
    async def main() -> None:
        release = asyncio.Event()
        finished = asyncio.Event()

        async def slow(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
            await release.wait()
            finished.set()
            return cmd.response(0)

        server = make_server()
        server.register(SLOW, slow)
        async with serving(server):
            async with remoting_client() as client:
                call = asyncio.create_task(client.invoke(addr(server), RemotingCommand.request(SLOW), 30))
                await wait_until(lambda: server.inflight == 1, what="the request to be in flight")
            with pytest.raises(ConnectionClosedError):
                await asyncio.wait_for(call, 5)
            await wait_until(lambda: not server.connections, what="the server to notice the close")
            release.set()
            await asyncio.wait_for(finished.wait(), 5)
            await wait_until(lambda: server.inflight == 0, what="inflight back to 0")

    asyncio.run(main())


# -- broker-to-client calls ------------------------------------------------------------
def test_server_can_call_back_into_the_client_on_the_same_connection() -> None:
    """Brokers send requests to clients (e.g. CHECK_TRANSACTION_STATE); the pooled
    connection carries them both ways with independent opaques."""

    def client_handler(conn: Connection, cmd: RemotingCommand) -> None:
        reply = cmd.response(0, ext_fields={"answer": f"client saw {cmd.ext_fields['q']}"})
        conn.send(reply)

    async def ask_client(ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        back = await ctx.connection.request(RemotingCommand.request(307, {"q": cmd.ext_fields["q"]}), 3)
        return cmd.response(0, ext_fields={"relayed": back.ext_fields["answer"]})

    async def main() -> None:
        server = make_server()
        server.register(CALLBACK, ask_client)
        async with serving(server), remoting_client(on_request=client_handler) as client:
            calls = [client.invoke(addr(server), RemotingCommand.request(CALLBACK, {"q": i}), 5) for i in range(20)]
            responses = await asyncio.wait_for(asyncio.gather(*calls), 10)
            assert [r.ext_fields["relayed"] for r in responses] == [f"client saw {i}" for i in range(20)]

    asyncio.run(main())
