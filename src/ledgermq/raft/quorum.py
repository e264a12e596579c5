"""Majority arithmetic, kept apart so it can be checked exhaustively against a naive oracle."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from enum import Enum


class VoteResult(Enum):
    PENDING = "PENDING"
    WON = "WON"
    LOST = "LOST"


def majority(n: int) -> int:
    return n // 2 + 1


def committed_index(voters: Collection[str], matches: Mapping[str, int]) -> int:
    """The largest index a majority of ``voters`` has durably matched (missing voters count as 0).

    Sorting descending, the value at position ``majority - 1`` is held by at least a
    majority, and no larger value is.
    """
    if not voters:
        return 0
    acked = sorted((matches.get(v, 0) for v in voters), reverse=True)
    return acked[majority(len(voters)) - 1]


def vote_result(voters: Collection[str], votes: Mapping[str, bool]) -> VoteResult:
    """WON once a majority granted, LOST once a majority is out of reach, PENDING otherwise.

    Votes from non-voters are ignored so a stray or forged reply cannot tip the count.
    """
    granted = rejected = 0
    for v in voters:
        answer = votes.get(v)
        if answer is True:
            granted += 1
        elif answer is False:
            rejected += 1
    need = majority(len(voters))
    if granted >= need:
        return VoteResult.WON
    if len(voters) - rejected < need:
        return VoteResult.LOST
    return VoteResult.PENDING


def has_quorum(voters: Collection[str], active: Collection[str]) -> bool:
    """Whether the ``active`` set holds a majority of ``voters`` (check-quorum, §6.2 of the thesis)."""
    return sum(1 for v in voters if v in active) >= majority(len(voters))
