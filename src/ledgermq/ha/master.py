"""The master end of HA: accept slaves, stream the commit log, track acknowledgements.

Each slave connection is a non-blocking socket of our own (``SlaveLink``, master_link.py):
a reader callback turns reports into acks (and keeps housekeeping), a write task streams the
commit log as ``MasterSession`` plans it, like RocketMQ's WriteSocketService: it never
waits for an ack before sending more. Each wake-up reads one window of up to
``WRITE_SPAN`` bytes (one segment at most), cuts it into haTransferBatchSize frames
(12-byte header + body, the RocketMQ wire format) and writes all of them with one
``sendmsg``; what the socket does not take is sent when it is writable again, before
anything new is read. ``pump`` (the broker's end-of-turn step, broker/write_turn, once
per loop turn that appended; on its own, the store's arrival listener) lets each idle
link send a short window at once (``SlaveLink.pump``): its task is woken only for a
backlog, a full socket or a heartbeat, and otherwise stays parked on a 100 ms fallback
timer (RocketMQ's too).

The service keeps no waiters. It says how far the slaves the mode asks for acknowledged
(``replication_floor``) and whether they verifiably hold a message (``holds``); each
accepted ack calls ``on_replicated`` (the broker's write turn, which releases the sends
waiting in its table). In controller mode with allAckInSyncStateSet
(``require_acks_from``) a message counts only once *every* slave of a given set of
broker ids holds it, the lowest of their acks deciding; an empty set counts at once
(the master is alone in its SyncStateSet), and a smaller set counts what the remaining
members hold.

Both answers are asked per waiting send, the acks change once per slave report: the
floor, and the offset above which every slave the mode asks for verifiably holds what it
acknowledged, are recomputed when an ack is accepted, a link closes or goes, or the
required set changes (``_recount``), so ``replication_floor`` is an attribute read and
``holds`` two comparisons (the exact walk over the links runs only for a message below
that offset: one sent before a slave's log began).

Before any of that, each connection runs the handshake (master_handshake.py): where the
slave's log and ours agree, a tail to take back, or a refusal; ``MasterEpochs``
(master_epochs.py) keeps the epoch and holds a master that crashed in recovery.

Damaged commit-log ranges (the store refuses to hand them out) are repaired during the
handshake, either way (master_repair.py). Transfers stop before a range damaged here;
when the store finds new damage (its scrub, a read, our own send path) while a slave that
holds those bytes is connected, that slave's connection is closed so it reconnects at
once and the next handshake takes the range back from it.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable

from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.errors import CorruptRangeError
from ledgermq.ha.config import HAConfig
from ledgermq.ha.epoch_file import EpochState
from ledgermq.ha.epochs import EpochLog
from ledgermq.ha.master_epochs import MasterEpochs
from ledgermq.ha.master_link import SlaveLink, SlaveStatus
from ledgermq.ha.repair import describe
from ledgermq.ha.repair_book import RepairBook
from ledgermq.ha.session import CloseKind
from ledgermq.net.tls.bridge import secure_accepted
from ledgermq.store.native_store import NativeMessageStore

log = logging.getLogger(__name__)

_MAX_DISCONNECTED_KEPT = 16


AckListener = Callable[[SlaveLink, int], None]
"""Told of every accepted ack: the link and the offset (controller mode's SyncStateSet)."""
GoneListener = Callable[[SlaveLink], None]
"""Told when a slave's connection ended."""


class HAService:
    """Accepts slaves on ``host:port`` (0 picks a free port; see ``port`` after start)."""

    def __init__(
        self,
        store: NativeMessageStore,
        host: str,
        port: int,
        config: HAConfig | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        sync_master: bool = False,
        follow_store: bool = True,
    ) -> None:
        self.store = store
        self.sync_master = sync_master
        self.host = host
        self.port = port
        self.config = config or HAConfig()
        self.clock = clock
        self.links: dict[str, SlaveLink] = {}
        self.max_acked_offset = 0  # highest ack seen from any slave (RocketMQ push2SlaveMaxOffset)
        self.refused_connections = 0  # refused, or closed for reporting beyond our max (CloseKind)
        # Told of every accepted ack and change of the required set (the broker's write turn).
        self.on_replicated: Callable[[], None] | None = None
        # Alone (no broker's write turn pumping the links): follow the store's arrivals.
        self.follow_store = follow_store
        self._disconnected: dict[str, SlaveStatus] = {}
        self._listener: socket.socket | None = None
        self._accept_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake_pending = False  # a threadsafe ``pump`` from the store's arrival listener is queued
        self._guard_added = False
        # Epochs and recovery (master_epochs.py): loaded and decided in ``start``.
        self.epoch_keeper = MasterEpochs(store, self.config, sync_master=sync_master)
        self.repairs = RepairBook(store)  # damaged ranges, and what was repaired (haStatus)
        # Controller mode: the slaves (broker ids) whose acks every message needs
        # (allAckInSyncStateSet); None: any one slave's (4.x SYNC_MASTER).
        self.required_ids: frozenset[int] | None = None
        # What the sends ask, kept by ``_recount`` on every change of the acks, the links
        # or the required set (not rebuilt per send): the replication floor, and the offset
        # above which (up to the floor) the slaves the mode asks for verifiably hold a message.
        self._floor = 0
        self._held_above = 1 << 62  # with ``_held_upto``: (above, upto] is held for sure
        self._held_upto = 0
        self._fallbehind_max = self.config.slave_fallbehind_max
        self.ack_listeners: list[AckListener] = []
        self.gone_listeners: list[GoneListener] = []
        self.controller_epoch: int | None = None  # controller mode: the master epoch ``start`` begins

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

    async def note_in_sync(self, members: frozenset[int]) -> None:
        """Controller mode: the slaves of the SyncStateSet, kept for a recovery after a crash."""
        await self.epoch_keeper.note_in_sync(members)

    # -- lifecycle ------------------------------------------------------------------
    async def start(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        await self.epoch_keeper.prepare(self.controller_epoch)
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        listener = socket.create_server((self.host, self.port), family=family, backlog=128)
        listener.setblocking(False)
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._accept_task = loop.create_task(self._accept_loop(listener), name=f"ha-accept-{self.port}")
        if not self._guard_added:
            self.store.add_retention_guard(self._retention_floor)
            if self.follow_store:
                self.store.add_arrival_listener(self._on_arrival)
            self.store.add_damage_listener(self._on_damage_threadsafe)
            self._guard_added = True
        if damaged := self.repairs.refresh():
            log.warning(
                "HA: commit log ranges %s are damaged; refused (and not replicated) until a slave that holds them "
                "connects and returns them",
                describe(damaged),
            )
            for a, b in damaged:
                self.repairs.note_unrepaired(a, b, "no slave has connected since this master started", logged=True)
                self.repairs.awaiting_holder.add((a, b))
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
            task = loop.create_task(self._secure_and_serve(conn, address), name=f"ha-slave-{address}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _secure_and_serve(self, conn: socket.socket, address: str) -> None:
        """TLS first when the process runs it (net/tls/bridge.py: the link keeps a plain socket)."""
        secured = await secure_accepted(conn, address, f"HA port {self.port}")
        if secured is not None:
            await self._serve(secured, address)

    async def _serve(self, conn: socket.socket, address: str) -> None:
        link = SlaveLink(self, conn, address)
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
            if link.closed_kind is not CloseKind.OTHER:
                self.refused_connections += 1
            while len(self._disconnected) > _MAX_DISCONNECTED_KEPT:
                self._disconnected.pop(next(iter(self._disconnected)))
            log.warning("HA slave %s disconnected: %s", address, link.closed_reason or "unknown")
            for gone in list(self.gone_listeners):
                try:
                    gone(link)
                except Exception:
                    log.exception("HA: a disconnection listener failed")
            self._replication_moved()

    # -- new data -------------------------------------------------------------------
    def wake_writers(self) -> None:
        """Tell every transfer loop there may be new data (event-loop thread only)."""
        self._wake_pending = False
        for link in list(self.links.values()):
            link.wake()

    pump = wake_writers
    """The commit log grew (event-loop thread): each idle link sends it now (the write
    turn's name for ``wake_writers``; an alias, not a call of it, as it runs per send)."""

    def _on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        """The store's arrival listener (reput thread) when no write turn pumps the links."""
        loop = self._loop
        if loop is None or self._wake_pending:
            return
        self._wake_pending = True
        try:
            loop.call_soon_threadsafe(self.wake_writers)
        except RuntimeError:  # loop closed
            self._wake_pending = False

    # -- damage ---------------------------------------------------------------------
    def _on_damage_threadsafe(self, start: int, end: int, reason: str) -> None:
        """The store's damage listener: called from whichever thread found the damage."""
        loop = self._loop
        if loop is None:
            return  # not serving: the next start reads the store's ranges
        try:
            loop.call_soon_threadsafe(self.on_damage, start, end, reason)
        except RuntimeError:  # loop closed (stopping)
            pass

    def on_damage(self, start: int, end: int, reason: str) -> None:
        """New damage in [start, end) (event-loop thread): transfers stop before it, and every
        connected slave that holds it healthy re-handshakes, which takes it back."""
        self.repairs.refresh()
        holders = [link for link in self.links.values() if link.holds(start, end)]
        for link in holders:
            log.warning(
                "HA: commit log [%d, %d) is damaged here (%s): closing slave %s's connection so its reconnect "
                "returns those bytes",
                start,
                end,
                reason,
                link.address,
            )
            link.stop(f"commit log [{start}, {end}) is damaged on the master: re-handshaking to repair it")
        if not holders:
            self.repairs.await_holder(start, end, "no connected slave holds it (yet)")

    def _repair_through(self, link: SlaveLink) -> None:
        """A slave now holds a damaged range that had no holder when it was found: its
        re-handshake takes the range back (the handshake's repair pass)."""
        if link.closed_reason:
            return
        held = self.repairs.held_by(link.holds)
        if held:
            log.warning(
                "HA: slave %s now holds damaged commit log %s: re-handshaking to repair it",
                link.address,
                describe(held),
            )
            link.stop(f"commit log {describe(held)} is damaged on the master: re-handshaking to repair it")

    def damage_hit(self, err: CorruptRangeError, address: str) -> None:
        """A transfer to ``address`` ran into a damaged range (event-loop thread)."""
        if not self.store.report_damage(err.start, err.end, err.reason):  # known: our copy was stale
            log.info("HA: transfer to %s stops before damaged [%d, %d)", address, err.start, err.end)
        self.repairs.refresh()  # the next plan stops before it (the listener's hop comes later)

    # -- acknowledgements -----------------------------------------------------------
    def slave_acked(self, link: SlaveLink, offset: int) -> None:
        """A slave's accepted report (its reader callback): listeners first, so a SyncStateSet
        that grows on this ack already counts the new member when the sends are released."""
        for listener in list(self.ack_listeners):
            try:
                listener(link, offset)
            except Exception:
                log.exception("HA: an acknowledgement listener failed")
        if self.repairs.awaiting_holder:
            self._repair_through(link)
        if offset > self.max_acked_offset:
            self.max_acked_offset = offset
        self._replication_moved()

    def link_closed(self, link: SlaveLink) -> None:
        """A link stopped counting (its connection is closing; it leaves ``links`` when its
        handler returns): a required slave's acks count only on a live link."""
        if link.session.ack_offset is not None:
            self._replication_moved()

    def _replication_moved(self) -> None:
        self._recount()
        tell = self.on_replicated
        if tell is not None:
            try:
                tell()
            except Exception:
                log.exception("HA: the replication listener failed")

    def require_acks_from(self, broker_ids: frozenset[int] | None) -> None:
        """Controller mode, allAckInSyncStateSet: from now on a message counts as replicated
        once every slave in ``broker_ids`` holds it (empty: at once); None: once any slave
        does. Sends the new rule satisfies are released by the next end-of-turn step."""
        self.required_ids = broker_ids
        self._replication_moved()

    def _recount(self) -> None:
        """Recompute the floor and the offset above which it is verifiably held, from the
        links as they are now (loops over a handful of links, no lists: this runs per ack).

        With a required set: for each member the best ack of its live links (-1 when it has
        none), the floor the lowest of them (a very large offset for an empty set); the
        held-above offset is the highest ``held_from`` among the links giving those bests,
        so a message ending above it and at or below the floor is held by every member.
        Without: the floor is the highest ack any slave ever gave (it may have gone since),
        and a message ending above the ``held_from`` of the link with the highest ack and at
        or below that ack is held by it; ``holds`` walks the links for anything else."""
        required = self.required_ids
        links = self.links
        if required is None:
            best = -1
            held = 0
            for link in links.values():
                ack = link.session.ack_offset
                if ack is not None and ack > best:
                    best, held = ack, link.held_from
            self._floor = self.max_acked_offset
            self._held_above, self._held_upto = held, best  # the floor may be a gone slave's ack
            return
        floor = 1 << 62
        held_above = 0
        for broker_id in required:
            best = -1
            held = 0
            for link in links.values():
                if link.broker_id != broker_id or link.closed_reason:
                    continue
                ack = link.session.ack_offset
                if ack is not None and (ack > best or (ack == best and link.held_from < held)):
                    best, held = ack, link.held_from
            if best < 0:
                self._floor, self._held_above, self._held_upto = -1, 1 << 62, 0
                return
            if best < floor:
                floor = best
            if held > held_above:
                held_above = held
        self._floor, self._held_above, self._held_upto = floor, held_above, floor

    def replication_floor(self) -> int:
        """The offset the slaves the mode asks for acknowledged: with a required set the
        lowest of their acks (each the best of its live links; -1 if one has none, a very
        large offset for an empty set), else the highest ack of any slave. Kept by
        ``_recount``; asked once per end-of-turn step that has sends waiting for slaves."""
        return self._floor

    def holds(self, end: int) -> bool:
        """Whether the slaves the mode asks for verifiably hold the message ending at ``end``:
        every required slave (a live link whose log starts below it and whose ack covers it),
        or, without a required set, any connected slave. A slave acknowledges only what its
        own log holds: one that started after the message never held it. Asked per released
        send: two comparisons unless the message is older than a slave's log."""
        if self._held_above < end <= self._held_upto:
            return True
        return self._holds_exactly(end)

    def _holds_exactly(self, end: int) -> bool:
        """``holds`` by walking the links (a message at or below the held-above offset)."""
        required = self.required_ids
        if required is None:
            return self._covered(end)
        for broker_id in required:
            for link in self.links.values():
                if link.broker_id != broker_id or link.closed_reason:
                    continue
                ack = link.session.ack_offset
                if ack is not None and link.held_from < end <= ack:
                    break
            else:
                return False
        return True

    def _covered(self, end: int) -> bool:
        """Whether some connected slave verifiably holds the message ending at ``end``."""
        for link in self.links.values():
            ack = link.session.ack_offset
            if ack is not None and link.held_from < end <= ack:
                return True
        return False

    @property
    def acked_offsets(self) -> dict[str, int]:
        """Each connected slave's latest accepted ack (slaves yet to report are left out)."""
        return {a: link.session.ack_offset for a, link in self.links.items() if link.session.ack_offset is not None}

    @property
    def connection_count(self) -> int:
        return len(self.links)

    def slave_ok(self, master_put_offset: int) -> bool:
        """RocketMQ isSlaveOK: a slave is connected and less than haSlaveFallbehindMax behind.
        With a required set (allAckInSyncStateSet) the set decides, not this: always True."""
        if self.required_ids is not None:
            return True
        return bool(self.links) and master_put_offset - self.max_acked_offset < self._fallbehind_max

    # -- retention and status -------------------------------------------------------
    def _retention_floor(self) -> int | None:
        """Called from the store's clean thread: keep what connected slaves still need."""
        needed = [n for link in list(self.links.values()) if (n := link.session.needed_from()) is not None]
        return min(needed) if needed else None

    def status(self) -> list[SlaveStatus]:
        master_max = self.store.max_phy_offset
        live = [link.status(master_max, connected=True) for link in self.links.values()]
        return live + list(self._disconnected.values())
