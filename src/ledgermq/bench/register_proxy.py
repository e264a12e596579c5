"""A recording TCP proxy in front of a name server: how big are the broker's registrations?

The scale bench points the broker's ``namesrvAddr`` at this proxy and its clients at the
name server itself. Bytes are forwarded unchanged both ways; the broker-to-name-server
stream is also split into frames, and every REGISTER_BROKER request is appended to a
JSON-lines file: wall time, body bytes, and how many topic configs the body
names (occurrences of ``"topicName"``). Measuring from outside keeps the figure honest
for any broker: the one of today (every registration carries every topic) and one that
registers incrementally alike, with no broker-side counter to add or trust.

Run as ``python -m ledgermq.bench.register_proxy LISTEN_PORT UPSTREAM_HOST:PORT RECORD_FILE``;
it runs until SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from pathlib import Path
from typing import TextIO

from ledgermq.errors import RemoteProtocolError
from ledgermq.net.client import split_address
from ledgermq.protocol.codes import RequestCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.frame import FrameDecoder
from ledgermq.protocol.register_body import decode_register_body

# Far above the name server's own frame cap: an oversized registration is the name
# server's to refuse (and the bench's to report), not the proxy's.
MAX_FRAME = 1 << 30
READ_CHUNK = 1 << 16
TOPIC_KEY = b'"topicName"'


def _topic_count(cmd: RemotingCommand) -> int:
    """Topics in a registration body, plain JSON or 4.9's compressed form; -1 if unreadable."""
    compressed = str(cmd.ext_fields.get("compressed", "false")).lower() == "true"
    if not compressed:
        return cmd.body.count(TOPIC_KEY)
    try:
        return len(decode_register_body(cmd.body, True).topic_configs)
    except RemoteProtocolError:
        return -1


def registration_record(cmd: RemotingCommand, now: float) -> dict[str, object]:
    """One line of the record file for a REGISTER_BROKER request."""
    return {
        "t": round(now, 6),
        "body": len(cmd.body),
        "topics": _topic_count(cmd),
        "compressed": cmd.ext_fields.get("compressed", "false"),
    }


class Recorder:
    """Splits the broker's request stream into frames and writes a line per registration."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.decoder = FrameDecoder(MAX_FRAME)
        self.disabled = False

    def feed(self, data: bytes) -> None:
        if self.disabled:
            return
        try:
            frames = self.decoder.feed(data)
        except RemoteProtocolError as exc:  # unframeable: keep forwarding, stop recording
            print(f"register_proxy: stopped recording this connection: {exc}", file=sys.stderr)
            self.disabled = True
            return
        now = time.time()
        for frame in frames:
            if (
                isinstance(frame, RemotingCommand)
                and frame.code == RequestCode.REGISTER_BROKER
                and not frame.is_response
            ):
                self.out.write(json.dumps(registration_record(frame, now)) + "\n")
                self.out.flush()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, recorder: Recorder | None) -> None:
    try:
        while data := await reader.read(READ_CHUNK):
            if recorder is not None:
                recorder.feed(data)  # recorded before the last bytes reach the name server
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def serve(listen_port: int, upstream: str, record: Path) -> None:
    host, port = split_address(upstream)
    out = record.open("a", encoding="utf-8")

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(host, port)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(_pump(client_r, up_w, Recorder(out)), _pump(up_r, client_w, None))

    server = await asyncio.start_server(handle, "127.0.0.1", listen_port, reuse_address=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()
    out.close()


def main(argv: list[str]) -> None:
    from ledgermq.aio.loops import new_event_loop

    loop = new_event_loop()
    try:
        loop.run_until_complete(serve(int(argv[0]), argv[1], Path(argv[2])))
    finally:
        loop.close()


if __name__ == "__main__":
    main(sys.argv[1:])
