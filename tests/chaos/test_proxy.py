"""The fault proxy with real loopback sockets: forward, cut (reset and blackhole), heal."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from ledgermq.chaos.proxy import FaultProxy
from ledgermq.testing.ports import free_port

HOST = "127.0.0.1"
pytestmark = pytest.mark.timeout(30)


class Echo:
    def __init__(self) -> None:
        self.port = free_port()
        self.server: asyncio.Server | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, HOST, self.port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()


@contextlib.asynccontextmanager
async def proxied() -> AsyncIterator[FaultProxy]:
    echo = Echo()
    await echo.start()
    proxy = FaultProxy((HOST, free_port()), (HOST, echo.port))
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()
        await echo.close()


async def connect(proxy: FaultProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(*proxy.listen)


async def roundtrip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes) -> bytes:
    writer.write(data)
    await writer.drain()
    return await asyncio.wait_for(reader.readexactly(len(data)), 2.0)


async def ends(reader: asyncio.StreamReader, timeout: float = 2.0) -> bool:
    """The connection is reset or closed within ``timeout``."""
    try:
        data = await asyncio.wait_for(reader.read(1), timeout)
    except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return data == b""


def test_forwards_both_ways() -> None:
    async def main() -> None:
        async with proxied() as proxy:
            r, w = await connect(proxy)
            assert await roundtrip(r, w, b"hello" * 1000) == b"hello" * 1000
            assert proxy.stats.forwarded_bytes >= 10_000
            w.close()

    asyncio.run(main())


def test_reset_cut_kills_open_connections_and_refuses_new_ones_until_healed() -> None:
    async def main() -> None:
        async with proxied() as proxy:
            r, w = await connect(proxy)
            assert await roundtrip(r, w, b"a") == b"a"
            proxy.cut("reset")
            assert await ends(r)
            r2, _w2 = await connect(proxy)  # accepted by the kernel, then reset by the proxy
            assert await ends(r2)
            assert proxy.stats.refused >= 1
            proxy.heal()
            r3, w3 = await connect(proxy)
            assert await roundtrip(r3, w3, b"back") == b"back"
            w3.close()

    asyncio.run(main())


def test_blackhole_cut_drops_bytes_silently_and_heal_resets_tainted_pairs() -> None:
    async def main() -> None:
        async with proxied() as proxy:
            r, w = await connect(proxy)
            assert await roundtrip(r, w, b"x") == b"x"
            proxy.cut("blackhole")
            w.write(b"lost")
            await w.drain()
            assert not await ends(r, timeout=0.5)  # still open, nothing comes back
            assert proxy.stats.dropped_bytes >= 4
            proxy.heal()
            assert await ends(r)  # its stream lost bytes: reset at heal
            r2, w2 = await connect(proxy)
            assert await roundtrip(r2, w2, b"fresh") == b"fresh"
            w2.close()

    asyncio.run(main())


def test_cut_mode_is_checked() -> None:
    proxy = FaultProxy((HOST, 1), (HOST, 2))
    with pytest.raises(ValueError, match="cut mode"):
        proxy.cut("sever")
