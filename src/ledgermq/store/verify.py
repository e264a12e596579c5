"""Offline verification of a stopped store (``ledgermq store verify``); changes nothing.

Checks every commit-log record (magic, size, own offset, body CRC, fields adding up),
every sealed segment's digest, segments missing or cut short in the middle of the log,
the ranges already registered as damaged, and every consume-queue unit against the record
it points at (topic, queue id, queue offset, size; units pointing into a registered range
are not judged). The store lock is taken for the
duration, so a store a running broker holds is refused.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from ledgermq.config import StoreConfig
from ledgermq.protocol.message import MESSAGE_MAGIC_CODE
from ledgermq.store.consumequeue import UNIT, UNIT_SIZE
from ledgermq.store.damage import FILE_NAME as DAMAGE_FILE
from ledgermq.store.damage import DamageRegistry
from ledgermq.store.digests import SegmentDigests
from ledgermq.store.dispatch import BLANK, END_OF_DATA, DispatchRequest, Verdict, check_record
from ledgermq.store.lockfile import StoreLock
from ledgermq.store.log_start import FILE_NAME as LOG_START_FILE
from ledgermq.store.log_start import LogStartRecord
from ledgermq.store.mapped_file import parse_segment_name
from ledgermq.store.record_check import next_sound_record, records_around

_PRE_BLANK = 0x7FFFFFFF
_HEAD = struct.Struct(">ii4xiiqq")  # size, magic, queue id, flag, queue offset, physical offset


@dataclass(frozen=True, slots=True)
class Finding:
    where: str  # "commitlog", "digest", "registered", "consumequeue"
    start: int
    end: int
    reason: str


@dataclass(slots=True)
class VerifyReport:
    findings: list[Finding] = field(default_factory=list)
    segments: int = 0
    records: int = 0
    digests_checked: int = 0
    queue_units: int = 0

    @property
    def ok(self) -> bool:
        return not self.findings


def verify_store(config: StoreConfig) -> VerifyReport:
    """Check the store under ``config.root_dir``; StoreLockedError if a broker holds it."""
    lock = StoreLock(Path(config.root_dir))
    lock.acquire()
    try:
        report = VerifyReport()
        registry = DamageRegistry(Path(config.root_dir) / DAMAGE_FILE)
        registry.load()
        for s, e, r in registry.entries():
            report.findings.append(Finding("registered", s, e, f"awaiting repair: {r}"))
        _verify_commitlog(config, report)
        _verify_queues(config, report, registry)
        return report
    finally:
        lock.release()


def _verify_commitlog(config: StoreConfig, report: VerifyReport) -> None:
    directory = config.commitlog_path
    size = config.mapped_file_size_commitlog
    digests = SegmentDigests(Path(config.root_dir) / "digests" / "commitlog", size)
    names = sorted(n for n in os.listdir(directory) if parse_segment_name(n) is not None) if directory.exists() else []
    starts = [int(n) for n in names]
    began = LogStartRecord(Path(config.root_dir) / LOG_START_FILE).read()
    if began is not None and starts and starts[0] > began:
        why = f"leading segments missing (the log began at {began})"
        report.findings.append(Finding("commitlog", began, starts[0], why))
    for i, start in enumerate(starts):
        if i and start != starts[i - 1] + size:
            report.findings.append(Finding("commitlog", starts[i - 1] + size, start, "segments missing"))
    for i, start in enumerate(starts):
        path = directory / names[i]
        report.segments += 1
        have = path.stat().st_size
        last = i == len(starts) - 1
        if have != size:
            if have < size and not last:
                report.findings.append(Finding("commitlog", start + have, start + size, f"segment cut to {have} bytes"))
            elif have != size:
                report.findings.append(Finding("commitlog", start, start + size, f"segment is {have} bytes"))
            if have == 0:
                continue
        with open(path, "rb") as fh:
            mm = mmap.mmap(fh.fileno(), have, access=mmap.ACCESS_READ)
        try:
            _walk(mm, have, start, last, report)
            if not last and have == size:
                bad = digests.bad_blocks(start, 0, mm[:])
                if bad is not None:
                    report.digests_checked += 1
                    for lo, hi in bad:
                        a, b = records_around(mm, have, start, lo, hi)
                        why = f"digest block [{start + lo}, {start + hi}) differs"
                        report.findings.append(Finding("digest", start + a, start + b, why))
        finally:
            mm.close()


def _walk(mm: mmap.mmap, limit: int, base: int, last: bool, report: VerifyReport) -> None:
    pos = 0
    while pos < limit:
        v = check_record(mm, pos, limit, base + pos, check_text=False)
        if isinstance(v, DispatchRequest):
            report.records += 1
            pos += v.size
            continue
        assert isinstance(v, Verdict)
        if v.reason == BLANK:
            return
        nxt = next_sound_record(mm, pos + 1, limit, base)
        if nxt is None and last:
            if v.reason != END_OF_DATA:
                report.findings.append(Finding("commitlog", base + pos, base + limit, f"torn tail: {v.reason}"))
            return
        end = limit if nxt is None else nxt
        report.findings.append(Finding("commitlog", base + pos, base + end, v.reason))
        pos = end


def _verify_queues(config: StoreConfig, report: VerifyReport, registry: DamageRegistry) -> None:
    """Units pointing into a registered damaged range are not judged: their records cannot
    be read (placeholders for records lost there point at the whole range)."""
    root = config.consume_queue_path
    cl_dir = config.commitlog_path
    seg_size = config.mapped_file_size_commitlog
    if not root.exists():
        return
    handles: dict[int, int] = {}
    try:
        for topic_dir in sorted(p for p in root.iterdir() if p.is_dir()):
            for qdir in sorted(p for p in topic_dir.iterdir() if p.is_dir() and p.name.isdigit()):
                for f in sorted(p for p in qdir.iterdir() if parse_segment_name(p.name) is not None):
                    data = f.read_bytes()
                    first = int(f.name) // UNIT_SIZE
                    for i, (phy, size, _tags) in enumerate(UNIT.iter_unpack(data[: len(data) - len(data) % UNIT_SIZE])):
                        if size == 0 and phy == 0:
                            break
                        if size == _PRE_BLANK:
                            continue
                        report.queue_units += 1
                        if registry.overlapping(phy, phy + size) is not None:
                            continue
                        problem = _unit_problem(cl_dir, seg_size, handles, phy, size, topic_dir.name, int(qdir.name),
                                                first + i)  # fmt: skip
                        if problem:
                            why = f"{topic_dir.name}-{qdir.name} offset {first + i}: {problem}"
                            report.findings.append(Finding("consumequeue", phy, phy + max(size, 0), why))
    finally:
        for fd in handles.values():
            os.close(fd)


def _unit_problem(
    cl_dir: Path, seg_size: int, handles: dict[int, int], phy: int, size: int, topic: str, queue_id: int, index: int
) -> str | None:
    seg = phy - phy % seg_size
    fd = handles.get(seg)
    if fd is None:
        try:
            fd = os.open(cl_dir / f"{seg:020d}", os.O_RDONLY)
        except FileNotFoundError:
            return None  # retention removed it; the queue's minimum moves past it at start
        handles[seg] = fd
    head = os.pread(fd, _HEAD.size, phy - seg)
    if len(head) < _HEAD.size:
        return f"points past its commit-log segment at {phy}"
    total, magic, qid, _flag, qoff, own = _HEAD.unpack_from(head, 0)
    if magic != MESSAGE_MAGIC_CODE or total != size or own != phy:
        return f"points at no record of {size} bytes at {phy}"
    if qid != queue_id or qoff != index:
        return f"points at the record of queue {qid} offset {qoff}"
    del topic  # the record's own checks (the commit-log walk) cover its topic bytes
    return None
