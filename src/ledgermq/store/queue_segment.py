"""One consume-queue segment: a fixed-size file of 20-byte units, read and written with
pread/pwrite through a descriptor borrowed from the store's ``OpenFiles``.

Unlike commit-log segments these are not mapped: a store may have a hundred thousand
of them, and each mapping would hold a descriptor for as long as it exists. Deleting a
segment under a reader is safe (the reader's borrowed descriptor keeps the inode alive
until it gives it back), so there is no reader pinning here; a read after deletion raises
``SegmentGoneError``.

A new segment starts *pending*: its units live in memory, readable at once, until a
background thread (``SegmentCreator``) makes its directory and file and writes them out.
Creating a directory and a file costs 50-250 µs on a journaling file system, and doing it
inside the dispatch step made every message behind a new queue wait for it. A pending
segment is never durable: the consume-queue flush materializes every pending segment
before it syncs and before the checkpoint may name anything in them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading

from ledgermq.errors import StoreFullError
from ledgermq.failpoints import failpoint, synced
from ledgermq.store.mapped_file import SegmentGoneError, SegmentPositions, parse_segment_name
from ledgermq.store.open_files import OpenFiles

_PAGE = 4096


class QueueSegment(SegmentPositions):
    """Positions as in ``MappedFile``: ``wrote`` (appended), ``flushed`` (durable)."""

    __slots__ = ("borrowed", "fd", "files", "first_create_in_queue", "flushed", "lock", "path", "pending",
                 "retired", "size", "start_offset", "wrote")  # fmt: skip

    def __init__(
        self, path: str, size: int, files: OpenFiles, *, pending: bool = False, start: int | None = None
    ) -> None:
        if start is None:
            start = parse_segment_name(os.path.basename(path))
        if start is None:
            raise ValueError(f"{path} is not a 20-digit segment name")
        self.path = path
        self.size = size
        self.start_offset = start
        self.files = files
        self.fd = -1
        self.borrowed = 0
        self.retired = False
        self.wrote = 0
        self.flushed = 0
        self.first_create_in_queue = False
        # Units not yet in a file (a new segment), or None once the file exists. Guarded
        # by ``lock`` only while not None: the hot path reads it without the lock and
        # re-checks under it.
        self.pending: bytearray | None = bytearray() if pending else None
        self.lock = threading.Lock()

    @classmethod
    def create(cls, path: str, size: int, files: OpenFiles) -> QueueSegment:
        """Create the segment's file now (tests, and tools that need it on disk)."""
        seg = cls(path, size, files, pending=True)
        seg.materialize()
        return seg

    # -- creation --------------------------------------------------------------------
    def materialize(self) -> bool:
        """Make the directory and the file and write the pending units; True if it did.

        The file is created at its full (sparse) size under a temporary name and renamed,
        so a crash never leaves a short one. Its directory entry is not made durable here:
        the flush does that (``DirSync``), before the checkpoint names anything in it."""
        with self.lock:
            data = self.pending
            if data is None or self.retired:
                return False
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            tmp = self.path + ".tmp"
            failpoint("consume_queue.before_create")
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.ftruncate(fd, self.size)
                view = memoryview(data)
                at = 0
                while at < len(view):
                    at += os.pwrite(fd, view[at:], at)
                os.rename(tmp, self.path)
            except BaseException:
                os.close(fd)
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            self.pending = None
        self.files.adopt(self, fd)
        return True

    # -- writes ----------------------------------------------------------------------
    def append(self, data: bytes) -> int:
        at = self.wrote
        if at + len(data) > self.size:
            raise ValueError(f"{self.path}: {len(data)} bytes do not fit at {at}")
        if self.pending is not None:
            with self.lock:
                pending = self.pending
                if pending is not None:
                    pending[at:] = data
                    self.wrote = at + len(data)
                    return at
        self._pwrite(data, at)
        self.wrote = at + len(data)
        return at

    def write_at(self, at: int, data: bytes) -> None:
        """Overwrite bytes below ``wrote`` (a unit rewritten in place); the next flush
        makes them durable."""
        if at + len(data) > self.wrote:
            raise ValueError(f"{self.path}: rewrite at {at} past what was written ({self.wrote})")
        if self.pending is not None:
            with self.lock:
                pending = self.pending
                if pending is not None:
                    pending[at : at + len(data)] = data
                    return
        self._pwrite(data, at)
        self.flushed = min(self.flushed, at)

    def _pwrite(self, data: bytes, at: int) -> None:
        fd = self.files.acquire(self)
        try:
            n = os.pwrite(fd, data, at)
            if n < len(data):  # short write: go on from where it stopped
                view = memoryview(data)[n:]
                at += n
                while view:
                    n = os.pwrite(fd, view, at)
                    view = view[n:]
                    at += n
        finally:
            self.files.release(self)

    def flush(self) -> int:
        """Make every appended unit durable (creating the file first if still pending)."""
        wrote = self.wrote
        if wrote > self.flushed and not self.retired:
            if self.pending is not None:
                try:
                    self.materialize()
                except OSError as exc:
                    raise StoreFullError(f"cannot create consume-queue segment {self.path}: {exc}") from exc
            fd = self.files.acquire(self)
            try:
                failpoint("consume_queue.before_fsync")
                os.fdatasync(fd)
                synced(self.path, wrote)
            finally:
                self.files.release(self)
            self.flushed = wrote
        return self.flushed

    def truncate_to(self, pos: int) -> None:
        """Forget everything from ``pos`` on; shrinking and growing back zeroes the tail
        (no mapping exists that a shrink could turn into SIGBUS)."""
        if self.pending is not None:
            with self.lock:
                if self.pending is not None:
                    del self.pending[pos:]
                    self.wrote = min(self.wrote, pos)
                    return
        fd = self.files.acquire(self)
        try:
            if not self._zeros_after(fd, pos):
                os.ftruncate(fd, pos)
                os.ftruncate(fd, self.size)
        finally:
            self.files.release(self)
        self.wrote = min(self.wrote, pos)
        self.flushed = min(self.flushed, pos)

    def _zeros_after(self, fd: int, pos: int) -> bool:
        """Whether nothing but zeros follows ``pos`` (the common case at recovery, where
        the two truncations would cost more than the whole rest of it): the rest of the
        page at ``pos`` is read, and the file system says whether data follows that page."""
        page_end = min(self.size, -(-pos // _PAGE) * _PAGE)
        if page_end > pos and os.pread(fd, page_end - pos, pos) != bytes(page_end - pos):
            return False
        if page_end >= self.size:
            return True
        try:
            os.lseek(fd, page_end, os.SEEK_DATA)
        except OSError as exc:
            # ENXIO: only a hole follows. Anything else: the file system cannot tell, so
            # the caller truncates to be sure.
            return exc.errno == errno.ENXIO
        return False

    # -- reads -----------------------------------------------------------------------
    def read(self, pos: int, size: int) -> bytes:
        if self.pending is not None:
            with self.lock:
                pending = self.pending
                if pending is not None:
                    if self.retired:
                        raise SegmentGoneError(f"{self.path} was removed")
                    got = bytes(pending[pos : pos + size])
                    return got + bytes(min(size, self.size - pos) - len(got))  # the file's zeros
        try:
            fd = self.files.acquire(self)
        except FileNotFoundError as exc:
            raise SegmentGoneError(f"{self.path} was removed") from exc
        try:
            return os.pread(fd, size, pos)
        finally:
            self.files.release(self)

    def head(self, n: int) -> tuple[bytes, bool]:
        """The first ``n`` bytes, and whether only a hole follows them (recovery's fast
        path). The descriptor is opened for this alone, unless one is open already:
        start-up reads every queue once, and cycling each through the LRU would only
        cost an eviction per queue."""
        own = self.fd < 0
        fd = os.open(self.path, os.O_RDONLY) if own else self.files.acquire(self)
        try:
            data = os.pread(fd, n, 0)
            if n >= self.size:
                return data, True
            try:
                os.lseek(fd, n, os.SEEK_DATA)
            except OSError as exc:
                return data, exc.errno == errno.ENXIO
            return data, False
        finally:
            if own:
                os.close(fd)
            else:
                self.files.release(self)

    # -- lifetime --------------------------------------------------------------------
    def destroy(self) -> None:
        with self.lock:
            self.retired = True
            was_pending = self.pending is not None
        self.files.forget(self)
        if not was_pending:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)

    def close(self) -> None:
        self.files.forget(self)

    def __repr__(self) -> str:
        state = ", pending" if self.pending is not None else ""
        return f"QueueSegment({os.path.basename(self.path)}, wrote={self.wrote}, flushed={self.flushed}{state})"
