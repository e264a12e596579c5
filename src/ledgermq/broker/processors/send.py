"""SEND_MESSAGE (v1), SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE.

V2 headers use one-letter keys (a..n) for the v1 names; the C++ client sends batches as
SEND_MESSAGE_V2 with ``m`` = "1" (we treat "1" as true, unlike Java's parseBoolean,
so C++ batches are stored as the separate messages they are).
"""

from __future__ import annotations

import random
from collections.abc import Awaitable

from ledgermq.broker.context import Broker
from ledgermq.broker.processors.send_answer import answer
from ledgermq.broker.topics import DLQ_PREFIX, RETRY_PREFIX, topic_error
from ledgermq.broker.transactions.half import is_prepared, to_half
from ledgermq.errors import RemoteProtocolError
from ledgermq.net.server import Deferred, RequestContext
from ledgermq.protocol import properties as P
from ledgermq.protocol import sysflag as SF
from ledgermq.protocol.batch import iter_batch
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.headers_send import SendMessageRequestHeader
from ledgermq.protocol.message import inflate_body
from ledgermq.protocol.route import PERM_WRITE, TopicConfig
from ledgermq.store.encoding import encode_batch_body, encode_single_text
from ledgermq.store.message_input import BatchInput, MessageInput


def _peer_host(ctx: RequestContext) -> tuple[str, int]:
    """The born host of what this connection sends, parsed once per connection."""
    attachment = ctx.connection.attachment
    born: tuple[str, int] | None = attachment.get("born_host")
    if born is None:
        host, _, port = ctx.peer.rpartition(":")
        born = attachment["born_host"] = (host or "127.0.0.1", int(port) if port.isdigit() else 0)
    return born


def _resolve_topic(
    broker: Broker, cmd: RemotingCommand, hdr: SendMessageRequestHeader, topic: str
) -> TopicConfig | RemotingCommand:
    tc = broker.topics.get(topic)
    if tc is None:
        if topic.startswith(RETRY_PREFIX):
            return broker.topics.create_retry_topic(topic)
        tc = broker.topics.create_in_send(
            topic,
            hdr.default_topic,
            hdr.default_topic_queue_nums,
            hdr.topic_sys_flag,
        )
    if tc is None:
        return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
    return tc


def _admit(broker: Broker, cmd: RemotingCommand, hdr: SendMessageRequestHeader) -> RemotingCommand | None:
    """The refusals that need no topic: a read-only broker, an illegal or system topic name."""
    if not broker.writable:
        if (refused := broker.refuse_write(False)) is not None:
            # controller mode: a slave says why (SERVICE_NOT_AVAILABLE: clients look for the master)
            return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE, f"service not available now: {refused.remark}")
        return cmd.response(
            ResponseCode.NO_PERMISSION,
            f"the broker[{broker.config.broker_addr}] sending message is forbidden",
        )
    problem = topic_error(hdr.topic)
    if problem is not None:
        code = ResponseCode.NO_PERMISSION if "forbidden" in problem else ResponseCode.SYSTEM_ERROR
        return cmd.response(code, problem)
    return None


def _route(
    cmd: RemotingCommand, hdr: SendMessageRequestHeader, tc: TopicConfig
) -> tuple[TopicConfig, int] | RemotingCommand:
    """The topic's write permission and the queue the message goes to."""
    if not tc.perm & PERM_WRITE:
        return cmd.response(ResponseCode.NO_PERMISSION, f"the topic[{hdr.topic}] sending message is forbidden")
    queue_id = hdr.queue_id
    if queue_id >= max(tc.read_queue_nums, tc.write_queue_nums):
        return cmd.response(
            ResponseCode.SYSTEM_ERROR,
            f"request queueId[{queue_id}] is illegal, {tc} Producer: {hdr.producer_group}",
        )
    if queue_id < 0:
        queue_id = random.randrange(max(1, tc.write_queue_nums))
    return tc, queue_id


def _retry_to_dlq(broker: Broker, hdr: SendMessageRequestHeader, topic: str, queue_id: int) -> tuple[str, int]:
    """Retry-topic sends that exhausted their reconsume budget go to %DLQ%group."""
    if not topic.startswith(RETRY_PREFIX):
        return topic, queue_id
    group = topic[len(RETRY_PREFIX) :]
    sub = broker.subscriptions.find(group)
    limit = hdr.max_reconsume_times
    if limit is None:
        limit = sub.retry_max_times if sub else 16
    if hdr.reconsume_times < limit:
        return topic, queue_id
    dlq = DLQ_PREFIX + group
    broker.topics.create_retry_topic(dlq, 1)
    return dlq, 0


def send_message(
    broker: Broker, ctx: RequestContext, cmd: RemotingCommand
) -> RemotingCommand | Deferred | Awaitable[RemotingCommand]:
    """The produce path, the same in every mode (native master, SYNC_MASTER, controller
    mode, DLedger): checks, the message, ``Broker.write`` and its answer. A send that needs
    no wait is answered within this call (no task, no loop turn); one that waits (an fsync,
    the slaves, a Raft commit) returns a ``Deferred`` the broker's write turn resolves
    (broker/write_turn). Only a send that creates its topic is awaited: the topic is
    registered with the name servers before the producer hears back."""
    hdr = SendMessageRequestHeader.decode(cmd)
    refused = _admit(broker, cmd, hdr)
    if refused is not None:
        return refused
    tc = broker.topics.get(hdr.topic)
    if tc is None:
        return _send_to_new_topic(broker, ctx, cmd, hdr)
    return _store(broker, ctx, cmd, hdr, tc)


async def _send_to_new_topic(
    broker: Broker, ctx: RequestContext, cmd: RemotingCommand, hdr: SendMessageRequestHeader
) -> RemotingCommand:
    tc = _resolve_topic(broker, cmd, hdr, hdr.topic)
    if isinstance(tc, RemotingCommand):
        return tc
    await broker.register_now()  # routable before the producer hears back (one increment per burst)
    answered = _store(broker, ctx, cmd, hdr, tc)
    if isinstance(answered, RemotingCommand):
        return answered
    later = await answered.wait()
    assert later is not None
    return later


def _store(
    broker: Broker, ctx: RequestContext, cmd: RemotingCommand, hdr: SendMessageRequestHeader, tc: TopicConfig
) -> RemotingCommand | Deferred:
    """Route, build, write and answer (now, or through a ``Deferred``)."""
    routed = _route(cmd, hdr, tc)
    if isinstance(routed, RemotingCommand):
        return routed
    tc, queue_id = routed
    built = _build(broker, ctx, cmd, hdr, tc, queue_id)
    if isinstance(built, RemotingCommand):
        return built
    msg, wait = built
    return answer(broker, cmd, broker.write(msg, wait), queue_id, wait)


def _build(
    broker: Broker,
    ctx: RequestContext,
    cmd: RemotingCommand,
    hdr: SendMessageRequestHeader,
    tc: TopicConfig,
    queue_id: int,
) -> tuple[MessageInput | BatchInput, bool] | RemotingCommand:
    """What to store, and whether the sender waits for it to be stored (its WAIT property)."""
    if cmd.code == RequestCode.SEND_BATCH_MESSAGE or hdr.batch:
        batch = _batch_input(broker, ctx, cmd, hdr, tc, queue_id)
        return batch if isinstance(batch, RemotingCommand) else (batch, True)
    return _message_input(broker, ctx, cmd, hdr, tc, queue_id)


def _message_input(
    broker: Broker,
    ctx: RequestContext,
    cmd: RemotingCommand,
    hdr: SendMessageRequestHeader,
    tc: TopicConfig,
    queue_id: int,
) -> tuple[MessageInput, bool] | RemotingCommand:
    topic, queue_id_stored = _retry_to_dlq(broker, hdr, tc.topic_name, queue_id)
    sysflag = hdr.sys_flag
    if tc.topic_filter_type == "MULTI_TAG":
        sysflag |= SF.MULTI_TAGS
    built = encode_single_text(  # the C path, for the messages it takes (else None)
        topic=topic,
        queue_id=queue_id_stored,
        flag=hdr.flag,
        body=cmd.body,
        properties=hdr.properties or "",
        sysflag=sysflag,
        born_timestamp=hdr.born_timestamp,
        born_host=_peer_host(ctx),
        store_host=broker.store_host,
        reconsume_times=hdr.reconsume_times,
        extra=((P.CLUSTER, broker.config.cluster_name),),
    )
    if built is not None:
        encoded, wait = built
        return MessageInput(topic, cmd.body, queue_id_stored, wait_store_ok=wait, encoded=encoded), wait
    props = P.decode_properties(hdr.properties or "")
    prepared = is_prepared(props)  # a transaction's half message (broker/transactions)
    if prepared and broker.config.reject_transaction_message:
        return cmd.response(
            ResponseCode.NO_PERMISSION,
            f"the broker[{broker.config.broker_ip1}] sending transaction message is forbidden",
        )
    wait_text = props.pop(P.WAIT, None)
    wait = wait_text != "false"
    props[P.CLUSTER] = broker.config.cluster_name
    msg = MessageInput(
        topic=topic,
        body=cmd.body,
        queue_id=queue_id_stored,
        flag=hdr.flag,
        properties=props,
        sysflag=sysflag,
        born_timestamp=hdr.born_timestamp,
        born_host=_peer_host(ctx),
        store_host=broker.store_host,
        reconsume_times=hdr.reconsume_times,
        wait_store_ok=wait,
    )
    if prepared:  # RocketMQ renders the half's properties with WAIT still in them
        if wait_text is not None:
            msg.properties[P.WAIT] = wait_text
        msg = to_half(msg)
    return msg, wait


def _batch_input(
    broker: Broker,
    ctx: RequestContext,
    cmd: RemotingCommand,
    hdr: SendMessageRequestHeader,
    tc: TopicConfig,
    queue_id: int,
) -> BatchInput | RemotingCommand:
    if tc.topic_name.startswith(RETRY_PREFIX):
        return cmd.response(ResponseCode.MESSAGE_ILLEGAL, "batch request does not support retry group")
    body = cmd.body
    sysflag = hdr.sys_flag
    if sysflag & SF.COMPRESSED:  # the C++ client compresses a whole batch body past 4 KiB
        try:
            body = inflate_body(body, sysflag)
        except RemoteProtocolError as exc:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, f"batch body does not inflate: {exc}")
        sysflag &= ~(SF.COMPRESSED | SF.COMPRESSION_TYPE_MASK)
    extra = P.decode_properties(hdr.properties or "")
    if sysflag & SF.TRANSACTION_MASK or extra.get(P.TRAN_MSG) == "true":
        return cmd.response(ResponseCode.MESSAGE_ILLEGAL, "a batch cannot hold transactional messages")
    if extra.get(P.DELAY, "0") not in ("", "0"):
        return cmd.response(ResponseCode.MESSAGE_ILLEGAL, "a batch cannot hold delayed messages")
    extra.pop(P.WAIT, None)
    extra[P.CLUSTER] = broker.config.cluster_name
    born_host = _peer_host(ctx)
    encoded = encode_batch_body(  # the C path, for the batches it takes (else None)
        topic=tc.topic_name,
        queue_id=queue_id,
        sysflag=sysflag,
        born_timestamp=hdr.born_timestamp,
        born_host=born_host,
        store_host=broker.store_host,
        body=body,
        extra=extra,
    )
    entries: list[tuple[int, bytes, dict[str, str]]] = []  # decoded only where C did not build the records
    for entry in iter_batch(body) if encoded is None else ():
        props = P.decode_properties(entry.properties)
        # RocketMQ's broker would store such an entry at once, undelayed, or as an ordinary
        # message: refuse it rather than quietly drop what the entry asked for.
        if props.get(P.DELAY, "0") not in ("", "0"):
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, "a batch cannot hold delayed messages")
        if props.get(P.TRAN_MSG) == "true":
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, "a batch cannot hold transactional messages")
        props.update(extra)
        entries.append((entry.flag, entry.body, props))
    return BatchInput(
        topic=tc.topic_name,
        entries=entries,
        queue_id=queue_id,
        sysflag=sysflag,
        born_timestamp=hdr.born_timestamp,
        born_host=born_host,
        store_host=broker.store_host,
        encoded=encoded,
    )


PROCESSORS = {
    RequestCode.SEND_MESSAGE: send_message,
    RequestCode.SEND_MESSAGE_V2: send_message,
    RequestCode.SEND_BATCH_MESSAGE: send_message,
}
