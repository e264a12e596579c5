"""Quorum arithmetic against naive oracles (etcd-io/raft's quorum/quick_test.go, with hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ledgermq.raft.quorum import VoteResult, committed_index, has_quorum, vote_result

VOTERS = st.lists(st.sampled_from([f"n{i}" for i in range(7)]), min_size=1, max_size=7, unique=True)


def naive_committed(voters: list[str], matches: dict[str, int]) -> int:
    """The largest index that at least a majority has reached, found by trying every candidate."""
    best = 0
    for candidate in {0, *matches.values()}:
        holders = sum(1 for v in voters if matches.get(v, 0) >= candidate)
        if holders > len(voters) // 2:
            best = max(best, candidate)
    return best


def naive_vote(voters: list[str], votes: dict[str, bool]) -> VoteResult:
    yes = sum(1 for v in voters if votes.get(v) is True)
    no = sum(1 for v in voters if votes.get(v) is False)
    missing = len(voters) - yes - no
    if 2 * yes > len(voters):
        return VoteResult.WON
    if 2 * (yes + missing) <= len(voters):
        return VoteResult.LOST
    return VoteResult.PENDING


@settings(max_examples=800, deadline=None)
@given(VOTERS, st.data())
def test_committed_index_matches_oracle(voters: list[str], data: st.DataObject) -> None:
    # Matches may name non-voters and omit voters: both must be handled.
    keys = st.sampled_from([*voters, "x1", "x2"])
    matches = data.draw(st.dictionaries(keys, st.integers(0, 20)))
    assert committed_index(voters, matches) == naive_committed(voters, matches)


@settings(max_examples=800, deadline=None)
@given(VOTERS, st.data())
def test_vote_result_matches_oracle(voters: list[str], data: st.DataObject) -> None:
    votes = data.draw(st.dictionaries(st.sampled_from([*voters, "x1"]), st.booleans()))
    assert vote_result(voters, votes) == naive_vote(voters, votes)


@settings(max_examples=300, deadline=None)
@given(VOTERS, st.data())
def test_has_quorum_matches_oracle(voters: list[str], data: st.DataObject) -> None:
    active = data.draw(st.sets(st.sampled_from([*voters, "x1"])))
    assert has_quorum(voters, active) == (2 * len(set(voters) & active) > len(voters))


@settings(max_examples=300, deadline=None)
@given(VOTERS, st.data())
def test_committed_index_is_monotonic_in_matches(voters: list[str], data: st.DataObject) -> None:
    """Raising any voter's match never lowers the committed index (commit never goes back)."""
    matches = {v: data.draw(st.integers(0, 20)) for v in voters}
    before = committed_index(voters, matches)
    who = data.draw(st.sampled_from(voters))
    matches[who] += data.draw(st.integers(0, 5))
    assert committed_index(voters, matches) >= before


def test_empty_and_single() -> None:
    assert committed_index([], {}) == 0
    assert committed_index(["n0"], {"n0": 7}) == 7
    assert vote_result(["n0"], {"n0": True}) is VoteResult.WON
    assert vote_result(["n0", "n1"], {"n0": True}) is VoteResult.PENDING
    assert vote_result(["n0", "n1"], {"n0": True, "n1": False}) is VoteResult.LOST
