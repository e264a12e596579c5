"""Faults done to a broker's files: bit flips, a lost segment, and a power loss.

They work on the files alone (the broker is stopped, or, for an online bit flip, running:
``os.pwrite`` goes through the page cache its mapping shares). Data files are the
20-digit-named segments of the commit log (``commitlog/``, or a DLedger member's
``dledger-<id>/data/``), the DLedger index (``dledger-<id>/index/``) and the consume queues
(``consumequeue/<topic>/<queue>/``). Metadata files (checkpoint, offsets, topics, Raft term)
are written atomically with an fsync, so a power loss keeps them as they were.

**The power-loss model.** A broker started with ``LEDGERMQ_FSYNC_LOG=<file>`` appends
"path<TAB>position" after every fsync of a data file (``failpoints.synced``), "path<TAB>0"
when it creates one and "path<TAB>position<TAB>cut" when it cuts one. After the SIGKILL of
every process, ``power_loss`` zeroes each data file from its last durable position on
(files never synced lose everything): what a machine that lost power keeps, when its disk
honours fsync and nothing else. Zeroing shrinks and grows the file back, so sparse files
stay sparse.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ledgermq.failpoints import CUT_MARK

SEGMENT_DIGITS = 20


def _is_segment(p: Path) -> bool:
    return len(p.name) == SEGMENT_DIGITS and p.name.isdigit() and p.is_file()


def log_dir(store_dir: Path) -> Path:
    """Where the broker's commit log lives: a DLedger member's data files, else ``commitlog/``."""
    dledger = sorted(store_dir.glob("dledger-*/data"))
    return dledger[0] if dledger else store_dir / "commitlog"


def segments(directory: Path) -> list[Path]:
    """The segment files of one directory, oldest first."""
    if not directory.is_dir():
        return []
    return sorted((p for p in directory.iterdir() if _is_segment(p)), key=lambda p: int(p.name))


def sealed_segments(store_dir: Path) -> list[Path]:
    """The commit-log segments nothing is appended to any more: every one but the newest."""
    return segments(log_dir(store_dir))[:-1]


def digest_dir(store_dir: Path) -> Path:
    """Where the store keeps the per-block digests of its sealed log files (store/digests.py)."""
    dledger = sorted(store_dir.glob("dledger-*/data"))
    return dledger[0].parent / "digests" if dledger else store_dir / "digests" / "commitlog"


def digested_segments(store_dir: Path) -> list[Path]:
    """The sealed log files whose digest the store has written. Only these are rot targets:
    the digest is what finds a flip in a header or in properties (the record CRC covers
    only the body), and a flip that lands before a segment's digest exists is written
    into it (docs/storage-integrity.md), which is not a fault the store claims to find."""
    digests = digest_dir(store_dir)
    return [p for p in sealed_segments(store_dir) if (digests / (p.name + ".crc")).is_file()]


def data_files(store_dir: Path) -> list[Path]:
    dirs = [store_dir / "commitlog", *store_dir.glob("dledger-*/data"), *store_dir.glob("dledger-*/index")]
    files = [f for d in dirs for f in segments(d)]
    cq = store_dir / "consumequeue"
    if cq.is_dir():
        files.extend(p for p in cq.glob("*/*/*") if _is_segment(p))
    return files


def read_fsync_log(path: Path) -> dict[str, int]:
    """The durable position of every data file the log names (resolved paths as keys)."""
    durable: dict[str, int] = {}
    resolved: dict[str, str] = {}
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return durable
    for line in text.split("\n")[:-1]:  # an unterminated last line was torn
        cut = line.endswith(CUT_MARK)
        name, _, pos_text = (line[: -len(CUT_MARK)] if cut else line).rpartition("\t")
        if not name or not pos_text.isdigit():
            continue  # not a record
        key = resolved.get(name)
        if key is None:
            key = resolved[name] = str(Path(name).resolve())
        pos = int(pos_text)
        durable[key] = min(durable.get(key, 0), pos) if cut else pos
    return durable


def _data_end(path: Path) -> int:
    """One past the last non-zero byte (0 for an empty file)."""
    return len(path.read_bytes().rstrip(b"\0"))


def durable_end(store_dir: Path, durable: dict[str, int]) -> int:
    """The commit-log offset below which everything was durable (segments are flushed oldest
    first, so it is the furthest durable position of any of them)."""
    kept = ((int(seg.name), durable.get(str(seg.resolve()), 0)) for seg in segments(log_dir(store_dir)))
    return max((base + pos for base, pos in kept if pos > 0), default=0)


def power_loss(store_dir: Path, fsync_log: Path) -> dict[str, Any]:
    """Zero every data file of a dead broker beyond what its fsync log says was durable.

    Returns the durable commit-log end (before the cut) and what was cut."""
    durable = read_fsync_log(fsync_log)
    end = durable_end(store_dir, durable)
    cut_files = 0
    lost_log_bytes = 0
    log_files = {str(p.resolve()) for p in segments(log_dir(store_dir))}
    for f in data_files(store_dir):
        key = str(f.resolve())
        keep = durable.get(key, 0)
        size = f.stat().st_size
        if keep >= size:
            continue
        if key in log_files:
            lost_log_bytes += max(0, _data_end(f) - keep)
        with open(f, "r+b") as fh:
            os.ftruncate(fh.fileno(), keep)
            os.ftruncate(fh.fileno(), size)
        cut_files += 1
    return {"durable_end": end, "files_cut": cut_files, "log_bytes_lost": lost_log_bytes}


def flip_bytes(segment: Path, picks: Sequence[tuple[float, int]]) -> list[dict[str, int]]:
    """XOR one byte per (fraction, mask) pick at ``fraction`` of the segment's data (up to its
    last non-zero byte), through the file (``pwrite``: a running broker's mapping sees it).
    Returns each flip's commit-log offset, old and new byte."""
    end = max(1, _data_end(segment))
    base = int(segment.name)
    flips = []
    fd = os.open(segment, os.O_RDWR)
    try:
        for frac, mask in picks:
            pos = min(end - 1, int(frac * end))
            old = os.pread(fd, 1, pos)[0]
            new = old ^ (mask & 0xFF or 1)
            os.pwrite(fd, bytes([new]), pos)
            flips.append({"offset": base + pos, "old": old, "new": new})
        os.fsync(fd)
    finally:
        os.close(fd)
    return flips


def lose_segment(segment: Path, mode: str, fraction: float) -> dict[str, Any]:
    """``delete`` the segment file, or ``truncate`` it to ``fraction`` of its size."""
    size = segment.stat().st_size
    if mode == "delete":
        segment.unlink()
        return {"segment": segment.name, "mode": mode, "size": size}
    if mode == "truncate":
        keep = int(size * fraction)
        os.truncate(segment, keep)
        return {"segment": segment.name, "mode": mode, "size": size, "kept": keep}
    raise ValueError(f"segment-loss mode {mode!r} is not delete or truncate")


def pick(items: Sequence[Path], fraction: float) -> Path:
    """The item at ``fraction`` of the list (a seeded draw in [0, 1))."""
    return items[min(len(items) - 1, int(fraction * len(items)))]


def flip_picks(draws: Iterable[float]) -> list[tuple[float, int]]:
    """(position fraction, mask) pairs from a plan's draws after the segment pick."""
    values = list(draws)
    return [(values[i], 1 + int(values[i + 1] * 255)) for i in range(0, len(values) - 1, 2)]
