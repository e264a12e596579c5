"""Name-server KV config (namespace -> key -> value), persisted as RocketMQ's kvConfig.json."""

from __future__ import annotations

import logging
from pathlib import Path

from ledgermq.atomic_file import write_atomic
from ledgermq.protocol import fastjson

log = logging.getLogger(__name__)

ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KVConfig:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.table: dict[str, dict[str, str]] = {}

    def load(self) -> None:
        if self.path is None or not self.path.exists():
            return
        doc = fastjson.loads(self.path.read_bytes())
        table = doc.get("configTable") or {}
        self.table = {str(ns): {str(k): str(v) for k, v in kv.items()} for ns, kv in table.items()}

    def _persist(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, fastjson.dumps_pretty({"configTable": self.table}))

    def put(self, namespace: str, key: str, value: str) -> None:
        self.table.setdefault(namespace, {})[key] = value
        self._persist()

    def get(self, namespace: str, key: str) -> str | None:
        return self.table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> None:
        ns = self.table.get(namespace)
        if ns is not None and ns.pop(key, None) is not None:
            if not ns:
                del self.table[namespace]
            self._persist()

    def namespace(self, namespace: str) -> dict[str, str] | None:
        ns = self.table.get(namespace)
        return dict(ns) if ns else None
