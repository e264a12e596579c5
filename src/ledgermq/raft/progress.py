"""What the leader believes about one follower's log, and how fast it may send to it.

Two states, as in etcd's tracker: PROBE sends one Append per heartbeat interval (or
per reply) until the follower's match point is found; REPLICATE streams Appends
optimistically, bounded by an inflight window so a slow follower cannot make the
leader buffer the whole log in messages.
"""

from __future__ import annotations

from collections import deque
from enum import Enum


class ProgressState(Enum):
    PROBE = "PROBE"
    REPLICATE = "REPLICATE"


class Inflights:
    """The last index of each unacknowledged Append, oldest first, at most ``capacity`` of them."""

    __slots__ = ("_items", "capacity")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("max_inflight must be at least 1")
        self.capacity = capacity
        self._items: deque[int] = deque()

    def __len__(self) -> int:
        return len(self._items)

    @property
    def full(self) -> bool:
        return len(self._items) >= self.capacity

    def add(self, last_index: int) -> None:
        self._items.append(last_index)

    def free_le(self, index: int) -> None:
        """An acknowledgement of ``index`` covers every Append that ended at or below it."""
        while self._items and self._items[0] <= index:
            self._items.popleft()

    def free_first_one(self) -> None:
        """A heartbeat reply proves the follower is alive; let one more Append through."""
        if self._items:
            self._items.popleft()

    def reset(self) -> None:
        self._items.clear()


class Progress:
    __slots__ = ("inflights", "last_active", "match", "next", "probe_sent", "repair_until", "sent_commit", "state")

    def __init__(self, next_index: int, max_inflight: int) -> None:
        self.match = 0
        self.next = next_index
        self.state = ProgressState.PROBE
        self.probe_sent = False
        """In PROBE, an Append is out; wait for its answer or the next heartbeat."""
        self.sent_commit = 0
        """The commit index the last Append to this peer carried (skips empty Appends that say nothing new)."""
        self.last_active = 0
        """The leader's tick count when this peer last answered (check-quorum)."""
        self.inflights = Inflights(max_inflight)
        self.repair_until = 0
        """The peer said it is repairing until this index: its match counts toward a commit
        quorum only once it reaches it (0: not repairing)."""

    @property
    def quorum_match(self) -> int:
        """What this peer's log counts for in the commit rule."""
        return self.match if self.match >= self.repair_until else 0

    def __repr__(self) -> str:
        return f"Progress(match={self.match}, next={self.next}, {self.state.value}, inflight={len(self.inflights)})"

    def become_probe(self) -> None:
        # Restart from just past what is known to match; everything beyond is a guess.
        self.state = ProgressState.PROBE
        self.next = self.match + 1
        self.probe_sent = False
        self.inflights.reset()

    def become_replicate(self) -> None:
        self.state = ProgressState.REPLICATE
        self.next = self.match + 1
        self.probe_sent = False
        self.inflights.reset()

    def maybe_update(self, index: int) -> bool:
        """Record an acknowledgement; True if ``match`` grew (stale or duplicate acks are ignored)."""
        updated = index > self.match
        if updated:
            self.match = index
            self.probe_sent = False
        self.next = max(self.next, index + 1)
        return updated

    def sent_entries(self, last_index: int) -> None:
        if self.state is ProgressState.REPLICATE:
            self.next = last_index + 1
            self.inflights.add(last_index)
        else:
            self.probe_sent = True

    def maybe_decr_to(self, rejected: int, hint: int) -> bool:
        """Back off after a rejection of the Append at ``rejected``; False if the rejection is stale.

        In REPLICATE a rejection of anything at or below ``match`` is a reordered old
        reply. In PROBE only a rejection of the index we last probed (``next - 1``)
        is current.
        """
        if self.state is ProgressState.REPLICATE:
            if rejected <= self.match:
                return False
            self.next = self.match + 1
            return True
        if self.next - 1 != rejected:
            return False
        self.next = max(min(rejected, hint + 1), self.match + 1)
        self.probe_sent = False
        return True

    def is_paused(self) -> bool:
        if self.state is ProgressState.PROBE:
            return self.probe_sent
        return self.inflights.full
