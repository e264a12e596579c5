"""Running a server process: one event loop (uvloop when installed), stop on SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import click

from ledgermq.config import parse_properties
from ledgermq.errors import ConfigError

log = logging.getLogger(__name__)


def new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.new_event_loop()


def serve(start: Callable[[], Awaitable[None]], stop: Callable[[], Awaitable[None]]) -> None:
    """Start, wait for a stop signal, stop; exceptions at start-up become a clean exit 1."""

    async def main() -> None:
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, done.set)
        try:
            await start()
        except (OSError, ConfigError) as exc:
            raise click.ClickException(str(exc)) from exc
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
