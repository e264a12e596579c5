"""Walking sealed DLedger data files (ones a later file follows) entry by entry.

Recovery walks the files before its tail that no digest vouches for, or that hold damage
a read or the scrub recorded; the scrub walks a file whose digest no longer matches.
Both need the same answer: the last sound entry, and where and why the first unsound one
starts. Read-only.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledgermq.store.damage import DamageRegistry
from ledgermq.store.digests import SegmentDigests
from ledgermq.store.dledger.entry import EntryInfo, VerdictKind, check_entry
from ledgermq.store.mapped_file import MappedFile


@dataclass(slots=True)
class FileWalk:
    """One data file walked entry by entry."""

    last: EntryInfo | None  # the last sound entry
    bad_pos: int | None  # where the first unsound entry starts (None: the file is sound)
    reason: str = ""
    recorded: bool = False
    entries: int = 0


def walk_sealed_file(
    mf: MappedFile, check_crc: bool, damage: DamageRegistry | None, expected: int | None, floor: int
) -> FileWalk:
    """Every entry of a sealed file (one a later file follows): sound, continuous, in
    non-decreasing terms, clear of recorded damage, and closed by a blank."""
    at, last, count = 0, None, 0
    while True:
        pos = mf.start_offset + at
        v = check_entry(mf.mm, at, mf.size, pos, check_crc=check_crc)
        end = v.end if isinstance(v, EntryInfo) else mf.end_offset
        hit = damage.overlapping(pos, end) if damage is not None else None
        if hit is not None:
            return FileWalk(last, pos, f"data [{hit[0]}, {hit[1]}) was found damaged ({hit[2]})", True, count)
        if isinstance(v, EntryInfo):
            if expected is not None and v.index != expected:
                return FileWalk(last, pos, f"index {v.index} at {pos} follows index {expected - 1}", entries=count)
            if v.term < floor:
                return FileWalk(
                    last, pos, f"term {v.term} of index {v.index} is below the previous term {floor}", entries=count
                )
            last, expected, floor, count = v, v.index + 1, v.term, count + 1
            at += v.size
            continue
        if v.kind is VerdictKind.BLANK:
            return FileWalk(last, None, entries=count)
        reason = (
            v.reason
            if v.kind is VerdictKind.CORRUPT
            else f"sealed data file {mf.path.name} ends at {pos} with no blank"
        )
        return FileWalk(last, pos, reason, entries=count)


@dataclass(frozen=True, slots=True)
class EarlyFiles:
    """What checking the files before recovery's tail found."""

    walked: int  # files walked entry by entry now
    left_to_scrub: int  # files a digest vouched for
    stop: FileWalk | None  # the walk that met the first damage (its ``last``: the last sound entry before it)


def check_early_files(
    files: list[MappedFile], digests: SegmentDigests | None, damage: DamageRegistry | None, check_crc: bool
) -> EarlyFiles:
    """A file with a digest and no recorded damage is left to the scrub; the others are
    walked. Continuity is checked across consecutive walked files; the scrub's digest
    covers the rest. Without digests every file is trusted, as DLedger does."""
    if digests is None:
        return EarlyFiles(0, len(files), None)
    walked = trusted = 0
    prev: FileWalk | None = None
    for i, mf in enumerate(files):
        recorded = damage is not None and damage.overlapping(mf.start_offset, mf.end_offset) is not None
        if not recorded and digests.get(mf.start_offset) is not None:
            trusted += 1
            prev = None
            continue
        walked += 1
        expected = prev.last.index + 1 if prev is not None and prev.last is not None else None
        floor = prev.last.term if prev is not None and prev.last is not None else -1
        w = walk_sealed_file(mf, check_crc, damage, expected, floor)
        if w.bad_pos is None:
            prev = w
            continue
        return EarlyFiles(walked, trusted, _last_sound_before(files, i, w, prev, check_crc, damage))
    return EarlyFiles(walked, trusted, None)


def _last_sound_before(
    files: list[MappedFile],
    i: int,
    w: FileWalk,
    prev: FileWalk | None,
    check_crc: bool,
    damage: DamageRegistry | None,
) -> FileWalk:
    """The walk of file ``i`` met damage before any sound entry: the last sound one is in
    an earlier file (walked now if it was left to the scrub), and so may be the damage."""
    while w.last is None and i > 0:
        before = prev if prev is not None else walk_sealed_file(files[i - 1], check_crc, damage, None, -1)
        if before.bad_pos is not None:
            w, i = before, i - 1
            prev = None
            continue
        w = FileWalk(before.last, w.bad_pos, w.reason, w.recorded, w.entries)
        i, prev = i - 1, None  # a sound file that holds no entry: the last sound one is further back
    assert w.bad_pos is not None
    return w
