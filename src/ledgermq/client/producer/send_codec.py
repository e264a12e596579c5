"""The wire half of one send attempt: the request it makes and the result read from the answer.

``send_request`` builds SEND_MESSAGE_V2 (310) or SEND_BATCH_MESSAGE (320) with the short
header field names of ``SendMessageRequestHeaderV2`` (``a`` producer group ... ``n``
broker name), as the Java 4.9.7 client writes them; ``read_send_response`` is
``MQClientAPIImpl.processSendResponse``. Kept apart from the producer so the encoding
can be read (and tested) without a broker or an event loop; both are plain functions,
called once per attempt.
"""

from __future__ import annotations

from ledgermq.client.errors import MQBrokerError, MQClientError
from ledgermq.client.message import DEFAULT_REGION, STATUS_BY_CODE, SendResult
from ledgermq.client.producer.outgoing import Outgoing
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.codes import RequestCode
from ledgermq.protocol.command import RemotingCommand


def send_request(
    out: Outgoing,
    mq: MessageQueue,
    group: str,
    create_topic_key: str,
    default_topic_queue_nums: int,
    born_ms: int,
) -> RemotingCommand:
    """The request of one attempt of ``out`` to ``mq``; ``born_ms`` is the wall-clock time
    stamped as the message's born time (each attempt stamps its own, as Java does).

    ``c``/``d`` name the topic to copy and its queue count when the broker auto-creates
    the topic; ``l`` (max reconsume times) is None, so left out, except for retry topics."""
    header = {
        "a": group,
        "b": out.topic,
        "c": create_topic_key,
        "d": str(default_topic_queue_nums),
        "e": str(mq.queue_id),
        "f": str(out.sysflag),
        "g": str(born_ms),
        "h": str(out.flag),
        "i": out.properties,
        "j": str(out.reconsume_times or 0),
        "k": "false",
        "m": "true" if out.batch else "false",
        "n": mq.broker_name,
    }
    if out.max_reconsume_times is not None:
        header["l"] = str(out.max_reconsume_times)
    # the header is strings already (as ``stringify`` would make them): built directly,
    # since this runs once per attempt of every message sent
    code = RequestCode.SEND_BATCH_MESSAGE if out.batch else RequestCode.SEND_MESSAGE_V2
    return RemotingCommand(code=int(code), ext_fields=header, body=out.body)


def read_send_response(resp: RemotingCommand, out: Outgoing, mq: MessageQueue, addr: str) -> SendResult:
    """``processSendResponse``: SUCCESS and the three "stored, but" codes are results;
    any other code is an ``MQBrokerError`` (its ``retriable`` decides a retry)."""
    status = STATUS_BY_CODE.get(resp.code)
    if status is None:
        raise MQBrokerError(resp.code, resp.remark, addr)
    ext = resp.ext_fields
    try:
        queue_id = int(ext["queueId"])
        # the queue the attempt went to, as it normally is: no new one per answer
        queue = mq
        if queue_id != mq.queue_id or mq.topic != out.topic:
            queue = MessageQueue(out.topic, mq.broker_name, queue_id)
        queue_offset = int(ext["queueOffset"])
        offset_msg_id = ext["msgId"]
    except (KeyError, ValueError) as exc:
        raise MQClientError(f"the send answer from {addr} lacks a header field: {exc!r}") from None
    return SendResult(
        status,
        out.msg_id,
        offset_msg_id,
        queue,
        queue_offset,
        ext.get("MSG_REGION") or DEFAULT_REGION,
        ext.get("TRACE_ON") != "false",
        ext.get("transactionId"),
    )
