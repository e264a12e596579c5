"""Whom an election picks (RocketMQ's DefaultElectPolicy), as a pure function.

Candidates are the alive replicas of the SyncStateSet, and only when none is left and
unclean election is on, the other alive replicas. Among them: the old master if it is still
alive and no other replica was asked for; the replica asked for if it is a candidate (and
nobody otherwise); else the best by (highest epoch, highest max offset, lowest election
priority), with the lowest broker id breaking ties so every node picks the same one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ledgermq.controller.events import CandidateInfo

__all__ = ["elect"]


def _try(
    pool: Iterable[int], alive: set[int], old: int | None, prefer: int | None, info: Mapping[int, CandidateInfo]
) -> int | None:
    candidates = sorted(set(pool) & alive)
    if not candidates:
        return None
    if old in candidates and (prefer is None or prefer == old):
        return old
    if prefer is not None:
        return prefer if prefer in candidates else None

    def rank(broker_id: int) -> tuple[int, int, int, int]:
        c = info.get(broker_id, CandidateInfo(broker_id))
        return (-c.epoch, -c.max_offset, c.election_priority, broker_id)

    return min(candidates, key=rank)


def elect(
    sync_state_set: set[int],
    all_replicas: set[int],
    alive: set[int],
    old_master: int | None,
    prefer: int | None,
    unclean: bool,
    info: Mapping[int, CandidateInfo],
) -> int | None:
    """The new master's id, or None when no replica qualifies."""
    chosen = _try(sync_state_set, alive, old_master, prefer, info)
    if chosen is None and unclean:
        chosen = _try(all_replicas, alive, old_master, prefer, info)
    return chosen
