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
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ledgermq.errors import LedgerError
from ledgermq.raft.errors import ProposalDroppedError
from ledgermq.raft.types import Entry, Role

log = logging.getLogger(__name__)

__all__ = [
    "DriverNotRunningError",
    "LeadershipLostError",
    "OnSettled",
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


OnSettled = Callable[[int, "BaseException | None"], None]
"""(index, None when committed, else the error) -> None: a proposal told without a future."""


@dataclass(slots=True)
class _Pending:
    term: int
    future: asyncio.Future[int] | None
    on_settled: OnSettled | None = None


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

    def add_callback(self, index: int, term: int, on_settled: OnSettled) -> None:
        """Tell ``on_settled`` of the proposal just appended at ``index`` in ``term``, from
        the step that decides it (a future would make a loop step of its own per entry)."""
        self._by_index[index] = _Pending(term, None, on_settled)

    @staticmethod
    def _resolve(p: _Pending, index: int, error: BaseException | None) -> None:
        fut = p.future
        if fut is not None:
            if fut.done():
                return
            if error is None:
                fut.set_result(index)
            else:
                fut.set_exception(error)
            return
        assert p.on_settled is not None
        try:
            p.on_settled(index, error)
        except Exception:  # the others must still be told
            log.exception("a proposal's callback failed for index %d", index)

    def settle(self, committed: Iterable[Entry]) -> None:
        """Resolve the proposals these committed entries decide: the index if the entry
        carries the proposal's term, ProposalOverwrittenError if another term's does."""
        if not self._by_index:
            return
        for e in committed:
            p = self._by_index.pop(e.index, None)
            if p is None:
                continue
            if e.term == p.term:
                self._resolve(p, e.index, None)
            else:
                self._resolve(
                    p,
                    e.index,
                    ProposalOverwrittenError(
                        f"index {e.index} committed with term {e.term}, not the proposal's {p.term}"
                    ),
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
            self._resolve(p, index, error(index, p.term))
