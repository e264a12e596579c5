"""The segments of one consume queue: an ordered run of equal-size ``QueueSegment``s.

The consume-queue counterpart of ``MappedFileQueue``: the same absolute offsets and
segment names, but nothing is opened at load (a store with a hundred thousand queues
starts without a hundred thousand open files), a new segment starts in memory and gets
its file from ``SegmentCreator`` off the dispatch path, and its directory entry is made
durable by the next consume-queue flush (``DirSync``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections import deque
from collections.abc import Callable

from ledgermq.atomic_file import fsync_dir
from ledgermq.errors import StoreError
from ledgermq.store.mapped_file import DELETED_SUFFIX, parse_segment_name, segment_name
from ledgermq.store.mapped_file_queue import SegmentRun
from ledgermq.store.open_files import OpenFiles
from ledgermq.store.queue_segment import QueueSegment
from ledgermq.util.service import ServiceThread

log = logging.getLogger(__name__)


class DirSync:
    """Directories whose new entries are not durable yet.

    Creating a queue's first segment makes the topic and queue directories and the file;
    their directory entries reach the disk when the consume-queue flush calls ``sync``,
    which it does before it writes the checkpoint. Recovery after a crash re-dispatches
    from that checkpoint, so a file whose entry was lost is written again."""

    def __init__(self) -> None:
        self._pending: set[str] = set()
        self._lock = threading.Lock()

    def add(self, *directories: str) -> None:
        with self._lock:
            self._pending.update(directories)

    def take(self) -> list[str]:
        with self._lock:
            pending, self._pending = self._pending, set()
        # Children first, so a parent's entry for a child is synced after the child's own.
        return sorted(pending, key=len, reverse=True)

    def sync(self) -> None:
        for directory in self.take():
            with contextlib.suppress(FileNotFoundError):  # a deleted topic
                fsync_dir(directory)


class SegmentCreator:
    """Gives pending segments their files, in the order they were started.

    ``drain`` runs on the store's creator thread, and inline in the flush (which must not
    sync or checkpoint past a segment that has no file yet). A failure (a full disk, no
    descriptor left) is kept in ``error`` until a creation succeeds: the store refuses
    puts meanwhile, since what it accepted could not be made durable, and the segment
    stays pending (and readable) to be tried again."""

    def __init__(self, dir_sync: DirSync) -> None:
        self.dir_sync = dir_sync
        self._queue: deque[QueueSegment] = deque()
        self._lock = threading.Lock()  # one drain at a time, so creations keep their order
        self.error: str | None = None
        self.failures = 0
        self.wake: Callable[[], None] = lambda: None

    def submit(self, seg: QueueSegment) -> None:
        self._queue.append(seg)
        self.wake()

    @property
    def backlog(self) -> int:
        return len(self._queue)

    def drain(self) -> int:
        """Create every pending segment submitted so far; return how many were created."""
        created = 0
        with self._lock:
            while self._queue:
                seg = self._queue[0]
                try:
                    done = seg.materialize()
                except OSError as exc:
                    self.failures += 1
                    reason = f"cannot create consume-queue file {seg.path}: {exc}"
                    if self.error is None:
                        log.error("%s; refusing writes until it can", reason)
                    self.error = reason
                    return created
                self._queue.popleft()
                if done:
                    created += 1
                    directory = os.path.dirname(seg.path)
                    if seg.first_create_in_queue:
                        topic_dir = os.path.dirname(directory)
                        self.dir_sync.add(directory, topic_dir, os.path.dirname(topic_dir))
                    else:
                        self.dir_sync.add(directory)
                if self.error is not None:
                    log.warning("consume-queue files can be created again (after %d failures)", self.failures)
                    self.error = None
        return created


class QueueFiles(SegmentRun[QueueSegment]):
    def __init__(self, directory: str, file_size: int, open_files: OpenFiles, creator: SegmentCreator) -> None:
        self.directory = directory
        self.file_size = file_size
        self.open_files = open_files
        self.creator = creator
        self.files: list[QueueSegment] = []  # replaced, never mutated: readers take a snapshot
        self._lock = threading.Lock()

    # -- loading ---------------------------------------------------------------------
    def load(self) -> None:
        """List the segments on disk (none is opened); a wrong size stops start-up."""
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            return
        segments: list[QueueSegment] = []
        for entry in entries:
            name = entry.name
            if name.endswith((".tmp", DELETED_SUFFIX)):
                os.unlink(entry.path)  # a creation or a deletion a crash interrupted
                continue
            start = parse_segment_name(name)
            if start is None:
                continue
            size = entry.stat().st_size
            if size != self.file_size:
                raise StoreError(
                    f"{entry.path} is {size} bytes but the configured segment size "
                    f"is {self.file_size}; fix the config or move the file away"
                )
            seg = QueueSegment(entry.path, self.file_size, self.open_files, start=start)
            seg.wrote = seg.flushed = self.file_size  # recovery moves the last ones back
            segments.append(seg)
        segments.sort(key=lambda s: s.start_offset)
        self.files = segments

    # -- growth ----------------------------------------------------------------------
    def last_for_write(self, start_if_empty: int = 0) -> QueueSegment:
        last = self.last()
        if last is not None and not last.is_full:
            return last
        start = last.end_offset if last is not None else start_if_empty - start_if_empty % self.file_size
        return self._create(start)

    def _create(self, start: int) -> QueueSegment:
        """A new pending segment: readable at once, its file made by the creator."""
        seg = QueueSegment(
            os.path.join(self.directory, segment_name(start)), self.file_size, self.open_files, pending=True
        )
        seg.first_create_in_queue = not self.files
        with self._lock:
            self.files = [*self.files, seg]
        self.creator.submit(seg)
        return seg

    # -- flush -----------------------------------------------------------------------
    def flush(self) -> None:
        for seg in self.files:
            if seg.wrote > seg.flushed:
                seg.flush()

    # -- truncation and deletion -----------------------------------------------------
    def truncate_after(self, offset: int) -> None:
        """Drop every byte at or beyond ``offset``. Readers are safe throughout: they read
        below ``wrote`` only, and a removed segment stays readable until they let go."""
        keep: list[QueueSegment] = []
        removed = False
        for seg in self.files:
            if seg.end_offset <= offset:
                keep.append(seg)
            elif seg.start_offset <= offset and not (offset == seg.start_offset and keep):
                seg.truncate_to(offset - seg.start_offset)
                keep.append(seg)
            else:
                seg.destroy()
                removed = True
        with self._lock:
            self.files = keep
        if removed and os.path.isdir(self.directory):
            fsync_dir(self.directory)

    def delete_first_while(self, condition: Callable[[QueueSegment], bool]) -> list[QueueSegment]:
        """Delete leading segments while ``condition`` holds, never the last one."""
        removed: list[QueueSegment] = []
        for seg in self.files[:-1]:
            if not condition(seg):
                break
            removed.append(seg)
        if removed:
            gone = {id(s) for s in removed}
            with self._lock:
                self.files = [s for s in self.files if id(s) not in gone]
            for seg in removed:
                seg.destroy()
        return removed

    def close(self) -> None:
        for seg in self.files:
            seg.close()


class SegmentCreatorService(ServiceThread):
    """The thread that gives pending consume-queue segments their files."""

    name = "cq-create"

    def __init__(self, creator: SegmentCreator) -> None:
        super().__init__(0.2)  # also the retry interval after a failure
        self.creator = creator
        creator.wake = self.wakeup

    def step(self) -> None:
        self.creator.drain()

    def on_stop(self) -> None:
        self.creator.drain()
