"""The messages a transaction writes, built from what was sent or stored (pure).

RocketMQ 4.9 builds them in ``TransactionalMessageBridge`` and ``EndTransactionProcessor``;
the shapes below follow those byte for byte where a consumer or a Java broker reading our
store could tell the difference:

* the half message: the sent message with REAL_TOPIC / REAL_QID added, the transaction
  bits of its sysflag reset to NOT_TYPE (so the half topic's queue indexes it), topic
  RMQ_SYS_TRANS_HALF_TOPIC, queue 0;
* the committed message: the half message's body, flag, hosts, born time and properties
  in its real topic and queue, sysflag COMMIT, PREPARED TRANSACTION OFFSET = the half's
  commit-log offset. RocketMQ 4.9 clears TRAN_MSG, REAL_TOPIC and REAL_QID only from the
  property *map* after it has rendered the property *string* it stores, so the stored
  record keeps all three; we store the same properties (a consumer sees TRAN_MSG=true and
  PGROUP on a committed message, as with a Java broker);
* a re-put half message (before each check, with TRANSACTION_CHECK_TIMES raised) and the
  discarded copy in TRANS_CHECK_MAX_TIME_TOPIC: the stored half message unchanged but for
  the properties given.
"""

from __future__ import annotations

from ledgermq.protocol import properties as P
from ledgermq.protocol import sysflag as SF
from ledgermq.protocol.message import MessageRecord
from ledgermq.store.message_input import MessageInput

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SYSTEM_GROUP = "CID_RMQ_SYS_TRANS"  # the consumer group whose offsets are the check's progress
HALF_QUEUE = 0


def is_prepared(props: dict[str, str]) -> bool:
    """A send is a half message when TRAN_MSG parses as true (Java's Boolean.parseBoolean):
    the C++ client sets only the property, not the PREPARED sysflag."""
    return props.get(P.TRAN_MSG, "").strip().lower() == "true"


def to_half(msg: MessageInput) -> MessageInput:
    """``parseHalfMessageInner``: the sent message as it is stored in the half queue."""
    props = {**msg.properties, P.REAL_TOPIC: msg.topic, P.REAL_QID: str(msg.queue_id)}
    return MessageInput(
        topic=HALF_TOPIC,
        body=msg.body,
        queue_id=HALF_QUEUE,
        flag=msg.flag,
        properties=props,
        sysflag=(msg.sysflag & ~SF.TRANSACTION_MASK) | SF.TRANSACTION_NOT_TYPE,
        born_timestamp=msg.born_timestamp,
        born_host=msg.born_host,
        store_host=msg.store_host,
        reconsume_times=msg.reconsume_times,
        wait_store_ok=msg.wait_store_ok,
    )


def real_destination(half: MessageRecord) -> tuple[str, int] | None:
    """The real topic and queue a half message was sent to, or None when its properties
    lack them (not a half message)."""
    topic = half.properties.get(P.REAL_TOPIC)
    qid = half.properties.get(P.REAL_QID, "")
    if not topic or not qid.isdigit():
        return None
    return topic, int(qid)


def to_committed(half: MessageRecord, commit_log_offset: int) -> MessageInput:
    """``endMessageTransaction`` + the COMMIT sysflag: the real message (see the module notes
    for why REAL_TOPIC, REAL_QID and TRAN_MSG stay in its stored properties)."""
    dest = real_destination(half)
    if dest is None:
        raise ValueError("the half message has no REAL_TOPIC/REAL_QID")
    return MessageInput(
        topic=dest[0],
        body=half.body,
        queue_id=dest[1],
        flag=half.flag,
        properties=dict(half.properties),
        sysflag=(half.sysflag & ~SF.TRANSACTION_MASK) | SF.TRANSACTION_COMMIT_TYPE,
        born_timestamp=half.born_timestamp,
        born_host=half.born_host,
        store_host=half.store_host,
        reconsume_times=half.reconsume_times,
        prepared_transaction_offset=commit_log_offset,
        wait_store_ok=False,
    )


def renewed(
    half: MessageRecord, properties: dict[str, str], topic: str = HALF_TOPIC, queue_id: int = 0
) -> MessageInput:
    """``renewHalfMessageInner`` (topic unchanged) or ``toMessageExtBrokerInner`` (the discard
    topic): the stored half message again, with ``properties``."""
    return MessageInput(
        topic=topic,
        body=half.body,
        queue_id=queue_id,
        flag=half.flag,
        properties=dict(properties),
        sysflag=half.sysflag,
        born_timestamp=half.born_timestamp,
        born_host=half.born_host,
        store_host=half.store_host,
        reconsume_times=half.reconsume_times,
        wait_store_ok=False,
    )


def check_times(props: dict[str, str]) -> int | None:
    """TRANSACTION_CHECK_TIMES as Java's ``getInt`` reads it: None when absent, -1 when not
    a number (which RocketMQ then treats as below the limit)."""
    text = props.get(P.TRANSACTION_CHECK_TIMES)
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return -1


def immunity_ms(props: dict[str, str], timeout_ms: int) -> int | None:
    """How long after its birth a half message is left alone: CHECK_IMMUNITY_TIME_IN_SECONDS
    (seconds) when set, ``transactionTimeOut`` when it is -1 or not a number (as RocketMQ's
    ``getImmunityTime``); None when the property is absent."""
    text = props.get(P.CHECK_IMMUNITY_TIME_IN_SECONDS)
    if text is None:
        return None
    try:
        seconds = int(text.strip())
    except ValueError:
        seconds = -1
    return timeout_ms if seconds == -1 else seconds * 1000
