"""Errors nobody awaited: exceptions that end a thread, or that reach an asyncio loop's
exception handler (a callback that raised, a task whose exception was never retrieved).

Left alone, such an error is a line on stderr and the test that caused it still passes, so
a background loop that died or a reply that was never sent goes unnoticed. The autouse
fixture in ``tests/conftest.py`` collects them while a test runs and fails the test at
teardown, listing each one with its traceback.

A test that provokes such errors on purpose says so, with a reason::

    @pytest.mark.allow_background_errors(ConnectionResetError, reason="the peer is killed mid-write")

Only the listed exception types (and their subclasses) are let through; anything else still
fails the test. A test that wants to check the errors it provoked takes the
``background_errors`` fixture and reads ``.allowed``.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

try:  # the client's and the CLI's loop; its handler is looked up on the Python subclass
    import uvloop
except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
    uvloop = None  # type: ignore[assignment]

MARKER = "allow_background_errors"


@dataclass(frozen=True)
class BackgroundError:
    """One error that reached a thread's excepthook or a loop's exception handler."""

    where: str
    exception: BaseException

    def describe(self) -> str:
        tb = "".join(traceback.format_exception(self.exception)).rstrip()
        return f"{self.where}:\n{tb}"


@dataclass
class BackgroundErrors:
    """What one test's background threads and loops raised, split by its allow-list."""

    allow: tuple[type[BaseException], ...] = ()
    unexpected: list[BackgroundError] = field(default_factory=list)
    allowed: list[BackgroundError] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, where: str, exception: BaseException) -> None:
        error = BackgroundError(where, exception)
        with self._lock:
            (self.allowed if isinstance(exception, self.allow) else self.unexpected).append(error)

    def report(self) -> str:
        with self._lock:
            errors = list(self.unexpected)
        listed = "\n\n".join(e.describe() for e in errors)
        return (
            f"{len(errors)} exception(s) raised in background threads or asyncio tasks/callbacks "
            f"(mark the test with @pytest.mark.{MARKER}(ExcType, reason=...) if that is its point):\n\n{listed}"
        )


def allow_list(item: pytest.Item) -> tuple[type[BaseException], ...]:
    """The exception types the test's ``allow_background_errors`` markers let through."""
    allowed: list[type[BaseException]] = []
    for mark in item.iter_markers(MARKER):
        if not mark.kwargs.get("reason"):
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{MARKER} needs a reason=...")
        if not mark.args or not all(isinstance(a, type) and issubclass(a, BaseException) for a in mark.args):
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{MARKER} takes exception types")
        allowed.extend(mark.args)
    return tuple(allowed)


@contextmanager
def collecting(errors: BackgroundErrors) -> Iterator[BackgroundErrors]:
    """Route thread and loop errors into ``errors`` while the block runs.

    The loop hook replaces ``default_exception_handler`` on the loop classes (asyncio's
    and uvloop's), so it covers loops the test makes itself (``asyncio.run``, the sync
    facade's loop thread). Contexts without an exception (such as "Task was destroyed but
    it is pending!") still go to the original handler, which logs them.
    """
    classes: list[Any] = [asyncio.base_events.BaseEventLoop]
    if uvloop is not None:
        classes.append(uvloop.Loop)
    originals = {cls: cls.__dict__.get("default_exception_handler") for cls in classes}
    previous_hook = threading.excepthook

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is None or isinstance(args.exc_value, SystemExit):
            previous_hook(args)
            return
        name = args.thread.name if args.thread is not None else "<unknown>"
        errors.record(f"thread {name!r}", args.exc_value)

    def make_loop_handler(cls: Any) -> Any:
        original = cls.default_exception_handler

        def loop_handler(loop: Any, context: dict[str, Any]) -> None:
            exception = context.get("exception")
            if not isinstance(exception, BaseException):
                original(loop, context)
                return
            errors.record(f"{type(loop).__name__}: {context.get('message', 'an error')}", exception)

        return loop_handler

    gc.collect()  # what earlier tests left for the collector is reported (logged) as before, not here
    threading.excepthook = thread_hook
    for cls in classes:
        cls.default_exception_handler = make_loop_handler(cls)
    try:
        yield errors
        gc.collect()  # tasks and futures report unretrieved exceptions when they are freed
    finally:
        threading.excepthook = previous_hook
        for cls, original in originals.items():
            if original is None:
                del cls.default_exception_handler
            else:
                cls.default_exception_handler = original
