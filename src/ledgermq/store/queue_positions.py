"""Where every consume queue stands, written at a clean stop so the next start need not
read 80,000 queue directories and files.

Without it a start lists each queue's directory and reads each queue's first page: at
80,000 queues that is most of a restart. After a clean stop those answers are already
known, so the store writes them to ``<storePathRootDir>/consumequeue.positions`` (one
orjson document, written atomically) just before it marks the exit clean, and the next
start builds its queue table from it without touching a queue file.

The file is trusted only when all of these hold, and is removed at every start, used or
not, so it can never describe a later run:

* the last exit was clean (no abort file), as for RocketMQ's own normal recovery;
* it names the same segment size, commit-log segments and checkpoint bytes the store has
  now, and the newest commit-log segment's modification time: a Java broker that ran on
  the store in between (the formats are shared) wrote to the commit log and the
  checkpoint, so its changes are never hidden behind stale positions;
* the consumequeue directory and its topic directories have the modification times they
  had: an operator who removed consume queues to have them rebuilt gets them rebuilt.

Anything else (no file, a mismatch, a file that does not parse) falls back to reading
the queues from disk, which is always correct.

Layout (version 1)::

    {"version": 1, "segmentSize": int, "checkpoint": hex, "commitLog": [names],
     "lastSegmentMtimeNs": int, "queueDirs": digest of directory modification times,
     "queues": [[topic, queueId, [segment start offsets], wrote of the last segment,
                 maxPhysicOffset, minLogicOffset, first unit's commit-log offset or -1,
                 lastStoreTimestamp], ...]}
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from pathlib import Path
from typing import Any

import orjson

from ledgermq.atomic_file import fsync_dir, write_atomic
from ledgermq.config import StoreConfig
from ledgermq.store.queue_table import ConsumeQueueTable

log = logging.getLogger(__name__)

FILE_NAME = "consumequeue.positions"
VERSION = 1


def _tree_digest(cq_root: Path) -> str:
    """The modification times of the consumequeue directory and of each topic directory
    in it: removing the whole tree, a topic or a queue directory changes one of them.
    (Removing single segment files of a stopped store is not noticed, and is not a
    supported operation: remove the queue's directory instead.)"""
    digest = hashlib.blake2b(digest_size=16)
    try:
        digest.update(str(os.stat(cq_root).st_mtime_ns).encode())
        entries = sorted(os.scandir(cq_root), key=lambda e: e.name)
    except FileNotFoundError:
        return ""
    for entry in entries:
        with contextlib.suppress(FileNotFoundError):
            digest.update(f"/{entry.name}:{entry.stat().st_mtime_ns}".encode())
    return digest.hexdigest()


def store_fingerprint(root: Path, commitlog_dir: Path, cq_root: Path, segment_size: int) -> dict[str, Any]:
    """What must not have changed since the positions were written."""
    try:
        checkpoint = (root / "checkpoint").read_bytes().hex()
    except FileNotFoundError:
        checkpoint = ""
    names = sorted(n for n in os.listdir(commitlog_dir) if n.isdigit()) if commitlog_dir.is_dir() else []
    mtime = os.stat(commitlog_dir / names[-1]).st_mtime_ns if names else 0
    return {
        "segmentSize": segment_size,
        "checkpoint": checkpoint,
        "commitLog": names,
        "lastSegmentMtimeNs": mtime,
        "queueDirs": _tree_digest(cq_root),
    }


def save(path: Path, fingerprint: dict[str, Any], queues: list[list[Any]]) -> None:
    write_atomic(path, orjson.dumps({"version": VERSION, **fingerprint, "queues": queues}))


def take(path: Path, fingerprint: dict[str, Any]) -> list[list[Any]] | None:
    """The saved queues if the file matches ``fingerprint``; the file is removed either way."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        os.unlink(path)
        fsync_dir(path.parent)  # durable before anything is written: never trusted twice
    except OSError as exc:
        log.warning("cannot remove %s (%s); reading the queues from disk", path, exc)
        return None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        log.warning("%s is unreadable (%s); reading the queues from disk", path, exc)
        return None
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        return None
    for key, value in fingerprint.items():
        if doc.get(key) != value:
            log.info("%s does not match the store (%s changed); reading the queues from disk", path.name, key)
            return None
    queues = doc.get("queues")
    return queues if isinstance(queues, list) else None


def discard(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def load_queues(config: StoreConfig, queues: ConsumeQueueTable, last_exit_ok: bool) -> bool:
    """Fill ``queues`` at start: from the positions file when it may be trusted (True),
    otherwise by listing the queues on disk. The file is gone afterwards either way."""
    path = Path(config.root_dir) / FILE_NAME
    saved = take(path, _fingerprint(config)) if last_exit_ok else None
    if saved is None:
        discard(path)
        queues.load()
        return False
    queues.load_positions(saved)
    return True


def save_queues(config: StoreConfig, queues: ConsumeQueueTable) -> None:
    """At a clean stop: let the next start skip reading every queue. A failure only costs
    that start its speed, so it is logged, not raised."""
    try:
        save(Path(config.root_dir) / FILE_NAME, _fingerprint(config), queues.positions())
    except OSError as exc:
        log.warning("could not save consume-queue positions (%s); the next start reads the queues", exc)


def _fingerprint(config: StoreConfig) -> dict[str, Any]:
    return store_fingerprint(
        Path(config.root_dir), config.commitlog_path, config.consume_queue_path, config.mapped_file_size_consume_queue
    )
