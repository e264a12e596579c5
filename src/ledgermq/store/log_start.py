"""Where the commit log begins, kept durably beside it.

The first segment on disk is not evidence of where the log starts: retention deletes
leading segments on purpose, and a disk or an operator can delete one by mistake, and the
two leave the same directory listing behind. Without a record, a lost first segment makes
the broker quietly start its log one segment later, so the messages in it are gone without
a word and no replica is ever asked for them (the 100-cycle segment-loss run found this).

The record is written *before* the state it describes: before the first segment of an empty
log is created (so a recorded start below the first file means a file was lost, never that
its creation was interrupted), and before retention deletes a leading segment (so a crash
between the two leaves a record at or past the first file, read as "retention had begun",
never as damage). Kafka keeps the same fact in its log-start-offset checkpoint.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ledgermq.atomic_file import write_atomic

log = logging.getLogger(__name__)

FILE_NAME = "commitlog.start"


class LogStartRecord:
    """The offset of the commit log's first byte that retention has not deleted."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._written: int | None = None

    def read(self) -> int | None:
        """The recorded start, or None for a store that predates the record (or a file that
        cannot be read: then nothing is assumed lost, as before the record existed)."""
        try:
            text = self.path.read_text().strip()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.error("cannot read %s (%s); the commit log's first segment is not checked", self.path, exc)
            return None
        if not text.isdigit():
            log.error("%s holds %r, not an offset; the commit log's first segment is not checked", self.path, text)
            return None
        self._written = int(text)
        return self._written

    def write(self, offset: int) -> None:
        if offset == self._written:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, f"{offset}\n".encode())
        self._written = offset
