"""Simulate a process crash in-process: everything stops, nothing is tidied up.

``abandon(store)`` stops the background threads without their final flush or dispatch,
unmaps the files and drops the lock, but leaves the abort marker and whatever the
checkpoint last said, exactly the state a SIGKILL leaves behind (the page cache keeps
what was written to the mappings). Tests then damage files to model lost pages.
"""

from __future__ import annotations

from ledgermq.store.dledger.mode_store import DLedgerMessageStore
from ledgermq.store.message_store import MessageStore


def abandon(store: MessageStore) -> None:
    for svc in store.services():
        if svc is not None:
            svc.stop(final_step=False)
    store.running = False
    if isinstance(store, DLedgerMessageStore):
        store.commitlog.abandon()  # no flush, no committed-index checkpoint
    store.close_files()
    store.lock.release()
