"""A put's stored records, built before the commit-log lock is taken: the record bytes
with their offsets left open, the queue they go to, and whether the sender waits for the
flush. A delayed message is rewritten to SCHEDULE_TOPIC_XXXX here (level - 1 as its queue,
the real topic and queue in properties), a timer message to rmq_sys_wheel_timer
(store/timer/intercept.py). A refusal comes back as a PutResult. Native puts
and DLedger mode's proposals both build their records here."""

from __future__ import annotations

import functools
from collections.abc import Mapping

from ledgermq import speedups
from ledgermq.errors import LocalProtocolError, PropertiesTooLargeError
from ledgermq.protocol import message as M
from ledgermq.protocol import properties as P
from ledgermq.protocol import sysflag as SF
from ledgermq.protocol.javahash import tag_hash
from ledgermq.protocol.message import Host
from ledgermq.store.appended import facts_for
from ledgermq.store.commitlog import EncodedMessage, queue_key
from ledgermq.store.dispatch import SCHEDULE_TOPIC, TIMER_TOPIC, DispatchRequest
from ledgermq.store.message_input import BatchInput, EncodedBatch, MessageInput
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
    if msg.encoded is not None:  # built from the request's text (``encode_single_text``)
        return [msg.encoded], msg.topic, msg.queue_id, msg.wait_store_ok
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
    if batch.encoded is not None:  # built from the request body (``encode_batch_body``)
        return batch.encoded.records, batch.topic, batch.queue_id, batch.encoded.wait
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


# The C path's names: what it reads for the facts and the wait (TAGS, KEYS, UNIQ_KEY, WAIT,
# DELAY), and the names whose presence leaves a batch to the Python path (it refuses them).
_FACT_NAMES = tuple(k.encode() for k in (P.TAGS, P.KEYS, P.UNIQ_KEY, P.WAIT, P.DELAY))
_LEFT_TO_PYTHON = tuple(k.encode() for k in (P.TRAN_MSG, *TIMER_PROPERTIES))
_NOT_IN_EXTRA = frozenset((P.DELAY, P.WAIT, P.TRAN_MSG, *TIMER_PROPERTIES))


def encode_batch_body(
    *,
    topic: str,
    queue_id: int,
    sysflag: int,
    born_timestamp: int,
    born_host: Host,
    store_host: Host,
    body: bytes | memoryview,
    extra: Mapping[str, str],
) -> EncodedBatch | None:
    """A send-batch body's records built at once in C (ledgermq/_recordc.c), the same bytes
    and facts as decoding its entries, merging ``extra`` (the properties the broker adds)
    into each and ``encode_batch``; None when the C path is not there or the batch is not
    one it takes (then the caller decodes the entries, and refuses what must be refused).

    It takes batches whose entries have plain ASCII properties, one pair per KEY\x01VALUE,
    no repeated or added name and none of the names the Python path refuses or rewrites
    (delays, timers, transactions), into an ordinary topic: the batches clients send."""
    c = speedups.recordc
    if c is None or topic in (SCHEDULE_TOPIC, TIMER_TOPIC) or SF.transaction_type(sysflag) != SF.TRANSACTION_NOT_TYPE:
        return None
    context = _c_context(tuple(extra.items()))
    if context is None:
        return None
    shared = M.record_head(
        topic=topic,
        queue_id=queue_id,
        sysflag=sysflag,
        born_timestamp=born_timestamp,
        born_host=born_host,
        store_host=store_host,
    )
    if shared is None:
        return None
    head, topic_part, stored_sysflag = shared
    built = c.encode_clean_batch(
        body,
        head,
        topic_part,
        context,
        topic,
        queue_id,
        queue_key(topic, queue_id),
        store_host,
        stored_sysflag,
    )
    if built is None:
        return None
    records, wait, body_bytes = built
    return EncodedBatch(records, wait, body_bytes)


def encode_single_text(
    *,
    topic: str,
    queue_id: int,
    flag: int,
    body: bytes,
    properties: str,
    sysflag: int,
    born_timestamp: int,
    born_host: Host,
    store_host: Host,
    reconsume_times: int,
    extra: tuple[tuple[str, str], ...],
) -> tuple[EncodedMessage, bool] | None:
    """One sent message's record built at once in C, straight from its ``properties``
    text as the request carried it: WAIT read and left out, ``extra`` (the properties the
    broker adds, as pairs) appended; the same bytes and facts as decoding the text into a
    MessageInput and ``encode_message``. Returns the record and whether the sender waits
    for the flush, or None when the C path is not there or the message is not one it
    takes (the caller then builds the MessageInput, and refuses what must be refused).

    It takes what clients send to an ordinary topic: ASCII properties, one pair per
    KEY\x01VALUE, no repeated or added name and none of the names the Python path refuses
    or rewrites (delays, timers, transactions), no transaction flag."""
    c = speedups.recordc
    if c is None or topic in (SCHEDULE_TOPIC, TIMER_TOPIC) or sysflag & SF.TRANSACTION_MASK:
        return None
    context = _c_context(extra)
    if context is None:
        return None
    shared = _single_head(topic, sysflag, born_host, store_host)
    if shared is None:
        return None
    head, topic_part, stored_sysflag = shared
    built: tuple[EncodedMessage, bool] | None = c.encode_clean_single(
        body,
        properties,
        flag,
        queue_id,
        born_timestamp,
        reconsume_times,
        head,
        topic_part,
        context,
        topic,
        f"{topic}-{queue_id}",  # queue_key's form, spelled out: once per send
        store_host,
        stored_sysflag,
    )
    return built


@functools.lru_cache(maxsize=1024)
def _single_head(topic: str, sysflag: int, born_host: Host, store_host: Host) -> tuple[bytes, bytes, int] | None:
    """The record head every send from ``born_host`` to ``topic`` shares (its queue id,
    born time and reconsume times are written per record by the C path)."""
    return M.record_head(
        topic=topic, queue_id=0, sysflag=sysflag, born_timestamp=0, born_host=born_host, store_host=store_host
    )


@functools.lru_cache(maxsize=64)
def _c_context(extra: tuple[tuple[str, str], ...]) -> tuple[object, ...] | None:
    """What the C path needs of the properties the broker adds (the same few per broker:
    built once): their text, names and facts, the names it reads and those it leaves to
    Python, and the classes a record's facts become. None if they are not plain."""
    added = dict(extra)
    if len(added) != len(extra) or not _plain(added) or not _NOT_IN_EXTRA.isdisjoint(added):
        return None
    tags = added.get(P.TAGS)
    return (
        P.encode_properties(added).encode(),
        tuple(k.encode() for k in added),
        _LEFT_TO_PYTHON,
        _FACT_NAMES,
        (tag_hash(tags) if tags else 0, added.get(P.KEYS), added.get(P.UNIQ_KEY)),
        DispatchRequest,
        EncodedMessage,
    )


def _plain(props: Mapping[str, str]) -> bool:
    """Every name and value non-empty ASCII without NUL or a separator (\x01, \x02), and
    few enough for the C path's table."""
    if len(props) > 16:
        return False
    for k, v in props.items():
        for text in (k, v):
            if not text or not text.isascii() or "\x00" in text or "\x01" in text or "\x02" in text:
                return False
    return True
