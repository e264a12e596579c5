"""A put's stored records, built before the commit-log lock is taken: the record bytes
with their offsets left open, the queue they go to, and whether the sender waits for the
flush. A delayed message is rewritten to SCHEDULE_TOPIC_XXXX here (level - 1 as its queue,
the real topic and queue in properties), a timer message to rmq_sys_wheel_timer
(store/timer/intercept.py). A refusal comes back as a PutResult. Native puts
and DLedger mode's proposals both build their records here."""

from __future__ import annotations

from ledgermq.errors import LocalProtocolError, PropertiesTooLargeError
from ledgermq.protocol import message as M
from ledgermq.protocol import properties as P
from ledgermq.protocol import sysflag as SF
from ledgermq.protocol.message import Host
from ledgermq.store.appended import facts_for
from ledgermq.store.commitlog import EncodedMessage, queue_key
from ledgermq.store.dispatch import SCHEDULE_TOPIC
from ledgermq.store.message_input import BatchInput, MessageInput
from ledgermq.store.results import PutResult, PutStatus
from ledgermq.store.timer.intercept import INTERCEPTED_NAMES, TIMER_PROPERTIES, Interception, intercept
from ledgermq.store.timer.settings import TimerSettings

Encoded = tuple[list[EncodedMessage], str, int, bool]  # records, topic, queue id, wait for the flush


def encode_message(
    msg: MessageInput,
    store_host: Host,
    delay_levels_ms: list[int],
    timer: TimerSettings | None = None,
    now_ms: int = 0,
) -> Encoded | PutResult:
    """The stored record of ``msg`` (offsets left open), where it goes and whether the
    sender waits: a timer message is rewritten to rmq_sys_wheel_timer (``timer`` given),
    a delayed one to SCHEDULE_TOPIC_XXXX here. A refusal comes back as a PutResult.
    Shared by native puts and DLedger mode's proposals."""
    props = msg.properties
    topic, queue_id = msg.topic, msg.queue_id
    queue_entry = SF.gets_queue_entry(msg.sysflag)
    if timer is not None and props and not INTERCEPTED_NAMES.isdisjoint(props):
        decided = intercept(topic, queue_id, props, msg.sysflag, now_ms, timer, delay_levels_ms)
        if isinstance(decided, PutResult):
            return decided
        if isinstance(decided, Interception):
            topic, queue_id, props = decided.topic, decided.queue_id, decided.properties
    if queue_entry:
        delay = props.get(P.DELAY)
        if delay and delay.isdigit() and int(delay) > 0:
            level = min(int(delay), len(delay_levels_ms))
            props = {**props, P.DELAY: str(level), P.REAL_TOPIC: topic, P.REAL_QID: str(queue_id)}
            topic, queue_id = SCHEDULE_TOPIC, level - 1
    store = msg.store_host or store_host
    text = P.encode_properties(props)
    try:
        data = M.encode_record(
            topic=topic,
            body=msg.body,
            queue_id=queue_id,
            flag=msg.flag,
            properties=text,
            sysflag=msg.sysflag,
            born_timestamp=msg.born_timestamp,
            born_host=msg.born_host,
            store_host=store,
            reconsume_times=msg.reconsume_times,
            prepared_transaction_offset=msg.prepared_transaction_offset,
        )
    except PropertiesTooLargeError as exc:
        return PutResult(PutStatus.PROPERTIES_SIZE_EXCEEDED, remark=str(exc))
    except LocalProtocolError as exc:
        return PutResult(PutStatus.MESSAGE_ILLEGAL, remark=str(exc))
    facts = facts_for(topic, queue_id, data, props, text, msg.prepared_transaction_offset)
    encoded = EncodedMessage(data, queue_key(topic, queue_id), queue_entry, store, facts)
    wait = msg.wait_store_ok and props.get(P.WAIT) != "false"
    return [encoded], topic, queue_id, wait


def encode_batch(batch: BatchInput, store_host: Host) -> Encoded | PutResult:
    """The stored records of a batch (one topic-queue); a refusal as a PutResult."""
    if not batch.entries:
        return PutResult(PutStatus.MESSAGE_ILLEGAL, remark="empty batch")
    if SF.transaction_type(batch.sysflag) != SF.TRANSACTION_NOT_TYPE:
        return PutResult(PutStatus.MESSAGE_ILLEGAL, remark="batches cannot be transactional")
    key = queue_key(batch.topic, batch.queue_id)
    encoded: list[EncodedMessage] = []
    wait = True
    try:
        for flag, body, props in batch.entries:
            if props.get(P.DELAY, "0") not in ("", "0"):
                return PutResult(PutStatus.MESSAGE_ILLEGAL, remark="batches cannot be delayed")
            if any(k in props for k in TIMER_PROPERTIES):  # nor timed: never stored undelayed
                return PutResult(PutStatus.MESSAGE_ILLEGAL, remark="batches cannot hold timer messages")
            wait = wait and props.get(P.WAIT) != "false"
            text = P.encode_properties(props)
            data = M.encode_record(
                topic=batch.topic,
                body=body,
                queue_id=batch.queue_id,
                flag=flag,
                properties=text,
                sysflag=batch.sysflag,
                born_timestamp=batch.born_timestamp,
                born_host=batch.born_host,
                store_host=batch.store_host or store_host,
            )
            facts = facts_for(batch.topic, batch.queue_id, data, props, text, 0)
            encoded.append(EncodedMessage(data, key, True, batch.store_host or store_host, facts))
    except PropertiesTooLargeError as exc:
        return PutResult(PutStatus.PROPERTIES_SIZE_EXCEEDED, remark=str(exc))
    except LocalProtocolError as exc:
        return PutResult(PutStatus.MESSAGE_ILLEGAL, remark=str(exc))
    return encoded, batch.topic, batch.queue_id, wait
