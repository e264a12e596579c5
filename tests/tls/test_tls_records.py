"""Answers written in one loop turn leave a TLS connection as a few full records, not one
record per answer (each record is a cipher call and a header, and one read at the peer).

Real sockets on loopback: a server and a client with mutual TLS, and between them a relay
that counts the TLS records the server sends.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from ledgermq.net.client import RemotingClient
from ledgermq.net.server import RemotingServer
from ledgermq.net.tls.devca import dev_tls_properties, make_dev_pki
from ledgermq.net.tls.profile import TlsProfile
from ledgermq.net.tls.settings import TlsSettings
from ledgermq.protocol.command import RemotingCommand

APPLICATION_DATA = 0x17
REQUESTS = 200
ECHO = 999


def _profile(root: Path) -> TlsProfile:
    pki = make_dev_pki(root / "pki")
    props = dict(line.split("=", 1) for line in dev_tls_properties(pki).splitlines() if "=" in line)
    props.update({"tls.server.mode": "enforcing", "tls.enable": "true"})
    return TlsProfile.from_settings(TlsSettings.from_properties(props))


class RecordCounter:
    """A relay from a local port to ``target`` that counts the TLS records coming back."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.application_records = 0
        self._pending = b""
        self._tasks: list[asyncio.Task[None]] = []

    def _count(self, data: bytes) -> None:
        buf = self._pending + data
        while len(buf) >= 5:
            length = int.from_bytes(buf[3:5], "big")
            if len(buf) < 5 + length:
                break
            if buf[0] == APPLICATION_DATA:
                self.application_records += 1
            buf = buf[5 + length :]
        self._pending = buf

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, counted: bool) -> None:
        try:
            while data := await reader.read(65536):
                if counted:
                    self._count(data)
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._tasks += [
            asyncio.create_task(self._relay(reader, up_writer, counted=False)),
            asyncio.create_task(self._relay(up_reader, writer, counted=True)),
        ]


async def _answers_in_records(tmp_path: Path) -> tuple[int, int]:
    tls = _profile(tmp_path)
    server = RemotingServer("127.0.0.1", 0, tls=tls.server)
    server.register_inline(ECHO, lambda _ctx, cmd: RemotingCommand(code=0, body=cmd.body))
    await server.start()
    relay = RecordCounter(server.port)
    relay_server = await asyncio.start_server(relay._serve, "127.0.0.1", 0)
    addr = f"127.0.0.1:{relay_server.sockets[0].getsockname()[1]}"
    client = RemotingClient(tls=tls.client)
    try:
        await client.invoke(addr, RemotingCommand(code=ECHO, body=b"warm-up"), 10)
        before = relay.application_records
        bodies = [f"answer-{i}".encode() * 8 for i in range(REQUESTS)]
        answers = await asyncio.gather(*(client.invoke(addr, RemotingCommand(code=ECHO, body=b), 10) for b in bodies))
        assert [a.body for a in answers] == bodies
        return REQUESTS, relay.application_records - before
    finally:
        await client.close()
        await server.stop()
        relay_server.close()
        for task in relay._tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*relay._tasks, return_exceptions=True)


def test_answers_of_one_turn_share_tls_records(tmp_path: Path) -> None:
    answers, records = asyncio.run(_answers_in_records(tmp_path))
    # written apart they would be one record each (>= 200); joined, a few per read the server made
    assert records <= answers // 10, f"{answers} answers took {records} TLS records"
