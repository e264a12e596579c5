"""The asyncio producer (RocketMQ ``DefaultMQProducer``, 4.9.7 behaviour).

``send`` is a synchronous send in RocketMQ's sense: it awaits the broker's answer and
returns a ``SendResult``. An attempt goes to the master of the queue's broker group with
SEND_MESSAGE_V2 (310); when it fails with a connection error, a timeout, or one of the
retriable response codes (17, 14, 1, 16, 204, 205) the send is tried again on a queue of
another broker group, up to ``retry_times`` more times, all within ``send_timeout``.
Any other response code is raised at once as ``MQBrokerError``. FLUSH_DISK_TIMEOUT,
FLUSH_SLAVE_TIMEOUT and SLAVE_NOT_AVAILABLE are results, not errors (retried on another
broker only with ``retry_another_broker_when_not_store_ok``).

``send_oneway`` makes one attempt and does not wait for an answer; ``send_batch`` sends
messages of one topic as SEND_BATCH_MESSAGE (320); ``send_to_queue`` and
``send_orderly`` (with a queue selector) make exactly one attempt on the chosen queue,
as the Java client does for orderly sends.

The client sets UNIQ_KEY (``msg_id`` of the result) once per message, so every retry of
a message carries the same id, and compresses bodies of ``compress_over`` bytes or more
with zlib (sysflag COMPRESSED | ZLIB type, as Java 4.9.7). It heartbeats its producer
group to every master every ``heartbeat_interval`` seconds, refreshes routes every
``poll_namesrv_interval`` seconds and sends UNREGISTER_CLIENT to every broker at
shutdown.
"""

from __future__ import annotations

import logging
import random
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from ledgermq.client.errors import (
    ClientStateError,
    MessageInvalidError,
    MQBrokerError,
    MQClientError,
    MQConnectError,
    NoRouteError,
    SendFailedError,
)
from ledgermq.client.fault import FaultStrategy
from ledgermq.client.instance import ClientInstance, local_ip
from ledgermq.client.message import (
    DEFAULT_REGION,
    STATUS_BY_CODE,
    Message,
    SendResult,
    SendStatus,
    validate_message,
    validate_topic,
)
from ledgermq.client.route_cache import AUTO_CREATE_TOPIC, DEFAULT_TOPIC_QUEUE_NUMS, TopicPublishInfo
from ledgermq.client.selector import QueueSelector, select_queue
from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.errors import LocalProtocolError
from ledgermq.net.client import ConnectError
from ledgermq.net.connection import ConnectionClosedError, RequestTimeoutError
from ledgermq.protocol import properties as P
from ledgermq.protocol import sysflag as SF
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.protocol.batch import BatchEntry, encode_batch
from ledgermq.protocol.codes import RequestCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.msgid import UniqueIdGenerator

log = logging.getLogger(__name__)

MAX_MESSAGE_SIZE = 4 * 1024 * 1024
COMPRESS_OVER = 4096
COMPRESS_LEVEL = 5
RETRY_PREFIX = "%RETRY%"
RECONSUME_TIME = "RECONSUME_TIME"
MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"


@dataclass(slots=True)
class _Outgoing:
    """One message (or batch) ready for the wire; built once, the same on every attempt."""

    topic: str
    body: bytes
    sysflag: int
    flag: int
    properties: str
    msg_id: str
    batch: bool = False
    reconsume_times: int | None = None
    max_reconsume_times: int | None = None


class Producer:
    """``async with Producer("pg", "127.0.0.1:9876") as p: await p.send(Message("T", b"hi"))``."""

    def __init__(
        self,
        group: str,
        namesrv_addrs: str | Sequence[str],
        *,
        send_timeout: float = 3.0,
        retry_times: int = 2,
        compress_over: int = COMPRESS_OVER,
        compress_level: int = COMPRESS_LEVEL,
        max_message_size: int = MAX_MESSAGE_SIZE,
        send_latency_fault_enable: bool = False,
        retry_another_broker_when_not_store_ok: bool = False,
        poll_namesrv_interval: float = 30.0,
        heartbeat_interval: float = 30.0,
        api_timeout: float = 3.0,
        create_topic_key: str = AUTO_CREATE_TOPIC,
        default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS,
        client_ip: str | None = None,
        instance_name: str = "DEFAULT",
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
    ) -> None:
        if not group:
            raise MQClientError("the producer group is blank")
        if retry_times < 0:
            raise MQClientError("retry_times must be 0 or more")
        self.group = group
        self.send_timeout = send_timeout
        self.retry_times = retry_times
        self.compress_over = compress_over
        self.compress_level = compress_level
        self.max_message_size = max_message_size
        self.retry_another_broker_when_not_store_ok = retry_another_broker_when_not_store_ok
        self.heartbeat_interval = heartbeat_interval
        self.api_timeout = api_timeout
        self.create_topic_key = create_topic_key
        self.default_topic_queue_nums = default_topic_queue_nums
        self.clock = clock
        rng = rng or random.Random()
        self.instance = ClientInstance.acquire(
            namesrv_addrs,
            client_ip=client_ip or local_ip(),
            instance_name=instance_name,
            api_timeout=api_timeout,
            poll_namesrv_interval=poll_namesrv_interval,
            heartbeat_interval=heartbeat_interval,
            clock=clock,
            rng=rng,
        )
        self.client_ip = self.instance.client_ip
        self.client_id = self.instance.client_id
        self.remoting = self.instance.remoting
        self.routes = self.instance.routes
        self.routes.create_topic_key = create_topic_key
        self.routes.default_topic_queue_nums = default_topic_queue_nums
        self.fault = FaultStrategy(send_latency_fault_enable, clock=clock)
        self.ids = UniqueIdGenerator(self.client_ip)
        self._state = "created"

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        if self._state != "created":
            raise ClientStateError(f"the producer is {self._state}; it can be started once")
        self.instance.register_producer(self.group)
        self._state = "running"
        await self.instance.start()
        await self.instance.heartbeat()

    async def shutdown(self) -> None:
        was_running = self._state == "running"
        if self._state == "shut down":
            return
        self._state = "shut down"
        if was_running:
            await self.instance.unregister_producer(self.group)
        await self.instance.release()

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.shutdown()

    def _check_running(self) -> None:
        if self._state != "running":
            raise ClientStateError(f"the producer is {self._state}, not running")

    async def heartbeat(self) -> None:
        """A heartbeat round of the client instance (every producer and consumer group it serves)."""
        await self.instance.heartbeat()

    # -- message preparation ---------------------------------------------------------------
    def _prepare(self, msg: Message) -> _Outgoing:
        validate_message(msg, self.max_message_size)
        props = msg.wire_properties()
        if P.UNIQ_KEY not in props:
            props[P.UNIQ_KEY] = self.ids.next_id(self.clock.wall_ms())
        reconsume = max_reconsume = None
        if msg.topic.startswith(RETRY_PREFIX):  # as sendKernelImpl: these go to the header
            if RECONSUME_TIME in props:
                reconsume = int(props.pop(RECONSUME_TIME))
            if MAX_RECONSUME_TIMES in props:
                max_reconsume = int(props.pop(MAX_RECONSUME_TIMES))
        body = bytes(msg.body)
        sysflag = 0
        if len(body) >= self.compress_over:
            body = zlib.compress(body, self.compress_level)
            sysflag |= SF.COMPRESSED | SF.COMPRESSION_ZLIB
        text = P.encode_properties(props)
        if len(text.encode()) > 32767:
            raise MessageInvalidError("the message properties are longer than 32767 bytes")
        return _Outgoing(msg.topic, body, sysflag, msg.flag, text, props[P.UNIQ_KEY], False, reconsume, max_reconsume)

    def _prepare_batch(self, msgs: Sequence[Message]) -> _Outgoing:
        """``DefaultMQProducer.batch``: one topic, no delay, no retry topic; each message its own UNIQ_KEY."""
        if not msgs:
            raise MessageInvalidError("a batch needs at least one message")
        topic = msgs[0].topic
        validate_topic(topic)
        if topic.startswith(RETRY_PREFIX):
            raise MessageInvalidError("retry-group messages are not supported in a batch")
        entries: list[BatchEntry] = []
        ids: list[str] = []
        for msg in msgs:
            if msg.topic != topic:
                raise MessageInvalidError(f"a batch must have one topic; {msg.topic!r} differs from {topic!r}")
            if msg.delay_level > 0:
                raise MessageInvalidError("delayed messages are not supported in a batch")
            validate_message(msg, self.max_message_size)
            props = msg.wire_properties()
            if P.UNIQ_KEY not in props:
                props[P.UNIQ_KEY] = self.ids.next_id(self.clock.wall_ms())
            ids.append(props[P.UNIQ_KEY])
            entries.append(BatchEntry(msg.flag, bytes(msg.body), P.encode_properties(props)))
        try:
            body = encode_batch(entries)
        except LocalProtocolError as exc:
            raise MessageInvalidError(str(exc)) from None
        if len(body) > self.max_message_size:
            raise MessageInvalidError(f"the batch is {len(body)} bytes, over the maximum {self.max_message_size}")
        wait = "true" if msgs[0].wait_store_msg_ok else "false"
        return _Outgoing(topic, body, 0, 0, P.encode_properties({P.WAIT: wait}), ",".join(ids), True)

    # -- one attempt -----------------------------------------------------------------------
    def _request(self, out: _Outgoing, mq: MessageQueue) -> RemotingCommand:
        header: dict[str, Any] = {
            "a": self.group,
            "b": out.topic,
            "c": self.create_topic_key,
            "d": self.default_topic_queue_nums,
            "e": mq.queue_id,
            "f": out.sysflag,
            "g": self.clock.wall_ms(),
            "h": out.flag,
            "i": out.properties,
            "j": out.reconsume_times or 0,
            "k": False,
            "l": out.max_reconsume_times,
            "m": out.batch,
            "n": mq.broker_name,
        }
        code = RequestCode.SEND_BATCH_MESSAGE if out.batch else RequestCode.SEND_MESSAGE_V2
        return RemotingCommand.request(code, header, out.body)

    async def _broker_addr(self, mq: MessageQueue) -> str:
        addr = self.routes.master_addr(mq.broker_name)
        if addr is None:
            await self.routes.find_publish_info(mq.topic)
            addr = self.routes.master_addr(mq.broker_name)
        if addr is None:
            raise MQClientError(f"the broker {mq.broker_name} does not exist (no master address)")
        return addr

    async def _send_kernel(self, out: _Outgoing, mq: MessageQueue, timeout: float, oneway: bool) -> SendResult | None:
        addr = await self._broker_addr(mq)
        cmd = self._request(out, mq)
        try:
            if oneway:
                await self.remoting.invoke_oneway(addr, cmd)
                return None
            resp = await self.remoting.invoke(addr, cmd, timeout)
        except ConnectError as exc:
            raise MQConnectError(str(exc), addr) from None
        except ConnectionClosedError as exc:
            raise MQConnectError(f"{addr} closed the connection: {exc}", addr) from None
        except RequestTimeoutError as exc:
            raise MQConnectError(str(exc), addr, timeout=True) from None
        return self._result(resp, out, mq, addr)

    @staticmethod
    def _result(resp: RemotingCommand, out: _Outgoing, mq: MessageQueue, addr: str) -> SendResult:
        """``processSendResponse``."""
        status = STATUS_BY_CODE.get(resp.code)
        if status is None:
            raise MQBrokerError(resp.code, resp.remark, addr)
        ext = resp.ext_fields
        try:
            queue = MessageQueue(out.topic, mq.broker_name, int(ext["queueId"]))
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

    # -- the retry loop --------------------------------------------------------------------
    async def _publish_info(self, topic: str) -> TopicPublishInfo:
        try:
            info = await self.routes.find_publish_info(topic)
        except MQConnectError as exc:
            raise NoRouteError(f"no route info of topic {topic}: {exc}") from exc
        if info is None or not info.ok:
            raise NoRouteError(f"no route info of topic {topic} (nor of {self.create_topic_key} to auto-create it)")
        return info

    async def _send_default(self, out: _Outgoing, timeout: float | None, oneway: bool) -> SendResult | None:
        """``sendDefaultImpl``."""
        self._check_running()
        timeout = self.send_timeout if timeout is None else timeout
        begin_first = self.clock.monotonic()
        info = await self._publish_info(out.topic)
        times_total = 1 if oneway else 1 + self.retry_times
        last_broker: str | None = None
        brokers: list[str] = []
        last_exc: MQClientError | None = None
        result: SendResult | None = None
        call_timeout = False
        for _ in range(times_total):
            mq = select_queue(info, last_broker, self.fault)
            if mq is None:
                break
            last_broker = mq.broker_name
            brokers.append(mq.broker_name)
            begin = self.clock.monotonic()
            remaining = timeout - (begin - begin_first)
            if remaining <= 0:
                call_timeout = True
                break
            try:
                result = await self._send_kernel(out, mq, remaining, oneway)
            except MQBrokerError as exc:
                self.fault.update_fault_item(mq.broker_name, self._elapsed_ms(begin), True)
                log.warning("send to %s failed: %s", mq, exc)
                last_exc = exc
                if exc.retriable:
                    continue
                raise
            except MQClientError as exc:  # connection errors, timeouts, a broker without master
                self.fault.update_fault_item(mq.broker_name, self._elapsed_ms(begin), True)
                log.warning("send to %s failed, trying again at once: %s", mq, exc)
                last_exc = exc
                continue
            self.fault.update_fault_item(mq.broker_name, self._elapsed_ms(begin), False)
            if oneway or result is None:
                return None
            if result.status is not SendStatus.SEND_OK and self.retry_another_broker_when_not_store_ok:
                continue
            return result
        if result is not None:
            return result
        spent = (self.clock.monotonic() - begin_first) * 1000
        if call_timeout:
            raise MQConnectError(
                f"send to {out.topic} timed out after {spent:.0f}ms and {len(brokers) - 1} attempts", timeout=True
            ) from last_exc
        raise SendFailedError(
            f"send to {out.topic} failed {len(brokers)} times in {spent:.0f}ms (brokers {brokers}): {last_exc}",
            attempts=len(brokers),
            brokers=brokers,
            last=last_exc,
        ) from last_exc

    def _elapsed_ms(self, begin: float) -> int:
        return int((self.clock.monotonic() - begin) * 1000)

    # -- public sends ----------------------------------------------------------------------
    async def send(self, msg: Message, *, timeout: float | None = None) -> SendResult:
        """Send and await the broker's answer, retrying on another broker group."""
        self._check_running()
        result = await self._send_default(self._prepare(msg), timeout, oneway=False)
        assert result is not None
        return result

    async def send_oneway(self, msg: Message) -> None:
        """One attempt, no answer awaited (the broker does not reply)."""
        self._check_running()
        await self._send_default(self._prepare(msg), None, oneway=True)

    async def send_batch(self, msgs: Sequence[Message], *, timeout: float | None = None) -> SendResult:
        """SEND_BATCH_MESSAGE (320): ``msg_id`` and ``offset_msg_id`` are comma-joined, and
        ``queue_offset`` is the first message's."""
        self._check_running()
        result = await self._send_default(self._prepare_batch(msgs), timeout, oneway=False)
        assert result is not None
        return result

    async def send_to_queue(self, msg: Message, queue: MessageQueue, *, timeout: float | None = None) -> SendResult:
        """One attempt on ``queue`` (``send(msg, mq)``); errors are raised as they come."""
        self._check_running()
        return await self._send_selected(self._prepare(msg), queue, timeout)

    async def send_orderly(
        self, msg: Message, selector: QueueSelector, arg: Any, *, timeout: float | None = None
    ) -> SendResult:
        """``send(msg, selector, arg)``: the selector picks one of the topic's write queues."""
        self._check_running()
        out = self._prepare(msg)
        info = await self._publish_info(msg.topic)
        queue = selector(list(info.queues), msg, arg)
        if not isinstance(queue, MessageQueue):
            raise MQClientError(f"the queue selector returned {queue!r}, not a MessageQueue")
        return await self._send_selected(out, queue, timeout)

    async def _send_selected(self, out: _Outgoing, queue: MessageQueue, timeout: float | None) -> SendResult:
        if queue.topic != out.topic:
            raise MessageInvalidError(f"the selected queue's topic {queue.topic!r} is not the message's {out.topic!r}")
        result = await self._send_kernel(out, queue, self.send_timeout if timeout is None else timeout, False)
        assert result is not None
        return result

    async def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's write queues (``fetchPublishMessageQueues``)."""
        self._check_running()
        return list((await self._publish_info(topic)).queues)
