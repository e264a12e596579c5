"""The damaged-range registry: commit-log ranges known corrupt and not yet repaired.

Every path that finds corruption (recovery, the scrub thread, a read, the HA code)
registers it here; every path that hands commit-log bytes out asks ``overlapping`` first,
so a damaged byte is never served. The ranges survive restarts in
``<storePathRootDir>/damagedRanges`` (JSON, written atomically): recovery after a restart
may not see the damage again (a flip inside a body passes every check but the CRC the
next scan may skip), and the range must stay refused until a replica repaired it.

Thread-safety: one lock guards the ranges; listeners are called outside it, from the
thread that found the damage.
"""

from __future__ import annotations

import bisect
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ledgermq.atomic_file import write_atomic
from ledgermq.errors import CorruptRangeError

log = logging.getLogger(__name__)

DamageListener = Callable[[int, int, str], None]
FILE_NAME = "damagedRanges"


@dataclass(frozen=True, slots=True)
class DamageSummary:
    """What a store reports about its damage (runtime info, metrics): ranges refused now and
    their bytes, and since the process started, ranges found and repairs made. A DLedger
    store adds its log's to its old native log's (store/dledger/commitlog.py)."""

    ranges: int = 0
    damaged_bytes: int = 0
    corruptions_found: int = 0
    repairs: int = 0

    def __add__(self, other: DamageSummary) -> DamageSummary:
        return DamageSummary(
            self.ranges + other.ranges,
            self.damaged_bytes + other.damaged_bytes,
            self.corruptions_found + other.corruptions_found,
            self.repairs + other.repairs,
        )

    def info(self) -> dict[str, str]:
        """The runtime-info keys (GET_BROKER_RUNTIME_INFO)."""
        return {
            "storeDamagedRanges": str(self.ranges),
            "storeDamagedBytes": str(self.damaged_bytes),
            "storeCorruptionsFound": str(self.corruptions_found),
            "storeRepairs": str(self.repairs),
        }


class DamageRegistry:
    """Sorted, disjoint, half-open [start, end) ranges, each with the reason it was found."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._starts: list[int] = []
        self._ranges: list[tuple[int, int, str]] = []
        self._listeners: list[DamageListener] = []
        self.corruptions_found = 0  # ranges registered by this process
        self.repairs = 0  # ranges (or parts) repaired by this process
        self.any = False  # a lock-free fast path for reads: nothing is damaged

    # -- persistence -----------------------------------------------------------------
    def load(self) -> None:
        """Read the persisted ranges; an unreadable file stops start-up (refusing to serve
        damage must not depend on a file we silently ignored)."""
        if not self.path.exists():
            return
        try:
            doc = json.loads(self.path.read_bytes())
            ranges = [(int(r["start"]), int(r["end"]), str(r.get("reason", ""))) for r in doc["ranges"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{self.path} is not a damaged-ranges file ({exc}); move it away to start") from exc
        with self._lock:
            for start, end, reason in ranges:
                self._insert(start, end, reason)
            self.any = bool(self._ranges)
        if ranges:
            log.error(
                "commit log has %d damaged range(s) awaiting repair from a replica: %s",
                len(self._ranges),
                ", ".join(f"[{s}, {e}) ({r})" for s, e, r in self._ranges),
            )

    def _save(self) -> None:
        doc = {"ranges": [{"start": s, "end": e, "reason": r} for s, e, r in self._ranges]}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps(doc, indent=1).encode())

    # -- queries ---------------------------------------------------------------------
    def ranges(self) -> list[tuple[int, int]]:
        with self._lock:
            return [(s, e) for s, e, _ in self._ranges]

    def entries(self) -> list[tuple[int, int, str]]:
        with self._lock:
            return list(self._ranges)

    def summary(self) -> DamageSummary:
        with self._lock:
            return DamageSummary(
                len(self._ranges), sum(e - s for s, e, _ in self._ranges), self.corruptions_found, self.repairs
            )

    @property
    def damaged_bytes(self) -> int:
        with self._lock:
            return sum(e - s for s, e, _ in self._ranges)

    def overlapping(self, start: int, end: int) -> tuple[int, int, str] | None:
        """The first damaged range that overlaps [start, end), or None (cheap when clean)."""
        if not self.any:
            return None
        with self._lock:
            i = bisect.bisect_right(self._starts, start) - 1
            for j in (i, i + 1):
                if 0 <= j < len(self._ranges):
                    s, e, r = self._ranges[j]
                    if s < end and start < e:
                        return s, e, r
            return None

    def within(self, start: int, end: int) -> list[tuple[int, int]]:
        """Every damaged range that overlaps [start, end), in order."""
        if not self.any:
            return []
        with self._lock:
            i = max(bisect.bisect_right(self._starts, start) - 1, 0)
            return [(s, e) for s, e, _ in self._ranges[i:] if s < end and start < e]

    def check(self, start: int, end: int) -> None:
        """Raise CorruptRangeError if [start, end) overlaps a damaged range."""
        hit = self.overlapping(start, end)
        if hit is not None:
            raise CorruptRangeError(*hit)

    # -- changes ---------------------------------------------------------------------
    def add_listener(self, listener: DamageListener) -> None:
        self._listeners.append(listener)

    def report(self, start: int, end: int, reason: str) -> bool:
        """Register [start, end) as damaged; True if any of it was not known already."""
        if end <= start or start < 0:
            raise ValueError(f"a damaged range needs 0 <= start < end, got [{start}, {end})")
        with self._lock:
            if self._covered(start, end):
                return False
            self._insert(start, end, reason)
            self.any = True
            self.corruptions_found += 1
            self._save()
        log.error("commit log range [%d, %d) is corrupt (%s); refused until a replica repairs it", start, end, reason)
        for listener in list(self._listeners):
            try:
                listener(start, end, reason)
            except Exception:  # a listener's bug must not hide the damage from the others
                log.exception("damage listener %r failed for [%d, %d)", listener, start, end)
        return True

    def repaired(self, start: int, end: int) -> None:
        """Forget the damaged bytes inside [start, end) (a replica's bytes replaced them)."""
        with self._lock:
            kept: list[tuple[int, int, str]] = []
            for s, e, r in self._ranges:
                if e <= start or s >= end:
                    kept.append((s, e, r))
                    continue
                if s < start:
                    kept.append((s, start, r))
                if e > end:
                    kept.append((end, e, r))
            self._ranges = kept
            self._starts = [s for s, _, _ in kept]
            self.any = bool(kept)
            self.repairs += 1
            self._save()

    def drop_from(self, offset: int) -> None:
        """Forget damage at or after ``offset`` (those bytes were truncated away)."""
        with self._lock:
            kept = [(s, min(e, offset), r) for s, e, r in self._ranges if s < offset]
            if kept == self._ranges:
                return
            self._ranges = kept
            self._starts = [s for s, _, _ in kept]
            self.any = bool(kept)
            self._save()

    def drop_before(self, offset: int) -> None:
        """Forget damage below ``offset`` (retention deleted those segments)."""
        with self._lock:
            kept = [(max(s, offset), e, r) for s, e, r in self._ranges if e > offset]
            if kept == self._ranges:
                return
            self._ranges = kept
            self._starts = [s for s, _, _ in kept]
            self.any = bool(kept)
            self._save()

    def _covered(self, start: int, end: int) -> bool:
        pos = start
        for s, e, _ in self._ranges:
            if e <= pos:
                continue
            if s > pos:
                return False
            pos = e
            if pos >= end:
                return True
        return pos >= end

    def _insert(self, start: int, end: int, reason: str) -> None:
        """Merge [start, end) into the ranges (overlapping or touching ones join)."""
        merged_reason = reason
        kept: list[tuple[int, int, str]] = []
        for s, e, r in self._ranges:
            if e < start or s > end:
                kept.append((s, e, r))
            else:
                start, end = min(s, start), max(e, end)
                if r and r not in merged_reason:
                    merged_reason = f"{r}; {merged_reason}"
        kept.append((start, end, merged_reason))
        kept.sort()
        self._ranges = kept
        self._starts = [s for s, _, _ in kept]
