"""Consumer offsets (RocketMQ ``ConsumerOffsetManager``), persisted in config/consumerOffset.json.

Key ``topic@group`` -> queue id -> next offset to consume. Persisted every
flushConsumerOffsetInterval and at shutdown; Java writes the inner keys as unquoted
integers, which ``fastjson.loads`` accepts.

A periodic ``persist`` appends to ``consumerOffset.json.changes`` (``metadata_log``) one
``merge`` record per ``topic@group`` holding only the queues committed since the last
persist, and a ``del`` per removed key: O(changed queues), not O(all queues) (a hundred
thousand queues made every 5 s flush rewrite the whole table). ``close`` (shutdown)
writes the whole file, which a Java broker reads as is.
"""

from __future__ import annotations

from pathlib import Path

from ledgermq.broker.metadata_log import Change, MetadataLog, MetadataLogSettings, replay

TOPIC_GROUP_SEPARATOR = "@"
TABLE_KEY = "offsetTable"


class ConsumerOffsetManager:
    def __init__(self, path: Path, log_settings: MetadataLogSettings | None = None) -> None:
        self.path = path
        self.table: dict[str, dict[int, int]] = {}
        self.log = MetadataLog(path, self.to_json, log_settings)
        self._changed: dict[str, set[int]] = {}  # committed since the last persist
        self._removed: set[str] = set()  # keys removed since the last persist
        self._rewrite = False  # the table was changed behind our back: write it whole
        self._loaded = False

    @property
    def dirty(self) -> bool:
        """Whether something changed since the last persist."""
        return bool(self._changed or self._removed or self._rewrite)

    @dirty.setter
    def dirty(self, value: bool) -> None:
        """Setting it (after editing ``table`` directly) makes the next persist write the
        whole file, since which queues changed is unknown; prefer ``commit_key``/``remove``."""
        if value:
            self._rewrite = True
        else:
            self._changed.clear()
            self._removed.clear()
            self._rewrite = False

    def load(self) -> None:
        snapshot, changes = self.log.load()
        doc = replay(snapshot, TABLE_KEY, changes)
        self.table = {key: {int(q): int(o) for q, o in queues.items()} for key, queues in doc[TABLE_KEY].items()}
        self.dirty = False
        self._loaded = True

    def persist(self) -> None:
        """Append what changed since the last persist and fsync it (the periodic flush)."""
        if self._rewrite:
            self.compact()
            return
        records = [Change("del", key) for key in sorted(self._removed)]  # before a re-commit's merge
        for key, queue_ids in sorted(self._changed.items()):
            queues = self.table.get(key, {})
            changed = {q: queues[q] for q in sorted(queue_ids) if q in queues}
            if changed:
                records.append(Change("merge", key, changed))
        self.log.append(records)
        self.log.sync()
        self.dirty = False

    def compact(self) -> None:
        """Write the whole table as consumerOffset.json and empty the change log."""
        self.log.compact()
        self.dirty = False

    def close(self) -> None:
        """Clean shutdown: consumerOffset.json alone holds every offset (Java compatible)."""
        if self._loaded:
            self.log.close()
            self.dirty = False
        else:
            self.log.close_file()  # never loaded: the table is not the file's, do not write it

    def to_json(self) -> dict[str, object]:
        return {TABLE_KEY: {k: dict(sorted(v.items())) for k, v in sorted(self.table.items())}}

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.commit_key(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", queue_id, offset)

    def commit_key(self, key: str, queue_id: int, offset: int) -> None:
        """Set the offset of ``queue_id`` under ``topic@group`` ``key``."""
        self.table.setdefault(key, {})[queue_id] = offset
        self._changed.setdefault(key, set()).add(queue_id)

    def remove(self, key: str) -> bool:
        """Forget every offset under ``topic@group`` ``key``."""
        if self.table.pop(key, None) is None:
            return False
        self._changed.pop(key, None)
        self._removed.add(key)
        return True

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The stored offset, or -1."""
        return self.table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {}).get(queue_id, -1)

    def groups_of_topic(self, topic: str) -> list[str]:
        prefix = topic + TOPIC_GROUP_SEPARATOR
        return sorted(k[len(prefix) :] for k in self.table if k.startswith(prefix))

    def topics_of_group(self, group: str) -> list[str]:
        suffix = TOPIC_GROUP_SEPARATOR + group
        return sorted(k[: -len(suffix)] for k in self.table if k.endswith(suffix))

    def queue_offsets(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {}))
