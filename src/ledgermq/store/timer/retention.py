"""Retention keeps the commit-log records of pending timers.

A timer's message is stored once, when it is sent, and read back when it comes due, up to
``timerMaxDelaySec`` (3 days) later; retention deletes commit-log segments older than
``fileReservedTime`` (72 h) without looking at what is in them. ``guard_pending_timers``
registers the timer store's ``retention_floor`` with the message store, so no segment
holding the record of a timer not yet delivered goes (in DLedger mode: no data file
holding its entry or a later one). Past the forcible disk ratio (85 %) DLedger's cleaner
ignores its guards, as it does for a lagging follower; a native store never does.

A guard that fails must not let retention run unguarded: it logs and protects everything.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable

from ledgermq.store.dledger.commitlog import DLedgerCommitLog
from ledgermq.store.dledger.entry import BODY_OFFSET
from ledgermq.store.message_store import MessageStore
from ledgermq.store.native_store import NativeMessageStore
from ledgermq.util.ratelog import limited

log = logging.getLogger(__name__)

_INDEX = struct.Struct(">q")  # an entry header's Raft index, at byte 8
Floor = Callable[[], int | None]


def guard_pending_timers(store: MessageStore, floor: Floor) -> None:
    """Register ``floor`` (the lowest commit-log offset a pending timer needs) with the
    store's retention: as an offset natively, as the Raft index of that entry in DLedger mode."""
    if isinstance(store, NativeMessageStore):
        store.add_retention_guard(lambda: _guarded(floor, lambda: 0))
    else:
        dledger = store.commitlog
        store.add_ledger_guard(lambda: _guarded(lambda: _entry_index(dledger, floor()), lambda: 0))


def _guarded(guard: Callable[[], int | None], everything: Callable[[], int]) -> int | None:
    try:
        return guard()
    except Exception:
        limited.log(
            log, logging.ERROR, ("timer retention guard", "failed"),
            "the pending timers' retention guard failed; retention keeps everything this round", exc_info=True,
        )  # fmt: skip
        return everything()


def _entry_index(dledger: DLedgerCommitLog, offset: int | None) -> int | None:
    """The Raft index of the entry whose message is at ``offset``: read from its header."""
    if offset is None:
        return None
    if offset < dledger.divided_offset:  # the old native log, which DLedger's cleaner removes unguarded
        return 0
    header = dledger.ledger.read_body_at(offset - BODY_OFFSET, 16)
    if header is None:
        return None  # gone already
    return int(_INDEX.unpack_from(header, 8)[0])
