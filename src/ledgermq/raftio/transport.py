"""Raft peer messaging over the remoting layer: oneway RAFT_MESSAGES frames, one sender per peer.

Why oneway and lossy: Raft already tolerates lost, duplicated and reordered messages
(the core retries on its ticks), so waiting for an answer would only add latency and a
slow peer would hold back the loop. Each peer gets a bounded queue of batches; when it
is full the oldest batch is dropped (and counted), because newer messages supersede
older ones (a newer heartbeat or append carries more up-to-date state), and memory must
stay bounded while a peer is down. The messages of one Ready for one peer travel in one
frame; batches that queued while a send was in progress are coalesced into as few frames
as the size cap allows. Connections are pooled and re-made by RemotingClient; after a
failed connect the sender backs off (up to ``max_backoff``) instead of spinning.

Peers are named in DLedger's ``dLegerPeers`` form: ``n0-127.0.0.1:40911;n1-127.0.0.1:40912``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ledgermq.errors import ConfigError, LocalProtocolError, RemoteProtocolError
from ledgermq.net.client import RemotingClient, split_address
from ledgermq.net.connection import Connection
from ledgermq.net.server import RemotingServer, RequestContext
from ledgermq.protocol.codes import RequestCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.raft import wire
from ledgermq.raft.types import Message

__all__ = ["MessageFilter", "PeerStats", "RaftTransport", "parse_peers"]

log = logging.getLogger(__name__)

_PEER_ID = re.compile(r"[A-Za-z0-9_.]{1,64}")

MessageFilter = Callable[[Message], bool]
"""True: let the message through. Tests use it to cut links without touching sockets."""


def parse_peers(peers: str) -> dict[str, str]:
    """``"n0-host:port;n1-host:port;..."`` -> ``{"n0": "host:port", ...}`` in the given order.

    DLedger splits on ``;`` and then on the first ``-``. ConfigError names the bad part
    (empty part, missing ``-``, bad id, bad address, a duplicate id or address).
    """
    out: dict[str, str] = {}
    seen_addrs: dict[str, str] = {}
    parts = peers.split(";")
    if parts and parts[-1].strip() == "" and len(parts) > 1:
        parts = parts[:-1]  # tolerate one trailing ';'
    for n, raw in enumerate(parts, 1):
        part = raw.strip()
        where = f"dLegerPeers part {n} ({raw!r})"
        if not part:
            raise ConfigError(f"{where} is empty (peers look like n0-127.0.0.1:40911;n1-127.0.0.1:40912)")
        peer_id, dash, addr = part.partition("-")
        if not dash:
            raise ConfigError(f"{where} has no '-' between the peer id and its address")
        if not _PEER_ID.fullmatch(peer_id):
            raise ConfigError(f"{where}: peer id {peer_id!r} must be 1-64 of [A-Za-z0-9_.]")
        try:
            split_address(addr)
        except ValueError:
            raise ConfigError(f"{where}: address {addr!r} is not host:port with a port in 1..65535") from None
        if peer_id in out:
            raise ConfigError(f"{where}: peer id {peer_id!r} appears twice")
        if addr in seen_addrs:
            raise ConfigError(f"{where}: address {addr} is also peer {seen_addrs[addr]!r}")
        out[peer_id] = addr
        seen_addrs[addr] = peer_id
    return out


@dataclass(slots=True)
class PeerStats:
    """Counters for one peer (status pages, tests); ``dropped`` counts messages, not frames."""

    sent_messages: int = 0
    sent_frames: int = 0
    dropped: int = 0
    send_errors: int = 0
    received_messages: int = 0
    filtered: int = 0


class _PeerSender:
    """The outbound queue and sending task of one peer."""

    def __init__(self, transport: RaftTransport, peer_id: str, addr: str) -> None:
        self.transport = transport
        self.peer_id = peer_id
        self.addr = addr
        self.queue: deque[Sequence[Message]] = deque()
        self.wakeup = asyncio.Event()
        self.stats = PeerStats()
        self.task: asyncio.Task[None] | None = None
        self.sending = False  # the task is between taking batches and having written them
        self.backoff = 0.0

    def enqueue(self, batch: Sequence[Message]) -> None:
        if not self.queue and not self.sending and self.backoff == 0.0 and self.task is not None:
            # The usual case: connected, nothing ahead of this batch. Write it now rather than
            # wake the task for it (a loop turn later), which keeps the order all the same.
            conn = self.transport.client.open_connection(self.addr)
            if conn is not None:
                try:
                    self._write(conn, list(batch))
                except Exception as exc:
                    self.stats.send_errors += 1
                    log.debug("raft %s -> %s: send failed: %s", self.transport.self_id, self.peer_id, exc)
                return
        if len(self.queue) >= self.transport.queue_limit:
            self.stats.dropped += len(self.queue.popleft())
        self.queue.append(batch)
        self.wakeup.set()

    def _write(self, conn: Connection, messages: list[Message]) -> int:
        """Encode and queue ``messages`` on an open connection; the frames written. Lossy, as
        Raft allows: what cannot be encoded or sent is counted as dropped (and raised for
        a send, so the task backs off)."""
        try:
            frames = wire.encode_batches(messages, self.transport.max_batch_bytes)
        except LocalProtocolError:
            log.exception(
                "raft %s -> %s: cannot encode %d messages", self.transport.self_id, self.peer_id, len(messages)
            )
            self.stats.dropped += len(messages)
            return 0
        try:
            # on the wire now, while this node writes the same entries
            conn.oneway_now([RemotingCommand.request(RequestCode.RAFT_MESSAGES, body=f, oneway=True) for f in frames])
            self.stats.sent_frames += len(frames)
        except BaseException:
            self.stats.dropped += len(messages)
            raise
        self.stats.sent_messages += len(messages)
        return len(frames)

    async def run(self) -> None:
        while True:
            await self.wakeup.wait()
            self.wakeup.clear()
            if self.backoff:
                await asyncio.sleep(self.backoff)
            self.sending = True
            try:
                if await self._send_queued():
                    self.backoff = 0.0  # only a real delivery proves the peer is back
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # INFO for the first failure of an outage, DEBUG while it lasts.
                backoff = self.backoff
                lvl = logging.INFO if backoff == 0.0 else logging.DEBUG
                self.backoff = min(max(backoff * 2, self.transport.min_backoff), self.transport.max_backoff)
                self.stats.send_errors += 1
                log.log(
                    lvl, "raft %s -> %s (%s): send failed: %s", self.transport.self_id, self.peer_id, self.addr, exc
                )
                self.wakeup.set()  # what is still queued goes after the back-off
            finally:
                self.sending = False

    async def _send_queued(self) -> int:
        """Send everything queued; the number of frames written."""
        frames_sent = 0
        while self.queue:
            messages: list[Message] = []
            while self.queue:
                messages += self.queue.popleft()
            try:
                conn = await self.transport.client.connection(self.addr)
            except BaseException:
                self.stats.dropped += len(messages)  # Raft tolerates the loss; the task backs off
                raise
            frames_sent += self._write(conn, messages)
        return frames_sent


class RaftTransport:
    """Sends and receives Raft messages for ``self_id`` among ``peers`` (id -> ``host:port``).

    ``attach(server)`` registers the RAFT_MESSAGES processor on this broker's server;
    ``set_handler`` names who gets inbound messages (the driver). ``outbound_filter`` and
    ``inbound_filter`` (None: everything passes) cut links in tests.
    """

    def __init__(
        self,
        self_id: str,
        peers: dict[str, str],
        *,
        client: RemotingClient | None = None,
        queue_limit: int = 256,
        max_batch_bytes: int = wire.DEFAULT_MAX_BATCH_BYTES,
        min_backoff: float = 0.05,
        max_backoff: float = 1.0,
        connect_timeout: float = 1.0,
    ) -> None:
        if self_id not in peers:
            raise ConfigError(f"this node {self_id!r} is not among the peers {sorted(peers)}")
        if queue_limit < 1:
            raise ConfigError("queue_limit must be at least 1")
        self.self_id = self_id
        self.peers = dict(peers)
        self._own_client = client is None
        self.client = client if client is not None else RemotingClient(connect_timeout=connect_timeout)
        self.queue_limit = queue_limit
        self.max_batch_bytes = max_batch_bytes
        self.min_backoff = min_backoff
        self.max_backoff = max_backoff
        self.outbound_filter: MessageFilter | None = None
        self.inbound_filter: MessageFilter | None = None
        self.decode_errors = 0
        self._handler: Callable[[list[Message]], None] | None = None
        self._senders = {p: _PeerSender(self, p, a) for p, a in self.peers.items() if p != self_id}
        self._started = False

    # -- wiring ----------------------------------------------------------------------
    def attach(self, server: RemotingServer) -> None:
        server.register_inline(RequestCode.RAFT_MESSAGES, self._process)

    def set_handler(self, handler: Callable[[list[Message]], None] | None) -> None:
        self._handler = handler

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        for s in self._senders.values():
            s.task = asyncio.create_task(s.run(), name=f"raft-send-{self.self_id}-{s.peer_id}")

    async def stop(self) -> None:
        self._started = False
        tasks = [s.task for s in self._senders.values() if s.task is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        for s in self._senders.values():
            s.task = None
            s.queue.clear()
        if self._own_client:
            await self.client.close()

    # -- outbound --------------------------------------------------------------------
    def send(self, messages: Iterable[Message]) -> None:
        """Queue ``messages`` (one Ready's worth): one batch per destination peer."""
        by_peer: dict[str, list[Message]] = {}
        filt = self.outbound_filter
        for m in messages:
            sender = self._senders.get(m.dst)
            if sender is None:
                log.warning("raft %s: dropping a %s for unknown peer %r", self.self_id, m.type.value, m.dst)
                continue
            if filt is not None and not filt(m):
                sender.stats.filtered += 1
                continue
            by_peer.setdefault(m.dst, []).append(m)
        for peer, batch in by_peer.items():
            self._senders[peer].enqueue(batch)

    # -- inbound ---------------------------------------------------------------------
    def _process(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand | None:
        try:
            messages = wire.decode_batch(cmd.body, self.max_batch_bytes)
        except RemoteProtocolError as exc:
            self.decode_errors += 1
            log.warning("raft %s: undecodable RAFT_MESSAGES from %s: %s", self.self_id, ctx.peer, exc)
            return None
        accepted: list[Message] = []
        filt = self.inbound_filter
        for m in messages:
            sender = self._senders.get(m.src)
            if m.dst != self.self_id or sender is None:
                log.warning("raft %s: dropping a %s %s->%s from %s", self.self_id, m.type.value, m.src, m.dst, ctx.peer)
                continue
            if filt is not None and not filt(m):
                sender.stats.filtered += 1
                continue
            sender.stats.received_messages += 1
            accepted.append(m)
        handler = self._handler
        if accepted and handler is not None:
            handler(accepted)
        return None

    # -- status ----------------------------------------------------------------------
    def stats(self) -> dict[str, PeerStats]:
        return {p: s.stats for p, s in self._senders.items()}
