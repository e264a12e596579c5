"""A numbered, deterministic sequence of metadata changes, applied to a real manager (by the
crash writer) or to a plain dict (the model the tests compare a reloaded manager with).

Kinds: ``topics`` (TopicConfigManager), ``groups`` (SubscriptionGroupManager) and
``offsets`` (ConsumerOffsetManager, each change followed by ``persist``, the point at
which an offset commit counts as saved). Every fifth (seventh for offsets) change
deletes an earlier entry, so replay must handle deletes between upserts.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ledgermq.broker.config import BrokerConfig
from ledgermq.broker.metadata_log import MetadataLogSettings
from ledgermq.broker.offsets import ConsumerOffsetManager
from ledgermq.broker.subscriptions import SubscriptionGroupConfig, SubscriptionGroupManager
from ledgermq.broker.topics import TopicConfigManager
from ledgermq.clock import SYSTEM_CLOCK
from ledgermq.protocol.route import TopicConfig

KINDS = ("topics", "groups", "offsets")
# Tiny, so a few dozen changes compact several times (the snapshot's size soon dominates).
SETTINGS = MetadataLogSettings(compact_min_bytes=2048)
OURS = re.compile(r"^[TG]\d+$")

Manager = TopicConfigManager | SubscriptionGroupManager | ConsumerOffsetManager


def open_manager(kind: str, config_dir: Path) -> Manager:
    if kind == "topics":
        config = BrokerConfig(broker_name="crashBroker", cluster_name="crashCluster", listen_port=10911)
        return TopicConfigManager(config_dir / "topics.json", config, SYSTEM_CLOCK, SETTINGS)
    if kind == "groups":
        return SubscriptionGroupManager(config_dir / "subscriptionGroup.json", SYSTEM_CLOCK, False, SETTINGS)
    return ConsumerOffsetManager(config_dir / "consumerOffset.json", SETTINGS)


def _offset_key(i: int) -> tuple[str, str, int]:
    return f"G{i % 3}", f"T{i % 4}", i % 5


def apply(kind: str, manager: Manager, i: int) -> None:
    """Change number ``i`` on a real manager; returns once it counts as saved."""
    if kind == "topics":
        assert isinstance(manager, TopicConfigManager)
        if i % 5 == 4:
            manager.delete(f"T{i - 2}")
        else:
            manager.update(TopicConfig(f"T{i}", 1 + i % 8, 1 + i % 8))
    elif kind == "groups":
        assert isinstance(manager, SubscriptionGroupManager)
        if i % 5 == 4:
            manager.delete(f"G{i - 2}")
        else:
            manager.update(SubscriptionGroupConfig(f"G{i}", retry_max_times=i % 16))
    else:
        assert isinstance(manager, ConsumerOffsetManager)
        group, topic, queue = _offset_key(i)
        if i % 7 == 6:
            manager.remove(f"{topic}@{group}")
        else:
            manager.commit(group, topic, queue, 1000 + i)
        manager.persist()


def model(kind: str, count: int) -> dict[str, Any]:
    """The state after changes 0..count-1, as ``state`` reports it."""
    state: dict[str, Any] = {}
    for i in range(count):
        if kind == "offsets":
            group, topic, queue = _offset_key(i)
            if i % 7 == 6:
                state.pop(f"{topic}@{group}", None)
            else:
                state.setdefault(f"{topic}@{group}", {})[queue] = 1000 + i
        elif i % 5 == 4:
            state.pop(f"{kind[0].upper()}{i - 2}", None)
        elif kind == "topics":
            state[f"T{i}"] = (1 + i % 8, 1 + i % 8)
        else:
            state[f"G{i}"] = i % 16
    return state


def state(kind: str, manager: Manager) -> dict[str, Any]:
    """The part of a manager's table the sequence touches, in the model's shape."""
    if isinstance(manager, TopicConfigManager):
        return {k: (v.read_queue_nums, v.write_queue_nums) for k, v in manager.table.items() if OURS.match(k)}
    if isinstance(manager, SubscriptionGroupManager):
        return {k: v.retry_max_times for k, v in manager.table.items() if OURS.match(k)}
    return {k: dict(v) for k, v in manager.table.items()}
