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

This module is the façade and the glue (lifecycle, the transport of one attempt); the
rest lives beside it: ``publish_routes`` finds where a send goes, ``outgoing`` prepares a
message once per send, ``send_codec`` builds the request and reads the answer,
``send_retry`` is the retry policy, ``selector``/``fault`` pick queues (with
``send_latency_fault_enable``), ``async_send`` keeps the async sends' callbacks and tasks
(``send_budget`` their in-flight budget), and ``master_watch``
(settings in ``failover``) follows a broker group's master when it moves: an attempt
stalled for ``stall_after`` (0.5 s) is abandoned once the route names a new master and
made again there, and retries on the same group after a not-master answer or an
unreachable master back off until the route names another master. That goes beyond
Java 4.9.7 (which waits out the send timeout and retries at once); ``failover=
FailoverSettings(enabled=False)`` turns it off. An abandoned attempt's outcome is unknown:
the message may be stored twice (at-least-once, as any retry after a timeout).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from ledgermq.client.errors import (
    ClientStateError,
    MasterMovedError,
    MessageInvalidError,
    MQClientError,
    MQConnectError,
)
from ledgermq.client.instance.client_instance import ClientInstance, local_ip
from ledgermq.client.message import Message, SendResult
from ledgermq.client.producer.async_send import (
    AsyncSends,
    Callbacks,
    OnException,
    OnSuccess,
    SendCallback,
)
from ledgermq.client.producer.failover import FailoverSettings
from ledgermq.client.producer.fast_send import SendFuture, SendOp, SendPath
from ledgermq.client.producer.fault import FaultStrategy
from ledgermq.client.producer.master_watch import MasterWatch
from ledgermq.client.producer.outgoing import (
    COMPRESS_LEVEL,
    COMPRESS_OVER,
    MAX_MESSAGE_SIZE,
    MAX_RECONSUME_TIMES,
    RECONSUME_TIME,
    RETRY_PREFIX,
    Outgoing,
    prepare_batch,
    prepare_message,
)
from ledgermq.client.producer.publish_routes import PublishRoutes
from ledgermq.client.producer.selector import QueueSelector
from ledgermq.client.producer.send_budget import AsyncSendBudget
from ledgermq.client.producer.send_codec import read_send_response, send_request
from ledgermq.client.producer.send_retry import send_to_queue_with_retries, send_with_retries
from ledgermq.client.producer.settings import ProducerSettings
from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.net.client import ConnectError
from ledgermq.net.connection import ConnectionClosedError, RequestTimeoutError
from ledgermq.protocol.admin_body import MessageQueue
from ledgermq.util.unique_ids import UniqueIdGenerator

__all__ = [
    "COMPRESS_LEVEL",
    "COMPRESS_OVER",
    "MAX_MESSAGE_SIZE",
    "MAX_RECONSUME_TIMES",
    "RECONSUME_TIME",
    "RETRY_PREFIX",
    "FailoverSettings",
    "Producer",
    "ProducerSettings",
]

log = logging.getLogger(__name__)

# How often a failed send may look the topic's route up when ``failover`` is disabled
# (enabled, ``FailoverSettings.route_poll_interval`` decides).
ROUTE_REFRESH_AFTER_FAILURE_S = 0.3


class Producer:
    """``async with Producer("pg", "127.0.0.1:9876") as p: await p.send(Message("T", b"hi"))``."""

    def __init__(
        self,
        group: str | None = None,
        namesrv_addrs: str | Sequence[str] | None = None,
        *,
        settings: ProducerSettings | None = None,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
        **options: Any,
    ) -> None:
        """``Producer("pg", "127.0.0.1:9876", send_timeout=5)`` or
        ``Producer(settings=ProducerSettings(...))``: the keyword arguments are
        ``ProducerSettings``' fields, checked when given. ``rng`` is the client instance's
        random source (queue choice, name server choice)."""
        if settings is not None:
            if group is not None or namesrv_addrs is not None or options:
                raise TypeError("give either settings= or the producer's keyword arguments, not both")
        elif group is None or namesrv_addrs is None:
            raise TypeError("a producer needs its group and the name server addresses (or settings=)")
        else:
            settings = ProducerSettings(group=group, namesrv_addrs=namesrv_addrs, **options)
        if not settings.client_ip:
            settings = dataclasses.replace(settings, client_ip=local_ip())
        self.settings = settings
        self.clock = clock
        self.async_budget = AsyncSendBudget(settings.async_send_max_inflight, settings.async_send_max_bytes)
        self._async = AsyncSends(self.async_budget, clock, self._check_running)
        self.instance = ClientInstance.acquire(
            settings.namesrv_addrs,
            client_ip=settings.client_ip,
            instance_name=settings.instance_name,
            api_timeout=settings.api_timeout,
            poll_namesrv_interval=settings.poll_namesrv_interval,
            heartbeat_interval=settings.heartbeat_interval,
            clock=clock,
            rng=rng or random.Random(),
            credentials=settings.credentials,
            use_tls=settings.use_tls,
            tls=settings.tls,
        )
        self.client_id = self.instance.client_id
        self.remoting = self.instance.remoting
        self.routes = self.instance.routes
        self.routes.create_topic_key = settings.create_topic_key
        self.routes.default_topic_queue_nums = settings.default_topic_queue_nums
        self.fault = FaultStrategy(settings.send_latency_fault_enable, clock=clock)
        failover = settings.failover
        # the route lookups of failed and stalled sends: one per topic at a time, rate-bounded
        self.master_watch = MasterWatch(
            self.routes,
            failover,
            clock,
            failover.route_poll_interval if failover.enabled else ROUTE_REFRESH_AFTER_FAILURE_S,
        )
        self.publishing = PublishRoutes(self.routes, self.master_watch, failover, settings.create_topic_key, clock)
        self.ids = UniqueIdGenerator(self.instance.client_ip)
        self._state = "created"
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop of start(): no lookup per send
        self._path = SendPath(
            self.routes,
            self.remoting,
            self.fault,
            clock,
            self.master_watch,
            settings.group,
            settings.create_topic_key,
            settings.default_topic_queue_nums,
            # through the attribute, so a test's spy on _send_kernel sees every coroutine attempt
            lambda out, mq, timeout, oneway: self._send_kernel(out, mq, timeout, oneway),
            self._full_send,
        )

    # -- the settings the application reads ----------------------------------------------
    @property
    def group(self) -> str:
        return self.settings.group

    @property
    def send_timeout(self) -> float:
        return self.settings.send_timeout

    @property
    def failover(self) -> FailoverSettings:
        return self.settings.failover

    @property
    def client_ip(self) -> str:
        return self.instance.client_ip

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        if self._state != "created":
            raise ClientStateError(f"the producer is {self._state}; it can be started once")
        self.instance.register_producer(self.group)
        self._loop = asyncio.get_running_loop()
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
        await self._async.drain(self.settings.send_timeout + 1.0)
        self._state = "shut down"
        await self.master_watch.close()
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
    def _prepare(self, msg: Message) -> Outgoing:
        return prepare_message(
            msg,
            self.ids,
            self.clock,
            self.settings.max_message_size,
            self.settings.compress_over,
            self.settings.compress_level,
        )

    def _prepare_batch(self, msgs: Sequence[Message]) -> Outgoing:
        return prepare_batch(msgs, self.ids, self.clock, self.settings.max_message_size)

    # -- one attempt -----------------------------------------------------------------------
    async def _send_kernel(self, out: Outgoing, mq: MessageQueue, timeout: float, oneway: bool) -> SendResult | None:
        addr = self.routes.master_addr(mq.broker_name)  # known: no coroutine, no time spent
        if addr is None:
            begin = self.clock.monotonic()
            addr = await self.publishing.master_addr(mq, timeout / 2)
            timeout -= self.clock.monotonic() - begin
        cmd = send_request(
            out,
            mq,
            self.group,
            self.settings.create_topic_key,
            self.settings.default_topic_queue_nums,
            self.clock.wall_ms(),
        )
        try:
            if oneway:
                await self.remoting.invoke_oneway(addr, cmd)
                return None
            call = self.remoting.invoke(addr, cmd, timeout)
            resp = await self.master_watch.watch(call, mq.topic, mq.broker_name, addr)
        except ConnectError as exc:
            raise MQConnectError(str(exc), addr) from None
        except ConnectionClosedError as exc:
            raise MQConnectError(f"{addr} closed the connection: {exc}", addr) from None
        except RequestTimeoutError as exc:
            raise MQConnectError(str(exc), addr, timeout=True) from None
        return read_send_response(resp, out, mq, addr)

    # -- the retry loop --------------------------------------------------------------------
    async def _send_default(
        self,
        out: Outgoing,
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
        timeout = self.settings.send_timeout if timeout is None else timeout
        begin_first = self.clock.monotonic() if started is None else started
        if retry_not_ok is None:
            retry_not_ok = self.settings.retry_another_broker_when_not_store_ok
        # a usable cached route is what publish_info would return (it is not between masters)
        info = self.routes.usable_publish_info(out.topic)
        if info is None:
            info = await self.publishing.publish_info(out.topic, begin_first + timeout)
        times_total = 1 if oneway else 1 + (self.settings.retry_times if retries is None else retries)
        return await send_with_retries(
            out,
            info,
            self._send_kernel,
            self.fault,
            self.clock,
            times_total,
            timeout,
            begin_first,
            retry_not_ok,
            oneway,
            # a failed send asks the name server again (rate-bounded), so a new master is
            # found within a second, not at the next 30 s poll
            self.master_watch,
        )

    async def _full_send(
        self, out: Outgoing, timeout: float, started: float, times_total: int, retry_not_ok: bool
    ) -> SendResult | None:
        """A send's whole coroutine path, for one the fast path cannot start (no usable cached
        route): the route looked up (or waited for), then ``send_with_retries``."""
        info = self.routes.usable_publish_info(out.topic)
        if info is None:
            info = await self.publishing.publish_info(out.topic, started + timeout)
        return await send_with_retries(
            out, info, self._send_kernel, self.fault, self.clock, times_total, timeout, started, retry_not_ok,
            False, self.master_watch,
        )  # fmt: skip

    async def _sync_send(self, out: Outgoing, timeout: float | None) -> SendResult:
        """A sync send as an op (see ``fast_send``) on a plain future; the caller's cancel
        stops it."""
        loop = self._loop if self._loop is not None else asyncio.get_running_loop()
        fut: asyncio.Future[SendResult] = loop.create_future()
        settings = self.settings
        op = SendOp(
            self._path, out, fut, settings.send_timeout if timeout is None else timeout, self.clock.monotonic(),
            1 + settings.retry_times, settings.retry_another_broker_when_not_store_ok,
        )  # fmt: skip
        op.start()
        try:
            return await fut
        except asyncio.CancelledError:
            op.abort()
            raise

    def _async_op(self, out: Outgoing, fut: SendFuture, started: float, timeout: float) -> SendOp:
        """An async send's op: ``retry_times_when_send_async_failed`` retries, a non-SEND_OK
        status is a result (``onExceptionImpl``)."""
        return SendOp(
            self._path, out, fut, timeout, started, 1 + self.settings.retry_times_when_send_async_failed, False
        )

    # -- public sends ----------------------------------------------------------------------
    async def send(self, msg: Message, *, timeout: float | None = None) -> SendResult:
        """Send and await the broker's answer, retrying on another broker group."""
        self._check_running()
        return await self._sync_send(self._prepare(msg), timeout)

    async def send_oneway(self, msg: Message) -> None:
        """One attempt, no answer awaited (the broker does not reply)."""
        self._check_running()
        await self._send_default(self._prepare(msg), None, oneway=True)

    async def send_batch(self, msgs: Sequence[Message], *, timeout: float | None = None) -> SendResult:
        """SEND_BATCH_MESSAGE (320): ``msg_id`` and ``offset_msg_id`` are comma-joined, and
        ``queue_offset`` is the first message's."""
        self._check_running()
        return await self._sync_send(self._prepare_batch(msgs), timeout)

    async def send_prepared(
        self, out: Outgoing, queue: MessageQueue | None = None, *, timeout: float | None = None
    ) -> SendResult:
        """A batch made by ``outgoing.prepare_rows`` from columns (the Spark sink's rows): as
        ``send_batch``, or with ``queue`` as ``send_batch_to_queue``."""
        self._check_running()
        if queue is None:
            return await self._sync_send(out, timeout)
        return await self._send_selected(out, queue, timeout)

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
        timeout = self.settings.send_timeout if timeout is None else timeout
        deadline = self.clock.monotonic() + timeout
        info = await self.publishing.publish_info(msg.topic, deadline)
        queue = selector(list(info.queues), msg, arg)
        if not isinstance(queue, MessageQueue):
            raise MQClientError(f"the queue selector returned {queue!r}, not a MessageQueue")
        return await self._send_selected(out, queue, deadline - self.clock.monotonic())

    async def _send_selected(self, out: Outgoing, queue: MessageQueue, timeout: float | None) -> SendResult:
        if queue.topic != out.topic:
            raise MessageInvalidError(f"the selected queue's topic {queue.topic!r} is not the message's {out.topic!r}")
        timeout = self.settings.send_timeout if timeout is None else timeout
        begin = self.clock.monotonic()
        while True:  # one attempt, made again only on the new master of an abandoned one
            try:
                result = await self._send_kernel(out, queue, timeout - (self.clock.monotonic() - begin), False)
            except MasterMovedError as exc:
                if timeout - (self.clock.monotonic() - begin) <= 0:
                    raise
                log.info("send to %s abandoned, trying its new master at once: %s", queue, exc)
                continue
            assert result is not None
            return result

    async def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's write queues (``fetchPublishMessageQueues``)."""
        self._check_running()
        return list((await self.publishing.publish_info(topic)).queues)

    # -- async sends -----------------------------------------------------------------------
    def send_async(
        self,
        msg: Message,
        callback: SendCallback | None = None,
        *,
        on_success: OnSuccess | None = None,
        on_exception: OnException | None = None,
        timeout: float | None = None,
    ) -> SendFuture:
        """Start a send and return its future at once (``send(msg, SendCallback)``).

        Attempts are retried on another broker group (see the module notes). Errors, local
        ones included (a bad message, a producer not running), end the future and go to
        ``on_exception``; only a malformed callback argument raises here (TypeError).
        Cancelling the future cancels the send, and no callback runs then."""
        return self._async.start(
            self._prepare,
            msg,
            self._async_op,
            SendOp.start,
            Callbacks.of(callback, on_success, on_exception),
            self.settings.send_timeout if timeout is None else timeout,
        )

    def send_batch_async(
        self,
        msgs: Sequence[Message],
        callback: SendCallback | None = None,
        *,
        on_success: OnSuccess | None = None,
        on_exception: OnException | None = None,
        timeout: float | None = None,
    ) -> SendFuture:
        """``send_batch`` as an async send (retries as ``send_async``)."""
        return self._async.start(
            self._prepare_batch,
            msgs,
            self._async_op,
            SendOp.start,
            Callbacks.of(callback, on_success, on_exception),
            self.settings.send_timeout if timeout is None else timeout,
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
    ) -> SendFuture:
        """``send(msg, mq, SendCallback)``: failed attempts are retried on the same queue, as
        Java's async sends without publish info are (``onExceptionImpl`` keeps the broker)."""

        async def run(out: Outgoing, started: float, timeout: float) -> SendResult:
            return await self._send_selected_async(out, queue, started, timeout)

        return self._async.start(
            self._prepare,
            msg,
            self._async_op,
            lambda op: op.run_coroutine(run(op.out, op.started, op.timeout)),
            Callbacks.of(callback, on_success, on_exception),
            self.settings.send_timeout if timeout is None else timeout,
        )

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
    ) -> SendFuture:
        """``send(msg, selector, arg, SendCallback)``: the selector picks the queue once; failed
        attempts are retried on that queue."""

        async def run(out: Outgoing, started: float, timeout: float) -> SendResult:
            info = await self.publishing.publish_info(out.topic, started + timeout)
            queue = selector(list(info.queues), msg, arg)
            if not isinstance(queue, MessageQueue):
                raise MQClientError(f"the queue selector returned {queue!r}, not a MessageQueue")
            return await self._send_selected_async(out, queue, started, timeout)

        return self._async.start(
            self._prepare,
            msg,
            self._async_op,
            lambda op: op.run_coroutine(run(op.out, op.started, op.timeout)),
            Callbacks.of(callback, on_success, on_exception),
            self.settings.send_timeout if timeout is None else timeout,
        )

    async def wait_for_async_capacity(self, timeout: float | None = None) -> bool:
        """Wait until an async send started now would go out at once (False after ``timeout``):
        back-pressure for a loop that produces faster than the brokers answer."""
        return await self.async_budget.wait_for_room(timeout)

    @property
    def async_inflight(self) -> int:
        """Async sends holding an in-flight slot."""
        return self.async_budget.count

    async def _send_selected_async(
        self, out: Outgoing, queue: MessageQueue, started: float, timeout: float
    ) -> SendResult:
        """One queue, up to ``retry_times_when_send_async_failed`` retries on it, fault items updated."""
        if queue.topic != out.topic:
            raise MessageInvalidError(f"the selected queue's topic {queue.topic!r} is not the message's {out.topic!r}")
        return await send_to_queue_with_retries(
            out,
            queue,
            self._send_kernel,
            self.fault,
            self.clock,
            self.settings.retry_times_when_send_async_failed,
            started,
            timeout,
            self.master_watch,
        )
