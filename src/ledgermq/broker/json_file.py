"""Broker metadata files (topics.json, consumerOffset.json, ...): atomic writes, .bak kept.

RocketMQ writes ``<file>`` and keeps the previous version as ``<file>.bak``; on load it
falls back to the .bak if the main file is unreadable. We do the same, with the write
itself atomic (temp file, fsync, rename).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from ledgermq.atomic_file import write_atomic
from ledgermq.errors import ConfigError, RemoteProtocolError
from ledgermq.protocol import fastjson

log = logging.getLogger(__name__)


def load_json(path: Path) -> Any | None:
    for candidate in (path, path.with_name(path.name + ".bak")):
        if not candidate.exists():
            continue
        try:
            data = candidate.read_bytes()
            return fastjson.loads(data) if data.strip() else None
        except (OSError, RemoteProtocolError) as exc:
            log.error("%s is unreadable (%s); trying its backup", candidate, exc)
    if path.exists():
        raise ConfigError(f"{path} and its .bak are both unreadable; fix or remove them")
    return None


def save_json(path: Path, doc: Any) -> int:
    """Write ``doc`` to ``path`` atomically, keeping the previous file as .bak; returns the size."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        os.replace(path, path.with_name(path.name + ".bak"))
    data = fastjson.dumps_pretty(doc)
    write_atomic(path, data)
    return len(data)
