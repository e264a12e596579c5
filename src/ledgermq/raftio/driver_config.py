"""A Raft driver's settings and reports: ``RaftDriverConfig`` (one DLedger-mode node, checked
when made, and the core's ``RaftConfig`` from it), ``RaftStatus`` (what ``status()``
says), and where a node's election jitter comes from (seeded in tests, so a run repeats;
from the OS otherwise, so peers never share a schedule). The driver itself is
``raftio/driver.py``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ledgermq.errors import ConfigError
from ledgermq.raft import RaftConfig
from ledgermq.raft.types import Role
from ledgermq.raftio.transport import parse_peers

__all__ = ["RaftDriverConfig", "RaftStatus", "election_jitter_rng", "seed_election_jitter"]

_jitter_base_seed: int | None = None


def seed_election_jitter(base: int | None) -> None:
    """Make drivers started later in this process draw election jitter from a generator
    seeded by ``base`` and the node's id (tests set this so a run repeats); ``None`` goes
    back to drawing seeds from the OS. A ``RaftDriverConfig.seed`` still wins."""
    global _jitter_base_seed
    _jitter_base_seed = base


def election_jitter_rng(seed: int | None, self_id: str) -> random.Random:
    """The generator a node's election timeouts come from: ``seed`` when configured, else
    one derived from the process-wide base seed and ``self_id`` (so peers still differ),
    else the OS's randomness, so peers never share a schedule."""
    if seed is not None:
        return random.Random(seed)
    if _jitter_base_seed is not None:
        return random.Random(f"{_jitter_base_seed}:{self_id}")
    return random.Random()


@dataclass(frozen=True, slots=True)
class RaftDriverConfig:
    """One DLedger-mode node: who it is, its group (``dLegerPeers``) and the Raft timing.

    Wall-clock election timeout = ``tick_interval_ms * election_timeout_ticks`` (randomised
    by the core to [1x, 2x)); heartbeats go every ``heartbeat_ticks`` ticks.
    """

    self_id: str
    peers: str
    """DLedger's form: ``n0-127.0.0.1:40911;n1-127.0.0.1:40912;n2-127.0.0.1:40913``."""
    tick_interval_ms: int = 100
    election_timeout_ticks: int = 10
    heartbeat_ticks: int = 1
    pre_vote: bool = True
    check_quorum: bool = True
    max_inflight: int = 256
    max_entries_per_append: int = 64
    max_bytes_per_append: int = 1 << 20
    append_noop_on_election: bool = True
    eager_commit_notice: bool = True
    """See ``RaftConfig.eager_commit_notice``; a broker's DLedger group turns it off."""
    commit_checkpoint_interval_ms: int = 1000
    """How often a moved commit index is written to DLedger's ``checkpoint`` (it is lazy state)."""
    seed: int | None = None
    """Election jitter seed; None draws one from the OS so peers never share a schedule."""

    def __post_init__(self) -> None:
        peers = parse_peers(self.peers)
        if self.self_id not in peers:
            raise ConfigError(f"dLegerSelfId {self.self_id!r} is not in dLegerPeers ({', '.join(peers)})")
        if self.tick_interval_ms < 1:
            raise ConfigError("tick_interval_ms must be at least 1")
        if self.commit_checkpoint_interval_ms < 0:
            raise ConfigError("commit_checkpoint_interval_ms must be >= 0")
        self.raft_config()  # the core validates its own tunables

    @property
    def peer_addresses(self) -> dict[str, str]:
        return parse_peers(self.peers)

    def raft_config(self) -> RaftConfig:
        return RaftConfig(
            self.self_id,
            election_timeout_ticks=self.election_timeout_ticks,
            heartbeat_ticks=self.heartbeat_ticks,
            pre_vote=self.pre_vote,
            check_quorum=self.check_quorum,
            max_inflight=self.max_inflight,
            max_entries_per_append=self.max_entries_per_append,
            max_bytes_per_append=self.max_bytes_per_append,
            append_noop_on_election=self.append_noop_on_election,
            eager_commit_notice=self.eager_commit_notice,
            seed=self.seed or 0,
        )


@dataclass(frozen=True, slots=True)
class RaftStatus:
    id: str
    role: Role
    term: int
    leader: str | None
    commit: int
    applied: int
    last_index: int
    persisted_index: int
    match: dict[str, int] = field(default_factory=dict)
    """The leader's view of each peer's matched index (itself included); empty elsewhere."""
    failed: str | None = None
    repair_until: int = 0
    """While the log is repaired after damage: the index it must reach again; 0 otherwise."""
