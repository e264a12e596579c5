"""One process per store directory, and a marker that tells a crash from a clean stop.

``<root>/lock`` is held with ``flock`` for the store's lifetime: a second opener (another
process, or a second store object in this one) gets StoreLockedError at once. ``<root>/abort``
exists while the store is open; finding it at start-up means the last run did not shut
down cleanly and recovery must be the thorough kind.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ledgermq.atomic_file import fsync_dir
from ledgermq.errors import StoreLockedError


class StoreLock:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.lock_path = root / "lock"
        self.abort_path = root / "abort"
        self._fd: int | None = None

    def acquire(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # A Java broker locks byte 0 with FileChannel.tryLock (a POSIX record lock,
            # independent of flock): take that too so neither can open the other's store.
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        except (BlockingIOError, PermissionError):
            os.close(fd)
            raise StoreLockedError(
                f"store directory {self.root} is in use by another process (could not lock {self.lock_path})"
            ) from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    @property
    def last_exit_ok(self) -> bool:
        return not self.abort_path.exists()

    def mark_running(self) -> None:
        self.abort_path.touch()
        fsync_dir(self.root)

    def mark_clean_exit(self) -> None:
        self.abort_path.unlink(missing_ok=True)
        fsync_dir(self.root)
