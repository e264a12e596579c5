"""RaftLog over storage: cursors, slicing across the durable/unstable split, and acknowledgements."""

from __future__ import annotations

import pytest

from ledgermq.errors import InvariantViolation
from ledgermq.raft import Entry
from ledgermq.raft.log import RaftLog
from ledgermq.raft.storage import MemoryStorage
from tests.raft.cluster import log


def _log(*terms: int, committed: int = 0, applied: int = 0) -> tuple[RaftLog, MemoryStorage]:
    storage = MemoryStorage(log(*terms))
    return RaftLog(storage, committed=committed, applied=applied), storage


def _write(rl: RaftLog, storage: MemoryStorage) -> list[Entry]:
    """The caller's step 2: take the unsent entries and store them (not yet acknowledged)."""
    entries = rl.take_unsent()
    storage.append(entries)
    return entries


def test_restored_log_is_durable_and_sentinel_matches() -> None:
    rl, _ = _log(1, 1, 2, committed=2, applied=1)
    assert (rl.last_index, rl.last_term, rl.persisted, rl.unsent_from, rl.unstable_len) == (3, 2, 3, 4, 0)
    assert rl.term(0) == 0 and rl.term(4) is None
    assert [e.index for e in rl.entries_to_apply()] == [2]


def test_restored_log_must_be_contiguous_and_cursors_ordered() -> None:
    with pytest.raises(InvariantViolation):
        MemoryStorage([Entry(2, 1)])
    with pytest.raises(InvariantViolation):
        _log(1, committed=2)


def test_slice_limits_never_starve_a_big_entry() -> None:
    rl = RaftLog(MemoryStorage([Entry(1, 1, b"x" * 100), Entry(2, 1, b"y"), Entry(3, 1, b"z")]))
    assert [e.index for e in rl.slice(1, 4, max_bytes=10)] == [1]
    assert [e.index for e in rl.slice(2, 4, max_bytes=10)] == [2, 3]
    assert [e.index for e in rl.slice(1, 4, max_count=2)] == [1, 2]
    assert rl.slice(4, 9) == []


def test_slice_spans_storage_and_the_unstable_tail() -> None:
    rl, storage = _log(1, 1)
    rl.append([Entry(3, 1, b"abc"), Entry(4, 1, b"defg")])
    assert [e.index for e in rl.slice(1, 5)] == [1, 2, 3, 4]
    assert storage.reads == 1
    # e1 and e2 are 2 bytes each: 4 + 3 fits in 7, the 4 more bytes of entry 4 do not.
    assert [e.index for e in rl.slice(1, 5, max_bytes=7)] == [1, 2, 3]
    assert [e.index for e in rl.slice(1, 5, max_bytes=1)] == [1]
    assert [e.index for e in rl.slice(3, 5, max_bytes=1)] == [3]


def test_acknowledged_entries_leave_memory() -> None:
    rl, storage = _log()
    rl.append(log(1, 1, 1))
    _write(rl, storage)
    assert rl.unstable_len == 3
    assert rl.persisted_to(2, 1)
    assert (rl.persisted, rl.unstable_len, rl.term(2), rl.term(3)) == (2, 1, 1, 1)
    assert rl.persisted_to(3, 1)
    assert rl.unstable_len == 0 and rl.slice(1, 4) == log(1, 1, 1)


def test_acknowledging_without_writing_is_a_contract_violation() -> None:
    rl, _ = _log()
    rl.append(log(1))
    rl.take_unsent()
    with pytest.raises(InvariantViolation, match="storage does not hold"):
        rl.persisted_to(1, 1)


def test_truncation_pulls_back_the_durable_and_unsent_cursors() -> None:
    rl, _ = _log(1, 1, 1, 1, committed=1)
    assert rl.maybe_append(2, 1, [Entry(3, 2, b"n")]) == 3
    assert (rl.last_index, rl.persisted, rl.unsent_from) == (3, 2, 3)
    assert [e.index for e in rl.unsent_entries()] == [3]


def test_conflict_in_storage_is_rewritten_from_the_conflict() -> None:
    """The next entries_to_persist starts at the conflict, which tells the caller where to truncate."""
    rl, storage = _log(1, 1, 1, 1, committed=1)
    assert rl.maybe_append(1, 1, [Entry(2, 1, b"e2"), Entry(3, 2, b"x"), Entry(4, 2, b"y")]) == 4
    assert (rl.persisted, rl.unsent_from, rl.term(3), rl.term(4)) == (2, 3, 2, 2)
    entries = _write(rl, storage)
    assert [(e.index, e.term) for e in entries] == [(3, 2), (4, 2)]
    assert storage.last_index() == 4 and storage.term(3) == 2
    assert rl.persisted_to(4, 2) and rl.unstable_len == 0


def test_committed_entries_are_never_truncated() -> None:
    rl, _ = _log(1, 1, committed=2)
    with pytest.raises(InvariantViolation):
        rl.maybe_append(1, 1, [Entry(2, 2)])


def test_commit_never_moves_back_nor_past_the_log() -> None:
    rl, _ = _log(1, 1)
    assert rl.commit_to(2) and not rl.commit_to(1)
    with pytest.raises(InvariantViolation):
        rl.commit_to(3)


def test_applicable_waits_for_durability() -> None:
    rl, storage = _log()
    rl.append(log(1, 1))
    rl.commit_to(2)
    assert rl.entries_to_apply() == []
    _write(rl, storage)
    assert rl.persisted_to(1, 1)
    assert [e.index for e in rl.entries_to_apply()] == [1]


def test_stale_write_acknowledged_after_an_aba_rewrite_proves_only_its_prefix() -> None:
    """A suffix replaced twice can come back with the same (index, term) while the middle write is queued.

    Write A stores 2..3 of term 1; a term-2 leader replaces 2..3 (write B); a term-3 leader,
    whose log holds the original term-1 entries, replaces them again (write C). When A
    completes, storage holds term 1 at 3 and the ack names (3, 1), exactly our log's entry,
    but B will still overwrite it before C lands: only entry 1 (untouched since A) is safe.
    """
    rl, storage = _log()
    rl.append(log(1))
    a_entries = [Entry(2, 1, b"e2"), Entry(3, 1, b"e3")]
    rl.append(a_entries)
    a = rl.take_unsent()
    assert rl.maybe_append(1, 1, [Entry(2, 2, b"b2"), Entry(3, 2, b"b3")]) == 3
    b = rl.take_unsent()
    assert rl.maybe_append(1, 1, a_entries) == 3
    c = rl.take_unsent()
    assert [e.term for e in c] == [1, 1]

    storage.append(a)
    assert rl.persisted_to(3, 1)
    assert rl.persisted == 1, "write A's tail was superseded; only its untouched prefix is durable"
    storage.append(b)
    assert not rl.persisted_to(3, 2)
    assert rl.persisted == 1 and rl.term(3) == 1
    storage.append(c)
    assert rl.persisted_to(3, 1)
    assert rl.persisted == 3 and rl.slice(1, 4) == storage.entries(1, 4, 1 << 20)


def test_duplicate_acknowledgement_is_ignored() -> None:
    rl, storage = _log()
    rl.append(log(1, 1))
    _write(rl, storage)
    assert rl.persisted_to(2, 1)
    assert not rl.persisted_to(2, 1)
    assert not rl.persisted_to(1, 1)


@pytest.mark.parametrize(("index", "term", "want"), [(5, 3, (5, 2)), (5, 1, (2, 1)), (9, 0, (0, 0)), (3, 2, (3, 2))])
def test_find_conflict_by_term(index: int, term: int, want: tuple[int, int]) -> None:
    assert _log(1, 1, 2, 2, 2)[0].find_conflict_by_term(index, term) == want


def test_append_is_linear() -> None:
    """Many small appends and acknowledgements must not copy the log (or the unstable tail) per entry."""
    rl, storage = _log()
    for i in range(1, 50_001):
        rl.append([Entry(i, 1)])
        if i % 100 == 0:
            _write(rl, storage)
            rl.persisted_to(i, 1)
            rl.commit_to(i)
            rl.applied_to(i)
    assert rl.applied == 50_000 and rl.unstable_len == 0


def test_acknowledging_one_entry_at_a_time_is_linear() -> None:
    """A long unstable tail acknowledged entry by entry: O(1) amortised per acknowledgement."""
    rl, storage = _log()
    n = 50_000
    rl.append([Entry(i, 1) for i in range(1, n + 1)])
    _write(rl, storage)
    for i in range(1, n + 1):
        assert rl.persisted_to(i, 1)
        assert rl.unstable_len == n - i
    assert rl.term(n) == 1 and rl.last_index == n


@pytest.mark.parametrize("seed", range(5))
def test_last_index_is_always_the_durable_part_plus_the_unstable_tail(seed: int) -> None:
    """``last_index`` is a field moved by appends and truncations (read a dozen times per
    round); a seeded walk of leader appends, follower Appends with conflicts in and below the
    durable part, writes and acknowledgements checks it against what the log holds."""
    import random

    rng = random.Random(seed)
    rl, storage = _log(1, 1, 1)
    term = 1
    for _ in range(400):
        op = rng.random()
        if op < 0.3:
            rl.append([Entry(rl.last_index + 1, term, b"l")])
        elif op < 0.6:
            prev = rng.randrange(rl.committed, rl.last_index + 1)
            if rng.random() < 0.3:
                term += 1
            count = rng.randrange(0, 4)
            rl.maybe_append(prev, rl.term(prev) or 0, [Entry(prev + k, term, b"f") for k in range(1, count + 1)])
        elif op < 0.8:
            entries = _write(rl, storage)
            if entries:
                rl.persisted_to(entries[-1].index, entries[-1].term)
        else:
            rl.commit_to(rng.randrange(rl.committed, rl.persisted + 1))
        assert rl.last_index == rl.persisted + rl.unstable_len
        assert rl.term(rl.last_index) is not None and rl.term(rl.last_index + 1) is None
