"""The table of a store's consume queues: created on first dispatch, loaded at start, flushed
together, sharing one bounded set of open descriptors; and the one step both dispatch passes
use to write a round's staged units into it."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from ledgermq.errors import StoreFullError
from ledgermq.store.consumequeue import DEFAULT_OPEN_FILES, ConsumeQueue, Unit, UnitsNotWritten
from ledgermq.store.damage import DamageRegistry
from ledgermq.store.open_files import OpenFiles
from ledgermq.store.queue_files import DirSync, SegmentCreator
from ledgermq.store.queue_gaps import QueueIntegrityStats

# Above this many segments to flush at once, one sync() is cheaper than an fdatasync each.
SYNC_ALL_ABOVE = 256


class ConsumeQueueTable:
    """All consume queues of a store, created on first dispatch, sharing one bounded set
    of open descriptors."""

    def __init__(self, root: Path, segment_size: int, open_files: OpenFiles | None = None) -> None:
        self.root = root
        self.segment_size = segment_size
        self.open_files = open_files or OpenFiles(DEFAULT_OPEN_FILES)
        self.dir_sync = DirSync()
        self.creator = SegmentCreator(self.dir_sync)
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._dirty: set[ConsumeQueue] = set()  # written since the last flush
        self._dirty_lock = threading.Lock()
        self.damage: DamageRegistry | None = None  # set by the store: explains dispatch gaps
        self.stats = QueueIntegrityStats()

    def load(self) -> None:
        try:
            topics = list(os.scandir(self.root))
        except FileNotFoundError:
            return
        try:
            for tdir in sorted(topics, key=lambda e: e.name):
                if not tdir.is_dir():
                    continue
                for qdir in sorted(os.scandir(tdir.path), key=lambda e: e.name):
                    if qdir.name.isdigit() and qdir.is_dir():
                        cq = self._new(tdir.name, int(qdir.name))
                        cq.load()
                        self.queues[(tdir.name, int(qdir.name))] = cq
        except BaseException:
            self.close()
            raise

    def load_positions(self, entries: list[list[Any]]) -> None:
        """Build the table from a clean stop's positions (queue_positions.py)."""
        for entry in entries:
            topic, queue_id = str(entry[0]), int(entry[1])
            cq = self._new(topic, queue_id)
            cq.restore(entry)
            self.queues[(topic, queue_id)] = cq

    def positions(self) -> list[list[Any]]:
        return [cq.position() for cq in self.all()]

    def _new(self, topic: str, queue_id: int) -> ConsumeQueue:
        return ConsumeQueue(
            topic, queue_id, self.root, self.segment_size, self.open_files, self.creator, self.damage, self.stats
        )

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            cq = self._new(topic, queue_id)
            # In place: one insertion is atomic for readers on other threads (they copy
            # with list(...) or look up one key); copying the table per new queue would
            # make creating N queues cost O(N^2).
            self.queues[(topic, queue_id)] = cq
        return cq

    def mark_dirty(self, cq: ConsumeQueue) -> None:
        # Already in the set: the flush that takes this set looks at the queue's segments
        # after taking it, so after the write that preceded this call.
        if cq not in self._dirty:
            with self._dirty_lock:
                self._dirty.add(cq)

    def all(self) -> list[ConsumeQueue]:
        return list(self.queues.values())

    def max_physic_offset(self) -> int:
        return max((cq.max_physic_offset for cq in self.all()), default=-1)

    def flush(self) -> None:
        """Make every dispatched unit and every new segment's directory entry durable.

        Pending segments get their files first. Only queues written since the last
        flush are visited; when many are, one ``sync()`` replaces thousands of
        fdatasyncs (each a journal commit)."""
        self.creator.drain()
        if self.creator.error is not None:
            raise StoreFullError(self.creator.error)  # nothing is synced or checkpointed past it
        with self._dirty_lock:
            dirty, self._dirty = self._dirty, set()
        segments = [seg for cq in dirty for seg in cq.files.files if seg.wrote > seg.flushed]
        if len(segments) > SYNC_ALL_ABOVE:
            # A segment started after the drain above has no file yet: flush() creates it.
            marks = [(seg, seg.wrote) for seg in segments if seg.pending is None]
            self.dir_sync.take()  # sync() covers directory entries too
            os.sync()
            for seg, wrote in marks:
                seg.flushed = max(seg.flushed, wrote)
            segments = [seg for seg in segments if seg.pending is not None]
        for seg in segments:
            seg.flush()
        self.dir_sync.sync()

    def close(self) -> None:
        for cq in self.all():
            cq.close()
        self.open_files.close_all()


def put_staged_units(
    table: ConsumeQueueTable, units: dict[ConsumeQueue, list[Unit]], count: int
) -> tuple[int, Exception | None]:
    """Write each queue's staged units (a unit's last field is its record's place in the
    round); (how many records, from the first, have every unit written; why the first that
    has not failed, or None). Shared by both dispatch passes, native and windowed."""
    done: int = count
    why: Exception | None = None
    for cq, cq_units in units.items():
        try:
            cq.put_units(cq_units)
        except UnitsNotWritten as exc:
            first = cq_units[exc.placed][5]
            if first < done:
                done, why = first, exc.__cause__ if isinstance(exc.__cause__, Exception) else exc
        table.mark_dirty(cq)
    return done, why
