"""A tiny synchronous harness for unit tests: persist at once, deliver everything, until quiet."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from ledgermq.raft import Entry, HardState, Message, RaftConfig, RaftNode, Ready, Repair
from ledgermq.raft.storage import MemoryStorage


def config(node_id: str, **overrides: Any) -> RaftConfig:
    return RaftConfig(node_id, **{"election_timeout_ticks": 10, "heartbeat_ticks": 1, **overrides})


def node(
    node_id: str = "n0",
    peers: Sequence[str] = ("n0", "n1", "n2"),
    hard_state: HardState | None = None,
    entries: Sequence[Entry] = (),
    applied: int = 0,
    repair: Repair | None = None,
    **overrides: Any,
) -> RaftNode:
    """A node whose election jitter is seeded by its id, so every test run is the same."""
    rng = random.Random(node_id)
    st = MemoryStorage(entries)
    return RaftNode(config(node_id, **overrides), peers, hard_state, st, applied=applied, rng=rng, repair=repair)


def log(*terms: int) -> list[Entry]:
    """Entries 1..n with the given terms (data names the position, so logs are easy to compare)."""
    return [Entry(i, t, b"e%d" % i) for i, t in enumerate(terms, start=1)]


def storage(n: RaftNode) -> MemoryStorage:
    s = n.storage
    assert isinstance(s, MemoryStorage)
    return s


def persist(n: RaftNode, index: int) -> None:
    """Write ``n``'s not-yet-durable entries through ``index`` to its storage, then acknowledge them.

    For tests that hold writes back (``drain(persist=False)``) and release them later.
    """
    entries = n.entries(n.persisted_index + 1, index + 1)
    storage(n).append(entries)
    n.persisted(index, entries[-1].term)


def drain(n: RaftNode, persist: bool = True) -> list[Message]:
    """Handle every Ready of ``n`` (persisting entries at once unless told not to); the messages sent."""
    out: list[Message] = []
    while n.has_ready():
        rd: Ready = n.ready()
        out += rd.messages
        n.advance(rd)
        if persist and rd.entries_to_persist:
            storage(n).append(rd.entries_to_persist)
            last = rd.entries_to_persist[-1]
            n.persisted(last.index, last.term)
    return out


class Cluster:
    def __init__(self, nodes: dict[str, RaftNode]) -> None:
        self.nodes = nodes
        self.cut: set[tuple[str, str]] = set()
        self.sent: list[Message] = []

    @classmethod
    def of(cls, n: int = 3, **overrides: Any) -> Cluster:
        ids = [f"n{i}" for i in range(n)]
        return cls({i: node(i, ids, **overrides) for i in ids})

    def isolate(self, nid: str) -> None:
        self.cut |= {(a, b) for a in self.nodes for b in self.nodes if (a == nid) != (b == nid)}

    def stabilize(self) -> None:
        while True:
            msgs = [m for n in self.nodes.values() for m in drain(n)]
            if not msgs:
                return
            self.sent += msgs
            for m in msgs:
                if (m.src, m.dst) not in self.cut:
                    self.nodes[m.dst].step(m)

    def elect(self, nid: str) -> RaftNode:
        self.nodes[nid].campaign()
        self.stabilize()
        return self.nodes[nid]
