"""A blocking facade over the asyncio client, for scripts and threaded programs.

Every facade object runs its asyncio counterpart on one shared event loop (uvloop when
installed) in a background thread, ``ledgermq-sync-loop``. The thread starts with the
first facade object and stops when the last one is shut down (the loop's tasks cancelled,
async generators and the default executor closed, the thread joined). Calls may come from
any number of threads at once; each blocks its caller until the loop has the answer, and
raises the same exceptions the asyncio call raises.

Callbacks given to the facade (``SyncProducer.send_async``) are plain functions run on a
small thread pool shared by the facade (``ledgermq-sync-callback``), never on the loop
thread, so they may call blocking facade methods themselves. A blocking call made on the
loop thread (from an asyncio callback of your own) would deadlock and raises RuntimeError.

``SyncAdmin`` wraps every public coroutine method of ``AdminClient`` through the
``blocking`` descriptor, which keeps each method's signature for type checkers (``on_loop``
does the same for plain methods, run on the loop thread because they touch the client's
state). ``SyncLitePullConsumer`` and ``SyncPushConsumer`` wrap the consumers the same way;
a push consumer's plain listener runs on the consumer's own worker pool (its
``consume_thread_max`` threads), and queue-change listeners of the lite pull consumer on
the facade's callback threads.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import functools
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from types import TracebackType
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from ledgermq.admin.client import AdminClient
from ledgermq.client.consumer.common import MessageSelector
from ledgermq.client.errors import ClientStateError
from ledgermq.client.lite_pull.consumer import LitePullConsumer
from ledgermq.client.message import Message, SendResult
from ledgermq.client.producer.async_send import Callbacks, SendCallback
from ledgermq.client.producer.producer import Producer
from ledgermq.client.push.consume_service import Listener
from ledgermq.client.push.consumer import PushConsumer
from ledgermq.protocol.admin_body import MessageQueue

__all__ = [
    "SyncAdmin",
    "SyncLitePullConsumer",
    "SyncProducer",
    "SyncPushConsumer",
    "blocking",
    "on_loop",
    "shutdown_all",
]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
CALLBACK_THREADS = 4
STOP_TIMEOUT = 30.0


def _new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.new_event_loop()


_callback_thread = threading.local()


def _mark_callback_thread() -> None:
    _callback_thread.active = True


class LoopThread:
    """One event loop on a daemon thread, plus the pool that runs user callbacks."""

    def __init__(self) -> None:
        self.loop = _new_event_loop()
        self.callbacks = concurrent.futures.ThreadPoolExecutor(
            CALLBACK_THREADS, thread_name_prefix="ledgermq-sync-callback", initializer=_mark_callback_thread
        )
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._main, name="ledgermq-sync-loop", daemon=True)
        self.thread.start()
        self._ready.wait()

    def _main(self) -> None:
        loop = self.loop
        asyncio.set_event_loop(loop)
        loop.call_soon(self._ready.set)
        try:
            loop.run_forever()
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            if tasks:
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()

    @property
    def in_loop_thread(self) -> bool:
        return threading.get_ident() == self.thread.ident

    def run(self, coro: Coroutine[Any, Any, R], timeout: float | None = None) -> R:
        """Run ``coro`` on the loop and block for its result (cancelled if the wait is interrupted)."""
        if self.in_loop_thread:
            coro.close()
            raise RuntimeError("a blocking ledgermq call on the facade's own event-loop thread would deadlock")
        try:
            fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        except RuntimeError:  # the loop is closed
            coro.close()
            raise
        try:
            return fut.result(timeout)
        except BaseException:
            fut.cancel()  # a timeout or KeyboardInterrupt here must not leave the call running
            raise

    def call(self, fn: Callable[[], R]) -> R:
        """Run a plain function on the loop thread (objects that belong to the loop are made
        there); directly when already on it."""
        if self.in_loop_thread:
            return fn()

        async def wrapper() -> R:
            return fn()

        return self.run(wrapper())

    def in_pool(self, fn: Callable[..., object]) -> Callable[..., Awaitable[None]]:
        """An async function the loop can await that runs ``fn`` on the callback threads."""
        pool = self.callbacks

        async def call(*args: Any) -> None:
            await asyncio.get_running_loop().run_in_executor(pool, functools.partial(fn, *args))

        return call

    def stop(self) -> None:
        if self.in_loop_thread:
            raise RuntimeError("the facade's event loop cannot be stopped from its own thread")
        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(STOP_TIMEOUT)
        # From a callback thread, do not wait for the pool (that thread is one of its workers).
        self.callbacks.shutdown(wait=not getattr(_callback_thread, "active", False))


_lock = threading.Lock()
_shared: LoopThread | None = None
_users = 0


def _acquire_loop() -> LoopThread:
    global _shared, _users
    with _lock:
        if _shared is None:
            _shared = LoopThread()
        _users += 1
        return _shared


def _release_loop(lt: LoopThread) -> None:
    global _shared, _users
    with _lock:
        if lt is not _shared:
            return
        _users -= 1
        if _users > 0:
            return
        _shared = None
        lt.stop()


def shutdown_all() -> None:
    """Stop the shared loop thread now, whatever still uses it (also run at interpreter exit)."""
    global _shared, _users
    with _lock:
        lt, _shared, _users = _shared, None, 0
    if lt is not None and not lt.in_loop_thread:
        lt.stop()


atexit.register(shutdown_all)


class _Facade(Generic[T]):
    """What ``blocking`` needs of its owner: the asyncio object and the loop it lives on."""

    _target: T
    _loop: LoopThread

    def _run(self, coro: Coroutine[Any, Any, R]) -> R:
        return self._loop.run(coro)

    def _call(self, fn: Callable[[], R]) -> R:
        return self._loop.call(fn)


class blocking(Generic[T, P, R]):
    """``name = blocking(AsyncClass.name)`` in a ``_Facade[AsyncClass]``: the blocking method,
    same parameters, same result, run on the facade's loop."""

    def __init__(self, fn: Callable[Concatenate[T, P], Awaitable[R]]) -> None:
        self.fn = fn
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", "method")

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> blocking[T, P, R]: ...

    @overload
    def __get__(self, obj: _Facade[T], owner: type[Any]) -> Callable[P, R]: ...

    def __get__(self, obj: _Facade[T] | None, owner: type[Any]) -> blocking[T, P, R] | Callable[P, R]:
        if obj is None:
            return self
        fn = self.fn
        facade = obj

        @functools.wraps(fn)
        def method(*args: P.args, **kwargs: P.kwargs) -> R:
            async def call() -> R:
                return await fn(facade._target, *args, **kwargs)

            return facade._run(call())

        return method


class on_loop(Generic[T, P, R]):
    """``name = on_loop(AsyncClass.name)`` for a plain (non-coroutine) method: run on the
    facade's loop thread, same parameters, same result."""

    def __init__(self, fn: Callable[Concatenate[T, P], R]) -> None:
        self.fn = fn
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", "method")

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> on_loop[T, P, R]: ...

    @overload
    def __get__(self, obj: _Facade[T], owner: type[Any]) -> Callable[P, R]: ...

    def __get__(self, obj: _Facade[T] | None, owner: type[Any]) -> on_loop[T, P, R] | Callable[P, R]:
        if obj is None:
            return self
        fn = self.fn
        facade = obj

        @functools.wraps(fn)
        def method(*args: P.args, **kwargs: P.kwargs) -> R:
            return facade._call(lambda: fn(facade._target, *args, **kwargs))

        return method


class _Closable(_Facade[T]):
    """Start/shutdown bookkeeping shared by the facade classes."""

    def _attach(self, make: Callable[[], T]) -> None:
        self._loop = _acquire_loop()
        self._closed = False
        self._close_lock = threading.Lock()
        try:
            self._target = self._loop.call(make)
        except BaseException:
            _release_loop(self._loop)
            raise

    def _run(self, coro: Coroutine[Any, Any, R]) -> R:
        if self._closed:
            coro.close()
            raise ClientStateError(f"this {type(self).__name__} is shut down")
        return self._loop.run(coro)

    def _call(self, fn: Callable[[], R]) -> R:
        if self._closed:
            raise ClientStateError(f"this {type(self).__name__} is shut down")
        return self._loop.call(fn)

    def _close(self, coro: Coroutine[Any, Any, None]) -> None:
        with self._close_lock:
            if self._closed:
                coro.close()
                return
            self._closed = True
        try:
            self._loop.run(coro)
        finally:
            _release_loop(self._loop)


class SyncProducer(_Closable[Producer]):
    """``with SyncProducer("pg", "127.0.0.1:9876") as p: p.send(Message("T", b"hi"))``.

    Options are ``Producer``'s (``send_timeout``, ``retry_times``, ...)."""

    def __init__(self, group: str, namesrv_addrs: str | Sequence[str], **options: Any) -> None:
        self._attach(lambda: Producer(group, namesrv_addrs, **options))

    @property
    def producer(self) -> Producer:
        """The asyncio producer underneath (use it only on the facade's loop)."""
        return self._target

    def start(self) -> None:
        self._run(self._target.start())

    def shutdown(self) -> None:
        """Shut the producer down (async sends in flight finish first); the last facade
        object to close stops the loop thread. Idempotent."""
        self._close(self._target.shutdown())

    def __enter__(self) -> SyncProducer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()

    send = blocking(Producer.send)
    send_oneway = blocking(Producer.send_oneway)
    send_batch = blocking(Producer.send_batch)
    send_to_queue = blocking(Producer.send_to_queue)
    send_orderly = blocking(Producer.send_orderly)
    fetch_publish_queues = blocking(Producer.fetch_publish_queues)

    def send_async(
        self,
        msg: Message,
        callback: SendCallback | None = None,
        *,
        on_success: Callable[[SendResult], object] | None = None,
        on_exception: Callable[[Exception], object] | None = None,
        timeout: float | None = None,
    ) -> concurrent.futures.Future[SendResult]:
        """Start an async send; the returned future completes after the callback has run.

        Callbacks run on the facade's callback threads. While the producer's in-flight
        budget is full this call blocks (back-pressure, as Java's semaphore does), for at
        most the send timeout, which the wait counts against."""
        callbacks = Callbacks.of(callback, on_success, on_exception)  # the async producer's own checks
        if callbacks is not None:
            on_success, on_exception = callbacks.on_success, callbacks.on_exception
        producer = self._target
        pool = self._loop.callbacks
        limit = producer.send_timeout if timeout is None else timeout

        def in_pool(fn: Callable[[Any], object] | None) -> Callable[[Any], Awaitable[None]] | None:
            if fn is None:
                return None

            async def call(arg: Any) -> None:
                await asyncio.get_running_loop().run_in_executor(pool, fn, arg)

            return call

        outer: concurrent.futures.Future[SendResult] = concurrent.futures.Future()

        def copy(f: asyncio.Future[SendResult]) -> None:
            if f.cancelled():
                outer.cancel()
            elif (exc := f.exception()) is not None:
                if not outer.cancelled():
                    outer.set_exception(exc)
            elif not outer.cancelled():
                outer.set_result(f.result())

        async def admit_and_start() -> None:
            loop = asyncio.get_running_loop()
            begin = loop.time()
            await producer.wait_for_async_capacity(limit)
            inner = producer.send_async(
                msg,
                on_success=in_pool(on_success),
                on_exception=in_pool(on_exception),
                timeout=max(limit - (loop.time() - begin), 0.0),
            )
            inner.add_done_callback(copy)

            def cancel_inner(f: concurrent.futures.Future[SendResult]) -> None:
                if f.cancelled() and not loop.is_closed():
                    loop.call_soon_threadsafe(inner.cancel)

            outer.add_done_callback(cancel_inner)

        self._run(admit_and_start())
        return outer


class SyncAdmin(_Closable[AdminClient]):
    """``with SyncAdmin("127.0.0.1:9876") as admin: admin.topic_list()``: every
    ``AdminClient`` call, blocking."""

    def __init__(self, namesrv_addrs: str | Sequence[str], **options: Any) -> None:
        self._attach(lambda: AdminClient(namesrv_addrs, **options))

    @property
    def admin(self) -> AdminClient:
        return self._target

    def close(self) -> None:
        """Close the connections; the last facade object to close stops the loop thread. Idempotent."""
        self._close(self._target.close())

    shutdown = close

    def __enter__(self) -> SyncAdmin:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def create_topic_in_cluster(self, cluster: str, topic: str, **options: Any) -> list[str]:
        """``AdminClient.create_topic_in_cluster`` (written out: ``**options`` defeats ``blocking``'s typing)."""
        return self._run(self._target.create_topic_in_cluster(cluster, topic, **options))

    invoke = blocking(AdminClient.invoke)
    invoke_namesrv = blocking(AdminClient.invoke_namesrv)
    route = blocking(AdminClient.route)
    cluster_info = blocking(AdminClient.cluster_info)
    topic_list = blocking(AdminClient.topic_list)
    topics_by_cluster = blocking(AdminClient.topics_by_cluster)
    put_order_conf = blocking(AdminClient.put_order_conf)
    create_topic = blocking(AdminClient.create_topic)
    topic_stats = blocking(AdminClient.topic_stats)
    examine_topic_stats = blocking(AdminClient.examine_topic_stats)
    consume_stats = blocking(AdminClient.consume_stats)
    examine_consume_stats = blocking(AdminClient.examine_consume_stats)
    consumer_connection = blocking(AdminClient.consumer_connection)
    examine_consumer_connection = blocking(AdminClient.examine_consumer_connection)
    consumer_groups = blocking(AdminClient.consumer_groups)
    view_message = blocking(AdminClient.view_message)
    view_message_by_id = blocking(AdminClient.view_message_by_id)
    query_message = blocking(AdminClient.query_message)
    query_by_key = blocking(AdminClient.query_by_key)
    broker_runtime_info = blocking(AdminClient.broker_runtime_info)
    ha_status = blocking(AdminClient.ha_status)
    dledger_status = blocking(AdminClient.dledger_status)
    dledger_transfer_leader = blocking(AdminClient.dledger_transfer_leader)


class SyncLitePullConsumer(_Closable[LitePullConsumer]):
    """``with SyncLitePullConsumer("cg", "127.0.0.1:9876") as c: ...`` after ``c.subscribe("T")``
    (or ``assign``) and ``start``; then ``c.poll(1.0)``. Options are ``LitePullConsumer``'s."""

    def __init__(self, group: str, namesrv_addrs: str | Sequence[str], **options: Any) -> None:
        self._attach(lambda: LitePullConsumer(group, namesrv_addrs, **options))

    @property
    def consumer(self) -> LitePullConsumer:
        """The asyncio consumer underneath (use it only on the facade's loop)."""
        return self._target

    def start(self) -> None:
        self._run(self._target.start())

    def shutdown(self) -> None:
        """Shut the consumer down (commits and persists offsets); the last facade object to
        close stops the loop thread. Idempotent."""
        self._close(self._target.shutdown())

    def __enter__(self) -> SyncLitePullConsumer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()

    def subscribe(
        self,
        topic: str,
        expression: str | MessageSelector = "*",
        listener: Callable[[str, set[MessageQueue], set[MessageQueue]], object] | None = None,
        *,
        expression_type: str = "TAG",
    ) -> None:
        """``LitePullConsumer.subscribe``; ``listener(topic, mq_all, mq_divided)`` runs on the
        facade's callback threads."""
        wrapped = None if listener is None else self._loop.in_pool(listener)
        self._call(lambda: self._target.subscribe(topic, expression, wrapped, expression_type=expression_type))

    def register_topic_message_queue_change_listener(
        self, topic: str, listener: Callable[[str, set[MessageQueue]], object]
    ) -> None:
        """``listener(topic, queues)`` on the facade's callback threads when the topic's queues change."""
        wrapped = self._loop.in_pool(listener)
        self._call(lambda: self._target.register_topic_message_queue_change_listener(topic, wrapped))

    unsubscribe = on_loop(LitePullConsumer.unsubscribe)
    assign = on_loop(LitePullConsumer.assign)
    set_sub_expression_for_assign = on_loop(LitePullConsumer.set_sub_expression_for_assign)
    assignment = on_loop(LitePullConsumer.assignment)
    pause = on_loop(LitePullConsumer.pause)
    resume = on_loop(LitePullConsumer.resume)
    commit_sync = on_loop(LitePullConsumer.commit_sync)
    poll = blocking(LitePullConsumer.poll)
    seek = blocking(LitePullConsumer.seek)
    seek_to_begin = blocking(LitePullConsumer.seek_to_begin)
    seek_to_end = blocking(LitePullConsumer.seek_to_end)
    fetch_message_queues = blocking(LitePullConsumer.fetch_message_queues)
    offset_for_timestamp = blocking(LitePullConsumer.offset_for_timestamp)
    committed = blocking(LitePullConsumer.committed)
    commit = blocking(LitePullConsumer.commit)


class SyncPushConsumer(_Closable[PushConsumer]):
    """``c = SyncPushConsumer("cg", "127.0.0.1:9876"); c.subscribe("T"); c.register_listener(fn);
    c.start()``. A plain listener ``fn(msgs, context) -> ConsumeConcurrentlyStatus`` runs on the
    consumer's worker pool. Options are ``PushConsumer``'s."""

    def __init__(self, group: str, namesrv_addrs: str | Sequence[str], **options: Any) -> None:
        self._attach(lambda: PushConsumer(group, namesrv_addrs, **options))

    @property
    def consumer(self) -> PushConsumer:
        """The asyncio consumer underneath (use it only on the facade's loop)."""
        return self._target

    def start(self) -> None:
        self._run(self._target.start())

    def shutdown(self) -> None:
        """Shut the consumer down (persists offsets, leaves the group); the last facade object
        to close stops the loop thread. Idempotent."""
        self._close(self._target.shutdown())

    def __enter__(self) -> SyncPushConsumer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()

    def register_listener(self, fn: Listener) -> None:
        """``fn(msgs, context) -> ConsumeConcurrentlyStatus``, run on the consumer's worker pool."""
        self._call(lambda: self._target.register_listener(fn))

    def register_orderly_listener(self, fn: Listener) -> None:
        """``fn(msgs, context) -> ConsumeOrderlyStatus``, one queue's batches in offset order."""
        self._call(lambda: self._target.register_orderly_listener(fn))

    subscribe = on_loop(PushConsumer.subscribe)
    unsubscribe = on_loop(PushConsumer.unsubscribe)
    suspend = on_loop(PushConsumer.suspend)
    resume = on_loop(PushConsumer.resume)


from ledgermq.client.sync_transaction import SyncTransactionProducer  # noqa: E402  (it builds on the above)

__all__ += ["SyncTransactionProducer"]
