"""A filed timer record as the message to write when it comes due (RocketMQ 5's
``TimerMessageStore.convert`` / ``convertMessage``).

Delivered: to REAL_TOPIC / REAL_QID, those two removed, every other property kept (keys,
tags, UNIQ_KEY, so the consumer sees the producer's msgId; TIMER_OUT_MS stays, which
stops the message being taken for a timer again), TIMER_ENQUEUE_MS (when it was filed),
TIMER_DEQUEUE_MS (now) and LEDGERMQ_TIMER_FROM (the slot, queue offset and commit-log offset
it was delivered from, which tells every replica how far delivery got:
store/timer/delivered_from.py) added. Rolled (it was parked at the end of the roll window):
back to rmq_sys_wheel_timer queue 0 with TIMER_ROLL_TIMES one higher, to be filed again.
"""

from __future__ import annotations

from ledgermq.protocol import properties as P
from ledgermq.protocol.message import decode_record
from ledgermq.store.message_input import MessageInput
from ledgermq.store.timer.delivered_from import DELIVERED_FROM, DeliveredFrom
from ledgermq.store.timer.intercept import TIMER_TOPIC
from ledgermq.store.timer.timer_store import DueUnit


class NotATimerRecord(ValueError):
    """The commit log no longer holds the unit's timer record there (a truncated log)."""


def due_message(record: bytes, unit: DueUnit, now_ms: int) -> MessageInput:
    rec = decode_record(record, check_crc=False)
    if rec.topic != TIMER_TOPIC:
        raise NotATimerRecord(f"record at {unit.phy} is on {rec.topic!r}, not {TIMER_TOPIC}")
    props = dict(rec.properties)
    props[P.TIMER_ENQUEUE_MS] = str(unit.enqueue_ms)
    props[P.TIMER_DEQUEUE_MS] = str(now_ms)
    props[DELIVERED_FROM] = DeliveredFrom(unit.slot_ms, unit.queue_offset, unit.phy).encode()
    if unit.roll:
        props[P.TIMER_ROLL_TIMES] = str(int(props.get(P.TIMER_ROLL_TIMES, "0") or 0) + 1)
        topic, queue_id = TIMER_TOPIC, 0
    else:
        topic = props.pop(P.REAL_TOPIC, "")
        real_qid = props.pop(P.REAL_QID, "0")
        if not topic:
            raise NotATimerRecord(f"timer record at {unit.phy} has no REAL_TOPIC")
        queue_id = int(real_qid) if real_qid.isdigit() else 0
    return MessageInput(
        topic=topic,
        body=rec.body,
        queue_id=queue_id,
        flag=rec.flag,
        properties=props,
        sysflag=rec.sysflag,
        born_timestamp=rec.born_timestamp,
        born_host=rec.born_host,
        store_host=rec.store_host,
        reconsume_times=rec.reconsume_times,
        wait_store_ok=False,
    )
