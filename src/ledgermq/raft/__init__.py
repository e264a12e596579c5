"""A pure Raft consensus core: the caller owns the disk, the network and the clock.

See ``docs/raft.md`` for the caller's loop. Durable entries are read through the
caller's ``LogStorage``; only the unacknowledged tail lives in memory. Nothing here
performs I/O, reads time or draws unseeded randomness, so a run is a function of its
inputs and a seed.
"""

from __future__ import annotations

from ledgermq.raft.core import RaftConfig, RaftNode
from ledgermq.raft.errors import LeaderTransferInProgressError, NotLeaderError, ProposalDroppedError
from ledgermq.raft.storage import LogStorage, MemoryStorage
from ledgermq.raft.types import Entry, EntryKind, HardState, Message, MsgType, Ready, Repair, Role, SoftState

__all__ = [
    "Entry",
    "EntryKind",
    "HardState",
    "LeaderTransferInProgressError",
    "LogStorage",
    "MemoryStorage",
    "Message",
    "MsgType",
    "NotLeaderError",
    "ProposalDroppedError",
    "RaftConfig",
    "RaftNode",
    "Ready",
    "Repair",
    "Role",
    "SoftState",
]
