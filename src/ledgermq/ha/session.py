"""Pure decisions of both HA ends; the asyncio drivers do the I/O, time is passed in.

``MasterSession`` follows one slave: its first report fixes where the transfer starts,
later reports are acknowledgements; it plans the next window (never across a segment
end; the driver cuts it into frames of at most the batch size, and may ask for several
frames' worth at once) or a header-only heartbeat when idle. ``SlaveSession``
checks each frame against the local commit log and says when to report.

Times are seconds on a monotonic clock. Offsets are commit-log (physical) offsets.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

# -- master ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ack:
    """A report the master accepts: the slave holds everything below ``offset``."""

    offset: int
    first: bool


class CloseKind(enum.Enum):
    """Why a connection ends, as a type (counters and metrics must never match log text)."""

    OTHER = "other"
    PEER_AHEAD = "peer ahead"  # it reported beyond our max offset: a diverged slave, or no slave at all
    REFUSED = "refused"  # the handshake refused it (a diverged log that cannot be reconciled)


@dataclass(frozen=True, slots=True)
class Close:
    """Drop the connection; ``reason`` is logged, ``kind`` is counted."""

    reason: str
    kind: CloseKind = CloseKind.OTHER


@dataclass(frozen=True, slots=True)
class Send:
    """Read up to ``size`` commit-log bytes at ``offset`` (one segment) and send them.

    ``size`` is at most the ``max_bytes`` given to ``plan``; the bytes go out as frames
    of at most the batch size each (``codec.frame_buffers``)."""

    offset: int
    size: int


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Send a header-only frame (offset, 0)."""

    offset: int


@dataclass(frozen=True, slots=True)
class Idle:
    """Nothing to send; ask again on new data or after ``wait`` seconds (None: a report)."""

    wait: float | None


MasterAction = Send | Heartbeat | Idle | Close


def first_transfer_offset(request: int, master_max: int, segment_size: int) -> int:
    """Where a transfer starts: 0 means the start of the master's last segment."""
    if request == 0:
        return max(0, master_max - master_max % segment_size)
    return request


class MasterSession:
    def __init__(
        self,
        *,
        segment_size: int,
        batch_size: int,
        heartbeat_interval: float,
        housekeeping_interval: float,
        now: float,
    ) -> None:
        self.segment_size = segment_size
        self.batch_size = batch_size
        self.heartbeat_interval = heartbeat_interval
        self.housekeeping_interval = housekeeping_interval
        self.request_offset: int | None = None  # the first report
        # Set by a handshake: the offset both logs were agreed to match below; the first
        # report must be exactly this (it is the only report not backed by bytes we sent).
        self.agreed_offset: int | None = None
        self.ack_offset: int | None = None  # the latest accepted report
        self.next_offset: int | None = None  # where the next transfer starts
        self.last_read = now
        self.last_write = now

    def on_report(self, offset: int, master_max: int, now: float) -> Ack | Close:
        """A complete report arrived. Beyond our max offset it is never an ack."""
        self.last_read = now
        if offset < 0 or offset > master_max:
            return Close(
                f"reported offset {offset} is beyond the master's max offset {master_max}: "
                "its commit log is ahead of or diverged from ours (or it is no slave)",
                CloseKind.PEER_AHEAD,
            )
        first = self.request_offset is None
        if first and self.agreed_offset is not None and offset != self.agreed_offset:
            return Close(f"first report {offset} differs from the agreed offset {self.agreed_offset}")
        if not first and self.next_offset is not None and offset > self.next_offset:
            return Close(
                f"reported offset {offset} is beyond what this connection carried ({self.next_offset}): "
                "an acknowledgement counts only for bytes the slave verifiably holds"
            )
        if first:
            self.request_offset = offset
            self.next_offset = first_transfer_offset(offset, master_max, self.segment_size)
        self.ack_offset = offset
        return Ack(offset, first)

    def on_bytes(self, now: float) -> None:
        """Bytes (maybe a partial report) arrived: the peer is alive."""
        self.last_read = now

    def plan(
        self, master_min: int, master_max: int, now: float, max_bytes: int | None = None, stop_at: int | None = None
    ) -> MasterAction:
        """What to do next; a ``Send`` covers at most ``max_bytes`` (default: one batch).

        ``stop_at``: the master's log is damaged from there (awaiting repair): nothing at or
        beyond it is sent, and a slave that reached it waits there on heartbeats."""
        nxt = self.next_offset
        if nxt is None:
            return Idle(None)  # no transfer before the slave's first report
        if nxt > master_max:
            return Close(  # our log was cut below what the slave holds: it is ahead now
                f"transfer position {nxt} is beyond the master's max offset {master_max} (truncated?)",
                CloseKind.PEER_AHEAD,
            )
        limit = master_max if stop_at is None else min(master_max, max(stop_at, nxt))
        if nxt < limit:
            if nxt < master_min:
                return Close(f"slave needs offset {nxt} but the master's commit log now starts at {master_min}")
            segment_end = nxt - nxt % self.segment_size + self.segment_size
            window = self.batch_size if max_bytes is None else max_bytes
            return Send(nxt, min(window, limit - nxt, segment_end - nxt))
        idle_for = now - self.last_write
        if idle_for >= self.heartbeat_interval:
            return Heartbeat(nxt)
        return Idle(self.heartbeat_interval - idle_for)

    def on_sent(self, offset: int, size: int, now: float) -> None:
        """``size`` bytes from ``offset`` were handed to the transport (0: a heartbeat)."""
        if offset != self.next_offset:
            raise ValueError(f"sent at {offset} but the transfer position is {self.next_offset}")
        self.next_offset = offset + size
        self.last_write = now

    def expired(self, now: float) -> bool:
        return now - self.last_read > self.housekeeping_interval

    def needed_from(self) -> int | None:
        """The lowest offset this slave may still need from us (retention), if known."""
        if self.ack_offset is None or self.next_offset is None:
            return None
        return min(self.ack_offset, self.next_offset) if self.ack_offset else self.next_offset


# -- slave ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Accept:
    """Append the frame's body at its offset (nothing to do for a heartbeat)."""


_ACCEPT = Accept()  # immutable: one for every accepted frame


@dataclass(frozen=True, slots=True)
class Reject:
    """Close and reconnect; ``reason`` is logged."""

    reason: str


class SlaveSession:
    def __init__(self, *, heartbeat_interval: float, housekeeping_interval: float, segment_size: int, now: float):
        self.heartbeat_interval = heartbeat_interval
        self.housekeeping_interval = housekeeping_interval
        self.segment_size = segment_size
        self.reported: int | None = None  # the last offset we reported on this connection
        self.last_report = now
        self.last_read = now
        self.frames = 0

    def check_frame(
        self, offset: int, body_size: int, local_max: int, local_empty: bool, now: float
    ) -> Accept | Reject:
        """Accept a frame only at our max offset, or anywhere segment-aligned if we are empty."""
        self.last_read = now
        if local_empty:
            if body_size and offset % self.segment_size:
                return Reject(f"master sends from {offset}, which an empty slave cannot start at (not segment-aligned)")
        elif offset != local_max:
            return Reject(
                f"master sends from {offset} but our commit log ends at {local_max}: "
                "the slave is ahead of or diverged from its master"
            )
        self.frames += 1
        return _ACCEPT

    def on_bytes(self, now: float) -> None:
        self.last_read = now

    def report_due(self, local_max: int, now: float) -> int | None:
        """The offset to report now, if any: at once if it grew, else every heartbeat interval."""
        if self.reported is None or local_max > self.reported:
            return local_max
        if now - self.last_report >= self.heartbeat_interval:
            return local_max
        return None

    def on_reported(self, offset: int, now: float) -> None:
        self.reported = offset
        self.last_report = now

    def next_deadline(self, now: float) -> float:
        """Seconds until a heartbeat report or the housekeeping check is due."""
        return max(
            0.0,
            min(self.last_report + self.heartbeat_interval, self.last_read + self.housekeeping_interval) - now,
        )

    def expired(self, now: float) -> bool:
        return now - self.last_read > self.housekeeping_interval
