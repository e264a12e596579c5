"""Why a proposal or a request was refused; callers branch on the class, never the text."""

from __future__ import annotations

from ledgermq.errors import LedgerError


class ProposalDroppedError(LedgerError):
    """The node cannot take this proposal now; retrying elsewhere or later may work."""


class NotLeaderError(ProposalDroppedError):
    """Only the leader appends; ``leader_hint`` is who this node last heard lead (or None)."""

    def __init__(self, leader_hint: str | None) -> None:
        super().__init__(f"not the leader (leader hint: {leader_hint or 'unknown'})")
        self.leader_hint = leader_hint


class LeaderTransferInProgressError(ProposalDroppedError):
    """A leadership transfer is under way; the old leader stops appending so the target can catch up."""

    def __init__(self, transferee: str) -> None:
        super().__init__(f"leadership is being transferred to {transferee}")
        self.transferee = transferee
