"""Simulate a process crash in-process: everything stops, nothing is tidied up.

``abandon(store)`` stops the background threads without their final flush or dispatch,
unmaps the files and drops the lock, but leaves the abort marker and whatever the
checkpoint last said, exactly the state a SIGKILL leaves behind (the page cache keeps
what was written to the mappings). Tests then damage files to model lost pages.
"""

from __future__ import annotations

from ledgermq.store.message_store import MessageStore


def abandon(store: MessageStore) -> None:
    services = (store.scrubber, store.cleaner, store.reput, store.segment_creator, store.commitlog_flusher,
                store.queue_flusher)  # fmt: skip
    for svc in services:
        if svc is not None:
            svc.stop(final_step=False)
    store.running = False
    if store.dledger is not None:
        store.dledger.abandon()  # no flush, no committed-index checkpoint
    store._close_files()
    store.lock.release()
