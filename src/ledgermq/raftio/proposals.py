"""The proposals a ``RaftDriver`` handed to the core and still owes an answer, and the
errors that answer can be.

A proposal is appended to the leader's log at once, but only its commit says whether
it holds: the entry committed at its index must carry the term it was proposed in (else
another leader's entry took the index). Until then leadership may move, and from that
moment this node can no longer tell the outcome. Keeping that bookkeeping here leaves the
driver to carry out Readies; the driver tells this table what committed, what the node's
role became, and when it stopped or failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ledgermq.errors import LedgerError
from ledgermq.raft.errors import ProposalDroppedError
from ledgermq.raft.types import Entry, Role

__all__ = [
    "DriverNotRunningError",
    "LeadershipLostError",
    "PendingProposals",
    "ProposalOutcomeUnknownError",
    "ProposalOverwrittenError",
]


class DriverNotRunningError(ProposalDroppedError):
    """The driver is not started, is stopping, or failed; nothing was appended."""


class ProposalOverwrittenError(ProposalDroppedError):
    """Another entry committed at the proposal's index: it is definitely not in the log."""


class ProposalOutcomeUnknownError(LedgerError):
    """The proposal was appended, but this node can no longer tell whether it will commit.

    A new leader may still commit it, so a blind retry can duplicate the data; a caller
    that must know reads the log (or deduplicates by content) once a leader is known.
    """

    def __init__(self, message: str, index: int, term: int) -> None:
        super().__init__(message)
        self.index = index
        self.term = term


class LeadershipLostError(ProposalOutcomeUnknownError):
    """This node stopped leading (or its term moved on) before the proposal committed."""


ErrorFor = Callable[[int, int], BaseException]
"""(index, term of the proposal) -> the error its future gets."""


@dataclass(slots=True)
class _Pending:
    term: int
    future: asyncio.Future[int]


class PendingProposals:
    """Proposals by log index, each with the term it was proposed in and its future."""

    def __init__(self) -> None:
        self._by_index: dict[int, _Pending] = {}

    def __len__(self) -> int:
        return len(self._by_index)

    def add(self, index: int, term: int) -> asyncio.Future[int]:
        """The future of the proposal just appended at ``index`` in ``term``."""
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._by_index[index] = _Pending(term, fut)
        return fut

    def settle(self, committed: Iterable[Entry]) -> None:
        """Resolve the proposals these committed entries decide: the index if the entry
        carries the proposal's term, ProposalOverwrittenError if another term's does."""
        if not self._by_index:
            return
        for e in committed:
            p = self._by_index.pop(e.index, None)
            if p is None or p.future.done():
                continue
            if e.term == p.term:
                p.future.set_result(e.index)
            else:
                p.future.set_exception(
                    ProposalOverwrittenError(
                        f"index {e.index} committed with term {e.term}, not the proposal's {p.term}"
                    )
                )

    def leadership_changed(self, self_id: str, role: Role, term: int, leader: str | None) -> None:
        """Off the leader role every proposal's outcome is unknown; as leader in a newer
        term, those of older terms are (this term's may still commit)."""
        if not self._by_index:
            return
        if role is not Role.LEADER:
            self.fail(
                lambda i, t: LeadershipLostError(
                    f"{self_id} stopped leading (now {role.value} in term {term}, leader {leader}) "
                    f"before index {i} of term {t} committed; it may still commit",
                    i,
                    t,
                )
            )
        else:
            self.fail(
                lambda i, t: LeadershipLostError(f"term moved from {t} to {term} before index {i} committed", i, t),
                unless_term=term,
            )

    def fail(self, error: ErrorFor, *, unless_term: int | None = None) -> None:
        """Fail every proposal (but those of ``unless_term``), in index order."""
        for index in sorted(self._by_index):
            p = self._by_index[index]
            if unless_term is not None and p.term == unless_term:
                continue
            del self._by_index[index]
            if not p.future.done():
                p.future.set_exception(error(index, p.term))
