"""One slave connection of the master's HA service: reports in, commit-log windows out.

A reader callback turns the slave's reports into acks; a transfer task streams windows of
the commit log as ``MasterSession`` plans them, and ``pump`` sends a short window from the
loop turn that appended it, so a single put reaches the slave without waking that task.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from dataclasses import dataclass
from typing import Any, Protocol

from ledgermq.clock import Clock
from ledgermq.errors import CorruptRangeError
from ledgermq.ha.codec import HAProtocolError, ReportDecoder, encode_header, frame_buffers
from ledgermq.ha.config import HAConfig
from ledgermq.ha.handshake import HandshakeError
from ledgermq.ha.master_epochs import MasterEpochs
from ledgermq.ha.master_handshake import handshake
from ledgermq.ha.repair import Range
from ledgermq.ha.repair_book import RepairBook
from ledgermq.ha.session import Close, CloseKind, Heartbeat, Idle, MasterSession, Send
from ledgermq.store.native_store import NativeMessageStore

log = logging.getLogger("ledgermq.ha.master")

_FALLBACK_WAKE_S = 0.1
_MIN_HANDSHAKE_S = 30.0  # a handshake may move a lost tail or damaged ranges: megabytes
_READ_CHUNK = 64 * 1024
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
    broker_id: int | None = None  # controller mode: the id the slave's hello gave


class LinkHost(Protocol):
    """What a link needs of the service that accepted it (HAService, ha/master.py), passed
    in so this module does not import that one: the store and settings, the epoch keeper
    and repair book of the handshake, and where accepted acks and damage go."""

    store: NativeMessageStore
    config: HAConfig
    clock: Clock
    epoch_keeper: MasterEpochs
    repairs: RepairBook

    def slave_acked(self, link: SlaveLink, offset: int) -> None:
        """An accepted report (the link's reader callback)."""

    def wake_writers(self) -> None:
        """Let every link send what there is (a slave's first report fixed its position)."""

    def damage_hit(self, err: CorruptRangeError, address: str) -> None:
        """A transfer ran into a damaged range."""

    def link_closed(self, link: SlaveLink) -> None:
        """The link is closing: its acks stop counting now, before it leaves the service."""


class SlaveLink:
    """One slave connection on a non-blocking socket of our own.

    Reports are read by a reader callback (no task wake-up between an ack arriving and
    the waiters it releases); transfers are written by a task that reads a window of up
    to ``WRITE_SPAN`` bytes, cuts it into frames of at most haTransferBatchSize, and
    hands all of them to one ``sendmsg``. Whatever the socket does not take stays queued
    and goes out when it is writable again, before the next window is read.
    """

    def __init__(self, service: LinkHost, sock: socket.socket, address: str) -> None:
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
        self.closed_kind = CloseKind.OTHER  # typed, for counters (refusals, peers ahead)
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
        self.slave_damaged: tuple[Range, ...] = ()  # what its hello said it holds damaged
        self.broker_id: int | None = None  # controller mode: the slave's id, from its hello
        batch = self.session.batch_size
        self._span = max(batch, min(WRITE_SPAN, batch * _MAX_FRAMES_PER_WRITE))
        self._parked: asyncio.Future[None] | None = None  # the transfer loop, idle

    async def run(self) -> None:
        if self.closed_reason:
            return
        loop = self._loop = asyncio.get_running_loop()
        ended = self._ended = loop.create_future()
        try:
            svc = self.service
            async with asyncio.timeout(max(self.session.housekeeping_interval, _MIN_HANDSHAKE_S)):
                outcome = await handshake(
                    self.sock, self.address, svc.epoch_keeper, svc.repairs, self.session.batch_size
                )
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
        self.slave_damaged = outcome.slave_damaged
        self.broker_id = outcome.slave_broker_id
        if outcome.more_repairs:  # one handshake's repair budget ran out: the next one goes on
            self._set_reason("more damaged commit-log ranges to repair than one handshake moves: re-handshaking")
            self.sock.close()
            return
        if outcome.refused:
            self._set_reason(f"refused: {outcome.refused}", CloseKind.REFUSED)
            self.sock.close()
            return
        if outcome.legacy_report is not None:
            self.legacy = True
            self._take_reports([outcome.legacy_report], self.service.clock.monotonic())
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

    def _set_reason(self, reason: str, kind: CloseKind = CloseKind.OTHER) -> None:
        if not self.closed_reason:
            self.closed_reason = reason
            self.closed_kind = kind
            self.service.link_closed(self)

    def _close(self, reason: str, kind: CloseKind = CloseKind.OTHER) -> None:
        self._set_reason(reason, kind)
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
        now = self.service.clock.monotonic()
        self.session.on_bytes(now)
        try:
            offsets = self._decoder.feed(data)
        except HAProtocolError as exc:
            self._close(str(exc))
            return
        self._take_reports(offsets, now)

    def _take_reports(self, offsets: list[int], now: float) -> None:
        svc = self.service
        for off in offsets:
            decision = self.session.on_report(off, svc.store.max_phy_offset, now)
            if isinstance(decision, Close):
                self._close(decision.reason, decision.kind)
                return
            if decision.first:
                if off == 0:  # an empty slave: it holds what we send from here on
                    self.held_from = self.session.next_offset or 0
                try:
                    boundary = svc.epoch_keeper.starts_record(self.session.next_offset or 0)
                except CorruptRangeError as err:
                    self._close(f"cannot check the 4.x slave's first report {off}: {err}")
                    return
                if not boundary:
                    self._close(
                        f"reported offset {off} is not a record boundary of ours: the slave's log diverges "
                        "from the master's (a 4.x slave cannot be reconciled; truncate it by hand)"
                    )
                    return
                log.info("HA slave %s reported %d; transfer starts at %d", self.address, off, self.session.next_offset)
                self.reported.set()
                svc.wake_writers()
            self.last_ack_time_ms = svc.clock.wall_ms()
            svc.slave_acked(self, off)

    # -- transfers (task, and pumped from the loop turn that appended) --------------------
    async def _write_loop(self) -> None:
        svc = self.service
        store = svc.store
        clock = svc.clock
        session = self.session
        loop = asyncio.get_running_loop()
        span = self._span
        await self.reported.wait()
        while True:
            if self._out:  # the socket did not take all of the last window
                await self._writable(loop)
                self._send_out()
                continue
            now = clock.monotonic()
            stop = svc.repairs.stop_for(session.next_offset)
            action = session.plan(store.min_phy_offset, store.max_phy_offset, now, span, stop)
            if isinstance(action, Send):
                sent = self._send_window(action, now)
                if sent < 0:
                    return
                if sent >= span:  # a backlog: reports, other slaves and requests run between windows
                    await asyncio.sleep(0)
                # else everything there was went out: the next plan waits, which yields anyway
            elif isinstance(action, Heartbeat):
                self._out = [encode_header(action.offset, 0)]
                session.on_sent(action.offset, 0, now)
                self._send_out()
            elif isinstance(action, Idle):
                # Planned and parked with no await in between: a wake-up cannot be lost.
                wait = _FALLBACK_WAKE_S if action.wait is None else min(action.wait, _FALLBACK_WAKE_S)
                await self._park(loop, wait)
            else:
                assert isinstance(action, Close)
                self._set_reason(action.reason, action.kind)
                return

    def _send_window(self, action: Send, now: float) -> int:
        """Hand the planned window to the socket; its size, 0 when it overlaps damage found
        since the plan (the next plan stops before it), or -1 when the log has nothing there."""
        try:
            data = self.service.store.read_commitlog(action.offset, action.size)
        except CorruptRangeError as err:
            self.service.damage_hit(err, self.address)
            return 0
        if not data:
            self._set_reason(f"commit log has nothing at {action.offset} (segment deleted?)")
            return -1
        self._out = frame_buffers(action.offset, data, self.session.batch_size)
        self.session.on_sent(action.offset, len(data), now)
        self._send_out()
        return len(data)

    async def _park(self, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        """Idle until ``wake`` finds work ``pump`` cannot do, or ``timeout`` seconds."""
        fut: asyncio.Future[None] = loop.create_future()
        self._parked = fut
        timer = loop.call_later(timeout, _resolve, fut)
        try:
            await fut
        finally:
            timer.cancel()
            self._parked = None

    def wake(self) -> None:
        """New data may be there. A parked transfer loop is not woken for what ``pump`` can
        send from here: a send then costs no task step, future or timer of its own."""
        parked = self._parked
        if parked is not None and not parked.done() and not self.pump():
            parked.set_result(None)

    def pump(self) -> bool:
        """Send a short window (less than a span) now; False when the transfer loop must run
        instead: a backlog, a socket that did not take everything, a heartbeat or a close."""
        if self._out or self.closed_reason:
            return False
        svc = self.service
        store = svc.store
        now = svc.clock.monotonic()
        repairs = svc.repairs  # nothing damaged (every send but the rarest): no call to ask where to stop
        stop = repairs.stop_for(self.session.next_offset) if repairs.damaged else None
        action = self.session.plan(store.min_phy_offset, store.max_phy_offset, now, self._span, stop)
        if isinstance(action, Idle):
            return True  # its timer, at most the fallback wake, stays as it was
        if not isinstance(action, Send) or action.size >= self._span:
            return False
        return self._send_window(action, now) > 0 and not self._out

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

    def holds(self, start: int, end: int) -> bool:
        """Whether this slave verifiably holds [start, end) healthy: it acknowledged past it,
        its log starts below it, and its hello did not list it as damaged."""
        ack = self.session.ack_offset
        if self.legacy or ack is None or self.closed_reason:
            return False
        return self.held_from <= start and end <= ack and not any(a < end and start < b for a, b in self.slave_damaged)

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
            broker_id=self.broker_id,
        )


def _resolve(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_result(None)
