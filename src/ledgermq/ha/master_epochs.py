"""A master's side of replication epochs: which epoch it is in, whether it may take writes.

``MasterEpochs`` owns the epoch file, begins an epoch when the master may take writes, and
holds a master that restarted after a crash in *recovery* (writes fenced in the store) until
a slave reconciles with it or haRecoveryWaitMillis runs out. ``decide`` answers a slave's
hello with ``epochs.reconcile``; the connection handler (master_handshake.py) carries the
answer and any take-back. Event-loop thread only; file writes go to a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import zlib
from collections.abc import Sequence

from ledgermq.errors import CorruptRangeError
from ledgermq.ha.config import HAConfig
from ledgermq.ha.epoch_file import EpochFile, EpochState
from ledgermq.ha.epochs import Decision, EpochLog, reconcile
from ledgermq.ha.handshake import Hello
from ledgermq.ha.repair import Range
from ledgermq.store.dispatch import RECORD_HEAD_SIZE, starts_record
from ledgermq.store.native_store import NativeMessageStore

log = logging.getLogger(__name__)

_FINGERPRINT_BYTES = 64


class MasterEpochs:
    def __init__(self, store: NativeMessageStore, config: HAConfig, *, sync_master: bool) -> None:
        self.store = store
        self.config = config
        self.sync_master = sync_master
        self.file = EpochFile(store.root)
        self.state = EpochState(EpochLog())
        self.recovering = False  # restarted after a crash, waiting for a slave before writes
        self.recovery_note = ""  # how the last recovery ended (haStatus)
        self.truncated_slaves = 0  # slaves told to cut a tail that diverged or that we lack
        self.took_back_bytes = 0  # bytes a recovering master took back from a slave
        self.reconciling = asyncio.Lock()  # one slave's handshake at a time
        self._file_lock = asyncio.Lock()  # one change of the epoch file at a time
        self._timer: asyncio.TimerHandle | None = None
        self._crash_handled = False  # the store's abnormal recovery was considered once already
        self._next_number = 0  # controller mode: the master epoch the next epoch is numbered by
        self.recover_from: frozenset[int] | None = None  # controller mode: slaves whose hello ends a recovery
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def epochs(self) -> EpochLog:
        return self.state.epochs

    async def prepare(self, controller_epoch: int | None = None) -> None:
        """Begin a new epoch now, or first wait for a slave if we may have lost a tail.

        Only a master that crashed (no clean stop) while a slave was attached can have lost
        bytes its slave holds: it fences writes until a slave reconciles with it (taking
        those bytes back) or haRecoveryWaitMillis runs out (-1, the SYNC_MASTER default:
        never; an operator decides by restarting with another value). A crash counts for the
        first start as master of this process only (a broker that served as a slave since
        saved the new master's epochs, with no slave attached).

        Controller mode (``controller_epoch``): the controller chose this broker as master
        for that master epoch, so the epoch is numbered by it (one above our last when our
        file already went past it: a store that served outside controller mode). It begins
        at once, unless this store crashed as master with a slave attached: then it waits as
        above. When the file names the SyncStateSet's other members of that time
        (``note_in_sync``), only one of *them* can end the wait: they may hold acknowledged
        messages of our last epoch that the crash took from our log, a slave outside the set
        proves nothing. (The controller's own set cannot say: an election resets it to the
        new master alone.)"""
        self.state = await asyncio.to_thread(self.file.load)
        recovery = self.store.recovery
        crashed = recovery is not None and recovery.abnormal and not self._crash_handled
        self._crash_handled = True
        self._next_number = 0
        self.recover_from = None
        if controller_epoch is not None:
            if controller_epoch <= self.epochs.last_epoch:
                log.warning(
                    "HA: the controller's master epoch %d is not above this store's last epoch %d; "
                    "the new epoch is numbered %d",
                    controller_epoch,
                    self.epochs.last_epoch,
                    self.epochs.last_epoch + 1,
                )
            self._next_number = controller_epoch
            self.recover_from = self.state.in_sync_slaves or None
        wait_ms = self.config.recovery_wait_ms(self.sync_master)
        if not (crashed and self.state.slave_attached and wait_ms != 0):
            await self._begin()
            return
        self.recovering = True
        members = f" (SyncStateSet members {sorted(self.recover_from)})" if self.recover_from else ""
        reason = (
            f"master restarted after a crash and waits for its slave{members} to return what it may have lost "
            f"(epoch {self.epochs.last_epoch}, log end {self.store.max_phy_offset})"
        )
        self.store.fence_writes(reason)
        log.warning("HA: %s", reason)
        if wait_ms > 0:
            self._timer = asyncio.get_running_loop().call_later(wait_ms / 1000, self._timed_out)

    def may_end_recovery(self, slave_id: int | None) -> bool:
        """Whether this slave's hello can end a recovery (controller mode: a SyncStateSet member)."""
        return self.recover_from is None or (slave_id is not None and slave_id in self.recover_from)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for task in self._tasks:
            task.cancel()

    def _timed_out(self) -> None:
        if self.recovering:
            task = asyncio.ensure_future(self._give_up())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _give_up(self) -> None:
        async with self.reconciling:
            if self.recovering:
                log.error(
                    "HA: no slave reconciled within haRecoveryWaitMillis; taking writes with log end %d "
                    "(anything a slave held beyond it will be truncated there)",
                    self.store.max_phy_offset,
                )
                self.recovery_note = "gave up waiting for a slave (haRecoveryWaitMillis)"
                await self._begin()

    async def _begin(self) -> None:
        ident = secrets.randbits(62) + 1  # tells this epoch from any other log's epoch of the same number
        epochs = self.epochs.begin(self.store.max_phy_offset, ident, self._next_number)
        state = await self._save(epochs=epochs, slave_attached=False, in_sync_slaves=frozenset())
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.recovering:
            self.recovering = False
            self.store.fence_writes(None)
        log.info("HA: epoch %d begins at %d", state.epochs.last_epoch, self.store.max_phy_offset)

    def decide(self, hello: Hello) -> Decision:
        return reconcile(
            self.epochs,
            self.store.max_phy_offset,
            hello.epoch,
            hello.max_offset,
            recovering=self.recovering and self.may_end_recovery(hello.broker_id),
            slave_start=hello.min_offset,
            slave_epoch_ident=hello.epoch_ident,
        )

    async def slave_reconciled(self, slave_id: int | None = None) -> None:
        """A slave agreed with us: a recovering master may take writes now (controller mode:
        if the slave is a SyncStateSet member); remember that a slave holds this epoch (so a
        crash in it waits for one)."""
        if self.recovering and not self.may_end_recovery(slave_id):
            return
        if self.recovering:
            self.recovery_note = self.recovery_note or "reconciled with a slave that had nothing more"
            await self._begin()
        if not self.state.slave_attached:
            await self._save(slave_attached=True)

    async def note_in_sync(self, members: frozenset[int]) -> None:
        """Controller mode: the other SyncStateSet members this master relies on now (or is
        about to ask the controller for); kept in the file for a recovery after a crash."""
        if members != self.state.in_sync_slaves and not self.recovering:
            await self._save(in_sync_slaves=members)

    async def _save(
        self,
        *,
        epochs: EpochLog | None = None,
        slave_attached: bool | None = None,
        in_sync_slaves: frozenset[int] | None = None,
    ) -> EpochState:
        """Change some fields of the file, one change at a time (the others as they are then)."""
        async with self._file_lock:
            cur = self.state
            state = EpochState(
                cur.epochs if epochs is None else epochs,
                cur.slave_attached if slave_attached is None else slave_attached,
                cur.in_sync_slaves if in_sync_slaves is None else in_sync_slaves,
            )
            await asyncio.to_thread(self.file.save, state)
            self.state = state
            return state

    def fingerprint(self, offset: int, slave_start: int, avoid: Sequence[Range] = ()) -> tuple[int, int] | None:
        """(a, CRC32 of our bytes [a, offset)) for the slave to compare before it truncates:
        up to 64 bytes just below ``offset``, within one segment and within both logs, and
        clear of ``avoid`` (ranges damaged on either end: neither may read them)."""
        segment = self.store.config.mapped_file_size_commitlog
        low = max(offset - _FINGERPRINT_BYTES, self.store.min_phy_offset, slave_start)
        if offset % segment:
            low = max(low, offset - offset % segment)
        for a, b in avoid:
            if a < offset and b > low:
                low = max(low, b)
        if low >= offset:
            return None
        try:
            data = self.store.read_commitlog(low, offset - low)
        except CorruptRangeError:  # found damaged since: no check rather than no slave
            return None
        return (low, zlib.crc32(data)) if len(data) == offset - low else None

    def starts_record(self, offset: int) -> bool:
        """Whether a transfer may start at ``offset``: our end, a segment start, or a record
        that names ``offset`` as its own position (or a segment's blank end)."""
        store = self.store
        if offset >= store.max_phy_offset or offset % store.config.mapped_file_size_commitlog == 0:
            return True
        return starts_record(store.read_commitlog(offset, RECORD_HEAD_SIZE), offset) is True
