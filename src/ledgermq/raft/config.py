"""Tunables of one Raft node, validated up front so a bad value fails at construction, not mid-election."""

from __future__ import annotations

from dataclasses import dataclass

from ledgermq.errors import ConfigError


@dataclass(frozen=True, slots=True)
class RaftConfig:
    node_id: str
    """DLedger-style peer id, e.g. ``"n0"``."""
    election_timeout_ticks: int = 10
    """Base election timeout T; each node waits a random number of ticks in [T, 2T) (Raft §5.2)."""
    heartbeat_ticks: int = 1
    pre_vote: bool = True
    """Ask for votes without bumping the term first (thesis §9.6), so a rejoining node cannot depose a leader."""
    check_quorum: bool = True
    """A leader that has not heard from a majority for T ticks steps down, and followers honour its lease."""
    max_inflight: int = 256
    max_entries_per_append: int = 64
    max_bytes_per_append: int = 1 << 20
    max_apply_bytes_per_ready: int = 64 << 20
    """Caps ``Ready.committed_entries`` (at least one entry), so a restart over a long
    unapplied log reads it from storage in slices instead of all at once."""
    append_noop_on_election: bool = True
    """A new leader appends an empty entry so earlier terms' entries can commit (Raft §5.4.2, §8)."""
    eager_commit_notice: bool = True
    """When the commit index moves and a follower has no new entries to be sent, tell it at
    once with an empty Append (etcd's way). False: it learns the new commit index from the
    next Append that carries entries, or from the next heartbeat (DLedger's way: a commit
    alone is pushed at most once a second there). An empty Append costs a message each way
    per follower per commit, the price of a whole Raft round when clients send one message
    at a time; followers only apply later (commitment, and so acknowledgements, are the
    leader's alone and do not change)."""
    seed: int = 0
    """Seeds the election-timeout jitter when no ``random.Random`` is injected."""

    def __post_init__(self) -> None:
        if not self.node_id:
            raise ConfigError("node_id must be non-empty")
        if self.heartbeat_ticks < 1:
            raise ConfigError("heartbeat_ticks must be at least 1")
        if self.election_timeout_ticks <= self.heartbeat_ticks:
            raise ConfigError("election_timeout_ticks must exceed heartbeat_ticks")
        if self.max_inflight < 1:
            raise ConfigError("max_inflight must be at least 1")
        if min(self.max_entries_per_append, self.max_bytes_per_append, self.max_apply_bytes_per_ready) < 1:
            raise ConfigError(
                "max_entries_per_append, max_bytes_per_append and max_apply_bytes_per_ready must be positive"
            )
