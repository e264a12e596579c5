"""An asyncio TCP fault proxy: forward, cut, heal.

``FaultProxy(listen, target)`` accepts connections on ``listen`` and pipes each to a new
connection to ``target``. ``cut("reset")`` resets every open pair (RST, SO_LINGER 0) and
resets new connections as soon as they are accepted, so both ends see the link fail at
once; ``cut("blackhole")`` keeps connections open but drops every byte in both
directions, as a partition that no peer notices until its own timeouts fire (pairs that
lost bytes are reset at ``heal``, their streams being no longer whole). ``heal()``
forwards again. Loopback addresses only; everything it opened is closed by ``close()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from dataclasses import dataclass, field

CHUNK = 64 * 1024
MODES = ("reset", "blackhole")


@dataclass(eq=False, slots=True)
class _Pair:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    lost_bytes: bool = False


def _reset(writer: asyncio.StreamWriter | None) -> None:
    """Close with RST rather than FIN."""
    if writer is None or writer.transport.is_closing():
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@dataclass(slots=True)
class ProxyStats:
    accepted: int = 0
    refused: int = 0
    reset: int = 0
    dropped_bytes: int = 0
    forwarded_bytes: int = 0


class FaultProxy:
    def __init__(self, listen: tuple[str, int], target: tuple[str, int], name: str = "proxy") -> None:
        self.listen = listen
        self.target = target
        self.name = name
        self.mode: str | None = None  # None: forwarding; else the cut's mode
        self.stats = ProxyStats()
        self._server: asyncio.Server | None = None
        self._pairs: set[_Pair] = set()

    @property
    def is_cut(self) -> bool:
        return self.mode is not None

    @property
    def open_pairs(self) -> int:
        return len(self._pairs)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, self.listen[0], self.listen[1], reuse_address=True)

    def cut(self, mode: str = "reset") -> None:
        if mode not in MODES:
            raise ValueError(f"cut mode {mode!r} is not one of {MODES}")
        self.mode = mode
        if mode == "reset":
            for pair in list(self._pairs):
                self._drop(pair)

    def heal(self) -> None:
        if self.mode == "blackhole":
            for pair in list(self._pairs):
                if pair.lost_bytes:
                    self._drop(pair)
        self.mode = None

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None
        tasks = [t for pair in self._pairs for t in pair.tasks]
        for pair in list(self._pairs):
            self._drop(pair)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=2.0)

    # -- plumbing ---------------------------------------------------------------------
    def _drop(self, pair: _Pair) -> None:
        self._pairs.discard(pair)
        self.stats.reset += 1
        _reset(pair.client)
        _reset(pair.upstream)
        current = asyncio.current_task()
        for t in pair.tasks:
            if t is not current:
                t.cancel()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.stats.accepted += 1
        if self.mode == "reset":
            self.stats.refused += 1
            _reset(writer)
            return
        pair = _Pair(writer)
        self._pairs.add(pair)
        try:
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(*self.target), 3.0)
        except (OSError, TimeoutError):
            self._drop(pair)
            return
        if pair not in self._pairs:  # cut while connecting
            _reset(up_writer)
            return
        pair.upstream = up_writer
        pair.tasks = [
            asyncio.create_task(self._pump(pair, reader, up_writer)),
            asyncio.create_task(self._pump(pair, up_reader, writer)),
        ]

    async def _pump(self, pair: _Pair, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await src.read(CHUNK)
                if not data:
                    break
                if self.mode is not None:
                    pair.lost_bytes = True
                    self.stats.dropped_bytes += len(data)
                    continue
                dst.write(data)
                self.stats.forwarded_bytes += len(data)
                await dst.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            return
        # One side ended: end the pair (a half-open link is not worth modelling here).
        if pair in self._pairs:
            self._pairs.discard(pair)
            for w in (pair.client, pair.upstream):
                if w is not None and not w.transport.is_closing():
                    w.close()
            for t in pair.tasks:
                if t is not asyncio.current_task():
                    t.cancel()
