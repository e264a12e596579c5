"""The values that cross the core's boundary: immutable, so a Ready can be handed to another thread."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class EntryKind(Enum):
    NORMAL = "NORMAL"
    NOOP = "NOOP"
    """Appended by a new leader so it can commit earlier terms' entries (Raft §5.4.2, §8)."""


@dataclass(frozen=True, slots=True)
class Entry:
    index: int
    term: int
    data: bytes = b""
    kind: EntryKind = EntryKind.NORMAL


class Role(Enum):
    FOLLOWER = "FOLLOWER"
    PRE_CANDIDATE = "PRE_CANDIDATE"
    CANDIDATE = "CANDIDATE"
    LEADER = "LEADER"


class MsgType(Enum):
    PRE_VOTE = "PreVote"
    PRE_VOTE_RESP = "PreVoteResp"
    VOTE = "Vote"
    VOTE_RESP = "VoteResp"
    APPEND = "Append"
    APPEND_RESP = "AppendResp"
    HEARTBEAT = "Heartbeat"
    HEARTBEAT_RESP = "HeartbeatResp"
    TIMEOUT_NOW = "TimeoutNow"


@dataclass(frozen=True, slots=True)
class Message:
    """One Raft RPC or reply. Fields mean what etcd's raftpb.Message fields mean.

    For Append: ``index``/``log_term`` name the entry just before ``entries``. For
    AppendResp: ``index`` is the follower's matched index, or on reject the probed
    index, with ``reject_hint``/``log_term`` the follower's guess of where the logs
    may agree. For votes: ``index``/``log_term`` describe the candidate's last entry.
    ``transfer`` marks a vote forced by leadership transfer, which voters grant even
    inside a leader lease.
    """

    type: MsgType
    src: str
    dst: str
    term: int
    log_term: int = 0
    index: int = 0
    entries: tuple[Entry, ...] = ()
    commit: int = 0
    reject: bool = False
    reject_hint: int = 0
    transfer: bool = False
    repair_until: int = 0
    """On a follower's answers while it repairs (see ``Repair``): the index its log must
    reach again before the leader may count it toward a commit quorum; 0 otherwise."""


@dataclass(frozen=True, slots=True)
class Repair:
    """A restarted node whose log lost entries (corrupt or missing data, cut by its
    storage's recovery) must not act as if it still held them (Alagappan et al.,
    "Protocol-Aware Recovery for Consensus-Based Storage", FAST'18).

    ``until`` is the last index its log held before the damage (and at least the commit
    index it had recorded): entries it may have acknowledged to a leader. ``last_term`` is
    the term of that last entry (an upper bound is safe, e.g. the hard state's term). Until
    its durable log reaches ``until`` again, the node does not campaign, grants a (pre-)vote
    only to a candidate at least as up to date as ``(last_term, until)`` (as the undamaged log
    would have), and its answers tell the leader not to count it toward a quorum.
    """

    until: int
    last_term: int


@dataclass(frozen=True, slots=True)
class HardState:
    """What must survive a crash besides the log: the term, the vote in it, and a known commit."""

    term: int = 0
    vote: str | None = None
    commit: int = 0


@dataclass(frozen=True, slots=True)
class SoftState:
    """Volatile status for the caller (who leads, which role we play); never persisted."""

    leader: str | None
    role: Role


@dataclass(frozen=True, slots=True)
class Ready:
    """One batch of work for the caller; see docs/raft.md for the order of the steps.

    ``hard_state`` is None when unchanged. ``entries_to_persist`` may start at or below
    the caller's last stored index: the caller drops its stored suffix from
    ``entries_to_persist[0].index`` on before appending. ``must_sync`` says the term or
    vote changed, so the hard state must be durable before any message is sent.
    """

    soft_state: SoftState
    hard_state: HardState | None
    entries_to_persist: tuple[Entry, ...]
    committed_entries: tuple[Entry, ...]
    messages: tuple[Message, ...]
    must_sync: bool
