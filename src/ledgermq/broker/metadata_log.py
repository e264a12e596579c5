"""A metadata file persisted in O(change): RocketMQ's JSON snapshot plus an append-only change log.

Rewriting config/topics.json on every topic creation costs O(topics) per change, so
creating N topics costs O(N^2): at 10,000 topics a creation wrote ~2 MB and the broker
managed under 100 creations a second. Here a change appends one line to
``<file>.changes`` beside the snapshot; when that log outgrows
``max(compact_min_bytes, snapshot size)`` the whole table is written once as a new
snapshot and the log is truncated. Each snapshot write is paid for by at least as many
bytes of appended changes, so one change costs O(1) amortised.

The snapshot stays RocketMQ's JSON, written by ``save_json`` exactly as before (atomic,
previous version kept as ``.bak``), and a clean shutdown compacts, leaving the log empty:
a cleanly stopped store moves to a Java broker unchanged, and one coming back from Java
finds no stale log to replay over Java's file. RocksDB was considered and rejected: no
well-kept binding in Debian, and it would not keep the Java-readable file.

Change log format (``<file>.changes``), one record per line::

    | bytes | content                                                        |
    |-------|----------------------------------------------------------------|
    | 8     | CRC-32 (zlib) of the JSON bytes, lower-case hex                |
    | 1     | a space                                                        |
    | n     | the record: one JSON object on one line (orjson)               |
    | 1     | ``\\n``                                                         |

    | JSON field    | meaning                                                    |
    |---------------|------------------------------------------------------------|
    | ``op``        | ``put`` (insert or replace ``key`` by ``value``),          |
    |               | ``merge`` (update the entries of ``value`` inside ``key``: |
    |               | consumer offsets, only the queues that changed), ``del``   |
    | ``key``       | topic name; group name; ``topic@group`` for offsets        |
    | ``value``     | the entry as the snapshot writes it (absent for ``del``)   |
    | ``dataVersion`` | the table's DataVersion after this change (optional)     |

Records are idempotent, keyed, last-writer-wins: replaying the log over a snapshot that
already holds its effects (a crash after a compaction wrote the snapshot but before it
truncated the log) gives the same table. That is why compaction needs no rename dance.

Load: the snapshot (``.bak`` if the snapshot is unreadable, as before), then the log in
order. A last line that is incomplete or fails its CRC is a write torn by a crash: it was
never acknowledged, so it is dropped and cut off the file (the next append must not
follow garbage). A bad line anywhere else is an error naming the file and line: the
file was damaged, and guessing would silently lose or invent metadata.

Durability: an append is one ``write()`` on an unbuffered ``O_APPEND`` descriptor, so the
change is in the page cache before the request is answered and survives a process kill
(kill -9). The log is fsynced by ``sync()``, which the broker calls on a short timer
(``sync_interval_ms``, 1 s) and which every compaction and clean shutdown does; on power
loss the changes of at most the last interval can be lost (and a torn tail dropped). An
fsync per change would cap creations at the disk's fsync rate (0.1 ms on a virtual disk,
1-10 ms on real ones), so it is a setting (``sync_each_change``), off by default. A power
loss can also leave garbage that is not at the end (blocks written out of order); load
then stops with the file and line, and the operator decides (truncate there, or restore).

The ``.bak`` fallback: ``.bak`` is the snapshot before the last compaction, so if the
snapshot itself is unreadable (it is written with fsync and rename, so only outside
damage does that) the changes between those two compactions are lost; the current log is
still replayed over it.

Crash points, in order (``failpoint`` names; tests kill a child process at each):
``metadata_log.before_append``, ``metadata_log.after_append``,
``metadata_log.before_snapshot``, then ``save_json``'s own ``atomic_file.before_fsync``
and ``atomic_file.before_rename``, ``metadata_log.after_snapshot`` (snapshot written,
log not yet truncated), ``metadata_log.after_truncate``.
"""

from __future__ import annotations

import logging
import os
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from ledgermq.broker.json_file import load_json, save_json
from ledgermq.errors import ConfigError
from ledgermq.failpoints import failpoint

log = logging.getLogger(__name__)

Op = Literal["put", "merge", "del"]
OPS: frozenset[str] = frozenset(("put", "merge", "del"))
CHANGES_SUFFIX = ".changes"


@dataclass(frozen=True, slots=True)
class MetadataLogSettings:
    """How often the log is folded into the snapshot and made durable."""

    compact_min_bytes: int = 1 << 20  # compact when the log exceeds max(this, snapshot size)
    sync_interval_ms: int = 1000  # the broker's fsync timer (BrokerApp)
    sync_each_change: bool = False  # fsync on the request path: power-loss safe, slower


@dataclass(frozen=True, slots=True)
class Change:
    """One record of the log (see the module docstring for the JSON layout)."""

    op: Op
    key: str
    value: Any = None
    data_version: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"op": self.op, "key": self.key}
        if self.op != "del":
            doc["value"] = self.value
        if self.data_version is not None:
            doc["dataVersion"] = self.data_version
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> Change:
        if not isinstance(doc, dict) or doc.get("op") not in OPS or not isinstance(doc.get("key"), str):
            raise ValueError("not a change record (op put|merge|del and a string key)")
        version = doc.get("dataVersion")
        return cls(doc["op"], doc["key"], doc.get("value"), version if isinstance(version, dict) else None)


def encode_line(change: Change) -> bytes:
    body = orjson.dumps(change.to_json(), option=orjson.OPT_NON_STR_KEYS)
    return b"%08x %s\n" % (zlib.crc32(body), body)


def decode_line(line: bytes) -> Change:
    """One line without its ``\\n``; ValueError if it is damaged."""
    if len(line) < 10 or line[8:9] != b" ":
        raise ValueError("no CRC prefix")
    body = line[9:]
    try:
        crc = int(line[:8], 16)
    except ValueError:
        raise ValueError("no CRC prefix") from None
    if zlib.crc32(body) != crc:
        raise ValueError("CRC mismatch")
    try:
        return Change.from_json(orjson.loads(body))
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None


def parse_changes(path: Path, data: bytes) -> tuple[list[Change], int]:
    """The records of a change log's bytes and the length of its whole records.

    A damaged last line is a torn write (dropped, with a warning); a damaged line before
    it is a ConfigError naming ``path`` and the line number."""
    changes: list[Change] = []
    good = 0
    lines = data.split(b"\n")
    complete = lines[:-1]  # the piece after the last \n is empty or a torn write
    for number, line in enumerate(complete, start=1):
        try:
            changes.append(decode_line(line))
        except ValueError as exc:
            if number == len(complete) and not lines[-1]:
                log.warning("%s: last line %d is torn (%s); dropped", path, number, exc)
                break
            raise ConfigError(
                f"{path} line {number} is damaged ({exc}); it is not the last line, so this is not "
                "a torn write: restore the file or cut it at that line"
            ) from None
        good += len(line) + 1
    if lines[-1]:
        log.warning("%s: a torn last record (%d bytes) dropped", path, len(lines[-1]))
    return changes, good


def replay(doc: Any, table_key: str, changes: Iterable[Change]) -> dict[str, Any]:
    """The snapshot document ``doc`` with ``changes`` applied to its ``table_key`` table
    (``topicConfigTable``, ...), in the snapshot's own JSON shape; ``dataVersion`` becomes
    the last change's. Idempotent for a suffix of the history that ``doc`` already holds."""
    out: dict[str, Any] = dict(doc) if isinstance(doc, dict) else {}
    table: dict[str, Any] = dict(out.get(table_key) or {})
    for change in changes:
        if change.op == "del":
            table.pop(change.key, None)
        elif change.op == "put":
            table[change.key] = change.value
        else:
            table[change.key] = {**(table.get(change.key) or {}), **(change.value or {})}
        if change.data_version is not None:
            out["dataVersion"] = change.data_version
    out[table_key] = table
    return out


def read_current(path: Path, table_key: str) -> dict[str, Any]:
    """What a broker starting now would load from ``path``: the snapshot with its change
    log replayed. Read-only (a torn tail is skipped, not cut): for tools and tests that
    look at a running broker's files, whose snapshot alone lags behind."""
    changes_path = path.with_name(path.name + CHANGES_SUFFIX)
    data = changes_path.read_bytes() if changes_path.exists() else b""
    return replay(load_json(path), table_key, parse_changes(changes_path, data)[0])


class MetadataLog:
    """The snapshot file ``path`` and its change log; the owner applies the changes.

    ``snapshot`` returns the owner's whole table as the snapshot's JSON document; it is
    called at compaction. Not thread-safe: the broker calls it from its event loop.
    """

    def __init__(self, path: Path, snapshot: Callable[[], Any], settings: MetadataLogSettings | None = None) -> None:
        self.path = path
        self.changes_path = path.with_name(path.name + CHANGES_SUFFIX)
        self.settings = settings or MetadataLogSettings()
        self._snapshot = snapshot
        self._fd: int | None = None
        self._size: int | None = None  # bytes of whole records in the log (None: not opened yet)
        self._snapshot_size = 0
        self._compact_at = self.settings.compact_min_bytes
        self._unsynced = False

    # -- load ------------------------------------------------------------------------------
    def load(self) -> tuple[Any | None, list[Change]]:
        """The snapshot document (None if there is none) and the changes to replay over it.

        A torn last record is cut off the file, so the next append starts on a clean line."""
        doc = load_json(self.path)
        self._snapshot_size = self._stat_size(self.path)
        self.close_file()
        self._size = None
        data = self.changes_path.read_bytes() if self.changes_path.exists() else b""
        changes, good = parse_changes(self.changes_path, data)
        self._size = good
        if good < len(data):
            os.fsync(self._open())  # _open cuts the torn rest off
        self._schedule_compaction()
        return doc, changes

    @staticmethod
    def _stat_size(path: Path) -> int:
        try:
            return path.stat().st_size
        except FileNotFoundError:
            return 0

    # -- change ----------------------------------------------------------------------------
    def append(self, changes: Iterable[Change]) -> None:
        """Append records (one ``write()``); compact if the log has grown enough.

        On return the records survive a process kill. A failed write (a full disk) is cut
        back off the file so no torn record is left in front of the next one, and raised.
        """
        data = b"".join(encode_line(c) for c in changes)
        if not data:
            return
        fd = self._open()
        try:
            failpoint("metadata_log.before_append")
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        except BaseException:
            self._cut_back()
            raise
        self._size = (self._size or 0) + len(data)
        self._unsynced = True
        failpoint("metadata_log.after_append")
        if self.settings.sync_each_change:
            self.sync()
        if self._size >= self._compact_at:
            self._compact_quietly()

    def _cut_back(self) -> None:
        if self._fd is None or self._size is None:
            return
        try:
            os.ftruncate(self._fd, self._size)
        except OSError:
            log.exception("%s: could not cut a failed append back off; closing it", self.changes_path)
            self.close_file()  # reopened (and cut then) by the next append

    def sync(self) -> None:
        """fsync the log if it has unsynced records (the broker's timer; also at compaction)."""
        if self._unsynced and self._fd is not None:
            os.fsync(self._fd)
            self._unsynced = False

    # -- compaction ------------------------------------------------------------------------
    def compact(self) -> None:
        """Write the whole table as the snapshot, then empty the log. Raises on failure.

        Between the snapshot write and the truncation, a crash leaves a new snapshot plus an
        old log, whose replay is idempotent; before the snapshot write completes, the old
        snapshot (or its .bak) plus the whole log.
        """
        failpoint("metadata_log.before_snapshot")
        self._snapshot_size = save_json(self.path, self._snapshot())
        failpoint("metadata_log.after_snapshot")
        fd = self._open()
        os.ftruncate(fd, 0)
        os.fsync(fd)
        self._size = 0
        self._unsynced = False
        failpoint("metadata_log.after_truncate")
        self._schedule_compaction()

    def _compact_quietly(self) -> None:
        """Compaction on the request path: the change is already safe in the log, so a
        failure (a full disk) is logged, not raised, and retried after some more growth."""
        try:
            self.compact()
        except Exception:
            log.exception("%s: compaction failed; the change log keeps growing", self.path)
            self._compact_at = self.log_size + self._threshold() // 4

    def _threshold(self) -> int:
        return max(self.settings.compact_min_bytes, self._snapshot_size)

    def _schedule_compaction(self) -> None:
        self._compact_at = self._threshold()

    @property
    def log_size(self) -> int:
        return self._size or 0

    # -- files -----------------------------------------------------------------------------
    def _open(self) -> int:
        if self._fd is None:
            self.changes_path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.changes_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            on_disk = os.fstat(fd).st_size
            if self._size is None:  # appending without a load (tests; a manager never loaded)
                self._size = on_disk
            elif on_disk > self._size:  # the rest of a torn or failed append: cut it off
                os.ftruncate(fd, self._size)
            self._fd = fd
        return self._fd

    def close_file(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                if self._unsynced:
                    os.fsync(fd)
            finally:
                os.close(fd)
                self._unsynced = False

    def close(self) -> None:
        """Clean shutdown: fold the log into the snapshot, so the snapshot alone is complete."""
        try:
            self.compact()
        finally:
            self.close_file()


class LoggedTable:
    """What the topic and subscription-group tables share about their files: ``log`` is
    their MetadataLog, ``_loaded`` whether ``load`` ran (a table never loaded is not the
    file's, and must never be written over it)."""

    log: MetadataLog
    _loaded: bool

    def persist(self) -> None:
        """Write the whole table as its JSON file and empty the change log (a compaction)."""
        self.log.compact()

    def sync(self) -> None:
        """fsync the change log (the broker's short timer): changes survive a power loss."""
        self.log.sync()

    def close(self) -> None:
        """Clean shutdown: the JSON file alone holds the table, as a Java broker expects."""
        if self._loaded:
            self.log.close()
        else:
            self.log.close_file()
