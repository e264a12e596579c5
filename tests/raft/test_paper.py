"""Behaviour checked against the Raft paper, one sentence (or figure) per test.

"In Search of an Understandable Consensus Algorithm (Extended Version)", Ongaro and
Ousterhout; "thesis" is Ongaro's PhD thesis. Like etcd-io/raft's raft_paper_test.go,
each test names the section it checks, builds nodes, steps messages and asserts on
the messages and Ready contents that come out.
"""

from __future__ import annotations

import random

import pytest

from ledgermq.raft import (
    Entry,
    EntryKind,
    HardState,
    LeaderTransferInProgressError,
    Message,
    MsgType,
    NotLeaderError,
    Role,
)
from tests.raft.cluster import Cluster, drain, log, node, persist, storage

# -- §5.1 terms -----------------------------------------------------------------------------


@pytest.mark.parametrize("role", [Role.FOLLOWER, Role.CANDIDATE, Role.LEADER])
def test_higher_term_converts_to_follower(role: Role) -> None:
    """§5.1: "If a server's current term is smaller than the other's, it updates its current term"
    and "if a candidate or leader discovers that its term is out of date, it immediately
    reverts to follower state"."""
    c = Cluster.of(3, pre_vote=False)
    n = c.nodes["n0"]
    if role is Role.CANDIDATE:
        n.campaign()
    elif role is Role.LEADER:
        c.elect("n0")
    n.step(Message(MsgType.APPEND, "n1", "n0", term=5, log_term=0, index=0))
    assert (n.role, n.term, n.leader) == (Role.FOLLOWER, 5, "n1")


def test_stale_term_message_is_answered_not_obeyed() -> None:
    """§5.1: "If a server receives a request with a stale term number, it rejects the request";
    we answer with our term so a deposed leader learns it is stale and steps down."""
    n = node(hard_state=HardState(term=3))
    n.step(Message(MsgType.APPEND, "n1", "n0", term=2, entries=(Entry(1, 2, b"x"),)))
    (resp,) = drain(n)
    assert (resp.type, resp.term, resp.dst) == (MsgType.APPEND_RESP, 3, "n1")
    assert n.last_index == 0 and n.term == 3


# -- §5.2 leader election ----------------------------------------------------------------------


def test_start_as_follower() -> None:
    """§5.2: "When servers start up, they begin as followers."""
    n = node()
    assert (n.role, n.term, n.leader) == (Role.FOLLOWER, 0, None)


def test_leader_sends_heartbeats() -> None:
    """§5.2: "Leaders send periodic heartbeats ... to all followers in order to maintain their authority."""
    c = Cluster.of(3, heartbeat_ticks=2)
    lead = c.elect("n0")
    lead.tick()
    assert not [m for m in drain(lead) if m.type is MsgType.HEARTBEAT]
    lead.tick()
    beats = [m for m in drain(lead) if m.type is MsgType.HEARTBEAT]
    assert sorted(m.dst for m in beats) == ["n1", "n2"]
    assert all(m.term == lead.term for m in beats)


@pytest.mark.parametrize("pre_vote", [False, True])
def test_follower_starts_election_after_timeout(pre_vote: bool) -> None:
    """§5.2: "If a follower receives no communication over a period of time called the election
    timeout, then it ... begins an election": it increments its term, votes for itself and
    sends RequestVote. Thesis §9.6: with pre-vote it first asks without changing its term."""
    n = node(pre_vote=pre_vote)
    for _ in range(20):
        n.tick()
    msgs = drain(n)
    if pre_vote:
        assert (n.role, n.term, n.vote) == (Role.PRE_CANDIDATE, 0, None)
        assert {(m.type, m.term) for m in msgs} == {(MsgType.PRE_VOTE, 1)}
    else:
        assert (n.role, n.term, n.vote) == (Role.CANDIDATE, 1, "n0")
        assert {(m.type, m.term) for m in msgs} == {(MsgType.VOTE, 1)}
    assert sorted(m.dst for m in msgs) == ["n1", "n2"]


def test_election_timeouts_are_randomized_in_t_2t() -> None:
    """§5.2: "election timeouts are chosen randomly from a fixed interval" ([T, 2T), as etcd)."""
    seen = set()
    for seed in range(200):
        n = node(f"s{seed}")  # the id seeds the jitter
        ticks = 0
        while n.role is Role.FOLLOWER:
            n.tick()
            ticks += 1
        seen.add(ticks)
    assert min(seen) >= 10 and max(seen) < 20 and len(seen) > 5


@pytest.mark.parametrize(
    ("size", "grants", "expected"),
    [
        (1, {}, Role.LEADER),
        (3, {"n1": True}, Role.LEADER),
        (3, {"n1": False, "n2": False}, Role.FOLLOWER),
        (3, {"n1": False}, Role.CANDIDATE),
        (5, {"n1": True, "n2": True}, Role.LEADER),
        (5, {"n1": True, "n2": False, "n3": False}, Role.CANDIDATE),
        (5, {"n1": False, "n2": False, "n3": False}, Role.FOLLOWER),
    ],
)
def test_election_outcome(size: int, grants: dict[str, bool], expected: Role) -> None:
    """§5.2: "A candidate wins an election if it receives votes from a majority"; a majority of
    refusals means it cannot, so it goes back to follower and waits."""
    ids = [f"n{i}" for i in range(size)]
    n = node("n0", ids, pre_vote=False)
    n.campaign()
    for voter, granted in grants.items():
        n.step(Message(MsgType.VOTE_RESP, voter, "n0", term=1, reject=not granted))
    assert n.role is expected


def test_one_vote_per_term_first_come_first_served() -> None:
    """§5.2: "each server will vote for at most one candidate in a given term, on a
    first-come-first-served basis"; a repeated request from the same candidate is re-granted."""
    n = node("n0", ("n0", "n1", "n2"))
    replies = []
    for cand in ("n1", "n2", "n1"):
        n.step(Message(MsgType.VOTE, cand, "n0", term=1))
        (r,) = drain(n)
        replies.append((r.dst, r.reject))
    assert replies == [("n1", False), ("n2", True), ("n1", False)]
    assert n.vote == "n1"


def test_candidate_yields_to_leader_of_same_term() -> None:
    """§5.2: "If the AppendEntries RPC is from a leader whose term is at least as large as the
    candidate's current term ... the candidate ... returns to follower state."""
    n = node(pre_vote=False)
    n.campaign()
    n.step(Message(MsgType.HEARTBEAT, "n2", "n0", term=1))
    assert (n.role, n.leader, n.term) == (Role.FOLLOWER, "n2", 1)


# -- §5.3 log replication ----------------------------------------------------------------------


def test_leader_replicates_and_commits_on_majority() -> None:
    """§5.3: the leader appends the command, "issues AppendEntries RPCs in parallel", and the
    entry is committed "once the leader that created the entry has replicated it on a majority"."""
    c = Cluster.of(3)
    lead = c.elect("n0")
    index = lead.propose(b"cmd")
    rd = lead.ready()
    appends = [m for m in rd.messages if m.type is MsgType.APPEND]
    assert {m.dst for m in appends} == {"n1", "n2"}
    assert all(m.index == index - 1 and m.log_term == lead.term for m in appends)
    assert all(m.entries == (Entry(index, lead.term, b"cmd"),) for m in appends)
    assert rd.entries_to_persist == (Entry(index, lead.term, b"cmd"),)
    lead.advance(rd)
    storage(lead).append(rd.entries_to_persist)
    lead.persisted(index, lead.term)
    lead.step(Message(MsgType.APPEND_RESP, "n1", "n0", term=lead.term, index=index))
    assert lead.commit == index
    rd = lead.ready()
    assert rd.committed_entries[-1] == Entry(index, lead.term, b"cmd")
    assert rd.hard_state is not None and rd.hard_state.commit == index


def test_leader_counts_itself_only_once_persisted() -> None:
    """Async storage (etcd's model): the leader's own copy joins the quorum only after the
    caller acknowledges it durable, so a crash cannot lose an entry counted as committed."""
    c = Cluster.of(3)
    lead = c.elect("n0")
    index = lead.propose(b"x")
    drain(lead, persist=False)
    lead.step(Message(MsgType.APPEND_RESP, "n1", "n0", term=lead.term, index=index))
    assert lead.commit == index - 1
    persist(lead, index)
    assert lead.commit == index


def test_follower_acks_only_after_persisting() -> None:
    """A follower's AppendResp vouches for durability, so it is released only after persisted()."""
    n = node("n1")
    n.step(Message(MsgType.APPEND, "n0", "n1", term=1, entries=(Entry(1, 1, b"a"), Entry(2, 1, b"b"))))
    rd = n.ready()
    assert [e.index for e in rd.entries_to_persist] == [1, 2]
    assert rd.messages == ()
    n.advance(rd)
    assert not n.has_ready()
    storage(n).append(rd.entries_to_persist)
    n.persisted(2, 1)
    (ack,) = n.ready().messages
    assert (ack.type, ack.index, ack.reject) == (MsgType.APPEND_RESP, 2, False)


def test_follower_rejects_on_log_mismatch_with_hint() -> None:
    """§5.3: "If the follower does not find an entry in its log with the same index and term,
    then it refuses the new entries"; the hint lets the leader skip a term's worth per round trip."""
    n = node("n1", hard_state=HardState(term=3), entries=log(1, 1, 2, 2, 2))
    n.step(Message(MsgType.APPEND, "n0", "n1", term=3, index=5, log_term=3))
    (r,) = drain(n)
    assert r.reject and r.index == 5
    assert (r.reject_hint, r.log_term) == (5, 2)
    n.step(Message(MsgType.APPEND, "n0", "n1", term=3, index=9, log_term=3))
    (r,) = drain(n)
    assert (r.reject_hint, r.log_term) == (5, 2)  # past our end: hint at our last entry


def test_follower_truncates_conflicting_suffix() -> None:
    """§5.3: "If an existing entry conflicts with a new one (same index but different terms),
    delete the existing entry and all that follow it"."""
    n = node("n1", hard_state=HardState(term=2), entries=log(1, 1, 2, 2))
    n.step(Message(MsgType.APPEND, "n0", "n1", term=3, index=2, log_term=1, entries=(Entry(3, 3, b"new"),)))
    rd = n.ready()
    assert rd.entries_to_persist == (Entry(3, 3, b"new"),)  # the caller truncates from index 3
    assert n.last_index == 3
    assert n.entries(1, 4)[2] == Entry(3, 3, b"new")


def test_follower_commit_capped_at_last_new_entry() -> None:
    """§5.3 / Figure 2: "set commitIndex = min(leaderCommit, index of last new entry)": entries
    past what this Append verified may be a stale tail from an older leader."""
    n = node("n1", hard_state=HardState(term=1), entries=log(1, 1, 1))
    n.step(Message(MsgType.APPEND, "n0", "n1", term=2, index=1, log_term=1, entries=(Entry(2, 1, b"e2"),), commit=3))
    assert n.commit == 2


def test_stale_shorter_append_does_not_truncate() -> None:
    """§5.3 with reordering: an old Append carrying a prefix of what we hold must not cut the
    matching tail that a newer Append already delivered (etcd's findConflict)."""
    n = node("n1")
    full = Message(MsgType.APPEND, "n0", "n1", term=1, entries=tuple(log(1, 1, 1)))
    old = Message(MsgType.APPEND, "n0", "n1", term=1, entries=tuple(log(1)))
    n.step(full)
    n.step(old)
    n.step(full)  # and a duplicate
    assert n.last_index == 3
    drain(n)
    assert n.persisted_index == 3


# Figure 7: the leader of term 8 and followers (a)-(f).
FIG7_LEADER = (1, 1, 1, 4, 4, 5, 5, 6, 6, 6)
FIG7_FOLLOWERS = {
    "a": (1, 1, 1, 4, 4, 5, 5, 6, 6),
    "b": (1, 1, 1, 4),
    "c": (1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 6),
    "d": (1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 7, 7),
    "e": (1, 1, 1, 4, 4, 4, 4),
    "f": (1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3),
}


@pytest.mark.parametrize("case", sorted(FIG7_FOLLOWERS))
def test_leader_brings_every_figure7_follower_in_line(case: str) -> None:
    """§5.3, Figure 7: "the leader handles inconsistencies by forcing the followers' logs to
    duplicate its own", whatever mix of missing and extraneous entries they hold."""
    ids = ("n0", "n1", "n2")
    lead = node("n0", ids, HardState(term=7), log(*FIG7_LEADER), pre_vote=False)
    follower = node("n1", ids, HardState(term=7), log(*FIG7_FOLLOWERS[case]), pre_vote=False)
    voter = node("n2", ids, HardState(term=7), pre_vote=False)
    c = Cluster({"n0": lead, "n1": follower, "n2": voter})
    c.elect("n0")
    assert lead.role is Role.LEADER and lead.term == 8
    assert follower.entries(1, follower.last_index + 1) == lead.entries(1, lead.last_index + 1)
    rounds = [m for m in c.sent if m.type is MsgType.APPEND_RESP and m.src == "n1" and m.reject]
    assert len(rounds) <= 2  # fast backtracking: at most one rejection per divergent term


# -- §5.4 safety -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cand_term", "cand_index", "granted"),
    [(2, 3, False), (3, 2, False), (3, 3, True), (3, 4, True), (4, 1, True)],
)
def test_vote_only_for_up_to_date_log(cand_term: int, cand_index: int, granted: bool) -> None:
    """§5.4.1: "the voter denies its vote if its own log is more up-to-date than that of the
    candidate", comparing last terms first, then lengths."""
    n = node("n0", hard_state=HardState(term=3), entries=log(1, 2, 3))
    n.step(Message(MsgType.VOTE, "n1", "n0", term=4, index=cand_index, log_term=cand_term))
    (r,) = drain(n)
    assert r.reject is not granted


def test_leader_commits_old_term_entries_only_through_its_own() -> None:
    """§5.4.2 (Figure 8): "Raft never commits log entries from previous terms by counting
    replicas"; they commit indirectly once an entry of the current term does."""
    ids = ("n0", "n1", "n2")
    lead = node("n0", ids, HardState(term=2), log(1, 2), pre_vote=False, append_noop_on_election=False)
    lead.campaign()
    lead.step(Message(MsgType.VOTE_RESP, "n1", "n0", term=3))
    assert lead.role is Role.LEADER
    drain(lead)
    lead.step(Message(MsgType.APPEND_RESP, "n1", "n0", term=3, index=2))
    assert lead.commit == 0  # entry 2 (term 2) is on a majority but must not commit yet
    index = lead.propose(b"now")
    drain(lead)
    lead.step(Message(MsgType.APPEND_RESP, "n1", "n0", term=3, index=index))
    assert lead.commit == index


def test_noop_on_election_commits_previous_terms() -> None:
    """§8: a new leader appends a no-op so entries of earlier terms commit without waiting for a client."""
    ids = ("n0", "n1", "n2")
    lead = node("n0", ids, HardState(term=2), log(1, 2), pre_vote=False)
    follower = node("n1", ids, HardState(term=2), log(1, 2), pre_vote=False)
    c = Cluster({"n0": lead, "n1": follower, "n2": node("n2", ids, HardState(term=2), pre_vote=False)})
    c.elect("n0")
    assert lead.commit == 3 and lead.entries(3, 4)[0].kind is EntryKind.NOOP


# -- §6 / thesis: check-quorum, pre-vote, transfer ---------------------------------------------


def test_check_quorum_leader_steps_down_and_refuses_proposals() -> None:
    """Thesis §6.2: a leader that cannot reach a majority for an election timeout steps down,
    so clients stop sending it writes that cannot commit."""
    c = Cluster.of(3)
    lead = c.elect("n0")
    for _ in range(10):
        lead.tick()
    assert lead.role is Role.FOLLOWER
    with pytest.raises(NotLeaderError):
        lead.propose(b"x")


def test_lease_makes_followers_ignore_disruptive_votes() -> None:
    """Thesis §4.2.3: a server that heard from a leader within the election timeout ignores
    RequestVote (and pre-vote) from a higher term, unless a leadership transfer forces it."""
    c = Cluster.of(3)
    c.elect("n0")
    f = c.nodes["n1"]
    for kind in (MsgType.PRE_VOTE, MsgType.VOTE):
        f.step(Message(kind, "n2", "n1", term=5, index=9, log_term=9))
        assert drain(f) == [] and f.term == 1
    f.step(Message(MsgType.VOTE, "n2", "n1", term=5, index=9, log_term=9, transfer=True))
    (r,) = drain(f)
    assert (r.type, r.reject, f.term, f.vote) == (MsgType.VOTE_RESP, False, 5, "n2")


def test_pre_vote_changes_nothing_on_the_voter() -> None:
    """Thesis §9.6: answering a pre-vote records no vote and keeps the term."""
    n = node("n1")
    n.step(Message(MsgType.PRE_VOTE, "n2", "n1", term=1))
    (r,) = drain(n)
    assert (r.type, r.reject, r.term) == (MsgType.PRE_VOTE_RESP, False, 1)
    assert (n.term, n.vote) == (0, None)


def test_rejoining_node_does_not_disrupt_leader() -> None:
    """Thesis §9.6: a partitioned node with pre-vote never raises its term, so on rejoining it
    cannot force the healthy leader to step down."""
    c = Cluster.of(3)
    lead = c.elect("n0")
    c.isolate("n2")
    for _ in range(100):
        c.nodes["n2"].tick()
        c.stabilize()
    c.cut.clear()
    lead.tick()
    c.stabilize()
    assert lead.role is Role.LEADER and lead.term == 1
    assert c.nodes["n2"].term == 1 and c.nodes["n2"].leader == "n0"


def test_leader_transfer() -> None:
    """Thesis §3.10: catch the target up, send TimeoutNow, refuse proposals meanwhile."""
    c = Cluster.of(3)
    lead = c.elect("n0")
    c.isolate("n2")
    lead.propose(b"x")
    c.stabilize()
    c.cut.clear()
    lead.transfer_leader("n2")
    with pytest.raises(LeaderTransferInProgressError) as info:
        lead.propose(b"y")
    assert info.value.transferee == "n2"
    c.stabilize()
    assert [m.dst for m in c.sent if m.type is MsgType.TIMEOUT_NOW] == ["n2"]
    assert c.nodes["n2"].role is Role.LEADER and lead.role is Role.FOLLOWER
    with pytest.raises(NotLeaderError) as hint:
        lead.propose(b"z")
    assert hint.value.leader_hint == "n2"


def test_leader_transfer_aborts_after_election_timeout() -> None:
    c = Cluster.of(3)
    lead = c.elect("n0")
    c.isolate("n2")
    lead.transfer_leader("n2")
    for _ in range(10):
        lead.tick()
        c.stabilize()
    assert lead.lead_transferee is None and lead.role is Role.LEADER
    assert lead.propose(b"ok") > 0


# -- restart and the Ready contract -------------------------------------------------------------


def test_restart_replays_committed_entries_from_applied() -> None:
    """A restarted node trusts its persisted hard state: it re-learns the commit index from it
    and hands out the committed entries the caller has not applied."""
    n = node("n1", hard_state=HardState(term=2, vote="n0", commit=2), entries=log(1, 2, 2), applied=1)
    rd = n.ready()
    assert [e.index for e in rd.committed_entries] == [2]
    assert rd.hard_state is None and rd.entries_to_persist == ()
    assert (n.term, n.vote, n.commit) == (2, "n0", 2)


def test_stale_persisted_ack_is_ignored_after_truncation() -> None:
    """persisted(index, term) names a write; if the log was rewritten since, it proves only the untouched prefix."""
    n = node("n1", hard_state=HardState(term=1))
    n.step(Message(MsgType.APPEND, "n0", "n1", term=1, entries=tuple(log(1, 1))))
    rd = n.ready()
    n.advance(rd)
    n.step(Message(MsgType.APPEND, "n2", "n1", term=2, index=1, log_term=1, entries=(Entry(2, 2, b"new"),)))
    storage(n).append(rd.entries_to_persist)
    n.persisted(2, 1)
    assert n.persisted_index == 1 and n.log_term(2) == 2
    n.persisted(2, 1)
    assert n.persisted_index == 1
    rd = n.ready()
    assert rd.entries_to_persist == (Entry(2, 2, b"new"),)
    storage(n).append(rd.entries_to_persist)
    n.persisted(2, 2)
    assert n.persisted_index == 2 and n.entries(1, 3) == [Entry(1, 1, b"e1"), Entry(2, 2, b"new")]


def test_ready_contract_misuse_is_refused() -> None:
    n = node()
    n.campaign()
    rd = n.ready()
    with pytest.raises(Exception, match="before advance"):
        n.ready()
    n.advance(rd)
    with pytest.raises(Exception, match="not the outstanding"):
        n.advance(rd)


def test_must_sync_only_when_term_or_vote_changes() -> None:
    c = Cluster.of(3, pre_vote=False)
    n = c.nodes["n0"]
    n.campaign()
    rd = n.ready()
    assert rd.must_sync and rd.hard_state == HardState(1, "n0", 0)
    n.advance(rd)
    n.step(Message(MsgType.VOTE_RESP, "n1", "n0", term=1))
    rd = n.ready()
    assert not rd.must_sync and rd.hard_state is None


def test_same_seed_same_run() -> None:
    def run(seed: int) -> list[tuple[str, int]]:
        c = Cluster({i: node(i, ("n0", "n1", "n2")) for i in ("n0", "n1", "n2")})
        rng = random.Random(seed)
        out = []
        for _ in range(60):
            c.nodes[rng.choice(sorted(c.nodes))].tick()
            c.stabilize()
            out += [(n.id, n.term) for n in c.nodes.values() if n.role is Role.LEADER]
        return out

    assert run(1) == run(1)
