"""The master end of HA: accept slaves, stream the commit log, track acknowledgements.

Each slave connection is a non-blocking socket of our own (``_SlaveLink``): a reader
callback turns reports into acks (and keeps housekeeping), a write task streams the
commit log as ``MasterSession`` plans it, like RocketMQ's WriteSocketService: it never
waits for an ack before sending more. Each wake-up reads one window of up to
``WRITE_SPAN`` bytes (one segment at most), cuts it into haTransferBatchSize frames
(12-byte header + body, the RocketMQ wire format) and writes all of them with one
``sendmsg``; what the socket does not take is sent when it is writable again, before
anything new is read. Idle writers wait for ``wake_writers`` (the store's arrival
listener from the reput thread, ``notify_append`` after a put, ``wait_for_ack``) with a
100 ms fallback (RocketMQ's too) when nobody tells them.

``wait_for_ack`` does not poll: waiters sit in a heap by offset, and each accepted ack
resolves exactly the waiters at or below it that the acking slave verifiably holds, from
the reader callback that decoded it.

Before any of that, each connection runs the handshake (master_handshake.py): where the
slave's log and ours agree, a tail to take back, or a refusal; ``MasterEpochs``
(master_epochs.py) keeps the epoch and holds a master that crashed in recovery.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import os
import socket
import threading
from dataclasses import dataclass
from typing import Any

from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.ha.codec import HAProtocolError, ReportDecoder, encode_header, frame_buffers
from ledgermq.ha.config import HAConfig
from ledgermq.ha.epoch_file import EpochState
from ledgermq.ha.epochs import EpochLog
from ledgermq.ha.handshake import HandshakeError
from ledgermq.ha.master_epochs import MasterEpochs
from ledgermq.ha.master_handshake import handshake
from ledgermq.ha.session import Close, Heartbeat, Idle, MasterSession, Send
from ledgermq.store.message_store import MessageStore

log = logging.getLogger(__name__)

_FALLBACK_WAKE_S = 0.1
_READ_CHUNK = 64 * 1024
_MAX_DISCONNECTED_KEPT = 16
# One write hands the socket up to 1 MiB (32 frames of the default 32 KiB): few syscalls
# and wake-ups per megabyte, short enough to keep the loop responsive.
WRITE_SPAN = 1024 * 1024
_MAX_FRAMES_PER_WRITE = 256  # a small haTransferBatchSize makes smaller windows
_IOV_MAX = min(1024, os.sysconf("SC_IOV_MAX")) if hasattr(os, "sysconf") else 1024


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
    """One slave connection on a non-blocking socket of our own.

    Reports are read by a reader callback (no task wake-up between an ack arriving and
    the waiters it releases); transfers are written by a task that reads a window of up
    to ``WRITE_SPAN`` bytes, cuts it into frames of at most haTransferBatchSize, and
    hands all of them to one ``sendmsg``. Whatever the socket does not take stays queued
    and goes out when it is writable again, before the next window is read.
    """

    def __init__(self, service: HAService, sock: socket.socket, address: str) -> None:
        self.service = service
        self.sock = sock
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
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ended: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._out: list[bytes | memoryview] = []  # header, body, header, ... handed over, not yet sent
        self._out_at = 0  # index of the first buffer in ``_out`` not fully sent
        self._decoder = ReportDecoder()
        self.legacy = False  # a RocketMQ 4.x slave: no handshake, reports only
        # The slave's log starts here: its acks say nothing of bytes below (a slave that
        # started from our last segment does not hold what came before it).
        self.held_from = 0

    async def run(self) -> None:
        if self.closed_reason:
            return
        loop = self._loop = asyncio.get_running_loop()
        ended = self._ended = loop.create_future()
        try:
            async with asyncio.timeout(self.session.housekeeping_interval):
                outcome = await handshake(self.sock, self.address, self.service.epoch_keeper)
        except (TimeoutError, OSError, HAProtocolError, HandshakeError, ConnectionError) as err:
            self._set_reason(f"handshake failed: {type(err).__name__}: {err}")
            self.sock.close()
            return
        except Exception as err:  # never die silently
            log.exception("HA slave %s: handshake failed unexpectedly", self.address)
            self._set_reason(f"handshake failed: {type(err).__name__}: {err}")
            self.sock.close()
            return
        self.held_from = outcome.held_from
        if outcome.refused:
            self.service.refused_connections += 1
            self._set_reason(f"refused: {outcome.refused}")
            self.sock.close()
            return
        if outcome.legacy_report is not None:
            self.legacy = True
            self._take_reports([outcome.legacy_report])
        else:
            self.session.agreed_offset = outcome.agreed
        fd = self.sock.fileno()
        loop.add_reader(fd, self._on_readable)
        self._arm_housekeeping(self.session.housekeeping_interval)
        write = asyncio.create_task(self._write_loop(), name=f"ha-write-{self.address}")
        try:
            await asyncio.wait({write, ended}, return_when=asyncio.FIRST_COMPLETED)
            if write.done() and not write.cancelled() and write.exception() is not None:
                exc = write.exception()
                self._set_reason(f"{type(exc).__name__}: {exc}")
        finally:
            loop.remove_reader(fd)
            if self._timer is not None:
                self._timer.cancel()
            write.cancel()
            await asyncio.gather(write, return_exceptions=True)
            self._out = []
            self.sock.close()

    def stop(self, reason: str) -> None:
        """End the connection from outside (service shutdown); ``run`` then returns."""
        self._close(reason)

    def _set_reason(self, reason: str) -> None:
        if not self.closed_reason:
            self.closed_reason = reason

    def _close(self, reason: str) -> None:
        self._set_reason(reason)
        if self._ended is not None and not self._ended.done():
            self._ended.set_result(None)

    # -- reports (reader callback) ----------------------------------------------------
    def _arm_housekeeping(self, delay: float) -> None:
        assert self._loop is not None
        self._timer = self._loop.call_later(max(0.001, delay), self._housekeep)

    def _housekeep(self) -> None:
        session = self.session
        now = self.service.clock.monotonic()
        if session.expired(now):
            self._close(f"silent for more than {session.housekeeping_interval:.1f}s (housekeeping)")
        else:
            self._arm_housekeeping(session.last_read + session.housekeeping_interval - now + 0.001)

    def _on_readable(self) -> None:
        if self._ended is None or self._ended.done():
            return
        try:
            data = self.sock.recv(_READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._close(f"{type(exc).__name__}: {exc}")
            return
        if not data:
            self._close("slave closed the connection")
            return
        svc = self.service
        now = svc.clock.monotonic()
        self.session.on_bytes(now)
        try:
            offsets = self._decoder.feed(data)
        except HAProtocolError as exc:
            self._close(str(exc))
            return
        self._take_reports(offsets)

    def _take_reports(self, offsets: list[int]) -> None:
        svc = self.service
        now = svc.clock.monotonic()
        for off in offsets:
            decision = self.session.on_report(off, svc.store.max_phy_offset, now)
            if isinstance(decision, Close):
                self._close(decision.reason)
                return
            if decision.first:
                if off == 0:  # an empty slave: it holds what we send from here on
                    self.held_from = self.session.next_offset or 0
                if not svc.epoch_keeper.starts_record(self.session.next_offset or 0):
                    self._close(
                        f"reported offset {off} is not a record boundary of ours: the slave's log diverges "
                        "from the master's (a 4.x slave cannot be reconciled; truncate it by hand)"
                    )
                    return
                log.info("HA slave %s reported %d; transfer starts at %d", self.address, off, self.session.next_offset)
                self.reported.set()
                svc.wake_writers()
            self.last_ack_time_ms = svc.clock.wall_ms()
            svc._on_ack(off, self.held_from)

    # -- transfers (task) ---------------------------------------------------------------
    async def _write_loop(self) -> None:
        svc = self.service
        store = svc.store
        clock = svc.clock
        session = self.session
        loop = asyncio.get_running_loop()
        batch = session.batch_size
        span = max(batch, min(WRITE_SPAN, batch * _MAX_FRAMES_PER_WRITE))
        await self.reported.wait()
        while True:
            if self._out:  # the socket did not take all of the last window
                await self._writable(loop)
                self._send_out()
                continue
            now = clock.monotonic()
            action = session.plan(store.min_phy_offset, store.max_phy_offset, now, span)
            if isinstance(action, Send):
                data = store.read_commitlog(action.offset, action.size)
                if not data:
                    self._set_reason(f"commit log has nothing at {action.offset} (segment deleted?)")
                    return
                self._out = frame_buffers(action.offset, data, batch)
                session.on_sent(action.offset, len(data), now)
                self._send_out()
                if len(data) >= span:  # a backlog: reports, other slaves and requests run between windows
                    await asyncio.sleep(0)
                # else everything there was went out: the next plan waits, which yields anyway
            elif isinstance(action, Heartbeat):
                self._out = [encode_header(action.offset, 0)]
                session.on_sent(action.offset, 0, now)
                self._send_out()
            elif isinstance(action, Idle):
                # Planned and registered with no await in between: a wake-up cannot be lost.
                wait = _FALLBACK_WAKE_S if action.wait is None else min(action.wait, _FALLBACK_WAKE_S)
                await svc._wait_for_data(loop, wait)
            else:
                assert isinstance(action, Close)
                self._set_reason(action.reason)
                return

    def _send_out(self) -> None:
        """Write as much of ``_out`` as the socket takes now (one sendmsg per IOV_MAX buffers)."""
        out = self._out
        at = self._out_at
        end = len(out)
        sock = self.sock
        while at < end:
            try:
                sent = sock.sendmsg(out[at : at + _IOV_MAX])
            except (BlockingIOError, InterruptedError):
                break
            if sent <= 0:
                break
            while sent:
                size = len(out[at])
                if sent >= size:
                    sent -= size
                    at += 1
                else:
                    out[at] = memoryview(out[at])[sent:]
                    sent = 0
        if at >= end:
            self._out = []
            self._out_at = 0
        else:
            self._out_at = at

    async def _writable(self, loop: asyncio.AbstractEventLoop) -> None:
        fut: asyncio.Future[None] = loop.create_future()
        fd = self.sock.fileno()
        loop.add_writer(fd, _resolve, fut)
        try:
            await fut
        finally:
            loop.remove_writer(fd)

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


def _resolve(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_result(None)


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)


class HAService:
    """Accepts slaves on ``host:port`` (0 picks a free port; see ``port`` after start)."""

    def __init__(
        self,
        store: MessageStore,
        host: str,
        port: int,
        config: HAConfig | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        sync_master: bool = False,
    ) -> None:
        self.store = store
        self.sync_master = sync_master
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
        self._listener: socket.socket | None = None
        self._accept_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._data_waiters: list[asyncio.Future[None]] = []  # idle transfer loops
        self._wake_pending = False
        self._loop_thread = 0
        self._guard_added = False
        # Epochs and recovery (master_epochs.py): loaded and decided in ``start``.
        self.epoch_keeper = MasterEpochs(store, self.config, sync_master=sync_master)

    # -- epochs and recovery (master_epochs.py) -----------------------------------------
    @property
    def epochs(self) -> EpochLog:
        return self.epoch_keeper.epochs

    @property
    def epoch_state(self) -> EpochState:
        return self.epoch_keeper.state

    @property
    def recovering(self) -> bool:
        return self.epoch_keeper.recovering

    @property
    def recovery_note(self) -> str:
        return self.epoch_keeper.recovery_note

    @property
    def truncated_slaves(self) -> int:
        return self.epoch_keeper.truncated_slaves

    @property
    def took_back_bytes(self) -> int:
        return self.epoch_keeper.took_back_bytes

    # -- lifecycle ------------------------------------------------------------------
    async def start(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        await self.epoch_keeper.prepare()
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        listener = socket.create_server((self.host, self.port), family=family, backlog=128)
        listener.setblocking(False)
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._accept_task = loop.create_task(self._accept_loop(listener), name=f"ha-accept-{self.port}")
        if not self._guard_added:
            self.store.add_retention_guard(self._retention_floor)
            self.store.add_arrival_listener(self._on_arrival)
            self._guard_added = True
        log.info("HA service listening on %s:%d", self.host, self.port)

    async def stop(self) -> None:
        self.epoch_keeper.stop()
        listener, self._listener = self._listener, None
        accept, self._accept_task = self._accept_task, None
        if accept is not None:
            accept.cancel()
            await asyncio.gather(accept, return_exceptions=True)
        if listener is not None:
            listener.close()
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
        self.wake_writers()
        self._loop = None
        log.info("HA service on port %d stopped", self.port)

    async def _accept_loop(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, peer = await loop.sock_accept(listener)
            except OSError as exc:  # EMFILE and friends: keep the service, try again shortly
                log.error("HA service: accept failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            conn.setblocking(False)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            address = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
            task = loop.create_task(self._serve(conn, address), name=f"ha-slave-{address}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _serve(self, conn: socket.socket, address: str) -> None:
        link = _SlaveLink(self, conn, address)
        self.links[address] = link
        log.info("HA slave %s connected", address)
        if self._listener is None:  # accepted while stopping
            link.stop("HA service stopping")
        try:
            await link.run()
        finally:
            conn.close()
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
        waiters, self._data_waiters = self._data_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def _wait_for_data(self, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        """Until ``wake_writers`` or ``timeout`` seconds (the caller just saw nothing to send)."""
        fut: asyncio.Future[None] = loop.create_future()
        self._data_waiters.append(fut)
        timer = loop.call_later(timeout, _resolve, fut)
        try:
            await fut
        finally:
            timer.cancel()

    def notify_append(self) -> None:
        """Thread-safe: the commit log grew (the broker may call this after a put)."""
        loop = self._loop
        if loop is None or self._wake_pending:
            return
        self._wake_pending = True
        try:
            if threading.get_ident() == self._loop_thread:
                loop.call_soon(self.wake_writers)  # a put on the loop: no self-pipe write needed
            else:
                loop.call_soon_threadsafe(self.wake_writers)
        except RuntimeError:  # loop closed
            self._wake_pending = False

    def _on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        self.notify_append()

    # -- acknowledgements -----------------------------------------------------------
    def _on_ack(self, offset: int, held_from: int = 0) -> None:
        """A slave holding ``[held_from, offset)`` acknowledged: release the waiters for
        messages ending in that range. One ending at or below ``held_from`` the slave never
        held (it started after it): that waiter is left to time out (FLUSH_SLAVE_TIMEOUT)
        unless another slave covers it."""
        if offset > self.max_acked_offset:
            self.max_acked_offset = offset
        waiters = self._waiters
        while waiters and waiters[0][0] <= offset:
            end, _, fut = heapq.heappop(waiters)
            if not fut.done() and (end > held_from or self._covered(end)):
                fut.set_result(True)

    def _covered(self, end: int) -> bool:
        """Whether some connected slave verifiably holds the message ending at ``end``."""
        for link in self.links.values():
            ack = link.session.ack_offset
            if ack is not None and link.held_from < end <= ack:
                return True
        return False

    async def wait_for_ack(self, offset: int, timeout: float) -> bool:
        """True once a slave that holds the message ending at ``offset`` acknowledged it (or
        beyond); False after ``timeout``."""
        if self.max_acked_offset >= offset and self._covered(offset):
            return True
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        heapq.heappush(self._waiters, (offset, next(self._seq), fut))
        self.wake_writers()
        timer = loop.call_later(max(0.0, timeout), _expire, fut)
        try:
            acked = await fut
        finally:
            timer.cancel()
        if not acked:
            self._prune_waiters()
        return acked

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
