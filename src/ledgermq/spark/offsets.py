"""Offsets as the source and Spark's checkpoint carry them.

One JSON shape serves the ``startingOffsets`` / ``endingOffsets`` options and the offsets
Spark checkpoints for a streaming query::

    {"TopicA": {"broker-a:0": 23, "broker-a:1": 0, "broker-b:0": 7}}

A queue is named ``"<brokerName>:<queueId>"`` (RocketMQ's MessageQueue without the
topic): the broker *group* name, so an offset stays valid when its reads move from the
master to a slave of the same group. A value is the next offset to read (exclusive end
of what was read). In the options, ``-2`` means the queue's earliest offset and ``-1``
its latest, as spark-sql-kafka has them; checkpointed offsets are always concrete.

Everything here is pure: no I/O, no Spark.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Final, NamedTuple

EARLIEST: Final = -2
LATEST: Final = -1


class OffsetError(ValueError):
    """An offsets document that does not parse, or breaks a rule; the message names where."""


class QueueId(NamedTuple):
    """One queue: topic, broker group name, queue id. Sorts as the clients sort queues."""

    topic: str
    broker: str
    queue_id: int

    @property
    def key(self) -> str:
        """The queue's key inside its topic's object: ``broker:queueId``."""
        return f"{self.broker}:{self.queue_id}"

    def __str__(self) -> str:
        return f"{self.topic}/{self.broker}:{self.queue_id}"


Offsets = dict[QueueId, int]


def parse_queue_key(topic: str, key: str, where: str = "offsets") -> QueueId:
    broker, sep, qid = key.rpartition(":")
    if not sep or not broker or not qid.isdigit():
        raise OffsetError(f'{where}: {key!r} of topic {topic!r} is not "<brokerName>:<queueId>"')
    return QueueId(topic, broker, int(qid))


def parse_offsets(text: str, where: str = "offsets", *, allow_special: bool = True) -> Offsets:
    """``{"topic": {"broker:queueId": offset}}``; -2/-1 only when ``allow_special``."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise OffsetError(f'{where}: not JSON ({exc}); expected {{"topic": {{"broker:queueId": offset}}}}') from None
    return offsets_from_json(doc, where, allow_special=allow_special)


def offsets_from_json(doc: object, where: str = "offsets", *, allow_special: bool = True) -> Offsets:
    if not isinstance(doc, dict):
        raise OffsetError(f"{where}: expected a JSON object of topics, got {type(doc).__name__}")
    out: Offsets = {}
    for topic, queues in doc.items():
        if not isinstance(topic, str) or not topic:
            raise OffsetError(f"{where}: a topic name must be a non-empty string")
        if not isinstance(queues, dict):
            raise OffsetError(f'{where}: the value of topic {topic!r} must be an object of "broker:queueId": offset')
        for key, value in queues.items():
            q = parse_queue_key(topic, key, where)
            if isinstance(value, bool) or not isinstance(value, int):
                raise OffsetError(f"{where}: the offset of {q} must be an integer, got {value!r}")
            low = EARLIEST if allow_special else 0
            if value < low:
                allowed = "-2 (earliest), -1 (latest) or an offset >= 0" if allow_special else "an offset >= 0"
                raise OffsetError(f"{where}: the offset of {q} is {value}; expected {allowed}")
            out[q] = value
    return out


def offsets_to_json(offsets: Mapping[QueueId, int]) -> dict[str, dict[str, int]]:
    """The JSON-ready dict (topics and queues sorted, so equal offsets give equal text)."""
    doc: dict[str, dict[str, int]] = {}
    for q in sorted(offsets):
        doc.setdefault(q.topic, {})[q.key] = offsets[q]
    return doc


def dumps(offsets: Mapping[QueueId, int]) -> str:
    return json.dumps(offsets_to_json(offsets), separators=(",", ":"))


def advance(
    start: Mapping[QueueId, int], latest: Mapping[QueueId, int], cap: Mapping[QueueId, int] | None = None
) -> Offsets:
    """The next end offsets: every queue of ``start`` or ``latest``, at ``latest`` (capped by
    ``cap`` where given, e.g. an availableNow target), never behind ``start``. Queues that
    left the route keep their start; new queues not in ``cap`` stay where they are (at 0)."""
    end: Offsets = dict(start)
    for q, hi in latest.items():
        if cap is not None:
            if q not in cap:
                continue
            hi = min(hi, cap[q])
        end[q] = max(hi, start.get(q, 0))
    return end


def rate_limit(start: Mapping[QueueId, int], end: Mapping[QueueId, int], max_rows: int) -> Offsets:
    """Move ``end`` back so that at most ``max_rows`` offsets lie between ``start`` and it.

    The budget is shared in proportion to each queue's backlog (as spark-sql-kafka's
    ``maxOffsetsPerTrigger``): floors first, then the rows left over one by one to the queues
    with the largest remainders (ties by queue order), so exactly ``max_rows`` are taken
    when more are available, and any queue with data gets its share. Deterministic."""
    if max_rows <= 0:
        raise OffsetError(f"max_rows must be positive, got {max_rows}")
    backlog = {q: e - start.get(q, 0) for q, e in end.items() if e > start.get(q, 0)}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(end)
    out: Offsets = dict(end)
    shares: list[tuple[int, QueueId]] = []
    given = 0
    for q in sorted(backlog):
        whole, rest = divmod(backlog[q] * max_rows, total)
        out[q] = start.get(q, 0) + whole
        given += whole
        shares.append((rest, q))
    shares.sort(key=lambda s: (-s[0], s[1]))
    for _rest, q in shares[: max_rows - given]:
        out[q] += 1
    return out


def rows_between(start: Mapping[QueueId, int], end: Mapping[QueueId, int]) -> int:
    return sum(max(0, e - start.get(q, 0)) for q, e in end.items())


def topics_of(offsets: Iterable[QueueId]) -> set[str]:
    return {q.topic for q in offsets}
