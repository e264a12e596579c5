"""The master end of HA: accept slaves, stream the commit log, track acknowledgements.

One ``_SlaveLink`` per connection runs a read task (reports -> acks, housekeeping) and
a write task (transfers and heartbeats planned by ``MasterSession``). Writers sleep on
a shared "new data" event, set by the store's arrival listener (from the reput thread),
by ``notify_append`` and by ``wait_for_ack``; a 100 ms fallback (RocketMQ's too)
bounds the latency when nobody tells us.

``wait_for_ack`` does not poll: waiters sit in a heap by offset, and each accepted ack
resolves exactly the waiters at or below it.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
from dataclasses import dataclass

from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.ha.codec import HAProtocolError, ReportDecoder, encode_header
from ledgermq.ha.config import HAConfig
from ledgermq.ha.session import Close, Heartbeat, Idle, MasterSession, Send
from ledgermq.store.message_store import MessageStore

log = logging.getLogger(__name__)

_FALLBACK_WAKE_S = 0.1
_READ_CHUNK = 64 * 1024
_MAX_DISCONNECTED_KEPT = 16


@dataclass(frozen=True, slots=True)
class SlaveStatus:
    """One slave as ``admin haStatus`` shows it."""

    address: str
    connected: bool
    acked_offset: int  # -1 before the first report
    lag_bytes: int  # master max offset - acked offset (master max when nothing acked)
    last_ack_time_ms: int  # wall clock, 0 if never
    transfer_offset: int  # where the next transfer starts, -1 before the first report
    closed_reason: str = ""


class _SlaveLink:
    def __init__(
        self, service: HAService, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, address: str
    ) -> None:
        self.service = service
        self.reader = reader
        self.writer = writer
        self.address = address
        cfg = service.config
        self.session = MasterSession(
            segment_size=service.store.config.mapped_file_size_commitlog,
            batch_size=cfg.transfer_batch_size,
            heartbeat_interval=cfg.heartbeat_interval_s,
            housekeeping_interval=cfg.housekeeping_interval_s,
            now=service.clock.monotonic(),
        )
        self.last_ack_time_ms = 0
        self.closed_reason = ""
        self.reported = asyncio.Event()  # the first report arrived
        self._tasks: tuple[asyncio.Task[None], ...] = ()

    async def run(self) -> None:
        if self.closed_reason:
            return
        read = asyncio.create_task(self._read_loop(), name=f"ha-read-{self.address}")
        write = asyncio.create_task(self._write_loop(), name=f"ha-write-{self.address}")
        self._tasks = (read, write)
        try:
            done, _ = await asyncio.wait({read, write}, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                if t.cancelled():
                    continue
                exc = t.exception()
                if exc is not None:
                    self._set_reason(f"{type(exc).__name__}: {exc}")
        finally:
            for t in (read, write):
                t.cancel()
            await asyncio.gather(read, write, return_exceptions=True)
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()

    def stop(self, reason: str) -> None:
        """End the connection from outside (service shutdown); ``run`` then returns."""
        self._set_reason(reason)
        for t in self._tasks:
            t.cancel()

    def _set_reason(self, reason: str) -> None:
        if not self.closed_reason:
            self.closed_reason = reason

    async def _read_loop(self) -> None:
        decoder = ReportDecoder()
        clock = self.service.clock
        store = self.service.store
        while True:
            remaining = self.session.last_read + self.session.housekeeping_interval - clock.monotonic()
            if remaining <= 0:
                self._set_reason(f"silent for more than {self.session.housekeeping_interval:.1f}s (housekeeping)")
                return
            try:
                data = await asyncio.wait_for(self.reader.read(_READ_CHUNK), remaining)
            except TimeoutError:
                continue
            if not data:
                self._set_reason("slave closed the connection")
                return
            now = clock.monotonic()
            self.session.on_bytes(now)
            try:
                offsets = decoder.feed(data)
            except HAProtocolError as exc:
                self._set_reason(str(exc))
                return
            for off in offsets:
                decision = self.session.on_report(off, store.max_phy_offset, now)
                if isinstance(decision, Close):
                    self._set_reason(decision.reason)
                    return
                if decision.first:
                    log.info(
                        "HA slave %s reported %d; transfer starts at %d",
                        self.address,
                        off,
                        self.session.next_offset,
                    )
                    self.reported.set()
                    self.service.wake_writers()
                self.last_ack_time_ms = clock.wall_ms()
                self.service._on_ack(off)

    async def _write_loop(self) -> None:
        svc = self.service
        store = svc.store
        clock = svc.clock
        session = self.session
        await self.reported.wait()
        while True:
            event = svc._data_event  # taken before looking at the store: no lost wake-up
            action = session.plan(store.min_phy_offset, store.max_phy_offset, clock.monotonic())
            if isinstance(action, Send):
                data = store.read_commitlog(action.offset, action.size)
                if not data:
                    self._set_reason(f"commit log has nothing at {action.offset} (segment deleted?)")
                    return
                self.writer.write(encode_header(action.offset, len(data)))
                self.writer.write(data)
                await self.writer.drain()
                session.on_sent(action.offset, len(data), clock.monotonic())
            elif isinstance(action, Heartbeat):
                self.writer.write(encode_header(action.offset, 0))
                await self.writer.drain()
                session.on_sent(action.offset, 0, clock.monotonic())
            elif isinstance(action, Idle):
                wait = _FALLBACK_WAKE_S if action.wait is None else min(action.wait, _FALLBACK_WAKE_S)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), wait)
            else:
                assert isinstance(action, Close)
                self._set_reason(action.reason)
                return

    def status(self, master_max: int, connected: bool) -> SlaveStatus:
        ack = self.session.ack_offset
        nxt = self.session.next_offset
        return SlaveStatus(
            address=self.address,
            connected=connected,
            acked_offset=-1 if ack is None else ack,
            lag_bytes=master_max - (ack or 0),
            last_ack_time_ms=self.last_ack_time_ms,
            transfer_offset=-1 if nxt is None else nxt,
            closed_reason=self.closed_reason,
        )


class HAService:
    """Accepts slaves on ``host:port`` (0 picks a free port; see ``port`` after start)."""

    def __init__(
        self, store: MessageStore, host: str, port: int, config: HAConfig | None = None, *, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.store = store
        self.host = host
        self.port = port
        self.config = config or HAConfig()
        self.clock = clock
        self.links: dict[str, _SlaveLink] = {}
        self.max_acked_offset = 0  # highest ack seen from any slave (RocketMQ push2SlaveMaxOffset)
        self.refused_connections = 0  # closed for reporting beyond our max: a diverged slave or a stranger
        self._disconnected: dict[str, SlaveStatus] = {}
        self._waiters: list[tuple[int, int, asyncio.Future[bool]]] = []
        self._seq = itertools.count()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._data_event = asyncio.Event()
        self._wake_pending = False
        self._guard_added = False

    # -- lifecycle ------------------------------------------------------------------
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        if not self._guard_added:
            self.store.add_retention_guard(self._retention_floor)
            self.store.add_arrival_listener(self._on_arrival)
            self._guard_added = True
        log.info("HA service listening on %s:%d", self.host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for link in list(self.links.values()):
            link.stop("HA service stopping")
        tasks = list(self._tasks)
        if tasks:  # the handlers return by themselves once their links stop
            _, pending = await asyncio.wait(tasks, timeout=5.0)
            for t in pending:
                log.error("HA connection handler %s did not stop; cancelling it", t.get_name())
                t.cancel()
        for _, _, fut in self._waiters:
            if not fut.done():
                fut.set_result(False)
        self._waiters.clear()
        self._loop = None
        log.info("HA service on port %d stopped", self.port)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        address = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        link = _SlaveLink(self, reader, writer, address)
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.links[address] = link
        log.info("HA slave %s connected", address)
        if self._server is None:  # accepted while stopping
            link.stop("HA service stopping")
        try:
            await link.run()
        finally:
            self._tasks.discard(task)
            self.links.pop(address, None)
            status = link.status(self.store.max_phy_offset, connected=False)
            self._disconnected[address] = status
            if "beyond the master's max offset" in (link.closed_reason or ""):
                self.refused_connections += 1
            while len(self._disconnected) > _MAX_DISCONNECTED_KEPT:
                self._disconnected.pop(next(iter(self._disconnected)))
            log.warning("HA slave %s disconnected: %s", address, link.closed_reason or "unknown")

    # -- new data -------------------------------------------------------------------
    def wake_writers(self) -> None:
        """Tell every transfer loop there may be new data (event-loop thread only)."""
        self._wake_pending = False
        event, self._data_event = self._data_event, asyncio.Event()
        event.set()

    def notify_append(self) -> None:
        """Thread-safe: the commit log grew (the broker may call this after a put)."""
        loop = self._loop
        if loop is None or self._wake_pending:
            return
        self._wake_pending = True
        try:
            loop.call_soon_threadsafe(self.wake_writers)
        except RuntimeError:  # loop closed
            self._wake_pending = False

    def _on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        self.notify_append()

    # -- acknowledgements -----------------------------------------------------------
    def _on_ack(self, offset: int) -> None:
        if offset > self.max_acked_offset:
            self.max_acked_offset = offset
        waiters = self._waiters
        while waiters and waiters[0][0] <= offset:
            _, _, fut = heapq.heappop(waiters)
            if not fut.done():
                fut.set_result(True)

    async def wait_for_ack(self, offset: int, timeout: float) -> bool:
        """True once some slave acknowledged ``offset`` (or beyond); False after ``timeout``."""
        if self.max_acked_offset >= offset:
            return True
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (offset, next(self._seq), fut))
        self.wake_writers()
        try:
            return await asyncio.wait_for(fut, timeout)  # a timeout cancels fut
        except TimeoutError:
            self._prune_waiters()
            return False

    def _prune_waiters(self) -> None:
        live = [w for w in self._waiters if not w[2].done()]
        if len(live) * 2 < len(self._waiters):
            heapq.heapify(live)
            self._waiters = live

    @property
    def waiter_count(self) -> int:
        return sum(1 for w in self._waiters if not w[2].done())

    @property
    def acked_offsets(self) -> dict[str, int]:
        """Each connected slave's latest accepted ack (slaves yet to report are left out)."""
        return {a: link.session.ack_offset for a, link in self.links.items() if link.session.ack_offset is not None}

    @property
    def connection_count(self) -> int:
        return len(self.links)

    def slave_ok(self, master_put_offset: int) -> bool:
        """RocketMQ isSlaveOK: a slave is connected and less than haSlaveFallbehindMax behind."""
        return bool(self.links) and master_put_offset - self.max_acked_offset < self.config.slave_fallbehind_max

    # -- retention and status -------------------------------------------------------
    def _retention_floor(self) -> int | None:
        """Called from the store's clean thread: keep what connected slaves still need."""
        needed = [n for link in list(self.links.values()) if (n := link.session.needed_from()) is not None]
        return min(needed) if needed else None

    def status(self) -> list[SlaveStatus]:
        master_max = self.store.max_phy_offset
        live = [link.status(master_max, connected=True) for link in self.links.values()]
        return live + list(self._disconnected.values())
