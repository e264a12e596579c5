"""A bounded set of open file descriptors, shared by every consume-queue segment.

A store can hold a hundred thousand consume queues; one open descriptor (or mapping)
per queue file runs into the process's open-file limit long before that, and what
fails then is dispatch: messages already answered SEND_OK could not be made readable.
So consume-queue segments keep no descriptor of their own. They borrow one from this
cache for each read, write or fsync (``acquire``/``release``), and the least recently
used descriptors are closed when more than ``capacity`` are open. A descriptor in use
(borrowed and not yet given back) is never closed under its user, so a reader on one
thread can never pread through a number that another thread closed and the kernel gave
to a different file; if every open descriptor is in use the cache goes over capacity for
that moment instead of waiting.

Opening costs a few microseconds, which is why consume queues use pread/pwrite rather
than mmap here: a miss costs ``open`` + ``close`` (~6 µs measured) instead of also a
mapping and its page faults (~17 µs).
"""

from __future__ import annotations

import logging
import os
import resource
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)

# Descriptors the rest of the process may need besides consume queues: sockets, commit-log
# and index segments, metadata files, the interpreter's own.
RESERVED_FDS = 256
MIN_CAPACITY = 8


class Borrower(Protocol):
    """What the cache needs from a file that borrows descriptors."""

    path: str
    fd: int  # -1 while closed
    borrowed: int  # descriptors lent and not yet given back (0 or more users)
    retired: bool  # closed or deleted: its descriptor goes as soon as nobody holds it


@dataclass(frozen=True, slots=True)
class FileLimit:
    """The process's open-file limit after ``raise_open_file_limit``."""

    soft: int
    hard: int
    raised_from: int | None  # the soft limit before, if it was raised


def raise_open_file_limit() -> FileLimit:
    """Raise the soft open-file limit to the hard one, as far as the OS lets us.

    Many systems start processes with a soft limit of 1,024 and a hard limit far above;
    a broker should not need its operator to know that."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return FileLimit(target, hard, soft)
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, target, exc)
    return FileLimit(soft, hard, None)


def capacity_for(limit: FileLimit, configured: int) -> int:
    """How many consume-queue descriptors to keep open under ``limit``: the configured
    number, or a quarter of what is left after ``RESERVED_FDS`` if that is less."""
    room = max(MIN_CAPACITY, (limit.soft - RESERVED_FDS) // 4)
    return max(MIN_CAPACITY, min(configured, room))


class OpenFiles:
    """The LRU of descriptors. Thread-safe: the reput, flush, cleaning threads and the
    event loop all read or write consume queues."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._open: OrderedDict[int, Borrower] = OrderedDict()  # id(file) -> file, LRU first
        self._lock = threading.Lock()
        self.opens = 0  # descriptors opened so far (misses)
        self.closes = 0

    @property
    def open_count(self) -> int:
        return len(self._open)

    def acquire(self, f: Borrower) -> int:
        """A descriptor for ``f``, open read-write, lent until ``release(f)``."""
        with self._lock:
            if f.retired:
                raise FileNotFoundError(f"{f.path} was closed or deleted")
            f.borrowed += 1
            if f.fd >= 0:
                self._open.move_to_end(id(f))
                return f.fd
            try:
                f.fd = os.open(f.path, os.O_RDWR)
            except BaseException:
                f.borrowed -= 1
                raise
            self.opens += 1
            self._open[id(f)] = f
            if len(self._open) > self.capacity:
                self._evict()
            return f.fd

    def adopt(self, f: Borrower, fd: int) -> None:
        """Take over ``fd``, just opened for ``f`` (a file that was created with it)."""
        with self._lock:
            if f.fd >= 0 or f.retired:
                os.close(fd)
                return
            f.fd = fd
            self.opens += 1
            self._open[id(f)] = f
            if len(self._open) > self.capacity:
                self._evict()

    def release(self, f: Borrower) -> None:
        with self._lock:
            f.borrowed -= 1
            if f.retired and f.borrowed <= 0 and f.fd >= 0:
                self._close(f)

    def forget(self, f: Borrower) -> None:
        """Close ``f``'s descriptor for good (the file is being deleted or closed): now if
        nobody holds it, otherwise when the last user gives it back."""
        with self._lock:
            f.retired = True
            if f.fd >= 0 and f.borrowed <= 0:
                self._close(f)

    def _evict(self) -> None:
        excess = len(self._open) - self.capacity
        victims = []
        for f in self._open.values():  # least recently used first
            if excess <= 0:
                break
            if f.borrowed <= 0:
                victims.append(f)
                excess -= 1
        for f in victims:
            self._close(f)

    def _close(self, f: Borrower) -> None:
        self._open.pop(id(f), None)
        fd, f.fd = f.fd, -1
        self.closes += 1
        try:
            os.close(fd)
        except OSError as exc:
            log.warning("closing %s: %s", f.path, exc)

    def close_all(self) -> None:
        with self._lock:
            for f in list(self._open.values()):
                self._close(f)
