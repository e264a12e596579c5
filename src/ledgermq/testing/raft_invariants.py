"""Safety properties of a Raft cluster, checked incrementally after every simulated step.

The checker only sees what a node exposes (role, term, commit, log terms) and what its
Ready hands the caller, so it judges the core from the outside.

* Election safety: at most one leader per term (Raft §5.2).
* Log matching (§5.3): an ``(index, term)`` pair names one entry, and one term at
  ``index - 1``; by induction, equal pairs mean equal prefixes. Checked on every entry a
  Ready asks to persist, which is every entry that ever enters a log.
* Committed history: the first node to commit an index fixes that entry; every node
  that later commits the index must hold the same entry, and no node's committed
  prefix may change (a restarted node re-checks its whole restored prefix).
* Leader completeness (§5.4): a leader of term T holds every entry first committed in a
  term below T.
* State-machine safety (§5.4.3): entries are applied in index order, each equal to the
  committed history.
* Commit monotonicity: a node's commit index never falls during one lifetime; the
  durable hard state never moves back (term, commit), nor changes its vote within a
  term, so a restart starts from a commit that was true before.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledgermq.raft import Entry, HardState, RaftNode, Role


class InvariantFailure(AssertionError):
    """A safety property broke; the message names it (the simulator adds seed and trace)."""


@dataclass(slots=True)
class _Committed:
    term: int
    entry: Entry
    commit_term: int
    """The term of the node that first committed it (a leader, since only leaders advance commit first)."""


class ClusterChecker:
    def __init__(self) -> None:
        self.leaders: dict[int, str] = {}
        self.pairs: dict[tuple[int, int], tuple[bytes, str, int]] = {}
        self.history: list[_Committed] = []
        self._checked_commit: dict[str, int] = {}
        self._leader_checked: set[tuple[str, int]] = set()
        self._applied: dict[str, int] = {}

    @property
    def committed_index(self) -> int:
        return len(self.history)

    def committed_entry(self, index: int) -> Entry:
        return self.history[index - 1].entry

    def restarted(self, node_id: str, applied: int) -> None:
        self._checked_commit[node_id] = 0
        self._applied[node_id] = applied

    def check_node(self, n: RaftNode) -> None:
        """Everything observable on one node after a step."""
        if n.role is Role.LEADER:
            holder = self.leaders.setdefault(n.term, n.id)
            if holder != n.id:
                raise InvariantFailure(f"two leaders in term {n.term}: {holder} and {n.id}")
            if (n.id, n.term) not in self._leader_checked:
                self._leader_checked.add((n.id, n.term))
                self._check_completeness(n)
        checked = self._checked_commit.get(n.id, 0)
        if n.commit < checked:
            raise InvariantFailure(f"{n.id} commit went back from {checked} to {n.commit}")
        for i in range(checked + 1, n.commit + 1):
            self._check_committed(n, i)
        self._checked_commit[n.id] = n.commit

    def _check_committed(self, n: RaftNode, index: int) -> None:
        (entry,) = n.entries(index, index + 1)
        if index <= len(self.history):
            want = self.history[index - 1].entry
            if want != entry:
                raise InvariantFailure(f"{n.id} committed {_fmt(entry)} at {index}, history has {_fmt(want)}")
        elif index == len(self.history) + 1:
            self.history.append(_Committed(entry.term, entry, n.term))
        else:
            raise InvariantFailure(f"{n.id} committed {index} past the history's end {len(self.history)}")

    def _check_completeness(self, n: RaftNode) -> None:
        for i, c in enumerate(self.history, start=1):
            if c.commit_term < n.term and n.log_term(i) != c.term:
                raise InvariantFailure(
                    f"leader {n.id} of term {n.term} lacks {_fmt(c.entry)} committed in term {c.commit_term}"
                    f" (has term {n.log_term(i)} at {i})"
                )

    def check_persist(self, n: RaftNode, entries: tuple[Entry, ...]) -> None:
        for e in entries:
            prev = n.log_term(e.index - 1)
            if prev is None:
                raise InvariantFailure(f"{n.id} persists {_fmt(e)} with no entry before it")
            key = (e.index, e.term)
            value = (e.data, e.kind.value, prev)
            seen = self.pairs.setdefault(key, value)
            if seen != value:
                raise InvariantFailure(f"log matching: {key} is {value} on {n.id} but {seen} elsewhere")

    def check_apply(self, node_id: str, entries: tuple[Entry, ...]) -> None:
        applied = self._applied.get(node_id, 0)
        for e in entries:
            if e.index != applied + 1:
                raise InvariantFailure(f"{node_id} applied {e.index} after {applied}")
            if e.index > len(self.history) or self.history[e.index - 1].entry != e:
                raise InvariantFailure(f"{node_id} applied {_fmt(e)} which is not the committed entry")
            applied = e.index
        self._applied[node_id] = applied

    @staticmethod
    def check_hard_state(node_id: str, old: HardState, new: HardState) -> None:
        if new.term < old.term or new.commit < old.commit:
            raise InvariantFailure(f"{node_id} durable hard state went back: {old} -> {new}")
        if new.term == old.term and old.vote is not None and new.vote != old.vote:
            raise InvariantFailure(f"{node_id} changed its vote in term {new.term}: {old.vote} -> {new.vote}")

    def check_logs_agree(self, nodes: list[RaftNode]) -> None:
        """A full pairwise log-matching check, for the end of a run (quadratic, so not per step)."""
        for a_pos, a in enumerate(nodes):
            for b in nodes[a_pos + 1 :]:
                top = min(a.last_index, b.last_index)
                same = next((i for i in range(top, 0, -1) if a.log_term(i) == b.log_term(i)), 0)
                if a.entries(1, same + 1) != b.entries(1, same + 1):
                    raise InvariantFailure(f"{a.id} and {b.id} agree on ({same}, term) but not on the prefix")


def _fmt(e: Entry) -> str:
    return f"{e.index}/{e.term} {e.kind.value} {e.data!r}"
