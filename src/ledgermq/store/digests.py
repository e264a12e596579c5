"""Per-block CRC32 digests of sealed commit-log segments, kept beside the commit log.

RocketMQ's record CRC covers the body only: a flipped bit in a header or in the
properties passes it. Once a segment is full and flushed, a digest of CRC32s per 64 KiB
block is written to ``<storePathRootDir>/digests/commitlog/<segment name>.crc``; any
later flip in that segment shows as a block whose CRC differs. The directory is outside
``commitlog/`` on purpose: a Java broker maps every file it finds there.

File format (big-endian): ``b"LMQD"``, version (u16 = 1), block size (u32), segment
size (u64), block count (u32), then one u32 CRC32 per block, then a CRC32 of everything
before it (a rotted digest file is recognised as such, not taken for rotted data).
Written atomically (temp file, fsync, rename, directory fsync).

**A segment cut in the middle keeps what it knew.** When the log is truncated inside a
digested segment (recovery cutting a torn tail, a slave realigning with its master), the
bytes below the cut stay, but the digest must go: the bytes after it will be written
again. Its CRCs of the blocks wholly below the cut are kept in ``<segment name>.crc.kept``
(same format, magic ``LMQK``, fewer blocks), and when the segment is sealed again its new
digest takes those CRCs for those blocks, not the CRCs of what the blocks hold now. A flip
made below the cut before it (in a field no record check sees, so recovery kept it) thus
still differs from the digest, and the scrub finds it, instead of a digest taken over it.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import threading
import zlib
from pathlib import Path

from ledgermq.atomic_file import write_atomic
from ledgermq.store.mapped_file import segment_name

log = logging.getLogger(__name__)

MAGIC = b"LMQD"
KEPT_MAGIC = b"LMQK"  # the blocks below a cut (module docstring)
VERSION = 1
BLOCK_SIZE = 64 * 1024
SUFFIX = ".crc"
KEPT_SUFFIX = ".crc.kept"
_HEAD = struct.Struct(">4sHIQI")
_U32 = struct.Struct(">I")


class DigestFormatError(ValueError):
    """A digest file that does not decode (itself damaged, or not ours)."""


def block_crcs(buf: bytes | mmap.mmap, block_size: int = BLOCK_SIZE) -> list[int]:
    """CRC32 of each block; slices of a mapping are copies (no buffer export keeps the
    mapping from being closed by a segment deletion meanwhile)."""
    return [zlib.crc32(buf[at : at + block_size]) for at in range(0, len(buf), block_size)]


def encode(crcs: list[int], segment_size: int, block_size: int = BLOCK_SIZE, magic: bytes = MAGIC) -> bytes:
    body = _HEAD.pack(magic, VERSION, block_size, segment_size, len(crcs)) + struct.pack(f">{len(crcs)}I", *crcs)
    return body + _U32.pack(zlib.crc32(body))


def decode(data: bytes, segment_size: int, magic: bytes = MAGIC) -> tuple[int, list[int]]:
    """(block size, CRCs) of a digest file (``KEPT_MAGIC``: of the blocks kept below a
    cut, which may be fewer); DigestFormatError if it is not sound."""
    if len(data) < _HEAD.size + 4:
        raise DigestFormatError("too short")
    body, tail = data[:-4], data[-4:]
    if zlib.crc32(body) != _U32.unpack(tail)[0]:
        raise DigestFormatError("its own CRC does not match")
    found, version, block_size, size, count = _HEAD.unpack_from(body, 0)
    if found != magic or version != VERSION:
        raise DigestFormatError(f"magic {found!r} version {version}")
    blocks = -(-size // block_size) if block_size > 0 else -1
    if size != segment_size or block_size <= 0 or not (count == blocks or (magic == KEPT_MAGIC and count < blocks)):
        raise DigestFormatError(f"made for {size}-byte segments in {block_size}-byte blocks")
    if len(body) != _HEAD.size + 4 * count:
        raise DigestFormatError("length disagrees with its block count")
    return block_size, list(struct.unpack_from(f">{count}I", body, _HEAD.size))


class SegmentDigests:
    """The digest files of one commit log, with a small cache of decoded ones."""

    def __init__(self, directory: Path, segment_size: int, block_size: int = BLOCK_SIZE) -> None:
        self.directory = directory
        self.segment_size = segment_size
        self.block_size = block_size
        self._cache: dict[int, tuple[int, list[int]]] = {}
        self._lock = threading.Lock()
        self.bad_files = 0  # digest files found unreadable (dropped and rewritten)

    def path_for(self, start: int) -> Path:
        return self.directory / (segment_name(start) + SUFFIX)

    def has(self, start: int) -> bool:
        return start in self._cache or self.path_for(start).exists()

    def get(self, start: int) -> tuple[int, list[int]] | None:
        """(block size, CRCs) of the segment starting at ``start``, or None if it has none
        (or its digest file is itself damaged: that file is then removed, and logged)."""
        with self._lock:
            hit = self._cache.get(start)
        if hit is not None:
            return hit
        path = self.path_for(start)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            decoded = decode(data, self.segment_size)
        except DigestFormatError as exc:
            self.bad_files += 1
            log.error("digest %s is unusable (%s); removing it, record checks still apply", path, exc)
            path.unlink(missing_ok=True)
            return None
        with self._lock:
            self._cache[start] = decoded
        return decoded

    def write(self, start: int, segment: bytes | mmap.mmap) -> None:
        """Digest the sealed segment at ``start``; blocks kept from before a cut keep their
        CRCs from then (module docstring)."""
        crcs = block_crcs(segment, self.block_size)
        kept = self._kept(start)
        for blk, crc in enumerate(kept[: len(crcs)]):
            if crcs[blk] != crc:
                log.error(
                    "commit-log segment %d: block [%d, %d) differs from what it held before the log was cut after "
                    "it; its digest keeps the CRC from then, so the scrub finds and repairs it",
                    start,
                    start + blk * self.block_size,
                    start + (blk + 1) * self.block_size,
                )
                crcs[blk] = crc
        self.directory.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path_for(start), encode(crcs, self.segment_size, self.block_size))
        with self._lock:
            self._cache[start] = (self.block_size, crcs)
        if kept:
            self.kept_path_for(start).unlink(missing_ok=True)

    def kept_path_for(self, start: int) -> Path:
        return self.directory / (segment_name(start) + KEPT_SUFFIX)

    def _kept(self, start: int) -> list[int]:
        """The CRCs kept from before a cut inside the segment at ``start`` (none: [])."""
        path = self.kept_path_for(start)
        try:
            block_size, crcs = decode(path.read_bytes(), self.segment_size, KEPT_MAGIC)
        except FileNotFoundError:
            return []
        except DigestFormatError as exc:
            log.error("kept digest blocks %s are unusable (%s); removing them, record checks still apply", path, exc)
            path.unlink(missing_ok=True)
            return []
        return crcs if block_size == self.block_size else []

    def _keep_below(self, start: int, offset: int) -> None:
        """The log is cut at ``offset`` inside the segment at ``start``: keep the CRCs of its
        blocks wholly below the cut (from its digest, or from an earlier cut's kept ones)."""
        count = (offset - start) // self.block_size
        digest = self.get(start)
        crcs = digest[1] if digest is not None and digest[0] == self.block_size else self._kept(start)
        path = self.kept_path_for(start)
        if count <= 0 or not crcs:
            path.unlink(missing_ok=True)
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        write_atomic(path, encode(crcs[:count], self.segment_size, self.block_size, KEPT_MAGIC))

    def bad_blocks(self, start: int, at: int, data: bytes | memoryview) -> list[tuple[int, int]] | None:
        """Segment-relative [from, to) of each whole digest block within ``data`` (the
        segment's bytes from ``at``) whose CRC differs; None when there is no digest."""
        digest = self.get(start)
        if digest is None:
            return None
        block_size, crcs = digest
        view = memoryview(data)
        bad: list[tuple[int, int]] = []
        first = -(-at // block_size)
        for blk in range(first, len(crcs)):
            lo = blk * block_size
            hi = min(lo + block_size, self.segment_size)
            if hi > at + len(view):
                break
            if zlib.crc32(view[lo - at : hi - at]) != crcs[blk]:
                bad.append((lo, hi))
        return bad

    def forget_from(self, offset: int) -> None:
        """Remove digests of segments holding bytes at or after ``offset`` (truncated); of
        the segment the cut falls inside, keep the CRCs of the blocks below it."""
        for start in self._starts():
            if start + self.segment_size > offset:
                if start < offset:
                    self._keep_below(start, offset)
                else:
                    self.kept_path_for(start).unlink(missing_ok=True)
                self._remove(start)

    def forget_before(self, offset: int) -> None:
        """Remove digests of segments wholly below ``offset`` (retention deleted them)."""
        for start in self._starts():
            if start + self.segment_size <= offset:
                self._remove(start)
                self.kept_path_for(start).unlink(missing_ok=True)

    def forget(self, start: int) -> None:
        """Remove the digest of the segment at ``start`` (found taken over damaged bytes)."""
        self._remove(start)
        self.kept_path_for(start).unlink(missing_ok=True)

    def _remove(self, start: int) -> None:
        with self._lock:
            self._cache.pop(start, None)
        self.path_for(start).unlink(missing_ok=True)

    def _starts(self) -> list[int]:
        """Segments with a digest or with kept blocks."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        out = set()
        for name in names:
            for suffix in (SUFFIX, KEPT_SUFFIX):
                stem = name[: -len(suffix)] if name.endswith(suffix) else ""
                if len(stem) == 20 and stem.isdigit():
                    out.add(int(stem))
        return sorted(out)
