"""Op messages and the bookkeeping of which half messages they resolved (pure).

An op message marks a half message resolved (committed or rolled back): topic
RMQ_SYS_TRANS_OP_HALF_TOPIC, the half's queue id (0), tag "d" (``REMOVETAG``), body = the
half message's queue offset as decimal text, born and stored at the broker
(``TransactionalMessageBridge.addRemoveTagInTransactionOp``).

A check round reads op messages from its op-queue offset on and keeps ``OpBook``, RocketMQ's
``removeMap`` / ``doneOpOffset`` pair: an op naming a half offset below the round's start
is already *done* (its half message was passed in an earlier round); one naming a later
offset goes into ``remove`` until the scan reaches that half message, which is then
skipped and its op counted done. The op queue's offset only moves over a contiguous run
of done ops (``next_op_offset``, RocketMQ's ``calculateOpOffset``), so an op whose half
message the scan has not reached yet is read again next round.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ledgermq.broker.transactions.half import HALF_QUEUE, OP_TOPIC
from ledgermq.protocol import properties as P
from ledgermq.protocol.message import Host
from ledgermq.store.message_input import MessageInput

REMOVE_TAG = "d"


def op_message(half_queue_offset: int, store_host: Host, now_ms: int, uniq_key: str) -> MessageInput:
    """The op message resolving the half message at ``half_queue_offset``."""
    return MessageInput(
        topic=OP_TOPIC,
        body=str(half_queue_offset).encode(),
        queue_id=HALF_QUEUE,
        properties={P.TAGS: REMOVE_TAG, P.WAIT: "true", P.UNIQ_KEY: uniq_key},
        sysflag=0,
        born_timestamp=now_ms,
        born_host=store_host,
        store_host=store_host,
        wait_store_ok=False,
    )


@dataclass(frozen=True, slots=True)
class OpRecord:
    """What a round needs of one stored op message."""

    queue_offset: int  # its offset in the op queue
    tags: str | None
    body: bytes
    born_timestamp: int


def parse_half_offset(body: bytes) -> int:
    """The half queue offset an op body names; -1 when it is not a number (Java's getLong)."""
    try:
        return int(body.decode("utf-8").strip())
    except (UnicodeDecodeError, ValueError):
        return -1


@dataclass(slots=True)
class OpBook:
    """``removeMap`` (half offset -> op offset) and ``doneOpOffset`` of one round."""

    min_half_offset: int  # the half queue offset the round started at
    remove: dict[int, int] = field(default_factory=dict)
    done: list[int] = field(default_factory=list)
    bad: list[OpRecord] = field(default_factory=list)  # ops with another tag: logged, never done

    def add(self, ops: list[OpRecord]) -> None:
        for op in ops:
            if op.tags != REMOVE_TAG:
                self.bad.append(op)
                continue
            half = parse_half_offset(op.body)
            if half < self.min_half_offset:
                self.done.append(op.queue_offset)
            else:
                self.remove[half] = op.queue_offset

    def take(self, half_offset: int) -> bool:
        """True when an op resolved ``half_offset`` (the op then counts as done)."""
        op = self.remove.pop(half_offset, None)
        if op is None:
            return False
        self.done.append(op)
        return True

    def next_op_offset(self, old: int) -> int:
        """The op queue's new offset: past every done op contiguous from ``old``."""
        new = old
        for offset in sorted(self.done):
            if offset == new:
                new += 1
            elif offset > new:
                break
        return new
