"""Running a server process: one event loop (uvloop when installed), stop on SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import click

from ledgermq.aio.loops import new_event_loop
from ledgermq.config import parse_properties
from ledgermq.errors import LedgerError
from ledgermq.util.long_lived import freeze_long_lived

log = logging.getLogger(__name__)


# The store's reput, flush and clean threads are CPU-bound in bursts; with CPython's default
# 5 ms switch interval the event-loop thread waits up to 5 ms for the GIL after every socket
# call, which throttled HA catch-up to ~15 MB/s. 0.5 ms keeps I/O responsive (measured
# in-process: 14 -> 38 MB/s at 1 ms, 63 MB/s at 0.2 ms).
GIL_SWITCH_INTERVAL_S = 0.0005


def serve(start: Callable[[], Awaitable[None]], stop: Callable[[], Awaitable[None]]) -> None:
    """Start, wait for a stop signal, stop; exceptions at start-up become a clean exit 1.
    ``start`` must undo its own partial start (BrokerApp.start does): ``stop`` is not
    called after a failed start."""
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)

    async def main() -> None:
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, done.set)
        try:
            await start()
        except (OSError, LedgerError) as exc:  # one line (StartupError names cause and fix), exit 1
            raise click.ClickException(str(exc)) from None
        freeze_long_lived()  # start-up's objects out of every later full collection (util/long_lived.py)
        try:
            await done.wait()
        finally:
            await stop()

    loop = new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def read_properties(path: Path | None) -> dict[str, str]:
    if path is None:
        return {}
    try:
        return parse_properties(path.read_text())
    except OSError as exc:
        raise click.ClickException(f"cannot read {path}: {exc}") from exc
