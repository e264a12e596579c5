"""The timer messages of one topic still waiting on a broker (docs/timers.md): a timer is
stored in ``rmq_sys_wheel_timer`` queue 0 with its real topic in ``REAL_TOPIC`` and its step
in ``TIMER_OUT_MS``, and delivered to its topic once that step has passed. Brokers only count
their pending timers as a whole (brokerStatus ``timerPending``), so the timers of one topic
are found by reading the newest units of the timer queue (PULL_MESSAGE, never committing).

Bounded on purpose: at most ``scan`` units are read per broker, and the answer says when
older units were left unread (their timers are then not counted).
"""

from __future__ import annotations

from dataclasses import dataclass

from ledgermq.admin.client import AdminClient
from ledgermq.admin.model import AdminError
from ledgermq.admin.operations import pull_range
from ledgermq.protocol import properties as P
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.codes import RequestCode
from ledgermq.protocol.message import MessageRecord

TIMER_TOPIC = "rmq_sys_wheel_timer"
DEFAULT_SCAN = 1000

__all__ = ["DEFAULT_SCAN", "TIMER_TOPIC", "PendingTimer", "PendingTimers", "pending_timers"]


@dataclass(frozen=True, slots=True)
class PendingTimer:
    record: MessageRecord  # as stored in the timer queue (its msg_id is the producer's)
    due_ms: int  # the step it is filed under and delivered after (TIMER_OUT_MS)
    queue_id: int  # the queue of the topic it goes to (REAL_QID)

    @property
    def requested_ms(self) -> int | None:
        """The delivery time the producer named (TIMER_DELIVER_MS), if it named one (a delay
        in seconds or milliseconds counts from when the broker stored it: see ``due_ms``)."""
        raw = self.record.properties.get(P.TIMER_DELIVER_MS, "")
        return int(raw) if raw.isdigit() else None


@dataclass(frozen=True, slots=True)
class PendingTimers:
    broker_addr: str
    timers: list[PendingTimer]  # soonest first
    scanned: int  # timer-queue units read
    unread: int  # older units left unread (0: every timer of the broker was looked at)


async def pending_timers(
    client: AdminClient, broker_addr: str, broker_name: str, topic: str, after_ms: int, scan: int = DEFAULT_SCAN
) -> PendingTimers:
    """The timers for ``topic`` on ``broker_addr`` due after ``after_ms`` (where the broker's
    delivery stands), among the newest ``scan`` units of its timer queue. A timer parked and
    filed again (a roll) is stored more than once; it is counted once."""
    mq = MessageQueue(TIMER_TOPIC, broker_name, 0)
    # asked per queue: the broker keeps no topic config for its timer topic (no topic stats)
    low = await _offset(client, broker_addr, mq, RequestCode.GET_MIN_OFFSET)
    high = await _offset(client, broker_addr, mq, RequestCode.GET_MAX_OFFSET)
    begin = max(low, high - scan)
    records = await pull_range(client, broker_addr, mq, begin, high)
    found: dict[str, PendingTimer] = {}
    for record in records:
        props = record.properties
        if props.get(P.REAL_TOPIC) != topic:
            continue
        try:
            due = int(props.get(P.TIMER_OUT_MS, ""))
        except ValueError:
            continue
        if due <= after_ms:
            continue
        key = props.get(P.UNIQ_KEY) or record.offset_msg_id
        qid = props.get(P.REAL_QID, "")
        found[key] = PendingTimer(record, due, int(qid) if qid.isdigit() else -1)
    timers = sorted(found.values(), key=lambda t: (t.due_ms, t.record.queue_offset))
    return PendingTimers(broker_addr, timers, len(records), begin - low)


async def _offset(client: AdminClient, broker_addr: str, mq: MessageQueue, code: int) -> int:
    ext = {"topic": mq.topic, "queueId": mq.queue_id}
    resp = client._check(await client.invoke(broker_addr, code, ext), f"offsets of {mq.topic} on {broker_addr}")
    try:
        return int(resp.ext_fields["offset"])
    except (KeyError, ValueError):
        raise AdminError(f"offsets of {mq.topic} on {broker_addr}: no offset in the answer") from None
