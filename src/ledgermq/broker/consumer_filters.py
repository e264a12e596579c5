"""Compiled property filters of the consumer groups, learned from heartbeats
(RocketMQ's ``ConsumerFilterManager``).

A Java consumer does not send its subscription with each pull; the broker filters with the
expression from the group's heartbeat, compiled once here per (topic, group). The rules
are RocketMQ 4.9's:

* Only non-TAG subscriptions are kept. A heartbeat whose expression does not compile
  leaves no filter data (and drops the old one when the expression changed), so the
  group's pulls are answered FILTER_DATA_NOT_EXIST until it sends a valid one.
* ``subVersion`` orders updates: a heartbeat with an older or equal version changes
  nothing (an equal one revives dead data); a newer one replaces the expression.
* Topics a group no longer subscribes, and every topic of a group whose last client left,
  are marked dead; dead data still answers pulls (as in Java) and is forgotten after
  ``DEAD_RETENTION_MS``.

RocketMQ also persists this table (consumerFilter.json) to keep the bloom filter bits it
computes at dispatch meaningful across restarts; ledgermq computes no such bits, so the
table lives in memory and refills from the next heartbeats.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from ledgermq.broker.heartbeat_data import SubscriptionData
from ledgermq.filter import EXPRESSION_TYPE_SQL92, FilterSyntaxError, SqlExpression, compile_expression, is_tag_type

log = logging.getLogger(__name__)

DEAD_RETENTION_MS = 24 * 3600 * 1000  # RocketMQ's filterDataCleanTimeSpan default


class UnsupportedExpressionType(FilterSyntaxError):
    """An expression type no filter exists for (RocketMQ: FilterFactory has none)."""


def compile_subscription(expression: str | None, expression_type: str) -> SqlExpression:
    """The compiled filter of a non-TAG subscription; FilterSyntaxError if it is refused."""
    if expression_type != EXPRESSION_TYPE_SQL92:
        raise UnsupportedExpressionType(
            f"expression type {expression_type!r} is not supported (use TAG or SQL92)", expression or "", 0
        )
    return compile_expression(expression or "")


@dataclass(slots=True)
class ConsumerFilterData:
    topic: str
    group: str
    expression: str
    expression_type: str
    client_version: int
    compiled: SqlExpression
    born_ms: int
    dead_ms: int = 0

    @property
    def dead(self) -> bool:
        return self.dead_ms > 0


class ConsumerFilterManager:
    def __init__(self) -> None:
        self._table: dict[tuple[str, str], ConsumerFilterData] = {}

    def get(self, topic: str, group: str) -> ConsumerFilterData | None:
        return self._table.get((topic, group))

    def __len__(self) -> int:
        return len(self._table)

    def register(self, group: str, subscriptions: Iterable[SubscriptionData], now_ms: int) -> None:
        """One heartbeat's subscriptions of ``group``."""
        subs = list(subscriptions)
        for sub in subs:
            if not is_tag_type(sub.expression_type) and sub.sub_string:
                self._register_one(sub, group, now_ms)
        topics = {s.topic for s in subs}
        for (topic, g), data in self._table.items():
            if g == group and topic not in topics and not data.dead:
                data.dead_ms = now_ms
                log.info("consumer filter of %s on %s is dead (topic no longer subscribed)", group, topic)
        self._forget_dead(now_ms)

    def group_gone(self, group: str, now_ms: int) -> None:
        """The group's last client left (UNREGISTER): its filters are dead."""
        for (_topic, g), data in self._table.items():
            if g == group and not data.dead:
                data.dead_ms = now_ms

    def _register_one(self, sub: SubscriptionData, group: str, now_ms: int) -> None:
        key = (sub.topic, group)
        old = self._table.get(key)
        if old is not None and sub.sub_version <= old.client_version:
            if sub.sub_version == old.client_version and old.dead:
                old.dead_ms = 0
            return
        if old is not None and old.expression == sub.sub_string and old.expression_type == sub.expression_type:
            old.client_version = sub.sub_version
            old.dead_ms = 0
            return
        try:
            compiled = compile_subscription(sub.sub_string, sub.expression_type)
        except FilterSyntaxError as exc:
            log.warning(
                "consumer %s on %s: %s expression %r refused: %s",
                group,
                sub.topic,
                sub.expression_type,
                sub.sub_string,
                exc,
            )
            self._table.pop(key, None)  # the client's pulls then report the error
            return
        self._table[key] = ConsumerFilterData(
            sub.topic, group, sub.sub_string, sub.expression_type, sub.sub_version, compiled, now_ms
        )
        log.info("consumer filter of %s on %s: %s %r", group, sub.topic, sub.expression_type, sub.sub_string)

    def _forget_dead(self, now_ms: int) -> None:
        for key in [k for k, d in self._table.items() if d.dead and now_ms - d.dead_ms >= DEAD_RETENTION_MS]:
            del self._table[key]
