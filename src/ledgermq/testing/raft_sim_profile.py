"""The knobs of one simulated run, drawn per seed, and what the run measured."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SimConfig:
    nodes: int = 3
    chaos_ticks: int = 200
    heal_ticks: int = 300
    """Budget for the cluster to commit a fresh proposal once faults stop."""
    election_timeout: int = 10
    heartbeat: int = 2
    rounds_per_tick: int = 3
    max_delay_rounds: int = 4
    loss: float = 0.05
    duplicate: float = 0.03
    fault_rate: float = 0.04
    """Chance per tick of a fault event: crash, restart, partition, one-way cut, disk stall or heal."""
    propose_rate: float = 0.5
    transfer_rate: float = 0.01
    max_disk_delay_rounds: int = 3
    pre_vote: bool = True
    check_quorum: bool = True
    max_inflight: int = 4
    max_entries_per_append: int = 3
    append_noop: bool = True
    eager_commit_notice: bool = True
    """RaftConfig.eager_commit_notice; False as a broker's DLedger group runs (tests set it)."""
    corrupt_rate: float = 0.0
    """Chance per tick that one node's disk rots: the node is crashed, its log cut at a random
    entry (recovery truncating at the first bad one) and restarted repairing. At most one node
    is damaged and unrepaired at a time (the fault model: a minority). 0 draws nothing, so the
    other faults of a seed stay as they were."""
    acks_at_persist: bool = False
    """Take a follower's acks with ``take_persisted_acks`` right after each ``persisted`` (even
    while a Ready is being carried out), as the broker's driver does when it writes entries on
    its loop, instead of waiting for them in the next Ready."""
    repair_rule: bool = True
    """False boots a damaged node as if its log were merely short (no ``Repair``): the unsafe
    behaviour the rule exists for, so tests can show the checker catching it."""


def random_profile(rng: random.Random, nodes: int) -> SimConfig:
    """Per-seed knobs, so the seeds between them cover slow disks, lossy links and both noop modes."""
    return SimConfig(
        nodes=nodes,
        loss=rng.choice((0.0, 0.02, 0.1, 0.25)),
        duplicate=rng.choice((0.0, 0.05, 0.2)),
        max_delay_rounds=rng.choice((1, 3, 8)),
        fault_rate=rng.choice((0.03, 0.1, 0.3)),
        propose_rate=rng.choice((0.3, 1.0, 3.0)),
        transfer_rate=rng.choice((0.0, 0.02, 0.1)),
        max_disk_delay_rounds=rng.choice((0, 2, 6)),
        max_inflight=rng.choice((2, 8, 64)),
        max_entries_per_append=rng.choice((1, 4, 16)),
        append_noop=rng.choice((True, False)),
        pre_vote=rng.random() < 0.75,
        check_quorum=rng.random() < 0.75,
        acks_at_persist=rng.random() < 0.5,  # drawn last: the other knobs of a seed stay as they were
    )


@dataclass(slots=True)
class SimStats:
    seed: int
    first_leader_tick: int | None = None
    recovery_ticks: int | None = None
    """Ticks from the end of the faults until a leader has committed an entry of its own term."""
    heal_commit_ticks: int | None = None
    """Ticks from the end of the faults until a proposal made after them committed (drains the backlog)."""
    committed: int = 0
    terms: int = 0
    delivered: int = 0
    crashes: int = 0
    partitions: int = 0
    transfers: int = 0
    corruptions: int = 0
    repairs_done: int = 0


CALM = {"fault_rate": 0.0, "transfer_rate": 0.0, "loss": 0.0, "duplicate": 0.0}
"""Overrides for a fault-free run, where liveness has a tight bound."""
