"""The loop thread the blocking facades run on, and the descriptors that wrap an asyncio
object's methods as blocking ones. Facades elsewhere (``ledgermq.admin.sync``) build on
``Closable``, ``blocking`` and ``on_loop`` here; nothing here knows a facade.

Every facade object runs its asyncio counterpart on one shared event loop (uvloop when
installed) in a background thread, ``ledgermq-sync-loop``. The thread starts with the
first facade object and stops when the last one is shut down (the loop's tasks cancelled,
async generators and the default executor closed, the thread joined). Calls may come from
any number of threads at once; each blocks its caller until the loop has the answer, and
raises the same exceptions the asyncio call raises. A blocking call made on the loop
thread (from an asyncio callback of your own) would deadlock and raises RuntimeError.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import functools
import threading
from collections.abc import Awaitable, Callable, Coroutine
from types import TracebackType
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, Self, TypeVar, overload

from ledgermq.aio.loops import new_event_loop
from ledgermq.client.errors import ClientStateError

__all__ = [
    "CALLBACK_THREADS",
    "STOP_TIMEOUT",
    "Closable",
    "LoopThread",
    "blocking",
    "on_callback_thread",
    "on_loop",
    "shutdown_all",
]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
CALLBACK_THREADS = 4
STOP_TIMEOUT = 30.0


_callback_thread = threading.local()


def _mark_callback_thread() -> None:
    _callback_thread.active = True


def on_callback_thread() -> bool:
    """Whether the calling thread is one of the facade's callback threads."""
    return getattr(_callback_thread, "active", False)


class LoopThread:
    """One event loop on a daemon thread, plus the pool that runs user callbacks."""

    def __init__(self) -> None:
        self.loop = new_event_loop()
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
        self.callbacks.shutdown(wait=not on_callback_thread())


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


class Closable(_Facade[T]):
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

    def _close(self, coro: Coroutine[Any, Any, None], then: Callable[[], None] | None = None) -> None:
        """Run ``coro`` (the asyncio object's shutdown), then ``then`` on this thread, then
        let the loop thread go; once only."""
        with self._close_lock:
            if self._closed:
                coro.close()
                return
            self._closed = True
        try:
            self._loop.run(coro)
            if then is not None:
                then()
        finally:
            _release_loop(self._loop)


class _StartStop(Protocol):
    async def start(self) -> None: ...

    async def shutdown(self) -> None: ...


S = TypeVar("S", bound=_StartStop)


class Lifecycle(Closable[S]):
    """``start``/``shutdown`` and the ``with`` statement of a facade whose asyncio object
    has ``start()`` and ``shutdown()`` coroutines (producers and consumers)."""

    def start(self) -> None:
        self._run(self._target.start())

    def shutdown(self) -> None:
        """Shut the object underneath down (a producer's async sends in flight finish
        first); the last facade object to close stops the loop thread. Idempotent."""
        self._close(self._target.shutdown())

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()
