"""Which damaged commit-log ranges a master and one slave can repair from each other.

Master and slave commit logs are byte-identical at the same offsets below the offset their
handshake agrees on, so a range one of them holds corrupt (``MessageStore.damaged_ranges``)
can be rewritten from the other's bytes for exactly that range. ``plan_repairs`` decides,
after the agreement, what moves in which direction:

* *take*: a range damaged on the master and healthy on the slave, inside what the slave
  holds below the agreed offset; the master fetches it;
* *give*: a range damaged on the slave and healthy on the master; the master sends it;
* *missing* / *refused*: what cannot be repaired from this peer, each with the reason
  (the master keeps refusing those bytes, loudly; nothing is skipped or truncated).

Nothing crosses the agreed offset: below it both logs were written by the same epochs of
the same master, so the same offset means the same bytes; above it they may differ. Each
transfer also carries up to ``BORDER`` healthy bytes either side of the damaged range,
which the receiver compares with its own before it writes anything: a peer whose log is
not this one (another group's, a wiped store) is caught there even before the
agreement's own check. Transfers are cut at segment ends and at ``CHUNK`` bytes, and one
handshake moves at most ``budget`` bytes; the rest waits for the next one.

Pure: no I/O. Ranges are half-open [start, end) physical offsets.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Range = tuple[int, int]

BORDER = 64  # healthy bytes compared either side of a repaired range
CHUNK = 4 * 1024 * 1024  # the largest range one transfer repairs
BUDGET = 32 * 1024 * 1024  # bytes one handshake moves for repairs at most
MAX_RANGES = 4096  # damaged ranges a hello may list
_END = 1 << 63


def normalize(ranges: Iterable[Sequence[int]]) -> list[Range]:
    """Sorted, merged, non-empty ranges (ValueError for a negative or reversed one)."""
    items: list[Range] = []
    for r in ranges:
        a, b = int(r[0]), int(r[1])
        if a < 0 or b < a:
            raise ValueError(f"bad range [{a}, {b})")
        if a < b:
            items.append((a, b))
    items.sort()
    out: list[Range] = []
    for a, b in items:
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def clip(ranges: Iterable[Range], low: int, high: int) -> list[Range]:
    """The parts of ``ranges`` inside [low, high)."""
    return [(max(a, low), min(b, high)) for a, b in ranges if max(a, low) < min(b, high)]


def subtract(ranges: Iterable[Range], minus: Sequence[Range]) -> list[Range]:
    """The parts of ``ranges`` outside every range of ``minus`` (both normalized)."""
    out: list[Range] = []
    for a, b in ranges:
        pos = a
        for c, d in minus:
            if d <= pos or c >= b:
                continue
            if c > pos:
                out.append((pos, c))
            pos = max(pos, d)
            if pos >= b:
                break
        if pos < b:
            out.append((pos, b))
    return out


def intersect(ranges: Iterable[Range], other: Sequence[Range]) -> list[Range]:
    """The parts of ``ranges`` inside some range of ``other`` (both normalized)."""
    return [part for a, b in ranges for part in clip(other, a, b)]


def first_damage_at_or_after(ranges: Sequence[Range], offset: int) -> int | None:
    """Where the first damaged byte at or after ``offset`` is (``offset`` itself if inside a
    range), None if there is none: a transfer stops there."""
    for a, b in ranges:
        if b > offset:
            return max(a, offset)
    return None


def describe(ranges: Iterable[Range]) -> str:
    return ", ".join(f"[{a}, {b})" for a, b in ranges) or "none"


@dataclass(frozen=True, slots=True)
class Transfer:
    """Rewrite [start, end) from the peer's bytes [low, high), which contain it: the bytes
    outside [start, end) are healthy on both ends and must be equal."""

    start: int
    end: int
    low: int
    high: int

    @property
    def size(self) -> int:
        return self.high - self.low


@dataclass(frozen=True, slots=True)
class Unrepaired:
    start: int
    end: int
    reason: str

    def __str__(self) -> str:
        return f"[{self.start}, {self.end}): {self.reason}"


@dataclass(frozen=True, slots=True)
class RepairPlan:
    take: tuple[Transfer, ...] = ()  # the master fetches these from the slave
    give: tuple[Transfer, ...] = ()  # the master sends these to the slave
    missing: tuple[Unrepaired, ...] = ()  # damaged on the master, not to be had from this slave
    refused: tuple[Unrepaired, ...] = ()  # damaged on the slave, not to be had from this master
    deferred: bool = False  # more fitted than one handshake's budget: another handshake follows


def plan_repairs(
    *,
    master_damaged: Sequence[Range],
    slave_damaged: Sequence[Range],
    master_start: int,
    slave_start: int,
    agreed: int,
    segment_size: int,
    budget: int = BUDGET,
    chunk: int = CHUNK,
) -> RepairPlan:
    """What a master and a slave whose logs match below ``agreed`` repair from each other.

    The master holds [master_start, its end) with ``master_damaged`` in it; the slave holds
    [slave_start, agreed) (it truncates anything beyond) with ``slave_damaged`` in it."""
    mine = normalize(master_damaged)
    theirs = normalize(slave_damaged)
    bad = normalize([*mine, *theirs])
    low = max(master_start, slave_start)
    take_ranges = subtract(clip(mine, slave_start, agreed), theirs)
    give_ranges = subtract(clip(theirs, master_start, agreed), mine)

    missing: list[Unrepaired] = []
    for a, b in clip(mine, 0, slave_start):
        missing.append(Unrepaired(a, b, f"the slave's log starts at {slave_start}"))
    for a, b in clip(mine, max(agreed, slave_start), _END):
        missing.append(Unrepaired(a, b, f"the slave has not copied it (its log ends at {agreed})"))
    for a, b in intersect(clip(mine, slave_start, agreed), theirs):
        missing.append(Unrepaired(a, b, "the slave's copy is damaged too"))
    refused: list[Unrepaired] = []
    for a, b in clip(theirs, 0, min(master_start, agreed)):
        refused.append(Unrepaired(a, b, f"the master's log starts at {master_start} (its retention deleted it)"))
    for a, b in intersect(clip(theirs, master_start, agreed), mine):
        refused.append(Unrepaired(a, b, "the master's copy is damaged too"))
    # (slave damage at or beyond ``agreed`` goes with the tail the slave truncates there)

    take: list[Transfer] = []
    give: list[Transfer] = []
    moved = 0
    deferred = False
    for ranges, out in ((take_ranges, take), (give_ranges, give)):
        for a, b in ranges:
            for s, e in _pieces(a, b, segment_size, chunk):
                t = _with_borders(s, e, bad, low, agreed)
                if moved and moved + t.size > budget:
                    deferred = True
                    continue
                out.append(t)
                moved += t.size
    by_start = lambda u: (u.start, u.end)  # noqa: E731
    return RepairPlan(
        tuple(take), tuple(give), tuple(sorted(missing, key=by_start)), tuple(sorted(refused, key=by_start)), deferred
    )


def _pieces(a: int, b: int, segment_size: int, chunk: int) -> Iterable[Range]:
    pos = a
    while pos < b:
        end = min(b, pos - pos % segment_size + segment_size, pos + chunk)
        yield pos, end
        pos = end


def _with_borders(start: int, end: int, bad: Sequence[Range], low: int, high: int) -> Transfer:
    """[start, end) widened by up to BORDER bytes each way that are healthy on both ends and
    held by both (within [low, high))."""
    lo = max(low, start - BORDER)
    hi = min(high, end + BORDER)
    for a, b in bad:
        if a < start:
            lo = max(lo, min(b, start))
        if b > end:
            hi = min(hi, max(a, end))
    return Transfer(start, end, min(lo, start), max(hi, end))
