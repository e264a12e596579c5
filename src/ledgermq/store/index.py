"""The message index: look up messages by key (KEYS, UNIQ_KEY) and time range.

IndexFile layout (big-endian), file named by its creation time ``yyyyMMddHHmmssSSS``::

    header (40 bytes)
      0  8  beginTimestamp     store time of the first indexed message
      8  8  endTimestamp       store time of the newest indexed message
      16 8  beginPhyOffset
      24 8  endPhyOffset
      32 4  hashSlotCount      slots in use
      36 4  indexCount         next entry number; starts at 1, 0 means "no entry"
    slots: maxHashSlotNum x int32   newest entry number for keys hashing to the slot
    entries: maxIndexNum x 20 bytes
      0  4  keyHash            |String.hashCode("topic#key")|
      4  8  phyOffset
      12 4  timeDiff           seconds since beginTimestamp, clamped to [0, INT_MAX]
      16 4  prevIndex          previous entry in the same slot's chain

Entries form per-slot linked lists, newest first. A file is full when indexCount reaches
maxIndexNum; the next one starts then. Hash collisions are resolved by the caller reading
the message and comparing keys, as RocketMQ's clients do.
"""

from __future__ import annotations

import datetime as dt
import logging
import mmap
import os
import struct
import threading
from collections.abc import Sequence
from pathlib import Path

from ledgermq import speedups
from ledgermq.atomic_file import fsync_dir
from ledgermq.clock import Clock
from ledgermq.protocol import sysflag as SF
from ledgermq.protocol.javahash import java_string_hash, java_utf8_hash
from ledgermq.protocol.properties import KEY_SEPARATOR
from ledgermq.store.dispatch import DispatchRequest
from ledgermq.store.index_batch import IndexNotBuilt as IndexNotBuilt
from ledgermq.store.index_batch import build_rows_c, build_staged_c
from ledgermq.store.record_scan import KEYS, PHYS, STORE_TS, SYSFLAG, TOPIC, UNIQ, Row

log = logging.getLogger(__name__)

HEADER = struct.Struct(">qqqqii")
HEADER_SIZE = HEADER.size  # 40
SLOT = struct.Struct(">i")
ENTRY = struct.Struct(">iqii")
ENTRY_SIZE = ENTRY.size  # 20
_INT_MAX = 0x7FFFFFFF
_KEY_SEPARATOR_B = KEY_SEPARATOR.encode()
_C = speedups.recordc


def index_key_hash(key: str) -> int:
    h = abs(java_string_hash(key))
    return 0 if h < 0 or h > _INT_MAX else h


def index_file_name(wall_ms: int) -> str:
    t = dt.datetime.fromtimestamp(wall_ms / 1000)
    return t.strftime("%Y%m%d%H%M%S") + f"{wall_ms % 1000:03d}"


class IndexFile:
    def __init__(self, path: Path, slots: int, max_entries: int) -> None:
        self.path = path
        self.slots = slots
        self.max_entries = max_entries
        self.size = HEADER_SIZE + slots * SLOT.size + max_entries * ENTRY_SIZE
        self._entries_at = HEADER_SIZE + slots * SLOT.size
        existed = path.exists()
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if os.fstat(self.fd).st_size != self.size:
            if existed and os.fstat(self.fd).st_size:
                os.close(self.fd)
                raise ValueError(f"{path} size does not match maxHashSlotNum/maxIndexNum")
            os.ftruncate(self.fd, self.size)
        self.mm = mmap.mmap(self.fd, self.size)
        header = HEADER.unpack_from(self.mm, 0)
        self.begin_ts: int = header[0]
        self.end_ts: int = header[1]
        self.begin_phy: int = header[2]
        self.end_phy: int = header[3]
        self.slot_count: int = header[4]
        self.count: int = header[5]
        if self.count == 0:
            self.count = 1
        self.dirty = False

    @property
    def is_full(self) -> bool:
        return self.count >= self.max_entries

    def problem(self) -> str | None:
        """Why this file cannot be trusted, or None: its header must be consistent and its
        first and newest entries must agree with it (a few reads: checked at every start).
        The scrub walks every entry (``entries_problem``)."""
        count, slots_used = self.count, self.slot_count
        if not 1 <= count <= self.max_entries or not 0 <= slots_used <= min(self.slots, count):
            return f"header says {count} entries in {slots_used} slots"
        if count == 1:
            return None
        if self.begin_phy < 0 or self.begin_phy > self.end_phy or self.begin_ts > self.end_ts:
            return f"header range phy [{self.begin_phy}, {self.end_phy}] ts [{self.begin_ts}, {self.end_ts}]"
        _h, phy, diff, prev = ENTRY.unpack_from(self.mm, self._entry_pos(1))
        if phy != self.begin_phy or diff != 0 or prev != 0:
            return f"first entry ({phy}, {diff}, {prev}) disagrees with the header"
        return self._entry_problem(count - 1)

    def _entry_problem(self, idx: int) -> str | None:
        _h, phy, diff, prev = ENTRY.unpack_from(self.mm, self._entry_pos(idx))
        span = min(max((self.end_ts - self.begin_ts) // 1000, 0), _INT_MAX)
        if not self.begin_phy <= phy <= self.end_phy or not 0 <= diff <= span or not 0 <= prev < idx:
            return f"entry {idx} ({phy}, {diff}, {prev}) lies outside the header's range"
        return None

    def entries_problem(self, first: int, last: int) -> str | None:
        """``_entry_problem`` for entries [first, last) (the scrub; under the service's lock)."""
        for idx in range(max(first, 1), min(last, self.count)):
            why = self._entry_problem(idx)
            if why is not None:
                return why
        return None

    def slots_problem(self, first: int, last: int) -> str | None:
        """Whether hash slots [first, last) name entries that exist (the scrub)."""
        last = min(last, self.slots)
        if last <= first:
            return None
        heads = struct.unpack_from(f">{last - first}i", self.mm, HEADER_SIZE + first * SLOT.size)
        if max(heads) >= self.count or min(heads) < 0:
            return f"a hash slot in [{first}, {last}) names an entry outside [0, {self.count})"
        return None

    def put_hashed(self, java_hash: int, phy_offset: int, store_ts: int) -> bool:
        """Add an entry for the key whose ``String.hashCode`` is ``java_hash``; False when
        the file is full."""
        count = self.count
        if count >= self.max_entries:
            return False
        key_hash = abs(java_hash)
        if key_hash > _INT_MAX:
            key_hash = 0  # abs(Integer.MIN_VALUE) stays negative in Java; RocketMQ maps it to 0
        mm = self.mm
        slot_pos = HEADER_SIZE + (key_hash % self.slots) * SLOT.size
        prev = SLOT.unpack_from(mm, slot_pos)[0]
        if prev >= count:
            prev = self._newest_before(prev)
        elif prev < 0:
            prev = 0
        begin_ts = self.begin_ts
        diff = 0 if begin_ts <= 0 else min(max((store_ts - begin_ts) // 1000, 0), _INT_MAX)
        ENTRY.pack_into(mm, self._entries_at + count * ENTRY_SIZE, key_hash, phy_offset, diff, prev)
        SLOT.pack_into(mm, slot_pos, count)
        if count <= 1:
            self.begin_phy, self.begin_ts = phy_offset, store_ts
        if prev == 0:
            self.slot_count += 1
        self.count = count + 1
        if phy_offset >= self.end_phy:  # a repaired record indexed late does not move the end back
            self.end_phy, self.end_ts = phy_offset, max(store_ts, self.end_ts)
        self.dirty = True  # the header is written at flush: recovery never trusts an unflushed file
        return True

    def put_run(self, flat: list[int], start: int) -> int:
        """``put_hashed`` for keys ``start``, ``start + 1``, ... of ``flat`` ([java_hash,
        phy_offset, store_ts] per key) in C (src/ledgermq/_index_put.c), a dispatch round's
        keys at once; it stops at the first key the file has no room for or that holds a
        value C does not (that one is ``put_hashed``'s). Returns how many it put."""
        assert _C is not None
        done = _C.index_put_run(
            self.mm,
            self.slots,
            self.max_entries,
            self.count,
            self.slot_count,
            self.begin_phy,
            self.begin_ts,
            self.end_phy,
            self.end_ts,
            flat,
            start,
        )
        if done is None:
            return 0
        put, self.count, self.slot_count, self.begin_phy, self.begin_ts, self.end_phy, self.end_ts = done
        self.dirty = True  # as put_hashed: the header is written at flush
        return int(put)

    def _newest_before(self, idx: int) -> int:
        """The slot's newest entry below ``count``.

        A slot can point past ``count`` after a crash (entries were written, the header
        was not); recovery replays the same records into the same entry numbers, so the
        stale entries' own chains lead back to the valid ones.
        """
        steps = 0
        while idx >= self.count and steps < 64:
            if idx >= self.max_entries:
                return 0
            idx = ENTRY.unpack_from(self.mm, self._entry_pos(idx))[3]
            steps += 1
        return idx if 0 < idx < self.count else 0

    def _entry_pos(self, idx: int) -> int:
        return HEADER_SIZE + self.slots * SLOT.size + idx * ENTRY_SIZE

    def overlaps(self, begin: int, end: int) -> bool:
        return self.begin_ts <= end and begin <= self.end_ts

    def lookup(self, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Physical offsets of entries matching ``key`` within [begin, end], newest first."""
        out: list[int] = []
        key_hash = index_key_hash(key)
        slot_pos = HEADER_SIZE + (key_hash % self.slots) * SLOT.size
        idx = SLOT.unpack_from(self.mm, slot_pos)[0]
        seen = 0
        while 0 < idx < self.count and len(out) < max_num and seen < self.max_entries:
            seen += 1
            h, phy, diff, prev = ENTRY.unpack_from(self.mm, HEADER_SIZE + self.slots * SLOT.size + idx * ENTRY_SIZE)
            if diff < 0:
                break
            ts = self.begin_ts + diff * 1000
            if h == key_hash and begin <= ts <= end:
                out.append(phy)
            if prev <= 0 or prev >= idx:
                break
            idx = prev
        return out

    def flush(self) -> None:
        if self.dirty:
            self.dirty = False
            self._write_header()
            os.fdatasync(self.fd)

    def fsync(self) -> None:
        os.fdatasync(self.fd)

    def _write_header(self) -> None:
        HEADER.pack_into(
            self.mm, 0, self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.slot_count, self.count
        )

    def close(self) -> None:
        self._write_header()
        self.mm.close()
        os.close(self.fd)

    def destroy(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


class IndexService:
    """Builds index entries from dispatched records and answers key queries."""

    def __init__(self, directory: Path, slots: int, max_entries: int, clock: Clock) -> None:
        self.directory = directory
        self.slots = slots
        self.max_entries = max_entries
        self.clock = clock
        self.files: list[IndexFile] = []
        self.lock = threading.Lock()
        self._next_phy = 0  # records below this offset are indexed already (replay guard)
        self.files_dropped = 0  # files that failed their checks (load, scrub) and were rebuilt
        # build_staged/build_rows put their keys in C (store/index_batch.py) where it is
        # built; the Python loops are the reference (the tests turn this off to compare).
        self.put_in_c = _C is not None

    def load(self, last_exit_ok: bool, checkpoint_index_ts: int) -> int | None:
        """Open index files; after a crash drop those newer than the checkpoint.

        Returns the commit-log offset recovery must re-dispatch from to rebuild what was
        dropped (None if nothing was).
        """
        rebuild_from: int | None = None
        if not self.directory.exists():
            return None
        broken = False
        for name in sorted(os.listdir(self.directory)):
            if not (name.isdigit() and len(name) == 17):
                continue
            f = IndexFile(self.directory / name, self.slots, self.max_entries)
            why = "a file before it failed its checks" if broken else f.problem()
            if why is not None:
                # Dropped with every later file (they continue its entry numbers' story);
                # rebuilt from the end of the last trusted file's records.
                if not broken:
                    log.error("index %s fails its checks (%s); dropping it and later files, rebuilding", name, why)
                broken = True
                self.files_dropped += 1
                f.destroy()
                trusted_end = self._resume_at()
                rebuild_from = trusted_end if rebuild_from is None else min(rebuild_from, trusted_end)
                continue
            if not last_exit_ok and f.end_ts > checkpoint_index_ts:
                log.info("index %s is newer than the checkpoint; rebuilding it", name)
                begin = f.begin_phy if f.count > 1 else None
                f.destroy()
                if begin is not None:
                    rebuild_from = begin if rebuild_from is None else min(rebuild_from, begin)
                continue
            self.files.append(f)
            if f.count > 1:
                self._next_phy = max(self._next_phy, f.end_phy + 1)
        return rebuild_from

    def build(self, req: DispatchRequest, *, force: bool = False) -> None:
        """Index the record's keys; ``force``: even below the replay guard (a record whose
        consume-queue unit was only now written, after a repair)."""
        if req.sysflag & SF.TRANSACTION_MASK == SF.TRANSACTION_ROLLBACK_TYPE:
            return
        uniq, keys = req.uniq_key, req.keys
        if not uniq and not keys:
            return
        phy, ts, prefix = req.commit_log_offset, req.store_timestamp, req.topic + "#"
        with self.lock:
            if phy < self._next_phy and not force:
                return  # replayed during recovery; already indexed
            f = self._writable()
            if uniq:
                f = self._put(f, java_string_hash(prefix + uniq), phy, ts)
            if keys:
                for k in keys.split(KEY_SEPARATOR):
                    if k:
                        f = self._put(f, java_string_hash(prefix + k), phy, ts)
            self._next_phy = max(self._next_phy, phy + 1)

    def build_staged(self, reqs: Sequence[DispatchRequest], count: int) -> None:
        """``build`` for each of the first ``count`` of ``reqs`` (a master's dispatch round,
        in commit-log order) under one lock: a batch's records, or the sends of one loop
        turn, cost one lock and one look for the writable file instead of one each. Raises
        ``IndexNotBuilt`` naming the first request not indexed, as ``build_rows`` does."""
        i = 0
        with self.lock:
            if self.put_in_c:
                build_staged_c(self, reqs, count)
                return
            try:
                f: IndexFile | None = None
                for i in range(count):
                    req = reqs[i]
                    uniq, keys = req.uniq_key, req.keys
                    if not uniq and not keys:
                        continue
                    phy = req.commit_log_offset
                    if phy < self._next_phy or req.sysflag & SF.TRANSACTION_MASK == SF.TRANSACTION_ROLLBACK_TYPE:
                        continue
                    ts, prefix = req.store_timestamp, req.topic + "#"
                    if f is None:
                        f = self._writable()
                    if uniq and not f.put_hashed(java_string_hash(prefix + uniq), phy, ts):
                        f = self._put(self._roll(), java_string_hash(prefix + uniq), phy, ts)
                    if keys:
                        for k in keys.split(KEY_SEPARATOR):
                            if k:
                                f = self._put(f, java_string_hash(prefix + k), phy, ts)
                    self._next_phy = phy + 1
            except Exception as exc:
                raise IndexNotBuilt(i) from exc

    def build_rows(self, rows: Sequence[Row], count: int) -> None:
        """``build`` for each of the first ``count`` of ``rows`` (store/record_scan.py, in
        commit-log order: a replica's dispatch round), under one lock, each key hashed
        straight from the record's bytes. Raises ``IndexNotBuilt`` naming the first row not
        indexed; a row whose keys were only partly added is indexed again in full by the
        retry, as ``build`` would be."""
        prefixes: dict[str, bytes] = {}
        i = 0
        with self.lock:
            if self.put_in_c:
                build_rows_c(self, rows, count)
                return
            try:
                f: IndexFile | None = None
                for i in range(count):
                    row = rows[i]
                    uniq, keys = row[UNIQ], row[KEYS]
                    if uniq is None and keys is None:
                        continue
                    phy = row[PHYS]
                    if phy < self._next_phy or row[SYSFLAG] & SF.TRANSACTION_MASK == SF.TRANSACTION_ROLLBACK_TYPE:
                        continue
                    topic = row[TOPIC]
                    prefix = prefixes.get(topic)
                    if prefix is None:
                        prefix = prefixes[topic] = (topic + "#").encode()
                    ts = row[STORE_TS]
                    if f is None:
                        f = self._writable()
                    if uniq is not None and not f.put_hashed(java_utf8_hash(prefix + uniq), phy, ts):
                        f = self._put(self._roll(), java_utf8_hash(prefix + uniq), phy, ts)
                    if keys is not None:
                        for k in keys.split(_KEY_SEPARATOR_B):
                            if k:
                                f = self._put(f, java_utf8_hash(prefix + k), phy, ts)
                    self._next_phy = phy + 1
            except Exception as exc:
                raise IndexNotBuilt(i) from exc

    def _put(self, f: IndexFile, java_hash: int, phy: int, ts: int) -> IndexFile:
        """Add the key to ``f``, or to a new file if ``f`` is full; returns the file used."""
        if not f.put_hashed(java_hash, phy, ts):
            f = self._roll()
            f.put_hashed(java_hash, phy, ts)
        return f

    def _writable(self) -> IndexFile:
        if not self.files or self.files[-1].is_full:
            return self._roll()
        return self.files[-1]

    def _roll(self) -> IndexFile:
        self.directory.mkdir(parents=True, exist_ok=True)
        prev = self.files[-1] if self.files else None
        now = self.clock.wall_ms()
        path = self.directory / index_file_name(now)
        while path.exists():
            now += 1
            path = self.directory / index_file_name(now)
        f = IndexFile(path, self.slots, self.max_entries)
        if prev is not None:
            prev.flush()
        self.files.append(f)
        fsync_dir(self.directory)
        return f

    def query(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[int]:
        full = f"{topic}#{key}"
        out: list[int] = []
        with self.lock:
            for f in reversed(self.files):
                if len(out) >= max_num:
                    break
                if f.overlaps(begin, end) or f is self.files[-1]:
                    out.extend(f.lookup(full, max_num - len(out), begin, end))
        return out

    def drop_from(self, bad: IndexFile) -> int:
        """Drop ``bad`` and every later file (the scrub found ``bad`` broken); return the
        commit-log offset to re-index from (the end of the last kept file's records). The
        caller holds the dispatch lock and rebuilds from there."""
        with self.lock:
            at = self.files.index(bad)
            dropped, self.files = self.files[at:], self.files[:at]
            for f in dropped:
                f.destroy()
            self.files_dropped += len(dropped)
            kept = [f for f in self.files if f.count > 1]
            self._next_phy = kept[-1].end_phy + 1 if kept else 0
            return self._resume_at()

    def _resume_at(self) -> int:
        """Where a rebuild walks the commit log from: the start of the last record indexed
        (a record boundary; ``build``'s replay guard skips that record itself). The guard,
        one past it, lies inside the record: a walk from there met no record and took the
        healthy bytes for damage."""
        return max(self._next_phy - 1, 0)

    def forget_after(self, offset: int) -> None:
        """After a commit-log truncation: records from ``offset`` on may be indexed again."""
        with self.lock:
            self._next_phy = min(self._next_phy, offset)

    @property
    def last_update(self) -> tuple[int, int]:
        """(endTimestamp, endPhyOffset) of the newest index file."""
        with self.lock:
            if not self.files:
                return 0, 0
            return self.files[-1].end_ts, self.files[-1].end_phy

    def flush(self) -> int:
        """Flush every dirty file; return the newest store time the flush covers.

        Headers and that time are snapshotted under the lock before any fsync, so the
        checkpoint never names an entry added while the fsync ran.
        """
        with self.lock:
            dirty = [f for f in self.files if f.dirty]
            for f in dirty:
                f.dirty = False
                f._write_header()
            covered = self.files[-1].end_ts if self.files else 0
        for f in dirty:
            f.fsync()
        return covered

    def delete_expired(self, phy_min: int) -> int:
        """Remove index files that only point at deleted commit-log segments."""
        with self.lock:
            dead = [f for f in self.files[:-1] if f.end_phy < phy_min]
            for f in dead:
                f.destroy()
            self.files = [f for f in self.files if f not in dead]
        return len(dead)

    def close(self) -> None:
        with self.lock:
            for f in self.files:
                f.flush()
                f.close()
            self.files = []
