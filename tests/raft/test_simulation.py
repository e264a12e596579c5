"""Seeded whole-cluster simulations: safety after every step, liveness once faults heal.

The default run covers SEEDS_3 three-node and SEEDS_5 five-node seeds in chunks of
CHUNK (each seed also draws its own loss, delay, fault and batching profile). For a
long run set ``LEDGERMQ_RAFT_SEEDS=N`` (three-node seeds; five-node runs get 40% of
that) and ``LEDGERMQ_RAFT_SEED_BASE`` to start elsewhere. A failure prints the seed,
a trace tail and the command that replays it.
"""

from __future__ import annotations

import os

import pytest

from ledgermq.testing.raft_sim import SimStats, run_seed

CHUNK = 50
SEEDS_3 = int(os.environ.get("LEDGERMQ_RAFT_SEEDS", "2000"))
SEEDS_5 = int(SEEDS_3 * 0.4)
BASE = int(os.environ.get("LEDGERMQ_RAFT_SEED_BASE", "0"))

# Fault-free runs must elect within a few election timeouts: [T, 2T) for the first
# timeout, a pre-vote and a vote round trip, and room for one split vote.
CALM_FIRST_LEADER_TICKS = 60
CALM_SEEDS = 100


def _chunks(total: int) -> list[tuple[int, int]]:
    return [(BASE + lo, BASE + min(lo + CHUNK, total)) for lo in range(0, total, CHUNK)]


def _run(nodes: int, lo: int, hi: int) -> list[SimStats]:
    return [run_seed(seed, nodes) for seed in range(lo, hi)]


@pytest.mark.parametrize(("lo", "hi"), _chunks(SEEDS_3), ids=lambda v: str(v))
def test_three_nodes(lo: int, hi: int) -> None:
    for stats in _run(3, lo, hi):
        assert stats.recovery_ticks is not None and stats.heal_commit_ticks is not None


@pytest.mark.parametrize(("lo", "hi"), _chunks(SEEDS_5), ids=lambda v: str(v))
def test_five_nodes(lo: int, hi: int) -> None:
    for stats in _run(5, lo, hi):
        assert stats.recovery_ticks is not None and stats.heal_commit_ticks is not None


@pytest.mark.parametrize("nodes", [3, 5])
def test_calm_cluster_elects_promptly(nodes: int) -> None:
    """Liveness without faults: a leader within CALM_FIRST_LEADER_TICKS, and writes commit."""
    for seed in range(CALM_SEEDS):
        stats = run_seed(seed, nodes, calm=True)
        assert stats.first_leader_tick is not None
        assert stats.first_leader_tick <= CALM_FIRST_LEADER_TICKS, f"seed {seed}: {stats}"
        assert stats.recovery_ticks == 0 and stats.committed > 0


def test_a_seed_replays_exactly() -> None:
    assert run_seed(1234, 3) == run_seed(1234, 3)
    assert run_seed(99, 5) == run_seed(99, 5)
