"""What a DLedger leader's retention must respect, and which followers it can no longer feed.

The Raft core has no snapshots: a follower that needs an entry the leader's retention
deleted can never be caught up by this leader (the core stops sending it entries; it
neither crashes nor retries in a loop). Two things follow, decided here:

* **Hold back.** While a follower is connected (the leader heard from it within an election
  timeout), the leader's store keeps the entry at the follower's match index and everything
  after it (``keep_from``, a DLedger index, registered with ``MessageStore.add_ledger_guard``),
  as the native store keeps the segments a connected slave still needs. A silent follower
  holds nothing back: a member that is down for good must not fill the disk. The store
  ignores the guard once the disk is past the forcible ratio (85%): a full disk would stop
  the whole group, so a lagging follower is given up instead.
* **Report.** A follower the leader has probed down to its first index without finding
  that it holds the entry before it (the core then sends it only an empty probe per
  heartbeat answer, in case its store was re-seeded from a copy) is *stuck*:
  logged at ERROR once (and at WARNING when it is no longer stuck) and listed in the
  status. It needs a copy of another member's store (docs/dledger.md, "Retention").

``MemberWatch.observe`` runs on the driver's event loop (``run`` polls it, the broker also
calls ``refresh`` on role changes); ``keep_from``
is read from the store's clean thread and only ever returns the last observed value.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from ledgermq.raft import RaftNode, Role
from ledgermq.raft.storage import LogStorage
from ledgermq.raftio.driver import RaftDriver

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MemberNeeds:
    keep_from: int | None = None
    """The lowest DLedger index a connected follower still needs stored (None: nothing)."""
    stuck: frozenset[str] = frozenset()
    """Followers that need entries this leader no longer stores."""


def member_needs(node: RaftNode, storage: LogStorage) -> MemberNeeds:
    """The leader's view now (nothing off a leader).

    A follower matched up to raft index ``m`` gets its next Append with ``prev = m``, so the
    leader needs the term of raft ``m``, i.e. DLedger entry ``m - 1``, kept. Right after an
    election every match is 0 until the followers answer: everything is held meanwhile."""
    if node.role is not Role.LEADER:
        return MemberNeeds()
    first = storage.first_index()
    active = node.recently_active()
    keep: list[int] = []
    stuck: set[str] = set()
    for peer, (match, nxt, _state) in node.progress().items():
        if peer == node.id:
            continue
        if nxt <= first and match < first - 1:
            stuck.add(peer)  # probed down to our first index, and not known to hold the entry before it
        elif peer in active:
            keep.append(match - 1)
    return MemberNeeds(min(keep) if keep else None, frozenset(stuck))


class MemberWatch:
    """The last ``member_needs`` of one node, with the stuck followers logged once each."""

    def __init__(self, self_id: str) -> None:
        self.self_id = self_id
        self.needs = MemberNeeds()

    def keep_from(self) -> int | None:
        """The store's ledger guard (any thread)."""
        return self.needs.keep_from

    def observe(self, node: RaftNode, storage: LogStorage) -> MemberNeeds:
        needs = member_needs(node, storage)
        for peer in sorted(needs.stuck - self.needs.stuck):
            log.error(
                "DLedger %s: member %s needs entries below this leader's first index %d, which retention "
                "deleted; it cannot catch up from this leader (no snapshots): transfer leadership to a member "
                "that still has them, or re-seed it (ledgermq store reseed)",
                self.self_id,
                peer,
                storage.first_index(),
            )
        for peer in sorted(self.needs.stuck - needs.stuck):
            log.warning("DLedger %s: member %s is no longer stuck", self.self_id, peer)
        self.needs = needs
        return needs

    def refresh(self, driver: RaftDriver | None) -> None:
        """Observe ``driver`` now (a missing or failed driver holds nothing back); never raises."""
        try:
            if driver is None or driver.failed is not None:
                self.needs = MemberNeeds()
            else:
                self.observe(driver.node, driver.storage)
        except Exception:
            log.exception("DLedger %s: member watch failed; retrying", self.self_id)

    async def run(self, driver: Callable[[], RaftDriver | None], interval_s: float) -> None:
        """``refresh`` with whichever driver runs now, every ``interval_s`` until cancelled
        (and call ``refresh`` on role changes, so a new leader holds back at once)."""
        while True:
            self.refresh(driver())
            await asyncio.sleep(interval_s)
