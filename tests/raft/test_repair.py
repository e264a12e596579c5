"""A member whose log lost entries (rot found by its recovery) repairs without breaking Raft.

The rule (``ledgermq.raft.Repair``; docs/raft.md, "Repairing a damaged log"): until its
durable log is back at the index it had reached, the member does not campaign, grants
votes only as its undamaged log would have, and its answers make the leader lower its
match and leave it out of the commit quorum.
"""

from __future__ import annotations

import os

import pytest

from ledgermq.raft import Entry, HardState, Message, MsgType, Repair, Role
from ledgermq.raft.wire import decode_batch, encode_batch
from ledgermq.testing.raft_sim import SimulationFailure, run_seed
from tests.raft.cluster import Cluster, drain, log, node, storage

IDS = ("n0", "n1", "n2")


def _damaged_follower_scenario(repair: Repair | None) -> Cluster:
    """n0 led term 1 and committed entries 1-3 with n1 while n2 was cut off (n2 holds only
    entry 1). Then n1's disk rots from entry 2 on, and n0 goes away. The survivors are n1
    (log 1, repairing or not) and n2 (log 1)."""
    n1_hs = HardState(term=1, vote="n0", commit=1)
    nodes = {
        "n0": node("n0", IDS, HardState(1, "n0", 3), log(1, 1, 1)),
        "n1": node("n1", IDS, n1_hs, log(1), repair=repair),
        "n2": node("n2", IDS, HardState(1, "n0", 1), log(1)),
    }
    c = Cluster(nodes)
    c.isolate("n0")
    return c


def test_without_the_rule_a_damaged_follower_elects_a_leader_missing_committed_entries() -> None:
    c = _damaged_follower_scenario(repair=None)
    n2 = c.elect("n2")
    assert n2.role is Role.LEADER
    assert n2.log_term(2) != 1  # entries 2 and 3, committed in term 1, are not in the new leader's log


def test_a_repairing_follower_neither_votes_for_a_shorter_log_nor_campaigns() -> None:
    c = _damaged_follower_scenario(repair=Repair(until=3, last_term=1))
    c.elect("n2")
    assert c.nodes["n2"].role is not Role.LEADER
    c.nodes["n1"].campaign()
    c.stabilize()
    assert c.nodes["n1"].role is Role.FOLLOWER
    for _ in range(100):  # its election timeout passes many times over: still no campaign
        c.nodes["n1"].tick()
    assert c.nodes["n1"].role is Role.FOLLOWER
    assert not [m for m in c.sent if m.src == "n1" and m.type in (MsgType.VOTE, MsgType.PRE_VOTE)]


def test_a_repairing_follower_votes_for_a_log_as_up_to_date_as_its_undamaged_one_and_is_repaired() -> None:
    c = _damaged_follower_scenario(repair=Repair(until=3, last_term=1))
    c.cut.clear()
    n0 = c.nodes["n0"]
    n0.tick()  # n0 never heard a leader in this life: it may campaign at once
    c.elect("n0")
    assert n0.role is Role.LEADER
    c.stabilize()
    n1 = c.nodes["n1"]
    assert n1.repair_until == 0
    assert n1.entries(1, 4) == n0.entries(1, 4)


def test_a_leader_lowers_a_repairing_members_match_and_leaves_it_out_of_the_quorum() -> None:
    """The leader still believes n1 holds entry 3; n1 restarted with its log cut at 1. The
    first answer saying "repairing" resets the leader's view; nothing commits on n1's word
    until n1 holds entry 3 again."""
    c = Cluster.of(3)
    leader = c.elect("n0")
    for i in range(3):
        leader.propose(b"x%d" % i)
    c.stabilize()
    assert leader.progress()["n1"][0] == leader.last_index == 4
    c.isolate("n2")  # only n1 can complete a quorum now
    n1_old = c.nodes["n1"]
    kept = storage(n1_old).entries(1, 2, 1 << 30)
    c.nodes["n1"] = node("n1", IDS, HardState(n1_old.term, n1_old.vote, 1), kept, repair=Repair(4, n1_old.term))
    index = leader.propose(b"after")
    leader_msgs = drain(leader)
    before = leader.commit
    for m in leader_msgs:
        if m.dst == "n1":
            c.nodes["n1"].step(m)
    for m in drain(c.nodes["n1"]):
        assert m.repair_until == 4
        leader.step(m)
    assert leader.progress()["n1"][0] < 4  # the stale match is gone
    assert leader.commit == before
    c.stabilize()  # n1 is repaired from the leader, then counts again
    assert c.nodes["n1"].repair_until == 0
    assert leader.commit >= index
    assert c.nodes["n1"].entries(1, index + 1) == leader.entries(1, index + 1)


def test_a_repairing_node_cannot_be_made_leader() -> None:
    n = node("n0", IDS, HardState(1, None, 0), log(1), repair=Repair(2, 1))
    n.campaign()
    assert n.role is Role.FOLLOWER and not drain(n)


def test_repair_ends_once_the_durable_log_is_back() -> None:
    n = node("n1", IDS, HardState(1, "n0", 0), log(1), repair=Repair(3, 1))
    assert n.repair_until == 3
    n.step(Message(MsgType.APPEND, "n0", "n1", 1, log_term=1, index=1, entries=(Entry(2, 1, b"b"), Entry(3, 1, b"c"))))
    out = drain(n)
    assert n.repair_until == 0
    assert [m.repair_until for m in out if m.type is MsgType.APPEND_RESP] == [3]  # sent while it still repaired


def test_repair_until_crosses_the_wire() -> None:
    m = Message(MsgType.APPEND_RESP, "n1", "n0", 3, index=7, reject=True, reject_hint=5, log_term=2, repair_until=42)
    plain = Message(MsgType.HEARTBEAT_RESP, "n1", "n0", 3)
    assert decode_batch(encode_batch([m, plain])) == [m, plain]


SEEDS = int(os.environ.get("LEDGERMQ_RAFT_ROT_SEEDS", "150"))


@pytest.mark.parametrize("nodes", [3, 5])
def test_simulated_rot_with_the_rule_loses_no_committed_entry(nodes: int) -> None:
    """Seeded runs where a node's log rots (cut at a random entry) every ~10 ticks, on top of
    the usual crashes, partitions and loss; invariants checked after every step."""
    corruptions = repairs = 0
    for seed in range(SEEDS if nodes == 3 else SEEDS // 3):
        stats = run_seed(seed, nodes, corrupt_rate=0.1)
        corruptions += stats.corruptions
        repairs += stats.repairs_done
    assert corruptions > SEEDS and repairs > SEEDS // 2, (corruptions, repairs)


def test_simulated_rot_without_the_rule_elects_leaders_missing_committed_entries() -> None:
    lacking = 0
    for seed in range(60):
        try:
            run_seed(seed, 3, corrupt_rate=0.1, repair_rule=False)
        except SimulationFailure as exc:
            lacking += "lacks" in str(exc).split("\n")[0]
    assert lacking >= 3
