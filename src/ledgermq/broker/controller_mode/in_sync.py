"""A master's SyncStateSet: what the controller accepted, what it was asked, who is caught up.

Pure (time and offsets are arguments). The master (``ControllerModeService``) feeds it every
slave ack, every slave that disconnects and a periodic check; it answers with the set to
propose (CONTROLLER_ALTER_SYNC_STATE_SET), one proposal at a time.

* **Grow**: a slave outside the set joins once it acknowledged everything the master holds
  (its ack reaches the master's log end at that moment). Not "within a gap": a message the
  master acknowledged before the slave joined must be on the slave, or electing it could
  lose that message.
* **Shrink**: a member whose connection is gone leaves at once; a member that was last
  caught up more than haMaxTimeSlaveNotCatchup ago leaves at the next check. *Caught up at
  t* means it has since acknowledged everything the master held at t: each ack below the
  log end records (log end, now) as a mark, and an ack that passes a mark dates the slave's
  catch-up to that mark. A slave that keeps up under a steady load passes marks all the
  time; one that stalls passes none. A connected slave whose last ack reaches the log end
  as it is at the check is caught up then: on an idle master nothing new arrives to pass,
  and the slave's acks come only every haSendHeartbeatInterval (5 s by default, longer than
  the 3 s lag limit), so without this an idle, fully copied slave left and rejoined the set
  every few seconds.
* **Relied on only once accepted**, conservatively: for acknowledgements
  (allAckInSyncStateSet) a message needs the members of the accepted set *and* of a
  proposal in flight (a slave being added must hold it, a slave being removed still
  counts until the controller agrees); for minInSyncReplicas the larger of the two counts
  (RocketMQ's inSyncReplicasNums).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

__all__ = ["InSyncTracker", "SyncState"]

_MARK_EVERY_S = 0.01
_MAX_MARKS = 4096


@dataclass(frozen=True, slots=True)
class SyncState:
    members: frozenset[int]
    epoch: int


class InSyncTracker:
    def __init__(self, self_id: int, max_lag_s: float) -> None:
        self.self_id = self_id
        self.max_lag_s = max_lag_s
        self.accepted = SyncState(frozenset({self_id}), 0)
        self.pending: frozenset[int] | None = None
        self.caught_up_at: dict[int, float] = {}
        self.last_ack: dict[int, int] = {}
        self.connected: set[int] = set()
        self._seen: set[int] = set()  # slaves connected since this broker became master
        self._marks: dict[int, collections.deque[tuple[int, float]]] = {}
        self._since = 0.0  # when this broker became master: members get max_lag_s to connect

    def reset(self, members: frozenset[int], epoch: int, now: float) -> None:
        """Becoming master with the controller's set (it always holds this broker)."""
        self.accepted = SyncState(members | {self.self_id}, epoch)
        self.pending = None
        self.caught_up_at.clear()
        self.last_ack.clear()
        self._marks.clear()
        self._seen = set(self.connected)
        self._since = now

    def accept(self, members: frozenset[int], epoch: int) -> bool:
        """The controller's set (an ALTER answer, GET_REPLICA_INFO, a notification); False
        when it is not newer than the one held."""
        if epoch <= self.accepted.epoch:
            return False
        self.accepted = SyncState(frozenset(members), epoch)
        self.pending = None
        return True

    def proposal_failed(self) -> None:
        self.pending = None

    # -- what the master relies on -------------------------------------------------------
    def required(self) -> frozenset[int]:
        """The slaves every message must reach (allAckInSyncStateSet)."""
        return (self.accepted.members | (self.pending or frozenset())) - {self.self_id}

    def in_sync_count(self) -> int:
        return max(len(self.accepted.members), len(self.pending or ()))

    # -- inputs --------------------------------------------------------------------------
    def on_ack(self, broker_id: int, ack: int, log_end: int, now: float) -> frozenset[int] | None:
        """A slave acknowledged ``ack`` while the master's log ends at ``log_end``; the set to
        propose if this ack lets the slave in."""
        self.connected.add(broker_id)
        self._seen.add(broker_id)
        self.last_ack[broker_id] = ack
        marks = self._marks.get(broker_id)
        if marks is None:  # not ``setdefault``: that builds a deque on every ack
            marks = self._marks[broker_id] = collections.deque()
        if ack >= log_end:
            self.caught_up_at[broker_id] = now
            marks.clear()
        else:
            while marks and marks[0][0] <= ack:
                self.caught_up_at[broker_id] = marks.popleft()[1]
            if not marks or (now - marks[-1][1] >= _MARK_EVERY_S and marks[-1][0] < log_end):
                marks.append((log_end, now))
                if len(marks) > _MAX_MARKS:
                    marks.popleft()
        if ack >= log_end and broker_id not in self.accepted.members and self.pending is None:
            return self._target(add={broker_id})
        return None

    def on_gone(self, broker_id: int) -> frozenset[int] | None:
        """The slave has no connection left: out of the set at once."""
        self.connected.discard(broker_id)
        self._marks.pop(broker_id, None)
        self.caught_up_at.pop(broker_id, None)
        self.last_ack.pop(broker_id, None)
        if broker_id in self.accepted.members and self.pending is None:
            return self._target(drop={broker_id})
        return None

    def next_proposal(self, now: float, log_end: int) -> frozenset[int] | None:
        """The periodic look (checkSyncStateSetPeriod, and after every answer) while the
        master's log ends at ``log_end``: members gone, behind for longer than
        haMaxTimeSlaveNotCatchup, or never connected within that long of this broker becoming
        master, leave. Slaves join from ``on_ack``."""
        if self.pending is not None:
            return None
        drop: set[int] = set()
        grace_over = now - self._since > self.max_lag_s
        for b in self.accepted.members - {self.self_id}:
            if b in self.connected and self.last_ack.get(b, -1) >= log_end:
                self.caught_up_at[b] = now  # it holds all the master holds: idle, not behind
            if b not in self.connected:
                if b in self._seen or grace_over:
                    drop.add(b)
            elif now - self.caught_up_at.get(b, self._since) > self.max_lag_s:
                drop.add(b)
        return self._target(drop=drop)

    def lag_deadline(self, log_end: int) -> float | None:
        """When the next member would pass haMaxTimeSlaveNotCatchup if nothing changes (its
        last catch-up plus the limit; a member that never connected: this broker's start as
        master plus the limit), or None: nobody to drop, or a proposal is in flight. The
        master looks again at that moment instead of at the next periodic check, so a slave
        that stalls holds writes up for the lag limit, not the limit plus up to a period."""
        if self.pending is not None:
            return None
        deadlines = []
        for b in self.accepted.members - {self.self_id}:
            if b in self.connected:
                if self.last_ack.get(b, -1) < log_end:
                    deadlines.append(self.caught_up_at.get(b, self._since) + self.max_lag_s)
            elif b not in self._seen:
                deadlines.append(self._since + self.max_lag_s)
        return min(deadlines, default=None)

    def _target(self, add: set[int] | None = None, drop: set[int] | None = None) -> frozenset[int] | None:
        members = (self.accepted.members - (drop or set())) | (add or set()) | {self.self_id}
        if members == self.accepted.members:
            return None
        self.pending = frozenset(members)
        return self.pending
