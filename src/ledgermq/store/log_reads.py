"""What the shared parts of the store read of a commit log, in either mode.

The native ``CommitLog`` and DLedger mode's ``DLedgerCommitLog`` are separate classes (the
second keeps its messages in the Raft log and has no native writes); the read side, the
reput's progress checks and the shared facade see both through this protocol. Offsets
are physical offsets (in DLedger mode: data positions of entry bodies).
"""

from __future__ import annotations

from typing import Protocol

from ledgermq.store.mapped_file import MappedFile


class LogReads(Protocol):
    """The read side of a commit log: lock-free, from any thread, below ``max_offset``."""

    @property
    def min_offset(self) -> int: ...

    @property
    def max_offset(self) -> int: ...

    @property
    def flushed_offset(self) -> int: ...

    def read(self, offset: int, size: int) -> bytes | None: ...

    def read_from(self, offset: int, max_bytes: int) -> bytes: ...

    def record_at(self, offset: int) -> bytes | None: ...

    def properties_at(self, offset: int, size: int) -> str | None: ...

    def unreadable_reason(self, offset: int, size: int) -> str | None:
        """Why a record a consume-queue unit points at cannot be read *now* (a reader asks
        again at the same offset), or None when it is gone for good (retention)."""
        ...

    def store_timestamp_at(self, offset: int, size: int) -> int: ...

    def segment_files(self) -> list[MappedFile]: ...

    def close(self) -> None: ...
