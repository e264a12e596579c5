"""The leader's side of a follower that needs entries its storage no longer has (no
snapshots): it sends that follower nothing but heartbeats and, once per heartbeat answer,
an empty probe at its first index; a follower that turns out to hold that entry (its store
re-seeded from a copy) is replicated to from there; one that does not costs one probe per
heartbeat, never a loop."""

from __future__ import annotations

from collections.abc import Sequence

from ledgermq.raft import RaftConfig, RaftNode, Role
from ledgermq.raft.storage import MemoryStorage
from ledgermq.raft.types import Entry, HardState, Message, MsgType

PEERS = ["n0", "n1", "n2"]


class CompactedStorage(MemoryStorage):
    """A MemoryStorage that says entries below ``first`` are gone (as retention leaves it)."""

    __slots__ = ("first",)

    def __init__(self, entries: Sequence[Entry], first: int) -> None:
        super().__init__(entries)
        self.first = first

    def first_index(self) -> int:
        return self.first


def leader_over_compacted_log() -> tuple[RaftNode, Message]:
    """n0 leads term 2 over entries 1..20 (term 1) whose first 10 are compacted; with the
    Append its election sent n2."""
    log = [Entry(i, 1, b"e%d" % i) for i in range(1, 21)]
    node = RaftNode(
        RaftConfig("n0", pre_vote=False), PEERS, HardState(1, None, 20), storage=CompactedStorage(log, 11), applied=20
    )
    node.campaign()
    drain(node)
    node.step(Message(MsgType.VOTE_RESP, "n1", "n0", 2))
    assert node.role is Role.LEADER
    (first_append,) = to(drain(node), "n2", MsgType.APPEND)
    return node, first_append


def drain(node: RaftNode) -> list[Message]:
    """Carry out Readies (entries persisted at once) and return the messages sent."""
    sent: list[Message] = []
    while node.has_ready():
        rd = node.ready()
        if rd.entries_to_persist:
            last = rd.entries_to_persist[-1]
            node.storage.append(rd.entries_to_persist)  # type: ignore[attr-defined]
            node.advance(rd)
            node.persisted(last.index, last.term)
        else:
            node.advance(rd)
        sent += rd.messages
    return sent


def to(msgs: list[Message], peer: str, kind: MsgType) -> list[Message]:
    return [m for m in msgs if m.dst == peer and m.type is kind]


def make_n2_need_compacted_entries(node: RaftNode, first_append: Message) -> None:
    """n2 rejects the election's Append: it holds only entries up to 5."""
    node.step(
        Message(MsgType.APPEND_RESP, "n2", "n0", 2, index=first_append.index, reject=True, reject_hint=5, log_term=1)
    )
    assert node.progress()["n2"][1] <= 10  # next is below the first index: nothing to send
    assert to(drain(node), "n2", MsgType.APPEND) == []


def test_a_follower_below_the_first_index_gets_one_empty_probe_per_heartbeat_answer() -> None:
    node, first_append = leader_over_compacted_log()
    make_n2_need_compacted_entries(node, first_append)
    for _ in range(3):
        node.step(Message(MsgType.HEARTBEAT_RESP, "n2", "n0", 2))
        (probe,) = to(drain(node), "n2", MsgType.APPEND)
        assert (probe.index, probe.log_term, probe.entries) == (10, 1, ())
        # It does not hold entry 10: rejected, and nothing more is sent until the next heartbeat answer.
        node.step(Message(MsgType.APPEND_RESP, "n2", "n0", 2, index=10, reject=True, reject_hint=5, log_term=1))
        assert to(drain(node), "n2", MsgType.APPEND) == []
    assert node.role is Role.LEADER


def test_a_reseeded_follower_that_holds_the_first_entry_is_caught_up() -> None:
    node, first_append = leader_over_compacted_log()
    make_n2_need_compacted_entries(node, first_append)
    node.step(Message(MsgType.HEARTBEAT_RESP, "n2", "n0", 2))
    (probe,) = to(drain(node), "n2", MsgType.APPEND)
    node.step(Message(MsgType.APPEND_RESP, "n2", "n0", 2, index=probe.index))  # it holds entry 10 now
    sent = to(drain(node), "n2", MsgType.APPEND)
    assert sent and sent[0].index == 10 and [e.index for e in sent[0].entries][:1] == [11]
    assert node.progress()["n2"][0] == 10
