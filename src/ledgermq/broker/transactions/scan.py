"""One check round's decisions over the half queue (pure; RocketMQ 4.9's
``TransactionalMessageServiceImpl.check``).

The round starts at the half queue's progress offset and walks forward:

* a half message an op message resolved is passed (its op counted done);
* one checked ``transactionCheckMax`` times already, or older than ``fileReservedTime``,
  is *discarded* (moved to TRANS_CHECK_MAX_TIME_TOPIC by the service);
* one stored after the round began stops the round (it is the copy this round's service
  may just have written; it waits for the next round);
* one younger than its immunity (CHECK_IMMUNITY_TIME_IN_SECONDS, else
  ``transactionTimeOut``, measured from its *born* time) stops the round, except that a
  message with its own immunity is re-put at the queue's end (``Immunity``, remembering
  its first offset in TRAN_PREPARED_QUEUE_OFFSET) so it does not hold up the queue;
* otherwise, once every op message written so far has been read and none resolved it, it
  is *checked*: re-put at the end of the half queue with TRANSACTION_CHECK_TIMES raised,
  and the producer asked about the copy (``Check``).

Every action carries the half offset the round may commit once it (and all before it)
is done, so the service stops where a store write failed and the next round starts there.
TRANSACTION_CHECK_TIMES is raised before a message is known to be checked, as RocketMQ
raises it (an immunity re-put carries the raised count too).

Where RocketMQ would spin on one message until its 60 s round limit (a re-put that failed,
a TRAN_PREPARED_QUEUE_OFFSET of -1), the round stops there instead: the same outcome
without the wait. A round examines at most ``max_messages`` half messages instead of
RocketMQ's 60 s time limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ledgermq.broker.transactions.half import check_times, immunity_ms
from ledgermq.broker.transactions.ops import OpBook, OpRecord
from ledgermq.protocol import properties as P
from ledgermq.protocol.message import MessageRecord

OP_BATCH = 32  # op messages read at a time (RocketMQ's pullOpMsg(..., 32))


@dataclass(frozen=True, slots=True)
class HalfRead:
    """The half message at an offset: ``record``, or None with ``end`` (nothing stored there
    yet) or the offset to go on from (a removed or unreadable unit)."""

    record: MessageRecord | None
    end: bool = False
    next_offset: int = 0


@dataclass(frozen=True, slots=True)
class OpsRead:
    ops: list[OpRecord]
    next_offset: int
    moved: bool = False  # the offset asked for is gone (retention): go on from next_offset


class TransactionQueues(Protocol):
    """What a round reads: the half queue and the op queue (queue 0 of each topic)."""

    def half_at(self, offset: int) -> HalfRead: ...

    def ops_from(self, offset: int, max_count: int) -> OpsRead: ...


@dataclass(frozen=True, slots=True)
class ScanSettings:
    timeout_ms: int  # transactionTimeOut
    check_max: int  # transactionCheckMax
    reserved_ms: int  # fileReservedTime in ms: older half messages are discarded unchecked
    max_messages: int = 10_000


@dataclass(frozen=True, slots=True)
class Action:
    kind: str  # "check", "immunity" or "discard"
    offset: int  # the half message's queue offset
    record: MessageRecord
    properties: dict[str, str]  # what the re-put (or discarded) copy carries
    next_half: int  # the half offset to commit once this action is done
    reason: str = ""  # a discard's: "checked too many times" or "older than fileReservedTime"


@dataclass(slots=True)
class ScanResult:
    half_start: int
    op_start: int
    actions: list[Action] = field(default_factory=list)
    half_offset: int = 0  # where the next round starts, every action done
    op_offset: int = 0
    bad_ops: list[OpRecord] = field(default_factory=list)


def scan(
    queues: TransactionQueues, half_start: int, op_start: int, now_ms: int, round_start_ms: int, s: ScanSettings
) -> ScanResult:
    first = queues.ops_from(op_start, OP_BATCH)
    if first.moved:
        op_start = first.next_offset
        first = queues.ops_from(op_start, OP_BATCH)
    result = ScanResult(half_start, op_start)
    book = OpBook(half_start)
    book.add(first.ops)
    last_ops, op_next = first.ops, first.next_offset
    i = new_half = half_start
    nulls = 1
    examined = 0
    while examined < s.max_messages:
        if book.take(i):
            i += 1
            new_half = i
            continue
        read = queues.half_at(i)
        rec = read.record
        if rec is None:
            nulls += 1
            if nulls > 2 or read.end:
                break
            i = new_half = read.next_offset
            continue
        examined += 1
        props = dict(rec.properties)
        reason = _given_up(rec, props, now_ms, s)
        if reason:
            kept = rec.properties if reason == "checked too many times" else props
            result.actions.append(Action("discard", i, rec, dict(kept), i + 1, reason))
            i += 1
            new_half = i
            continue
        if rec.store_timestamp >= round_start_ms:
            break  # stored during this round: next round
        age = now_ms - rec.born_timestamp
        immunity = immunity_ms(props, s.timeout_ms)
        if immunity is not None:
            if age < immunity:
                prepared = props.get(P.TRAN_PREPARED_QUEUE_OFFSET)
                if prepared is None:
                    props[P.TRAN_PREPARED_QUEUE_OFFSET] = str(rec.queue_offset)
                    result.actions.append(Action("immunity", i, rec, props, i + 1))
                else:
                    first_offset = _long(prepared)
                    if first_offset == -1:
                        break
                    if not book.take(first_offset):
                        result.actions.append(Action("immunity", i, rec, props, i + 1))
                i += 1
                new_half = i
                continue
        elif 0 <= age < s.timeout_ms:
            break  # not old enough; neither is anything after it
        limit = s.timeout_ms if immunity is None else immunity
        need_check = (
            (not last_ops and age > limit)
            or (bool(last_ops) and last_ops[-1].born_timestamp - round_start_ms > s.timeout_ms)
            or age <= -1
        )
        if need_check:
            result.actions.append(Action("check", i, rec, props, i + 1))
            i += 1
            new_half = i
            continue
        if not last_ops:
            break  # every op is read and it is not past its limit yet (age == limit)
        more = queues.ops_from(op_next, OP_BATCH)  # the next ops may resolve it
        book.add(more.ops)
        last_ops, op_next = more.ops, more.next_offset
    result.half_offset = new_half
    result.op_offset = book.next_op_offset(op_start)
    result.bad_ops = book.bad
    return result


def _given_up(rec: MessageRecord, props: dict[str, str], now_ms: int, s: ScanSettings) -> str:
    """Why a half message is discarded instead of checked ("" if it is not); counts this
    check in ``props`` when it is not over the limit already."""
    times = check_times(props)
    if times is not None and times >= s.check_max:
        return "checked too many times"
    props[P.TRANSACTION_CHECK_TIMES] = str(1 if times is None else times + 1)
    if now_ms - rec.born_timestamp > s.reserved_ms:
        return "older than fileReservedTime"
    return ""


def _long(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        return -1
