"""Commit records of exactly-once writes: what they look like on the commit topic (pure).

For each (write, batch) the driver commits, two kinds of message go to the commit topic:

* ``started`` (in one or more parts): written before the first END_TRANSACTION COMMIT;
  its body lists every half the batch commits and, per queue those halves commit into, the
  queue's max offset before the first commit. A record is complete when all its parts are
  found; a driver that died while writing parts has sent no END, so an incomplete record
  counts as nothing.
* ``done``: written after every half of the record was committed.

Every record carries the write id and the batch id as properties (and ``<write>:<batch>``
as its KEYS, for people looking with the admin tools); the parts of one ``started`` record
share a random token.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from ledgermq.client import Message, MessageExt
from ledgermq.spark.half_set import HalfSet, HalfSetError

WRITE_PROPERTY = "SPARK_EO_WRITE"
BATCH_PROPERTY = "SPARK_EO_BATCH"
TOKEN_PROPERTY = "SPARK_EO_TOKEN"
PART_PROPERTY = "SPARK_EO_PART"  # "<index>/<count>"
STARTED = "started"
DONE = "done"
PART_HALVES = 40_000  # halves per part: well under RocketMQ's 4 MiB message limit


class CommitRecordError(ValueError):
    """A commit record that cannot be trusted (a part that does not decode)."""


@dataclass(slots=True)
class StartedRecord:
    """A complete ``started`` record: the halves and where their commits land."""

    token: str
    halves: HalfSet
    # (broker, topic, queueId) -> the queue's max offset before the first COMMIT
    start_offsets: dict[tuple[str, str, int], int]


@dataclass(slots=True)
class Found:
    """The records of one (write, batch) on the commit topic."""

    started: StartedRecord | None = None
    done: bool = False
    # incomplete started records (their token -> parts found / announced), for the log
    incomplete: dict[str, tuple[int, int]] = field(default_factory=dict)


def _base(topic: str, write_id: str, batch_id: int, tag: str, body: bytes) -> Message:
    return Message(
        topic,
        body,
        tags=tag,
        keys=f"{write_id}:{batch_id}",
        properties={WRITE_PROPERTY: write_id, BATCH_PROPERTY: str(batch_id)},
    )


def started_messages(topic: str, write_id: str, batch_id: int, record: StartedRecord) -> list[Message]:
    parts = record.halves.parts(PART_HALVES)
    offsets = [[b, t, q, o] for (b, t, q), o in sorted(record.start_offsets.items())]
    out = []
    for i, part in enumerate(parts):
        header: dict[str, object] = {"offsets": offsets} if i == 0 else {}
        msg = _base(topic, write_id, batch_id, STARTED, part.encode(header))
        msg.properties[TOKEN_PROPERTY] = record.token
        msg.properties[PART_PROPERTY] = f"{i}/{len(parts)}"
        out.append(msg)
    return out


def done_message(topic: str, write_id: str, batch_id: int) -> Message:
    return _base(topic, write_id, batch_id, DONE, DONE.encode())


def record_batch(rec: MessageExt, write_id: str) -> int | None:
    """The batch id of a commit record of ``write_id``; None for anything else."""
    if rec.properties.get(WRITE_PROPERTY) != write_id:
        return None
    text = rec.properties.get(BATCH_PROPERTY, "")
    return int(text) if text.isdigit() else None


def collect(records: Iterable[MessageExt], write_id: str, batch_id: int) -> Found:
    """What the records of (``write_id``, ``batch_id``) among ``records`` say."""
    parts: dict[str, dict[int, MessageExt]] = defaultdict(dict)
    counts: dict[str, int] = {}
    found = Found()
    for rec in records:
        if record_batch(rec, write_id) != batch_id:
            continue
        if rec.tags == DONE:
            found.done = True
        elif rec.tags == STARTED:
            token = rec.properties.get(TOKEN_PROPERTY, "")
            index, _, count = rec.properties.get(PART_PROPERTY, "").partition("/")
            if not (index.isdigit() and count.isdigit()):
                raise CommitRecordError(f"commit record {rec.msg_id} of batch {batch_id} has no valid part number")
            parts[token][int(index)] = rec
            counts[token] = int(count)
    for token, got in parts.items():
        if len(got) < counts[token]:
            found.incomplete[token] = (len(got), counts[token])
            continue
        if found.started is not None:  # two complete records: never written by one protocol run
            raise CommitRecordError(f"batch {batch_id} of write {write_id} has two complete commit records")
        found.started = _assemble(token, [got[i] for i in range(counts[token])])
    return found


def _assemble(token: str, parts: list[MessageExt]) -> StartedRecord:
    halves = HalfSet()
    offsets: dict[tuple[str, str, int], int] = {}
    for i, rec in enumerate(parts):
        try:
            part, meta = HalfSet.decode(rec.body)
        except HalfSetError as exc:
            raise CommitRecordError(f"commit record {rec.msg_id}: {exc}") from None
        if i == 0:
            raw = meta.get("offsets")
            if not isinstance(raw, list):
                raise CommitRecordError(f"commit record {rec.msg_id} has no start offsets")
            offsets = {(str(b), str(t), int(q)): int(o) for b, t, q, o in raw}
        halves.extend(part)
    return StartedRecord(token, halves, offsets)
