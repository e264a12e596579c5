"""DLedger's on-disk Raft log (openmessaging/dledger 0.2.x layout): the commit log of a
RocketMQ broker with enableDLegerCommitLog=true. Store layer only: no Raft logic, no I/O
beyond files."""

from ledgermq.store.dledger.config import DLedgerStoreConfig
from ledgermq.store.dledger.entry import BODY_OFFSET, HEADER_SIZE, INDEX_UNIT_SIZE
from ledgermq.store.dledger.ledger_store import (
    CorruptEntryError,
    DLedgerStore,
    EntryNotFoundError,
    EntrySpan,
    LogMismatchError,
    StoredEntry,
)
from ledgermq.store.dledger.metadata import LedgerCheckpoint, MetadataError, RepairMarker, TermState
from ledgermq.store.dledger.recovery import CommittedEntryLostError, DLedgerRecoveryError, RecoveryResult

__all__ = [
    "BODY_OFFSET",
    "HEADER_SIZE",
    "INDEX_UNIT_SIZE",
    "CommittedEntryLostError",
    "CorruptEntryError",
    "DLedgerRecoveryError",
    "DLedgerStore",
    "DLedgerStoreConfig",
    "EntryNotFoundError",
    "EntrySpan",
    "LedgerCheckpoint",
    "LogMismatchError",
    "MetadataError",
    "RecoveryResult",
    "RepairMarker",
    "StoredEntry",
    "TermState",
]
