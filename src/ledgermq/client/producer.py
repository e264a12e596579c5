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

Async sends (``send_async``, ``send_batch_async``, ``send_to_queue_async``,
``send_orderly_async``) return an ``asyncio.Future`` at once and report to an optional
callback: a ``SendCallback`` object (``on_success(result)`` / ``on_exception(exc)``) or
the two plain callables ``on_success=`` and ``on_exception=``, sync or async. As
``MQClientAPIImpl.sendMessageAsync``/``onExceptionImpl`` (4.9.7) do, a failed attempt is
retried up to ``retry_times_when_send_async_failed`` more times, within the send timeout,
on a queue picked away from the failed broker (the same queue for queue-selected sends),
with the fault item updated after every attempt. Retried: connection errors, timeouts and
the retriable response codes; Java 4.9.7 retries no broker answer at all in async mode,
we retry the same codes as sync sends. Non-SEND_OK statuses are results, never retried.
A callback runs once, on the event loop, before the future completes; an exception it
raises is logged and goes no further.

Back-pressure: at most ``async_send_max_inflight`` async sends (default 256, our broker's
``maxInflightPerConnection``, beyond which it answers SYSTEM_BUSY) and
``async_send_max_bytes`` of bodies (default 64 MiB) are in flight; later ones wait for a
slot in order, and the wait counts against their send timeout (``AsyncBackPressureError``
when it runs out), as Java 5.x's ``semaphoreAsyncSendNum``/``Size``. A producing loop
that must not run ahead can ``await wait_for_async_capacity()`` between sends. Shutdown
waits for async sends in flight (up to the send timeout), then fails what is left with
``ClientStateError``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import zlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from ledgermq.client.async_send import (
    ASYNC_SEND_MAX_BYTES,
    ASYNC_SEND_MAX_INFLIGHT,
    AsyncSendBudget,
    Callbacks,
    OnException,
    OnSuccess,
    SendCallback,
)
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
        retry_times_when_send_async_failed: int = 2,
        async_send_max_inflight: int = ASYNC_SEND_MAX_INFLIGHT,
        async_send_max_bytes: int = ASYNC_SEND_MAX_BYTES,
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
        if retry_times < 0 or retry_times_when_send_async_failed < 0:
            raise MQClientError("retry_times and retry_times_when_send_async_failed must be 0 or more")
        self.group = group
        self.send_timeout = send_timeout
        self.retry_times = retry_times
        self.retry_times_when_send_async_failed = retry_times_when_send_async_failed
        self.async_budget = AsyncSendBudget(async_send_max_inflight, async_send_max_bytes)
        self._async_tasks: set[asyncio.Task[SendResult]] = set()
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
        """Stop taking sends, let async sends in flight finish (up to the send timeout, then
        they fail with ClientStateError), unregister the group, release the instance."""
        was_running = self._state == "running"
        if self._state in ("shutting down", "shut down"):
            return
        self._state = "shutting down"
        if self._async_tasks:
            _done, left = await asyncio.wait(set(self._async_tasks), timeout=self.send_timeout + 1.0)
            for task in left:
                task.cancel()
            if left:
                await asyncio.wait(left)
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

    async def _send_default(
        self,
        out: _Outgoing,
        timeout: float | None,
        oneway: bool,
        *,
        retries: int | None = None,
        retry_not_ok: bool | None = None,
        started: float | None = None,
    ) -> SendResult | None:
        """``sendDefaultImpl`` (sync and oneway) and, with ``retries``/``retry_not_ok``/``started``
        given, the async send's attempts (``onExceptionImpl``), timed from ``started``
        (admitted before shutdown began: not checked again)."""
        if started is None:
            self._check_running()
        timeout = self.send_timeout if timeout is None else timeout
        begin_first = self.clock.monotonic() if started is None else started
        if retry_not_ok is None:
            retry_not_ok = self.retry_another_broker_when_not_store_ok
        info = await self._publish_info(out.topic)
        times_total = 1 if oneway else 1 + (self.retry_times if retries is None else retries)
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
            if result.status is not SendStatus.SEND_OK and retry_not_ok:
                continue
            return result
        if result is not None:
            return result
        if call_timeout:
            brokers.pop()  # that attempt was never made
        raise self._gave_up(out, begin_first, brokers, last_exc, call_timeout)

    def _gave_up(
        self, out: _Outgoing, begin_first: float, brokers: list[str], last_exc: MQClientError | None, timed_out: bool
    ) -> MQClientError:
        """The error a send raises when its attempts are spent (or its time is)."""
        spent = (self.clock.monotonic() - begin_first) * 1000
        if timed_out:
            exc: MQClientError = MQConnectError(
                f"send to {out.topic} timed out after {spent:.0f}ms and {len(brokers)} attempts", timeout=True
            )
        else:
            exc = SendFailedError(
                f"send to {out.topic} failed {len(brokers)} times in {spent:.0f}ms (brokers {brokers}): {last_exc}",
                attempts=len(brokers),
                brokers=brokers,
                last=last_exc,
            )
        exc.__cause__ = last_exc
        return exc

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

    async def send_batch_to_queue(
        self, msgs: Sequence[Message], queue: MessageQueue, *, timeout: float | None = None
    ) -> SendResult:
        """``send(Collection<Message>, mq)``: one batch, one attempt on ``queue``."""
        self._check_running()
        return await self._send_selected(self._prepare_batch(msgs), queue, timeout)

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

    # -- async sends -----------------------------------------------------------------------
    def send_async(
        self,
        msg: Message,
        callback: SendCallback | None = None,
        *,
        on_success: OnSuccess | None = None,
        on_exception: OnException | None = None,
        timeout: float | None = None,
    ) -> asyncio.Future[SendResult]:
        """Start a send and return its future at once (``send(msg, SendCallback)``).

        Attempts are retried on another broker group (see the module notes). Errors, local
        ones included (a bad message, a producer not running), end the future and go to
        ``on_exception``; only a malformed callback argument raises here (TypeError).
        Cancelling the future cancels the send, and no callback runs then."""
        return self._start_async(
            lambda: self._prepare(msg), self._send_default_async, callback, on_success, on_exception, timeout
        )

    def send_batch_async(
        self,
        msgs: Sequence[Message],
        callback: SendCallback | None = None,
        *,
        on_success: OnSuccess | None = None,
        on_exception: OnException | None = None,
        timeout: float | None = None,
    ) -> asyncio.Future[SendResult]:
        """``send_batch`` as an async send (retries as ``send_async``)."""
        return self._start_async(
            lambda: self._prepare_batch(msgs), self._send_default_async, callback, on_success, on_exception, timeout
        )

    def send_to_queue_async(
        self,
        msg: Message,
        queue: MessageQueue,
        callback: SendCallback | None = None,
        *,
        on_success: OnSuccess | None = None,
        on_exception: OnException | None = None,
        timeout: float | None = None,
    ) -> asyncio.Future[SendResult]:
        """``send(msg, mq, SendCallback)``: failed attempts are retried on the same queue, as
        Java's async sends without publish info are (``onExceptionImpl`` keeps the broker)."""

        async def run(out: _Outgoing, started: float, timeout: float) -> SendResult:
            return await self._send_selected_async(out, queue, started, timeout)

        return self._start_async(lambda: self._prepare(msg), run, callback, on_success, on_exception, timeout)

    def send_orderly_async(
        self,
        msg: Message,
        selector: QueueSelector,
        arg: Any,
        callback: SendCallback | None = None,
        *,
        on_success: OnSuccess | None = None,
        on_exception: OnException | None = None,
        timeout: float | None = None,
    ) -> asyncio.Future[SendResult]:
        """``send(msg, selector, arg, SendCallback)``: the selector picks the queue once; failed
        attempts are retried on that queue."""

        async def run(out: _Outgoing, started: float, timeout: float) -> SendResult:
            info = await self._publish_info(out.topic)
            queue = selector(list(info.queues), msg, arg)
            if not isinstance(queue, MessageQueue):
                raise MQClientError(f"the queue selector returned {queue!r}, not a MessageQueue")
            return await self._send_selected_async(out, queue, started, timeout)

        return self._start_async(lambda: self._prepare(msg), run, callback, on_success, on_exception, timeout)

    async def wait_for_async_capacity(self, timeout: float | None = None) -> bool:
        """Wait until an async send started now would go out at once (False after ``timeout``):
        back-pressure for a loop that produces faster than the brokers answer."""
        return await self.async_budget.wait_for_room(timeout)

    @property
    def async_inflight(self) -> int:
        """Async sends holding an in-flight slot."""
        return self.async_budget.count

    def _start_async(
        self,
        prepare: Callable[[], _Outgoing],
        run: Callable[[_Outgoing, float, float], Awaitable[SendResult]],
        callback: SendCallback | None,
        on_success: OnSuccess | None,
        on_exception: OnException | None,
        timeout: float | None,
    ) -> asyncio.Future[SendResult]:
        handler = Callbacks.of(callback, on_success, on_exception)
        loop = asyncio.get_running_loop()
        started = self.clock.monotonic()
        timeout = self.send_timeout if timeout is None else timeout
        out: _Outgoing | None = None
        error: Exception | None = None
        try:
            self._check_running()
            out = prepare()  # now, so later changes to the message do not leak into the send
        except MQClientError as exc:
            error = exc
        size = len(out.body) if out is not None else 0
        admitted = out is not None and self.async_budget.try_acquire(size)
        task = loop.create_task(self._run_async(out, error, run, handler, size, admitted, started, timeout))
        self._async_tasks.add(task)
        task.add_done_callback(self._async_tasks.discard)
        if handler is not None and handler.on_exception is not None:
            task.add_done_callback(_mark_retrieved)  # the callback has seen the error
        return task

    async def _run_async(
        self,
        out: _Outgoing | None,
        error: Exception | None,
        run: Callable[[_Outgoing, float, float], Awaitable[SendResult]],
        handler: Callbacks | None,
        size: int,
        acquired: bool,
        started: float,
        timeout: float,
    ) -> SendResult:
        result: SendResult | None = None
        if out is not None:
            try:
                if not acquired:
                    await self.async_budget.acquire(size, timeout - (self.clock.monotonic() - started))
                    acquired = True
                result = await run(out, started, timeout)
            except asyncio.CancelledError:
                if self._state != "shutting down":
                    raise
                error = ClientStateError("the producer shut down before the async send completed")
            except Exception as exc:
                error = exc
            finally:
                if acquired:
                    self.async_budget.release(size)
        if result is not None:
            if handler is not None:
                await handler.call(handler.on_success, result)
            return result
        assert error is not None
        if handler is not None:
            await handler.call(handler.on_exception, error)
        raise error

    async def _send_default_async(self, out: _Outgoing, started: float, timeout: float) -> SendResult:
        result = await self._send_default(
            out, timeout, False, retries=self.retry_times_when_send_async_failed, retry_not_ok=False, started=started
        )
        assert result is not None
        return result

    async def _send_selected_async(
        self, out: _Outgoing, queue: MessageQueue, started: float, timeout: float
    ) -> SendResult:
        """One queue, up to ``retry_times_when_send_async_failed`` retries on it, fault items updated."""
        if queue.topic != out.topic:
            raise MessageInvalidError(f"the selected queue's topic {queue.topic!r} is not the message's {out.topic!r}")
        brokers: list[str] = []
        last_exc: MQClientError | None = None
        for _ in range(1 + self.retry_times_when_send_async_failed):
            begin = self.clock.monotonic()
            remaining = timeout - (begin - started)
            if remaining <= 0:
                raise self._gave_up(out, started, brokers, last_exc, True)
            brokers.append(queue.broker_name)
            try:
                result = await self._send_kernel(out, queue, remaining, False)
            except MQClientError as exc:
                self.fault.update_fault_item(queue.broker_name, self._elapsed_ms(begin), True)
                if isinstance(exc, MQBrokerError) and not exc.retriable:
                    raise
                log.warning("async send to %s failed: %s", queue, exc)
                last_exc = exc
                continue
            self.fault.update_fault_item(queue.broker_name, self._elapsed_ms(begin), False)
            assert result is not None
            return result
        raise self._gave_up(out, started, brokers, last_exc, False)


def _mark_retrieved(task: asyncio.Future[SendResult]) -> None:
    if not task.cancelled():
        task.exception()
