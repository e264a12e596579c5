"""One consume-queue segment: a fixed-size file of 20-byte units, read and written with
pread/pwrite through a descriptor borrowed from the store's ``OpenFiles``.

Unlike commit-log segments these are not mapped: a store may have a hundred thousand
of them, and each mapping would hold a descriptor for as long as it exists. Deleting a
segment under a reader is safe (the reader's borrowed descriptor keeps the inode alive
until it gives it back), so there is no reader pinning here; a read after deletion raises
``SegmentGoneError``.
"""

from __future__ import annotations

import contextlib
import os

from ledgermq.errors import StoreFullError
from ledgermq.failpoints import failpoint
from ledgermq.store.mapped_file import SegmentGoneError, parse_segment_name
from ledgermq.store.open_files import OpenFiles


class QueueSegment:
    """Positions as in ``MappedFile``: ``wrote`` (appended), ``flushed`` (durable)."""

    __slots__ = ("borrowed", "fd", "files", "first_create_in_queue", "flushed", "path", "retired", "size",
                 "start_offset", "wrote")  # fmt: skip

    def __init__(self, path: str, size: int, files: OpenFiles) -> None:
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

    @classmethod
    def create(cls, path: str, size: int, files: OpenFiles) -> QueueSegment:
        """Create the file at its full (sparse) size; a crash never leaves a short one.

        The directory entry is not made durable here: that costs a directory fsync,
        ~10 ms on a real disk, inside the step that makes messages readable. The
        consume-queue flush does it, before the checkpoint may name anything in the file.
        """
        seg = cls(path, size, files)
        tmp = path + ".tmp"
        try:
            failpoint("consume_queue.before_create")
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            raise StoreFullError(f"cannot create consume-queue segment {path}: {exc}") from exc
        try:
            os.ftruncate(fd, size)
            os.rename(tmp, path)
        except OSError as exc:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise StoreFullError(f"cannot create consume-queue segment {path}: {exc}") from exc
        files.adopt(seg, fd)
        return seg

    @property
    def end_offset(self) -> int:
        return self.start_offset + self.size

    @property
    def write_offset(self) -> int:
        return self.start_offset + self.wrote

    @property
    def is_full(self) -> bool:
        return self.wrote >= self.size

    # -- writes ----------------------------------------------------------------------
    def append(self, data: bytes) -> int:
        at = self.wrote
        if at + len(data) > self.size:
            raise ValueError(f"{self.path}: {len(data)} bytes do not fit at {at}")
        self._pwrite(data, at)
        self.wrote = at + len(data)
        return at

    def _pwrite(self, data: bytes, at: int) -> None:
        fd = self.files.acquire(self)
        try:
            view = memoryview(data)
            while view:
                n = os.pwrite(fd, view, at)
                view = view[n:]
                at += n
        finally:
            self.files.release(self)

    def flush(self) -> int:
        wrote = self.wrote
        if wrote > self.flushed and not self.retired:
            fd = self.files.acquire(self)
            try:
                failpoint("consume_queue.before_fsync")
                os.fdatasync(fd)
            finally:
                self.files.release(self)
            self.flushed = wrote
        return self.flushed

    def truncate_to(self, pos: int) -> None:
        """Forget everything from ``pos`` on; shrinking and growing back zeroes the tail
        (no mapping exists that a shrink could turn into SIGBUS)."""
        fd = self.files.acquire(self)
        try:
            os.ftruncate(fd, pos)
            os.ftruncate(fd, self.size)
        finally:
            self.files.release(self)
        self.wrote = min(self.wrote, pos)
        self.flushed = min(self.flushed, pos)

    # -- reads -----------------------------------------------------------------------
    def read(self, pos: int, size: int) -> bytes:
        try:
            fd = self.files.acquire(self)
        except FileNotFoundError as exc:
            raise SegmentGoneError(f"{self.path} was removed") from exc
        try:
            return os.pread(fd, size, pos)
        finally:
            self.files.release(self)

    # -- lifetime --------------------------------------------------------------------
    def destroy(self) -> None:
        self.files.forget(self)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def close(self) -> None:
        self.files.forget(self)

    def __repr__(self) -> str:
        return f"QueueSegment({os.path.basename(self.path)}, wrote={self.wrote}, flushed={self.flushed})"
