"""Event loops: uvloop when it is installed, and closing a loop without leaving work behind.

Servers, benches, the Spark source and the client's blocking facade all make their own
loops; this is where they all get them, so every process runs the same loop
implementation and a loop is always closed the same careful way.
"""

from __future__ import annotations

import asyncio


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new loop, uvloop's when installed (a dependency on Linux), else asyncio's."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is left on ``loop``, let it finish, shut async generators down, close it."""
    try:
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()
