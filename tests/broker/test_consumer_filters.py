"""The broker's table of SQL92 filters from heartbeats (RocketMQ's ConsumerFilterManager
rules), without sockets."""

from __future__ import annotations

from ledgermq.broker.consumer_filters import DEAD_RETENTION_MS, ConsumerFilterManager
from ledgermq.broker.heartbeat_data import SubscriptionData


def sql(topic: str, expr: str, version: int) -> SubscriptionData:
    return SubscriptionData.build(topic, expr, version, "SQL92")


def test_versions_order_updates_and_bad_expressions_drop_the_filter() -> None:
    m = ConsumerFilterManager()
    m.register("g", [sql("T", "a = 1", 5), SubscriptionData.build("U", "TagA", 5)], now_ms=1)
    data = m.get("T", "g")
    assert data is not None and data.expression == "a = 1" and data.client_version == 5
    assert m.get("U", "g") is None  # tags need no filter data
    m.register("g", [sql("T", "a = 2", 4)], now_ms=2)  # older: ignored
    assert m.get("T", "g").expression == "a = 1"  # type: ignore[union-attr]
    m.register("g", [sql("T", "a = 1", 7)], now_ms=3)  # newer, same expression: version only
    assert m.get("T", "g") is data and data.client_version == 7
    m.register("g", [sql("T", "a = 2", 8)], now_ms=4)
    assert m.get("T", "g").compiled.matches({"a": "2"})  # type: ignore[union-attr]
    m.register("g", [sql("T", "a = ", 9)], now_ms=5)  # newer and invalid: dropped
    assert m.get("T", "g") is None
    m.register("g", [sql("T", "a = 3", 2)], now_ms=6)  # nothing held: any version registers
    assert m.get("T", "g").expression == "a = 3"  # type: ignore[union-attr]


def test_dead_filters_answer_until_forgotten() -> None:
    m = ConsumerFilterManager()
    m.register("g", [sql("T", "a = 1", 1), sql("V", "b = 1", 1)], now_ms=10)
    m.register("g", [sql("T", "a = 1", 1)], now_ms=20)  # V no longer subscribed
    assert m.get("V", "g").dead_ms == 20  # type: ignore[union-attr]
    m.group_gone("g", now_ms=30)
    assert m.get("T", "g").dead  # type: ignore[union-attr]
    m.register("g", [sql("T", "a = 1", 1)], now_ms=40)  # same version again: alive
    assert not m.get("T", "g").dead  # type: ignore[union-attr]
    m.register("h", [], now_ms=20 + DEAD_RETENTION_MS)
    assert m.get("V", "g") is None and m.get("T", "g") is not None and len(m) == 1
