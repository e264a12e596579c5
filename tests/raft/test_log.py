"""RaftLog cursors and slicing: the pieces the paper tests exercise only indirectly."""

from __future__ import annotations

import pytest

from ledgermq.errors import InvariantViolation
from ledgermq.raft import Entry
from ledgermq.raft.log import RaftLog
from tests.raft.cluster import log


def test_restored_log_is_durable_and_sentinel_matches() -> None:
    rl = RaftLog(log(1, 1, 2), committed=2, applied=1)
    assert (rl.last_index, rl.last_term, rl.persisted, rl.unsent_from) == (3, 2, 3, 4)
    assert rl.term(0) == 0 and rl.term(4) is None
    assert [e.index for e in rl.entries_to_apply()] == [2]


def test_restored_log_must_be_contiguous_and_cursors_ordered() -> None:
    with pytest.raises(InvariantViolation):
        RaftLog([Entry(2, 1)])
    with pytest.raises(InvariantViolation):
        RaftLog(log(1), committed=2)


def test_slice_limits_never_starve_a_big_entry() -> None:
    rl = RaftLog([Entry(1, 1, b"x" * 100), Entry(2, 1, b"y"), Entry(3, 1, b"z")])
    assert [e.index for e in rl.slice(1, 4, max_bytes=10)] == [1]
    assert [e.index for e in rl.slice(2, 4, max_bytes=10)] == [2, 3]
    assert [e.index for e in rl.slice(1, 4, max_count=2)] == [1, 2]
    assert rl.slice(4, 9) == []


def test_truncation_pulls_back_the_durable_and_unsent_cursors() -> None:
    rl = RaftLog(log(1, 1, 1, 1), committed=1)
    assert rl.maybe_append(2, 1, [Entry(3, 2, b"n")]) == 3
    assert (rl.last_index, rl.persisted, rl.unsent_from) == (3, 2, 3)
    assert [e.index for e in rl.unsent_entries()] == [3]


def test_committed_entries_are_never_truncated() -> None:
    rl = RaftLog(log(1, 1), committed=2)
    with pytest.raises(InvariantViolation):
        rl.maybe_append(1, 1, [Entry(2, 2)])


def test_commit_never_moves_back_nor_past_the_log() -> None:
    rl = RaftLog(log(1, 1))
    assert rl.commit_to(2) and not rl.commit_to(1)
    with pytest.raises(InvariantViolation):
        rl.commit_to(3)


def test_applicable_waits_for_durability() -> None:
    rl = RaftLog()
    rl.append(log(1, 1))
    rl.commit_to(2)
    assert rl.entries_to_apply() == []
    rl.mark_sent(2)
    assert rl.persisted_to(1, 1)
    assert [e.index for e in rl.entries_to_apply()] == [1]


@pytest.mark.parametrize(("index", "term", "want"), [(5, 3, (5, 2)), (5, 1, (2, 1)), (9, 0, (0, 0)), (3, 2, (3, 2))])
def test_find_conflict_by_term(index: int, term: int, want: tuple[int, int]) -> None:
    assert RaftLog(log(1, 1, 2, 2, 2)).find_conflict_by_term(index, term) == want


def test_append_is_linear() -> None:
    """Many small appends followed by slicing must not copy the whole log per entry."""
    rl = RaftLog()
    for i in range(1, 50_001):
        rl.append([Entry(i, 1)])
        if i % 100 == 0:
            rl.mark_sent(i)
            rl.persisted_to(i, 1)
            rl.commit_to(i)
            rl.applied_to(i)
    assert rl.applied == 50_000
