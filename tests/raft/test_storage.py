"""The log's storage split: ``MemoryStorage``'s contract, and a core whose memory does not grow with the log.

In DLedger mode the log is the commit log, so a node that kept every entry it ever saw
would hold gigabytes. After a long run the core must hold only its unstable tail and
what is in flight; everything durable is read back from storage when needed.
"""

from __future__ import annotations

import gc
import sys
import types
from typing import Any

import pytest

from ledgermq.errors import InvariantViolation
from ledgermq.raft import Entry, HardState, Message, MsgType, RaftNode, Role
from ledgermq.raft.storage import LogStorage, MemoryStorage
from tests.raft.cluster import Cluster, config, drain, log, node, storage

# -- MemoryStorage -----------------------------------------------------------------------------


def test_memory_storage_is_a_log_storage() -> None:
    s: LogStorage = MemoryStorage(log(1, 2))
    assert (s.first_index(), s.last_index(), s.term(0), s.term(2)) == (1, 2, 0, 2)
    with pytest.raises(InvariantViolation):
        s.term(3)


def test_memory_storage_append_replaces_the_conflicting_suffix() -> None:
    s = MemoryStorage(log(1, 1, 1))
    s.append([Entry(2, 2, b"x")])
    assert s.last_index() == 2 and s.term(2) == 2
    s.append([Entry(3, 2)])
    assert s.last_index() == 3
    with pytest.raises(InvariantViolation, match="gap"):
        s.append([Entry(5, 2)])
    s.truncate_after(1)
    assert s.last_index() == 1


def test_memory_storage_entries_honour_max_bytes_but_return_one() -> None:
    s = MemoryStorage([Entry(1, 1, b"x" * 10), Entry(2, 1, b"y" * 10), Entry(3, 1, b"z")])
    assert [e.index for e in s.entries(1, 4, 1)] == [1]
    assert [e.index for e in s.entries(1, 4, 20)] == [1, 2]
    assert [e.index for e in s.entries(1, 4, 1 << 20)] == [1, 2, 3]
    assert s.entries(2, 2, 0) == []
    with pytest.raises(InvariantViolation):
        s.entries(1, 5, 100)


def test_entries_keyword_still_builds_a_memory_storage() -> None:
    n = RaftNode(config("n0"), ["n0", "n1"], HardState(term=1), entries=log(1, 1))
    assert isinstance(n.storage, MemoryStorage) and n.last_index == 2 and n.persisted_index == 2
    with pytest.raises(ValueError, match="either"):
        RaftNode(config("n0"), ["n0"], storage=MemoryStorage(), entries=())
    with pytest.raises(TypeError, match="LogStorage"):
        RaftNode(config("n0"), ["n0"], HardState(term=1), log(1))  # type: ignore[arg-type]


# -- memory of a long run ------------------------------------------------------------------------


def _reachable_entries(root: object, exclude: object) -> tuple[int, int]:
    """Entries reachable from ``root`` without passing through ``exclude``, and the bytes reached.

    Types, modules and functions are not followed: they lead to globals, not to state the
    node holds.
    """
    seen: set[int] = {id(exclude)}
    stack: list[Any] = [root]
    count = size = 0
    skip = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, skip):
            continue
        seen.add(id(obj))
        size += sys.getsizeof(obj)
        if isinstance(obj, Entry):
            count += 1
        stack.extend(gc.get_referents(obj))
    return count, size


PROPOSALS = 100_000
BATCH = 100


def test_core_memory_is_bounded_by_the_unstable_tail_not_the_log() -> None:
    """100k proposals through three nodes: storage holds them all, the cores hold none once durable."""
    c = Cluster.of(3, max_inflight=8)
    lead = c.elect("n0")
    max_unstable = 0
    for start in range(0, PROPOSALS, BATCH):
        for i in range(BATCH):
            lead.propose(b"m%d" % (start + i))
        max_unstable = max(max_unstable, *(n._st.log.unstable_len for n in c.nodes.values()))
        c.stabilize()
    assert max_unstable <= BATCH + 1
    for n in c.nodes.values():
        s = storage(n)
        assert n.commit == n.applied == s.last_index() >= PROPOSALS
        assert n._st.log.unstable_len == 0
        held, _ = _reachable_entries(n, s)
        assert held == 0, f"{n.id} still references {held} entries besides its storage"
        # Durable entries were read back: to apply them, and (on the leader) to replicate them.
        assert s.reads >= PROPOSALS // BATCH
    assert c.nodes["n1"].entries(1, PROPOSALS) == lead.entries(1, PROPOSALS)


# -- reading storage in bounded slices -------------------------------------------------------------


def _elect(n: RaftNode) -> None:
    """Make ``n`` (pre-vote off) leader of a two-node group by granting n1's vote."""
    n.campaign()
    drain(n)
    n.step(Message(MsgType.VOTE_RESP, "n1", n.id, term=n.term))
    assert n.role is Role.LEADER
    drain(n)


def test_appends_read_from_storage_honour_max_bytes_per_append() -> None:
    """A follower catching up from far behind gets the durable log in max_bytes_per_append slices."""
    big = [Entry(i, 1, b"x" * 400) for i in range(1, 11)]
    lead = node("n0", ["n0", "n1"], HardState(term=1), big, max_bytes_per_append=1000, pre_vote=False)
    _elect(lead)
    reads = storage(lead).reads
    lead.step(Message(MsgType.APPEND_RESP, "n1", "n0", term=lead.term, index=10, reject=True, reject_hint=0))
    (probe,) = [m for m in drain(lead) if m.type is MsgType.APPEND and m.dst == "n1"]
    assert [e.index for e in probe.entries] == [1, 2]  # 800 bytes; a third entry would pass 1000
    assert storage(lead).reads > reads
    lead.step(Message(MsgType.APPEND_RESP, "n1", "n0", term=lead.term, index=2))
    batches = [m.entries for m in drain(lead) if m.type is MsgType.APPEND and m.dst == "n1"]
    assert all(sum(len(e.data) for e in b) <= 1000 for b in batches)
    assert [e.index for b in batches for e in b] == list(range(3, 12))


def test_restart_hands_out_a_long_unapplied_log_in_slices() -> None:
    """committed_entries are read from storage max_apply_bytes_per_ready at a time, never all at once."""
    entries = [Entry(i, 1, b"y" * 100) for i in range(1, 101)]
    n = node("n1", hard_state=HardState(term=1, commit=100), entries=entries, max_apply_bytes_per_ready=1000)
    sizes = []
    while n.has_ready():
        rd = n.ready()
        sizes.append(len(rd.committed_entries))
        n.advance(rd)
    assert n.applied == 100 and sizes == [10] * 10


class _CompactedStorage(MemoryStorage):
    """A MemoryStorage that claims everything below ``first`` was compacted away."""

    __slots__ = ("first",)

    def __init__(self, entries: list[Entry], first: int) -> None:
        super().__init__(entries)
        self.first = first

    def first_index(self) -> int:
        return self.first

    def term(self, index: int) -> int:
        if index < self.first - 1:
            raise InvariantViolation(f"term({index}) was compacted")
        return super().term(index)


def test_leader_does_not_read_below_compacted_storage() -> None:
    """Without snapshots a follower that needs compacted entries is left behind, not crashed into."""
    s = _CompactedStorage(log(1, 1, 1, 1), first=3)
    lead = RaftNode(config("n0", pre_vote=False), ["n0", "n1"], HardState(term=1, commit=4), s, applied=4)
    assert lead.log_term(1) is None and lead.log_term(2) == 1
    _elect(lead)
    assert lead.progress()["n1"][1] == 5
    # n1 rejects the probe at 4 and hints it has nothing: it needs entry 1, which is gone.
    lead.step(Message(MsgType.APPEND_RESP, "n1", "n0", term=lead.term, index=4, reject=True, reject_hint=0))
    assert lead.progress()["n1"][1] == 1
    assert [m for m in drain(lead) if m.type is MsgType.APPEND] == []
    lead.tick()
    assert [m for m in drain(lead) if m.type is MsgType.APPEND] == []
    with pytest.raises(InvariantViolation, match="compacted"):
        RaftNode(config("n0"), ["n0"], HardState(term=1, commit=4), _CompactedStorage(log(1, 1, 1, 1), 3), applied=1)
