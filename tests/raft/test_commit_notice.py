"""How followers hear of a new commit index: at once (etcd) or with the next Append or heartbeat.

An empty Append that only carries a moved commit index costs a message each way per
follower per commit: with clients sending one message at a time that doubled the Raft
messages of every round. ``eager_commit_notice=False`` (a broker's DLedger group) leaves
the commit to the next Append with entries, or to the next heartbeat when idle, as
DLedger does. Commitment is the leader's alone, so only a follower's apply waits.
"""

from __future__ import annotations

import pytest

from ledgermq.raft import Message, MsgType, RaftNode
from ledgermq.testing.raft_sim import run_seed
from tests.raft.cluster import Cluster, drain, storage


def _commit_one(lead: RaftNode, data: bytes) -> int:
    """Propose ``data``, persist it on the leader and hand it n1's acknowledgement."""
    index = lead.propose(data)
    rd = lead.ready()
    lead.advance(rd)
    storage(lead).append(rd.entries_to_persist)
    lead.persisted(index, lead.term)
    lead.step(Message(MsgType.APPEND_RESP, "n1", "n0", term=lead.term, index=index))
    assert lead.commit == index
    return index


def test_by_default_a_commit_advance_is_sent_at_once_in_empty_appends() -> None:
    c = Cluster.of(3)
    lead = c.elect("n0")
    index = _commit_one(lead, b"a")
    rd = lead.ready()
    assert rd.committed_entries[-1].index == index
    notices = [m for m in rd.messages if m.type is MsgType.APPEND]
    assert {m.dst for m in notices} == {"n1", "n2"}
    assert all(m.entries == () and m.commit == index for m in notices)


def test_a_lazy_leader_sends_nothing_for_a_commit_alone_and_the_next_append_carries_it() -> None:
    c = Cluster.of(3, eager_commit_notice=False)
    lead = c.elect("n0")
    index = _commit_one(lead, b"a")
    rd = lead.ready()
    assert rd.committed_entries[-1].index == index  # the leader applies (and answers) at once
    assert rd.messages == ()
    lead.advance(rd)
    assert not lead.has_ready()

    lead.propose(b"b")
    appends = [m for m in drain(lead) if m.type is MsgType.APPEND]
    assert {m.dst for m in appends} == {"n1", "n2"}
    assert all(m.commit == index and [e.data for e in m.entries] == [b"b"] for m in appends)


def test_an_idle_lazy_leader_tells_followers_with_the_next_heartbeat() -> None:
    c = Cluster.of(3, eager_commit_notice=False)
    lead = c.elect("n0")
    index = lead.propose(b"a")
    c.stabilize()
    assert lead.commit == index
    followers = [c.nodes["n1"], c.nodes["n2"]]
    assert all(f.commit < index for f in followers)  # nobody told them yet

    lead.tick()  # heartbeat_ticks=1 in these tests
    c.stabilize()
    assert all(f.commit == index and f.applied == index for f in followers)


@pytest.mark.parametrize("nodes", [3, 5])
def test_lazy_commit_notices_keep_the_simulated_cluster_safe_and_live(nodes: int) -> None:
    """Safety after every step, liveness after the faults heal (the simulator's own checks)."""
    for seed in range(60):
        stats = run_seed(seed, nodes, eager_commit_notice=False)
        assert stats.recovery_ticks is not None and stats.heal_commit_ticks is not None
