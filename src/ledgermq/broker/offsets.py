"""Consumer offsets (RocketMQ ``ConsumerOffsetManager``), persisted in config/consumerOffset.json.

Key ``topic@group`` -> queue id -> next offset to consume. Persisted every
flushConsumerOffsetInterval and at shutdown; Java writes the inner keys as unquoted
integers, which ``fastjson.loads`` accepts.
"""

from __future__ import annotations

from pathlib import Path

from ledgermq.broker.json_file import load_json, save_json

TOPIC_GROUP_SEPARATOR = "@"


class ConsumerOffsetManager:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.table: dict[str, dict[int, int]] = {}
        self.dirty = False

    def load(self) -> None:
        doc = load_json(self.path) or {}
        self.table = {
            key: {int(q): int(o) for q, o in queues.items()} for key, queues in (doc.get("offsetTable") or {}).items()
        }

    def persist(self) -> None:
        save_json(self.path, self.to_json())
        self.dirty = False

    def to_json(self) -> dict[str, object]:
        return {"offsetTable": {k: dict(sorted(v.items())) for k, v in sorted(self.table.items())}}

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"
        self.table.setdefault(key, {})[queue_id] = offset
        self.dirty = True

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
