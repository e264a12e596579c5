"""An ordered run of equal-size segments forming one logical byte space.

Used for the commit log (records) and for each consume queue (20-byte units). Offsets
are absolute: segment ``k`` holds ``[start_k, start_k + size)`` and is named ``start_k``.
The segment list is replaced, never mutated in place, so readers take a snapshot
without a lock.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Generic, TypeVar

from ledgermq.atomic_file import fsync_dir
from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.errors import StoreError, StoreFullError
from ledgermq.failpoints import failpoint
from ledgermq.store.log_start import LogStartRecord
from ledgermq.store.mapped_file import MappedFile, SegmentPositions, parse_segment_name, segment_name

log = logging.getLogger(__name__)


S = TypeVar("S", bound=SegmentPositions)


def find_segment(files: Sequence[S], offset: int, file_size: int) -> S | None:
    """The segment of an ordered run (equal sizes, named by start) holding ``offset``; by
    arithmetic, or by a scan when the names have a gap. Shared with consume queues."""
    if not files or offset < files[0].start_offset:
        return None
    idx = (offset - files[0].start_offset) // file_size
    if idx < len(files) and files[idx].start_offset <= offset < files[idx].end_offset:
        return files[idx]
    for seg in files:  # a gap in the names: fall back to a scan
        if seg.start_offset <= offset < seg.end_offset:
            return seg
    return None


class SegmentRun(Generic[S]):
    """Lookups over an ordered run of equal-size segments (``files``, replaced and never
    mutated, so readers take a snapshot without a lock)."""

    files: list[S]
    file_size: int

    def first(self) -> S | None:
        files = self.files
        return files[0] if files else None

    def last(self) -> S | None:
        files = self.files
        return files[-1] if files else None

    def min_offset(self) -> int:
        files = self.files
        return files[0].start_offset if files else 0

    def max_offset(self) -> int:
        files = self.files
        return files[-1].write_offset if files else 0

    def find(self, offset: int) -> S | None:
        """The segment holding ``offset`` (or None if deleted or not yet written)."""
        return find_segment(self.files, offset, self.file_size)


class MappedFileQueue(SegmentRun[MappedFile]):
    def __init__(
        self, directory: Path, file_size: int, clock: Clock = SYSTEM_CLOCK, start_record: LogStartRecord | None = None
    ) -> None:
        self.directory = directory
        self.file_size = file_size
        self.clock = clock
        # The commit log's durable "where the log begins" (store/log_start.py); None elsewhere.
        self.start_record = start_record
        self.files: list[MappedFile] = []
        self._lock = threading.Lock()

    # -- loading ---------------------------------------------------------------------
    def load(self, on_damage: Callable[[int, int, str], object] | None = None) -> None:
        """Map every segment on disk.

        Without ``on_damage`` a segment of the wrong size stops start-up. With it (the
        commit log), a segment in the middle of the log that is missing or shorter than the
        others is damage, not a reason to drop what follows: it is recreated (or extended)
        at full size, zero-filled, and the bytes it lacks are reported to ``on_damage``
        (start, end, reason) for a replica to repair. A longer file, or every file of
        another size (a changed config), still stops start-up. With a start record, leading
        segments missing below the first file on disk are damage too (store/log_start.py)."""
        recorded = self.start_record.read() if self.start_record is not None else None
        if not self.directory.exists():
            if recorded:
                log.error("%s is gone but the log began at %d: every segment is lost", self.directory, recorded)
            return
        for pattern in ("*.tmp", "*.deleted"):
            for leftover in self.directory.glob(pattern):
                leftover.unlink()  # a creation or a deletion a crash interrupted
        names = sorted(n for n in os.listdir(self.directory) if parse_segment_name(n) is not None)
        if on_damage is not None:
            names = self._restore_missing(names, on_damage, recorded)
        files: list[MappedFile] = []
        expected: int | None = None
        try:
            for name in names:
                path = self.directory / name
                if path.stat().st_size != self.file_size:
                    raise StoreError(
                        f"{path} is {path.stat().st_size} bytes but the configured segment size "
                        f"is {self.file_size}; fix the config or move the file away"
                    )
                mf = MappedFile(path, self.file_size, create=False)
                if expected is not None and mf.start_offset != expected:
                    log.warning("%s: gap before segment %s", self.directory, name)
                mf.wrote = mf.flushed = self.file_size  # recovery moves the last ones back
                files.append(mf)
                expected = mf.end_offset
        except BaseException:
            for mf in files:
                mf.close()
            raise
        self.files = files
        if self.start_record is not None and files and recorded is None:
            self.start_record.write(files[0].start_offset)  # a store from before the record

    def _restore_missing(
        self, names: list[str], on_damage: Callable[[int, int, str], object], recorded: int | None = None
    ) -> list[str]:
        """Recreate missing segments between the log's start (the first file, or the
        recorded start when it lies below it) and the last, extend short ones before the
        last (a short last segment may be another config's: load refuses it)."""
        if not names:
            if recorded is not None and recorded > 0:
                log.error(
                    "commit log %s has no segment but began at %d: every segment is lost", self.directory, recorded
                )
            return names
        sizes = {n: (self.directory / n).stat().st_size for n in names}
        if all(size != self.file_size for size in sizes.values()):
            return names  # nothing has the configured size: a config mismatch, reported by load
        first, last = parse_segment_name(names[0]), parse_segment_name(names[-1])
        assert first is not None and last is not None
        if first % self.file_size or last % self.file_size:
            return names  # names off the segment grid: let load report the sizes
        if recorded is not None and recorded < first and recorded % self.file_size == 0:
            first = recorded  # leading segments lost, not deleted by retention
        present = set(names)
        restored: list[str] = []
        for start in range(first, last + self.file_size, self.file_size):
            name = segment_name(start)
            path = self.directory / name
            if name not in present:
                with open(path, "wb") as fh:
                    fh.truncate(self.file_size)
                log.error("commit-log segment %s is missing; recreated empty, its bytes await repair", name)
                on_damage(start, start + self.file_size, f"segment {name} was missing")
            elif sizes[name] < self.file_size and start != last:  # a short last one: load says so
                have = sizes[name]
                os.truncate(path, self.file_size)
                log.error("commit-log segment %s is %d of %d bytes; extended, the rest awaits repair",
                          name, have, self.file_size)  # fmt: skip
                on_damage(start + have, start + self.file_size, f"segment {name} was cut to {have} bytes")
            restored.append(name)
        fsync_dir(self.directory)
        return restored

    # -- lookups ---------------------------------------------------------------------
    @property
    def empty(self) -> bool:
        return not self.files

    def flushed_offset(self) -> int:
        files = self.files
        for mf in reversed(files):
            if mf.flushed > 0:
                return mf.start_offset + mf.flushed
        return files[0].start_offset if files else 0

    # -- growth ----------------------------------------------------------------------
    def last_for_write(self, start_if_empty: int = 0) -> MappedFile:
        """The segment to append to, creating the next one when the last is full."""
        last = self.last()
        if last is not None and not last.is_full:
            return last
        start = last.end_offset if last is not None else start_if_empty - start_if_empty % self.file_size
        return self._create(start)

    def _create(self, start: int) -> MappedFile:
        self.directory.mkdir(parents=True, exist_ok=True)
        if not self.files and self.start_record is not None:
            self.start_record.write(start)  # before the file: a lost file is then never mistaken
        try:
            failpoint("mapped_file_queue.before_create")  # inside: an injected ENOSPC is what a real one is
            mf = MappedFile(self.directory / segment_name(start), self.file_size, create=True)
        except OSError as exc:
            raise StoreFullError(f"cannot create segment {start} in {self.directory}: {exc}") from exc
        if not self.files:
            mf.first_create_in_queue = True
        with self._lock:
            self.files = [*self.files, mf]
        fsync_dir(self.directory)
        return mf

    # -- flush -----------------------------------------------------------------------
    def flush(self) -> int:
        """Flush every segment with unflushed bytes; return the flushed offset."""
        for mf in self.files:
            if mf.wrote > mf.flushed:
                mf.flush()
        return self.flushed_offset()

    # -- truncation and deletion -----------------------------------------------------
    def truncate_after(self, offset: int, *, online: bool = False) -> None:
        """Drop every byte at or beyond ``offset`` (recovery, or online for slave realignment).

        Online, segments past the cut that a reader still holds are set aside and removed
        when the reader lets go (or after a minute); offline nobody else holds them.
        """
        keep: list[MappedFile] = []
        for mf in self.files:
            if mf.end_offset <= offset:
                keep.append(mf)
            elif mf.start_offset <= offset and not (offset == mf.start_offset and keep):
                mf.truncate_to(offset - mf.start_offset, online=online)
                keep.append(mf)
            else:
                mf.destroy(self.clock.monotonic(), 60.0 if online else 0.0)
        with self._lock:
            self.files = keep
        if self.directory.exists():
            fsync_dir(self.directory)

    def delete_first_while(
        self, condition: Callable[[MappedFile], bool], max_files: int, force_after_s: float, *, keep_last: bool = True
    ) -> list[MappedFile]:
        """Delete leading segments while ``condition`` holds; never the active last one unless
        ``keep_last`` is False (a sealed log nothing is appended to any more)."""
        removed: list[MappedFile] = []
        for mf in self.files[:-1] if keep_last else list(self.files):
            if len(removed) >= max_files or not condition(mf):
                break
            if self.start_record is not None:
                self.start_record.write(mf.end_offset)  # before the file goes (store/log_start.py)
            if not mf.destroy(self.clock.monotonic(), force_after_s):
                break  # still pinned by a reader; try again next round
            removed.append(mf)
        if removed:
            gone = {id(m) for m in removed}
            with self._lock:
                self.files = [m for m in self.files if id(m) not in gone]
        return removed

    def detach_first_while(self, condition: Callable[[MappedFile], bool]) -> list[MappedFile]:
        """Take leading segments (never the last) out of the list while ``condition`` holds,
        without deleting them: the caller destroys them, outside its own locks (unlinking a
        big file takes a while). Readers holding one keep it until they let go."""
        with self._lock:
            files = self.files
            n = 0
            while n < len(files) - 1 and condition(files[n]):
                n += 1
            if n:
                self.files = files[n:]
            return files[:n]

    def close(self) -> None:
        for mf in self.files:
            mf.close()
